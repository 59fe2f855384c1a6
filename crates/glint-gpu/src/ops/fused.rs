//! `shaders/matvec_fused.wgsl`: a decode step's matvecs over the parts of
//! one packed weight buffer ([`GpuBackend::pack_weights`]) in one dispatch:
//! Q, K and V (`multi`), or gate and up with their activation (`glu`).
//! Each returns `Ok(false)`, having recorded nothing, where the weights are
//! not packed together, the product is not a matvec, or a pending post-norm
//! is asked for that the kernel cannot add (no norm, rows not whole vec4s,
//! too few storage bindings); the caller then runs the ops one by one.

use glint_backend::{check, GgmlType, Glu, PostAdd, Result};

// Columns a fused matvec takes: `mul_mat`'s matvec range.
use super::mul_mat::{matvec_groups, matvec_key, Norm, MATVEC_MAX_M as MAX_M};
use super::{f32_bits, T};
use crate::pipelines::{Flags, PipelineKey};
use crate::tensor::Bind;
use crate::GpuBackend;

/// What the kernel needs of packed parts `ws` over `x`: params (k, m,
/// row_bytes, n0..n2, wb0..wb2, and the norm's eps and the post-norm's:
/// passed with those only); `None` when they do not qualify. A row of the
/// parts is one workgroup's (with subgroups, one of the rows a subgroup
/// takes at once), for every column.
fn plan(be: &GpuBackend, ws: &[&T], x: &T, outs: &[&T]) -> Result<Option<Params>> {
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
        .all(|w| w.buf_id == w0.buf_id && w.desc.ty == w0.desc.ty && w.desc.ne[0] == w0.desc.ne[0]);
    // The packed buffer is bound whole: it must fit one binding, and byte
    // offsets a u32.
    let size = w0.buf.size();
    if !same || m > MAX_M || size > be.max_binding() || size >= 1 << 31 {
        return Ok(None);
    }
    let mut p = [0u32; 11];
    p[0] = w0.desc.ne[0] as u32;
    p[1] = m as u32;
    p[2] = w0.desc.row_bytes() as u32;
    for (i, w) in ws.iter().enumerate() {
        p[3 + i] = w.desc.n_rows() as u32;
        p[6 + i] = w.offset as u32;
    }
    Ok(Some(p))
}

/// The kernel's params: plan's 9, then eps (NORM), then the post-norm's
/// eps (POST).
type Params = [u32; 11];

/// The bindings of a fused matvec besides its outputs: the packed buffer,
/// x, and with a norm its weights, with a post-norm y and its weights
/// (`n_in` of them).
struct Inputs<'a> {
    binds: [Bind<'a>; 5],
    n_in: usize,
}

/// The pipeline (with `flag`: the entry's variant, GLU or THREE), its
/// inputs and its params (the plan's, then eps with a norm, then the
/// post-norm's). With `post` (which needs a norm and P8: the caller
/// checks), x is the residual and the input `x + rms_norm(post.y) *
/// post.w`, stored into `post.out` by the first workgroup: the caller binds
/// that after the outputs. No heap allocation: it runs on every decode
/// step.
#[allow(clippy::too_many_arguments)]
fn key<'a>(
    be: &GpuBackend,
    entry: &'static str,
    ty: GgmlType,
    n_out: u32,
    flag: Option<&'static str>,
    (w, x, norm, post): (&'a T, &'a T, Norm<'a>, Option<PostAdd<'a, T>>),
    p: &'a mut Params,
) -> (PipelineKey, Inputs<'a>, &'a [u32]) {
    let mut extra = Flags::new();
    extra.extend(flag);
    extra.extend(norm.is_some().then_some("NORM"));
    extra.extend(post.is_some().then_some("POST"));
    let mut binds = [
        Bind::buffer(w),
        Bind::whole(x),
        Bind::whole(x),
        Bind::whole(x),
        Bind::whole(x),
    ];
    let (mut n_in, mut n) = (2, 9);
    if let Some((nw, eps)) = norm {
        p[9] = f32_bits(eps);
        binds[2] = Bind::whole(nw);
        (n_in, n) = (3, 10);
        if let Some(a) = post {
            p[10] = f32_bits(a.eps);
            binds[3] = Bind::whole(a.y);
            binds[4] = Bind::whole(a.w);
            (n_in, n) = (5, 11);
        }
    }
    let n_out = n_out + post.is_some() as u32;
    let key = PipelineKey::new("matvec_fused.wgsl", entry, n_in as u32, n_out);
    let key = matvec_key(be, key, ty, (p[0] as usize, p[1] as usize), &extra);
    (key, Inputs { binds, n_in }, &p[..n])
}

