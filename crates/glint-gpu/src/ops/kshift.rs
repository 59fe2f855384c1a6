//! `shaders/kshift.wgsl`: rotate cached K rows in place by per-row deltas.

use glint_backend::{GgmlType, Result, RopeParams};

use super::rope::{check_rope, rope_params};
use super::{check, kv_f16, want_type};
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
    let f16 = kv_f16(op, k, "k")?;
    want_type(op, shift, &[GgmlType::I32], "shift")?;
    check_rope(op, p)?;
    let rows = k.desc.n_rows();
    check(
        k.desc.ne[0] == p.head_dim * p.n_head && shift.desc.n_elements() == rows,
        op,
        || {
            format!(
                "k {:?}, shift {:?}, head_dim {} x n_head {}",
                k.desc.ne, shift.desc.ne, p.head_dim, p.n_head
            )
        },
    )?;
    be.check_bindable(op, &[k, shift])?;
    be.dispatch(
        PipelineKey::new("kshift.wgsl", "main", 1, 1).with_constant("KV_F16", f16 as u32 as f64),
        &[Bind::whole(shift)],
        &[Bind::whole(k)],
        &rope_params(p, rows),
        (rows * p.n_head).div_ceil(64),
    )
}
