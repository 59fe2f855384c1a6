//! `shaders/rope_store.wgsl`: rope(q), rope(k), set_rows(k), set_rows(v) of
//! one layer in one dispatch, for F32 and F16 caches; with QK-norm (its
//! `NORM` variant) the per-head rms_norm of q and k before them.

use glint_backend::{check, GgmlType, Result, RopeParams};

use super::rope::rope_params;
use super::{f16_cache, f32_bits, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// q, qr: `[head_dim, n_head, m]`; k: `[head_dim, n_head_kv, m]`; v:
/// `[head_dim * n_head_kv, m]`; pos, rows: `[m]` i32; kc, vc: `[head_dim *
/// n_head_kv, n_rows]`; `norm`: the QK-norm weights (`[head_dim]` F32
/// each) and eps. Returns `Ok(false)`, having recorded nothing, where the
/// fused kernel does not apply (quantized or mixed caches, Q and K rope
/// params that differ but in their head count, shapes it does not take; with
/// a norm, a head over 512 or an adapter binding fewer than 10 storage
/// buffers to a kernel): the caller runs the ops it stands for.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_store(
    be: &GpuBackend,
    [q, k, v]: [&T; 3],
    norm: Option<([&T; 2], f32)>,
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
    // Per-head norms of per-head rows, as the default's rms_norms take
    // them: q and k shaped [head_dim, heads, m], the weights [head_dim].
    let per_head = |t: &T| t.desc.ne[0] == pq.head_dim;
    let norm_fits = norm.is_none_or(|([qn, kn], _)| {
        pq.head_dim <= NORM_MAX_HEAD_DIM
            && per_head(q)
            && per_head(k)
            && qn.desc.ne == [pq.head_dim, 1, 1, 1]
            && kn.desc.ne == [pq.head_dim, 1, 1, 1]
            && be.limits().max_storage_buffers_per_shader_stage >= NORM_BINDINGS
    });
    if !fits || !norm_fits {
        return Ok(false);
    }
    // The same checks as the ops it stands for.
    check::set_rows(v, rows, vc)?;
    if let Some(([qn, kn], _)) = norm {
        check::rms_norm(q, Some(qn), qr)?;
        // k's own output is the cache: its weight checked as q's (the
        // shapes were checked above).
        if kn.desc.ty != GgmlType::F32 {
            return Err(glint_backend::BackendError::Shape {
                op,
                detail: format!("kn is {}, not F32", kn.desc.ty),
            });
        }
    }
    let f16 = f16_cache(op, kc, "kc")?;
    let n = kc.desc.ne[0];
    let per_row = if f16 { n / 2 } else { n };
    let mut params = rope_params(pq, m);
    let eps = norm.map_or(0.0, |(_, eps)| eps);
    params.extend([
        pk.n_head as u32,
        kc.desc.n_rows() as u32,
        per_row as u32,
        f32_bits(eps),
    ]);
    match norm {
        None => {
            let key = PipelineKey::new("rope_store.wgsl", "main", 5, 3)
                .with_constant("KV_F16", f16 as u32 as f64);
            let total = pq.head_dim / 2 * pq.n_head * m + 2 * per_row * m;
            let ins = [q, k, v, pos, rows];
            be.launch(op, key, [&ins, &[qr, kc, vc]], &params, total.div_ceil(256))?;
        }
        Some(([qn, kn], _)) => {
            // A workgroup a q head, a k head, then 256 V words each.
            let heads = (pq.n_head + pk.n_head) * m;
            let groups = heads + (per_row * m).div_ceil(256);
            // rms_norm.wgsl's reduction variant, so the same bits.
            let mut flags = be.flags(true, false);
            flags.push(NORM);
            let key = PipelineKey::new("rope_store.wgsl", "main", 7, 3)
                .with_constant("KV_F16", f16 as u32 as f64)
                .with_flags(flags);
            let ins = [q, k, v, pos, rows, qn, kn];
            be.launch(op, key, [&ins, &[qr, kc, vc]], &params, groups)?;
        }
    }
    Ok(true)
}

/// Flag: rope_store.wgsl's variant that RMS-norms q and k per head first.
const NORM: &str = "NORM";

/// The NORM variant keeps a head in workgroup memory of this many f32.
const NORM_MAX_HEAD_DIM: usize = 512;

/// Storage buffers the NORM variant binds (7 inputs, 3 outputs).
const NORM_BINDINGS: u32 = 10;
