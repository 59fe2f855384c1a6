//! The AVX2 kernels (with FMA and F16C).

#![allow(unsafe_code)]

use super::shared::*;
use super::*;
use std::arch::x86_64::*;

/// One 16-byte vector from `b[at..at + 16]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load16(b: &[u8], at: usize) -> __m128i {
    let b: &[u8; 16] = arr(b, at);
    // SAFETY: `b` is 16 readable bytes; loadu has no alignment need.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// How far ahead of the weight block being read to prefetch (bytes): a
/// page, so the hint starts the next page's reads before the block loop
/// reaches it, where the hardware's streamer stops at the 4 KiB page's
/// end. Measured on the AVX-512 Xeon (2 threads, `glint bench -p 0 -n 128`,
/// medians of 6–7 alternating runs with llama-bench among them): Gemma 3
/// tg128 49.7 t/s at 1024 bytes, 53.1 at 2048, 56.4 at 4096 (llama.cpp
/// 44.6 in the same rounds); SmolLM2 134.0 at 1024, 139.8 at 4096, 126.4
/// at 8192.
pub(super) const PREFETCH: usize = 4096;

/// `dx * dy` from the f16 scales at the start of two blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dd(xb: &[u8], yb: &[u8]) -> __m256 {
    _mm256_broadcastss_ps(_mm_mul_ss(f16x2(xb, 0), f16x2(yb, 0)))
}

/// `dx * dy` of two consecutive block pairs (`x_size`, `y_size` bytes a block),
/// both converted in one vector: with only one lane used, LLVM
/// narrows the load into a merge that chains onto the accumulator.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dd2(xb: &[u8], yb: &[u8], x_size: usize, y_size: usize) -> (__m256, __m256) {
    let pair = |b: &[u8], size: usize| {
        let lo = u16::from_le_bytes([b[0], b[1]]) as u32;
        let hi = u16::from_le_bytes([b[size], b[size + 1]]) as u32;
        _mm_cvtph_ps(_mm_cvtsi32_si128((lo | (hi << 16)) as i32))
    };
    let p = _mm_mul_ps(pair(xb, x_size), pair(yb, y_size));
    (
        _mm256_broadcastss_ps(p),
        _mm256_broadcastss_ps(_mm_movehdup_ps(p)),
    )
}

/// `sum(x[j] * y[j])` of unsigned `x` (< 128) and signed `y`, as
/// 8 f32 lanes of pair sums (ggml's `mul_sum_us8_pairs_float`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_u8_i8(x: __m256i, y: __m256i) -> __m256 {
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
    _mm256_cvtepi32_ps(p)
}

/// [`lanes_u8_i8`] for signed `x` (-127..=127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_i8_i8(x: __m256i, y: __m256i) -> __m256 {
    lanes_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

// The kernels below are ggml's AVX2 loops (`ggml_vec_dot_*_q8_*` in
// arch/x86/quants.c): block integer sums stay exact, but each block
// adds `d * lanes` into 8 f32 lanes with FMA and the lanes are summed
// at the end, so they differ from the reference loop by float
// rounding only (the tests name the tolerance).

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    pairs_i8(x, y, Q4_0, |xb| q4_0_levels(xb))
}

/// A Q4_0 block's signed levels: the nibble less 8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_0_levels(xb: &[u8]) -> __m256i {
    _mm256_sub_epi8(nibbles(xb, 2), _mm256_set1_epi8(8))
}

/// The loop shared by the symmetric formats (Q4_0, Q5_0, Q8_0):
/// `levels(block)` gives a weight block's 32 signed levels, its
/// activation block (Q8_0) has its levels at byte `2`. One accumulator,
/// the blocks in order, as ggml's AVX2 `vec_dot` and llamafile's tinyBLAS
/// sum them (and as the multi-column kernels do): a decode column gets
/// the bits a prefill column gets, and llama.cpp's.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pairs_i8(x: &[u8], y: &[u8], size: usize, levels: impl Fn(&[u8]) -> __m256i) -> f32 {
    pairs_i8_rows::<1>([x], y, size, levels)[0]
}

