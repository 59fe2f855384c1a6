//! `shaders/kshift.wgsl`: rotate cached K rows in place by per-row deltas.

use glint_backend::{check, Result, RopeParams};

use super::rope::rope_params;
use super::{f16_cache, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// k: [head_dim * n_head, n_rows] f32 or f16; shift: [n_rows] i32. One
/// invocation per (row, head).
pub(crate) fn kshift(be: &GpuBackend, k: &T, shift: &T, p: &RopeParams) -> Result<()> {
    let rows = check::kshift(k, shift, p)?;
    let f16 = f16_cache("kshift", k, "k")?;
    let key =
        PipelineKey::new("kshift.wgsl", "main", 1, 1).with_constant("KV_F16", f16 as u32 as f64);
    let params = rope_params(p, rows);
    let n_wg = (rows * p.n_head).div_ceil(64);
    be.launch("kshift", key, [&[shift], &[k]], &params, n_wg)
}
