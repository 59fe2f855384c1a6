//! `shaders/binary.wgsl`: add, mul (b broadcast over columns), swiglu, geglu.

use glint_backend::{check, Glu, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// The kernel's `OP` constant.
#[derive(Clone, Copy)]
enum BinaryOp {
    Add = 0,
    Mul = 1,
    SwiGlu = 2,
    GeGlu = 3,
}

/// `out = a + b`. a, out: [n, m] f32; b: [n, m] or [n] f32.
pub(crate) fn add(be: &GpuBackend, a: &T, b: &T, out: &T) -> Result<()> {
    check::add(a, b, out)?;
    binary(be, "add", BinaryOp::Add, [a, b], out)
}

/// `out = a * b`, shapes as [`add`].
pub(crate) fn mul(be: &GpuBackend, a: &T, b: &T, out: &T) -> Result<()> {
    check::mul(a, b, out)?;
    binary(be, "mul", BinaryOp::Mul, [a, b], out)
}

/// `out = act(gate) * up`, all three [n, m] f32.
pub(crate) fn glu(be: &GpuBackend, op: Glu, gate: &T, up: &T, out: &T) -> Result<()> {
    check::glu(gate, up, out)?;
    let code = match op {
        Glu::SwiGlu => BinaryOp::SwiGlu,
        Glu::GeGlu => BinaryOp::GeGlu,
    };
    binary(be, "glu", code, [gate, up], out)
}

/// One invocation per element of `out`; b is read at `i % n_b`.
fn binary(
    be: &GpuBackend,
    op: &'static str,
    code: BinaryOp,
    [a, b]: [&T; 2],
    out: &T,
) -> Result<()> {
    let total = a.desc.n_elements();
    let key = PipelineKey::new("binary.wgsl", "main", 2, 1).with_constant("OP", code as u32 as f64);
    let params = [total as u32, b.desc.n_elements() as u32];
    be.launch(op, key, [&[a, b], &[out]], &params, total.div_ceil(256))
}
