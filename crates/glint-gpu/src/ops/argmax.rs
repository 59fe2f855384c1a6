//! `shaders/argmax.wgsl`: index of the largest value of each row.

use glint_backend::{check, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// x: [n, m] f32; out: [m] i32. One workgroup per row.
pub(crate) fn argmax(be: &GpuBackend, x: &T, out: &T) -> Result<()> {
    check::argmax(x, out)?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    let key = PipelineKey::new("argmax.wgsl", "main", 1, 1);
    be.launch("argmax", key, [&[x], &[out]], &[n as u32, m as u32], m)
}
