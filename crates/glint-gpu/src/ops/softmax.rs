//! `shaders/softmax.wgsl`: softmax over each row, one workgroup per row.

use glint_backend::{check, Result};

use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// x, out: [n, m] f32.
pub(crate) fn softmax(be: &GpuBackend, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
    let op = "softmax";
    check::softmax(x, out)?;
    be.check_bindable(op, &[x, out])?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    be.dispatch(
        PipelineKey::new("softmax.wgsl", "main", 1, 1).with_flags(be.flags(true, false)),
        &[Bind::whole(x)],
        &[Bind::whole(out)],
        &[n as u32, m as u32],
        m,
    )
}
