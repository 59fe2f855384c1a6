//! Attention against the formula in f64: GQA, MQA, causal mask, soft-capping,
//! a fully masked row, a window starting at kv_start > 0, F16 caches.

mod common;

use common::*;
use glint_backend::{AttnParams, Backend, BackendError, GgmlType};
use glint_cpu::{Cache, CpuTensor, Kernels};
use half::f16;

/// Output of attention vs f64: a convex combination of V rows (|v| <= 1)
/// after an f32 softmax over <= 64 logits: 1e-5 absolute.
const ATTN_TOL: f64 = 1e-5;

/// Fast vs plain path with ggml's f16 rounding of the softmax weights: a
/// weight that rounding puts on the other side of an f16 step moves the
/// output by up to one step (2^-11 relative, weights <= 1) times |v| <= 1.
const F16_WEIGHTS_TOL: f64 = 6e-4;

struct Case {
    p: AttnParams,
    m: usize,
    n_rows: usize,
    cache_ty: GgmlType,
    mask: Vec<f32>,
}

/// `q`: [hd, n_head, m]; `k`, `v`: [hd * n_head_kv, n_rows] (values as the cache holds them).
fn attn64(p: &AttnParams, m: usize, q: &[f32], k: &[f64], v: &[f64], mask: &[f32]) -> Vec<f64> {
    let hd = p.head_dim;
    let row = hd * p.n_head_kv;
    let mut out = vec![0f64; hd * p.n_head * m];
    for i in 0..m {
        for h in 0..p.n_head {
            let hk = h / (p.n_head / p.n_head_kv);
            let logits: Vec<f64> = (0..p.n_kv)
                .map(|j| {
                    let base = (p.kv_start + j) * row + hk * hd;
                    let mut x: f64 = (0..hd)
                        .map(|d| q[(i * p.n_head + h) * hd + d] as f64 * k[base + d])
                        .sum();
                    if p.softcap > 0.0 {
                        x = p.softcap as f64 * (x / p.softcap as f64).tanh();
                    }
                    x * p.scale as f64 + mask[i * p.n_kv + j] as f64
                })
                .collect();
            let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                continue;
            }
            let w: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
            let s: f64 = w.iter().sum();
            for (j, wj) in w.iter().enumerate() {
                let base = (p.kv_start + j) * row + hk * hd;
                for d in 0..hd {
                    out[(i * p.n_head + h) * hd + d] += wj / s * v[base + d];
                }
            }
        }
    }
    out
}

fn cache(
    be: &glint_cpu::CpuBackend,
    ty: GgmlType,
    row: usize,
    vals: &[f32],
) -> (CpuTensor, Vec<f64>) {
    let n = vals.len() / row;
    if ty == GgmlType::F16 {
        let h: Vec<f16> = vals.iter().map(|&x| f16::from_f32(x)).collect();
        let t = from_bytes(be, GgmlType::F16, [row, n, 1, 1], bytemuck::cast_slice(&h));
        (t, h.iter().map(|x| x.to_f64()).collect())
    } else {
        (
            f32s(be, [row, n, 1, 1], vals),
            vals.iter().map(|&x| x as f64).collect(),
        )
    }
}

