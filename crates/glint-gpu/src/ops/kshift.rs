//! `shaders/kshift.wgsl`: rotate cached K rows in place by per-row deltas.

use glint_backend::{check, BackendError, Result, RopeParams};

use super::rope::rope_params;
use super::{f16_cache, quant_cache, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// k: [head_dim * n_head, n_rows] f32, f16, Q8_0 or Q4_0; shift: [n_rows]
/// i32. One invocation per (row, head), per row for a quantized k.
pub(crate) fn kshift(be: &GpuBackend, k: &T, shift: &T, p: &RopeParams) -> Result<()> {
    let rows = check::kshift(k, shift, p)?;
    let f16 = f16_cache("kshift", k, "k")?;
    let kv_q = quant_cache("kshift", k, "k")?;
    let params = rope_params(p, rows);
    if kv_q != 0 {
        if p.head_dim > MAX_Q_HEAD {
            return Err(BackendError::Shape {
                op: "kshift",
                detail: format!(
                    "a quantized k's head_dim {} is over this kernel's {MAX_Q_HEAD}",
                    p.head_dim
                ),
            });
        }
        // One invocation per row: dequantize, rotate, requantize.
        let key =
            PipelineKey::new("kshift.wgsl", "main_q", 1, 1).with_constant("KV_Q", kv_q as f64);
        return be.launch("kshift", key, [&[shift], &[k]], &params, rows.div_ceil(64));
    }
    let key =
        PipelineKey::new("kshift.wgsl", "main", 1, 1).with_constant("KV_F16", f16 as u32 as f64);
    let n_wg = (rows * p.n_head).div_ceil(64);
    be.launch("kshift", key, [&[shift], &[k]], &params, n_wg)
}

/// `MAX_Q_HEAD` in kshift.wgsl: main_q keeps a head in a private array.
const MAX_Q_HEAD: usize = 256;
