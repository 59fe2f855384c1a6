//! `shaders/top_k.wgsl`: the top-k candidates of each row of logits, so
//! that sampling reads back a few hundred bytes a row, not the vocabulary.

use glint_backend::{check, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// x: [n, m] f32; out: [1 + 2 cap, m] i32. One workgroup per row.
pub(crate) fn top_k(be: &GpuBackend, x: &T, k: usize, out: &T) -> Result<()> {
    let cap = check::top_k(x, k, out)?;
    let (n, m) = (x.desc.ne[0], x.desc.n_rows());
    let key = PipelineKey::new("top_k.wgsl", "main", 1, 1);
    let params = [n as u32, m as u32, k as u32, cap as u32];
    be.launch("top_k", key, [&[x], &[out]], &params, m)
}
