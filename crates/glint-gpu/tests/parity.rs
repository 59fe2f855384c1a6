//! Every op of the wgpu backend against the cpu backend (the oracle), on the
//! same random inputs (fresh seeds), sizes that do not divide the workgroup
//! sizes, outputs poisoned first, and the named tolerances of `common::tol`.

mod common;

use common::*;
use glint_backend::{
    AttnParams, Backend, GgmlType, Glu, KqMask, MaskWindow, PostAdd, QkNorm, RopeMode, RopeParams,
    SharedBytes, TensorDesc, Unary, Usage, CELL_WORDS,
};
use glint_cpu::{CpuBackend, Precision};
use glint_gpu::{GpuBackend, GpuOptions};

fn cpu() -> &'static CpuBackend {
    static B: std::sync::OnceLock<CpuBackend> = std::sync::OnceLock::new();
    // The f32 oracle: what the WGSL kernels compute (no activation quantization).
    B.get_or_init(|| CpuBackend::with_precision(None, Precision::F32).expect("cpu backend"))
}

/// One tensor on both backends.
struct Pair(glint_gpu::GpuTensor, <CpuBackend as Backend>::Tensor);

fn pair(ty: GgmlType, ne: [usize; 4], usage: Usage, bytes: Option<&[u8]>) -> Pair {
    let d = TensorDesc {
        ty,
        ne,
        label: "p".into(),
        usage,
    };
    let n = d.n_bytes();
    let fill = vec![0xFFu8; n];
    let data = bytes.unwrap_or(&fill);
    let g = gpu().alloc(d.clone()).unwrap();
    let c = cpu().alloc(d).unwrap();
    gpu().write(&g, 0, data).unwrap();
    cpu().write(&c, 0, data).unwrap();
    Pair(g, c)
}

fn f32p(ne: [usize; 4], v: &[f32]) -> Pair {
    pair(
        GgmlType::F32,
        ne,
        Usage::Scratch,
        Some(bytemuck::cast_slice(v)),
    )
}

fn i32p(v: &[i32]) -> Pair {
    pair(
        GgmlType::I32,
        [v.len(), 1, 1, 1],
        Usage::Scratch,
        Some(bytemuck::cast_slice(v)),
    )
}

fn out(ne: [usize; 4]) -> Pair {
    pair(GgmlType::F32, ne, Usage::Scratch, None)
}

/// Read both sides as f32 (F16 caches widened) and compare.
#[track_caller]
fn compare(what: &str, p: &Pair, ty: GgmlType, tol: f64) {
    let n = glint_backend::Tensor::desc(&p.0).n_bytes();
    let (mut g, mut c) = (vec![0u8; n], vec![0u8; n]);
    gpu().read(&p.0, 0, &mut g).unwrap();
    cpu().read(&p.1, 0, &mut c).unwrap();
    let widen = |b: &[u8]| -> Vec<f32> {
        match ty {
            GgmlType::F16 => b
                .chunks(2)
                .map(|x| half::f16::from_le_bytes([x[0], x[1]]).to_f32())
                .collect(),
            _ => bytemuck::cast_slice(b).to_vec(),
        }
    };
    let want: Vec<f64> = widen(&c).iter().map(|&v| v as f64).collect();
    assert_close(what, &widen(&g), &want, tol);
}

/// The mask built from cells: the kernel against `KqMask::value` on the
/// cpu backend, to the bit (values and -inf alike), for every window kind,
/// causal or not, ALiBi or not: empty cells, cells of many sequences
/// (ids up to 255), queries at negative positions and of sequences
/// outside 0..256, a span starting past row 0 and sizes that do not
/// divide the workgroup.
#[test]
fn kq_mask_from_cells() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n_rows, m) = (300 + r.below(200), 1 + r.below(40));
        let first_row = r.below(50);
        let n_kv = 1 + r.below(n_rows - first_row);
        // Words a cell: the most, the fewest, or any between.
        let w = [CELL_WORDS, 2, 2 + r.below(CELL_WORDS - 1)][r.below(3)];
        let n_seq = 32 * (w - 1);
        let mut cells = vec![0i32; w * n_rows];
        for c in cells.chunks_exact_mut(w) {
            c[0] = if r.chance(15) { -1 } else { r.range(0, 400) };
            for _ in 0..r.below(4) {
                let s = if r.chance(70) {
                    r.below(4)
                } else {
                    r.below(n_seq)
                };
                c[1 + s / 32] |= (1u32 << (s % 32)) as i32;
            }
        }
        let pos: Vec<i32> = (0..m)
            .map(|_| if r.chance(5) { -3 } else { r.range(0, 400) })
            .collect();
        let seqs: Vec<i32> = (0..m)
            .map(|_| match r.below(20) {
                0 => -1,
                1 => 300,
                2 => r.below(256) as i32,
                3 => n_seq as i32,
                _ => r.below(4) as i32,
            })
            .collect();
        // One pair every mask without a window lets through: query 0 of
        // sequence 0 at position 5, the span's first cell at 0 holding it.
        let (mut pos, mut seqs) = (pos, seqs);
        (pos[0], seqs[0]) = (5, 0);
        cells[first_row * w] = 0;
        cells[first_row * w + 1] |= 1;
        let (cp, pp, sp) = (
            pair(
                GgmlType::I32,
                [w, n_rows, 1, 1],
                Usage::Scratch,
                Some(bytemuck::cast_slice(&cells)),
            ),
            i32p(&pos),
            i32p(&seqs),
        );
        let n = 1 + r.below(120) as u32;
        let windows = [
            MaskWindow::None,
            MaskWindow::Standard(n),
            MaskWindow::Chunked(n),
            MaskWindow::Symmetric(n),
        ];
        for window in windows {
            for (causal, alibi) in [(true, false), (false, false), (true, true)] {
                let p = KqMask {
                    first_row,
                    causal,
                    window,
                    alibi,
                    visible: None,
                };
                let o = out([n_kv, m, 1, 1]);
                gpu().kq_mask(&cp.0, &pp.0, &sp.0, &p, &o.0).unwrap();
                cpu().kq_mask(&cp.1, &pp.1, &sp.1, &p, &o.1).unwrap();
                let bytes = 4 * n_kv * m;
                let (mut g, mut c) = (vec![0u8; bytes], vec![0u8; bytes]);
                gpu().read(&o.0, 0, &mut g).unwrap();
                cpu().read(&o.1, 0, &mut c).unwrap();
                assert!(g == c, "kq_mask {p:?}: not the cpu's bits");
                let cf: &[f32] = bytemuck::cast_slice(&c);
                if window == MaskWindow::None {
                    let want = if alibi { -5.0 } else { 0.0 };
                    assert_eq!(cf[0], want, "{p:?}: the planted pair");
                }
            }
        }
        // A span past the copy's rows is refused.
        let p = KqMask {
            first_row: n_rows - n_kv + 1,
            causal: true,
            window: MaskWindow::None,
            alibi: false,
            visible: None,
        };
        let o = out([n_kv, m, 1, 1]);
        let e = gpu().kq_mask(&cp.0, &pp.0, &sp.0, &p, &o.0);
        assert!(format!("{e:?}").contains("copy of"), "{e:?}");
    });
}

