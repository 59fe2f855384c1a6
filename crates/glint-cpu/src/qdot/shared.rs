//! The vector helpers both x86 tiers use.

#![allow(unsafe_code)]

use super::*;
use std::arch::x86_64::*;

/// One 32-byte vector from `b[at..at + 32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn load32(b: &[u8], at: usize) -> __m256i {
    let b: &[u8; 32] = arr(b, at);
    // SAFETY: `b` is 32 readable bytes; loadu has no alignment need.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// The 32 4-bit levels of `b[at..at + 16]` in element order: low
/// nibbles (elements 0..16), then high nibbles (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn nibbles(b: &[u8], at: usize) -> __m256i {
    let q: &[u8; 16] = arr(b, at);
    // SAFETY: `q` is 16 readable bytes; loadu has no alignment need.
    let q = unsafe { _mm_loadu_si128(q.as_ptr().cast()) };
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    _mm256_set_m128i(hi, lo)
}

/// ggml's `bytes_from_bits_32`, masked: byte j is 0x10 where bit j
/// of the little-endian `b[at..at + 4]` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fifth_bits(b: &[u8], at: usize) -> __m256i {
    let bits = u32::from_le_bytes(*arr(b, at));
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    let set = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The two f16 at `b[at..at + 4]` in lanes 0 and 1 (F16C; exact,
/// like `half`). One `movd` from the whole 4 bytes, so the vector has
/// no false dependency on an older register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16x2(b: &[u8], at: usize) -> __m128 {
    let h = u32::from_le_bytes(*arr(b, at));
    _mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))
}

/// The sum of `v`'s 8 lanes: halves folded (4, 2, 1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_f32(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}
