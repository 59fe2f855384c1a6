//! `shaders/unary.wgsl`: scale, silu, gelu.

use glint_backend::{check, Result, Unary};

use super::f32_bits;
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// `out = x * s`. x, out: [n, m] f32.
pub(crate) fn scale(be: &GpuBackend, x: &GpuTensor, s: f32, out: &GpuTensor) -> Result<()> {
    check::scale(x, out)?;
    launch(be, "scale", 0, s, x, out)
}

/// `out = op(x)`. x, out: [n, m] f32.
pub(crate) fn unary(be: &GpuBackend, op: Unary, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
    let code = match op {
        Unary::Silu => 1,
        Unary::Gelu => 2,
    };
    check::unary(x, out)?;
    launch(be, "unary", code, 1.0, x, out)
}

fn launch(
    be: &GpuBackend,
    op: &'static str,
    code: u32,
    s: f32,
    x: &GpuTensor,
    out: &GpuTensor,
) -> Result<()> {
    let total = x.desc.n_elements();
    be.check_bindable(op, &[x, out])?;
    be.dispatch(
        PipelineKey::new("unary.wgsl", "main", 1, 1).with_constant("OP", code as f64),
        &[Bind::whole(x)],
        &[Bind::whole(out)],
        &[total as u32, f32_bits(s)],
        total.div_ceil(256),
    )
}
