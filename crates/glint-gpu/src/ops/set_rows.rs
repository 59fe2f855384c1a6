//! `shaders/set_rows.wgsl`: write rows into a cache, converted to its type.

use glint_backend::{check, Result};

use super::f16_cache;
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// src: [n, m] f32; idx: [m] i32; dst: [n, n_rows] f32 or f16.
pub(crate) fn set_rows(
    be: &GpuBackend,
    src: &GpuTensor,
    idx: &GpuTensor,
    dst: &GpuTensor,
) -> Result<()> {
    let op = "set_rows";
    let m = check::set_rows(src, idx, dst)?;
    let f16 = f16_cache(op, dst, "dst")?;
    let n = dst.desc.ne[0];
    be.check_bindable(op, &[src, idx, dst])?;
    // One invocation per dst word: two f16 share one.
    let per_row = if f16 { n / 2 } else { n };
    be.dispatch(
        PipelineKey::new("set_rows.wgsl", "main", 2, 1).with_constant("KV_F16", f16 as u32 as f64),
        &[Bind::whole(src), Bind::whole(idx)],
        &[Bind::whole(dst)],
        &[n as u32, m as u32, dst.desc.n_rows() as u32],
        (per_row * m).div_ceil(256),
    )
}
