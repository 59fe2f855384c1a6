//! `shaders/rope.wgsl`: RoPE at explicit per-token positions. The params
//! block is shared with `kshift.wgsl` (both include `rope_common.wgsl`).

use glint_backend::{check, Result, RopeMode, RopeParams};

use super::{f32_bits, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// Words of a rope params block (rope_store.wgsl's, the longest).
pub(super) type RopeWords = crate::few::Few<u32, 16>;

/// The `Params` block of rope.wgsl and kshift.wgsl for `rows` rows (the
/// first words of rope_store.wgsl's), inline: built every dispatch.
pub(super) fn rope_params(p: &RopeParams, rows: usize) -> RopeWords {
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
    let mut w = RopeWords::new();
    w.extend_from_slice(&[
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
    ]);
    w
}

/// x, out: [head_dim, n_head, m] f32; pos: [m] i32. One invocation per
/// (token, head, pair).
pub(crate) fn rope(be: &GpuBackend, x: &T, pos: &T, p: &RopeParams, out: &T) -> Result<()> {
    let m = check::rope(x, pos, p, out)?;
    let total = p.head_dim / 2 * p.n_head * m;
    let key = PipelineKey::new("rope.wgsl", "main", 2, 1);
    let params = rope_params(p, m);
    be.launch(
        "rope",
        key,
        [&[x, pos], &[out]],
        &params,
        total.div_ceil(256),
    )
}