#[test]
fn elementwise_norm_softmax_argmax() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n, m) = (1000, 13);
        let a = f32p([n, m, 1, 1], &r.vec_scaled(n * m, 4.0));
        let b = f32p([n, m, 1, 1], &r.vec_scaled(n * m, 4.0));
        let bn = f32p([n, 1, 1, 1], &r.vec_scaled(n, 4.0));
        for bb in [&b, &bn] {
            let o = out([n, m, 1, 1]);
            gpu().add(&a.0, &bb.0, &o.0).unwrap();
            cpu().add(&a.1, &bb.1, &o.1).unwrap();
            compare("add", &o, GgmlType::F32, tol::ELEMENTWISE);
            gpu().mul(&a.0, &bb.0, &o.0).unwrap();
            cpu().mul(&a.1, &bb.1, &o.1).unwrap();
            compare("mul", &o, GgmlType::F32, tol::ELEMENTWISE);
        }
        let o = out([n, m, 1, 1]);
        gpu().scale(&a.0, 0.3, &o.0).unwrap();
        cpu().scale(&a.1, 0.3, &o.1).unwrap();
        compare("scale", &o, GgmlType::F32, tol::ELEMENTWISE);
        for u in [Unary::Silu, Unary::Gelu] {
            let o = out([n, m, 1, 1]);
            gpu().unary(u, &a.0, &o.0).unwrap();
            cpu().unary(u, &a.1, &o.1).unwrap();
            compare(&format!("{u:?}"), &o, GgmlType::F32, tol::ACTIVATION);
        }
        for g in [Glu::SwiGlu, Glu::GeGlu] {
            let o = out([n, m, 1, 1]);
            gpu().glu(g, &a.0, &b.0, &o.0).unwrap();
            cpu().glu(g, &a.1, &b.1, &o.1).unwrap();
            compare(&format!("{g:?}"), &o, GgmlType::F32, tol::ACTIVATION);
        }
        for w in [Some(&bn), None] {
            let o = out([n, m, 1, 1]);
            gpu().rms_norm(&a.0, w.map(|w| &w.0), 1e-6, &o.0).unwrap();
            cpu().rms_norm(&a.1, w.map(|w| &w.1), 1e-6, &o.1).unwrap();
            compare("rms_norm", &o, GgmlType::F32, tol::REDUCTION);
        }
        // norm_add: one kernel on wgpu, the bits of rms_norm then add on
        // the same device; the cpu's within the norm's tolerance.
        let (tmp, o, o1) = (out([n, m, 1, 1]), out([n, m, 1, 1]), out([n, m, 1, 1]));
        gpu()
            .norm_add(&a.0, (&bn.0, 1e-6), &b.0, &tmp.0, &o.0)
            .unwrap();
        cpu()
            .norm_add(&a.1, (&bn.1, 1e-6), &b.1, &tmp.1, &o.1)
            .unwrap();
        compare("norm_add", &o, GgmlType::F32, tol::REDUCTION);
        gpu().rms_norm(&a.0, Some(&bn.0), 1e-6, &tmp.0).unwrap();
        gpu().add(&b.0, &tmp.0, &o1.0).unwrap();
        let read = |t: &glint_gpu::GpuTensor| -> Vec<u8> {
            let mut v = vec![0u8; n * m * 4];
            gpu().read(t, 0, &mut v).unwrap();
            v
        };
        assert!(
            read(&o.0) == read(&o1.0),
            "norm_add: not rms_norm then add's bits"
        );
        // `res` as the output: refused, as add refuses it.
        let e = gpu().norm_add(&a.0, (&bn.0, 1e-6), &b.0, &tmp.0, &b.0);
        assert!(format!("{e:?}").contains("also an input"), "{e:?}");
        let o = out([n, m, 1, 1]);
        gpu().softmax(&a.0, &o.0).unwrap();
        cpu().softmax(&a.1, &o.1).unwrap();
        compare("softmax", &o, GgmlType::F32, tol::REDUCTION);
        let o = pair(GgmlType::I32, [m, 1, 1, 1], Usage::Scratch, None);
        gpu().argmax(&a.0, &o.0).unwrap();
        cpu().argmax(&a.1, &o.1).unwrap();
        let (mut g, mut c) = ([0u8; 52], [0u8; 52]);
        gpu().read(&o.0, 0, &mut g).unwrap();
        cpu().read(&o.1, 0, &mut c).unwrap();
        assert_eq!(g, c, "argmax");
    });
}

#[test]
fn weights_every_type_gpu_has() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let n = 67;
        for ty in weight_types() {
            // 768: an odd number of K-quant super-blocks.
            let k = if is_k_quant(ty) { 768 } else { 512 };
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            let bytes = if matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q5_K) {
                // glint-quant has no quantizer for these: random blocks.
                random_k_blocks(&mut r, ty, n * k / 256)
            } else {
                // Real quantized bytes: quantize random f32 rows with glint-quant.
                let vals = r.vec_scaled(k * n, 1.0);
                let mut bytes = vec![0u8; rb * n];
                for i in 0..n {
                    glint_quant::quantize_row(
                        ty,
                        &vals[i * k..(i + 1) * k],
                        &mut bytes[i * rb..(i + 1) * rb],
                    )
                    .unwrap();
                }
                bytes
            };
            let d = TensorDesc {
                ty,
                ne: [k, n, 1, 1],
                label: "w".into(),
                usage: Usage::Weights,
            };
            let wg = gpu()
                .weight(d.clone(), SharedBytes::from_vec(bytes.clone()))
                .unwrap();
            let wc = cpu().weight(d, SharedBytes::from_vec(bytes)).unwrap();
            // m 1 and 5: the matvec (pipelines with COLS 1 and 8, 5 of the
            // 8 columns used); 9 and 67: the matmul.
            for m in [1, 5, 9, 67] {
                let x = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 1.0));
                let o = out([n, m, 1, 1]);
                gpu().mul_mat(&wg, &x.0, &o.0).unwrap();
                cpu().mul_mat(&wc, &x.1, &o.1).unwrap();
                let t = if is_float(ty) {
                    tol::MATMUL_FLOAT
                } else {
                    tol::MATMUL_QUANT
                };
                compare(&format!("mul_mat {ty:?} m{m}"), &o, GgmlType::F32, t);
                // mul_mat_add: the matvec's epilogue add (m <= 8) or
                // mul_mat then add; either way res + W·x in f32, to the bit.
                let resv = r.vec_scaled(n * m, 1.0);
                let res = f32p([n, m, 1, 1], &resv);
                let (tmp, o2) = (out([n, m, 1, 1]), out([n, m, 1, 1]));
                gpu().mul_mat_add(&wg, &x.0, &res.0, &tmp.0, &o2.0).unwrap();
                cpu().mul_mat_add(&wc, &x.1, &res.1, &tmp.1, &o2.1).unwrap();
                compare(&format!("mul_mat_add {ty:?} m{m}"), &o2, GgmlType::F32, t);
                let (mut a, mut b) = (vec![0u8; n * m * 4], vec![0u8; n * m * 4]);
                gpu().read(&o.0, 0, &mut a).unwrap();
                gpu().read(&o2.0, 0, &mut b).unwrap();
                let (a, b): (&[f32], &[f32]) = (bytemuck::cast_slice(&a), bytemuck::cast_slice(&b));
                for i in 0..n * m {
                    assert_eq!(
                        b[i].to_bits(),
                        (resv[i] + a[i]).to_bits(),
                        "mul_mat_add {ty:?} m{m} [{i}]: not res + mul_mat"
                    );
                }
            }
            let ids = i32p(&[3, 0, 66, -1, 67, 40]);
            let o = out([k, 6, 1, 1]);
            gpu().get_rows(&wg, &ids.0, &o.0).unwrap();
            cpu().get_rows(&wc, &ids.1, &o.1).unwrap();
            compare(
                &format!("get_rows {ty:?}"),
                &o,
                GgmlType::F32,
                tol::GET_ROWS,
            );
        }
    });
}

