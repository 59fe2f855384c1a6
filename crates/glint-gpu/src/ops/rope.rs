//! `shaders/rope.wgsl`: RoPE at explicit per-token positions. The params
//! block is shared with `kshift.wgsl` (both include `rope_common.wgsl`).

use glint_backend::{check, Result, RopeMode, RopeParams};

use super::f32_bits;
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

/// x, out: [head_dim, n_head, m] f32; pos: [m] i32.
pub(crate) fn rope(
    be: &GpuBackend,
    x: &GpuTensor,
    pos: &GpuTensor,
    p: &RopeParams,
    out: &GpuTensor,
) -> Result<()> {
    let op = "rope";
    let m = check::rope(x, pos, p, out)?;
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
