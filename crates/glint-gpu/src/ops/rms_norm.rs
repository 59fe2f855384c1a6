//! `shaders/rms_norm.wgsl`: RMSNorm, one workgroup per row; with `ADD`,
//! a residual added to the normed rows in the same pass.

use glint_backend::{check, Result};

use super::{f32_bits, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// x, out: [n, m] f32; w: [n] f32 (x is bound in its place when absent).
pub(crate) fn rms_norm(be: &GpuBackend, x: &T, w: Option<&T>, eps: f32, out: &T) -> Result<()> {
    check::rms_norm(x, w, out)?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    let key = PipelineKey::new("rms_norm.wgsl", "main", 2, 1).with_flags(be.flags(true, false));
    let params = [n as u32, m as u32, f32_bits(eps), w.is_some() as u32];
    be.launch("rms_norm", key, [&[x, w.unwrap_or(x)], &[out]], &params, m)
}

/// out = res + rms_norm(x) * w in one dispatch (flag `ADD`): x, res, out
/// [n, m] f32, w [n] f32; the bits of `rms_norm` then `add` (`out` may not
/// be `res`, as for `add`).
pub(crate) fn rms_norm_add(
    be: &GpuBackend,
    x: &T,
    w: &T,
    eps: f32,
    res: &T,
    out: &T,
) -> Result<()> {
    check::rms_norm(x, Some(w), out)?;
    check::add(res, x, out)?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    let key = PipelineKey::new("rms_norm.wgsl", "main", 3, 1).with_flags({
        let mut f = be.flags(true, false);
        f.push("ADD");
        f
    });
    let params = [n as u32, m as u32, f32_bits(eps), 1];
    be.launch("rms_norm_add", key, [&[x, w, res], &[out]], &params, m)
}
