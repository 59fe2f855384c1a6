//! The lane kernels ([`super::fast_lanes`]): [`LANES`] weight rows
//! interleaved so that each i32 lane of a vector is one row. Eight
//! `vpdpbusd` a block (one per four-byte group, the column's group
//! broadcast) leave each lane holding its row's whole block sum, exact;
//! then one convert and the reference's float steps serve all eight rows,
//! where the tiles ([`super::avx512`]) spend a convert, a multiply and an
//! FMA on every row. The float steps are ggml's reference loops' in their
//! order (`glint_quant::vec_dot`, [`super::plain`]), so each result is the
//! plain kernel's, bit for bit.

#![allow(unsafe_code)]

use super::avx512::{dpbusd_avx2, dpbusd_model};
use super::shared::*;
use super::*;
use std::arch::x86_64::*;

/// Rows `v[r]` (32 bytes each: eight groups of four) into groups: `out[g]`
/// holds group `g` of rows 0..8, row `r` in lane `r`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose(v: [__m256i; LANES]) -> [__m256i; LANES] {
    // Pairs of rows, lanes [a0 b0 a1 b1 | a4 b4 a5 b5] and the 2, 3, 6, 7 half.
    let t: [__m256i; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[i / 2 * 2], v[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    // Four rows, groups [g | g + 4]: s[4q + j] for rows 4q..4q + 4, g = j.
    let s: [__m256i; 8] = std::array::from_fn(|i| {
        let (q, j) = (i / 4, i % 4);
        let (a, b) = (t[4 * q + j / 2], t[4 * q + 2 + j / 2]);
        if j % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    std::array::from_fn(|g| {
        let (lo, hi) = (s[g % 4], s[4 + g % 4]);
        if g < 4 {
            _mm256_permute2x128_si256::<0x20>(lo, hi)
        } else {
            _mm256_permute2x128_si256::<0x31>(lo, hi)
        }
    })
}

/// [`LANES`] weight rows `xs` (`x_size` bytes a block) into `out`,
/// [`LANE_BLOCK`] bytes a block: the rows' unsigned levels (`levels`,
/// `x + off`) as eight groups of four bytes, each group the rows' in
/// lane order, then each row's `d`, then (with `min`; else zeros) its `m`,
/// widened from f16 (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack(
    xs: [&[u8]; LANES],
    x_size: usize,
    min: bool,
    levels: impl Fn(&[u8]) -> __m256i,
    out: &mut [u8],
) {
    let nb = xs[0].len() / x_size;
    assert!(
        out.len() >= nb * LANE_BLOCK,
        "unpack: {nb} blocks into {} bytes",
        out.len()
    );
    for (b, pb) in out.chunks_exact_mut(LANE_BLOCK).take(nb).enumerate() {
        let mut v = [_mm256_setzero_si256(); LANES];
        let mut d = [0f32; LANES];
        let mut m = [0f32; LANES];
        for r in 0..LANES {
            let xb = &xs[r][b * x_size..(b + 1) * x_size];
            v[r] = levels(xb);
            let dm = f16x2(xb, 0); // [d, m]
            d[r] = _mm_cvtss_f32(dm);
            if min {
                m[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
            }
        }
        for (g, t) in transpose(v).into_iter().enumerate() {
            let o: &mut [u8; 32] = (&mut pb[32 * g..32 * (g + 1)]).try_into().expect("32");
            // SAFETY: `o` is 32 writable bytes; storeu has no alignment need.
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), t) };
        }
        for r in 0..LANES {
            pb[256 + 4 * r..][..4].copy_from_slice(&d[r].to_le_bytes());
            pb[288 + 4 * r..][..4].copy_from_slice(&m[r].to_le_bytes());
        }
    }
}

/// Eight f32 from `b[at..at + 32]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load_ps(b: &[u8], at: usize) -> __m256 {
    let b: &[u8; 32] = arr(b, at);
    // SAFETY: `b` is 32 readable bytes; loadu has no alignment need.
    unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }
}

/// The little-endian i32 at `b[at..at + 4]`.
#[inline(always)]
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(*arr(b, at))
}

