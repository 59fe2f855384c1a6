//! Quantized KV caches (Q8_0, Q4_0) on the cpu backend: `set_rows`
//! quantizes each row as `act::quantize_row` does and stays within a
//! block's step of the source; attention over a quantized cache equals, bit
//! for bit, attention over an F32 cache holding its dequantized values (the
//! window of rows dequantized, then the same kernels); the K-shift is
//! dequantize, rotate, requantize; and the error after 10 successive shifts
//! against the exactly rotated keys.

mod common;

use common::*;
use glint_backend::{AttnParams, Backend, GgmlType, RopeMode, RopeParams};

const TYPES: [GgmlType; 2] = [GgmlType::Q8_0, GgmlType::Q4_0];

/// `(d, values)` of each block of a quantized row (d as stored).
fn blocks(ty: GgmlType, row: &[u8]) -> Vec<(f32, Vec<f32>)> {
    let ts = ty.bytes_for(32).unwrap() as usize;
    row.chunks(ts)
        .map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            let mut v = vec![0f32; 32];
            glint_cpu::dequant_row(ty, b, &mut v).unwrap();
            (d, v)
        })
        .collect()
}

fn dequant(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    blocks(ty, bytes).into_iter().flat_map(|(_, v)| v).collect()
}

/// A quantized cache `[n, rows]` filled from `vals` by `set_rows`.
fn quantized(
    be: &glint_cpu::CpuBackend,
    ty: GgmlType,
    n: usize,
    vals: &[f32],
) -> glint_cpu::CpuTensor {
    let rows = vals.len() / n;
    let c = zeros(be, ty, [n, rows, 1, 1]);
    let all: Vec<i32> = (0..rows as i32).collect();
    be.set_rows(&f32s(be, [n, rows, 1, 1], vals), &i32s(be, &all), &c)
        .unwrap();
    c
}