#[test]
fn rope_set_rows_attention_kshift() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (hd, nh, nkv, m, rows) = (64, 8, 2, 7, 300);
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            for p in plain_and_yarn(mode, hd, nh) {
                let x = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
                let pos = i32p(&(0..m).map(|_| r.below(250) as i32).collect::<Vec<_>>());
                let o = out([hd, nh, m, 1]);
                gpu().rope(&x.0, &pos.0, &p, &o.0).unwrap();
                cpu().rope(&x.1, &pos.1, &p, &o.1).unwrap();
                compare(&format!("rope {p:?}"), &o, GgmlType::F32, tol::ROPE);
                for ty in [GgmlType::F32, GgmlType::F16] {
                    let pk = RopeParams { n_head: nkv, ..p };
                    let k = pair(ty, [hd * nkv, rows, 1, 1], Usage::KvCache, None);
                    let v = pair(ty, [hd * nkv, rows, 1, 1], Usage::KvCache, None);
                    let all = i32p(&(0..rows as i32).collect::<Vec<_>>());
                    let kv = f32p([hd * nkv, rows, 1, 1], &r.vec_scaled(hd * nkv * rows, 1.5));
                    let vv = f32p([hd * nkv, rows, 1, 1], &r.vec_scaled(hd * nkv * rows, 1.5));
                    for (c, s) in [(&k, &kv), (&v, &vv)] {
                        gpu().set_rows(&s.0, &all.0, &c.0).unwrap();
                        cpu().set_rows(&s.1, &all.1, &c.1).unwrap();
                    }
                    compare("set_rows", &k, ty, 0.0);
                    let (kv_start, n_kv) = (13, 270);
                    let mask: Vec<f32> = (0..n_kv * m)
                        .map(|i| {
                            if i % n_kv > 200 + i / n_kv {
                                f32::NEG_INFINITY
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    let mask = f32p([n_kv, m, 1, 1], &mask);
                    for softcap in [0.0, 20.0] {
                        let ap = AttnParams {
                            scale: 0.125,
                            softcap,
                            kv_start,
                            ..AttnParams::new(nh, nkv, hd, n_kv)
                        };
                        let o = out([hd * nh, m, 1, 1]);
                        gpu()
                            .attention(&x.0, &k.0, &v.0, &mask.0, &ap, &o.0)
                            .unwrap();
                        cpu()
                            .attention(&x.1, &k.1, &v.1, &mask.1, &ap, &o.1)
                            .unwrap();
                        let t = tol::attn(ty);
                        compare(&format!("attention {ty:?} {softcap}"), &o, GgmlType::F32, t);
                    }
                    let shift = i32p(
                        &(0..rows)
                            .map(|_| r.below(41) as i32 - 20)
                            .collect::<Vec<_>>(),
                    );
                    gpu().kshift(&k.0, &shift.0, &pk).unwrap();
                    cpu().kshift(&k.1, &shift.1, &pk).unwrap();
                    let t = tol::kshift(ty);
                    compare(&format!("kshift {ty:?} {mode:?}"), &k, ty, t);
                }
            }
        }
    });
}

/// Two-window SelfExtend attention: the WINDOW variant of the kernel
/// against the cpu backend's, F32 and F16 caches, a window starting past
/// row 0, near and far pairs mixed in every row, a row with none.
#[test]
fn attention_window_matches_cpu() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (m, rows) = (6, 700);
        let kv_start = 11;
        // 300 cells: one workgroup per (token, KV head); 600: split in 3 of
        // 200 cells (split KV, ops/attention.rs's n_splits: 48 and 24
        // (token, head) rows); the tokens sit at 350..390, so the last
        // split's cells are all masked for every token and the middle one
        // holds each token's near cells. Head_dim 64, 4 heads a KV head:
        // one workgroup takes them; Gemma 3's 256, 4 heads over 1: two
        // workgroups of 2 (the queries and the distant queries share the
        // workgroup memory).
        let (f32, f16) = (GgmlType::F32, GgmlType::F16);
        for ((hd, nh, nkv), ty, n_kv, first) in [
            ((64, 8, 2), f32, 300, 250),
            ((64, 8, 2), f16, 300, 250),
            ((64, 8, 2), f32, 600, 350),
            ((64, 8, 2), f16, 600, 350),
            ((256, 4, 1), f16, 300, 250),
            ((256, 4, 1), f32, 600, 350),
        ] {
            let q = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
            let q2 = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
            let all = i32p(&(0..rows as i32).collect::<Vec<_>>());
            let mut caches = Vec::new();
            for _ in 0..3 {
                let c = pair(ty, [hd * nkv, rows, 1, 1], Usage::KvCache, None);
                let vals = f32p([hd * nkv, rows, 1, 1], &r.vec_scaled(hd * nkv * rows, 1.5));
                gpu().set_rows(&vals.0, &all.0, &c.0).unwrap();
                cpu().set_rows(&vals.1, &all.1, &c.1).unwrap();
                caches.push(c);
            }
            let (k, k2, v) = (&caches[0], &caches[1], &caches[2]);
            // Token t sits at position first + 10 t (token 5 sees nothing):
            // near within 64 of it, far before that.
            let (mut near, mut far) = (
                vec![f32::NEG_INFINITY; n_kv * m],
                vec![f32::NEG_INFINITY; n_kv * m],
            );
            for t in 0..m - 1 {
                let i = first + 10 * t;
                for j in 0..=i.min(n_kv - 1) {
                    let dst = if i - j < 64 { &mut near } else { &mut far };
                    dst[t * n_kv + j] = if j % 9 == 0 { -0.25 } else { 0.0 };
                }
            }
            let (near, far) = (f32p([n_kv, m, 1, 1], &near), f32p([n_kv, m, 1, 1], &far));
            for softcap in [0.0, 20.0] {
                let ap = AttnParams {
                    scale: 0.125,
                    softcap,
                    kv_start,
                    ..AttnParams::new(nh, nkv, hd, n_kv)
                };
                let o = out([hd * nh, m, 1, 1]);
                gpu()
                    .attention_window(&q.0, &k.0, &v.0, &near.0, [&q2.0, &k2.0, &far.0], &ap, &o.0)
                    .unwrap();
                cpu()
                    .attention_window(&q.1, &k.1, &v.1, &near.1, [&q2.1, &k2.1, &far.1], &ap, &o.1)
                    .unwrap();
                let t = tol::attn(ty);
                compare(
                    &format!("attention_window {hd}x{nh}/{nkv} {ty:?} {n_kv} cells {softcap}"),
                    &o,
                    GgmlType::F32,
                    t,
                );
            }
        }
    });
}

