//! `shaders/short_conv.wgsl`: LFM2's short convolution with per-sequence
//! state.

use glint_backend::{check, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// x, out: [n, m] f32; kernel: [l, n] f32; state: [(l - 1) * n, n_slots]
/// f32 (in place); slots: [m] i32. One invocation per channel.
pub(crate) fn short_conv(
    be: &GpuBackend,
    [x, kernel, state, slots]: [&T; 4],
    out: &T,
) -> Result<()> {
    let (n, m, l, n_slots) = check::short_conv([x, kernel, state, slots], out)?;
    let key = PipelineKey::new("short_conv.wgsl", "main", 3, 2);
    let params = [n as u32, m as u32, l as u32, n_slots as u32];
    be.launch(
        "short_conv",
        key,
        [&[x, kernel, slots], &[state, out]],
        &params,
        n.div_ceil(64),
    )
}
