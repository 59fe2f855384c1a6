//! Every op except rope/kshift/attention against a plain f64 formula,
//! plus shape/type errors and the memory report.

mod common;

use common::*;
use glint_backend::{Backend, BackendError, GgmlType, Glu, Unary, Usage};
use half::{bf16, f16};

/// A dot product of length k in f32 vs f64: |err| <= DOT_TOL * sum |w_i x_i|
/// (k * 2^-24 would be the worst case; 1e-5 leaves room for k up to ~100).
const DOT_TOL: f64 = 1e-5;
/// Elementwise f32 results vs f64 formulas: a few ulp, relative.
const ELEM_TOL: f64 = 1e-6;

/// Weight bytes of `ty` for `v`, and the values the backend must see.
fn encode(ty: GgmlType, v: &[f32]) -> (Vec<u8>, Vec<f64>) {
    match ty {
        GgmlType::F32 => (
            bytemuck::cast_slice(v).to_vec(),
            v.iter().map(|&x| x as f64).collect(),
        ),
        GgmlType::F16 => {
            let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            (
                bytemuck::cast_slice(&h).to_vec(),
                h.iter().map(|x| x.to_f64()).collect(),
            )
        }
        GgmlType::BF16 => {
            let h: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
            (
                bytemuck::cast_slice(&h).to_vec(),
                h.iter().map(|x| x.to_f64()).collect(),
            )
        }
        _ => unreachable!(),
    }
}

#[test]
fn mul_mat_float_weights_match_f64_on_decode_and_prefill_paths() {
    let be = backend();
    let mut rng = Rng(1);
    let (k, n) = (67, 45);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let (wb, wv) = encode(ty, &rng.vec(k * n));
        let w = weight(&be, ty, [k, n, 1, 1], &wb);
        for m in [1, 3, 8, 9, 37] {
            let xv = rng.vec(k * m);
            let what = format!("mul_mat {ty} m={m}");
            assert_mul_mat(&what, &be, &w, &xv, [k, n, m], DOT_TOL, |r, xc| {
                let (mut want, mut mag) = (0f64, 0f64);
                for i in 0..k {
                    let p = wv[r * k + i] * xc[i] as f64;
                    want += p;
                    mag += p.abs();
                }
                (want, mag)
            });
        }
    }
}

#[test]
fn mul_mat_fast_paths_equal_the_reference_loop() {
    let be = backend();
    let mut rng = Rng(2);
    let (k, n) = (300, 70); // 70 rows: a partial last row block on both paths
    let (wb, _) = encode(GgmlType::F16, &rng.vec(k * n));
    let w = weight(&be, GgmlType::F16, [k, n, 1, 1], &wb);
    for m in [1, 2, 8, 9, 40] {
        let xv = rng.vec(k * m);
        let x = f32s(&be, [k, m, 1, 1], &xv);
        let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
        be.mul_mat(&w, &x, &out).unwrap();
        let got = read_f32(&be, &out);
        let mut want = vec![0f32; n * m];
        let wr = glint_cpu::WeightRows {
            ty: GgmlType::F16,
            bytes: &wb,
            row_bytes: k * 2,
            k,
            n,
        };
        glint_cpu::reference::mul_mat(wr, &xv, m, &mut want).unwrap();
        // Same products, different summation order: DOT_TOL of the magnitude (<= k).
        let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        assert_close(&format!("fast vs reference m={m}"), &got, &want, |_| {
            DOT_TOL * k as f64
        });
    }
}

#[test]
fn mul_mat_accepts_a_3d_output_of_the_same_layout() {
    // q = wq · x written straight into [head_dim, n_head, m] for rope.
    let be = backend();
    let mut rng = Rng(3);
    let (k, hd, nh, m) = (16, 4, 3, 2);
    let w = weight(
        &be,
        GgmlType::F32,
        [k, hd * nh, 1, 1],
        bytemuck::cast_slice(&rng.vec(k * hd * nh)),
    );
    let x = f32s(&be, [k, m, 1, 1], &rng.vec(k * m));
    let out2 = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
    let out3 = zeros(&be, GgmlType::F32, [hd, nh, m, 1]);
    be.mul_mat(&w, &x, &out2).unwrap();
    be.mul_mat(&w, &x, &out3).unwrap();
    assert_eq!(read_f32(&be, &out2), read_f32(&be, &out3));
}