/// Quantized caches (Q8_0, Q4_0), each op of the wgpu backend against the
/// cpu's: `set_rows` quantizes as the cpu does (its `1/d` and `127/amax`
/// are the shader's own divisions, so a value on a rounding edge may land
/// one level over: all within one step, at least 99% equal); attention and
/// two-window attention over the same cache bytes read the same values
/// (attention's f32 tolerance); the K-shift dequantizes, rotates,
/// requantizes (f32 angles on both sides: one step, 99% equal; each shift
/// from the gpu's bytes, as steps apart add up over successive shifts).
#[test]
fn quantized_cache_matches_cpu() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (hd, nh, nkv, rows) = (64, 4, 2, 90);
        let (kv_start, n_kv) = (7, 80);
        let n = hd * nkv;
        let all = i32p(&(0..rows as i32).collect::<Vec<_>>());
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0] {
            let rb = ty.bytes_for(n as u64).unwrap() as usize;
            let bytes = |p: &Pair| {
                let (mut g, mut c) = (vec![0u8; rb * rows], vec![0u8; rb * rows]);
                gpu().read(&p.0, 0, &mut g).unwrap();
                cpu().read(&p.1, 0, &mut c).unwrap();
                (g, c)
            };
            // Dequantized values and each block's step, per element.
            let values = |b: &[u8]| -> (Vec<f32>, Vec<f32>) {
                let mut v = vec![0f32; n * rows];
                for (row, dst) in b.chunks(rb).zip(v.chunks_mut(n)) {
                    glint_cpu::dequant_row(ty, row, dst).unwrap();
                }
                let ts = ty.bytes_for(32).unwrap() as usize;
                let d = b
                    .chunks(ts)
                    .flat_map(|blk| [half::f16::from_le_bytes([blk[0], blk[1]]).to_f32().abs(); 32])
                    .collect();
                (v, d)
            };
            let within_a_step = |what: &str, p: &Pair| {
                let (g, c) = bytes(p);
                let ((gv, gd), (cv, cd)) = (values(&g), values(&c));
                let mut equal = 0;
                for i in 0..gv.len() {
                    let step = gd[i].max(cd[i]) * 1.01 + 1e-6;
                    assert!(
                        (gv[i] - cv[i]).abs() <= step,
                        "{what} {ty} [{i}]: {} vs {}",
                        gv[i],
                        cv[i]
                    );
                    equal += (gv[i] == cv[i]) as usize;
                }
                assert!(
                    equal * 100 >= 99 * gv.len(),
                    "{what} {ty}: {equal} of {} equal",
                    gv.len()
                );
            };
            let mut fill = |scale: f32| {
                let c = pair(ty, [n, rows, 1, 1], Usage::KvCache, None);
                let vals = f32p([n, rows, 1, 1], &r.vec_scaled(n * rows, scale));
                gpu().set_rows(&vals.0, &all.0, &c.0).unwrap();
                cpu().set_rows(&vals.1, &all.1, &c.1).unwrap();
                c
            };
            let k = fill(1.5);
            within_a_step("set_rows", &k);
            // From here both sides hold the cpu's bytes.
            let same = |p: Pair| {
                let (_, c) = bytes(&p);
                pair(ty, [n, rows, 1, 1], Usage::KvCache, Some(&c))
            };
            let (k, k2, v) = (same(k), same(fill(1.5)), same(fill(1.0)));
            // 5 tokens: a workgroup a token; 21: plain attention by
            // prefill tiles (ops/attention.rs's TILE_MIN_TOKENS; the
            // two-window variant keeps a workgroup a token).
            for m in [5, 21] {
                let q = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
                let q2 = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
                let (mut near, mut far) = (vec![0f32; n_kv * m], vec![f32::NEG_INFINITY; n_kv * m]);
                for t in 0..m {
                    for j in 0..n_kv {
                        if j > 60 + 4 * t {
                            near[t * n_kv + j] = f32::NEG_INFINITY;
                        } else if j + 30 < 60 + 4 * t {
                            near[t * n_kv + j] = f32::NEG_INFINITY;
                            far[t * n_kv + j] = 0.0;
                        }
                    }
                }
                let (near, far) = (f32p([n_kv, m, 1, 1], &near), f32p([n_kv, m, 1, 1], &far));
                let ap = AttnParams {
                    scale: 0.125,
                    kv_start,
                    ..AttnParams::new(nh, nkv, hd, n_kv)
                };
                let o = out([hd * nh, m, 1, 1]);
                gpu()
                    .attention(&q.0, &k.0, &v.0, &near.0, &ap, &o.0)
                    .unwrap();
                cpu()
                    .attention(&q.1, &k.1, &v.1, &near.1, &ap, &o.1)
                    .unwrap();
                compare(
                    &format!("attention {ty} m {m}"),
                    &o,
                    GgmlType::F32,
                    tol::attn(GgmlType::F32),
                );
                let o = out([hd * nh, m, 1, 1]);
                gpu()
                    .attention_window(&q.0, &k.0, &v.0, &near.0, [&q2.0, &k2.0, &far.0], &ap, &o.0)
                    .unwrap();
                cpu()
                    .attention_window(&q.1, &k.1, &v.1, &near.1, [&q2.1, &k2.1, &far.1], &ap, &o.1)
                    .unwrap();
                compare(
                    &format!("attention_window {ty} m {m}"),
                    &o,
                    GgmlType::F32,
                    tol::attn(GgmlType::F32),
                );
            }
            for mode in [RopeMode::Norm, RopeMode::Neox] {
                let p = RopeParams::plain(mode, hd, nkv, 10000.0);
                let shift: Vec<i32> = (0..rows)
                    .map(|i| if i % 5 == 0 { 0 } else { r.range(-400, 400) })
                    .collect();
                let s = i32p(&shift);
                // Each shift from the same bytes: one shift may leave a
                // value a step apart, and a second over it two.
                let (g, _) = bytes(&k);
                cpu().write(&k.1, 0, &g).unwrap();
                gpu().kshift(&k.0, &s.0, &p).unwrap();
                cpu().kshift(&k.1, &s.1, &p).unwrap();
                within_a_step(&format!("kshift {mode:?}"), &k);
            }
        }
    });
}

