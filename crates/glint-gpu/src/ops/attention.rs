//! `shaders/attention.wgsl`: a batch of queries over a window of the KV
//! cache, one workgroup per (token, head), online softmax in f32.

use glint_backend::{check, AttnParams, BackendError, Result};

use super::{f16_cache, f32_bits, quant_cache, T};
use crate::pipelines::PipelineKey;
use crate::GpuBackend;

/// q: [head_dim, n_head, m] f32; k, v: [head_dim * n_head_kv, n_rows] f32
/// or f16; mask: [n_kv, m] f32; out: [head_dim * n_head, m] f32. One
/// workgroup per (token, head).
pub(crate) fn attention(be: &GpuBackend, qkvm: [&T; 4], p: &AttnParams, out: &T) -> Result<()> {
    let (m, f16, kv_q) = check_attention("attention", qkvm, p, out)?;
    let key = PipelineKey::new("attention.wgsl", "main", 4, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64)
        .with_flags(be.flags(true, f16));
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let (scale, softcap) = (f32_bits(p.scale), f32_bits(p.softcap));
    let params = [hd, nh, nkv, m, p.kv_start, p.n_kv].map(|v| v as u32);
    let params = [&params[..], &[scale, softcap]].concat();
    be.kv_read(&qkvm, &[], p, m);
    be.launch("attention", key, [&qkvm, &[out]], &params, m * nh)
}

/// Two-window SelfExtend: [`attention`] with the distant half (`q2`, `k2`,
/// `mask_far`, shaped as q, k, mask) bound after the mask (the `WINDOW`
/// variant of the same kernel).
pub(crate) fn attention_window(
    be: &GpuBackend,
    qkvm: [&T; 4],
    far: [&T; 3],
    p: &AttnParams,
    out: &T,
) -> Result<()> {
    check::attention_window(qkvm, far, p, out)?;
    let (m, f16, kv_q) = check_attention("attention_window", qkvm, p, out)?;
    let mut flags = be.flags(true, f16);
    flags.push(WINDOW);
    let key = PipelineKey::new("attention.wgsl", "main", 7, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64)
        .with_flags(flags);
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let (scale, softcap) = (f32_bits(p.scale), f32_bits(p.softcap));
    let params = [hd, nh, nkv, m, p.kv_start, p.n_kv].map(|v| v as u32);
    let params = [&params[..], &[scale, softcap]].concat();
    let [q, k, v, mask] = qkvm;
    let [q2, k2, mf] = far;
    be.kv_read(&qkvm, &[k2], p, m);
    be.launch(
        "attention_window",
        key,
        [&[q, k, v, mask, q2, k2, mf], &[out]],
        &params,
        m * nh,
    )
}

impl GpuBackend {
    /// Counts the K/V bytes an attention dispatch reads: each of its `m *
    /// n_head` workgroups reads its KV head's part of the `n_kv` rows of
    /// K, V and each of `more` (the grouped K).
    fn kv_read(&self, [_, k, v, _]: &[&T; 4], more: &[&T], p: &AttnParams, m: usize) {
        let per_row: usize = [k, v]
            .into_iter()
            .chain(more.iter())
            .map(|t| t.desc.row_bytes() / p.n_head_kv.max(1))
            .sum();
        let bytes = m * p.n_head * p.n_kv * per_row;
        crate::counters::Work::add(&self.work.kv_bytes_read, bytes as u64);
    }
}

/// Flag: the two-window SelfExtend variant of attention.wgsl.
const WINDOW: &str = "WINDOW";

/// The kernel keeps a head's query in workgroup memory of this many f32
/// (`MAX_HEAD_DIM` in attention.wgsl): a limit of this kernel, not of the op.
const MAX_HEAD_DIM: usize = 512;

/// The op's checks (shared with the cpu backend), then this kernel's
/// limits (one cache type, head_dim); `m`, whether the cache is F16 and
/// its `KV_Q` (quantized type) constant.
fn check_attention(
    op: &'static str,
    qkvm: [&T; 4],
    p: &AttnParams,
    out: &T,
) -> Result<(usize, bool, u32)> {
    let m = check::attention(qkvm, p, out)?;
    let [_, k, v, _] = qkvm;
    if v.desc.ty != k.desc.ty {
        // One KV_F16 constant and one binding type serve both.
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "k is {} but v is {}: this kernel takes one cache type",
                k.desc.ty, v.desc.ty
            ),
        });
    }
    if p.head_dim > MAX_HEAD_DIM {
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "head_dim {} is over this kernel's {MAX_HEAD_DIM}",
                p.head_dim
            ),
        });
    }
    Ok((m, f16_cache(op, k, "k")?, quant_cache(op, k, "k")?))
}