/// [`pairs_i8`] of `R` weight rows, consecutive in the weights, against
/// one column: each row's arithmetic its own (row `r`'s bits at every
/// `R`), the column's blocks read once for the rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pairs_i8_rows<const R: usize>(
    xs: [&[u8]; R],
    y: &[u8],
    size: usize,
    levels: impl Fn(&[u8]) -> __m256i,
) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let nb = (xs[0].len() / size).min(y.len() / Q8_0);
    // Two blocks an iteration (their scales converted together, `dd2`),
    // added in order.
    for p in 0..nb / 2 {
        let yb = &y[2 * p * Q8_0..2 * (p + 1) * Q8_0];
        prefetch_rows::<R>(xs[0], p, 2 * size);
        for r in 0..R {
            let xb = &xs[r][2 * p * size..2 * (p + 1) * size];
            let (d0, d1) = dd2(xb, yb, size, Q8_0);
            let l0 = lanes_i8_i8(levels(xb), load32(yb, 2));
            let l1 = lanes_i8_i8(levels(&xb[size..]), load32(yb, Q8_0 + 2));
            acc[r] = _mm256_fmadd_ps(d1, l1, _mm256_fmadd_ps(d0, l0, acc[r]));
        }
    }
    if nb % 2 == 1 {
        let b = nb - 1;
        let yb = &y[b * Q8_0..(b + 1) * Q8_0];
        for r in 0..R {
            let xb = &xs[r][b * size..(b + 1) * size];
            let l = lanes_i8_i8(levels(xb), load32(yb, 2));
            acc[r] = _mm256_fmadd_ps(dd(xb, yb), l, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_f32(acc[r]);
    }
    out
}

/// The loop of the formats with a min (Q4_1, Q5_1): `levels(block)`
/// gives a weight block's 32 unsigned levels; one accumulator, and the
/// `mx * sy` terms summed apart. `R` rows as [`pairs_i8_rows`] has them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn min_rows<const R: usize>(
    xs: [&[u8]; R],
    y: &[u8],
    size: usize,
    levels: impl Fn(&[u8]) -> __m256i,
) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0.0f32; R];
    let nb = (xs[0].len() / size).min(y.len() / Q8_1);
    for b in 0..nb {
        let yb = &y[b * Q8_1..(b + 1) * Q8_1];
        prefetch_rows::<R>(xs[0], b, size);
        for r in 0..R {
            let xb = &xs[r][b * size..(b + 1) * size];
            // [dx * dy, mx * sy]
            let p = _mm_mul_ps(f16x2(xb, 0), f16x2(yb, 0));
            summs[r] += _mm_cvtss_f32(_mm_movehdup_ps(p));
            let d = _mm256_broadcastss_ps(p);
            acc[r] = _mm256_fmadd_ps(d, lanes_u8_i8(levels(xb), load32(yb, 4)), acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_f32(acc[r]) + summs[r];
    }
    out
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    min_rows::<1>([x], y, Q4_1, |xb| nibbles(xb, 4))[0]
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    pairs_i8(x, y, Q5_0, |xb| q5_0_levels(xb))
}

/// A Q5_0 block's signed levels: the nibble and its fifth bit, less 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_0_levels(xb: &[u8]) -> __m256i {
    let u = _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2));
    _mm256_sub_epi8(u, _mm256_set1_epi8(16))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    min_rows::<1>([x], y, Q5_1, |xb| q5_1_levels(xb))[0]
}

/// A Q5_1 block's unsigned levels: the nibble and its fifth bit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_1_levels(xb: &[u8]) -> __m256i {
    _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    pairs_i8(x, y, Q8_0, |xb| load32(xb, 2))
}

/// Q5_K: the plain body compiled for AVX2 (the compiler vectorizes
/// it; bit-exact), prefetching weights ahead. Q4_K and Q6_K: ggml's
/// AVX2 loops (`maddubs` pairs times the sub-block scale with `madd`,
/// exact integers; 8 f32 lanes per block with FMA, so they differ
/// from the reference by rounding).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    q4_k_rows_n::<1>([x], y)[0]
}

