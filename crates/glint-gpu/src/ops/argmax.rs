//! `shaders/argmax.wgsl`: index of the largest value of each row.

use glint_backend::{check, Result};

use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// x: [n, m] f32; out: [m] i32.
pub(crate) fn argmax(be: &GpuBackend, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
    let op = "argmax";
    check::argmax(x, out)?;
    be.check_bindable(op, &[x, out])?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    be.dispatch(
        PipelineKey::new("argmax.wgsl", "main", 1, 1),
        &[Bind::whole(x)],
        &[Bind::whole(out)],
        &[n as u32, m as u32],
        m,
    )
}
