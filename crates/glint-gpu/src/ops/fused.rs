//! `shaders/matvec_fused.wgsl`: a decode step's matvecs over the parts of
//! one packed weight buffer ([`GpuBackend::pack_weights`]) in one dispatch:
//! Q, K and V (`multi`), or gate and up with their activation (`glu`).
//! Each returns `Ok(false)`, having recorded nothing, where the weights are
//! not packed together or the product is not a matvec; the caller then runs
//! the ops one by one.

use glint_backend::{check, GgmlType, Glu, Result};

// Columns a fused matvec takes: `mul_mat`'s matvec range.
use super::mul_mat::{matvec_key, Norm, MATVEC_MAX_M as MAX_M};
use super::{f32_bits, T};
use crate::pipelines::{Flags, PipelineKey};
use crate::tensor::Bind;
use crate::GpuBackend;

/// What the kernel needs of packed parts `ws` over `x`: params (k, m,
/// row_bytes, n0..n2, wb0..wb2, and the norm's eps: passed with a norm
/// only); `None` when they do not qualify. One workgroup per row of the
/// parts takes every column.
fn plan(be: &GpuBackend, ws: &[&T], x: &T, outs: &[&T]) -> Result<Option<[u32; 10]>> {
    if ws.is_empty() || ws.len() > 3 || ws.len() != outs.len() {
        return Ok(None);
    }
    let mut m = 0;
    for (w, o) in ws.iter().zip(outs) {
        m = check::mul_mat(*w, x, *o)?;
    }
    let w0 = ws[0];
    let same = ws
        .iter()
        .all(|w| w.buf == w0.buf && w.desc.ty == w0.desc.ty && w.desc.ne[0] == w0.desc.ne[0]);
    // The packed buffer is bound whole: it must fit one binding, and byte
    // offsets a u32.
    let size = w0.buf.size();
    if !same || m > MAX_M || size > be.max_binding() || size >= 1 << 31 {
        return Ok(None);
    }
    let mut p = [0u32; 10];
    p[0] = w0.desc.ne[0] as u32;
    p[1] = m as u32;
    p[2] = w0.desc.row_bytes() as u32;
    for (i, w) in ws.iter().enumerate() {
        p[3 + i] = w.desc.n_rows() as u32;
        p[6 + i] = w.offset as u32;
    }
    Ok(Some(p))
}

/// The pipeline (with `flag`: the entry's variant, GLU or THREE), its
/// inputs (the packed buffer, x, and with a norm its weights: the first
/// `n_in` of the three; without a norm the third is x again, unbound) and
/// its params (eps after the plan's 9 with a norm). No heap allocation: it
/// runs on every decode step.
#[allow(clippy::too_many_arguments)]
fn key<'a>(
    be: &GpuBackend,
    entry: &'static str,
    ty: GgmlType,
    n_out: u32,
    flag: Option<&'static str>,
    (w, x, norm): (&'a T, &'a T, Norm<'a>),
    p: &'a mut [u32; 10],
) -> (PipelineKey, [Bind<'a>; 3], usize, &'a [u32]) {
    let mut extra = Flags::new();
    extra.extend(flag);
    extra.extend(norm.is_some().then_some("NORM"));
    let (nw, n_in, n) = match norm {
        Some((nw, eps)) => {
            p[9] = f32_bits(eps);
            (nw, 3, 10)
        }
        None => (x, 2, 9),
    };
    let ins = [Bind::buffer(w), Bind::whole(x), Bind::whole(nw)];
    let key = PipelineKey::new("matvec_fused.wgsl", entry, n_in as u32, n_out);
    let key = matvec_key(be, key, ty, (p[0] as usize, p[1] as usize), &extra);
    (key, ins, n_in, &p[..n])
}

/// `outs[i] = ws[i] · x` for 2 or 3 packed parts, one dispatch; with
/// `norm`, of `rms_norm(x) * norm.0` (the caller checks its shape).
pub(crate) fn mul_mats(be: &GpuBackend, ws: &[&T], x: &T, norm: Norm, outs: &[&T]) -> Result<bool> {
    if ws.len() < 2 {
        return Ok(false);
    }
    let Some(mut p) = plan(be, ws, x, outs)? else {
        return Ok(false);
    };
    be.check_bindable("mul_mats", &[x])?;
    be.check_bindable("mul_mats", outs)?;
    let n = ws.len() as u32;
    let three = (n == 3).then_some("THREE");
    let rows: usize = p[3..6].iter().map(|&n| n as usize).sum();
    be.weight_read(ws[0], (rows * p[2] as usize) as u64);
    let (k, ins, n_in, p) = key(
        be,
        "multi",
        ws[0].desc.ty,
        n,
        three,
        (ws[0], x, norm),
        &mut p,
    );
    // outs: 2 or 3 (plan checked them against ws); the third slot repeats
    // the last when there are two, unbound.
    let os = [0, 1, outs.len() - 1].map(|i| Bind::whole(outs[i]));
    be.dispatch(k, &ins[..n_in], &os[..outs.len()], p, rows)?;
    Ok(true)
}

/// `out = act(wg · x) * (wu · x)` for packed gate and up, one dispatch;
/// with `norm`, of `rms_norm(x) * norm.0` (the caller checks its shape).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mats_glu(
    be: &GpuBackend,
    op: Glu,
    wg: &T,
    wu: &T,
    x: &T,
    norm: Norm,
    out: &T,
) -> Result<bool> {
    let Some(mut p) = plan(be, &[wg, wu], x, &[out, out])? else {
        return Ok(false);
    };
    if p[3] != p[4] {
        return Ok(false);
    }
    be.check_bindable("mul_mats_glu", &[x, out])?;
    let code = match op {
        Glu::SwiGlu => 2u32,
        Glu::GeGlu => 3,
    };
    // Each workgroup reads a gate row and an up row, for every column.
    be.weight_read(wg, (2 * p[3] as usize * p[2] as usize) as u64);
    let n_wg = p[3] as usize;
    let (k, ins, n_in, p) = key(be, "glu", wg.desc.ty, 1, Some("GLU"), (wg, x, norm), &mut p);
    let k = k.with_constant("OP", code as f64);
    be.dispatch(k, &ins[..n_in], &[Bind::whole(out)], p, n_wg)?;
    Ok(true)
}
