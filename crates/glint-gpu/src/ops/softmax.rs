//! `shaders/softmax.wgsl`: softmax over each row, one workgroup per row.

use glint_backend::{check, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// x, out: [n, m] f32.
pub(crate) fn softmax(be: &GpuBackend, x: &T, out: &T) -> Result<()> {
    check::softmax(x, out)?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    let key = PipelineKey::new("softmax.wgsl", "main", 1, 1).with_flags(be.flags(true, false));
    be.launch("softmax", key, [&[x], &[out]], &[n as u32, m as u32], m)
}