/// [`q4_k_q8_k`] of `R` weight rows, consecutive in the weights, against
/// one column: each row's arithmetic its own (row `r`'s bits at every
/// `R`), the column's blocks read once for the rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_rows_n<const R: usize>(xs: [&[u8]; R], y: &[u8]) -> [f32; R] {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut sumf = [0.0f32; R];
    let nb = (xs[0].len() / Q4_K).min(y.len() / Q8_K);
    for b in 0..nb {
        let yb = &y[b * Q8_K..(b + 1) * Q8_K];
        prefetch_rows::<R>(xs[0], b, Q4_K);
        for r in 0..R {
            let xb = &xs[r][b * Q4_K..(b + 1) * Q4_K];
            let (sc, sumi_m) = k4_scales_and_mins(xb, yb);
            let mut sumi = _mm256_setzero_si256();
            for h in 0..4 {
                // elements 64h..64h+32 (low nibbles), 64h+32..64h+64 (high)
                let q4 = load32(xb, 16 + 32 * h);
                let lo = _mm256_and_si256(q4, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                let p_lo = _mm256_maddubs_epi16(lo, load32(yb, 4 + 64 * h));
                let p_hi = _mm256_maddubs_epi16(hi, load32(yb, 4 + 64 * h + 32));
                let s_lo = _mm256_set1_epi16(sc[2 * h] as i16);
                let s_hi = _mm256_set1_epi16(sc[2 * h + 1] as i16);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s_lo, p_lo));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s_hi, p_hi));
            }
            let yd = f32_at(yb, 0);
            let dd = f16x2(xb, 0); // [d, dmin]
            let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi), acc[r]);
            sumf[r] -= dmin * yd * sumi_m as f32;
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = sumf[r] + hsum_f32(acc[r]);
    }
    out
}

/// Hints for step `b` of a loop over `R` rows, consecutive in the
/// weights from `x` (the first), that reads `step` bytes of each row a
/// step: every cache line of the `R * step` bytes that are [`PREFETCH`]
/// ahead of the rows' start plus `b` steps of them. The rows are read a
/// block of each at a time, so the hints walk the weights in order at
/// the pace they are read; hints at each row's own next page (`R`
/// interleaved streams) left the hardware's streamer idle and halved
/// the bandwidth out of cache. One row: one hint a step, as the one-row
/// kernels always gave.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch_rows<const R: usize>(x: &[u8], b: usize, step: usize) {
    let at = x.as_ptr().wrapping_add(PREFETCH + b * R * step);
    if R == 1 {
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
        return;
    }
    let mut line = 0;
    while line < R * step {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast());
        line += 64;
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    plain::q5_k_q8_k_body(x, y, |xb| prefetch(xb))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q2_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    plain::q2_k_q8_k_body(x, y, |xb| prefetch(xb))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q3_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    plain::q3_k_q8_k_body(x, y, |xb| prefetch(xb))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    q6_k_rows_n::<1>([x], y)[0]
}

/// [`q6_k_q8_k`] of `R` weight rows, as [`q4_k_rows_n`] is of Q4_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_rows_n<const R: usize>(xs: [&[u8]; R], y: &[u8]) -> [f32; R] {
    let thirty_two = _mm256_set1_epi8(32);
    let mut acc = [_mm256_setzero_ps(); R];
    let nb = (xs[0].len() / Q6_K).min(y.len() / Q8_K);
    for b in 0..nb {
        let yb = &y[b * Q8_K..(b + 1) * Q8_K];
        prefetch_rows::<R>(xs[0], b, Q6_K);
        for r in 0..R {
            let xb = &xs[r][b * Q6_K..(b + 1) * Q6_K];
            let scales: &[u8; 16] = arr(xb, 192);
            let mut sumi = _mm256_setzero_si256();
            for h in 0..2 {
                let q = q6_levels(xb, h);
                for (s, &qs) in q.iter().enumerate() {
                    let y8 = load32(yb, 4 + 128 * h + 32 * s);
                    // (q - 32) * y in i16 pairs, exact
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(qs, y8),
                        _mm256_maddubs_epi16(thirty_two, y8),
                    );
                    // the two 16-element groups 8h + 2s, 8h + 2s + 1
                    let sc = q6_scales(scales, 8 * h + 2 * s);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
                }
            }
            // d: the f16 at bytes 208..210, lane 1 of the pair at 206
            let d = _mm_cvtss_f32(_mm_movehdup_ps(f16x2(xb, 206))) * f32_at(yb, 0);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        out[r] = hsum_f32(acc[r]);
    }
    out
}