/// Weights packed into one buffer (`Backend::weights`, a layer's Q/K/V or
/// gate/up) and their fused matvecs: `mul_mats` over 3 and 2 parts and
/// `mul_mats_glu` (SwiGLU, GeGLU) give, bit for bit, what the same weights
/// uploaded one by one give through `mul_mat` (and `glu`), for every weight
/// type, decode-sized m (one dispatch) and a prefill's (the ops one by
/// one); and the cpu within the matmul tolerance. The packed parts read
/// back as written, and the packed buffer costs the parts plus alignment.
/// With an RMSNorm folded in (`norm_mul_mats`, `norm_mul_mats_glu`): the
/// cpu's norm then matvecs within the same tolerance, and the packed
/// dispatch the bits of the weights one by one.
#[test]
fn packed_weights_and_fused_matvecs() {
    let own = GpuBackend::new(GpuOptions::default()).unwrap();
    each_gpu(|| {
        let mut r = Rng(seed());
        for ty in weight_types() {
            let k = if is_k_quant(ty) { 512 } else { 256 };
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            let ns = [70usize, 33, 33];
            let descs: Vec<TensorDesc> = ns
                .iter()
                .enumerate()
                .map(|(i, &n)| TensorDesc {
                    ty,
                    ne: [k, n, 1, 1],
                    label: format!("w{i}").into(),
                    usage: Usage::Weights,
                })
                .collect();
            let bytes: Vec<Vec<u8>> = ns
                .iter()
                .map(|&n| {
                    if matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q5_K) {
                        random_k_blocks(&mut r, ty, n * k / 256)
                    } else {
                        let vals = r.vec_scaled(k * n, 1.0);
                        let mut b = vec![0u8; rb * n];
                        for i in 0..n {
                            glint_quant::quantize_row(
                                ty,
                                &vals[i * k..(i + 1) * k],
                                &mut b[i * rb..(i + 1) * rb],
                            )
                            .unwrap();
                        }
                        b
                    }
                })
                .collect();
            let parts = |idx: &[usize]| -> Vec<(TensorDesc, SharedBytes)> {
                idx.iter()
                    .map(|&i| (descs[i].clone(), SharedBytes::from_vec(bytes[i].clone())))
                    .collect()
            };
            // The memory report is the backend's, and the shared backends
            // are the other tests' too (running beside this one): the
            // packed buffer's cost is read from a backend of this test's.
            let before = own.memory().weights;
            let kept = own.weights(parts(&[0, 1, 2])).unwrap();
            let grown = own.memory().weights - before;
            drop(kept);
            let packed = gpu().weights(parts(&[0, 1, 2])).unwrap();
            let sum: usize = bytes.iter().map(|b| b.len()).sum();
            assert!(
                grown >= sum && grown < sum + 3 * 256 + 12,
                "{ty:?}: packed {grown} bytes for {sum}"
            );
            for (t, b) in packed.iter().zip(&bytes) {
                let mut back = vec![0u8; b.len()];
                gpu().read(t, 0, &mut back).unwrap();
                assert!(&back == b, "{ty:?}: a packed part reads back changed");
            }
            let single: Vec<_> = (0..3)
                .map(|i| {
                    gpu()
                        .weight(descs[i].clone(), SharedBytes::from_vec(bytes[i].clone()))
                        .unwrap()
                })
                .collect();
            let on_cpu = cpu().weights(parts(&[0, 1, 2])).unwrap();
            let glu_pair = gpu().weights(parts(&[1, 2])).unwrap();
            let t = if is_float(ty) {
                tol::MATMUL_FLOAT
            } else {
                tol::MATMUL_QUANT
            };
            let read = |t: &glint_gpu::GpuTensor, n: usize| -> Vec<f32> {
                let mut b = vec![0u8; n * 4];
                gpu().read(t, 0, &mut b).unwrap();
                bytemuck::cast_slice(&b).to_vec()
            };
            // m 1 and 3: fused (COLS 1 and 4, 3 of the 4 columns used);
            // 9: past the matvec, the ops one by one.
            for m in [1usize, 3, 9] {
                let x = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 1.0));
                // Q/K/V-like: three parts; and two of them.
                for idx in [&[0usize, 1, 2][..], &[0, 1][..]] {
                    let outs: Vec<Pair> = idx.iter().map(|&i| out([ns[i], m, 1, 1])).collect();
                    let ws: Vec<_> = idx.iter().map(|&i| &packed[i]).collect();
                    let og: Vec<_> = outs.iter().map(|o| &o.0).collect();
                    gpu().mul_mats(&ws, &x.0, &og).unwrap();
                    let wc: Vec<_> = idx.iter().map(|&i| &on_cpu[i]).collect();
                    let oc: Vec<_> = outs.iter().map(|o| &o.1).collect();
                    cpu().mul_mats(&wc, &x.1, &oc).unwrap();
                    for (j, &i) in idx.iter().enumerate() {
                        let what = format!("mul_mats {ty:?} {} parts m{m} part {i}", idx.len());
                        compare(&what, &outs[j], GgmlType::F32, t);
                        let one = out([ns[i], m, 1, 1]);
                        gpu().mul_mat(&single[i], &x.0, &one.0).unwrap();
                        assert!(
                            read(&outs[j].0, ns[i] * m) == read(&one.0, ns[i] * m),
                            "{what}: not mul_mat's bits"
                        );
                    }
                }
                for op in [Glu::SwiGlu, Glu::GeGlu] {
                    let n = ns[1];
                    let (gate, up, o) = (out([n, m, 1, 1]), out([n, m, 1, 1]), out([n, m, 1, 1]));
                    gpu()
                        .mul_mats_glu(op, &glu_pair[0], &glu_pair[1], &x.0, &gate.0, &up.0, &o.0)
                        .unwrap();
                    cpu()
                        .mul_mats_glu(op, &on_cpu[1], &on_cpu[2], &x.1, &gate.1, &up.1, &o.1)
                        .unwrap();
                    let what = format!("mul_mats_glu {op:?} {ty:?} m{m}");
                    compare(&what, &o, GgmlType::F32, t);
                    let (g1, u1, o1) = (out([n, m, 1, 1]), out([n, m, 1, 1]), out([n, m, 1, 1]));
                    gpu().mul_mat(&single[1], &x.0, &g1.0).unwrap();
                    gpu().mul_mat(&single[2], &x.0, &u1.0).unwrap();
                    gpu().glu(op, &g1.0, &u1.0, &o1.0).unwrap();
                    assert!(
                        read(&o.0, n * m) == read(&o1.0, n * m),
                        "{what}: not the ops' bits"
                    );
                }
                // The norm's code is the same for every format (it scales
                // x, not the weights): a format of each pairing, at one
                // column (Q4_0) and at 3, keeps lavapipe's cold pipeline
                // compiles in bounds.
                let norm_formats = [
                    GgmlType::F32,
                    GgmlType::Q4_0,
                    GgmlType::Q4_K,
                    GgmlType::Q6_K,
                ];
                if norm_formats.contains(&ty) && (m == 3 || (m == 1 && ty == GgmlType::Q4_0)) {
                    check_norm_folded(&mut r, ty, m, [&packed, &single], &on_cpu, &glu_pair, t);
                }
            }
        }
    });
}