#[test]
fn get_rows_dequantizes_exactly_and_zeroes_bad_ids() {
    let be = backend();
    let mut rng = Rng(4);
    let (k, n_rows) = (13, 7);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let (tb, tv) = encode(ty, &rng.vec(k * n_rows));
        let table = weight(&be, ty, [k, n_rows, 1, 1], &tb);
        let ids = [3, 0, 6, 3, -1, 7];
        let idt = i32s(&be, &ids);
        let out = zeros(&be, GgmlType::F32, [k, ids.len(), 1, 1]);
        be.get_rows(&table, &idt, &out).unwrap();
        let got = read_f32(&be, &out);
        for (i, &id) in ids.iter().enumerate() {
            for d in 0..k {
                let want = if (0..n_rows as i32).contains(&id) {
                    tv[id as usize * k + d]
                } else {
                    0.0
                };
                assert_eq!(got[i * k + d] as f64, want, "{ty} id {id} dim {d}");
            }
        }
    }
}

#[test]
fn rms_norm_matches_f64_with_and_without_weight() {
    let be = backend();
    let mut rng = Rng(5);
    let (n, m) = (37, 5);
    let xv = rng.vec(n * m);
    let wv = rng.vec(n);
    let eps = 1e-5f32;
    let x = f32s(&be, [n, m, 1, 1], &xv);
    let w = f32s(&be, [n, 1, 1, 1], &wv);
    for with_w in [false, true] {
        let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
        be.rms_norm(&x, with_w.then_some(&w), eps, &out).unwrap();
        let mut want = vec![0f64; n * m];
        for j in 0..m {
            let r = &xv[j * n..(j + 1) * n];
            let ms: f64 = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / n as f64;
            for i in 0..n {
                let wi = if with_w { wv[i] as f64 } else { 1.0 };
                want[j * n + i] = r[i] as f64 / (ms + eps as f64).sqrt() * wi;
            }
        }
        assert_close("rms_norm", &read_f32(&be, &out), &want, |i| {
            1e-5 * want[i].abs().max(1e-3)
        });
    }
}

#[test]
fn add_mul_scale_full_and_broadcast() {
    let be = backend();
    let mut rng = Rng(6);
    let (n, m) = (11, 4);
    let av = rng.vec(n * m);
    let bv = rng.vec(n * m);
    let rv = rng.vec(n);
    let a = f32s(&be, [n, m, 1, 1], &av);
    let b = f32s(&be, [n, m, 1, 1], &bv);
    let row = f32s(&be, [n, 1, 1, 1], &rv);
    let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
    // b[i] for the full tensor, b[i % n] for the broadcast row.
    for (name, bt, bvals) in [("full", &b, &bv), ("row", &row, &rv)] {
        let bat = |i: usize| bvals[i % bvals.len()] as f64;
        be.add(&a, bt, &out).unwrap();
        let want: Vec<f64> = (0..n * m).map(|i| av[i] as f64 + bat(i)).collect();
        assert_close(&format!("add {name}"), &read_f32(&be, &out), &want, |i| {
            ELEM_TOL * want[i].abs()
        });
        be.mul(&a, bt, &out).unwrap();
        let want: Vec<f64> = (0..n * m).map(|i| av[i] as f64 * bat(i)).collect();
        assert_close(&format!("mul {name}"), &read_f32(&be, &out), &want, |i| {
            ELEM_TOL * want[i].abs()
        });
    }
    be.scale(&a, -0.37, &out).unwrap();
    let want: Vec<f64> = av.iter().map(|&v| v as f64 * -0.37f32 as f64).collect();
    assert_close("scale", &read_f32(&be, &out), &want, |i| {
        ELEM_TOL * want[i].abs()
    });
}