/// `out[r]` = weight row `r` of `w` (`row_bytes` each) · the column `y`
/// with `rows` on [`ROWS`] rows at a time, the rest with `one`: the
/// loop of a decode task's rows, inside the kernels' features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn rows_of(
    w: &[u8],
    row_bytes: usize,
    out: &mut [f32],
    rows: impl Fn([&[u8]; ROWS]) -> [f32; ROWS],
    one: impl Fn(&[u8]) -> f32,
) {
    let full = out.len() / ROWS * ROWS;
    for (g, o) in out[..full].chunks_exact_mut(ROWS).enumerate() {
        let at = g * ROWS * row_bytes;
        let mut xs: [&[u8]; ROWS] = [&[]; ROWS];
        for (i, x) in xs.iter_mut().enumerate() {
            *x = &w[at + i * row_bytes..at + (i + 1) * row_bytes];
        }
        o.copy_from_slice(&rows(xs));
    }
    for (r, o) in out.iter_mut().enumerate().skip(full) {
        *o = one(&w[r * row_bytes..(r + 1) * row_bytes]);
    }
}

/// Each one-row kernel over consecutive rows ([`DotRowsFn`]): `$name`
/// gives its one-row kernel's bits on every row, [`ROWS`] at a time.
macro_rules! rows_kernels {
    ($($name:ident = |$xs:ident, $y:ident| $body:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $name(w: &[u8], row_bytes: usize, y: &[u8], out: &mut [f32]) {
            let $y = y;
            rows_of(w, row_bytes, out, |$xs: [&[u8]; ROWS]| $body, |x| {
                let $xs = [x];
                $body[0]
            })
        }
    )*};
}

rows_kernels! {
    q4_0_q8_0_rows = |xs, y| pairs_i8_rows(xs, y, Q4_0, |xb| q4_0_levels(xb));
    q4_1_q8_1_rows = |xs, y| min_rows(xs, y, Q4_1, |xb| nibbles(xb, 4));
    q5_0_q8_0_rows = |xs, y| pairs_i8_rows(xs, y, Q5_0, |xb| q5_0_levels(xb));
    q5_1_q8_1_rows = |xs, y| min_rows(xs, y, Q5_1, |xb| q5_1_levels(xb));
    q8_0_q8_0_rows = |xs, y| pairs_i8_rows(xs, y, Q8_0, |xb| load32(xb, 2));
    q4_k_q8_k_rows = |xs, y| q4_k_rows_n(xs, y);
    q6_k_q8_k_rows = |xs, y| q6_k_rows_n(xs, y);
}
/// A Q4_K block's 8 six-bit scales, and `sum(bsums[j] * min[j / 2])`
/// with its 8 mins (exact): ggml's `utmp` unpacking of the 12 scale
/// bytes, the same values as `get_scale_min_k4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_scales_and_mins(xb: &[u8], yb: &[u8]) -> ([u8; 8], i32) {
    let (sc, mins) = k4_scales_mins(xb);
    (sc, k4_min_sum(mins, yb))
}

/// A Q4_K block's 8 scales, and its 8 mins as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_scales_mins(xb: &[u8]) -> ([u8; 8], __m128i) {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    let u = |at: usize| u32::from_le_bytes(*arr(xb, 4 + at));
    let (u0, u1, u2) = (u(0), u(4), u(8));
    let scales_lo = u0 & K1;
    let scales_hi = (u2 & K2) | (((u0 >> 6) & K3) << 4);
    let mins_lo = u1 & K1;
    let mins_hi = ((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4);
    let mut sc = [0u8; 8];
    sc[..4].copy_from_slice(&scales_lo.to_le_bytes());
    sc[4..].copy_from_slice(&scales_hi.to_le_bytes());
    let mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, mins_hi as i32, mins_lo as i32));
    (sc, mins)
}

/// `sum(bsums[j] * mins[j / 2])` of a Q8_K block `yb` (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k4_min_sum(mins: __m128i, yb: &[u8]) -> i32 {
    // bsums: 16 i16; pairs share a min.
    let bsums = load32(yb, 4 + 256);
    let pairs = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    let p = _mm_madd_epi16(pairs, mins);
    let p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0b01_00_11_10));
    let p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0b10_11_00_01));
    _mm_cvtsi128_si32(p)
}

/// [`q4_k_q8_k`] for `N` (up to [`COLS`]) activation rows: each weight block's
/// nibbles and scales are unpacked once; every column's float
/// operations are those of the one-column kernel, in its order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_k_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    q4_k_cols_with(x, ys, |acc, a, b| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    })
}

