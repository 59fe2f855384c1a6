//! The two dot products: `dot_f32` against an f64 sum, and ggml's integer
//! `vec_dot` against `dot_f32` within the activation quantization error.

mod common;

use common::{random_quant_row, seeded, Rng};
use glint_quant::{
    dequantize_row, dot_f32, quantize_row, vec_dot, BlockQ8_1, GgmlType as T, Support, TYPES,
};

const SEEDS: u64 = 60;

fn compute_types() -> impl Iterator<Item = T> {
    TYPES
        .iter()
        .filter(|r| r.support == Support::Compute)
        .map(|r| r.ty)
}

/// A weight row of `n` elements: random finite floats, or random quant
/// payloads with sane scales (every bit pattern of the levels appears).
fn weight_row(rng: &mut Rng, ty: T, n: usize) -> Vec<u8> {
    match ty {
        T::F32 | T::F16 | T::BF16 => {
            let x = rng.normals(n, 1.0);
            let mut row = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
            quantize_row(ty, &x, &mut row).unwrap();
            row
        }
        _ => random_quant_row(rng, ty, n / ty.block_size()),
    }
}

fn dequantize(ty: T, row: &[u8], n: usize) -> Vec<f32> {
    let mut w = vec![0.0f32; n];
    dequantize_row(ty, row, &mut w).unwrap();
    w
}

/// A random row of `ty` and activations at a random scale (1e-2..1e2),
/// from `seed`: (n, row, x).
fn scaled_case(seed: u64, ty: T) -> (usize, Vec<u8>, Vec<f32>) {
    let mut rng = seeded(seed);
    let n = n_elements(&mut rng, ty);
    let row = weight_row(&mut rng, ty, n);
    let scale = 10f32.powf(rng.uniform(-2.0, 2.0));
    (n, row, rng.normals(n, scale))
}

/// Σ a_i b_i and Σ |a_i b_i|, in f64.
fn f64_dot(a: &[f32], b: &[f32]) -> (f64, f64) {
    let products = a.iter().zip(b).map(|(p, q)| f64::from(*p) * f64::from(*q));
    (products.clone().sum(), products.map(f64::abs).sum())
}

/// Row lengths: a few blocks, never a multiple of 8 blocks only.
fn n_elements(rng: &mut Rng, ty: T) -> usize {
    let blocks = 1 + (rng.next_u64() % 6) as usize;
    blocks * ty.block_size().max(32) * if ty.block_size() == 1 { 8 } else { 1 }
}

#[test]
fn dot_f32_matches_the_f64_sum_of_dequantized_products() {
    for ty in compute_types() {
        for seed in 0..SEEDS {
            let (n, row, x) = scaled_case(seed * 131 + ty.id() as u64, ty);
            let w = dequantize(ty, &row, n);
            let (exact, abs) = f64_dot(&w, &x);
            let got = dot_f32(ty, &row, &x).unwrap();
            // Rigorous bound for f32 summation: (terms per block + blocks) ulps/2
            // of the absolute sum, plus one per product.
            let bs = ty.block_size();
            let k = (bs + n / bs + 2) as f64;
            let tol = k * f64::from(f32::EPSILON) / 2.0 * abs;
            assert!(
                (f64::from(got) - exact).abs() <= tol,
                "{ty} seed {seed} n {n}: dot_f32 {got} vs exact {exact} (tol {tol})"
            );
            assert!(abs > 0.0, "{ty} seed {seed}: degenerate test data");
        }
    }
}

/// Per-element activation quantization error, in units of the block's
/// `amax / 127`: Q8_0/Q8_1 round to a level (0.5) and store `d` as f16
/// (127 * 2^-11 more); Q8_K keeps an f32 `d` (0.5 plus f32 slack). Exact
/// float activations (F32/F16/BF16 rows) have none.
fn activation_error_per_step(act: T) -> f64 {
    match act {
        T::Q8_0 | T::Q8_1 => 0.5 + 127.0 / 2048.0,
        T::Q8_K => 0.5 + 1e-4,
        _ => 0.0,
    }
}