/// `norm_mul_mats` with F32 and F16 rows whose length is not a multiple
/// of 4: the matvec without pairs (x a float at a time, the last 2
/// elements one by one), the norm folded in, against the cpu's norm then
/// matvec.
#[test]
fn norm_folded_into_rows_of_odd_length() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (k, n, m) = (258usize, 20usize, 3usize);
        for ty in [GgmlType::F32, GgmlType::F16] {
            let vals = r.vec_scaled(k * n, 1.0);
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            let mut b = vec![0u8; rb * n];
            for i in 0..n {
                glint_quant::quantize_row(
                    ty,
                    &vals[i * k..(i + 1) * k],
                    &mut b[i * rb..(i + 1) * rb],
                )
                .unwrap();
            }
            let w = pair(ty, [k, n, 1, 1], Usage::Weights, Some(&b));
            let x = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 3.0));
            let nw = f32p([k, 1, 1, 1], &r.vec_scaled(k, 1.0));
            let (h, o) = (out([k, m, 1, 1]), out([n, m, 1, 1]));
            gpu()
                .norm_mul_mats(&x.0, None, (&nw.0, 1e-2), &h.0, &[&w.0], &[&o.0])
                .unwrap();
            cpu()
                .norm_mul_mats(&x.1, None, (&nw.1, 1e-2), &h.1, &[&w.1], &[&o.1])
                .unwrap();
            compare(
                &format!("norm_mul_mats {ty:?} k{k}"),
                &o,
                GgmlType::F32,
                tol::MATMUL_FLOAT,
            );
        }
    });
}

/// A post-norm left pending and added by the next block's first matvecs
/// (`norm_mul_mats`, `norm_mul_mats_glu` with a `PostAdd`): the stream
/// they write (`x + rms_norm(y) * pw`) and their outputs against the cpu's
/// `norm_add`, norm, matvecs. Weights packed in one type (Q/K/V of Q4_K:
/// the fused kernel adds), in two (Gemma 3's Q5_0, Q5_0 and Q8_0: the
/// first run adds and stores the stream, the part alone reads it), a part
/// alone first (added apart, then the run reads it), and rows whose length
/// is not a multiple of 4 (F32, k 258: added apart); 1 and 3 columns; k 512
/// and 640 (Gemma 3's), so each lane's strided sums take several steps.
#[test]
fn post_norm_added_by_the_next_matvecs() {
    use GgmlType::{F32, Q4_K, Q5_0, Q8_0};
    each_gpu(|| {
        let mut r = Rng(seed());
        let cases: [(&[GgmlType], usize); 4] = [
            (&[Q4_K, Q4_K, Q4_K], 512),
            (&[Q5_0, Q5_0, Q8_0], 640),
            (&[Q8_0, Q5_0, Q5_0], 256),
            (&[F32, F32, F32], 258),
        ];
        let ns = [70usize, 33, 33];
        for (types, k) in cases {
            let parts: Vec<_> = (0..3)
                .map(|i| random_part(&mut r, types[i], k, ns[i], i))
                .collect();
            let gw = gpu().weights(parts.clone()).unwrap();
            let cw = cpu().weights(parts.clone()).unwrap();
            // Gate and up: parts 1 and 2, packed on their own.
            let gp = gpu().weights(parts[1..].to_vec()).unwrap();
            let t = if types[0] == F32 {
                tol::MATMUL_FLOAT
            } else {
                tol::MATMUL_QUANT
            };
            for m in [1usize, 3] {
                // The post-norm's eps apart from the norm's, and y small
                // enough for it to count: a swap of the two would show.
                let (eps, post_eps) = (1e-2, 0.3);
                let x = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 3.0));
                let y = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 0.5));
                let pw = f32p([k, 1, 1, 1], &r.vec_scaled(k, 1.0));
                let nw = f32p([k, 1, 1, 1], &r.vec_scaled(k, 1.0));
                let (h, tmp, xs) = (out([k, m, 1, 1]), out([k, m, 1, 1]), out([k, m, 1, 1]));
                let outs: Vec<Pair> = ns.iter().map(|&n| out([n, m, 1, 1])).collect();
                let what = format!("{types:?} k{k} m{m}");
                gpu()
                    .norm_mul_mats(
                        &x.0,
                        Some(PostAdd {
                            y: &y.0,
                            w: &pw.0,
                            eps: post_eps,
                            tmp: &tmp.0,
                            out: &xs.0,
                        }),
                        (&nw.0, eps),
                        &h.0,
                        &[&gw[0], &gw[1], &gw[2]],
                        &[&outs[0].0, &outs[1].0, &outs[2].0],
                    )
                    .unwrap();
                cpu()
                    .norm_mul_mats(
                        &x.1,
                        Some(PostAdd {
                            y: &y.1,
                            w: &pw.1,
                            eps: post_eps,
                            tmp: &tmp.1,
                            out: &xs.1,
                        }),
                        (&nw.1, eps),
                        &h.1,
                        &[&cw[0], &cw[1], &cw[2]],
                        &[&outs[0].1, &outs[1].1, &outs[2].1],
                    )
                    .unwrap();
                compare(&format!("{what}: stream"), &xs, F32, tol::REDUCTION);
                for (i, o) in outs.iter().enumerate() {
                    compare(&format!("{what}: part {i}"), o, F32, t);
                }
                if types[1] != types[2] {
                    continue;
                }
                let op = Glu::SwiGlu;
                let n = ns[1];
                let (gate, up, o) = (out([n, m, 1, 1]), out([n, m, 1, 1]), out([n, m, 1, 1]));
                let xs2 = out([k, m, 1, 1]);
                gpu()
                    .norm_mul_mats_glu(
                        op,
                        &x.0,
                        Some(PostAdd {
                            y: &y.0,
                            w: &pw.0,
                            eps: post_eps,
                            tmp: &tmp.0,
                            out: &xs2.0,
                        }),
                        (&nw.0, eps),
                        &h.0,
                        [&gp[0], &gp[1]],
                        [&gate.0, &up.0],
                        &o.0,
                    )
                    .unwrap();
                cpu()
                    .norm_mul_mats_glu(
                        op,
                        &x.1,
                        Some(PostAdd {
                            y: &y.1,
                            w: &pw.1,
                            eps: post_eps,
                            tmp: &tmp.1,
                            out: &xs2.1,
                        }),
                        (&nw.1, eps),
                        &h.1,
                        [&cw[1], &cw[2]],
                        [&gate.1, &up.1],
                        &o.1,
                    )
                    .unwrap();
                compare(&format!("{what}: glu stream"), &xs2, F32, tol::REDUCTION);
                compare(&format!("{what}: glu"), &o, F32, t);
            }
        }
    });
}

