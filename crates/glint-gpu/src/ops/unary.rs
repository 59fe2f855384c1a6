//! `shaders/unary.wgsl`: scale, silu, gelu.

use glint_backend::{check, Result, Unary};

use super::{f32_bits, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// `out = x * s`. x, out: [n, m] f32.
pub(crate) fn scale(be: &GpuBackend, x: &T, s: f32, out: &T) -> Result<()> {
    check::scale(x, out)?;
    unary_op(be, "scale", 0, s, x, out)
}

/// `out = op(x)`. x, out: [n, m] f32.
pub(crate) fn unary(be: &GpuBackend, op: Unary, x: &T, out: &T) -> Result<()> {
    check::unary(x, out)?;
    let code = match op {
        Unary::Silu => 1,
        Unary::Gelu => 2,
    };
    unary_op(be, "unary", code, 1.0, x, out)
}

/// One invocation per element; `code` is the kernel's `OP`, `s` the factor of scale.
fn unary_op(be: &GpuBackend, op: &'static str, code: u32, s: f32, x: &T, out: &T) -> Result<()> {
    let total = x.desc.n_elements();
    let key = PipelineKey::new("unary.wgsl", "main", 1, 1).with_constant("OP", code as f64);
    let params = [total as u32, f32_bits(s)];
    be.launch(op, key, [&[x], &[out]], &params, total.div_ceil(256))
}
