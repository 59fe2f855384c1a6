//! Two-window SelfExtend attention (`attention_window`) against the
//! paper's formula written out in f64: raw queries and keys rotated on
//! both sides, at their own positions inside the neighbour window and at
//! their grouped ones outside it, one softmax over the merged logits; and
//! equal to plain attention when the window covers every key.

mod common;

use common::*;
use glint_backend::{AttnParams, Backend, GgmlType, RopeMode, RopeParams};

/// f32 rotations at positions up to a few hundred radians, then the
/// softmax: 5e-5 absolute on outputs of |v| <= 1.
const WINDOW_TOL: f64 = 5e-5;

/// Rotate `x` (`[hd]`, adjacent pairs, ggml's NORM) at `pos` in f64.
fn rope64(x: &[f32], pos: f64, base: f64) -> Vec<f64> {
    let hd = x.len();
    let mut out = vec![0f64; hd];
    for i in 0..hd / 2 {
        let theta = pos * base.powf(-2.0 * i as f64 / hd as f64);
        let (s, c) = theta.sin_cos();
        let (a, b) = (x[2 * i] as f64, x[2 * i + 1] as f64);
        out[2 * i] = a * c - b * s;
        out[2 * i + 1] = a * s + b * c;
    }
    out
}

/// The grouped query position of the paper (and of LongLM's code).
fn q_group(i: i32, g: i32, w: i32) -> i32 {
    i / g + w - w / g
}

struct Setup {
    hd: usize,
    nh: usize,
    nkv: usize,
    n: usize,
    qpos: Vec<i32>,
    g: i32,
    w: i32,
}