/// `norm_mul_mats` and `norm_mul_mats_glu` over `m` columns of x (at a
/// scale the norm undoes, an eps that counts) with the weights of
/// [`packed_weights_and_fused_matvecs`]: `[packed, single]` and `on_cpu`
/// (3 parts each), `glu_pair` (parts 1 and 2 packed on their own).
fn check_norm_folded(
    r: &mut Rng,
    ty: GgmlType,
    m: usize,
    [packed, single]: [&[glint_gpu::GpuTensor]; 2],
    on_cpu: &[glint_cpu::CpuTensor],
    glu_pair: &[glint_gpu::GpuTensor],
    t: f64,
) {
    let d = |i: usize| glint_backend::Tensor::desc(&packed[i]).clone();
    let (k, eps) = (d(0).ne[0], 1e-2);
    let x = f32p([k, m, 1, 1], &r.vec_scaled(k * m, 3.0));
    let nw = f32p([k, 1, 1, 1], &r.vec_scaled(k, 1.0));
    let h = out([k, m, 1, 1]);
    let read = |t: &glint_gpu::GpuTensor| -> Vec<f32> {
        let mut b = vec![0u8; glint_backend::Tensor::desc(t).n_bytes()];
        gpu().read(t, 0, &mut b).unwrap();
        bytemuck::cast_slice(&b).to_vec()
    };
    for idx in [&[0usize, 1, 2][..], &[0, 1][..]] {
        let outs: Vec<Pair> = idx.iter().map(|&i| out([d(i).ne[1], m, 1, 1])).collect();
        let ws: Vec<_> = idx.iter().map(|&i| &packed[i]).collect();
        let og: Vec<_> = outs.iter().map(|o| &o.0).collect();
        gpu()
            .norm_mul_mats(&x.0, None, (&nw.0, eps), &h.0, &ws, &og)
            .unwrap();
        let wc: Vec<_> = idx.iter().map(|&i| &on_cpu[i]).collect();
        let oc: Vec<_> = outs.iter().map(|o| &o.1).collect();
        cpu()
            .norm_mul_mats(&x.1, None, (&nw.1, eps), &h.1, &wc, &oc)
            .unwrap();
        for (j, &i) in idx.iter().enumerate() {
            let what = format!("norm_mul_mats {ty:?} {} parts m{m} part {i}", idx.len());
            compare(&what, &outs[j], GgmlType::F32, t);
            let one = out([d(i).ne[1], m, 1, 1]);
            gpu()
                .norm_mul_mats(&x.0, None, (&nw.0, eps), &h.0, &[&single[i]], &[&one.0])
                .unwrap();
            assert!(
                read(&outs[j].0) == read(&one.0),
                "{what}: not one by one's bits"
            );
        }
    }
    {
        let op = Glu::SwiGlu;
        let n = d(1).ne[1];
        let (gate, up, o) = (out([n, m, 1, 1]), out([n, m, 1, 1]), out([n, m, 1, 1]));
        let what = format!("norm_mul_mats_glu {op:?} {ty:?} m{m}");
        gpu()
            .norm_mul_mats_glu(
                op,
                &x.0,
                None,
                (&nw.0, eps),
                &h.0,
                [&glu_pair[0], &glu_pair[1]],
                [&gate.0, &up.0],
                &o.0,
            )
            .unwrap();
        cpu()
            .norm_mul_mats_glu(
                op,
                &x.1,
                None,
                (&nw.1, eps),
                &h.1,
                [&on_cpu[1], &on_cpu[2]],
                [&gate.1, &up.1],
                &o.1,
            )
            .unwrap();
        compare(&what, &o, GgmlType::F32, t);
        let o1 = out([n, m, 1, 1]);
        gpu()
            .norm_mul_mats_glu(
                op,
                &x.0,
                None,
                (&nw.0, eps),
                &h.0,
                [&single[1], &single[2]],
                [&gate.0, &up.0],
                &o1.0,
            )
            .unwrap();
        assert!(read(&o.0) == read(&o1.0), "{what}: not one by one's bits");
    }
}

/// Backend::rope_store on wgpu (one dispatch for F32/F16 caches) against
/// the four ops it stands for, run one by one on the same device: the same
/// bits in qr and in every cache row (rows it must not touch included: the
/// caches start poisoned and one token's row is -1, out of the cache).
/// NORM and NEOX, plain and YaRN with a partial n_rot, GQA; a Q8_0 cache
/// takes the composing path and must give its result too. With QK-norm
/// (Gemma 3's head_dim 256 too) the per-head rms_norm of q and k comes
/// first, in the same dispatch: the same bits as rms_norm's. And the cpu
/// backend's default against the fused kernel, within the rope tolerance.
#[test]
fn rope_store_is_rope_then_set_rows() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (nh, nkv, m, rows) = (6, 2, 5, 40);
        for (hd, normed) in [(64, false), (64, true), (256, true)] {
            let n = hd * nkv;
            for mode in [RopeMode::Norm, RopeMode::Neox] {
                for pq in plain_and_yarn(mode, hd, nh) {
                    let pk = RopeParams { n_head: nkv, ..pq };
                    let q = f32p([hd, nh, m, 1], &r.vec_scaled(hd * nh * m, 2.0));
                    let k = f32p([hd, nkv, m, 1], &r.vec_scaled(n * m, 2.0));
                    let v = f32p([n, m, 1, 1], &r.vec_scaled(n * m, 2.0));
                    let (qn, kn) = (
                        f32p([hd, 1, 1, 1], &r.vec_scaled(hd, 1.5)),
                        f32p([hd, 1, 1, 1], &r.vec_scaled(hd, 1.5)),
                    );
                    let (qd, kd) = (out([hd, nh, m, 1]), out([hd, nkv, m, 1]));
                    let eps = 1e-6;
                    let pos = i32p(&(0..m).map(|_| r.below(250) as i32).collect::<Vec<_>>());
                    let mut idx: Vec<i32> = (0..m).map(|i| (7 * i + 3) as i32).collect();
                    idx[2] = -1;
                    let idx = i32p(&idx);
                    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0] {
                        let what =
                            format!("{mode:?} hd {hd} norm {normed} n_rot {} {ty:?}", pq.n_rot);
                        // Finite, and not what any op writes.
                        let fill = vec![0x3Cu8; ty.bytes_for((n * rows) as u64).unwrap() as usize];
                        let cache = || pair(ty, [n, rows, 1, 1], Usage::KvCache, Some(&fill));
                        let (kc, vc, kc2, vc2) = (cache(), cache(), cache(), cache());
                        let (qr, kr, qr2, kr2) = (
                            out([hd, nh, m, 1]),
                            out([hd, nkv, m, 1]),
                            out([hd, nh, m, 1]),
                            out([hd, nkv, m, 1]),
                        );
                        let (g, c) = (gpu(), cpu());
                        let ts = [
                            &q, &k, &v, &qn, &kn, &qd, &kd, &pos, &qr, &kr, &idx, &kc, &vc,
                        ];
                        let pqk = [&pq, &pk];
                        rope_store_on(g, ts.map(|t| &t.0), normed.then_some(eps), pqk);
                        let (qd2, kd2) = (out([hd, nh, m, 1]), out([hd, nkv, m, 1]));
                        let (q1, k1) = if normed {
                            g.rms_norm(&q.0, Some(&qn.0), eps, &qd2.0).unwrap();
                            g.rms_norm(&k.0, Some(&kn.0), eps, &kd2.0).unwrap();
                            (&qd2.0, &kd2.0)
                        } else {
                            (&q.0, &k.0)
                        };
                        g.rope(q1, &pos.0, &pq, &qr2.0).unwrap();
                        g.rope(k1, &pos.0, &pk, &kr2.0).unwrap();
                        let flat = g.view(&kr2.0, [n, m, 1, 1]).unwrap();
                        g.set_rows(&flat, &idx.0, &kc2.0).unwrap();
                        g.set_rows(&v.0, &idx.0, &vc2.0).unwrap();
                        let bytes = |t: &glint_gpu::GpuTensor| {
                            let mut b = vec![0u8; glint_backend::Tensor::desc(t).n_bytes()];
                            g.read(t, 0, &mut b).unwrap();
                            b
                        };
                        assert!(bytes(&qr.0) == bytes(&qr2.0), "{what}: qr differs");
                        assert!(bytes(&kc.0) == bytes(&kc2.0), "{what}: K cache differs");
                        assert!(bytes(&vc.0) == bytes(&vc2.0), "{what}: V cache differs");
                        rope_store_on(c, ts.map(|t| &t.1), normed.then_some(eps), pqk);
                        compare(&format!("{what}: qr vs cpu"), &qr, GgmlType::F32, tol::ROPE);
                        if ty != GgmlType::Q8_0 {
                            let t = tol::kshift(ty);
                            compare(&format!("{what}: K vs cpu"), &kc, ty, t);
                            compare(&format!("{what}: V vs cpu"), &vc, ty, 0.0);
                        }
                    }
                }
            }
        }
    });
}

