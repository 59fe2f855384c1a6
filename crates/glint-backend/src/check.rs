//! One validation function per op, called by every backend before it
//! computes: types, shapes and aliasing, so both backends accept and refuse
//! exactly the same calls. Each failure is a [`BackendError::Shape`] or
//! [`BackendError::Type`] naming the op, the operand and the values.
//!
//! Where the two backends used to differ, the stricter rule won: rope
//! params need an even `head_dim`, `n_rot > 0` and positive frequencies;
//! `argmax` needs non-empty rows; a broadcast `b` is `[n]` (not any shape
//! of `n` elements); attention's mask is `[n_kv, m]` even when `n_kv` is 0;
//! no output may be an input. One rule
//! went the other way, because a test pins it: a matrix operand `[n, m]`
//! may be any shape whose leading dims multiply to `n` (`[head_dim,
//! n_head, m]` is `[head_dim * n_head, m]`, see [`cols`]); the checks
//! return that `m` and the kernels index flat buffers, so the wgpu backend
//! now takes such shapes too. Limits of one backend's kernels stay in that
//! backend: the wgpu one's binding sizes, its attention's head_dim cap and
//! single cache type (the cpu backend takes `-ctk f32 -ctv f16`), and even
//! rows of its packed f16 caches.

use glint_quant::Support;

use crate::{AttnParams, BackendError, GgmlType, Result, RopeParams, Tensor, TensorDesc};