/// The body of [`q4_k_cols`]; `madd_acc(acc, a, b)` is
/// `acc + madd(a, b)` (i16 pairs into i32 lanes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_k_cols_with<const N: usize>(
    x: &[u8],
    ys: [&[u8]; N],
    madd_acc: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [f32; N] {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); N];
    let mut sumf = [0.0f32; N];
    for (b, xb) in x.chunks_exact(Q4_K).enumerate() {
        prefetch(xb);
        let yb = col_blocks(ys, b, Q8_K);
        let (sc, mins) = k4_scales_mins(xb);
        let mut sumi = [_mm256_setzero_si256(); N];
        for h in 0..4 {
            let q4 = load32(xb, 16 + 32 * h);
            let lo = _mm256_and_si256(q4, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            let s_lo = _mm256_set1_epi16(sc[2 * h] as i16);
            let s_hi = _mm256_set1_epi16(sc[2 * h + 1] as i16);
            for c in 0..N {
                let p_lo = _mm256_maddubs_epi16(lo, load32(yb[c], 4 + 64 * h));
                let p_hi = _mm256_maddubs_epi16(hi, load32(yb[c], 4 + 64 * h + 32));
                sumi[c] = madd_acc(sumi[c], s_lo, p_lo);
                sumi[c] = madd_acc(sumi[c], s_hi, p_hi);
            }
        }
        let dd = f16x2(xb, 0); // [d, dmin]
        let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
        for c in 0..N {
            let yd = f32_at(yb[c], 0);
            let sumi_m = k4_min_sum(mins, yb[c]);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            sumf[c] -= dmin * yd * sumi_m as f32;
        }
    }
    let mut out = [0.0f32; N];
    for c in 0..N {
        out[c] = sumf[c] + hsum_f32(acc[c]);
    }
    out
}

/// The 6-bit levels (0..64) of Q6_K elements `128h + 32s + l`
/// (s = 0..4) of block `xb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_levels(xb: &[u8], h: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let (qa, qb) = (load32(xb, 64 * h), load32(xb, 64 * h + 32));
    let qh = load32(xb, 128 + 32 * h);
    [
        _mm256_or_si256(
            _mm256_and_si256(qa, m4),
            _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(qb, m4),
            _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(qa, 4), m4),
            _mm256_and_si256(qh, m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
        ),
    ]
}

/// The sub-block scales of groups `g`, `g + 1` of a Q6_K block, as
/// i16 lanes (low half `g`, high half `g + 1`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_scales(scales: &[u8; 16], g: usize) -> __m256i {
    _mm256_set_m128i(
        _mm_set1_epi16(scales[g + 1] as i8 as i16),
        _mm_set1_epi16(scales[g] as i8 as i16),
    )
}

/// [`q6_k_q8_k`] for `N` (up to [`COLS`]) activation rows. The `- 32` offset is
/// taken out through the activation's block sums:
/// `sum(sc * (q - 32) * y) = sum(sc * q * y) - 32 * sum(sc * bsum)`,
/// the same exact integer per block (spread over the 8 lanes
/// differently, so the f32 sums round differently).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    q6_k_cols_with(x, ys, |acc, a, b| {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    })
}
/// The body of [`q6_k_cols`], `madd_acc` as in [`q4_k_cols_with`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6_k_cols_with<const N: usize>(
    x: &[u8],
    ys: [&[u8]; N],
    madd_acc: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [f32; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    for (b, xb) in x.chunks_exact(Q6_K).enumerate() {
        prefetch(xb);
        let yb = col_blocks(ys, b, Q8_K);
        let scales: &[u8; 16] = arr(xb, 192);
        // sc16: the 16 scales as i16, to meet the 16 bsums.
        let sc16 = _mm256_cvtepi8_epi16(load16(xb, 192));
        let mut sumi = [_mm256_setzero_si256(); N];
        for h in 0..2 {
            let q = q6_levels(xb, h);
            for (s, &qs) in q.iter().enumerate() {
                let sc = q6_scales(scales, 8 * h + 2 * s);
                for c in 0..N {
                    let p = _mm256_maddubs_epi16(qs, load32(yb[c], 4 + 128 * h + 32 * s));
                    sumi[c] = madd_acc(sumi[c], p, sc);
                }
            }
        }
        let d = _mm_cvtss_f32(_mm_movehdup_ps(f16x2(xb, 206)));
        for c in 0..N {
            // 32 * sum(sc * bsum), spread over the lanes before the sum
            let off = _mm256_madd_epi16(load32(yb[c], 4 + 256), sc16);
            let si = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off, 5));
            let dc = d * f32_at(yb[c], 0);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dc), _mm256_cvtepi32_ps(si), acc[c]);
        }
    }
    let mut out = [0.0f32; N];
    for c in 0..N {
        out[c] = hsum_f32(acc[c]);
    }
    out
}

