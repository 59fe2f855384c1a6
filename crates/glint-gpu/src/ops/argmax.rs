//! `shaders/argmax.wgsl`: index of the largest value of each row.

use glint_backend::{GgmlType, Result};

use super::{check, want_type};
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// x: [n, m] f32; out: [m] i32.
pub(crate) fn argmax(be: &GpuBackend, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
    let op = "argmax";
    want_type(op, x, &[GgmlType::F32], "x")?;
    want_type(op, out, &[GgmlType::I32], "out")?;
    let (n, m) = be.rowwise(op, x, out)?;
    check(out.desc.n_elements() == m && n > 0, op, || {
        format!("x {:?}, out {:?}: expected [{m}]", x.desc.ne, out.desc.ne)
    })?;
    be.dispatch(
        PipelineKey::new("argmax.wgsl", "main", 1, 1),
        &[Bind::whole(x)],
        &[Bind::whole(out)],
        &[n as u32, m as u32],
        m,
    )
}
