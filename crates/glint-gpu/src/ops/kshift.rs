//! `shaders/kshift.wgsl`: rotate cached K rows in place by per-row deltas.

use glint_backend::{check, Result, RopeParams};

use super::f16_cache;
use super::rope::rope_params;
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// k: [head_dim * n_head, n_rows] f32 or f16; shift: [n_rows] i32.
pub(crate) fn kshift(
    be: &GpuBackend,
    k: &GpuTensor,
    shift: &GpuTensor,
    p: &RopeParams,
) -> Result<()> {
    let op = "kshift";
    let rows = check::kshift(k, shift, p)?;
    let f16 = f16_cache(op, k, "k")?;
    be.check_bindable(op, &[k, shift])?;
    be.dispatch(
        PipelineKey::new("kshift.wgsl", "main", 1, 1).with_constant("KV_F16", f16 as u32 as f64),
        &[Bind::whole(shift)],
        &[Bind::whole(k)],
        &rope_params(p, rows),
        (rows * p.n_head).div_ceil(64),
    )
}
