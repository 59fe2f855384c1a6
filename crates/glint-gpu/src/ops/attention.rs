//! `shaders/attention.wgsl`: a batch of queries over a window of the KV
//! cache, one workgroup per (token, head), online softmax in f32.

use glint_backend::{AttnParams, GgmlType, Result};

use super::{check, f32_bits, kv_f16, want_type};
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// q: [head_dim, n_head, m] f32; k, v: [head_dim * n_head_kv, n_rows] f32
/// or f16; mask: [n_kv, m] f32; out: [head_dim * n_head, m] f32.
pub(crate) fn attention(
    be: &GpuBackend,
    [q, k, v, mask]: [&GpuTensor; 4],
    p: &AttnParams,
    out: &GpuTensor,
) -> Result<()> {
    let op = "attention";
    let f16 = check_attention(op, [q, k, v, mask], p, out)?;
    be.check_bindable(op, &[q, k, v, mask, out])?;
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let m = q.desc.ne[2] * q.desc.ne[3];
    be.dispatch(
        PipelineKey::new("attention.wgsl", "main", 4, 1)
            .with_constant("KV_F16", f16 as u32 as f64)
            .with_flags(be.flags(true, f16)),
        &[
            Bind::whole(q),
            Bind::whole(k),
            Bind::whole(v),
            Bind::whole(mask),
        ],
        &[Bind::whole(out)],
        &[
            hd as u32,
            nh as u32,
            nkv as u32,
            m as u32,
            p.kv_start as u32,
            p.n_kv as u32,
            f32_bits(p.scale),
            f32_bits(p.softcap),
        ],
        m * nh,
    )
}

/// Types and shapes; whether the cache is F16.
fn check_attention(
    op: &'static str,
    [q, k, v, mask]: [&GpuTensor; 4],
    p: &AttnParams,
    out: &GpuTensor,
) -> Result<bool> {
    want_type(op, q, &[GgmlType::F32], "q")?;
    want_type(op, mask, &[GgmlType::F32], "mask")?;
    want_type(op, out, &[GgmlType::F32], "out")?;
    let f16 = kv_f16(op, k, "k")?;
    check(v.desc.ty == k.desc.ty, op, || {
        format!("k is {} but v is {}", k.desc.ty.name(), v.desc.ty.name())
    })?;
    let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
    let m = q.desc.ne[2] * q.desc.ne[3];
    check(
        nkv > 0 && nh % nkv == 0 && (1..=512).contains(&hd),
        op,
        || format!("n_head {nh}, n_head_kv {nkv}, head_dim {hd} (<= 512)"),
    )?;
    check(q.desc.ne[0] == hd && q.desc.ne[1] == nh, op, || {
        format!("q {:?}, expected [{hd}, {nh}, m]", q.desc.ne)
    })?;
    for t in [k, v] {
        check(
            t.desc.ne[0] == hd * nkv && p.kv_start + p.n_kv <= t.desc.n_rows(),
            op,
            || {
                format!(
                    "cache {:?}: rows {}..{} of [{}, n_rows]",
                    t.desc.ne,
                    p.kv_start,
                    p.kv_start + p.n_kv,
                    hd * nkv
                )
            },
        )?;
    }
    check(
        mask.desc.ne[0] == p.n_kv && mask.desc.n_rows() == m,
        op,
        || format!("mask {:?}, expected [{}, {m}]", mask.desc.ne, p.n_kv),
    )?;
    check(
        out.desc.ne[0] == hd * nh && out.desc.n_rows() == m,
        op,
        || format!("out {:?}, expected [{}, {m}]", out.desc.ne, hd * nh),
    )?;
    Ok(f16)
}
