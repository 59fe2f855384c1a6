//! `shaders/matvec_fused.wgsl`: a decode step's matvecs over the parts of
//! one packed weight buffer ([`GpuBackend::pack_weights`]) in one dispatch:
//! Q, K and V (`multi`), or gate and up with their activation (`glu`).
//! Each returns `Ok(false)`, having recorded nothing, where the weights are
//! not packed together or the product is not a matvec; the caller then runs
//! the ops one by one.

use glint_backend::{check, GgmlType, Glu, Result};

// Columns a fused matvec takes: `mul_mat`'s matvec range.
use super::mul_mat::{matvec_key, MATVEC_MAX_M as MAX_M};
use super::T;
use crate::pipelines::PipelineKey;
use crate::tensor::Bind;
use crate::GpuBackend;

/// What the kernel needs of packed parts `ws` over `x`: params (k, m,
/// row_bytes, n0..n2, wb0..wb2); `None` when they do not qualify. One
/// workgroup per row of the parts takes every column.
fn plan(be: &GpuBackend, ws: &[&T], x: &T, outs: &[&T]) -> Result<Option<[u32; 9]>> {
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
    let mut p = [0u32; 9];
    p[0] = w0.desc.ne[0] as u32;
    p[1] = m as u32;
    p[2] = w0.desc.row_bytes() as u32;
    for (i, w) in ws.iter().enumerate() {
        p[3 + i] = w.desc.n_rows() as u32;
        p[6 + i] = w.offset as u32;
    }
    Ok(Some(p))
}

fn key(
    be: &GpuBackend,
    entry: &'static str,
    ty: GgmlType,
    n_out: u32,
    extra: &[&'static str],
    (k, m): (u32, u32),
) -> PipelineKey {
    let key = PipelineKey::new("matvec_fused.wgsl", entry, 2, n_out);
    matvec_key(be, key, ty, (k as usize, m as usize), extra)
}

/// `outs[i] = ws[i] · x` for 2 or 3 packed parts, one dispatch.
pub(crate) fn mul_mats(be: &GpuBackend, ws: &[&T], x: &T, outs: &[&T]) -> Result<bool> {
    if ws.len() < 2 {
        return Ok(false);
    }
    let Some(p) = plan(be, ws, x, outs)? else {
        return Ok(false);
    };
    be.check_bindable("mul_mats", &[x])?;
    be.check_bindable("mul_mats", outs)?;
    let three = ws.len() == 3;
    let k = key(
        be,
        "multi",
        ws[0].desc.ty,
        ws.len() as u32,
        if three { &["THREE"] } else { &[] },
        (p[0], p[1]),
    );
    let w = Bind::buffer(ws[0]);
    let ins = [w, Bind::whole(x)];
    let os: Vec<Bind> = outs.iter().map(|o| Bind::whole(o)).collect();
    let rows: usize = p[3..6].iter().map(|&n| n as usize).sum();
    be.weight_read(ws[0], (rows * p[2] as usize) as u64);
    be.dispatch(k, &ins, &os, &p, rows)?;
    Ok(true)
}

/// `out = act(wg · x) * (wu · x)` for packed gate and up, one dispatch.
pub(crate) fn mul_mats_glu(
    be: &GpuBackend,
    op: Glu,
    wg: &T,
    wu: &T,
    x: &T,
    out: &T,
) -> Result<bool> {
    let Some(p) = plan(be, &[wg, wu], x, &[out, out])? else {
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
    let k = key(be, "glu", wg.desc.ty, 1, &["GLU"], (p[0], p[1])).with_constant("OP", code as f64);
    let w = Bind::buffer(wg);
    // Each workgroup reads a gate row and an up row, for every column.
    be.weight_read(wg, (2 * p[3] as usize * p[2] as usize) as u64);
    let ins = [w, Bind::whole(x)];
    be.dispatch(k, &ins, &[Bind::whole(out)], &p, p[3] as usize)?;
    Ok(true)
}
