//! Every op of the wgpu backend against an f64 reference written from the
//! op's doc comment, on random non-zero inputs with fresh seeds, sizes that
//! do not divide the workgroup sizes, and poisoned outputs.

mod common;

use common::*;
use glint_backend::{
    AttnParams, Backend, GgmlType, Glu, PostAdd, QkNorm, RopeMode, RopeParams, SharedBytes, Tensor,
    TensorDesc, Unary, Usage,
};
use glint_gpu::{GpuBackend, GpuOptions};
use half::f16;

const F32: GgmlType = GgmlType::F32;

#[test]
fn adapter_is_vulkan() {
    let b = gpu();
    assert_eq!(
        b.adapter_info().backend,
        wgpu::Backend::Vulkan,
        "{}",
        b.name()
    );
    assert!(
        b.name().starts_with("wgpu: ") && b.name().contains("(Vulkan; "),
        "{}",
        b.name()
    );
    assert!(!glint_gpu::list_adapters().is_empty());
}

/// lavapipe has SHADER_F16, SUBGROUP and IMMEDIATES (Vulkan's push
/// constants): the features-on backend must use all three (else the tests
/// run on it would not exercise those variants), the features-off one none,
/// and each says so in its name.
#[test]
fn both_feature_configurations_are_what_they_claim() {
    let (on, off) = (gpu_on(), gpu_off());
    let used = |f16, subgroups, immediates| glint_gpu::FeaturesUsed {
        f16,
        subgroups,
        immediates,
        int8: false,
    };
    assert_eq!(on.features_used(), used(true, true, true), "{}", on.name());
    assert!(
        on.name()
            .ends_with("; f16, subgroups, matvec rows 2 at once, immediates)"),
        "{}",
        on.name()
    );
    assert_eq!(
        off.features_used(),
        used(false, false, false),
        "{}",
        off.name()
    );
    assert!(off.features().is_empty(), "{:?}", off.features());
    assert!(
        off.name().ends_with("; no optional features)"),
        "{}",
        off.name()
    );
    // One at a time.
    let only = |opts: glint_gpu::GpuOptions| {
        glint_gpu::GpuBackend::new(opts)
            .expect("a wgpu adapter")
            .features_used()
    };
    let no_subgroups = glint_gpu::GpuOptions {
        disable_subgroups: true,
        ..Default::default()
    };
    assert_eq!(only(no_subgroups), used(true, false, true));
    let no_immediates = glint_gpu::GpuOptions {
        disable_immediates: true,
        ..Default::default()
    };
    assert_eq!(only(no_immediates), used(true, true, false));
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn binary_ops_with_and_without_broadcast() {
    let mut r = Rng(seed());
    let (n, m) = (1000, 13);
    let a = r.vec_scaled(n * m, 3.0);
    let b_full = r.vec_scaled(n * m, 3.0);
    let b_row = r.vec_scaled(n, 3.0);
    let ta = f32s([n, m, 1, 1], &a);
    for (b, ne) in [(&b_full, [n, m, 1, 1]), (&b_row, [n, 1, 1, 1])] {
        let tb = f32s(ne, b);
        let bi = |i: usize| b[i % b.len()] as f64;
        for op in ["add", "mul"] {
            let out = poisoned(F32, [n, m, 1, 1]);
            let want: Vec<f64> = if op == "add" {
                gpu().add(&ta, &tb, &out).unwrap();
                a.iter()
                    .enumerate()
                    .map(|(i, &x)| x as f64 + bi(i))
                    .collect()
            } else {
                gpu().mul(&ta, &tb, &out).unwrap();
                a.iter()
                    .enumerate()
                    .map(|(i, &x)| x as f64 * bi(i))
                    .collect()
            };
            assert_close(op, &read_f32(&out), &want, tol::ELEMENTWISE);
        }
    }
    let tb = f32s([n, m, 1, 1], &b_full);
    for (op, f) in [(Glu::SwiGlu, silu as fn(f64) -> f64), (Glu::GeGlu, gelu)] {
        let out = poisoned(F32, [n, m, 1, 1]);
        gpu().glu(op, &ta, &tb, &out).unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b_full)
            .map(|(&g, &u)| f(g as f64) * u as f64)
            .collect();
        assert_close(&format!("{op:?}"), &read_f32(&out), &want, tol::ACTIVATION);
    }
}

#[test]
fn unary_ops_and_scale() {
    let mut r = Rng(seed());
    let (n, m) = (999, 7);
    let mut x = r.vec_scaled(n * m, 8.0);
    x[0] = 40.0; // tanh/exp saturation must not give NaN
    x[1] = -40.0;
    let tx = f32s([n, m, 1, 1], &x);
    for (op, f) in [(Unary::Silu, silu as fn(f64) -> f64), (Unary::Gelu, gelu)] {
        let out = poisoned(F32, [n, m, 1, 1]);
        gpu().unary(op, &tx, &out).unwrap();
        let want: Vec<f64> = x.iter().map(|&v| f(v as f64)).collect();
        assert_close(&format!("{op:?}"), &read_f32(&out), &want, tol::ACTIVATION);
    }
    let out = poisoned(F32, [n, m, 1, 1]);
    gpu().scale(&tx, -0.37, &out).unwrap();
    let want: Vec<f64> = x.iter().map(|&v| v as f64 * -0.37f32 as f64).collect();
    assert_close("scale", &read_f32(&out), &want, tol::ELEMENTWISE);
}

#[test]
fn rms_norm_with_and_without_weight() {
    each_gpu(|| {
        let mut r = Rng(seed());
        for (n, m) in [(1000, 7), (67, 13)] {
            let x = r.vec_scaled(n * m, 2.0);
            let w = r.vec_scaled(n, 1.5);
            let (tx, tw) = (f32s([n, m, 1, 1], &x), f32s([n, 1, 1, 1], &w));
            for with_w in [true, false] {
                let out = poisoned(F32, [n, m, 1, 1]);
                gpu()
                    .rms_norm(&tx, with_w.then_some(&tw), 1e-5, &out)
                    .unwrap();
                let mut want = Vec::new();
                for j in 0..m {
                    let row = &x[j * n..(j + 1) * n];
                    let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n as f64;
                    let s = 1.0 / (ms + 1e-5f32 as f64).sqrt();
                    want.extend(
                        row.iter()
                            .zip(&w)
                            .map(|(&v, &wi)| v as f64 * s * if with_w { wi as f64 } else { 1.0 }),
                    );
                }
                assert_close("rms_norm", &read_f32(&out), &want, tol::REDUCTION);
            }
        }
    });
}

