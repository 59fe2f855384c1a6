//! RoPE against an f64 implementation of the `RopeParams` formula, and the
//! K-shift invariant of `kv-cache.md`: `kshift(rope(k, p), q - p) == rope(k, q)`.

mod common;

use common::*;
use glint_backend::{Backend, GgmlType, RopeMode, RopeParams};
use glint_cpu::{CpuBackend, CpuTensor};
use half::f16;

/// RoPE in f32 vs f64: cos/sin are rounded once to f32, then two products
/// and a sum: a few ulp of the head's magnitude.
const ROPE_TOL: f64 = 1e-6;
/// K-shift in f32: `kshift(rope(k, p), d)` vs `rope(k, q)`, per element,
/// relative to the largest |value| of the head. Two roundings of cos/sin
/// and two rotations, composed: ~4 ulp; 1e-5 leaves room for four shifts.
const KSHIFT_TOL: f64 = 1e-5;
/// K-shift through an f16 cache: the cache is rounded to f16 (unit roundoff
/// 2^-11) before and after the shift, and the expected rope(k, q) too:
/// 3 roundings, each up to 2^-11 of the head's largest |value|, plus the rotation mixing two.
const KSHIFT_F16_TOL: f64 = 4.0 / 2048.0;

/// The doc comment of `RopeParams`, in f64, written without looking at the backend.
fn rope64(p: &RopeParams, x: &[f32], pos: f64) -> Vec<f64> {
    let n_rot = p.n_rot as f64;
    let base = p.freq_base as f64;
    let corr_dim = |b: f64| {
        n_rot * (p.n_ctx_orig as f64 / (b * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    let lo = corr_dim(p.beta_fast as f64).floor().max(0.0);
    let hi = corr_dim(p.beta_slow as f64).ceil().min(n_rot - 1.0);
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for h in 0..p.n_head {
        let o = h * p.head_dim;
        for i in 0..p.n_rot / 2 {
            let te = pos * base.powf(-2.0 * i as f64 / n_rot);
            let ti = p.freq_scale as f64 * te;
            let (theta, mscale) = if p.ext_factor != 0.0 {
                let ramp = (1.0 - ((i as f64 - lo) / (hi - lo).max(0.001)).clamp(0.0, 1.0))
                    * p.ext_factor as f64;
                (
                    ti * (1.0 - ramp) + te * ramp,
                    p.attn_factor as f64 * (1.0 + 0.1 * (1.0 / p.freq_scale as f64).ln()),
                )
            } else {
                (ti, p.attn_factor as f64)
            };
            let (a, b) = match p.mode {
                RopeMode::Norm => (o + 2 * i, o + 2 * i + 1),
                RopeMode::Neox => (o + i, o + i + p.n_rot / 2),
            };
            let (x0, x1) = (x[a] as f64, x[b] as f64);
            out[a] = (x0 * theta.cos() - x1 * theta.sin()) * mscale;
            out[b] = (x0 * theta.sin() + x1 * theta.cos()) * mscale;
        }
    }
    out
}

fn yarn(
    mode: RopeMode,
    head_dim: usize,
    n_rot: usize,
    n_head: usize,
    attn_factor: f32,
) -> RopeParams {
    RopeParams {
        n_rot,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor,
        n_ctx_orig: 4096,
        ..RopeParams::plain(mode, head_dim, n_head, 10000.0)
    }
}

/// Every configuration the tests sweep: mode, n_rot < head_dim, YaRN.
fn configs(n_head: usize) -> Vec<(&'static str, RopeParams)> {
    let mut v = Vec::new();
    for mode in [RopeMode::Norm, RopeMode::Neox] {
        v.push(("plain", RopeParams::plain(mode, 20, n_head, 10000.0)));
        v.push((
            "n_rot 12 of 20",
            RopeParams {
                n_rot: 12,
                ..RopeParams::plain(mode, 20, n_head, 500000.0)
            },
        ));
        v.push((
            "linear 0.5",
            RopeParams {
                freq_scale: 0.5,
                ..RopeParams::plain(mode, 20, n_head, 10000.0)
            },
        ));
        v.push(("yarn", yarn(mode, 20, 20, n_head, 1.0)));
        v.push((
            "yarn n_rot 16, attn_factor 1.3",
            yarn(mode, 20, 16, n_head, 1.3),
        ));
    }
    v
}

fn rope_once(be: &CpuBackend, p: &RopeParams, x: &[f32], pos: &[i32]) -> Vec<f32> {
    let m = pos.len();
    let xt = f32s(be, [p.head_dim, p.n_head, m, 1], x);
    let pt = i32s(be, pos);
    let out = zeros(be, GgmlType::F32, [p.head_dim, p.n_head, m, 1]);
    be.rope(&xt, &pt, p, &out).unwrap();
    read_f32(be, &out)
}

fn head_max(v: &[f32], hd: usize, i: usize) -> f64 {
    let h = i / hd;
    v[h * hd..(h + 1) * hd]
        .iter()
        .fold(0f64, |a, &b| a.max((b as f64).abs()))
}

#[test]
fn rope_pair_zero_at_position_one_turns_by_one_radian() {
    let be = backend();
    for mode in [RopeMode::Norm, RopeMode::Neox] {
        let p = RopeParams::plain(mode, 4, 1, 10000.0);
        let got = rope_once(&be, &p, &[1.0, 0.0, 0.0, 0.0], &[1]);
        // pair 0 is (0, 1) in NORM, (0, 2) in NEOX; theta = 1 * 10000^0 = 1 rad.
        let (c, s) = (1f32.cos(), 1f32.sin());
        let want = match mode {
            RopeMode::Norm => [c, s, 0.0, 0.0],
            RopeMode::Neox => [c, 0.0, s, 0.0],
        };
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-7, "{mode:?}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn rope_matches_f64_formula_in_every_mode_with_tail_copied() {
    let be = backend();
    let mut rng = Rng(11);
    let n_head = 3;
    let pos = [0, 1, 7, 100, 4095, 20000, -3];
    for (name, p) in configs(n_head) {
        let x = rng.vec(p.head_dim * n_head * pos.len());
        let got = rope_once(&be, &p, &x, &pos);
        let tok = p.head_dim * n_head;
        for (t, &ps) in pos.iter().enumerate() {
            let want = rope64(&p, &x[t * tok..(t + 1) * tok], ps as f64);
            let g = &got[t * tok..(t + 1) * tok];
            let scale = p.attn_factor as f64 * 1.2;
            assert_close(&format!("{:?} {name} pos {ps}", p.mode), g, &want, |_| {
                ROPE_TOL * 4.0 * scale
            });
            for h in 0..n_head {
                for d in p.n_rot..p.head_dim {
                    let i = h * p.head_dim + d;
                    assert_eq!(g[i], x[t * tok + i], "tail dim {d} must be copied");
                }
            }
        }
    }
}

/// rope(k, p) written into a cache of `ty`, shifted by each delta in turn,
/// read back as f32.
fn shifted(
    be: &CpuBackend,
    p: &RopeParams,
    k: &[f32],
    pos: &[i32],
    deltas: &[Vec<i32>],
    ty: GgmlType,
) -> Vec<f32> {
    let rows = pos.len();
    let roped = rope_once(be, p, k, pos);
    // cache: [head_dim * n_head, rows] of ty
    let cache: CpuTensor = match ty {
        GgmlType::F32 => f32s(be, [p.head_dim * p.n_head, rows, 1, 1], &roped),
        _ => {
            let h: Vec<f16> = roped.iter().map(|&v| f16::from_f32(v)).collect();
            from_bytes(
                be,
                GgmlType::F16,
                [p.head_dim * p.n_head, rows, 1, 1],
                bytemuck::cast_slice(&h),
            )
        }
    };
    for d in deltas {
        be.kshift(&cache, &i32s(be, d), p).unwrap();
    }
    match ty {
        GgmlType::F32 => read_f32(be, &cache),
        _ => read_f16(be, &cache).iter().map(|h| h.to_f32()).collect(),
    }
}

fn check_invariant(
    what: &str,
    p: &RopeParams,
    k: &[f32],
    pos: &[i32],
    deltas: &[Vec<i32>],
    ty: GgmlType,
) {
    let be = backend();
    let got = shifted(&be, p, k, pos, deltas, ty);
    let q: Vec<i32> = (0..pos.len())
        .map(|j| pos[j] + deltas.iter().map(|d| d[j]).sum::<i32>())
        .collect();
    let mut want = rope_once(&be, p, k, &q);
    let tol = if ty == GgmlType::F16 {
        want = want.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        KSHIFT_F16_TOL
    } else {
        KSHIFT_TOL
    };
    let want64: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    assert_close(what, &got, &want64, |i| {
        tol * head_max(&want, p.head_dim, i)
    });
}

#[test]
fn kshift_of_rope_p_is_rope_q_for_every_config_f32_and_f16() {
    let mut rng = Rng(12);
    let n_head_kv = 2;
    let rows = 9;
    for ty in [GgmlType::F32, GgmlType::F16] {
        for (name, p) in configs(n_head_kv) {
            let k = rng.vec(p.head_dim * n_head_kv * rows);
            let pos: Vec<i32> = (0..rows).map(|_| rng.below(4096) as i32).collect();
            let d: Vec<i32> = (0..rows).map(|_| rng.below(2000) as i32 - 1000).collect();
            check_invariant(&format!("{ty} {:?} {name}", p.mode), &p, &k, &pos, &[d], ty);
        }
    }
}

#[test]
fn kshift_by_seq_div_deltas_is_negative_and_exact() {
    // seq_div(s, .., 4): pos -> pos / 4, shift = new - old (negative).
    let mut rng = Rng(13);
    let rows = 12;
    for (name, p) in configs(2) {
        let k = rng.vec(p.head_dim * 2 * rows);
        let pos: Vec<i32> = (0..rows)
            .map(|j| 256 * j as i32 + rng.below(256) as i32)
            .collect();
        let d: Vec<i32> = pos.iter().map(|&ps| ps / 4 - ps).collect();
        assert!(d[1..].iter().all(|&x| x < 0));
        let what = format!("seq_div {:?} {name}", p.mode);
        check_invariant(&what, &p, &k, &pos, &[d], GgmlType::F32);
    }
}

#[test]
fn four_kshifts_in_a_row_compose() {
    let mut rng = Rng(14);
    let rows = 7;
    for (name, p) in configs(2) {
        let k = rng.vec(p.head_dim * 2 * rows);
        let pos: Vec<i32> = (0..rows).map(|_| 2000 + rng.below(2000) as i32).collect();
        let deltas: Vec<Vec<i32>> = (0..4)
            .map(|_| (0..rows).map(|_| rng.below(1000) as i32 - 500).collect())
            .collect();
        for (ty, tag) in [(GgmlType::F32, ""), (GgmlType::F16, " f16")] {
            let what = format!("4 shifts{tag} {:?} {name}", p.mode);
            check_invariant(&what, &p, &k, &pos, &deltas, ty);
        }
    }
}

#[test]
fn kshift_never_reapplies_the_yarn_magnitude() {
    // attn_factor 1.3 with YaRN: rope scales by 1.3 * (1 + 0.1 ln 4) ≈ 1.48 once.
    // A shift that re-applied it would grow the norm by that factor each time.
    let be = backend();
    let mut rng = Rng(15);
    let p = yarn(RopeMode::Neox, 16, 16, 1, 1.3);
    let k = rng.vec(16);
    let roped = rope_once(&be, &p, &k, &[100]);
    let after = shifted(&be, &p, &k, &[100], &[vec![37], vec![-90]], GgmlType::F32);
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let (n0, n1, nk) = (norm(&roped), norm(&after), norm(&k));
    let mscale = 1.3 * (1.0 + 0.1 * 4f64.ln());
    assert!(
        (n0 / nk - mscale).abs() < 1e-5,
        "rope applies mscale once: {}",
        n0 / nk
    );
    assert!(
        (n1 / n0 - 1.0).abs() < 1e-5,
        "the shift is a pure rotation: {}",
        n1 / n0
    );
    let deltas = [vec![37], vec![-90]];
    check_invariant(
        "yarn attn_factor 1.3",
        &p,
        &k,
        &[100],
        &deltas,
        GgmlType::F32,
    );
}

#[test]
fn rows_with_shift_zero_are_untouched_bit_for_bit() {
    let be = backend();
    let mut rng = Rng(16);
    let p = yarn(RopeMode::Norm, 20, 12, 2, 1.3);
    let row = 40;
    let v = rng.vec(row * 4);
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    let c32 = f32s(&be, [row, 4, 1, 1], &v);
    let c16 = from_bytes(&be, GgmlType::F16, [row, 4, 1, 1], bytemuck::cast_slice(&h));
    let shift = i32s(&be, &[0, 5, 0, -3]);
    be.kshift(&c32, &shift, &p).unwrap();
    be.kshift(&c16, &shift, &p).unwrap();
    let (g32, g16) = (read_f32(&be, &c32), read_f16(&be, &c16));
    for r in 0..4 {
        let same32 = (0..row).all(|i| g32[r * row + i].to_bits() == v[r * row + i].to_bits());
        let same16 = (0..row).all(|i| g16[r * row + i].to_bits() == h[r * row + i].to_bits());
        assert_eq!(same32, r % 2 == 0, "f32 row {r}");
        assert_eq!(same16, r % 2 == 0, "f16 row {r}");
    }
    // The unrotated tail of a shifted row is untouched too.
    for i in 12..20 {
        assert_eq!(g32[row + i], v[row + i]);
        assert_eq!(g16[row + 20 + i], h[row + 20 + i]);
    }
}

#[test]
fn rope_and_kshift_reject_bad_params() {
    let be = backend();
    let x = zeros(&be, GgmlType::F32, [8, 2, 3, 1]);
    let out = zeros(&be, GgmlType::F32, [8, 2, 3, 1]);
    let pos = i32s(&be, &[0, 1, 2]);
    let odd = RopeParams {
        n_rot: 7,
        ..RopeParams::plain(RopeMode::Norm, 8, 2, 10000.0)
    };
    assert!(be.rope(&x, &pos, &odd, &out).is_err());
    let wide = RopeParams {
        n_rot: 10,
        ..RopeParams::plain(RopeMode::Norm, 8, 2, 10000.0)
    };
    assert!(be.rope(&x, &pos, &wide, &out).is_err());
    let ok = RopeParams::plain(RopeMode::Norm, 8, 2, 10000.0);
    assert!(
        be.rope(&x, &i32s(&be, &[0, 1]), &ok, &out).is_err(),
        "pos length"
    );
    let bf = zeros(&be, GgmlType::BF16, [16, 3, 1, 1]);
    assert!(be.kshift(&bf, &pos, &ok).is_err(), "BF16 cache");
    let k = zeros(&be, GgmlType::F32, [16, 3, 1, 1]);
    assert!(
        be.kshift(&k, &i32s(&be, &[1, 2]), &ok).is_err(),
        "shift length"
    );
}

/// RoPE keeps the `(cos, sin)` tables of its last calls on each thread (the
/// Q and K of every layer share one): a run of calls that alternates
/// parameter sets (as Gemma 3's local and global layers do), Q- and K-like
/// head counts, both pairings and three runs of positions gives, call for
/// call, the bits of the same call on a new thread with a new backend
/// (nothing kept), large enough calls on the pool and small ones on the
/// calling thread.
#[test]
fn kept_rope_tables_give_the_bits_of_fresh_ones() {
    let be = backend();
    let mut rng = Rng(12);
    let local = RopeParams::plain(RopeMode::Neox, 64, 4, 10000.0);
    let global = RopeParams {
        freq_base: 1_000_000.0,
        ..local
    };
    let runs: [Vec<i32>; 3] = [
        (0..300).collect(),
        (1..301).collect(),
        (0..300).map(|p| if p == 150 { 7 } else { p }).collect(),
    ];
    let mut calls = 0;
    for round in 0..2 {
        for pos in &runs {
            for p in [local, global, local] {
                for (mode, n_head) in [
                    (RopeMode::Neox, 4),
                    (RopeMode::Neox, 1),
                    (RopeMode::Norm, 4),
                ] {
                    let p = RopeParams { mode, n_head, ..p };
                    // Small calls (one token) run on this thread.
                    let pos = if round == 1 { &pos[..1] } else { &pos[..] };
                    let x = rng.vec(p.head_dim * n_head * pos.len());
                    let got = rope_once(&be, &p, &x, pos);
                    let (x2, pos2) = (x.clone(), pos.to_vec());
                    let want = std::thread::spawn(move || rope_once(&backend(), &p, &x2, &pos2))
                        .join()
                        .unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{p:?} at {:?}..", &pos[..1]);
                    calls += 1;
                }
            }
        }
    }
    assert_eq!(calls, 2 * 3 * 3 * 3);
}