/// Block `b` (`size` bytes) of each activation column.
#[inline(always)]
fn col_blocks<const N: usize>(ys: [&[u8]; N], b: usize, size: usize) -> [&[u8]; N] {
    // (a loop, not `array::from_fn`: its closure would stay out of line)
    let mut yb: [&[u8]; N] = [&[]; N];
    for c in 0..N {
        yb[c] = &ys[c][b * size..(b + 1) * size];
    }
    yb
}

/// A hint to fetch the weights [`PREFETCH`] bytes past `xb` (never
/// faults; past the end of the row it fetches the next row).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prefetch(xb: &[u8]) {
    _mm_prefetch::<_MM_HINT_T0>(xb.as_ptr().wrapping_add(PREFETCH).cast());
}

/// The multi-column loop of the 32-element formats: the weight
/// block's levels (`levels`, signed when `signed`, else unsigned)
/// are unpacked once and meet the block of each activation column
/// (`y_size` bytes, levels at byte `y_at`); with `min` the weight's
/// offset meets the activation's `s` (Q4_1/Q5_1: f16 at bytes 2..4 of
/// both blocks).
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn cols<const N: usize>(
    x: &[u8],
    ys: [&[u8]; N],
    x_size: usize,
    y_size: usize,
    y_at: usize,
    signed: bool,
    min: bool,
    levels: impl Fn(&[u8]) -> __m256i,
) -> [f32; N] {
    let mut acc = [_mm256_setzero_ps(); N];
    let mut summs = [_mm_setzero_ps(); N];
    for (b, xb) in x.chunks_exact(x_size).enumerate() {
        prefetch(xb);
        let xv = levels(xb);
        let ux = if signed { _mm256_sign_epi8(xv, xv) } else { xv };
        let dx = f16x2(xb, 0); // [d, m] (m only with `min`)
        for c in 0..N {
            let yb = &ys[c][b * y_size..(b + 1) * y_size];
            let yv = load32(yb, y_at);
            let yv = if signed { _mm256_sign_epi8(yv, xv) } else { yv };
            let p = _mm_mul_ps(dx, f16x2(yb, 0)); // [dx * dy, mx * sy]
            if min {
                summs[c] = _mm_add_ps(summs[c], p);
            }
            let d = _mm256_broadcastss_ps(p);
            acc[c] = _mm256_fmadd_ps(d, lanes_u8_i8(ux, yv), acc[c]);
        }
    }
    let mut out = [0.0f32; N];
    for c in 0..N {
        let s = hsum_f32(acc[c]);
        out[c] = if min {
            s + _mm_cvtss_f32(_mm_movehdup_ps(summs[c]))
        } else {
            s
        };
    }
    out
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_0_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    let eight = _mm256_set1_epi8(8);
    let levels = |xb: &[u8]| _mm256_sub_epi8(nibbles(xb, 2), eight);
    cols(x, ys, Q4_0, Q8_0, 2, true, false, levels)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_0_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    let sixteen = _mm256_set1_epi8(16);
    let levels =
        |xb: &[u8]| _mm256_sub_epi8(_mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2)), sixteen);
    cols(x, ys, Q5_0, Q8_0, 2, true, false, levels)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q8_0_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    cols(x, ys, Q8_0, Q8_0, 2, true, false, |xb| load32(xb, 2))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q4_1_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    cols(x, ys, Q4_1, Q8_1, 4, false, true, |xb| nibbles(xb, 4))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q5_1_cols<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
    let levels = |xb: &[u8]| _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4));
    cols(x, ys, Q5_1, Q8_1, 4, false, true, levels)
}