fn run(name: &str, c: &Case, seed: u64) {
    let be = backend();
    let mut rng = Rng(seed);
    let p = &c.p;
    let row = p.head_dim * p.n_head_kv;
    let qv: Vec<f32> = rng
        .vec(p.head_dim * p.n_head * c.m)
        .iter()
        .map(|x| x * 2.0)
        .collect();
    let kvals = rng.vec(row * c.n_rows);
    let vvals = rng.vec(row * c.n_rows);
    let q = f32s(&be, [p.head_dim, p.n_head, c.m, 1], &qv);
    let (k, k64) = cache(&be, c.cache_ty, row, &kvals);
    let (v, v64) = cache(&be, c.cache_ty, row, &vvals);
    let mask = f32s(&be, [p.n_kv, c.m, 1, 1], &c.mask);
    let out = zeros(&be, GgmlType::F32, [p.head_dim * p.n_head, c.m, 1, 1]);
    be.attention(&q, &k, &v, &mask, p, &out).unwrap();
    let got = read_f32(&be, &out);
    let want = attn64(p, c.m, &qv, &k64, &v64, &c.mask);
    assert_close(name, &got, &want, |_| ATTN_TOL);

    // The fast loop equals the plain reference loop.
    let mut reference = vec![0f32; got.len()];
    let (kh, vh): (Vec<f16>, Vec<f16>) = (
        kvals.iter().map(|&x| f16::from_f32(x)).collect(),
        vvals.iter().map(|&x| f16::from_f32(x)).collect(),
    );
    let (kc, vc) = if c.cache_ty == GgmlType::F16 {
        (Cache::F16(&kh), Cache::F16(&vh))
    } else {
        (Cache::F32(&kvals), Cache::F32(&vvals))
    };
    glint_cpu::reference::attention(&qv, kc, vc, &c.mask, p, c.m, &mut reference);
    let r64: Vec<f64> = reference.iter().map(|&x| x as f64).collect();
    assert_close(&format!("{name} vs reference"), &got, &r64, |_| ATTN_TOL);

    // Both paths (the AVX2 one the backend took where the cpu has it, and
    // the plain loops), with and without ggml's f16 rounding, against each
    // other.
    for ggml_f16 in [false, true] {
        let mut fast = vec![0f32; got.len()];
        let mut plain = vec![0f32; got.len()];
        for (kernels, o) in [(Kernels::Fast, &mut fast), (Kernels::Plain, &mut plain)] {
            glint_cpu::attention_with(kernels, true, &qv, kc, vc, &c.mask, p, o, ggml_f16);
        }
        let p64: Vec<f64> = plain.iter().map(|&x| x as f64).collect();
        let tol = if ggml_f16 { F16_WEIGHTS_TOL } else { ATTN_TOL };
        assert_close(
            &format!("{name} fast vs plain, f16 rounding {ggml_f16}"),
            &fast,
            &p64,
            |_| tol,
        );
        if !ggml_f16 {
            assert_close(&format!("{name} plain vs f64"), &plain, &want, |_| ATTN_TOL);
        }
    }
}

/// Causal mask for `m` new tokens at the end of `n_kv` rows: token i sees rows 0..=n_kv-m+i.
fn causal(n_kv: usize, m: usize) -> Vec<f32> {
    let mut mask = vec![0f32; n_kv * m];
    for i in 0..m {
        for j in n_kv - m + i + 1..n_kv {
            mask[i * n_kv + j] = f32::NEG_INFINITY;
        }
    }
    mask
}

#[test]
fn gqa_8_over_2_causal_f32_and_f16() {
    for ty in [GgmlType::F32, GgmlType::F16] {
        let c = Case {
            p: AttnParams::new(8, 2, 20, 23),
            m: 5,
            n_rows: 23,
            cache_ty: ty,
            mask: causal(23, 5),
        };
        run(&format!("gqa {ty}"), &c, 21);
    }
}

#[test]
fn mqa_with_softcap_and_bias_mask() {
    let mut mask = causal(17, 3);
    mask[2] = -0.75; // a finite bias is added, not treated as masked
    let mut c = Case {
        p: AttnParams::new(4, 1, 12, 17),
        m: 3,
        n_rows: 17,
        cache_ty: GgmlType::F32,
        mask,
    };
    c.p.softcap = 0.8; // small cap: logits |q·k| ~ 1 are really bent
    run("mqa softcap", &c, 22);
    c.cache_ty = GgmlType::F16;
    run("mqa softcap f16", &c, 23);
}