#[test]
fn set_rows_quantizes_each_row_within_a_step() {
    let be = backend();
    let mut r = Rng(0x5e7);
    let (n, rows) = (192, 9);
    for ty in TYPES {
        let c = zeros(&be, ty, [n, rows, 1, 1]);
        let before = bytes_of(&be, &c);
        let src = r.normals(n * 4, 1.5);
        // Row 7 twice (the last wins), one row outside, one negative.
        let idx = [7, 2, 7, 40];
        be.set_rows(&f32s(&be, [n, 4, 1, 1], &src), &i32s(&be, &idx), &c)
            .unwrap();
        let after = bytes_of(&be, &c);
        let rb = ty.bytes_for(n as u64).unwrap() as usize;
        for row in 0..rows {
            let got = &after[row * rb..(row + 1) * rb];
            let from = match row {
                2 => Some(1),
                7 => Some(2),
                _ => None,
            };
            let Some(i) = from else {
                assert_eq!(got, &before[row * rb..(row + 1) * rb], "{ty} row {row}");
                continue;
            };
            let x = &src[i * n..(i + 1) * n];
            let mut want = vec![0u8; rb];
            glint_cpu::act::quantize_row(ty, x, &mut want).unwrap();
            assert_eq!(got, &want[..], "{ty} row {row}");
            // Q8_0 rounds to the nearest of 255 levels; Q4_0 truncates
            // x/d + 8.5 and caps at 15, so the extreme opposite the block's
            // max may lose a whole step. d is stored as f16: levels up to
            // 127 (8) times its rounding of 2^-11 relative add 0.07 steps.
            let steps = if ty == GgmlType::Q8_0 { 0.57 } else { 1.01 };
            for (b, (d, v)) in blocks(ty, got).iter().enumerate() {
                for (j, (&g, &w)) in v.iter().zip(&x[b * 32..(b + 1) * 32]).enumerate() {
                    let err = (g - w).abs();
                    assert!(
                        err <= steps * d.abs() * 1.001 + 1e-6,
                        "{ty} row {row} block {b} [{j}]: {g} for {w}, d {d}"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_over_a_quantized_cache_is_attention_over_its_values() {
    let be = backend();
    let mut r = Rng(0xa77);
    let (hd, nh, nkv, m, rows) = (64, 6, 2, 5, 70);
    let (kv_start, n_kv) = (9, 57);
    let q = r.vec_scaled(hd * nh * m, 2.0);
    let q2 = r.vec_scaled(hd * nh * m, 2.0);
    let mut mask = vec![0f32; n_kv * m];
    let mut far = vec![f32::NEG_INFINITY; n_kv * m];
    for t in 0..m {
        for j in 0..n_kv {
            if j > 40 + 3 * t {
                mask[t * n_kv + j] = f32::NEG_INFINITY;
            } else if j + 20 < 40 + 3 * t {
                // Distant: scored by the far half in the window variant.
                mask[t * n_kv + j] = f32::NEG_INFINITY;
                far[t * n_kv + j] = 0.0;
            }
        }
    }
    for (tk, tv) in [
        (GgmlType::Q8_0, GgmlType::Q8_0),
        (GgmlType::Q4_0, GgmlType::Q4_0),
        (GgmlType::Q8_0, GgmlType::F16),
    ] {
        let n = hd * nkv;
        let (kx, k2x, vx) = (
            r.normals(n * rows, 1.0),
            r.normals(n * rows, 1.0),
            r.normals(n * rows, 1.0),
        );
        let make = |ty: GgmlType, x: &[f32]| -> (glint_cpu::CpuTensor, glint_cpu::CpuTensor) {
            let c = if ty == GgmlType::F16 {
                let c = zeros(&be, ty, [n, rows, 1, 1]);
                let all: Vec<i32> = (0..rows as i32).collect();
                be.set_rows(&f32s(&be, [n, rows, 1, 1], x), &i32s(&be, &all), &c)
                    .unwrap();
                c
            } else {
                quantized(&be, ty, n, x)
            };
            // The same values in an F32 cache.
            let vals: Vec<f32> = if ty == GgmlType::F16 {
                read_f16(&be, &c).iter().map(|h| h.to_f32()).collect()
            } else {
                dequant(ty, &bytes_of(&be, &c))
            };
            (c, f32s(&be, [n, rows, 1, 1], &vals))
        };
        let (k, kf) = make(tk, &kx);
        let (k2, k2f) = make(tk, &k2x);
        let (v, vf) = make(tv, &vx);
        let p = AttnParams {
            scale: 0.125,
            kv_start,
            ..AttnParams::new(nh, nkv, hd, n_kv)
        };
        let qt = f32s(&be, [hd, nh, m, 1], &q);
        let q2t = f32s(&be, [hd, nh, m, 1], &q2);
        let (mt, ft) = (
            f32s(&be, [n_kv, m, 1, 1], &mask),
            f32s(&be, [n_kv, m, 1, 1], &far),
        );
        let run = |k: &glint_cpu::CpuTensor, v: &glint_cpu::CpuTensor| {
            let o = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
            be.attention(&qt, k, v, &mt, &p, &o).unwrap();
            read_f32(&be, &o)
        };
        let (got, want) = (run(&k, &v), run(&kf, &vf));
        assert!(got.iter().all(|x| x.is_finite()));
        assert_eq!(got, want, "attention {tk}/{tv}");
        let run_w =
            |k: &glint_cpu::CpuTensor, v: &glint_cpu::CpuTensor, k2: &glint_cpu::CpuTensor| {
                let o = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
                be.attention_window(&qt, k, v, &mt, [&q2t, k2, &ft], &p, &o)
                    .unwrap();
                read_f32(&be, &o)
            };
        assert_eq!(
            run_w(&k, &v, &k2),
            run_w(&kf, &vf, &k2f),
            "attention_window {tk}/{tv}"
        );
    }
}

#[test]
fn a_quantized_kshift_is_dequantize_rotate_requantize() {
    let be = backend();
    let mut r = Rng(0x5417);
    let (hd, nkv, rows) = (64, 3, 12);
    let n = hd * nkv;
    for ty in TYPES {
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            let p = RopeParams::plain(mode, hd, nkv, 10000.0);
            let c = quantized(&be, ty, n, &r.normals(n * rows, 1.0));
            let shift: Vec<i32> = (0..rows)
                .map(|i| if i % 4 == 1 { 0 } else { r.range(-300, 300) })
                .collect();
            // The twin: the dequantized rows in an F32 cache, shifted, then
            // quantized by set_rows.
            let vals = dequant(ty, &bytes_of(&be, &c));
            let f = f32s(&be, [n, rows, 1, 1], &vals);
            be.kshift(&f, &i32s(&be, &shift), &p).unwrap();
            let want = quantized(&be, ty, n, &read_f32(&be, &f));
            let before = bytes_of(&be, &c);
            be.kshift(&c, &i32s(&be, &shift), &p).unwrap();
            let got = bytes_of(&be, &c);
            let rb = ty.bytes_for(n as u64).unwrap() as usize;
            for (row, &s) in shift.iter().enumerate() {
                let range = row * rb..(row + 1) * rb;
                if s == 0 {
                    // Untouched: not even requantized.
                    assert_eq!(got[range.clone()], before[range], "{ty} row {row}");
                } else {
                    assert_eq!(
                        got[range.clone()],
                        bytes_of(&be, &want)[range],
                        "{ty} {mode:?} row {row}"
                    );
                }
            }
        }
    }
}

/// Ten successive K-shifts of a quantized cache against the keys rotated
/// exactly (f32 rope at the final position of the unquantized keys), and
/// against quantizing those exact keys once. Each requantization adds a
/// fresh rounding error of about the same size as the first, and the
/// rotations carry the earlier ones along: the error is a sum of 11
/// roundings (a random walk), so its RMS grows as about √11 ≈ 3.3 times
/// one rounding's, and its max, the tail of that sum over 16k values, by
/// more. Measured here: Q8_0 3.35× in RMS, 4.98× in max abs; Q4_0 3.26×
/// and 3.49×. Asserted: RMS within 1.25 √11, max within 2 √11, and more
/// than one rounding (the shifts did requantize). The 2× of one rounding
/// that the Long context issue asks for cannot hold for a
/// dequantize-rotate-requantize shift: each requantization alone is one
/// rounding.
#[test]
fn ten_quantized_shifts_stay_within_the_random_walk_of_their_roundings() {
    let be = backend();
    let mut r = Rng(0x10_5417);
    let (hd, nkv, rows) = (64, 4, 64);
    let n = hd * nkv;
    let p = RopeParams::plain(RopeMode::Neox, hd, nkv, 10000.0);
    let raw = r.normals(n * rows, 1.0);
    let rope_at = |pos: &[i32]| -> Vec<f32> {
        let out = zeros(&be, GgmlType::F32, [hd, nkv, rows, 1]);
        be.rope(
            &f32s(&be, [hd, nkv, rows, 1], &raw),
            &i32s(&be, pos),
            &p,
            &out,
        )
        .unwrap();
        read_f32(&be, &out)
    };
    for ty in TYPES {
        let mut pos: Vec<i32> = (0..rows as i32).map(|i| 2000 + 7 * i).collect();
        let c = quantized(&be, ty, n, &rope_at(&pos));
        for _ in 0..10 {
            let shift: Vec<i32> = (0..rows).map(|_| r.range(-150, -1)).collect();
            be.kshift(&c, &i32s(&be, &shift), &p).unwrap();
            pos.iter_mut().zip(&shift).for_each(|(q, s)| *q += s);
        }
        let exact = rope_at(&pos);
        let shifted = dequant(ty, &bytes_of(&be, &c));
        let once = dequant(ty, &bytes_of(&be, &quantized(&be, ty, n, &exact)));
        let rms = |a: &[f32]| -> f64 {
            let s: f64 = a
                .iter()
                .zip(&exact)
                .map(|(&x, &y)| ((x - y) as f64).powi(2))
                .sum();
            (s / a.len() as f64).sqrt()
        };
        let max_abs = |a: &[f32]| -> f64 {
            a.iter()
                .zip(&exact)
                .map(|(&x, &y)| (x - y).abs() as f64)
                .fold(0.0, f64::max)
        };
        let (rms10, rms1) = (rms(&shifted), rms(&once));
        let (max10, max1) = (max_abs(&shifted), max_abs(&once));
        assert!(rms1 > 0.0 && max1 > 0.0);
        let walk = 11f64.sqrt();
        assert!(
            rms10 <= 1.25 * walk * rms1,
            "{ty}: RMS error {rms10:.3e} after 10 shifts, {rms1:.3e} once ({:.2}x)",
            rms10 / rms1
        );
        eprintln!(
            "{ty}: after 10 shifts RMS {:.2}x, max abs {:.2}x a single rounding's",
            rms10 / rms1,
            max10 / max1
        );
        assert!(
            max10 <= 2.0 * walk * max1,
            "{ty}: max error {max10:.3e} after 10 shifts, {max1:.3e} once ({:.2}x)",
            max10 / max1
        );
        // And no better than a single rounding: the shifts did requantize.
        assert!(rms10 > 1.5 * rms1, "{ty}: {rms10:.3e} vs {rms1:.3e}");
    }
}
