//! `shaders/rope.wgsl`: RoPE at explicit per-token positions. The params
//! block is shared with `kshift.wgsl` (both include `rope_common.wgsl`).

use glint_backend::{GgmlType, Result, RopeMode, RopeParams};

use super::{check, f32_bits, f32_same_shape, want_type};
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// The `Params` block of rope.wgsl and kshift.wgsl for `rows` rows.
pub(super) fn rope_params(p: &RopeParams, rows: usize) -> Vec<u32> {
    let [lo, hi] = if p.ext_factor != 0.0 {
        p.yarn_corr_dims()
    } else {
        [0.0, 0.0]
    };
    let theta_scale = p.freq_base.powf(-2.0 / p.n_rot as f32);
    let mode = match p.mode {
        RopeMode::Norm => 0,
        RopeMode::Neox => 1,
    };
    vec![
        p.head_dim as u32,
        p.n_head as u32,
        rows as u32,
        p.n_rot as u32,
        mode,
        f32_bits(theta_scale),
        f32_bits(p.freq_scale),
        f32_bits(p.ext_factor),
        f32_bits(p.attn_factor),
        f32_bits(lo),
        f32_bits(hi),
    ]
}

pub(super) fn check_rope(op: &'static str, p: &RopeParams) -> Result<()> {
    check(
        p.n_rot.is_multiple_of(2)
            && p.n_rot <= p.head_dim
            && p.head_dim.is_multiple_of(2)
            && p.n_rot > 0,
        op,
        || {
            format!(
                "n_rot {} / head_dim {}: both even, n_rot <= head_dim",
                p.n_rot, p.head_dim
            )
        },
    )
}

/// x, out: [head_dim, n_head, m] f32; pos: [m] i32.
pub(crate) fn rope(
    be: &GpuBackend,
    x: &GpuTensor,
    pos: &GpuTensor,
    p: &RopeParams,
    out: &GpuTensor,
) -> Result<()> {
    let op = "rope";
    f32_same_shape(op, x, out)?;
    want_type(op, pos, &[GgmlType::I32], "pos")?;
    check_rope(op, p)?;
    let m = x.desc.ne[2] * x.desc.ne[3];
    check(
        x.desc.ne[0] == p.head_dim && x.desc.ne[1] == p.n_head && pos.desc.n_elements() == m,
        op,
        || {
            format!(
                "x {:?}, pos {:?}, head_dim {}, n_head {}",
                x.desc.ne, pos.desc.ne, p.head_dim, p.n_head
            )
        },
    )?;
    be.check_bindable(op, &[x, out])?;
    let total = p.head_dim / 2 * p.n_head * m;
    be.dispatch(
        PipelineKey::new("rope.wgsl", "main", 2, 1),
        &[Bind::whole(x), Bind::whole(pos)],
        &[Bind::whole(out)],
        &rope_params(p, m),
        total.div_ceil(256),
    )
}
