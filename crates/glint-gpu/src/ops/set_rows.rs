//! `shaders/set_rows.wgsl`: write rows into a cache, converted to its type.

use glint_backend::{check, Result};

use super::{f16_cache, quant_cache, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// src: [n, m] f32; idx: [m] i32; dst: [n, n_rows] f32, f16, Q8_0 or Q4_0.
pub(crate) fn set_rows(be: &GpuBackend, src: &T, idx: &T, dst: &T) -> Result<()> {
    let m = check::set_rows(src, idx, dst)?;
    let f16 = f16_cache("set_rows", dst, "dst")?;
    let kv_q = quant_cache("set_rows", dst, "dst")?;
    let n = dst.desc.ne[0];
    // One invocation per dst word: two f16 share one, a quantized row is
    // its bytes / 4.
    let per_row = match (f16, kv_q) {
        (true, _) => n / 2,
        (_, 0) => n,
        _ => dst.desc.row_bytes() / 4,
    };
    let key = PipelineKey::new("set_rows.wgsl", "main", 2, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64);
    let params = [n as u32, m as u32, dst.desc.n_rows() as u32, per_row as u32];
    be.launch(
        "set_rows",
        key,
        [&[src, idx], &[dst]],
        &params,
        (per_row * m).div_ceil(256),
    )
}