fn silu64(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn unary_and_glu_match_f64_formulas() {
    let be = backend();
    let mut rng = Rng(7);
    let (n, m) = (29, 3);
    let gv: Vec<f32> = rng.vec(n * m).iter().map(|v| v * 6.0).collect();
    let uv = rng.vec(n * m);
    let g = f32s(&be, [n, m, 1, 1], &gv);
    let u = f32s(&be, [n, m, 1, 1], &uv);
    let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
    // Absolute 1e-6 covers the f32 rounding of tanh/exp near zero crossings.
    let tol = |w: f64| 1e-6 + ELEM_TOL * 4.0 * w.abs();
    for (op, f) in [
        (Unary::Silu, silu64 as fn(f64) -> f64),
        (Unary::Gelu, gelu64),
    ] {
        be.unary(op, &g, &out).unwrap();
        let want: Vec<f64> = gv.iter().map(|&v| f(v as f64)).collect();
        assert_close(&format!("{op:?}"), &read_f32(&be, &out), &want, |i| {
            tol(want[i])
        });
    }
    for (op, f) in [
        (Glu::SwiGlu, silu64 as fn(f64) -> f64),
        (Glu::GeGlu, gelu64),
    ] {
        be.glu(op, &g, &u, &out).unwrap();
        let want: Vec<f64> = (0..n * m).map(|i| f(gv[i] as f64) * uv[i] as f64).collect();
        assert_close(&format!("{op:?}"), &read_f32(&be, &out), &want, |i| {
            tol(want[i])
        });
    }
}

#[test]
fn softmax_matches_f64_and_an_all_masked_row_is_zeros() {
    let be = backend();
    let mut rng = Rng(8);
    let (n, m) = (19, 3);
    let mut xv: Vec<f32> = rng.vec(n * m).iter().map(|v| v * 10.0).collect();
    xv[3] = f32::NEG_INFINITY;
    for v in &mut xv[2 * n..] {
        *v = f32::NEG_INFINITY;
    }
    let x = f32s(&be, [n, m, 1, 1], &xv);
    let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
    be.softmax(&x, &out).unwrap();
    let mut want = vec![0f64; n * m];
    for j in 0..2 {
        let r = &xv[j * n..(j + 1) * n];
        let max = r.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let s: f64 = r.iter().map(|&v| (v as f64 - max).exp()).sum();
        for i in 0..n {
            want[j * n + i] = (xv[j * n + i] as f64 - max).exp() / s;
        }
    }
    let got = read_f32(&be, &out);
    assert_close("softmax", &got, &want, |i| 1e-6 * want[i].max(1e-2));
    assert_eq!(got[3], 0.0);
    assert!(got[2 * n..].iter().all(|&v| v == 0.0));
}

#[test]
fn argmax_takes_the_first_index_on_ties() {
    let be = backend();
    let x = f32s(
        &be,
        [5, 3, 1, 1],
        &[
            1.0, 3.0, 3.0, 2.0, 3.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 9.0,
        ],
    );
    let out = zeros(&be, GgmlType::I32, [3, 1, 1, 1]);
    be.argmax(&x, &out).unwrap();
    assert_eq!(read_i32(&be, &out), vec![1, 0, 4]);
}

/// The backend's argmax (two vectorized passes) against the plain loop
/// it replaces, on rows with NaNs (first and elsewhere), infinities,
/// signed zeros, ties and tails of every length.
#[test]
fn argmax_equals_the_plain_loop_on_hostile_rows() {
    let plain = |x: &[f32]| {
        let mut best = 0usize;
        for (i, &v) in x.iter().enumerate() {
            if v > x[best] {
                best = i;
            }
        }
        best as i32
    };
    let be = backend();
    let mut rng = Rng(0xa26);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3.0];
    let mut checked = 0;
    for n in [1, 2, 7, 8, 9, 31, 64, 1000] {
        for case in 0..40 {
            let mut row: Vec<f32> = (0..n).map(|_| (rng.below(7) as f32) - 3.0).collect();
            for _ in 0..case % 5 {
                row[rng.below(n)] = specials[rng.below(specials.len())];
            }
            if case % 7 == 0 {
                row[0] = f32::NAN;
            }
            if case % 11 == 0 {
                row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY);
            }
            let x = f32s(&be, [n, 1, 1, 1], &row);
            let out = zeros(&be, GgmlType::I32, [1, 1, 1, 1]);
            be.argmax(&x, &out).unwrap();
            assert_eq!(
                read_i32(&be, &out)[0],
                plain(&row),
                "n={n} case {case}: {row:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8 * 40);
}

#[test]
fn set_rows_f32_exact_f16_rounds_like_half_and_skips_bad_rows() {
    let be = backend();
    let mut rng = Rng(9);
    let (n, m, n_rows) = (10, 3, 6);
    let sv: Vec<f32> = rng.vec(n * m).iter().map(|v| v * 1000.0).collect();
    let src = f32s(&be, [n, m, 1, 1], &sv);
    let idx = i32s(&be, &[4, 1, 6]);
    let d32 = f32s(&be, [n, n_rows, 1, 1], &vec![7.0; n * n_rows]);
    let h7 = f16::from_f32(7.0);
    let d16 = from_bytes(
        &be,
        GgmlType::F16,
        [n, n_rows, 1, 1],
        bytemuck::cast_slice(&vec![h7; n * n_rows]),
    );
    be.set_rows(&src, &idx, &d32).unwrap();
    be.set_rows(&src, &idx, &d16).unwrap();
    let (g32, g16) = (read_f32(&be, &d32), read_f16(&be, &d16));
    for r in 0..n_rows {
        let from = match r {
            4 => Some(0),
            1 => Some(1),
            _ => None, // idx 6 is outside: skipped
        };
        for d in 0..n {
            match from {
                Some(i) => {
                    assert_eq!(g32[r * n + d], sv[i * n + d]);
                    assert_eq!(
                        g16[r * n + d].to_bits(),
                        f16::from_f32(sv[i * n + d]).to_bits()
                    );
                }
                None => {
                    assert_eq!(g32[r * n + d], 7.0);
                    assert_eq!(g16[r * n + d], h7);
                }
            }
        }
    }
}

#[test]
fn bad_shapes_and_types_are_errors_not_panics() {
    let be = backend();
    let w = zeros(&be, GgmlType::F32, [8, 4, 1, 1]);
    let x = zeros(&be, GgmlType::F32, [7, 2, 1, 1]);
    let out = zeros(&be, GgmlType::F32, [4, 2, 1, 1]);
    assert!(matches!(
        be.mul_mat(&w, &x, &out),
        Err(BackendError::Shape { op: "mul_mat", .. })
    ));
    let x8 = zeros(&be, GgmlType::F32, [8, 3, 1, 1]);
    assert!(matches!(
        be.mul_mat(&w, &x8, &out),
        Err(BackendError::Shape { .. })
    ));
    let xi = zeros(&be, GgmlType::I32, [8, 2, 1, 1]);
    assert!(matches!(
        be.mul_mat(&w, &xi, &out),
        Err(BackendError::Type {
            op: "mul_mat",
            what: "x",
            ..
        })
    ));
    let q81 = zeros(&be, GgmlType::Q8_1, [32, 4, 1, 1]);
    let x32 = zeros(&be, GgmlType::F32, [32, 2, 1, 1]);
    assert!(matches!(
        be.mul_mat(&q81, &x32, &out),
        Err(BackendError::Type {
            ty: GgmlType::Q8_1,
            ..
        })
    ));
    assert!(matches!(
        be.add(&out, &x, &out),
        Err(BackendError::Shape { .. })
    ));
    assert!(
        matches!(be.scale(&out, 2.0, &out), Err(BackendError::Shape { .. })),
        "output aliasing an input"
    );
    assert!(matches!(
        be.alloc(desc(GgmlType::Q4_0, [33, 1, 1, 1], "q")),
        Err(BackendError::Shape { .. })
    ));
    assert!(matches!(
        be.alloc(desc(GgmlType::F32, [usize::MAX, 2, 1, 1], "big")),
        Err(BackendError::Shape { .. })
    ));
    let mut buf = [0u8; 4];
    assert!(matches!(
        be.read(&out, 30, &mut buf),
        Err(BackendError::Range {
            start: 30,
            end: 34,
            size: 32,
            ..
        })
    ));
    let wt = weight(&be, GgmlType::F32, [2, 1, 1, 1], &[0u8; 8]);
    assert!(
        be.write(&wt, 0, &[0u8; 4]).is_err(),
        "weights are read-only"
    );
    let idx = i32s(&be, &[0, 1]);
    let src = zeros(&be, GgmlType::F32, [8, 3, 1, 1]);
    let cache = zeros(&be, GgmlType::F16, [8, 4, 1, 1]);
    assert!(matches!(
        be.set_rows(&src, &idx, &cache),
        Err(BackendError::Shape { op: "set_rows", .. })
    ));
    let bad_cache = zeros(&be, GgmlType::BF16, [8, 4, 1, 1]);
    assert!(matches!(
        be.set_rows(&x8, &i32s(&be, &[0, 1, 2]), &bad_cache),
        Err(BackendError::Type { .. })
    ));
}

#[test]
fn memory_counts_owned_bytes_per_usage_not_shared_weights() {
    let be = backend();
    assert!(be.name().starts_with("cpu (2 threads"));
    let base = be.memory();
    let mut d = desc(GgmlType::F16, [64, 10, 1, 1], "k");
    d.usage = Usage::KvCache;
    let kv = be.alloc(d).unwrap();
    let s = zeros(&be, GgmlType::F32, [5, 3, 1, 1]);
    let _w = weight(&be, GgmlType::F32, [4, 4, 1, 1], &[0u8; 64]);
    let m = be.memory();
    assert_eq!(m.kv_cache - base.kv_cache, 64 * 10 * 2);
    assert_eq!(m.scratch - base.scratch, 60);
    assert_eq!(
        m.weights, base.weights,
        "mmap'd weights are the file's pages"
    );
    drop(kv);
    drop(s);
    assert_eq!(be.memory(), base);
}