#[test]
fn a_fully_masked_row_gives_zeros() {
    let mut mask = causal(9, 2);
    mask[9..].fill(f32::NEG_INFINITY);
    let c = Case {
        p: AttnParams::new(2, 2, 8, 9),
        m: 2,
        n_rows: 9,
        cache_ty: GgmlType::F32,
        mask,
    };
    run("fully masked", &c, 24);
    let be = backend();
    let q = f32s(&be, [8, 2, 1, 1], &[1.0; 16]);
    let kv = f32s(&be, [16, 9, 1, 1], &[1.0; 144]);
    let mask = f32s(&be, [9, 1, 1, 1], &[f32::NEG_INFINITY; 9]);
    let out = f32s(&be, [16, 1, 1, 1], &[5.0; 16]);
    be.attention(&q, &kv, &kv, &mask, &AttnParams::new(2, 2, 8, 9), &out)
        .unwrap();
    assert_eq!(read_f32(&be, &out), vec![0.0; 16]);
}

#[test]
fn window_starting_at_kv_start_reads_only_its_rows() {
    // Stream 1 of a multi-stream cache: rows 13..13+11 of 30.
    let mut p = AttnParams::new(6, 3, 16, 11);
    p.kv_start = 13;
    for ty in [GgmlType::F32, GgmlType::F16] {
        let c = Case {
            p,
            m: 4,
            n_rows: 30,
            cache_ty: ty,
            mask: causal(11, 4),
        };
        run(&format!("kv_start 13 {ty}"), &c, 25);
    }
}

#[test]
fn attention_rejects_bad_shapes() {
    let be = backend();
    let q = zeros(&be, GgmlType::F32, [8, 4, 2, 1]);
    let k = zeros(&be, GgmlType::F32, [16, 10, 1, 1]);
    let mask = zeros(&be, GgmlType::F32, [10, 2, 1, 1]);
    let out = zeros(&be, GgmlType::F32, [32, 2, 1, 1]);
    let mut p = AttnParams::new(4, 2, 8, 10);
    be.attention(&q, &k, &k, &mask, &p, &out).unwrap();
    p.n_head_kv = 3;
    assert!(matches!(
        be.attention(&q, &k, &k, &mask, &p, &out),
        Err(BackendError::Shape { .. })
    ));
    p.n_head_kv = 2;
    p.kv_start = 1; // window 1..11 runs past 10 rows
    assert!(matches!(
        be.attention(&q, &k, &k, &mask, &p, &out),
        Err(BackendError::Shape { .. })
    ));
    p.kv_start = 0;
    p.n_kv = 9; // mask has 10 rows
    assert!(matches!(
        be.attention(&q, &k, &k, &mask, &p, &out),
        Err(BackendError::Shape { .. })
    ));
}

/// Gemma-like heads (head_dim 256, one KV head) and an odd one (136: two
/// 64-element chunks and a tail), prefill and one token, F32 and F16
/// caches, a window starting at kv_start > 0.
#[test]
fn wide_heads_prefill_and_decode() {
    for (hd, m) in [(256usize, 7usize), (136, 5), (136, 1), (256, 1)] {
        for ty in [GgmlType::F32, GgmlType::F16] {
            let n_kv = 70;
            let mut c = Case {
                p: AttnParams::new(4, 1, hd, n_kv),
                m,
                n_rows: n_kv + 3,
                cache_ty: ty,
                mask: causal(n_kv, m),
            };
            c.p.kv_start = 3;
            c.p.scale = 0.5 / (hd as f32).sqrt(); // logits of order 1
            run(
                &format!("wide hd {hd} m {m} {ty}"),
                &c,
                40 + hd as u64 + m as u64,
            );
        }
    }
}

/// Four sequences in one unified cache: each token sees only its own
/// sequence's cells, scattered through the window (SmolLM2's 9/3 heads).
#[test]
fn scattered_sequences_in_one_window() {
    let (n_kv, m) = (40usize, 4usize);
    let mut mask = vec![f32::NEG_INFINITY; n_kv * m];
    for i in 0..m {
        for j in 0..n_kv {
            if j % m == i && j <= 36 + i {
                mask[i * n_kv + j] = 0.0;
            }
        }
    }
    for ty in [GgmlType::F32, GgmlType::F16] {
        let c = Case {
            p: AttnParams::new(9, 3, 64, n_kv),
            m,
            n_rows: n_kv,
            cache_ty: ty,
            mask: mask.clone(),
        };
        run(&format!("scattered {ty}"), &c, 77);
    }
}