/// The lane loop: [`LANES`] rows unpacked by [`unpack`] (`xp`, whole
/// blocks) against `N` columns prepared by `prepare` ([`TILE_BLOCK`]
/// bytes a block): `out[c][r]`. A block's sum starts at the column's
/// `-off * sum(y)` and gathers the groups in two chains (even, odd: half
/// the latency), exact; `term(sum, dx, dy, mx, sy)` is the type's float
/// step in the reference's order, added to the row's sum of terms.
/// `dpbusd(acc, u, s)` is `vpdpbusd`, its model, or `maddubs` + `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_core<const N: usize>(
    xp: &[u8],
    ys: [&[u8]; N],
    term: impl Fn(__m256, __m256, __m256, __m256, __m256) -> __m256,
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; LANES]; N] {
    let nb = xp.len() / LANE_BLOCK;
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let pb: &[u8; LANE_BLOCK] = arr(xp, b * LANE_BLOCK);
        let dx = load_ps(pb, 256);
        let mx = load_ps(pb, 288);
        for c in 0..N {
            let yb: &[u8; TILE_BLOCK] = arr(ys[c], b * TILE_BLOCK);
            let y = |g: usize| _mm256_set1_epi32(i32_at(yb, 4 * g));
            let mut even = _mm256_set1_epi32(i32_at(yb, 72));
            let mut odd = _mm256_setzero_si256();
            for g in (0..8).step_by(2) {
                even = dpbusd(even, load32(pb, 32 * g), y(g));
                odd = dpbusd(odd, load32(pb, 32 * (g + 1)), y(g + 1));
            }
            let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(even, odd));
            let dy = _mm256_set1_ps(f32_at(yb, 64));
            let sy = _mm256_set1_ps(f32_at(yb, 68));
            acc[c] = _mm256_add_ps(acc[c], term(sum, dx, dy, mx, sy));
        }
    }
    let mut out = [[0f32; LANES]; N];
    for c in 0..N {
        // SAFETY: `out[c]` is 8 writable f32; storeu has no alignment need.
        unsafe { _mm256_storeu_ps(out[c].as_mut_ptr(), acc[c]) };
    }
    out
}

/// Each type's lane kernels: `$vnni` with `vpdpbusd`, `$model` with its
/// lane model (AVX2 only, for the tests), `$avx2` (where given) with
/// `maddubs` + `madd` (exact: the levels `x + off` stay <= 31), and
/// `$unpack`; `$term` is the reference's float step of a block
/// (`plain.rs`: the same operations in the same order).
macro_rules! lane_kernels {
    ($($vnni:ident, $model:ident, [$($avx2:ident)?], $unpack:ident: $x_size:expr, $min:expr,
        |$xb:ident| $levels:expr, |$s:ident, $dx:ident, $dy:ident, $mx:ident, $sy:ident| $term:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            lanes_core(xp, ys, |$s, $dx, $dy, $mx, $sy| $term, dpbusd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            lanes_core(xp, ys, |$s, $dx, $dy, $mx, $sy| $term, dpbusd_model)
        }

        $(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $avx2<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            let dpbusd = |acc, u, s| dpbusd_avx2(acc, u, s);
            lanes_core(xp, ys, |$s, $dx, $dy, $mx, $sy| $term, dpbusd)
        }
        )?

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $unpack(xs: [&[u8]; LANES], out: &mut [u8]) {
            unpack(xs, $x_size, $min, |$xb: &[u8]| $levels, out)
        }
    )*};
}

lane_kernels! {
    // sumi * dx * dy
    q4_0_lanes, q4_0_lanes_model, [q4_0_lanes_avx2], q4_0_lane_unpack: Q4_0, false,
        |xb| nibbles(xb, 2),
        |s, dx, dy, _mx, _sy| _mm256_mul_ps(_mm256_mul_ps(s, dx), dy);
    // dx * dy * sumi + mx * sy
    q4_1_lanes, q4_1_lanes_model, [q4_1_lanes_avx2], q4_1_lane_unpack: Q4_1, true,
        |xb| nibbles(xb, 4),
        |s, dx, dy, mx, sy| _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(dx, dy), s), _mm256_mul_ps(mx, sy));
    // dx * dy * sumi
    q5_0_lanes, q5_0_lanes_model, [q5_0_lanes_avx2], q5_0_lane_unpack: Q5_0, false,
        |xb| _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2)),
        |s, dx, dy, _mx, _sy| _mm256_mul_ps(_mm256_mul_ps(dx, dy), s);
    // dx * dy * sumi + mx * sy
    q5_1_lanes, q5_1_lanes_model, [q5_1_lanes_avx2], q5_1_lane_unpack: Q5_1, true,
        |xb| _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4)),
        |s, dx, dy, mx, sy| _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(dx, dy), s), _mm256_mul_ps(mx, sy));
    // sumi * (dx * dy); levels x + 128 reach 255: no AVX2 kernel (maddubs would saturate)
    q8_0_lanes, q8_0_lanes_model, [], q8_0_lane_unpack: Q8_0, false,
        |xb| _mm256_xor_si256(load32(xb, 2), _mm256_set1_epi8(-128)),
        |s, dx, dy, _mx, _sy| _mm256_mul_ps(s, _mm256_mul_ps(dx, dy));
}
