//! `shaders/kq_mask.wgsl`: the attention mask built from a copy of the
//! cache's cells, one invocation per (cell, query).

use std::sync::atomic::Ordering::Relaxed;

use glint_backend::{check, BackendError, KqMask, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// cells: [w, n_rows] i32 (w words a cell, 2 to CELL_WORDS); pos, seqs: [m] i32; out: [n_kv, m] f32.
/// The caller's count of visible pairs (`p.visible`) becomes `out`'s
/// [`GpuTensor::finite`](crate::GpuTensor), as a write of those values
/// would have made it: attention's tile choice and the work counters read
/// it.
pub(crate) fn kq_mask(
    be: &GpuBackend,
    cells: &T,
    pos: &T,
    seqs: &T,
    p: &KqMask,
    out: &T,
) -> Result<()> {
    let (n_kv, m) = check::kq_mask(cells, pos, seqs, p, out)?;
    let total = n_kv * m;
    let small = |v: usize, what: &str| {
        u32::try_from(v).map_err(|_| BackendError::Shape {
            op: "kq_mask",
            detail: format!("{what} {v} over the kernel's u32 indices"),
        })
    };
    small(total, "n_kv x m")?;
    small((p.first_row + n_kv) * cells.desc.ne[0], "cell words")?;
    let (window, n_swa) = p.window.code();
    let params = [
        n_kv as u32,
        m as u32,
        p.first_row as u32,
        p.causal as u32,
        window,
        n_swa,
        p.alibi as u32,
        cells.desc.ne[0] as u32,
    ];
    let key = PipelineKey::new("kq_mask.wgsl", "main", 3, 1);
    be.launch(
        "kq_mask",
        key,
        [&[cells, pos, seqs], &[out]],
        &params,
        total.div_ceil(256),
    )?;
    out.finite
        .store(p.visible.unwrap_or(crate::tensor::UNKNOWN), Relaxed);
    Ok(())
}