/// Called directly with an empty window at the end of the cache, or heads
/// that do not group over the kv heads: zeros on both paths, no panic;
/// and with no query tokens over a long window: nothing, no panic.
#[test]
fn empty_windows_and_ungrouped_heads_give_zeros() {
    let (hd, rows) = (16usize, 5usize);
    let kv = vec![0.5f32; hd * 2 * rows];
    let q = vec![1.0f32; hd * 4];
    for kernels in [Kernels::Fast, Kernels::Plain] {
        let mut p = AttnParams::new(4, 2, hd, 0);
        p.kv_start = rows;
        let mut out = vec![7.0f32; hd * 4];
        let c = Cache::F32(&kv);
        glint_cpu::attention_with(kernels, false, &q, c, c, &[], &p, &mut out, false);
        assert!(out.iter().all(|&x| x == 0.0), "{kernels:?} empty window");
        let p = AttnParams::new(4, 3, hd, 2);
        let mut out = vec![7.0f32; hd * 4];
        let mask = [0.0f32; 2];
        glint_cpu::attention_with(kernels, false, &q, c, c, &mask, &p, &mut out, false);
        assert!(out.iter().all(|&x| x == 0.0), "{kernels:?} 4 heads over 3");
    }
    // No query tokens against a window long enough for the split decode
    // path: nothing to do, no panic.
    let rows = 300;
    let kv = vec![0.5f32; hd * rows];
    let c = Cache::F32(&kv);
    for (kernels, par) in [(Kernels::Fast, false), (Kernels::Fast, true)] {
        let p = AttnParams::new(4, 1, hd, rows);
        let mut out: Vec<f32> = Vec::new();
        glint_cpu::attention_with(kernels, par, &[], c, c, &[], &p, &mut out, false);
        assert!(out.is_empty());
    }
}

/// Causal mask over a sliding window of `w` rows: token i (at row
/// n_kv - m + i) sees rows (pos - w, pos]. Whole tiles of the window's start
/// are masked for every token of a late block.
fn sliding(n_kv: usize, m: usize, w: usize) -> Vec<f32> {
    let mut mask = causal(n_kv, m);
    for i in 0..m {
        let pos = n_kv - m + i;
        for j in 0..(pos + 1).saturating_sub(w) {
            mask[i * n_kv + j] = f32::NEG_INFINITY;
        }
    }
    mask
}

/// A causal mask with a finite bias (ALiBi-like) on every `every`-th
/// element it lets through: no tile is clear.
fn biased(n_kv: usize, m: usize, every: usize) -> Vec<f32> {
    let mut mask = causal(n_kv, m);
    for (i, x) in mask.iter_mut().enumerate() {
        if *x == 0.0 && i % every == 1 {
            *x = -0.25 * (i % 7) as f32;
        }
    }
    mask
}

/// Seeded inputs of a case at depth: params (`kv_start` rows before the
/// window, logits of order 1), queries `[hd, n_head, m]`, and K and V of
/// `kv_start + n_kv` rows as f32 and as f16.
struct DepthInputs {
    p: AttnParams,
    qv: Vec<f32>,
    kv: Vec<f32>,
    vv: Vec<f32>,
    kh: Vec<f16>,
    vh: Vec<f16>,
}

fn depth_inputs(
    (nh, nkv, hd, n_kv): (usize, usize, usize, usize),
    m: usize,
    softcap: f32,
    kv_start: usize,
    seed: u64,
) -> DepthInputs {
    let mut p = AttnParams::new(nh, nkv, hd, n_kv);
    p.kv_start = kv_start;
    p.softcap = softcap;
    p.scale = 0.5 / (hd as f32).sqrt();
    let mut rng = Rng(seed);
    let row = hd * nkv;
    let qv: Vec<f32> = rng.vec(hd * nh * m).iter().map(|x| x * 2.0).collect();
    let (kv, vv) = (
        rng.vec(row * (n_kv + kv_start)),
        rng.vec(row * (n_kv + kv_start)),
    );
    let kh = kv.iter().map(|&x| f16::from_f32(x)).collect();
    let vh = vv.iter().map(|&x| f16::from_f32(x)).collect();
    DepthInputs {
        p,
        qv,
        kv,
        vv,
        kh,
        vh,
    }
}

