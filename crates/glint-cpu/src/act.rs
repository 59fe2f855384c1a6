//! Activations quantized the way ggml's x86 cpu backend quantizes them
//! before an integer dot. For Q8_0 and Q8_1 that is `quantize_row_q8_0` /
//! `quantize_row_q8_1` of `arch/x86/quants.c`, not the `_ref` quantizers
//! that `glint_quant` mirrors: the inverse scale is `127 / amax` (not
//! `1 / (amax / 127)`) and levels round half to even (not half away from
//! zero). Q8_K is ggml's reference on every arch.
//!
//! One plain body, compiled twice: for the baseline target and, where the
//! cpu has AVX2, for AVX2 (no fused multiply-adds: the same numbers).

use glint_backend::GgmlType;
use glint_quant::QuantError;
use half::f16;

const QK: usize = 32;
const QK_K: usize = 256;

/// `x` (a whole number of blocks of `vt`) quantized into `out`
/// (`vt.bytes_for(x.len())` bytes). `vt` is Q8_0, Q8_1 or Q8_K; any other
/// type goes to `glint_quant::quantize_row`.
pub fn quantize_row(vt: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let block = match vt {
        GgmlType::Q8_0 | GgmlType::Q8_1 => QK,
        GgmlType::Q8_K => QK_K,
        _ => return glint_quant::quantize_row(vt, x, out),
    };
    let bytes = vt.bytes_for(x.len() as u64);
    if x.len() % block != 0 || bytes != Some(out.len() as u64) {
        // glint_quant names the mismatch.
        return glint_quant::quantize_row(vt, x, out);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::qdot::has_avx2() {
        wide::quantize(vt, x, out);
        return Ok(());
    }
    quantize_body(vt, x, out);
    Ok(())
}

/// Round half to even, as `_mm256_round_ps(_MM_ROUND_NEAREST)` and ggml's
/// `nearest_int` do; exact for |v| <= 2^22 (levels here are within ±128),
/// then saturated to an i8 as `packs` does. Branch-free, so it vectorizes.
#[inline(always)]
fn level(v: f32) -> i8 {
    let v = v.clamp(-128.0, 127.0);
    let t = v + 12_582_912.0; // 1.5 * 2^23: the integer lands in the mantissa
    ((t.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000) as i8
}

#[inline(always)]
fn quantize_body(vt: GgmlType, x: &[f32], out: &mut [u8]) {
    match vt {
        GgmlType::Q8_0 => {
            for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(2 + QK)) {
                let (d, q) = q8_x86(xb.try_into().expect("32 floats"));
                ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                for (o, &l) in ob[2..].iter_mut().zip(&q) {
                    *o = l as u8;
                }
            }
        }
        GgmlType::Q8_1 => {
            for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(4 + QK)) {
                let (d, q) = q8_x86(xb.try_into().expect("32 floats"));
                let sum: i32 = q.iter().map(|&l| i32::from(l)).sum();
                ob[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
                ob[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
                for (o, &l) in ob[4..].iter_mut().zip(&q) {
                    *o = l as u8;
                }
            }
        }
        _ => {
            for (xb, ob) in x
                .chunks_exact(QK_K)
                .zip(out.chunks_exact_mut(4 + QK_K + 32))
            {
                q8_k(xb.try_into().expect("256 floats"), ob);
            }
        }
    }
}

/// ggml's x86 Q8_0/Q8_1 block: `d = amax / 127`, levels
/// `round_half_even(x * (127 / amax))`.
#[inline(always)]
fn q8_x86(x: &[f32; QK]) -> (f32, [i8; QK]) {
    let mut amax = 0.0f32;
    for &v in x {
        let a = v.abs();
        amax = if a > amax { a } else { amax };
    }
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (d, std::array::from_fn(|j| level(x[j] * id)))
}

/// ggml's `quantize_row_q8_K_ref`: `max` is the value of largest
/// magnitude (the first one), `iscale = -127 / max`, levels rounded half to
/// even and capped at 127; 16 block sums; `d = 1 / iscale`. An all-zero
/// block is all zeros.
#[inline(always)]
fn q8_k(x: &[f32; QK_K], out: &mut [u8]) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        out.fill(0);
        return;
    }
    let iscale = -127.0 / max;
    let q: [i8; QK_K] = std::array::from_fn(|j| level(iscale * x[j]));
    out[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    for (o, &l) in out[4..4 + QK_K].iter_mut().zip(&q) {
        *o = l as u8;
    }
    for (j, s) in out[4 + QK_K..].chunks_exact_mut(2).enumerate() {
        let sum: i16 = q[16 * j..16 * j + 16].iter().map(|&l| i16::from(l)).sum();
        s.copy_from_slice(&sum.to_le_bytes());
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wide {
    use super::*;

    pub(super) fn quantize(vt: GgmlType, x: &[f32], out: &mut [u8]) {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn tf(vt: GgmlType, x: &[f32], out: &mut [u8]) {
            quantize_body(vt, x, out)
        }
        // SAFETY: called only after `has_avx2()` confirmed AVX2, FMA and F16C.
        unsafe { tf(vt, x, out) }
    }
}