/// Whether a fused matvec of `ws` over x (`[k, m]`) can add `post` as it
/// reads x: a norm folded in, x read as vec4s (k % 4 == 0, `P8`), and room
/// for its bindings (up to 9 storage buffers) on this adapter.
pub(crate) fn takes_post(be: &GpuBackend, k: usize, n_parts: usize) -> bool {
    let storage = 6 + n_parts as u32; // W, x, nw, y, pw, xo and the outputs
    k.is_multiple_of(4) && be.ctx.limits.max_storage_buffers_per_shader_stage >= storage
}

/// Check `post`'s tensors against x (`[k, m]`) and that the kernel can
/// take it: `Ok(false)` where it cannot (the caller adds it apart).
fn post_fits(
    be: &GpuBackend,
    x: &T,
    norm: Norm,
    post: &Option<PostAdd<T>>,
    n_parts: usize,
) -> Result<bool> {
    let Some(a) = post else {
        return Ok(true);
    };
    check::rms_norm(a.y, Some(a.w), a.out)?;
    check::add(x, a.y, a.out)?;
    be.check_bindable("post-norm add", &[a.y, a.out])?;
    Ok(norm.is_some() && takes_post(be, x.desc.ne[0], n_parts))
}

/// The output bindings after the outputs proper: `post.out`, or nothing.
fn post_out<'a>(post: &Option<PostAdd<'a, T>>, first: &'a T) -> (Bind<'a>, usize) {
    match post {
        Some(a) => (Bind::whole(a.out), 1),
        None => (Bind::whole(first), 0),
    }
}

/// `outs[i] = ws[i] · x` for 2 or 3 packed parts, one dispatch; with
/// `norm`, of `rms_norm(x) * norm.0` (the caller checks its shape); with
/// `post` too, of the input `x + rms_norm(post.y) * post.w`, stored into
/// `post.out` on the way. `Ok(false)`: nothing recorded.
pub(crate) fn mul_mats(
    be: &GpuBackend,
    ws: &[&T],
    x: &T,
    norm: Norm,
    post: Option<PostAdd<T>>,
    outs: &[&T],
) -> Result<bool> {
    if ws.len() < 2 {
        return Ok(false);
    }
    let Some(mut p) = plan(be, ws, x, outs)? else {
        return Ok(false);
    };
    if !post_fits(be, x, norm, &post, ws.len())? {
        return Ok(false);
    }
    be.check_bindable("mul_mats", &[x])?;
    be.check_bindable("mul_mats", outs)?;
    let n = ws.len() as u32;
    let three = (n == 3).then_some("THREE");
    let rows: usize = p[3..6].iter().map(|&n| n as usize).sum();
    be.weight_read(ws[0], (rows * p[2] as usize) as u64);
    let (k, ins, p) = key(
        be,
        "multi",
        ws[0].desc.ty,
        n,
        three,
        (ws[0], x, norm, post),
        &mut p,
    );
    // outs: 2 or 3 (plan checked them against ws), then post.out.
    let mut os = [Bind::whole(outs[0]); 4];
    for (o, t) in os.iter_mut().zip(outs) {
        *o = Bind::whole(t);
    }
    let (po, n_po) = post_out(&post, outs[0]);
    os[outs.len()] = po;
    let n_os = outs.len() + n_po;
    let n_wg = matvec_groups(be, rows);
    be.dispatch(k, &ins.binds[..ins.n_in], &os[..n_os], p, n_wg)?;
    Ok(true)
}

/// `out = act(wg · x) * (wu · x)` for packed gate and up, one dispatch;
/// with `norm` and `post` as [`mul_mats`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn mul_mats_glu(
    be: &GpuBackend,
    op: Glu,
    wg: &T,
    wu: &T,
    x: &T,
    norm: Norm,
    post: Option<PostAdd<T>>,
    out: &T,
) -> Result<bool> {
    let Some(mut p) = plan(be, &[wg, wu], x, &[out, out])? else {
        return Ok(false);
    };
    if p[3] != p[4] || !post_fits(be, x, norm, &post, 1)? {
        return Ok(false);
    }
    be.check_bindable("mul_mats_glu", &[x, out])?;
    let code = match op {
        Glu::SwiGlu => 2u32,
        Glu::GeGlu => 3,
    };
    // Each output row reads its gate row and its up row, for every column.
    be.weight_read(wg, (2 * p[3] as usize * p[2] as usize) as u64);
    let n_wg = matvec_groups(be, p[3] as usize);
    let (k, ins, p) = key(
        be,
        "glu",
        wg.desc.ty,
        1,
        Some("GLU"),
        (wg, x, norm, post),
        &mut p,
    );
    let k = k.with_constant("OP", code as f64);
    let (po, n_po) = post_out(&post, out);
    let os = [Bind::whole(out), po];
    be.dispatch(k, &ins.binds[..ins.n_in], &os[..1 + n_po], p, n_wg)?;
    Ok(true)
}