/// Prefill at depth (the blocked path: windows of several 64-row tiles and
/// a partial one, blocks of tokens and a partial last block): against f64
/// and the plain loops (`run`), and, bit for bit, against the same tokens
/// attended one at a time (the per-token grouped path), each on one thread
/// and on the pool. GQA 1, 3 and 4 heads per kv head, F32 and F16 caches,
/// causal and sliding-window masks (whole tiles masked), soft-capping.
#[test]
fn prefill_at_depth_blocks_and_tiles() {
    let cases: [(usize, usize, usize, usize, usize, f32); 5] = [
        // (n_head, n_head_kv, head_dim, n_kv, m, softcap)
        (9, 3, 64, 64 * 3 + 17, 37, 0.0),
        (4, 4, 32, 64 * 4, 70, 0.0),
        (8, 2, 40, 64 * 2 + 5, 21, 2.5),
        (4, 1, 136, 150, 17, 0.0),
        (6, 2, 48, 64 * 2 + 11, 19, 2.5),
    ];
    for (n, &(nh, nkv, hd, n_kv, m, cap)) in cases.iter().enumerate() {
        for ty in [GgmlType::F32, GgmlType::F16] {
            for (mname, mask) in [
                ("causal", causal(n_kv, m)),
                ("sliding", sliding(n_kv, m, 70)),
            ] {
                let mut c = Case {
                    p: AttnParams::new(nh, nkv, hd, n_kv),
                    m,
                    n_rows: n_kv + 2,
                    cache_ty: ty,
                    mask,
                };
                c.p.kv_start = 2;
                c.p.softcap = cap;
                c.p.scale = 0.5 / (hd as f32).sqrt();
                let name = format!("depth {nh}/{nkv} hd {hd} n_kv {n_kv} m {m} {ty} {mname}");
                run(&name, &c, 90 + n as u64);
                batch_equals_tokens(&name, &c, 190 + n as u64);
            }
        }
    }
}

/// `attention_with(Fast)` of `c.m` tokens equals, bit for bit, each token
/// alone (one query, its mask row), with and without ggml's f16 rounding,
/// on one thread and on the pool; and so does the AVX2 tier's batch
/// ([`Kernels::Avx2`], the blocked path without the 512-bit kernels).
fn batch_equals_tokens(name: &str, c: &Case, seed: u64) {
    let mut rng = Rng(seed);
    let p = &c.p;
    let (hd, row) = (p.head_dim, p.head_dim * p.n_head_kv);
    let qv: Vec<f32> = rng
        .vec(hd * p.n_head * c.m)
        .iter()
        .map(|x| x * 2.0)
        .collect();
    let kvals = rng.vec(row * c.n_rows);
    let vvals = rng.vec(row * c.n_rows);
    let kh: Vec<f16> = kvals.iter().map(|&x| f16::from_f32(x)).collect();
    let vh: Vec<f16> = vvals.iter().map(|&x| f16::from_f32(x)).collect();
    let (kc, vc) = if c.cache_ty == GgmlType::F16 {
        (Cache::F16(&kh), Cache::F16(&vh))
    } else {
        (Cache::F32(&kvals), Cache::F32(&vvals))
    };
    let w = hd * p.n_head;
    for ggml_f16 in [false, true] {
        let mut one = vec![0f32; w * c.m];
        for i in 0..c.m {
            let mask_i = &c.mask[i * p.n_kv..(i + 1) * p.n_kv];
            let (q_i, o_i) = (&qv[i * w..(i + 1) * w], &mut one[i * w..(i + 1) * w]);
            glint_cpu::attention_with(Kernels::Fast, false, q_i, kc, vc, mask_i, p, o_i, ggml_f16);
        }
        for (kernels, par) in [
            (Kernels::Fast, false),
            (Kernels::Fast, true),
            (Kernels::Avx2, false),
            (Kernels::Avx2, true),
        ] {
            let mut batch = vec![7f32; w * c.m];
            glint_cpu::attention_with(kernels, par, &qv, kc, vc, &c.mask, p, &mut batch, ggml_f16);
            assert!(
                batch == one,
                "{name}: {kernels:?} batch of {} vs one at a time, f16 rounding {ggml_f16}, par {par}",
                c.m
            );
        }
    }
}