#[test]
fn softmax_and_argmax() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n, m) = (1000, 13);
        let mut x = r.vec_scaled(n * m, 20.0);
        // A tie: the first index wins.
        x[5 * n + 17] = 30.0;
        x[5 * n + 900] = 30.0;
        let tx = f32s([n, m, 1, 1], &x);
        let out = poisoned(F32, [n, m, 1, 1]);
        gpu().softmax(&tx, &out).unwrap();
        let idx = poisoned(GgmlType::I32, [m, 1, 1, 1]);
        gpu().argmax(&tx, &idx).unwrap();
        let mut want = Vec::new();
        let mut want_idx = Vec::new();
        for j in 0..m {
            let row: Vec<f64> = x[j * n..(j + 1) * n].iter().map(|&v| v as f64).collect();
            let mx = row.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = row.iter().map(|v| (v - mx).exp()).sum();
            want.extend(row.iter().map(|v| (v - mx).exp() / s));
            want_idx.push(row.iter().position(|&v| v == mx).unwrap() as i32);
        }
        assert_close("softmax", &read_f32(&out), &want, tol::REDUCTION);
        assert_eq!(read_i32(&idx), want_idx);
        assert_eq!(want_idx[5], 17);
    });
}

/// The doc formula of `RopeParams`, in f64: rotate `x` (one head) at `pos`.
fn rope_ref(x: &[f64], pos: f64, p: &RopeParams, with_mscale: bool) -> Vec<f64> {
    let mut out = x.to_vec();
    let [lo, hi] = p.yarn_corr_dims();
    for i in 0..p.n_rot / 2 {
        let te = pos * (p.freq_base as f64).powf(-2.0 * i as f64 / p.n_rot as f64);
        let ti = p.freq_scale as f64 * te;
        let (theta, mut ms) = if p.ext_factor != 0.0 {
            let y = (i as f64 - lo as f64) / (0.001f64).max(hi as f64 - lo as f64);
            let ramp = (1.0 - y.clamp(0.0, 1.0)) * p.ext_factor as f64;
            (
                ti * (1.0 - ramp) + te * ramp,
                p.attn_factor as f64 * (1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln()),
            )
        } else {
            (ti, p.attn_factor as f64)
        };
        if !with_mscale {
            ms = 1.0;
        }
        let (a, b) = match p.mode {
            RopeMode::Norm => (2 * i, 2 * i + 1),
            RopeMode::Neox => (i, i + p.n_rot / 2),
        };
        let (x0, x1) = (x[a], x[b]);
        out[a] = (x0 * theta.cos() - x1 * theta.sin()) * ms;
        out[b] = (x0 * theta.sin() + x1 * theta.cos()) * ms;
    }
    out
}

/// [`rope_ref`] (with mscale) of every head of `x` ([head_dim, n_head, m]),
/// token t at `pos[t]`.
fn rope_ref_heads(x: &[f32], pos: &[i32], p: &RopeParams) -> Vec<f64> {
    let (hd, nh) = (p.head_dim, p.n_head);
    let mut want = Vec::new();
    for (t, &q) in pos.iter().enumerate() {
        for h in 0..nh {
            let head: Vec<f64> = x[(t * nh + h) * hd..][..hd]
                .iter()
                .map(|&v| v as f64)
                .collect();
            want.extend(rope_ref(&head, q as f64, p, true));
        }
    }
    want
}

fn yarn(mode: RopeMode, head_dim: usize, n_rot: usize, n_head: usize) -> RopeParams {
    RopeParams {
        n_rot,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 0.8,
        n_ctx_orig: 4096,
        ..RopeParams::plain(mode, head_dim, n_head, 10000.0)
    }
}

#[test]
fn rope_norm_neox_partial_and_yarn() {
    let mut r = Rng(seed());
    let (hd, nh, m) = (64, 3, 7);
    for mode in [RopeMode::Norm, RopeMode::Neox] {
        for p in [
            RopeParams::plain(mode, hd, nh, 10000.0),
            RopeParams {
                n_rot: 32,
                ..RopeParams::plain(mode, hd, nh, 500000.0)
            },
            yarn(mode, hd, 48, nh),
        ] {
            let x = r.vec_scaled(hd * nh * m, 2.0);
            let pos: Vec<i32> = (0..m).map(|_| r.below(300) as i32).collect();
            let tx = f32s([hd, nh, m, 1], &x);
            let tp = i32s(&pos);
            let out = poisoned(F32, [hd, nh, m, 1]);
            gpu().rope(&tx, &tp, &p, &out).unwrap();
            let want = rope_ref_heads(&x, &pos, &p);
            assert_close(&format!("rope {p:?}"), &read_f32(&out), &want, tol::ROPE);
        }
    }
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

fn cache(ty: GgmlType, n: usize, rows: usize) -> glint_gpu::GpuTensor {
    let t = gpu()
        .alloc(common::desc(ty, [n, rows, 1, 1], Usage::KvCache))
        .unwrap();
    let bytes = t_bytes(ty, n * rows);
    gpu().write(&t, 0, &vec![0xFF; bytes]).unwrap();
    t
}

fn t_bytes(ty: GgmlType, n: usize) -> usize {
    ty.bytes_for(n as u64).unwrap() as usize
}

/// Read a cache as f32 values.
fn read_cache(t: &glint_gpu::GpuTensor, ty: GgmlType, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; t_bytes(ty, n)];
    gpu().read(t, 0, &mut b).unwrap();
    match ty {
        GgmlType::F16 => b
            .chunks(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => bytemuck::cast_slice(&b).to_vec(),
    }
}

#[test]
fn set_rows_f32_and_f16() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n, m, rows) = (96, 13, 40);
        for ty in [GgmlType::F32, GgmlType::F16] {
            let src = r.vec_scaled(n * m, 4.0);
            let mut idx: Vec<i32> = (0..rows as i32).collect();
            for i in (1..idx.len()).rev() {
                idx.swap(i, r.below(i + 1));
            }
            idx.truncate(m);
            let dst = cache(ty, n, rows);
            gpu()
                .set_rows(&f32s([n, m, 1, 1], &src), &i32s(&idx), &dst)
                .unwrap();
            let got = read_cache(&dst, ty, n * rows);
            for (i, &row) in idx.iter().enumerate() {
                let want: Vec<f64> = src[i * n..(i + 1) * n]
                    .iter()
                    .map(|&v| {
                        if ty == GgmlType::F16 {
                            f16_round(v) as f64
                        } else {
                            v as f64
                        }
                    })
                    .collect();
                assert_close("set_rows", &got[row as usize * n..][..n], &want, 0.0);
            }
        }
    });
}

