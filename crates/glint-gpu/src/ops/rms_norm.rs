//! `shaders/rms_norm.wgsl`: RMSNorm, one workgroup per row.

use glint_backend::{GgmlType, Result};

use super::{check, f32_bits, f32_same_shape, want_type};
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
    f32_same_shape(op, x, out)?;
    let (n, m) = be.rowwise(op, x, out)?;
    if let Some(w) = w {
        want_type(op, w, &[GgmlType::F32], "w")?;
        check(w.desc.n_elements() == n, op, || {
            format!("w {:?}, expected [{n}]", w.desc.ne)
        })?;
    }
    be.dispatch(
        PipelineKey::new("rms_norm.wgsl", "main", 2, 1).with_flags(be.flags(true, false)),
        &[Bind::whole(x), Bind::whole(w.unwrap_or(x))],
        &[Bind::whole(out)],
        &[n as u32, m as u32, f32_bits(eps), w.is_some() as u32],
        m,
    )
}
