//! Every `Compute` type of `glint_quant::TYPES` through `mul_mat` (both
//! paths) and `get_rows`, held to `glint_quant::dot_f32` / `dequantize_row`.

mod common;

use common::*;
use glint_backend::{Backend, GgmlType};
use glint_quant::{BlockQ2_K, BlockQ3_K, BlockQ5_K, QuantError, Support, TYPES};
use half::f16;

/// The backend's dot vs `dot_f32`: same products, different f32 summation
/// order: |diff| <= DOT_TOL * sum |w_i x_i| (k <= 512 here).
const DOT_TOL: f64 = 1e-5;

/// A small random f16 scale, positive.
fn scale(rng: &mut Rng) -> f16 {
    f16::from_f32(0.01 + 0.05 * rng.f32().abs())
}

/// Random valid blocks for `n_rows` rows of `k` elements: quantized from
/// random data where glint_quant quantizes the type, else random quant bytes
/// with sane f16 scales.
fn random_rows(ty: GgmlType, k: usize, n_rows: usize, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
    let mut out = vec![0u8; row_bytes * n_rows];
    for row in out.chunks_mut(row_bytes) {
        match glint_quant::quantize_row(ty, &rng.vec(k), row) {
            Ok(()) => {}
            Err(QuantError::Unsupported { .. }) => {
                for b in row.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                for blk in row.chunks_mut(ty.type_size()) {
                    fix_scales(ty, blk, rng);
                }
            }
            Err(e) => panic!("{ty}: {e}"),
        }
    }
    out
}

fn fix_scales(ty: GgmlType, blk: &mut [u8], rng: &mut Rng) {
    match ty {
        GgmlType::Q2_K => {
            let mut b: BlockQ2_K = bytemuck::pod_read_unaligned(blk);
            (b.d, b.dmin) = (scale(rng), scale(rng));
            blk.copy_from_slice(bytemuck::bytes_of(&b));
        }
        GgmlType::Q3_K => {
            let mut b: BlockQ3_K = bytemuck::pod_read_unaligned(blk);
            b.d = scale(rng);
            blk.copy_from_slice(bytemuck::bytes_of(&b));
        }
        GgmlType::Q5_K => {
            let mut b: BlockQ5_K = bytemuck::pod_read_unaligned(blk);
            (b.d, b.dmin) = (scale(rng), scale(rng));
            blk.copy_from_slice(bytemuck::bytes_of(&b));
        }
        _ => panic!("{ty}: no quantizer and no random-block recipe; add one here"),
    }
}

/// A row length that is whole blocks but not a multiple of 64 where the type allows.
fn row_len(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 67,
        32 => 96,
        bs => 2 * bs,
    }
}

#[test]
fn every_compute_type_works_in_mul_mat_and_get_rows() {
    let be = backend();
    let mut rng = Rng(31);
    let mut n_types = 0;
    for info in TYPES.iter().filter(|t| t.support == Support::Compute) {
        let ty = info.ty;
        n_types += 1;
        let (k, n) = (row_len(ty), 19);
        let wb = random_rows(ty, k, n, &mut rng);
        let row_bytes = wb.len() / n;
        // wv: [k, n] the dequantized weights, as glint_quant defines them.
        let mut wv = vec![0f32; k * n];
        for (r, dst) in wv.chunks_mut(k).enumerate() {
            glint_quant::dequantize_row(ty, &wb[r * row_bytes..(r + 1) * row_bytes], dst).unwrap();
        }
        assert!(
            wv.iter().all(|v| v.is_finite()) && wv.iter().any(|&v| v != 0.0),
            "{ty}: data"
        );
        let w = weight(&be, ty, [k, n, 1, 1], &wb);

        for m in [1, 4, 11] {
            let xv = rng.vec(k * m);
            let what = format!("mul_mat {ty} m={m}");
            assert_mul_mat(&what, &be, &w, &xv, [k, n, m], DOT_TOL, |r, xc| {
                let want = glint_quant::dot_f32(ty, &wb[r * row_bytes..(r + 1) * row_bytes], xc)
                    .unwrap() as f64;
                let mag = wv[r * k..(r + 1) * k]
                    .iter()
                    .zip(xc)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum();
                (want, mag)
            });
        }

        let ids = [18, 0, 7, 7, 19];
        let out = zeros(&be, GgmlType::F32, [k, ids.len(), 1, 1]);
        be.get_rows(&w, &i32s(&be, &ids), &out).unwrap();
        let got = read_f32(&be, &out);
        for (i, &id) in ids.iter().enumerate() {
            let want: &[f32] = if id < n as i32 {
                &wv[id as usize * k..(id as usize + 1) * k]
            } else {
                &[0.0; 512][..k]
            };
            assert_eq!(&got[i * k..(i + 1) * k], want, "get_rows {ty} id {id}");
        }
    }
    assert_eq!(
        n_types, 13,
        "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K"
    );
}