#[test]
fn attention_gqa_mask_softcap_window_f32_f16() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let n_rows = 700;
        // Groups of 3 query heads a KV head (one workgroup takes them), of
        // 10 (two workgroups of 5) and of 7 at head_dim 256 (4 + 3: the
        // last workgroup's fourth head is idle and writes nothing).
        // Then prefill batches, which run by tiles of tokens
        // (ops/attention.rs's tile_shape): SmolLM2's heads (3 a KV head,
        // tiles of 10 tokens, the last one short), heads of 256 without GQA
        // (tiles of 8), a group of 10 at head_dim 96 (two workgroups of 5
        // heads, tiles of 4) and 3 heads of 40 (tiles of 10); 4 heads of
        // 256 a KV head (Gemma 3's) would make tiles of 2 and keep `main`.
        let shapes = [
            (40, 6, 2, 5),
            (64, 20, 2, 3),
            (256, 7, 1, 2),
            (64, 9, 3, 37),
            (256, 4, 4, 70),
            (96, 20, 2, 16),
            (40, 6, 2, 45),
            (256, 8, 2, 40),
        ];
        for ((hd, nh, nkv, m), ty) in shapes
            .into_iter()
            .flat_map(|s| [(s, GgmlType::F32), (s, GgmlType::F16)])
        {
            // 30, 60 and 14 (token, head) rows: spans of 600 and 663 cells
            // split into 3 (split KV and its combine pass:
            // ops/attention.rs's n_splits), 300 cells do not.
            for (softcap, kv_start, n_kv) in
                [(0.0f32, 0usize, 600usize), (30.0, 37, 663), (0.0, 11, 300)]
            {
                let kvals = r.vec_scaled(hd * nkv * n_rows, 1.5);
                let vvals = r.vec_scaled(hd * nkv * n_rows, 1.5);
                let q = r.vec_scaled(hd * nh * m, 1.5);
                let (k, v) = (cache(ty, hd * nkv, n_rows), cache(ty, hd * nkv, n_rows));
                let all: Vec<i32> = (0..n_rows as i32).collect();
                gpu()
                    .set_rows(&f32s([hd * nkv, n_rows, 1, 1], &kvals), &i32s(&all), &k)
                    .unwrap();
                gpu()
                    .set_rows(&f32s([hd * nkv, n_rows, 1, 1], &vvals), &i32s(&all), &v)
                    .unwrap();
                let kr = read_cache(&k, ty, hd * nkv * n_rows);
                let vr = read_cache(&v, ty, hd * nkv * n_rows);
                // Causal-ish mask with a bias, and token 3 sees nothing.
                let mut mask = vec![0.0f32; n_kv * m];
                for i in 0..m {
                    for j in 0..n_kv {
                        mask[i * n_kv + j] = if i == 3 || j > n_kv - 50 + i * 10 {
                            f32::NEG_INFINITY
                        } else if j % 7 == 0 {
                            -0.5
                        } else {
                            0.0
                        };
                    }
                }
                let p = AttnParams {
                    softcap,
                    kv_start,
                    ..AttnParams::new(nh, nkv, hd, n_kv)
                };
                let out = poisoned(F32, [hd * nh, m, 1, 1]);
                gpu()
                    .attention(
                        &f32s([hd, nh, m, 1], &q),
                        &k,
                        &v,
                        &f32s([n_kv, m, 1, 1], &mask),
                        &p,
                        &out,
                    )
                    .unwrap();
                let mut want = vec![0.0f64; hd * nh * m];
                for i in 0..m {
                    for h in 0..nh {
                        let hk = h / (nh / nkv);
                        let qh = &q[(i * nh + h) * hd..][..hd];
                        let mut s: Vec<f64> = (0..n_kv)
                            .map(|j| {
                                let kb = (kv_start + j) * hd * nkv + hk * hd;
                                let mut x: f64 =
                                    (0..hd).map(|d| qh[d] as f64 * kr[kb + d] as f64).sum();
                                if softcap > 0.0 {
                                    x = softcap as f64 * (x / softcap as f64).tanh();
                                }
                                x * p.scale as f64 + mask[i * n_kv + j] as f64
                            })
                            .collect();
                        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        if mx == f64::NEG_INFINITY {
                            continue;
                        }
                        s.iter_mut().for_each(|x| *x = (*x - mx).exp());
                        let sum: f64 = s.iter().sum();
                        for d in 0..hd {
                            let o: f64 = (0..n_kv)
                                .map(|j| s[j] * vr[(kv_start + j) * hd * nkv + hk * hd + d] as f64)
                                .sum();
                            want[(i * nh + h) * hd + d] = o / sum;
                        }
                    }
                }
                let t = tol::attn(ty);
                assert_close(
                    &format!("attention {ty:?} {hd}x{nh}/{nkv} softcap {softcap}"),
                    &read_f32(&out),
                    &want,
                    t,
                );
            }
        }
    });
}

/// Split KV's structure, on a backend of its own (the shared ones' counters
/// move with other tests): a decode row over 4096 cells is two dispatches
/// (the split kernel and the combine pass), its partials buffer is made on
/// the first call only and shows in the memory report as scratch; a span
/// under two chunks stays one dispatch. The values are
/// attention_gqa_mask_softcap_window_f32_f16's.
#[test]
fn split_attention_is_two_dispatches_and_allocates_once() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let (hd, nh, nkv, n_rows) = (64, 4, 2, 4096);
    let buf =
        |ty: GgmlType, ne: [usize; 4]| be.alloc(common::desc(ty, ne, Usage::Scratch)).unwrap();
    let (k, v) = (
        buf(F32, [hd * nkv, n_rows, 1, 1]),
        buf(F32, [hd * nkv, n_rows, 1, 1]),
    );
    let q = buf(F32, [hd, nh, 1, 1]);
    let out = buf(F32, [hd * nh, 1, 1, 1]);
    let mut r = Rng(seed());
    be.write(&q, 0, bytemuck::cast_slice(&r.vec_scaled(hd * nh, 1.0)))
        .unwrap();
    let kv = r.vec_scaled(hd * nkv * n_rows, 1.0);
    be.write(&k, 0, bytemuck::cast_slice(&kv)).unwrap();
    be.write(&v, 0, bytemuck::cast_slice(&kv)).unwrap();
    let step = |n_kv: usize| {
        let mask = buf(F32, [n_kv, 1, 1, 1]);
        be.write(&mask, 0, bytemuck::cast_slice(&vec![0.0f32; n_kv]))
            .unwrap();
        let p = AttnParams {
            scale: 0.125,
            ..AttnParams::new(nh, nkv, hd, n_kv)
        };
        let before = be.work_counters();
        let scratch = be.memory().scratch;
        be.attention(&q, &k, &v, &mask, &p, &out).unwrap();
        (
            be.work_counters().since(&before),
            be.memory().scratch - scratch,
        )
    };
    // 4 rows over 4096 cells: 16 splits of (64 + 2) f32 each.
    let (first, grew) = step(4096);
    assert_eq!((first.dispatches, first.buffers_created), (2, 1));
    assert_eq!(grew, 4 * 16 * (64 + 2) * 4);
    let (again, grew) = step(4096);
    assert_eq!((again.dispatches, again.buffers_created, grew), (2, 0, 0));
    let (short, _) = step(300);
    assert_eq!((short.dispatches, short.buffers_created), (1, 0));
}