/// Rope params of `n_head` heads: plain, and YaRN with a partial n_rot and
/// attn_factor != 1.
fn plain_and_yarn(mode: RopeMode, hd: usize, n_head: usize) -> [RopeParams; 2] {
    let plain = RopeParams::plain(mode, hd, n_head, 10000.0);
    let yarn = RopeParams {
        n_rot: 48,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 0.9,
        n_ctx_orig: 4096,
        ..plain
    };
    [plain, yarn]
}

/// Backend::rope_store on `b` of q, k, v into qr and the caches, QK-normed
/// with weights qn, kn (through qd, kd) when `norm_eps` is given.
fn rope_store_on<B: Backend>(
    b: &B,
    [q, k, v, qn, kn, qd, kd, pos, qr, kr, idx, kc, vc]: [&B::Tensor; 13],
    norm_eps: Option<f32>,
    pqk: [&RopeParams; 2],
) {
    let norm = norm_eps.map(|eps| QkNorm {
        w: [qn, kn],
        eps,
        out: [qd, kd],
    });
    b.rope_store([q, k, v], norm, pos, pqk, [qr, kr], idx, [kc, vc])
        .unwrap();
}

/// LFM2's short convolution: tokens of three sequences interleaved (one
/// slot out of range), a state carried over two calls, outputs and the
/// final states held to the cpu's.
#[test]
fn short_conv_matches_cpu() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n, l, n_slots) = (100, 3, 4);
        let d = l - 1;
        let kernel = f32p([l, n, 1, 1], &r.vec_scaled(l * n, 1.0));
        let state = f32p([d * n, n_slots, 1, 1], &r.vec_scaled(d * n * n_slots, 2.0));
        for (m, slots) in [
            (7, vec![0, 2, 0, 3, 2, 0, 1]),
            (5, vec![2, 9, 2, 0, 1]),
            (1, vec![3]),
        ] {
            let x = f32p([n, m, 1, 1], &r.vec_scaled(n * m, 2.0));
            let s = i32p(&slots);
            let o = out([n, m, 1, 1]);
            gpu()
                .short_conv(&x.0, &kernel.0, &state.0, &s.0, &o.0)
                .unwrap();
            cpu()
                .short_conv(&x.1, &kernel.1, &state.1, &s.1, &o.1)
                .unwrap();
            compare("short_conv out", &o, GgmlType::F32, tol::SHORT_CONV);
            compare("short_conv state", &state, GgmlType::F32, tol::SHORT_CONV);
        }
    });
}

/// Backend::top_k on wgpu (a radix select over the keys' bytes) against
/// the cpu's sort: the count of keys at or above the k-th and, where they
/// fit the room, the same candidates (as sets: the kernel writes them in
/// the atomics' order). Rows: random; coarse values (many ties with the
/// k-th); every other value -inf with a few finite (ties past the room:
/// the count alone is defined); +0 and -0 at the top (-0 ranks below +0:
/// the k-th is +0 and the count leaves the -0 out); NaNs of both signs and
/// +inf among them (above all).
#[test]
fn top_k_matches_cpu() {
    each_gpu(|| {
        let mut r = Rng(seed());
        let (n, k, cap) = (5000usize, 40usize, 100usize);
        let mut rows: Vec<Vec<f32>> = Vec::new();
        rows.push(r.normals(n, 5.0));
        rows.push(
            r.normals(n, 3.0)
                .iter()
                .map(|v| (v * 2.0).round() / 2.0)
                .collect(),
        );
        let mut sparse = vec![f32::NEG_INFINITY; n];
        for i in 0..10 {
            sparse[i * 397] = r.normal();
        }
        rows.push(sparse);
        let mut zeros: Vec<f32> = r.normals(n, 2.0).iter().map(|v| -v.abs() - 0.5).collect();
        for i in 0..50 {
            zeros[i * 31 + 7] = if i % 10 < 9 { 0.0 } else { -0.0 };
        }
        rows.push(zeros);
        let mut special = r.normals(n, 1.0);
        special[123] = f32::NAN;
        special[4000] = f32::INFINITY;
        special[777] = f32::from_bits(0xffc0_0000); // a negative NaN
        rows.push(special);
        let m = rows.len();
        let x = f32p([n, m, 1, 1], &rows.concat());
        let stride = 1 + 2 * cap;
        let o = pair(GgmlType::I32, [stride, m, 1, 1], Usage::Scratch, None);
        gpu().top_k(&x.0, k, &o.0).unwrap();
        cpu().top_k(&x.1, k, &o.1).unwrap();
        let (mut g, mut c) = (vec![0u8; stride * m * 4], vec![0u8; stride * m * 4]);
        gpu().read(&o.0, 0, &mut g).unwrap();
        cpu().read(&o.1, 0, &mut c).unwrap();
        let (g, c): (&[i32], &[i32]) = (bytemuck::cast_slice(&g), bytemuck::cast_slice(&c));
        let want_counts = [None, None, Some(n), Some(45), None];
        for j in 0..m {
            let (gr, cr) = (&g[j * stride..][..stride], &c[j * stride..][..stride]);
            assert_eq!(gr[0], cr[0], "row {j}: count");
            let count = cr[0] as usize;
            assert!(count >= k, "row {j}: {count}");
            if let Some(w) = want_counts[j] {
                assert_eq!(count, w, "row {j}");
            }
            if count > cap {
                continue;
            }
            let set = |row: &[i32]| {
                let mut v: Vec<(i32, i32)> = (0..count)
                    .map(|s| (row[1 + 2 * s], row[2 + 2 * s]))
                    .collect();
                v.sort();
                v
            };
            assert_eq!(set(gr), set(cr), "row {j}");
        }
        // Both NaNs and +inf are among the candidates of their row.
        for row in [&c[4 * stride..][..stride], &g[4 * stride..][..stride]] {
            let ids: Vec<i32> = (0..row[0] as usize).map(|s| row[1 + 2 * s]).collect();
            for want in [123, 777, 4000] {
                assert!(ids.contains(&want), "{want} not in {ids:?}");
            }
        }
        // k past cap, or 0: refused.
        assert!(gpu().top_k(&x.0, cap + 1, &o.0).is_err());
        assert!(cpu().top_k(&x.1, 0, &o.1).is_err());
    });
}