#[test]
fn vec_dot_is_within_activation_quantization_error_of_dot_f32() {
    for ty in compute_types() {
        let act_ty = ty.vec_dot_type();
        let abs_block = act_ty.block_size();
        for seed in 0..SEEDS {
            let (n, row, x) = scaled_case(seed * 7919 + ty.id() as u64, ty);
            let mut act = vec![0u8; act_ty.bytes_for(n as u64).unwrap() as usize];
            quantize_row(act_ty, &x, &mut act).unwrap();

            let w = dequantize(ty, &row, n);
            let reference = dot_f32(ty, &row, &x).unwrap();
            let got = vec_dot(ty, &row, &act).unwrap();

            // Σ |w_i| * error(x_i), block by block of the activation format.
            let mut bound = 0.0f64;
            for (wb, xb) in w.chunks(abs_block).zip(x.chunks(abs_block)) {
                let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let sw: f64 = wb.iter().map(|v| f64::from(v.abs())).sum();
                bound += sw * f64::from(amax) / 127.0 * activation_error_per_step(act_ty);
            }
            // Q4_1/Q5_1 meet the offset m through s = f16(d * Σq), not Σ(d16 * q).
            if act_ty == T::Q8_1 {
                for (b, blk) in act.chunks_exact(36).enumerate() {
                    let a: BlockQ8_1 = bytemuck::pod_read_unaligned(blk);
                    let sumq: i32 = a.qs.iter().map(|&q| q as i32).sum();
                    let exact_s = f64::from(a.d.to_f32()) * f64::from(sumq);
                    let m = half::f16::from_le_bytes([
                        row[b * ty.type_size() + 2],
                        row[b * ty.type_size() + 3],
                    ]);
                    bound +=
                        f64::from(m.to_f32().abs()) * (f64::from(a.s.to_f32()) - exact_s).abs();
                }
            }
            // f32 rounding inside both dots.
            let (_, abs) = f64_dot(&w, &x);
            let tol = bound * 1.001 + 1e-5 * abs + 1e-30;
            assert!(
                (f64::from(got) - f64::from(reference)).abs() <= tol,
                "{ty} x {act_ty} seed {seed} n {n}: vec_dot {got} vs dot_f32 {reference} (tol {tol})"
            );
        }
    }
}

/// With the activations taken as their dequantized values, ggml's integer
/// dot is exact up to float rounding: this pins the block layouts of both
/// sides (a misplaced nibble would be far outside this tolerance).
#[test]
fn vec_dot_equals_the_dot_of_dequantized_rows() {
    for ty in compute_types().filter(|t| !matches!(t, T::Q4_1 | T::Q5_1)) {
        let act_ty = ty.vec_dot_type();
        for seed in 0..SEEDS {
            let mut rng = seeded(seed * 104729 + ty.id() as u64);
            let n = n_elements(&mut rng, ty);
            let row = weight_row(&mut rng, ty, n);
            let x = rng.normals(n, 1.0);
            let mut act = vec![0u8; act_ty.bytes_for(n as u64).unwrap() as usize];
            quantize_row(act_ty, &x, &mut act).unwrap();
            let w = dequantize(ty, &row, n);
            let a = dequantize(act_ty, &act, n);
            let (exact, abs) = f64_dot(&w, &a);
            let got = vec_dot(ty, &row, &act).unwrap();
            assert!(
                (f64::from(got) - exact).abs() <= 1e-5 * abs + 1e-30,
                "{ty} seed {seed}: vec_dot {got} vs exact {exact} (abs sum {abs})"
            );
        }
    }
}

#[test]
fn activation_types_have_no_integer_dot() {
    assert!(vec_dot(T::Q8_K, &[0; 292], &[0; 292]).is_err());
    assert!(vec_dot(T::Q8_1, &[0; 36], &[0; 36]).is_err());
    assert!(vec_dot(T::IQ4_NL, &[0; 18], &[0; 34]).is_err());
}