/// Bind groups are cached by the buffers they name: an op run again on the
/// same tensors (or a view of them) makes none, one on a new tensor makes
/// its own, and after a tensor is dropped a tensor made in its place gets
/// a group of its own (its buffer is never taken for the dropped one's),
/// and the op still reads what it was given.
#[test]
fn bind_groups_are_made_once_for_their_buffers() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let n = 300;
    let mut r = Rng(seed());
    let (va, vb) = (r.vec(n), r.vec(n));
    let a = f32s_on(&be, [n, 1, 1, 1], &va);
    let out = f32s_on(&be, [n, 1, 1, 1], &vec![0.0; n]);
    let made = |b: &glint_gpu::GpuTensor| {
        let before = be.work_counters();
        be.add(&a, b, &out).unwrap();
        let c = be.work_counters().since(&before);
        assert_eq!(c.dispatches, 1);
        let mut got = vec![0f32; n];
        be.read(&out, 0, bytemuck::cast_slice_mut(&mut got))
            .unwrap();
        (c.bind_groups_created, got)
    };
    let sum = |vb: &[f32]| va.iter().zip(vb).map(|(x, y)| x + y).collect::<Vec<_>>();
    let b = f32s_on(&be, [n, 1, 1, 1], &vb);
    assert_eq!(made(&b), (1, sum(&vb)));
    assert_eq!(made(&b), (0, sum(&vb)));
    // A view of the whole of `b` binds the same bytes.
    let whole = be.view(&b, [n, 1, 1, 1]).unwrap();
    assert_eq!(made(&whole), (0, sum(&vb)));
    drop((whole, b));
    let vc = r.vec(n);
    let c = f32s_on(&be, [n, 1, 1, 1], &vc);
    assert_eq!(made(&c), (1, sum(&vc)));
    assert_eq!(made(&c), (0, sum(&vc)));
}

/// Attention of `q` (`[head_dim, n_head, m]`) over `k`, `v` under `mask`
/// (`[n_kv, m]`) on `be`, a backend of the test's own: what the call
/// counted, and its output read back.
fn attention_on(
    be: &GpuBackend,
    [q, k, v]: [&glint_gpu::GpuTensor; 3],
    mask: &[f32],
    p: &AttnParams,
) -> (glint_gpu::GpuCounters, Vec<f32>) {
    let m = mask.len() / p.n_kv;
    let mt = f32s_on(be, [p.n_kv, m, 1, 1], mask);
    let out = be
        .alloc(common::desc(
            F32,
            [p.head_dim * p.n_head, m, 1, 1],
            Usage::Scratch,
        ))
        .unwrap();
    let before = be.work_counters();
    be.attention(q, k, v, &mt, p, &out).unwrap();
    let counted = be.work_counters().since(&before);
    let mut bytes = vec![0u8; p.head_dim * p.n_head * m * 4];
    be.read(&out, 0, &mut bytes).unwrap();
    let values = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    (counted, values.collect())
}