/// The blocked prefill path's 512-bit kernels (what [`Kernels::Fast`] runs
/// on a cpu with AVX-512 F and DQ, for heads of whole 16-element
/// registers) against the AVX2 tier ([`Kernels::Avx2`]), bit for bit:
/// heads of 48 (one 16-element register step at a time), 64, 128 and 256
/// (four at a time); tiles of 64 keys, a partial one and a tail of keys
/// short of a group of 8; 1 to 4 rows at a time; causal, sliding-window
/// and finite-bias masks; soft-capping; F32 and F16 caches; with and
/// without ggml's f16 rounding; on one thread and on the pool.
#[test]
#[cfg_attr(not(host_avx512), ignore = "this cpu lacks AVX-512 F or DQ")]
fn avx512_blocks_equal_the_avx2_tier_bit_for_bit() {
    let cases: [(usize, usize, usize, usize, usize, f32); 5] = [
        // (n_head, n_head_kv, head_dim, n_kv, m, softcap)
        (9, 3, 64, 64 * 3 + 21, 37, 0.0),
        (6, 2, 48, 64 * 2 + 11, 19, 2.5),
        (4, 1, 256, 150, 17, 0.0),
        (8, 8, 128, 64 * 2, 40, 0.0),
        (2, 1, 64, 64 + 5, 33, 30.0),
    ];
    let mut checks = 0;
    for (n, &(nh, nkv, hd, n_kv, m, cap)) in cases.iter().enumerate() {
        for (mname, mask) in [
            ("causal", causal(n_kv, m)),
            ("sliding", sliding(n_kv, m, 70)),
            ("biased", biased(n_kv, m, 2)),
        ] {
            let DepthInputs {
                p,
                qv,
                kv,
                vv,
                kh,
                vh,
            } = depth_inputs((nh, nkv, hd, n_kv), m, cap, 3, 300 + n as u64);
            for (ty, kc, vc) in [
                ("f32", Cache::F32(&kv), Cache::F32(&vv)),
                ("f16", Cache::F16(&kh), Cache::F16(&vh)),
            ] {
                for ggml_f16 in [false, true] {
                    for par in [false, true] {
                        let [wide, avx2] = [Kernels::Fast, Kernels::Avx2].map(|kernels| {
                            let mut o = vec![7f32; hd * nh * m];
                            glint_cpu::attention_with(
                                kernels, par, &qv, kc, vc, &mask, &p, &mut o, ggml_f16,
                            );
                            o
                        });
                        assert!(wide.iter().all(|x| x.is_finite()));
                        let same = wide
                            .iter()
                            .zip(&avx2)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{nh}/{nkv} hd {hd} n_kv {n_kv} m {m} cap {cap} {mname} {ty} \
                             f16 rounding {ggml_f16} par {par}: the 512-bit tier differs"
                        );
                        checks += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checks, 5 * 3 * 2 * 2 * 2);
}

/// Decode at depth (a window of at least 512 rows: the split path, whose
/// passes divide the window among threads by chunks of tiles and the
/// cache rows by spans of elements): one token at a time and three at a
/// time give, bit for bit, what the same tokens give in a prefill block
/// (18 tokens: the blocked path), on both tiers ([`Kernels::Fast`] and
/// [`Kernels::Avx2`]), on one thread and on the pool, with and without
/// ggml's f16 rounding; and held to f64. Heads of 64 over 3 kv heads
/// (spans across kv heads), 256 over 1 (Gemma 3), 40 (whole heads a
/// span, an AVX2 tail), 48 (16-element quanta); causal, sliding-window,
/// biased and two-streams masks (whole tiles masked in the middle); F32
/// and F16 caches; soft-capping.
#[test]
fn decode_at_depth_splits_the_window_with_the_block_bits() {
    let cases: [(usize, usize, usize, usize, f32); 4] = [
        // (n_head, n_head_kv, head_dim, n_kv, softcap)
        (9, 3, 64, 64 * 9 + 17, 0.0),
        (4, 1, 256, 1100, 0.0),
        (8, 2, 40, 700, 2.5),
        (6, 2, 48, 64 * 10 + 5, 0.0),
    ];
    let m = 18;
    let mut checks = 0;
    for (n, &(nh, nkv, hd, n_kv, cap)) in cases.iter().enumerate() {
        // Two streams of 128-row runs: each token sees its stream's runs
        // (up to itself), whole tiles of the other's masked.
        let mut streams = causal(n_kv, m);
        for i in 0..m {
            for j in 0..n_kv {
                if (j / 128) % 2 != i % 2 {
                    streams[i * n_kv + j] = f32::NEG_INFINITY;
                }
            }
        }
        for (mname, mask) in [
            ("causal", causal(n_kv, m)),
            ("sliding", sliding(n_kv, m, 300)),
            ("biased", biased(n_kv, m, 3)),
            ("streams", streams),
        ] {
            let DepthInputs {
                p,
                qv,
                kv,
                vv,
                kh,
                vh,
            } = depth_inputs((nh, nkv, hd, n_kv), m, cap, 5, 500 + n as u64);
            let w = hd * nh;
            for (ty, kc, vc) in [
                ("f32", Cache::F32(&kv), Cache::F32(&vv)),
                ("f16", Cache::F16(&kh), Cache::F16(&vh)),
            ] {
                for ggml_f16 in [false, true] {
                    let mut block = vec![7f32; w * m];
                    glint_cpu::attention_with(
                        Kernels::Fast,
                        true,
                        &qv,
                        kc,
                        vc,
                        &mask,
                        &p,
                        &mut block,
                        ggml_f16,
                    );
                    assert!(block.iter().all(|x| x.is_finite()));
                    for kernels in [Kernels::Fast, Kernels::Avx2] {
                        for par in [false, true] {
                            for step in [1usize, 3] {
                                let mut got = vec![7f32; w * m];
                                for i0 in (0..m).step_by(step) {
                                    let r = i0..i0 + step;
                                    glint_cpu::attention_with(
                                        kernels,
                                        par,
                                        &qv[r.start * w..r.end * w],
                                        kc,
                                        vc,
                                        &mask[r.start * n_kv..r.end * n_kv],
                                        &p,
                                        &mut got[r.start * w..r.end * w],
                                        ggml_f16,
                                    );
                                }
                                let same = got
                                    .iter()
                                    .zip(&block)
                                    .all(|(a, b)| a.to_bits() == b.to_bits());
                                assert!(
                                    same,
                                    "{nh}/{nkv} hd {hd} n_kv {n_kv} cap {cap} {mname} {ty} \
                                     f16 rounding {ggml_f16} {kernels:?} par {par}: {step} \
                                     at a time differ from the block"
                                );
                                checks += 1;
                            }
                        }
                    }
                }
            }
            // And the formula, through the backend (one token and three).
            for dm in [1usize, 3] {
                let c = Case {
                    p,
                    m: dm,
                    n_rows: n_kv + 5,
                    cache_ty: GgmlType::F16,
                    mask: mask[(m - dm) * n_kv..].to_vec(),
                };
                run(
                    &format!("decode {nh}/{nkv} hd {hd} {mname} m {dm}"),
                    &c,
                    600 + n as u64,
                );
            }
        }
    }
    assert_eq!(checks, 4 * 4 * 2 * 2 * 2 * 2 * 2);
}
