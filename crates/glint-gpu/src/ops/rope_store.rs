//! `shaders/rope_store.wgsl`: rope(q), rope(k), set_rows(k), set_rows(v) of
//! one layer in one dispatch, for F32 and F16 caches.

use glint_backend::{check, GgmlType, Result, RopeParams};

use super::rope::rope_params;
use super::{f16_cache, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// q, qr: `[head_dim, n_head, m]`; k: `[head_dim, n_head_kv, m]`; v:
/// `[head_dim * n_head_kv, m]`; pos, rows: `[m]` i32; kc, vc: `[head_dim *
/// n_head_kv, n_rows]`. Returns `Ok(false)`, having recorded nothing, where
/// the fused kernel does not apply (quantized or mixed caches, Q and K rope
/// params that differ but in their head count, shapes it does not take):
/// the caller runs the four ops.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_store(
    be: &GpuBackend,
    [q, k, v]: [&T; 3],
    pos: &T,
    [pq, pk]: [&RopeParams; 2],
    qr: &T,
    rows: &T,
    [kc, vc]: [&T; 2],
) -> Result<bool> {
    let op = "rope_store";
    let m = check::rope(q, pos, pq, qr)?;
    let cache_ok = |c: &T| matches!(c.desc.ty, GgmlType::F32 | GgmlType::F16);
    let fits = RopeParams { n_head: 0, ..*pq } == RopeParams { n_head: 0, ..*pk }
        && kc.desc.ty == vc.desc.ty
        && cache_ok(kc)
        && kc.desc.ne[0] == pk.head_dim * pk.n_head
        && kc.desc.ne == vc.desc.ne
        && k.desc.n_elements() == pk.head_dim * pk.n_head * m
        && v.desc.n_elements() == pk.head_dim * pk.n_head * m
        && pk.head_dim.is_multiple_of(2);
    if !fits {
        return Ok(false);
    }
    // The same checks as the ops it stands for.
    check::set_rows(v, rows, vc)?;
    let f16 = f16_cache(op, kc, "kc")?;
    let n = kc.desc.ne[0];
    let per_row = if f16 { n / 2 } else { n };
    let mut params = rope_params(pq, m);
    params.extend([pk.n_head as u32, kc.desc.n_rows() as u32, per_row as u32]);
    let total = pq.head_dim / 2 * pq.n_head * m + 2 * per_row * m;
    let key = PipelineKey::new("rope_store.wgsl", "main", 5, 3)
        .with_constant("KV_F16", f16 as u32 as f64);
    be.launch(
        op,
        key,
        [&[q, k, v, pos, rows], &[qr, kc, vc]],
        &params,
        total.div_ceil(256),
    )?;
    Ok(true)
}