/// Backend output and the f64 formula's, for random raw q, k, v.
fn run(s: &Setup, seed: u64) -> (Vec<f32>, Vec<f64>, Vec<f32>) {
    let be = backend();
    let mut rng = Rng(seed);
    let (hd, nh, nkv, n, m) = (s.hd, s.nh, s.nkv, s.n, s.qpos.len());
    let base = 10000.0f32;
    let qraw = rng.vec(hd * nh * m);
    let kraw = rng.vec(hd * nkv * n);
    let vals = rng.vec(hd * nkv * n);
    let kpos: Vec<i32> = (0..n as i32).collect();
    let rot = |x: &[f32], heads: usize, pos: &[i32]| {
        let t = f32s(&be, [hd, heads, pos.len(), 1], x);
        let out = zeros(&be, GgmlType::F32, [hd, heads, pos.len(), 1]);
        let p = RopeParams::plain(RopeMode::Norm, hd, heads, base);
        be.rope(&t, &i32s(&be, pos), &p, &out).unwrap();
        read_f32(&be, &out)
    };
    let q2pos: Vec<i32> = s.qpos.iter().map(|&i| q_group(i, s.g, s.w)).collect();
    let k2pos: Vec<i32> = kpos.iter().map(|&j| j / s.g).collect();
    let (q, q2) = (rot(&qraw, nh, &s.qpos), rot(&qraw, nh, &q2pos));
    let (k, k2) = (rot(&kraw, nkv, &kpos), rot(&kraw, nkv, &k2pos));
    // Causal; near when i - j < W.
    let mut near = vec![f32::NEG_INFINITY; n * m];
    let mut far = vec![f32::NEG_INFINITY; n * m];
    for (t, &i) in s.qpos.iter().enumerate() {
        for j in 0..=i.min(n as i32 - 1) {
            let slot = if i - j < s.w { &mut near } else { &mut far };
            slot[t * n + j as usize] = 0.0;
        }
    }
    let p = AttnParams::new(nh, nkv, hd, n);
    let t = |v: &[f32], ne: [usize; 4]| f32s(&be, ne, v);
    let out = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
    be.attention_window(
        &t(&q, [hd, nh, m, 1]),
        &t(&k, [hd * nkv, n, 1, 1]),
        &t(&vals, [hd * nkv, n, 1, 1]),
        &t(&near, [n, m, 1, 1]),
        [
            &t(&q2, [hd, nh, m, 1]),
            &t(&k2, [hd * nkv, n, 1, 1]),
            &t(&far, [n, m, 1, 1]),
        ],
        &p,
        &out,
    )
    .unwrap();
    let got = read_f32(&be, &out);

    // Plain attention over the same keys, for the covering-window check.
    let plain_out = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
    let causal: Vec<f32> = near
        .iter()
        .zip(&far)
        .map(|(&a, &b)| {
            if a == 0.0 || b == 0.0 {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect();
    be.attention(
        &t(&q, [hd, nh, m, 1]),
        &t(&k, [hd * nkv, n, 1, 1]),
        &t(&vals, [hd * nkv, n, 1, 1]),
        &t(&causal, [n, m, 1, 1]),
        &p,
        &plain_out,
    )
    .unwrap();

    // The formula: rotate raw q and k on both sides, in f64.
    let mut want = vec![0f64; hd * nh * m];
    let group = nh / nkv;
    for (t, &i) in s.qpos.iter().enumerate() {
        for h in 0..nh {
            let hk = h / group;
            let qh = &qraw[(t * nh + h) * hd..][..hd];
            let keys: Vec<i32> = (0..=i.min(n as i32 - 1)).collect();
            let logits: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let kh = &kraw[(j as usize * nkv + hk) * hd..][..hd];
                    let (a, b) = if i - j < s.w {
                        (i as f64, j as f64)
                    } else {
                        (q_group(i, s.g, s.w) as f64, (j / s.g) as f64)
                    };
                    let (qa, kb) = (rope64(qh, a, base as f64), rope64(kh, b, base as f64));
                    qa.iter().zip(&kb).map(|(x, y)| x * y).sum::<f64>() * p.scale as f64
                })
                .collect();
            let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            for d in 0..hd {
                let o: f64 = keys
                    .iter()
                    .zip(&e)
                    .map(|(&j, w)| w * vals[(j as usize * nkv + hk) * hd + d] as f64)
                    .sum();
                want[(t * nh + h) * hd + d] = o / sum;
            }
        }
    }
    (got, want, read_f32(&be, &plain_out))
}

#[test]
fn window_attention_is_the_rotate_both_sides_formula() {
    for (seed, w, g) in [(1, 32, 4), (2, 64, 8), (3, 16, 2)] {
        let s = Setup {
            hd: 16,
            nh: 4,
            nkv: 2,
            n: 300,
            qpos: vec![5, 40, 150, 151, 152, 299],
            g,
            w,
        };
        let (got, want, _) = run(&s, seed);
        assert_close(&format!("window W={w} G={g}"), &got, &want, |_| WINDOW_TOL);
        // A prefill's worth of queries too.
        let prefill = Setup {
            qpos: (100..140).collect(),
            ..s
        };
        let (got, want, _) = run(&prefill, seed + 10);
        assert_close(&format!("prefill W={w} G={g}"), &got, &want, |_| WINDOW_TOL);
    }
}

#[test]
fn a_window_covering_every_key_is_plain_attention() {
    let s = Setup {
        hd: 32,
        nh: 6,
        nkv: 2,
        n: 200,
        qpos: vec![0, 17, 199],
        g: 4,
        w: 256,
    };
    let (got, want, plain) = run(&s, 9);
    assert_close("covering window vs formula", &got, &want, |_| WINDOW_TOL);
    let plain64: Vec<f64> = plain.iter().map(|&x| x as f64).collect();
    assert_close("covering window vs attention", &got, &plain64, |_| 1e-6);
}

/// A prefill in window mode (the blocked path: tiles scored with the near
/// queries and keys, the distant ones, or both where the window's edge
/// crosses a tile) equals, bit for bit, each token attended alone (the
/// per-token grouped path), on one thread and on the pool, with and
/// without ggml's f16 rounding: GQA 3 and 4 heads per kv head and 1, F32
/// and F16 caches, soft-capping, a window start (`kv_start`) past row 0.
#[test]
fn a_window_prefill_in_blocks_equals_its_tokens_one_at_a_time() {
    use glint_cpu::{Cache, Far};
    use half::f16;
    // (n_head, n_head_kv, head_dim, n_kv, m, W, G, softcap)
    let cases = [
        (9, 3, 64, 64 * 3 + 17, 37, 70, 4, 0.0f32),
        (8, 2, 32, 64 * 4, 40, 64, 8, 2.5),
        (4, 4, 48, 150, 17, 33, 2, 0.0),
    ];
    for (n, &(nh, nkv, hd, n_kv, m, w, g, cap)) in cases.iter().enumerate() {
        let mut rng = Rng(300 + n as u64);
        let row = hd * nkv;
        let n_rows = n_kv + 2; // the window starts at row 2
        let qv = rng.vec(hd * nh * m);
        let q2v = rng.vec(hd * nh * m);
        let (kv, k2v, vv) = (
            rng.vec(row * n_rows),
            rng.vec(row * n_rows),
            rng.vec(row * n_rows),
        );
        // Token i sits at position n_kv - m + i; near when i - j < W.
        let mut near = vec![f32::NEG_INFINITY; n_kv * m];
        let mut far = vec![f32::NEG_INFINITY; n_kv * m];
        for t in 0..m {
            let i = (n_kv - m + t) as i32;
            for j in 0..=i {
                let slot = if i - j < w { &mut near } else { &mut far };
                slot[t * n_kv + j as usize] = 0.0;
            }
        }
        let _ = g; // G only moves the rotations, which the inputs stand for
        let p = AttnParams {
            scale: 0.5 / (hd as f32).sqrt(),
            softcap: cap,
            kv_start: 2,
            ..AttnParams::new(nh, nkv, hd, n_kv)
        };
        let h = |x: &[f32]| x.iter().map(|&x| f16::from_f32(x)).collect::<Vec<f16>>();
        let (kh, k2h, vh) = (h(&kv), h(&k2v), h(&vv));
        for f16_cache in [false, true] {
            let (kc, k2c, vc) = if f16_cache {
                (Cache::F16(&kh), Cache::F16(&k2h), Cache::F16(&vh))
            } else {
                (Cache::F32(&kv), Cache::F32(&k2v), Cache::F32(&vv))
            };
            let wd = hd * nh;
            for ggml_f16 in [false, true] {
                let mut one = vec![0f32; wd * m];
                for t in 0..m {
                    let far_t = Far {
                        q: &q2v[t * wd..(t + 1) * wd],
                        k: k2c,
                        mask: &far[t * n_kv..(t + 1) * n_kv],
                    };
                    glint_cpu::attention_window(
                        false,
                        &qv[t * wd..(t + 1) * wd],
                        kc,
                        vc,
                        &near[t * n_kv..(t + 1) * n_kv],
                        far_t,
                        &p,
                        &mut one[t * wd..(t + 1) * wd],
                        ggml_f16,
                    );
                }
                assert!(one.iter().any(|&x| x != 0.0), "case {n}: all zeros");
                for par in [false, true] {
                    let mut batch = vec![7f32; wd * m];
                    let far_all = Far {
                        q: &q2v,
                        k: k2c,
                        mask: &far,
                    };
                    glint_cpu::attention_window(
                        par, &qv, kc, vc, &near, far_all, &p, &mut batch, ggml_f16,
                    );
                    assert!(
                        batch == one,
                        "case {n}: f16 cache {f16_cache}, f16 rounding {ggml_f16}, par {par}: \
                         a batch of {m} differs from its tokens one at a time"
                    );
                }
            }
        }
    }
}
