//! `shaders/binary.wgsl`: add, mul (b broadcast over columns), swiglu, geglu.

use glint_backend::{check, Glu, Result};

use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// The kernel's `OP` constant.
#[derive(Clone, Copy)]
pub(crate) enum BinaryOp {
    Add = 0,
    Mul = 1,
    SwiGlu = 2,
    GeGlu = 3,
}

impl From<Glu> for BinaryOp {
    fn from(op: Glu) -> Self {
        match op {
            Glu::SwiGlu => BinaryOp::SwiGlu,
            Glu::GeGlu => BinaryOp::GeGlu,
        }
    }
}

/// `out = a op b`. a, out: [n, m] f32; b: [n, m] or [n] f32 (checked by
/// the caller).
fn binary(
    be: &GpuBackend,
    op: &'static str,
    code: BinaryOp,
    a: &GpuTensor,
    b: &GpuTensor,
    out: &GpuTensor,
) -> Result<()> {
    let nb = b.desc.n_elements();
    let total = a.desc.n_elements();
    be.check_bindable(op, &[a, b, out])?;
    be.dispatch(
        PipelineKey::new("binary.wgsl", "main", 2, 1).with_constant("OP", code as u32 as f64),
        &[Bind::whole(a), Bind::whole(b)],
        &[Bind::whole(out)],
        &[total as u32, nb as u32],
        total.div_ceil(256),
    )
}

/// `out = a + b`.
pub(crate) fn add(be: &GpuBackend, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
    check::add(a, b, out)?;
    binary(be, "add", BinaryOp::Add, a, b, out)
}

/// `out = a * b`.
pub(crate) fn mul(be: &GpuBackend, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
    check::mul(a, b, out)?;
    binary(be, "mul", BinaryOp::Mul, a, b, out)
}

/// `out = act(gate) * up`, all three [n, m] f32.
pub(crate) fn glu(
    be: &GpuBackend,
    op: Glu,
    gate: &GpuTensor,
    up: &GpuTensor,
    out: &GpuTensor,
) -> Result<()> {
    check::glu(gate, up, out)?;
    binary(be, "glu", op.into(), gate, up, out)
}