/// Prefill attention by tiles, on a backend of its own: one dispatch of
/// one workgroup per (tile of 10 tokens, KV head) whose modeled K/V reads
/// are the span's once a tile, and the same values, to the attention
/// tolerance, as a workgroup a token (`main`, which a batch under 16
/// tokens takes), which reads only the cells each token's mask lets
/// through.
#[test]
fn prefill_attention_reads_the_span_once_a_tile() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let (hd, nh, nkv, n_kv) = (64, 9, 3, 300);
    let mut r = Rng(seed());
    let kv_ne = [hd * nkv, n_kv, 1, 1];
    let k = f32s_on(&be, kv_ne, &r.vec_scaled(hd * nkv * n_kv, 1.0));
    let v = f32s_on(&be, kv_ne, &r.vec_scaled(hd * nkv * n_kv, 1.0));
    let q_all = r.vec_scaled(hd * nh * 37, 1.0);
    let p = AttnParams {
        scale: 0.125,
        ..AttnParams::new(nh, nkv, hd, n_kv)
    };
    // Tokens t0 .. t0 + m, causal over the last 37 cells of the span.
    let run = |t0: usize, m: usize| {
        let q = f32s_on(&be, [hd, nh, m, 1], &q_all[t0 * hd * nh..][..m * hd * nh]);
        let mask: Vec<f32> = (t0..t0 + m)
            .flat_map(|t| {
                (0..n_kv).map(move |j| {
                    if j > n_kv - 37 + t {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        attention_on(&be, [&q, &k, &v], &mask, &p)
    };
    let (tiled, got) = run(0, 37);
    assert_eq!(tiled.dispatches, 1);
    // 4 tiles (10, 10, 10, 7 tokens) x 3 KV heads x 300 cells x a K and a
    // V head row of 64 f32.
    assert_eq!(tiled.kv_bytes_read, 4 * 3 * 300 * 2 * 64 * 4);
    // The same tokens a workgroup each (batches of 15 and 7, under the 16
    // of a prefill tile), reading only the cells each mask lets through.
    let mut want = Vec::new();
    let mut per_token = 0;
    for (t0, m) in [(0, 15), (15, 15), (30, 7)] {
        let (c, o) = run(t0, m);
        want.extend(o.iter().map(|&x| x as f64));
        let cells: usize = (t0..t0 + m).map(|t| n_kv - 36 + t).sum();
        assert_eq!(c.kv_bytes_read as usize, cells * 3 * 2 * 64 * 4);
        per_token += c.kv_bytes_read;
    }
    // 10434 cells a KV head a token against 1200 a tile.
    assert!(
        per_token > 8 * tiled.kv_bytes_read,
        "{per_token} vs {tiled:?}"
    );
    assert_close("tiled attention", &got, &want, tol::attn(F32));
    // A sparse batch (each token sees 5 cells: sequences of their own over
    // one span) reads fewer cells a token than tiles would read: `main`.
    let sparse: Vec<f32> = (0..37)
        .flat_map(|t| (0..n_kv).map(move |j| if j / 5 == t { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let q = f32s_on(&be, [hd, nh, 37, 1], &q_all);
    let (c, _) = attention_on(&be, [&q, &k, &v], &sparse, &p);
    assert_eq!(c.kv_bytes_read, 37 * 5 * 3 * 2 * 64 * 4);
}

/// Tiles of one token (`GpuOptions::decode_tiles`, `GLINT_ATTN_TILE=all`)
/// against `main` on the same inputs: the same values to the attention
/// tolerance, the same dispatches (a split span: the kernel and the
/// combine pass) and the same modeled K/V reads (only the cells a token's
/// mask lets through), on SmolLM2's and Gemma 3's heads, f32 and f16
/// caches, spans that split and spans that do not.
#[test]
fn one_token_tiles_match_main() {
    // Profiled, so each call's kernel is known by its label.
    let opts = GpuOptions {
        profile: true,
        ..Default::default()
    };
    let main = GpuBackend::new(opts.clone()).expect("a wgpu adapter");
    let tiles = GpuBackend::new(GpuOptions {
        decode_tiles: true,
        ..opts
    })
    .expect("a wgpu adapter");
    let mut r = Rng(seed());
    for ((hd, nh, nkv), ty) in [(64, 9, 3), (256, 4, 1)]
        .into_iter()
        .flat_map(|s| [(s, F32), (s, GgmlType::F16), (s, GgmlType::Q8_0)])
    {
        for (m, n_kv) in [(1, 300), (3, 1500), (5, 77)] {
            let kv = r.vec_scaled(hd * nkv * n_kv, 1.5);
            let vv = r.vec_scaled(hd * nkv * n_kv, 1.5);
            let q = r.vec_scaled(hd * nh * m, 1.5);
            // Token t sees the cells up to n_kv - m + t but every fifth,
            // with a bias on every seventh; of 3 tokens (a split span) the
            // second sees nothing.
            let mask: Vec<f32> = (0..m)
                .flat_map(|t| {
                    (0..n_kv).map(move |j| match j {
                        _ if j > n_kv - m + t || j % 5 == 1 || (m, t) == (3, 1) => {
                            f32::NEG_INFINITY
                        }
                        _ if j % 7 == 0 => -0.5,
                        _ => 0.0,
                    })
                })
                .collect();
            let p = AttnParams {
                softcap: if m == 3 { 20.0 } else { 0.0 },
                ..AttnParams::new(nh, nkv, hd, n_kv)
            };
            let run = |be: &GpuBackend| {
                let buf = |ty: GgmlType, ne: [usize; 4]| {
                    be.alloc(common::desc(ty, ne, Usage::KvCache)).unwrap()
                };
                let (k, v) = (
                    buf(ty, [hd * nkv, n_kv, 1, 1]),
                    buf(ty, [hd * nkv, n_kv, 1, 1]),
                );
                let all: Vec<i32> = (0..n_kv as i32).collect();
                let rows = buf(GgmlType::I32, [n_kv, 1, 1, 1]);
                be.write(&rows, 0, bytemuck::cast_slice(&all)).unwrap();
                for (dst, vals) in [(&k, &kv), (&v, &vv)] {
                    let src = f32s_on(be, [hd * nkv, n_kv, 1, 1], vals);
                    be.set_rows(&src, &rows, dst).unwrap();
                }
                let qt = f32s_on(be, [hd, nh, m, 1], &q);
                be.take_profile().unwrap();
                let (counted, out) = attention_on(be, [&qt, &k, &v], &mask, &p);
                // The attention kernel's entry (the combine pass aside).
                let entry: Vec<String> = be
                    .take_profile()
                    .unwrap()
                    .unwrap()
                    .into_iter()
                    .filter_map(|k| k.label.strip_prefix("attention:").map(str::to_string))
                    .map(|l| l.split([' ', '[']).next().unwrap_or("").to_string())
                    .collect();
                (counted, out, entry)
            };
            let what = format!("{hd}x{nh}/{nkv} {ty:?} m {m} n_kv {n_kv}");
            let ((cm, om, em), (ct, ot, et)) = (run(&main), run(&tiles));
            assert_eq!(
                (em, et),
                (vec!["main".to_string()], vec!["tile".to_string()]),
                "{what}"
            );
            assert_eq!(cm.dispatches, ct.dispatches, "{what}");
            assert_eq!(cm.dispatches, if n_kv >= 512 { 2 } else { 1 }, "{what}");
            assert_eq!(cm.kv_bytes_read, ct.kv_bytes_read, "{what}");
            let want: Vec<f64> = om.iter().map(|&x| x as f64).collect();
            assert_close(&what, &ot, &want, tol::attn(ty));
        }
    }
}

/// A cell no token of a tile sees can hold anything, another sequence's
/// inf or NaN among it: a prefill tile loads its K/V with the rest of the
/// chunk, and it must not reach the rows (each weighs it 0). The same
/// batch with that cell's K/V zeroed gives the same bits, all finite.
#[test]
fn a_hidden_cells_inf_and_nan_stay_out_of_tiles() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let (hd, nh, nkv, m, n_kv, bad) = (64, 9, 3, 20, 100, 95);
    let mut r = Rng(seed());
    let q = r.vec_scaled(hd * nh * m, 1.0);
    let mut k = r.vec_scaled(hd * nkv * n_kv, 1.0);
    let mut v = r.vec_scaled(hd * nkv * n_kv, 1.0);
    // Token t sees the cells up to 70 + t: cell 95 is no token's.
    let mask: Vec<f32> = (0..m)
        .flat_map(|t| (0..n_kv).map(move |j| if j > 70 + t { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    let p = AttnParams {
        scale: 0.125,
        ..AttnParams::new(nh, nkv, hd, n_kv)
    };
    let mut run = |kbad: f32, vbad: f32| {
        let row = bad * hd * nkv..(bad + 1) * hd * nkv;
        k[row.clone()].fill(kbad);
        v[row].fill(vbad);
        let qt = f32s_on(&be, [hd, nh, m, 1], &q);
        let kt = f32s_on(&be, [hd * nkv, n_kv, 1, 1], &k);
        let vt = f32s_on(&be, [hd * nkv, n_kv, 1, 1], &v);
        attention_on(&be, [&qt, &kt, &vt], &mask, &p)
    };
    let (c, poisoned) = run(f32::NAN, f32::INFINITY);
    // Tiles: 2 of 10 tokens x 3 KV heads x every cell of the span.
    assert_eq!(c.kv_bytes_read, 2 * 3 * 100 * 2 * 64 * 4);
    let (_, clean) = run(0.0, 0.0);
    assert!(poisoned.iter().all(|x| x.is_finite()));
    let bits = |o: &[f32]| o.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&poisoned), bits(&clean));
    let (_, neg) = run(f32::NEG_INFINITY, f32::NAN);
    assert_eq!(bits(&neg), bits(&clean));
}

/// The fused QK-norm is one dispatch, where the composing path takes six
/// (two rms_norms, two ropes, two set_rows).
#[test]
fn rope_store_with_qk_norm_is_one_dispatch() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let (hd, nh, nkv, m, rows) = (256, 4, 1, 3, 8);
    let n = hd * nkv;
    let buf = |ty: GgmlType, ne: [usize; 4]| {
        let t = be.alloc(common::desc(ty, ne, Usage::Scratch)).unwrap();
        let bytes = vec![0u8; glint_backend::Tensor::desc(&t).n_bytes()];
        be.write(&t, 0, &bytes).unwrap();
        t
    };
    let (q, qd, qr) = (
        buf(F32, [hd, nh, m, 1]),
        buf(F32, [hd, nh, m, 1]),
        buf(F32, [hd, nh, m, 1]),
    );
    let (k, kd, kr) = (
        buf(F32, [hd, nkv, m, 1]),
        buf(F32, [hd, nkv, m, 1]),
        buf(F32, [hd, nkv, m, 1]),
    );
    let v = buf(F32, [n, m, 1, 1]);
    let (qn, kn) = (buf(F32, [hd, 1, 1, 1]), buf(F32, [hd, 1, 1, 1]));
    let (pos, idx) = (
        buf(GgmlType::I32, [m, 1, 1, 1]),
        buf(GgmlType::I32, [m, 1, 1, 1]),
    );
    let (kc, vc) = (
        buf(GgmlType::F16, [n, rows, 1, 1]),
        buf(GgmlType::F16, [n, rows, 1, 1]),
    );
    let p = RopeParams::plain(RopeMode::Neox, hd, nh, 10000.0);
    let pk = RopeParams { n_head: nkv, ..p };
    let before = be.work_counters();
    let norm = QkNorm {
        w: [&qn, &kn],
        eps: 1e-6,
        out: [&qd, &kd],
    };
    be.rope_store(
        [&q, &k, &v],
        Some(norm),
        &pos,
        [&p, &pk],
        [&qr, &kr],
        &idx,
        [&kc, &vc],
    )
    .unwrap();
    assert_eq!(be.work_counters().since(&before).dispatches, 1);
}

/// A pending post-norm costs no dispatch of its own: added by the next
/// block's first fused matvec, as it reads its input. Gemma 3's layers:
/// Q/K/V packed in one type is one dispatch, Q and K of one type and V of
/// another two (the second reads the stream the first stored), gate/up
/// one; a part alone first adds it apart (`rms_norm_add`): 3.
#[test]
fn post_norm_add_takes_no_dispatch_of_its_own() {
    use GgmlType::{Q5_0, Q8_0};
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let (k, m) = (256, 1);
    let buf = |ne: [usize; 4]| {
        let t = be.alloc(common::desc(F32, ne, Usage::Scratch)).unwrap();
        let bytes = vec![0u8; glint_backend::Tensor::desc(&t).n_bytes()];
        be.write(&t, 0, &bytes).unwrap();
        t
    };
    let packed = |types: [GgmlType; 3]| {
        let parts = types
            .iter()
            .map(|&ty| {
                let d = common::desc(ty, [k, 32, 1, 1], Usage::Weights);
                let n = d.n_bytes();
                (d, SharedBytes::from_vec(vec![0u8; n]))
            })
            .collect::<Vec<(TensorDesc, _)>>();
        be.weights(parts).unwrap()
    };
    let (x, y, xs, tmp, h) = (
        buf([k, m, 1, 1]),
        buf([k, m, 1, 1]),
        buf([k, m, 1, 1]),
        buf([k, m, 1, 1]),
        buf([k, m, 1, 1]),
    );
    let (pw, nw) = (buf([k, 1, 1, 1]), buf([k, 1, 1, 1]));
    let outs = [buf([32, m, 1, 1]), buf([32, m, 1, 1]), buf([32, m, 1, 1])];
    let add = PostAdd {
        y: &y,
        w: &pw,
        eps: 1e-6,
        tmp: &tmp,
        out: &xs,
    };
    let count = |f: &dyn Fn()| {
        let before = be.work_counters();
        f();
        be.work_counters().since(&before).dispatches
    };
    // The fused kernel with the add binds W, x, the norm's weights, y, the
    // post-norm's weights, the outputs and the stream: an adapter with
    // fewer storage buffers a stage adds apart (one dispatch more).
    let room = be.limits().max_storage_buffers_per_shader_stage;
    let apart = |n_storage: u32| (room < n_storage) as u64;
    for (types, want) in [
        ([Q5_0, Q5_0, Q5_0], 1 + apart(9)),
        ([Q5_0, Q5_0, Q8_0], 2 + apart(8)),
        ([Q8_0, Q5_0, Q5_0], 3),
    ] {
        let ws = packed(types);
        let n = count(&|| {
            be.norm_mul_mats(
                &x,
                Some(add),
                (&nw, 1e-6),
                &h,
                &[&ws[0], &ws[1], &ws[2]],
                &[&outs[0], &outs[1], &outs[2]],
            )
            .unwrap()
        });
        assert_eq!(n, want, "{types:?}");
    }
    let ws = packed([Q5_0; 3]);
    let n = count(&|| {
        be.norm_mul_mats_glu(
            Glu::SwiGlu,
            &x,
            Some(add),
            (&nw, 1e-6),
            &h,
            [&ws[1], &ws[2]],
            [&outs[1], &outs[2]],
            &outs[0],
        )
        .unwrap()
    });
    assert_eq!(n, 1 + apart(7), "gate/up");
}

/// kshift(rope(k, p), q - p) == rope(k, q), for several shifts in a row,
/// negative deltas, YaRN with attn_factor != 1, n_rot < head_dim, both modes,
/// F32 and F16 caches.
#[test]
fn kshift_invariant() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (hd, nkv, rows) = (64, 2, 11);
        for ty in [GgmlType::F32, GgmlType::F16] {
            for mode in [RopeMode::Norm, RopeMode::Neox] {
                for p in [
                    RopeParams::plain(mode, hd, nkv, 10000.0),
                    yarn(mode, hd, 48, nkv),
                ] {
                    let k = r.vec_scaled(hd * nkv * rows, 1.0);
                    let tk = f32s([hd, nkv, rows, 1], &k);
                    let mut pos: Vec<i32> = (0..rows).map(|_| r.below(200) as i32).collect();
                    // K as the model writes it: rope at pos, then into the cache.
                    let roped = poisoned(F32, [hd, nkv, rows, 1]);
                    gpu().rope(&tk, &i32s(&pos), &p, &roped).unwrap();
                    let all: Vec<i32> = (0..rows as i32).collect();
                    let c = cache(ty, hd * nkv, rows);
                    let flat = f32s([hd * nkv, rows, 1, 1], &read_f32(&roped));
                    gpu().set_rows(&flat, &i32s(&all), &c).unwrap();
                    for step in 0..4 {
                        // Negative deltas (seq_div-like), zeros, positives.
                        let shift: Vec<i32> = pos
                            .iter()
                            .enumerate()
                            .map(|(j, &q)| match (j + step) % 4 {
                                0 => -(q / 2),
                                1 => 0,
                                2 => r.below(50) as i32,
                                _ => -(r.below(q as usize + 1) as i32),
                            })
                            .collect();
                        gpu().kshift(&c, &i32s(&shift), &p).unwrap();
                        pos.iter_mut().zip(&shift).for_each(|(q, s)| *q += s);
                        let got = read_cache(&c, ty, hd * nkv * rows);
                        let want = rope_ref_heads(&k, &pos, &p);
                        let t = tol::kshift(ty);
                        assert_close(
                            &format!("kshift {ty:?} {mode:?} step {step} {p:?}"),
                            &got,
                            &want,
                            t,
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn shape_and_type_errors_are_errors() {
    let a = f32s([10, 2, 1, 1], &[1.0; 20]);
    let b = f32s([9, 1, 1, 1], &[1.0; 9]);
    let out = poisoned(F32, [10, 2, 1, 1]);
    assert!(gpu().add(&a, &b, &out).is_err());
    let ids = i32s(&[0, 1]);
    assert!(gpu().mul_mat(&ids, &a, &out).is_err());
    let mut buf = [0u8; 8];
    assert!(gpu().read(&a, 78, &mut buf).is_err());
}

#[test]
fn unaligned_write_and_read() {
    let t = gpu()
        .alloc(common::desc(GgmlType::F16, [7, 1, 1, 1], Usage::Scratch))
        .unwrap();
    gpu().write(&t, 0, &[1u8; 14]).unwrap();
    gpu().write(&t, 3, &[9, 8, 7]).unwrap();
    let mut b = [0u8; 5];
    gpu().read(&t, 1, &mut b).unwrap();
    assert_eq!(b, [1, 1, 9, 8, 7]);
}

/// Small writes are staged (their bytes one queue write a submit, copied
/// out before the submit's ops), large and unaligned ones are queue writes
/// of their own: whatever the mix, to one buffer, to parts of a buffer,
/// and around kernels that read it, each lands in call order.
#[test]
fn staged_and_queue_writes_land_in_call_order() {
    let be = GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter");
    let n = 2048; // 8 KiB: over the staged writes' 4 KiB
    let t = f32s_on(&be, [n, 1, 1, 1], &vec![0.0; n]);
    let read = |t: &glint_gpu::GpuTensor| {
        let mut v = vec![0f32; t.desc().n_elements()];
        be.read(t, 0, bytemuck::cast_slice_mut(&mut v)).unwrap();
        v
    };
    let w = |t: &glint_gpu::GpuTensor, at: usize, v: &[f32]| {
        be.write(t, at * 4, bytemuck::cast_slice(v)).unwrap()
    };
    // Staged, then a queue write of the whole: the whole wins.
    w(&t, 5, &[1.0; 4]);
    w(&t, 0, &vec![2.0; n]);
    assert_eq!(read(&t), vec![2.0; n]);
    // A queue write, then staged ones over part of it (two to one cell):
    // the later win, in their order.
    let mut want: Vec<f32> = (0..n).map(|i| i as f32).collect();
    w(&t, 0, &want);
    w(&t, 10, &[7.0; 3]);
    w(&t, 11, &[8.0]);
    want[10..13].copy_from_slice(&[7.0, 8.0, 7.0]);
    assert_eq!(read(&t), want);
    // Staged, then an unaligned write (read, merged, written back) into
    // the same word.
    w(&t, 20, &[3.0]);
    let bits = 5.0f32.to_le_bytes();
    be.write(&t, 20 * 4 + 2, &bits[2..]).unwrap();
    let mut merged = 3.0f32.to_le_bytes();
    merged[2..].copy_from_slice(&bits[2..]);
    want[20] = f32::from_le_bytes(merged);
    assert_eq!(read(&t), want);
    // Around kernels: a kernel reads x, a staged write changes x, a second
    // kernel reads it: the first sees the old x, the second the new.
    let x = f32s_on(&be, [4, 1, 1, 1], &[1.0, 2.0, 3.0, 4.0]);
    let (y1, y2) = (
        f32s_on(&be, [4, 1, 1, 1], &[0.0; 4]),
        f32s_on(&be, [4, 1, 1, 1], &[0.0; 4]),
    );
    be.scale(&x, 2.0, &y1).unwrap();
    w(&x, 0, &[10.0, 20.0, 30.0, 40.0]);
    be.scale(&x, 2.0, &y2).unwrap();
    assert_eq!(read(&y1), [2.0, 4.0, 6.0, 8.0]);
    assert_eq!(read(&y2), [20.0, 40.0, 60.0, 80.0]);
    // Parts of one buffer (packed weights): a staged write to one part
    // while a kernel reads the other, each where it belongs.
    let desc = |label: &str| TensorDesc {
        ty: F32,
        ne: [4, 1, 1, 1],
        label: label.into(),
        usage: Usage::Weights,
    };
    let bytes = |v: [f32; 4]| SharedBytes::from_vec(bytemuck::cast_slice::<f32, u8>(&v).to_vec());
    let parts = be
        .weights(vec![
            (desc("a"), bytes([1.0; 4])),
            (desc("b"), bytes([2.0; 4])),
        ])
        .unwrap();
    be.scale(&parts[0], 3.0, &y1).unwrap();
    w(&parts[1], 0, &[5.0; 4]);
    be.scale(&parts[1], 3.0, &y2).unwrap();
    assert_eq!(read(&y1), [3.0; 4]);
    assert_eq!(read(&y2), [15.0; 4]);
    assert_eq!(read(&parts[0]), [1.0; 4]);
}

/// The bench's copy-bandwidth probe times a copy; sizes wgpu cannot copy
/// are typed errors, never a wgpu validation panic.
#[test]
fn copy_probe_times_copies_and_rejects_bad_sizes() {
    let g = gpu();
    let p = g.copy_probe(1 << 20).unwrap();
    assert_eq!(p.bytes(), 1 << 20);
    assert!(p.time().unwrap() > std::time::Duration::ZERO);
    // A batch's time is per copy: of the order of one copy's, not n times it.
    let one = (0..3).map(|_| p.time().unwrap()).min().unwrap();
    let per = (0..3).map(|_| p.time_batch(8).unwrap()).min().unwrap();
    assert!(
        per > std::time::Duration::ZERO && per < one * 4,
        "{per:?} vs {one:?}"
    );
    // The copy kernel: the same bytes (a pattern over the whole MiB), and
    // a per-dispatch time like the copy engine's.
    assert_eq!(p.kernel_bytes(), 1 << 20);
    p.check_kernel().unwrap();
    let k = (0..3)
        .map(|_| p.time_kernel_batch(8).unwrap())
        .min()
        .unwrap();
    assert!(k > std::time::Duration::ZERO, "{k:?}");
    // A size not a multiple of 16: the kernel copies the whole 16-byte
    // words.
    let odd = g.copy_probe((1 << 16) + 4).unwrap();
    assert_eq!(odd.kernel_bytes(), 1 << 16);
    odd.check_kernel().unwrap();
    // copy_bandwidth rounds an odd size down to a copyable one.
    let bw = g.copy_bandwidth((1 << 20) + 3, 2).unwrap();
    assert!(bw.is_finite() && bw > 0.0, "{bw}");
    // 8 bytes hold no 16-byte word for the kernel.
    for bad in [0, 6, 8, g.limits().max_buffer_size.saturating_add(4)] {
        let e = g.copy_probe(bad).err().expect("a bad size is an error");
        assert!(e.to_string().contains("copy_probe"), "{e}");
    }
}

/// A tensor made by one backend given to another (another device) is an
/// error naming the op, not a wgpu panic: as an op's input or output and
/// to read and write. The second backend's own tensors still work after.
#[test]
fn a_tensor_of_another_backend_is_an_error() {
    let a = gpu();
    let b = glint_gpu::GpuBackend::new(glint_gpu::GpuOptions::default()).unwrap();
    let ta = f32s([8, 1, 1, 1], &[1.0; 8]);
    let tb = b
        .alloc(desc(GgmlType::F32, [8, 1, 1, 1], Usage::Scratch))
        .unwrap();
    b.write(&tb, 0, bytemuck::cast_slice(&[2.0f32; 8])).unwrap();
    let ob = b
        .alloc(desc(GgmlType::F32, [8, 1, 1, 1], Usage::Scratch))
        .unwrap();
    let msg = |e: glint_backend::BackendError| e.to_string();
    let e = msg(b.add(&ta, &tb, &ob).unwrap_err());
    assert!(e.contains("another wgpu backend"), "{e}");
    let e = msg(b.add(&tb, &tb, &ta).unwrap_err());
    assert!(e.contains("another wgpu backend"), "{e}");
    let e = msg(b.read(&ta, 0, &mut [0u8; 4]).unwrap_err());
    assert!(
        e.contains("read") && e.contains("another wgpu backend"),
        "{e}"
    );
    let e = msg(b.write(&ta, 0, &[0u8; 4]).unwrap_err());
    assert!(
        e.contains("write") && e.contains("another wgpu backend"),
        "{e}"
    );
    b.add(&tb, &tb, &ob).unwrap();
    let mut back = [0u8; 32];
    b.read(&ob, 0, &mut back).unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&back), &[4.0f32; 8]);
    // And the first backend's tensor is untouched on its own backend.
    assert_eq!(read_f32(&ta), vec![1.0; 8]);
    let _ = a;
}

/// With profiling on (lavapipe has `TIMESTAMP_QUERY_INSIDE_PASSES`): each
/// dispatch is timed once under its kernel variant's label, with the
/// weight bytes the work counters model for it; the time between
/// dispatches is its own last row; a reading starts the next from zero.
#[test]
fn profile_times_each_dispatch_under_its_kernel() {
    let be = GpuBackend::new(GpuOptions {
        profile: true,
        ..Default::default()
    })
    .expect("a wgpu adapter with timestamps inside passes");
    // 37 rows: not a whole number of any matvec workgroup's rows.
    let (k, n) = (256, 37);
    let mut r = Rng(seed());
    let rb = GgmlType::Q8_0.bytes_for(k as u64).unwrap() as usize;
    let vals = r.vec_scaled(k * n, 1.0);
    let mut bytes = vec![0u8; rb * n];
    for (row, out) in vals.chunks(k).zip(bytes.chunks_mut(rb)) {
        glint_quant::quantize_row(GgmlType::Q8_0, row, out).unwrap();
    }
    let w = be
        .weight(
            common::desc(GgmlType::Q8_0, [k, n, 1, 1], Usage::Weights),
            SharedBytes::from_vec(bytes),
        )
        .unwrap();
    let buf = |ne: [usize; 4]| be.alloc(common::desc(F32, ne, Usage::Scratch)).unwrap();
    let (x, o1, o2, sum) = (
        buf([k, 1, 1, 1]),
        buf([n, 1, 1, 1]),
        buf([n, 1, 1, 1]),
        buf([n, 1, 1, 1]),
    );
    be.write(&x, 0, bytemuck::cast_slice(&r.vec_scaled(k, 1.0)))
        .unwrap();
    assert!(be.take_profile().unwrap().is_some());
    let before = be.work_counters();
    be.mul_mat(&w, &x, &o1).unwrap();
    be.mul_mat(&w, &x, &o2).unwrap();
    be.add(&o1, &o2, &sum).unwrap();
    be.sync().unwrap();
    let c = be.work_counters().since(&before);
    let p = be.take_profile().unwrap().unwrap();
    let labels: Vec<&str> = p.iter().map(|k| k.label.as_str()).collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    assert_eq!(labels[2], glint_gpu::GAPS);
    let mv = p
        .iter()
        .find(|k| k.label.starts_with("mul_mat:matvec Q8_0 ["))
        .unwrap_or_else(|| panic!("{labels:?}"));
    assert_eq!((mv.calls, mv.bytes), (2, 2 * (n * rb) as u64), "{mv:?}");
    let add = p
        .iter()
        .find(|k| k.label.starts_with("binary:main"))
        .unwrap_or_else(|| panic!("{labels:?}"));
    assert_eq!((add.calls, add.bytes), (1, 0), "{add:?}");
    assert!(p[..2].iter().all(|k| k.ns > 0.0), "{p:?}");
    assert!(p[0].ns >= p[1].ns, "most time first: {p:?}");
    assert_eq!(mv.calls + add.calls, c.dispatches);
    // One submit: a gap between each dispatch and the next.
    assert_eq!((c.submits, p[2].calls), (1, 2), "{c:?} {p:?}");
    let again = be.take_profile().unwrap().unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].calls, again[0].ns), (0, 0.0));
    // Without profiling, nothing to take.
    assert!(gpu().take_profile().unwrap().is_none());
}
