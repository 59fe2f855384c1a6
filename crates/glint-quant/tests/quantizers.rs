//! Quantizers with no gguf-py oracle: Q8_1 and Q8_K against ggml's formulas
//! written out here, Q4_K and Q6_K by round-trip error bounds.

mod common;

use common::{fixture, seeded};
use glint_quant::{
    dequantize_row, quantize_row, Block, BlockQ8_1, BlockQ8_K, GgmlType as T, Quantize,
};
use half::f16;

fn quantize(ty: T, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn dequantize(ty: T, q: &[u8]) -> Vec<f32> {
    let n = q.len() / ty.type_size() * ty.block_size();
    let mut y = vec![0.0f32; n];
    dequantize_row(ty, q, &mut y).unwrap();
    y
}

fn rms(v: impl Iterator<Item = f32>) -> f64 {
    let (mut s, mut n) = (0.0f64, 0usize);
    for x in v {
        s += f64::from(x) * f64::from(x);
        n += 1;
    }
    (s / n as f64).sqrt()
}

/// Relative RMS error of a round trip through `ty`.
fn round_trip_error(ty: T, x: &[f32]) -> f64 {
    let y = dequantize(ty, &quantize(ty, x));
    rms(x.iter().zip(&y).map(|(a, b)| a - b)) / rms(x.iter().copied())
}

fn test_rows(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = seeded(seed);
    let scale = 10f32.powf(rng.uniform(-3.0, 3.0));
    rng.normals(n, scale)
}

#[test]
fn q8_1_matches_ggml_formula() {
    for seed in 0..50 {
        let x = test_rows(seed, 32);
        let b = BlockQ8_1::quantize(&x);
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        assert_eq!(b.d, f16::from_f32(d), "seed {seed}");
        let mut sum = 0i32;
        for (j, &q) in b.qs.iter().enumerate() {
            // roundf: half away from zero
            assert_eq!(q as f32, (x[j] / d).round(), "seed {seed} j {j}");
            sum += q as i32;
        }
        assert_eq!(b.s, f16::from_f32(sum as f32 * d), "seed {seed}");
        let mut y = [0.0f32; 32];
        b.dequantize(&mut y);
        for j in 0..32 {
            assert_eq!(y[j], b.qs[j] as f32 * b.d.to_f32());
            // level rounding plus the f16 rounding of d
            assert!(
                (y[j] - x[j]).abs() <= 0.5 * d + 127.0 * d * 2f32.powi(-11),
                "seed {seed}"
            );
        }
    }
}

#[test]
fn q8_k_matches_ggml_formula() {
    for seed in 0..50 {
        let x = test_rows(seed, 256);
        let b = BlockQ8_K::quantize(&x);
        let imax = (0..256).fold(0, |m, i| if x[i].abs() > x[m].abs() { i } else { m });
        let iscale = -127.0 / x[imax];
        assert_eq!(b.d, 1.0 / iscale, "seed {seed}");
        for (j, (&q, &v)) in b.qs.iter().zip(&x).enumerate() {
            let want = (iscale * v).round_ties_even().min(127.0);
            assert_eq!(q as f32, want, "seed {seed} j {j}");
            assert!(
                (b.d * q as f32 - v).abs() <= 0.5001 * b.d.abs(),
                "seed {seed} j {j}"
            );
        }
        for g in 0..16 {
            let s: i32 = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
            assert_eq!(b.bsums[g] as i32, s, "seed {seed} group {g}");
        }
        // the value of largest magnitude is exactly -127 levels
        assert_eq!(b.qs[imax], -127);
    }
}

#[test]
fn all_zero_blocks_stay_zero() {
    for ty in [
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q8_0,
        T::Q8_1,
        T::Q4_K,
        T::Q6_K,
        T::Q8_K,
    ] {
        let y = dequantize(ty, &quantize(ty, &[0.0; 256]));
        assert!(y.iter().all(|&v| v == 0.0), "{ty}: {y:?}");
    }
    let b = BlockQ8_K::quantize(&[0.0; 256]);
    assert_eq!((b.d, b.bsums), (0.0, [0; 16]));
}

/// Named round-trip bounds (relative RMS error on normal data; measured means
/// are 0.068 for Q4_K and 0.017 for Q6_K). Q4_K must also beat Q4_0 and Q6_K
/// beat Q5_1 on the same data, as in ggml's own tables.
const Q4_K_MAX_REL_RMSE: f64 = 0.12;
const Q6_K_MAX_REL_RMSE: f64 = 0.03;

#[test]
fn k_quantizers_round_trip_within_bounds() {
    let (mut e4k, mut e6k, mut e40, mut e51) = (0.0, 0.0, 0.0, 0.0);
    for seed in 0..40 {
        let x = test_rows(1000 + seed, 1024);
        let a = round_trip_error(T::Q4_K, &x);
        let b = round_trip_error(T::Q6_K, &x);
        assert!(a < Q4_K_MAX_REL_RMSE, "Q4_K seed {seed}: relative rmse {a}");
        assert!(b < Q6_K_MAX_REL_RMSE, "Q6_K seed {seed}: relative rmse {b}");
        e4k += a;
        e6k += b;
        e40 += round_trip_error(T::Q4_0, &x);
        e51 += round_trip_error(T::Q5_1, &x);
    }
    assert!(e4k < e40, "Q4_K ({e4k}) should beat Q4_0 ({e40})");
    assert!(e6k < e51, "Q6_K ({e6k}) should beat Q5_1 ({e51})");
}

/// Per element, a K-quant round trip is off by at most half a step of its
/// sub-block (plus the rounding of the stored scales), except where a level
/// had to be clamped.
#[test]
fn q6_k_elements_within_half_a_step() {
    for seed in 0..40 {
        let x = test_rows(2000 + seed, 256);
        let q = quantize(T::Q6_K, &x);
        let y = dequantize(T::Q6_K, &q);
        let d = f16::from_le_bytes([q[208], q[209]]).to_f32();
        for i in 0..256 {
            let sc = q[192 + i / 16] as i8 as f32;
            let step = (d * sc).abs();
            let clamped = (x[i] / (d * sc)).round() > 31.0 || (x[i] / (d * sc)).round() < -32.0;
            if !clamped {
                assert!(
                    (y[i] - x[i]).abs() <= 0.5 * step * 1.0001,
                    "seed {seed} i {i}"
                );
            }
        }
    }
}

/// Re-quantizing a dequantized block lands close to it again: the quantizer
/// finds (nearly) the grid the values already lie on. Checked on the gguf-py
/// fixture blocks (random payloads and scales, so every level pattern
/// appears) and on blocks quantized from data. Bounds are relative RMS
/// errors, about twice the worst measured (Q4_K from data measured exact).
#[test]
fn k_quantizers_reproduce_dequantized_blocks() {
    for (ty, fixture_bound, data_bound) in [(T::Q4_K, 0.05, 0.01), (T::Q6_K, 0.025, 0.015)] {
        let mut sources = vec![dequantize(
            ty,
            &fixture(&format!("{}.blocks.bin", ty.name())),
        )];
        for seed in 0..20 {
            sources.push(dequantize(ty, &quantize(ty, &test_rows(3000 + seed, 256))));
        }
        for (k, y1) in sources.iter().enumerate() {
            let bound = if k == 0 { fixture_bound } else { data_bound };
            for (b, blk) in y1.chunks_exact(256).enumerate() {
                let y2 = dequantize(ty, &quantize(ty, blk));
                let err = rms(blk.iter().zip(&y2).map(|(a, b)| a - b)) / rms(blk.iter().copied());
                assert!(
                    err < bound,
                    "{ty} source {k} block {b}: relative rmse {err}"
                );
            }
        }
    }
}
