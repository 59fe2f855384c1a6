//! `shaders/rms_norm.wgsl`: RMSNorm, one workgroup per row.

use glint_backend::{check, Result};

use super::f32_bits;
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// x, out: [n, m] f32; w: [n] f32.
pub(crate) fn rms_norm(
    be: &GpuBackend,
    x: &GpuTensor,
    w: Option<&GpuTensor>,
    eps: f32,
    out: &GpuTensor,
) -> Result<()> {
    let op = "rms_norm";
    check::rms_norm(x, w, out)?;
    be.check_bindable(op, &[x, out])?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    be.dispatch(
        PipelineKey::new("rms_norm.wgsl", "main", 2, 1).with_flags(be.flags(true, false)),
        &[Bind::whole(x), Bind::whole(w.unwrap_or(x))],
        &[Bind::whole(out)],
        &[n as u32, m as u32, f32_bits(eps), w.is_some() as u32],
        m,
    )
}