fn shape(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

/// Operand `what` of `op` must have type `ty`.
fn ty<T: Tensor + ?Sized>(op: &'static str, what: &'static str, t: &T, ty: GgmlType) -> Result<()> {
    let got = t.desc().ty;
    if got != ty {
        return Err(BackendError::Type { op, ty: got, what });
    }
    Ok(())
}

/// A weight type glint computes with (`Support::Compute` in the type table).
fn compute_ty<T: Tensor + ?Sized>(op: &'static str, what: &'static str, t: &T) -> Result<()> {
    let got = t.desc().ty;
    if got.support() != Support::Compute {
        return Err(BackendError::Type { op, ty: got, what });
    }
    Ok(())
}

/// An F32, F16, Q8_0 or Q4_0 cache (a quantized one in whole blocks of 32
/// per row).
fn cache_ty<T: Tensor + ?Sized>(op: &'static str, what: &'static str, t: &T) -> Result<()> {
    match t.desc().ty {
        GgmlType::F32 | GgmlType::F16 => Ok(()),
        GgmlType::Q8_0 | GgmlType::Q4_0 if t.desc().ne[0].is_multiple_of(QK_CACHE) => Ok(()),
        GgmlType::Q8_0 | GgmlType::Q4_0 => Err(shape(
            op,
            format!(
                "a {} {what} needs rows of whole blocks of {QK_CACHE}, got {}",
                t.desc().ty,
                t.desc().ne[0]
            ),
        )),
        got => Err(BackendError::Type { op, ty: got, what }),
    }
}

/// Elements per block of the quantized cache types (Q8_0, Q4_0).
pub const QK_CACHE: usize = 32;

/// A quantized cache's heads must be whole blocks, so a head is dequantized,
/// dotted or rotated without its neighbours.
fn head_blocks<T: Tensor + ?Sized>(
    op: &'static str,
    what: &'static str,
    t: &T,
    head_dim: usize,
) -> Result<()> {
    let ty = t.desc().ty;
    if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && !head_dim.is_multiple_of(QK_CACHE) {
        return Err(shape(
            op,
            format!("a {ty} {what} needs head_dim a multiple of {QK_CACHE}, got {head_dim}"),
        ));
    }
    Ok(())
}

/// View `d` as a matrix `[n, m]`: its leading dims must multiply to exactly
/// `n` (so `[head_dim, n_head, m]` is also `[head_dim * n_head, m]`, the
/// reshape ggml gets for free). Returns `m`.
pub fn cols(op: &'static str, what: &str, d: &TensorDesc, n: usize) -> Result<usize> {
    let mut lead = 1usize;
    for i in 0..4 {
        if lead == n {
            return Ok(d.ne[i..].iter().product());
        }
        lead = lead.saturating_mul(d.ne[i]);
    }
    if lead == n {
        return Ok(1);
    }
    Err(shape(
        op,
        format!(
            "{what} `{}` has ne {:?}: leading dims do not make rows of {n}",
            d.label, d.ne
        ),
    ))
}

/// `d` is a matrix `[n, m]` in the sense of [`cols`].
fn matrix(op: &'static str, what: &str, d: &TensorDesc, n: usize, m: usize) -> Result<()> {
    if cols(op, what, d, n)? != m {
        return Err(shape(
            op,
            format!(
                "{what} `{}` has ne {:?}, expected [{n}, {m}]",
                d.label, d.ne
            ),
        ));
    }
    Ok(())
}

/// `d` holds exactly `n` elements (a vector of ids, positions, shifts).
fn len(op: &'static str, what: &str, d: &TensorDesc, n: usize) -> Result<()> {
    if d.n_elements() != n {
        return Err(shape(
            op,
            format!(
                "{what} `{}` has ne {:?} ({} elements), expected {n}",
                d.label,
                d.ne,
                d.n_elements()
            ),
        ));
    }
    Ok(())
}

/// `a` and `b` have the same shape.
fn same(op: &'static str, a: &TensorDesc, b: &TensorDesc) -> Result<()> {
    if a.ne != b.ne {
        return Err(shape(
            op,
            format!(
                "`{}` has ne {:?}, `{}` has ne {:?}",
                a.label, a.ne, b.label, b.ne
            ),
        ));
    }
    Ok(())
}

/// An op's output is not one of its inputs: a GPU cannot bind one buffer
/// as both, and the cpu backend's read lock would deadlock its write lock.
fn distinct<T: Tensor + ?Sized>(op: &'static str, out: &T, inputs: &[&T]) -> Result<()> {
    if inputs.iter().any(|i| std::ptr::eq(*i, out)) {
        return Err(shape(
            op,
            format!("output `{}` is also an input", out.desc().label),
        ));
    }
    Ok(())
}

/// f32 `x` and `out` of one shape, `out` not `x`.
fn f32_map<T: Tensor + ?Sized>(op: &'static str, x: &T, out: &T) -> Result<()> {
    ty(op, "x", x, GgmlType::F32)?;
    ty(op, "out", out, GgmlType::F32)?;
    same(op, x.desc(), out.desc())?;
    distinct(op, out, &[x])
}

/// [`crate::Backend::view`]: the desc of a view of `d` with shape `ne`,
/// which must be non-empty and need no more bytes than `d` has.
pub fn view(d: &TensorDesc, ne: [usize; 4]) -> Result<TensorDesc> {
    let v = TensorDesc { ne, ..d.clone() };
    if v.n_bytes() > d.n_bytes() || v.n_elements() == 0 {
        return Err(shape(
            "view",
            format!(
                "view {ne:?} of `{}` needs {} bytes, the tensor has {}",
                d.label,
                v.n_bytes(),
                d.n_bytes()
            ),
        ));
    }
    Ok(v)
}

/// [`crate::Backend::mul_mat`]: `w` any Compute type `[k, n]`, `x` F32
/// `[k, m]`, `out` F32 `[n, m]`. Returns `m`.
pub fn mul_mat<T: Tensor + ?Sized>(w: &T, x: &T, out: &T) -> Result<usize> {
    const OP: &str = "mul_mat";
    compute_ty(OP, "weight", w)?;
    ty(OP, "x", x, GgmlType::F32)?;
    ty(OP, "out", out, GgmlType::F32)?;
    distinct(OP, out, &[w, x])?;
    let (k, n) = (w.desc().ne[0], w.desc().n_rows());
    let m = cols(OP, "x", x.desc(), k)?;
    matrix(OP, "out", out.desc(), n, m)?;
    Ok(m)
}

/// [`crate::Backend::get_rows`]: `table` any Compute type `[k, n_rows]`,
/// `ids` I32 `[m]`, `out` F32 `[k, m]`.
pub fn get_rows<T: Tensor + ?Sized>(table: &T, ids: &T, out: &T) -> Result<()> {
    const OP: &str = "get_rows";
    compute_ty(OP, "table", table)?;
    ty(OP, "ids", ids, GgmlType::I32)?;
    ty(OP, "out", out, GgmlType::F32)?;
    distinct(OP, out, &[table, ids])?;
    let k = table.desc().ne[0];
    matrix(OP, "out", out.desc(), k, ids.desc().n_elements())
}

/// [`crate::Backend::rms_norm`]: `x`, `out` F32 `[n, m]`; `w` F32 `[n]`.
pub fn rms_norm<T: Tensor + ?Sized>(x: &T, w: Option<&T>, out: &T) -> Result<()> {
    const OP: &str = "rms_norm";
    f32_map(OP, x, out)?;
    if let Some(w) = w {
        ty(OP, "w", w, GgmlType::F32)?;
        len(OP, "w", w.desc(), x.desc().ne[0])?;
        distinct(OP, out, &[w])?;
    }
    Ok(())
}

/// `a`, `out` F32 `[n, m]`; `b` F32 `[n, m]` or `[n]`.
fn broadcast<T: Tensor + ?Sized>(op: &'static str, a: &T, b: &T, out: &T) -> Result<()> {
    ty(op, "a", a, GgmlType::F32)?;
    ty(op, "b", b, GgmlType::F32)?;
    ty(op, "out", out, GgmlType::F32)?;
    same(op, a.desc(), out.desc())?;
    let (ad, bd) = (a.desc(), b.desc());
    let n = ad.ne[0];
    if bd.ne != ad.ne && !(bd.ne[0] == n && bd.n_elements() == n) {
        return Err(shape(
            op,
            format!(
                "b `{}` {:?} is neither a's shape {:?} nor one row [{n}]",
                bd.label, bd.ne, ad.ne
            ),
        ));
    }
    distinct(op, out, &[a, b])
}

/// [`crate::Backend::add`]: `a`, `out` F32 `[n, m]`; `b` F32 `[n, m]` or `[n]`.
pub fn add<T: Tensor + ?Sized>(a: &T, b: &T, out: &T) -> Result<()> {
    broadcast("add", a, b, out)
}

/// [`crate::Backend::mul`]: as [`add`].
pub fn mul<T: Tensor + ?Sized>(a: &T, b: &T, out: &T) -> Result<()> {
    broadcast("mul", a, b, out)
}

/// [`crate::Backend::glu`]: `gate`, `up`, `out` F32, one shape.
pub fn glu<T: Tensor + ?Sized>(gate: &T, up: &T, out: &T) -> Result<()> {
    const OP: &str = "glu";
    same(OP, gate.desc(), up.desc())?;
    broadcast(OP, gate, up, out)
}

/// [`crate::Backend::scale`]: `x`, `out` F32, one shape.
pub fn scale<T: Tensor + ?Sized>(x: &T, out: &T) -> Result<()> {
    f32_map("scale", x, out)
}

/// [`crate::Backend::unary`]: `x`, `out` F32, one shape.
pub fn unary<T: Tensor + ?Sized>(x: &T, out: &T) -> Result<()> {
    f32_map("unary", x, out)
}

/// [`crate::Backend::softmax`]: `x`, `out` F32, one shape.
pub fn softmax<T: Tensor + ?Sized>(x: &T, out: &T) -> Result<()> {
    f32_map("softmax", x, out)
}

/// [`crate::Backend::argmax`]: `x` F32 `[n, m]` with `n > 0`; `out` I32 `[m]`.
pub fn argmax<T: Tensor + ?Sized>(x: &T, out: &T) -> Result<()> {
    const OP: &str = "argmax";
    ty(OP, "x", x, GgmlType::F32)?;
    ty(OP, "out", out, GgmlType::I32)?;
    distinct(OP, out, &[x])?;
    if x.desc().ne[0] == 0 {
        return Err(shape(
            OP,
            format!(
                "x `{}` has empty rows: ne {:?}",
                x.desc().label,
                x.desc().ne
            ),
        ));
    }
    len(OP, "out", out.desc(), x.desc().n_rows())
}

/// `kq_mask`: cells I32 `[w, n_rows]` with `2 <= w <= CELL_WORDS`; pos,
/// seqs I32 `[m]`; out F32 `[n_kv, m]` with `first_row + n_kv <= n_rows`;
/// a window of size > 0. Returns `(n_kv, m)`.
pub fn kq_mask<T: Tensor + ?Sized>(
    cells: &T,
    pos: &T,
    seqs: &T,
    p: &crate::KqMask,
    out: &T,
) -> Result<(usize, usize)> {
    const OP: &str = "kq_mask";
    ty(OP, "cells", cells, GgmlType::I32)?;
    ty(OP, "pos", pos, GgmlType::I32)?;
    ty(OP, "seqs", seqs, GgmlType::I32)?;
    ty(OP, "out", out, GgmlType::F32)?;
    distinct(OP, out, &[cells, pos, seqs])?;
    let n_kv = out.desc().ne[0];
    let m = out.desc().n_rows();
    matrix(OP, "out", out.desc(), n_kv, m)?;
    len(OP, "pos", pos.desc(), m)?;
    len(OP, "seqs", seqs.desc(), m)?;
    let w = cells.desc().ne[0];
    if !(2..=crate::CELL_WORDS).contains(&w) {
        return Err(shape(
            OP,
            format!("cells of {w} words (2 to {})", crate::CELL_WORDS),
        ));
    }
    let n_rows = cols(OP, "cells", cells.desc(), w)?;
    if p.first_row.checked_add(n_kv).is_none_or(|end| end > n_rows) {
        return Err(shape(
            OP,
            format!("cells {}..+{n_kv} of a copy of {n_rows} cells", p.first_row),
        ));
    }
    let n_swa = p.window.code().1;
    if p.window != crate::MaskWindow::None && (n_swa == 0 || n_swa > i32::MAX as u32) {
        return Err(shape(
            OP,
            format!("a sliding window of size {n_swa} (1 to {})", i32::MAX),
        ));
    }
    Ok((n_kv, m))
}

/// `top_k`: x F32 `[n, m]` with n > 0; out I32 `[1 + 2 cap, m]` with
/// `1 <= k <= cap`; returns cap.
pub fn top_k<T: Tensor + ?Sized>(x: &T, k: usize, out: &T) -> Result<usize> {
    const OP: &str = "top_k";
    ty(OP, "x", x, GgmlType::F32)?;
    ty(OP, "out", out, GgmlType::I32)?;
    distinct(OP, out, &[x])?;
    let (xd, od) = (x.desc(), out.desc());
    let rows = od.ne[0];
    let cap = rows.saturating_sub(1) / 2;
    if xd.ne[0] == 0 || k == 0 || k > cap || rows != 1 + 2 * cap {
        return Err(shape(
            OP,
            format!(
                "k {k} over x ne {:?} into out ne {:?}: rows of x must not be empty, \
                 out's rows 1 + 2 cap long with 1 <= k <= cap",
                xd.ne, od.ne
            ),
        ));
    }
    if od.n_rows() != xd.n_rows() {
        return Err(shape(
            OP,
            format!("{} rows of x but {} of out", xd.n_rows(), od.n_rows()),
        ));
    }
    Ok(cap)
}

/// The order-preserving key of a logit for [`top_k`](crate::Backend::top_k):
/// `f32::total_cmp`'s order as a `u32` (-0 below +0), every NaN above
/// `+inf`.
pub fn top_k_key(v: f32) -> u32 {
    let b = v.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        u32::MAX
    } else if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// RoPE params: `n_rot` even, `0 < n_rot <= head_dim`, `head_dim` even
/// (rotated pairs and copied pairs), `freq_base` and `freq_scale` > 0.
pub fn rope_params(op: &'static str, p: &RopeParams) -> Result<()> {
    let n_rot_ok = p.n_rot > 0 && p.n_rot.is_multiple_of(2) && p.n_rot <= p.head_dim;
    if !n_rot_ok || !p.head_dim.is_multiple_of(2) {
        return Err(shape(
            op,
            format!(
                "n_rot = {} and head_dim = {}: both even, 0 < n_rot <= head_dim",
                p.n_rot, p.head_dim
            ),
        ));
    }
    if !(p.freq_base > 0.0 && p.freq_scale > 0.0) {
        return Err(shape(
            op,
            format!(
                "freq_base = {} and freq_scale = {} must be > 0",
                p.freq_base, p.freq_scale
            ),
        ));
    }
    Ok(())
}

/// [`crate::Backend::rope`]: `x`, `out` F32 `[head_dim, n_head, m]`;
/// `pos` I32 `[m]`. Returns `m`.
pub fn rope<T: Tensor + ?Sized>(x: &T, pos: &T, p: &RopeParams, out: &T) -> Result<usize> {
    const OP: &str = "rope";
    rope_params(OP, p)?;
    ty(OP, "x", x, GgmlType::F32)?;
    ty(OP, "pos", pos, GgmlType::I32)?;
    ty(OP, "out", out, GgmlType::F32)?;
    same(OP, x.desc(), out.desc())?;
    distinct(OP, out, &[x, pos])?;
    let m = cols(OP, "x", x.desc(), p.head_dim * p.n_head)?;
    len(OP, "pos", pos.desc(), m)?;
    Ok(m)
}

/// [`crate::Backend::set_rows`]: `src` F32 `[n, m]`; `idx` I32 `[m]`;
/// `dst` F32, F16, Q8_0 or Q4_0 `[n, n_rows]` (rows quantized as ggml's cpu
/// backend quantizes them). Returns `m`.
pub fn set_rows<T: Tensor + ?Sized>(src: &T, idx: &T, dst: &T) -> Result<usize> {
    const OP: &str = "set_rows";
    ty(OP, "src", src, GgmlType::F32)?;
    ty(OP, "idx", idx, GgmlType::I32)?;
    cache_ty(OP, "dst", dst)?;
    distinct(OP, dst, &[src, idx])?;
    let m = cols(OP, "src", src.desc(), dst.desc().ne[0])?;
    len(OP, "idx", idx.desc(), m)?;
    Ok(m)
}

/// [`crate::Backend::attention`]: `q` F32 `[head_dim, n_head, m]`; `k`, `v`
/// F32, F16, Q8_0 or Q4_0 (each; quantized ones with `head_dim` a multiple
/// of 32) `[head_dim * n_head_kv, n_rows]` with
/// `kv_start + n_kv <= n_rows`; `mask` F32 `[n_kv, m]`; `out` F32
/// `[head_dim * n_head, m]`; `n_head` a multiple of `n_head_kv > 0`.
/// Returns `m`.
pub fn attention<T: Tensor + ?Sized>(
    [q, k, v, mask]: [&T; 4],
    p: &AttnParams,
    out: &T,
) -> Result<usize> {
    const OP: &str = "attention";
    ty(OP, "q", q, GgmlType::F32)?;
    cache_ty(OP, "k", k)?;
    cache_ty(OP, "v", v)?;
    ty(OP, "mask", mask, GgmlType::F32)?;
    ty(OP, "out", out, GgmlType::F32)?;
    distinct(OP, out, &[q, k, v, mask])?;
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    if nkv == 0 || nh % nkv != 0 || hd == 0 {
        return Err(shape(
            OP,
            format!(
                "n_head = {nh} must be a multiple of n_head_kv = {nkv} (> 0), head_dim = {hd} > 0"
            ),
        ));
    }
    let m = cols(OP, "q", q.desc(), hd * nh)?;
    matrix(OP, "out", out.desc(), hd * nh, m)?;
    let end = p.kv_start.checked_add(p.n_kv);
    for (what, t) in [("k", k), ("v", v)] {
        head_blocks(OP, what, t, hd)?;
        let rows = cols(OP, what, t.desc(), hd * nkv)?;
        if end.is_none_or(|e| e > rows) {
            return Err(shape(
                OP,
                format!(
                    "rows {}..{} of {what} `{}` asked; it has {rows}",
                    p.kv_start,
                    p.kv_start.saturating_add(p.n_kv),
                    t.desc().label
                ),
            ));
        }
    }
    len(OP, "mask", mask.desc(), p.n_kv * m)?;
    matrix(OP, "mask", mask.desc(), p.n_kv, m)?;
    Ok(m)
}

/// [`crate::Backend::attention_window`]: [`attention`]'s checks, and the
/// distant half's `q2`, `k2`, `mask_far` shaped and typed as `q`, `k`,
/// `mask`. Returns `m`.
pub fn attention_window<T: Tensor + ?Sized>(
    [q, k, v, mask]: [&T; 4],
    [q2, k2, mask_far]: [&T; 3],
    p: &AttnParams,
    out: &T,
) -> Result<usize> {
    const OP: &str = "attention_window";
    let m = attention([q, k, v, mask], p, out)?;
    distinct(OP, out, &[q2, k2, mask_far])?;
    for (a, b) in [(q, q2), (k, k2), (mask, mask_far)] {
        if a.desc().ty != b.desc().ty {
            return Err(shape(
                OP,
                format!(
                    "`{}` is {} but `{}` is {}",
                    a.desc().label,
                    a.desc().ty,
                    b.desc().label,
                    b.desc().ty
                ),
            ));
        }
        same(OP, a.desc(), b.desc())?;
    }
    Ok(m)
}

/// [`crate::Backend::kshift`]: `k` F32, F16, Q8_0 or Q4_0 `[head_dim *
/// n_head, n_rows]` (a quantized one is dequantized, rotated, requantized);
/// `shift` I32 `[n_rows]`. Returns `n_rows`.
pub fn kshift<T: Tensor + ?Sized>(k: &T, shift: &T, p: &RopeParams) -> Result<usize> {
    const OP: &str = "kshift";
    rope_params(OP, p)?;
    cache_ty(OP, "k", k)?;
    ty(OP, "shift", shift, GgmlType::I32)?;
    distinct(OP, k, &[shift])?;
    head_blocks(OP, "k", k, p.head_dim)?;
    let n_rows = cols(OP, "k", k.desc(), p.head_dim * p.n_head)?;
    len(OP, "shift", shift.desc(), n_rows)?;
    Ok(n_rows)
}

/// [`crate::Backend::short_conv`]: `x`, `out` F32 `[n, m]`; `kernel` F32
/// `[l, n]` with `l >= 2`; `state` F32 `[(l - 1) * n, n_slots]`; `slots`
/// I32 `[m]`. `out` and `state` are written, so neither may be an input.
/// Returns `(n, m, l, n_slots)`.
pub fn short_conv<T: Tensor + ?Sized>(
    [x, kernel, state, slots]: [&T; 4],
    out: &T,
) -> Result<(usize, usize, usize, usize)> {
    const OP: &str = "short_conv";
    for (what, t) in [("x", x), ("kernel", kernel), ("state", state), ("out", out)] {
        ty(OP, what, t, GgmlType::F32)?;
    }
    ty(OP, "slots", slots, GgmlType::I32)?;
    distinct(OP, out, &[x, kernel, state, slots])?;
    distinct(OP, state, &[x, kernel, slots])?;
    let kd = kernel.desc();
    let (l, n) = (kd.ne[0], kd.ne[1]);
    if l < 2 || kd.ne[2] != 1 || kd.ne[3] != 1 || n == 0 {
        return Err(shape(
            OP,
            format!(
                "kernel `{}` has ne {:?}: expected [l >= 2, n]",
                kd.label, kd.ne
            ),
        ));
    }
    let m = cols(OP, "x", x.desc(), n)?;
    matrix(OP, "out", out.desc(), n, m)?;
    len(OP, "slots", slots.desc(), m)?;
    let n_slots = cols(OP, "state", state.desc(), (l - 1) * n)?;
    Ok((n, m, l, n_slots))
}

#[cfg(test)]
mod tests {
    /// `top_k_key`'s order is `f32::total_cmp`'s on every non-NaN value
    /// (-0 below +0, infinities, subnormals, the extremes), and every NaN,
    /// of either sign, ranks above `+inf`.
    #[test]
    fn top_k_keys_order_as_total_cmp_with_nan_on_top() {
        let vals = [
            f32::NEG_INFINITY,
            f32::MIN,
            -1.5,
            -f32::MIN_POSITIVE,
            -1e-45,
            -0.0,
            0.0,
            1e-45,
            f32::MIN_POSITIVE,
            2.5,
            f32::MAX,
            f32::INFINITY,
        ];
        for a in vals {
            for b in vals {
                assert_eq!(top_k_key(a).cmp(&top_k_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
        for nan in [
            f32::NAN,
            f32::from_bits(0xffc0_0000),
            f32::from_bits(0x7f80_0001),
        ] {
            assert!(top_k_key(nan) > top_k_key(f32::INFINITY));
        }
    }

    use super::*;
    use crate::{RopeMode, Usage};

    struct T(TensorDesc);

    impl Tensor for T {
        fn desc(&self) -> &TensorDesc {
            &self.0
        }
    }

    fn t(ty: GgmlType, ne: [usize; 4]) -> T {
        T(TensorDesc {
            ty,
            ne,
            label: "t".into(),
            usage: Usage::Scratch,
        })
    }

    fn f32s(ne: [usize; 4]) -> T {
        t(GgmlType::F32, ne)
    }

    #[test]
    fn matrices_may_split_their_rows_over_leading_dims() {
        let (w, x) = (f32s([16, 12, 1, 1]), f32s([16, 2, 1, 1]));
        assert_eq!(mul_mat(&w, &x, &f32s([4, 3, 2, 1])).unwrap(), 2);
        assert_eq!(mul_mat(&w, &x, &f32s([12, 2, 1, 1])).unwrap(), 2);
        let e = mul_mat(&w, &f32s([15, 2, 1, 1]), &f32s([12, 2, 1, 1])).unwrap_err();
        assert!(
            matches!(e, BackendError::Shape { op: "mul_mat", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("[15, 2, 1, 1]"), "{e}");
        let e = mul_mat(&w, &x, &f32s([5, 2, 1, 1])).unwrap_err();
        assert!(e.to_string().contains("rows of 12"), "{e}");
    }

    #[test]
    fn an_output_that_is_an_input_is_refused() {
        let x = f32s([4, 2, 1, 1]);
        let e = scale(&x, &x).unwrap_err();
        assert!(e.to_string().contains("also an input"), "{e}");
        assert!(add(&f32s([4, 2, 1, 1]), &x, &x).is_err());
    }

    #[test]
    fn the_stricter_rules_hold() {
        let plain = RopeParams::plain(RopeMode::Norm, 8, 2, 10000.0);
        let (x, pos) = (f32s([8, 2, 3, 1]), t(GgmlType::I32, [3, 1, 1, 1]));
        assert_eq!(rope(&x, &pos, &plain, &f32s([8, 2, 3, 1])).unwrap(), 3);
        for p in [
            RopeParams { n_rot: 0, ..plain },
            RopeParams {
                n_rot: 6,
                head_dim: 7,
                ..plain
            },
            RopeParams {
                freq_base: 0.0,
                ..plain
            },
        ] {
            assert!(rope_params("rope", &p).is_err(), "{p:?}");
        }
        let e = argmax(&f32s([0, 3, 1, 1]), &t(GgmlType::I32, [3, 1, 1, 1])).unwrap_err();
        assert!(matches!(e, BackendError::Shape { op: "argmax", .. }), "{e}");
        // b of n elements but not one row of n.
        let a = f32s([4, 2, 1, 1]);
        assert!(add(&a, &f32s([2, 2, 1, 1]), &f32s([4, 2, 1, 1])).is_err());
        assert!(add(&a, &f32s([4, 1, 1, 1]), &f32s([4, 2, 1, 1])).is_ok());
    }

    #[test]
    fn attention_takes_either_cache_type_and_wants_a_window_inside_it() {
        let q = f32s([8, 4, 2, 1]);
        let k = f32s([16, 10, 1, 1]);
        let v16 = t(GgmlType::F16, [16, 10, 1, 1]);
        let mask = f32s([10, 2, 1, 1]);
        let out = f32s([32, 2, 1, 1]);
        let mut p = AttnParams {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 8,
            scale: 1.0,
            softcap: 0.0,
            kv_start: 0,
            n_kv: 10,
        };
        assert_eq!(attention([&q, &k, &k, &mask], &p, &out).unwrap(), 2);
        assert_eq!(attention([&q, &k, &v16, &mask], &p, &out).unwrap(), 2);
        let bf = t(GgmlType::BF16, [16, 10, 1, 1]);
        let e = attention([&q, &k, &bf, &mask], &p, &out).unwrap_err();
        assert!(
            matches!(
                e,
                BackendError::Type {
                    ty: GgmlType::BF16,
                    what: "v",
                    ..
                }
            ),
            "{e}"
        );
        p.kv_start = usize::MAX;
        let e = attention([&q, &k, &k, &mask], &p, &out).unwrap_err();
        assert!(e.to_string().contains("it has 10"), "{e}");
    }

    #[test]
    fn a_quantized_cache_wants_whole_blocks_per_head() {
        let q = f32s([32, 4, 2, 1]);
        let k8 = t(GgmlType::Q8_0, [64, 10, 1, 1]);
        let k4 = t(GgmlType::Q4_0, [64, 10, 1, 1]);
        let mask = f32s([10, 2, 1, 1]);
        let out = f32s([128, 2, 1, 1]);
        let mut p = AttnParams {
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            scale: 1.0,
            softcap: 0.0,
            kv_start: 0,
            n_kv: 10,
        };
        assert_eq!(attention([&q, &k8, &k4, &mask], &p, &out).unwrap(), 2);
        // Heads of 16: two heads share a block.
        let q16 = f32s([16, 8, 2, 1]);
        p.head_dim = 16;
        p.n_head = 8;
        p.n_head_kv = 4;
        let e = attention([&q16, &k8, &k8, &mask], &p, &out).unwrap_err();
        assert!(e.to_string().contains("head_dim a multiple of 32"), "{e}");
        // A row that is not whole blocks.
        let odd = t(GgmlType::Q8_0, [48, 10, 1, 1]);
        let src = f32s([48, 2, 1, 1]);
        let idx = t(GgmlType::I32, [2, 1, 1, 1]);
        let e = set_rows(&src, &idx, &odd).unwrap_err();
        assert!(e.to_string().contains("whole blocks of 32"), "{e}");
        let e = set_rows(&src, &idx, &t(GgmlType::Q4_1, [64, 2, 1, 1])).unwrap_err();
        assert!(matches!(e, BackendError::Type { what: "dst", .. }), "{e}");
    }
}
