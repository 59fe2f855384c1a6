//! The lane kernels ([`super::fast_lanes`]): [`LANES`] weight rows
//! interleaved so that each i32 lane of a vector is one row. Eight
//! `vpdpbusd` a block (one per four-byte group, the column's group
//! broadcast) leave each lane holding its row's whole block sum, exact;
//! then one convert and the reference's float steps serve all eight rows,
//! where the tiles ([`super::avx512`]) spend a convert, a multiply and an
//! FMA on every row. The float steps are ggml's reference loops' in their
//! order (`glint_quant::vec_dot`, [`super::plain`]), so each result is the
//! plain kernel's, bit for bit.
//!
//! The K-quants (Q2_K..Q6_K) the same way a sub-block at a time: its
//! exact sum times the row's integer scale (`vpmulld`) into the
//! super-block's exact sum, the mins' term (or the levels' offset) exact
//! too (`vpdpwssd` on the activations' `bsums`), then per super-block
//! `(d * dy) * sum` and `- (dmin * dy) * mins` ([`KMode`]): for Q2_K
//! ggml's reference order, bit for bit; for Q3_K to Q6_K the AMX tiles'
//! numbers ([`crate::amx`]), which differ from ggml's eight f32 lanes by
//! rounding only.

#![allow(unsafe_code)]

use super::avx2::q6_levels;
use super::avx512::{dpbusd_avx2, dpbusd_model, dpwssd_model};
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

// ---- K-quants: super-blocks of 256 ----

/// Byte offsets in one unpacked super-block of [`LANES`] rows
/// ([`K_LANE_BLOCK`] bytes): levels `[64 groups][LANES][4]` u8 (element
/// `4q + i` of row `r` at `32 q + 4 r + i`), scales `[16][LANES]` i32 (one
/// per sub-block: 8 of 32 elements, or Q6_K's 16 of 16), pairs
/// `[8][LANES]` i32 (Q4_K/Q5_K: the mins of sub-blocks `2p`, `2p + 1` as
/// the low and high i16; Q6_K: the scales of its sub-blocks `2p`, `2p +
/// 1`), `d` and `dmin` `[LANES]` f32.
const K_SCALES: usize = 2048;
const K_PAIRS: usize = K_SCALES + 16 * 32;
const K_D: usize = K_PAIRS + 8 * 32;
const K_DMIN: usize = K_D + 32;

/// [`LANES`] K-quant rows `xs` (`x_size` bytes a super-block) into `out`,
/// [`K_LANE_BLOCK`] bytes a super-block: `levels(xb, v)` gives elements
/// `32 v..32 v + 32` of a block, unsigned; `scales(xb)` its sub-blocks'
/// integer scales and the values paired at `K_PAIRS` (mins or scales;
/// zeros past the type's); `dd(xb)` its `d` and `dmin`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_unpack(
    xs: [&[u8]; LANES],
    x_size: usize,
    levels: impl Fn(&[u8], usize) -> __m256i,
    scales: impl Fn(&[u8]) -> ([i32; 16], [i32; 16]),
    dd: impl Fn(&[u8]) -> (f32, f32),
    out: &mut [u8],
) {
    let nb = xs[0].len() / x_size;
    assert!(
        out.len() >= nb * K_LANE_BLOCK,
        "k_unpack: {nb} blocks into {} bytes",
        out.len()
    );
    for (b, pb) in out.chunks_exact_mut(K_LANE_BLOCK).take(nb).enumerate() {
        let xb: [&[u8]; LANES] = std::array::from_fn(|r| &xs[r][b * x_size..(b + 1) * x_size]);
        for v in 0..8 {
            let rows: [__m256i; LANES] = std::array::from_fn(|r| levels(xb[r], v));
            for (g, t) in transpose(rows).into_iter().enumerate() {
                let at = 32 * (8 * v + g);
                let o: &mut [u8; 32] = (&mut pb[at..at + 32]).try_into().expect("32");
                // SAFETY: `o` is 32 writable bytes; storeu has no alignment need.
                unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), t) };
            }
        }
        for (r, xb) in xb.into_iter().enumerate() {
            let (sc, paired) = scales(xb);
            for (j, s) in sc.iter().enumerate() {
                pb[K_SCALES + 32 * j + 4 * r..][..4].copy_from_slice(&s.to_le_bytes());
            }
            for p in 0..8 {
                let (lo, hi) = (paired[2 * p] as u16 as u32, paired[2 * p + 1] as u16 as u32);
                let pair = lo | (hi << 16);
                pb[K_PAIRS + 32 * p + 4 * r..][..4].copy_from_slice(&pair.to_le_bytes());
            }
            let (d, dmin) = dd(xb);
            pb[K_D + 4 * r..][..4].copy_from_slice(&d.to_le_bytes());
            pb[K_DMIN + 4 * r..][..4].copy_from_slice(&dmin.to_le_bytes());
        }
    }
}

/// How a K-quant's lane loop finishes a super-block after the scaled
/// sub-block sums (`sum`): the pairs at `K_PAIRS` meet the activations'
/// `bsums`, exactly, into `paired`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KMode {
    /// Q4_K, Q5_K: `paired` is the mins' term (min pairs against the
    /// `bsums` of 32); `acc + (d * dy) * sum - (dmin * dy) * paired`, the
    /// AMX tiles' order.
    Mins32,
    /// Q2_K: `paired` is the mins' term (min pairs against the `bsums` of
    /// 16); `acc + ((dy * d) * sum - (dy * dmin) * paired)`, ggml's
    /// reference order (the levels' sums are exact there too).
    Mins16,
    /// Q6_K (`x + 32`), Q3_K (`x + 4`): the levels' offset, `2^shift`,
    /// taken off the sum as `paired << shift` (scale pairs against the
    /// `bsums` of 16); `acc + (d * dy) * sum`, the AMX tiles' order.
    Offset(i32),
}

/// The K-quant lane loop: [`LANES`] rows unpacked by [`k_unpack`] against
/// `N` Q8_K activation rows (read as quantized: `d` f32, levels, `bsums`
/// of 16): `out[c][r]`. Sub-blocks of `sub` elements (32, or 16): each
/// sub-block's sum (two chains) times the row's scale into the
/// super-block's sum, exact; then `mode`'s exact pair term and float steps.
/// `dpbusd`, `dpwssd`: the instructions, their models, or their AVX2
/// spellings.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_core<const N: usize>(
    xp: &[u8],
    ys: [&[u8]; N],
    sub: usize,
    mode: KMode,
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
    dpwssd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; LANES]; N] {
    const Q8_K: usize = super::Q8_K;
    let nb = xp.len() / K_LANE_BLOCK;
    let gps = sub / 4; // groups of four a sub-block
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let pb: &[u8; K_LANE_BLOCK] = arr(xp, b * K_LANE_BLOCK);
        let d = load_ps(pb, K_D);
        let dmin = load_ps(pb, K_DMIN);
        for c in 0..N {
            let yb: &[u8; Q8_K] = arr(ys[c], b * Q8_K);
            let y = |q: usize| _mm256_set1_epi32(i32_at(yb, 4 + 4 * q));
            let mut total = _mm256_setzero_si256();
            for j in 0..QK_K_ELEMS / sub {
                let mut even = _mm256_setzero_si256();
                let mut odd = _mm256_setzero_si256();
                for g in (0..gps).step_by(2) {
                    let q = j * gps + g;
                    even = dpbusd(even, load32(pb, 32 * q), y(q));
                    odd = dpbusd(odd, load32(pb, 32 * (q + 1)), y(q + 1));
                }
                let isum = _mm256_add_epi32(even, odd);
                let scaled = _mm256_mullo_epi32(isum, load32(pb, K_SCALES + 32 * j));
                total = _mm256_add_epi32(total, scaled);
            }
            let mut paired = _mm256_setzero_si256();
            if mode == KMode::Mins32 {
                // bsums of 32: [16] i16 added in pairs, then as i32 pairs.
                let bs = _mm_hadd_epi16(load16(yb, 260), load16(yb, 276));
                let bs = _mm256_castsi128_si256(bs);
                for p in 0..4 {
                    let bp = _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(p as i32));
                    paired = dpwssd(paired, load32(pb, K_PAIRS + 32 * p), bp);
                }
            } else {
                // bsums of 16, as i32 pairs.
                for p in 0..8 {
                    let bp = _mm256_set1_epi32(i32_at(yb, 260 + 4 * p));
                    paired = dpwssd(paired, load32(pb, K_PAIRS + 32 * p), bp);
                }
            }
            let dy = _mm256_set1_ps(f32_at(yb, 0));
            acc[c] = match mode {
                KMode::Mins32 => {
                    let a = _mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(total));
                    let m = _mm256_mul_ps(_mm256_mul_ps(dmin, dy), _mm256_cvtepi32_ps(paired));
                    _mm256_sub_ps(_mm256_add_ps(acc[c], a), m)
                }
                KMode::Mins16 => {
                    let a = _mm256_mul_ps(_mm256_mul_ps(dy, d), _mm256_cvtepi32_ps(total));
                    let m = _mm256_mul_ps(_mm256_mul_ps(dy, dmin), _mm256_cvtepi32_ps(paired));
                    _mm256_add_ps(acc[c], _mm256_sub_ps(a, m))
                }
                KMode::Offset(shift) => {
                    let off = _mm256_sll_epi32(paired, _mm_cvtsi32_si128(shift));
                    let total = _mm256_sub_epi32(total, off);
                    let a = _mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(total));
                    _mm256_add_ps(acc[c], a)
                }
            };
        }
    }
    let mut out = [[0f32; LANES]; N];
    for c in 0..N {
        // SAFETY: `out[c]` is 8 writable f32; storeu has no alignment need.
        unsafe { _mm256_storeu_ps(out[c].as_mut_ptr(), acc[c]) };
    }
    out
}

/// Sixteen bytes from `b[at..at + 16]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn load16(b: &[u8], at: usize) -> __m128i {
    let b: &[u8; 16] = arr(b, at);
    // SAFETY: `b` is 16 readable bytes; loadu has no alignment need.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Elements of a K-quant super-block.
const QK_K_ELEMS: usize = 256;

/// Q4_K's levels `32 v..32 v + 32` (0..16): nibbles of `qs` at 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_levels(xb: &[u8], v: usize) -> __m256i {
    k_nibbles(xb, 16, v)
}

/// The nibbles of `qs` (128 bytes at `at`) that are elements `32 v..`:
/// the low ones of `qs[32 (v / 2)..]` for even `v`, else the high ones.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_nibbles(xb: &[u8], at: usize, v: usize) -> __m256i {
    let q = load32(xb, at + 32 * (v / 2));
    let q = if v % 2 == 0 {
        q
    } else {
        _mm256_srli_epi16(q, 4)
    };
    _mm256_and_si256(q, _mm256_set1_epi8(0x0f))
}

/// Q5_K's levels `32 v..32 v + 32` (0..32): nibbles of `qs` at 48, plus
/// 16 where bit `v` of `qh[l]` (at 16) is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_k_levels(xb: &[u8], v: usize) -> __m256i {
    let qh = _mm256_srl_epi16(load32(xb, 16), _mm_cvtsi32_si128(v as i32));
    let bit = _mm256_and_si256(qh, _mm256_set1_epi8(1));
    _mm256_or_si256(k_nibbles(xb, 48, v), _mm256_slli_epi16(bit, 4))
}

/// Q6_K's levels `32 v..32 v + 32` as stored (0..64: `x + 32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_levels(xb: &[u8], v: usize) -> __m256i {
    q6_levels(xb, v / 4)[v % 4]
}

/// The 2-bit fields (0..4) of `qs` (64 bytes at `at`) that are elements
/// `32 v..32 v + 32`: bits `2 (v % 4)..` of `qs[32 (v / 4)..]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_crumbs(xb: &[u8], at: usize, v: usize) -> __m256i {
    let q = load32(xb, at + 32 * (v / 4));
    let q = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (v % 4) as i32));
    _mm256_and_si256(q, _mm256_set1_epi8(3))
}

/// Q2_K's levels `32 v..32 v + 32` (0..4): the fields of `qs` at 16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q2_k_levels(xb: &[u8], v: usize) -> __m256i {
    k_crumbs(xb, 16, v)
}

/// Q3_K's levels `32 v..32 v + 32` as stored (0..8: `x + 4`): the fields
/// of `qs` at 32, plus 4 where bit `v` of `hmask[l]` (at 0) is set.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q3_k_levels(xb: &[u8], v: usize) -> __m256i {
    let hm = _mm256_srl_epi16(load32(xb, 0), _mm_cvtsi32_si128(v as i32));
    let bit = _mm256_and_si256(hm, _mm256_set1_epi8(1));
    _mm256_or_si256(k_crumbs(xb, 32, v), _mm256_slli_epi16(bit, 2))
}

/// Q2_K's 16 scales (low nibbles) and mins (high nibbles).
fn q2_k_scales(xb: &[u8]) -> ([i32; 16], [i32; 16]) {
    (
        std::array::from_fn(|j| i32::from(xb[j] & 0x0f)),
        std::array::from_fn(|j| i32::from(xb[j] >> 4)),
    )
}

/// Q3_K's 16 signed 6-bit scales (`- 32`), paired too (for the offset's term).
fn q3_k_scales(xb: &[u8]) -> ([i32; 16], [i32; 16]) {
    let s: &[u8; 12] = arr(xb, 96);
    let sc = std::array::from_fn(|i| {
        let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        i32::from(low | (high << 4)) - 32
    });
    (sc, sc)
}

/// Q4_K's and Q5_K's 6-bit scales and mins (`get_scale_min_k4`).
fn k4_scales(xb: &[u8]) -> ([i32; 16], [i32; 16]) {
    let q: &[u8; 12] = arr(xb, 4);
    let (mut sc, mut mins) = ([0i32; 16], [0i32; 16]);
    for j in 0..8 {
        let (s, m) = get_scale_min_k4(j, q);
        (sc[j], mins[j]) = (i32::from(s), i32::from(m));
    }
    (sc, mins)
}

/// Q6_K's 16 signed scales (at 192), paired too (for the offset's term).
fn q6_k_scales(xb: &[u8]) -> ([i32; 16], [i32; 16]) {
    let sc = std::array::from_fn(|j| i32::from(xb[192 + j] as i8));
    (sc, sc)
}

/// Each K-quant's lane kernels, as [`lane_kernels`]: `$vnni` (`vpdpbusd`,
/// `vpdpwssd`), `$model` (their lane models), `$avx2` (`maddubs` + `madd`,
/// exact for levels up to 63, and `madd` + `add`), and `$unpack`.
macro_rules! k_lane_kernels {
    ($($vnni:ident, $model:ident, $avx2:ident, $unpack:ident:
        $x_size:expr, sub $sub:expr, $mode:expr,
        $levels:expr, $scales:expr, |$xb:ident| $dd:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            let dpwssd = |acc, a, b| _mm256_dpwssd_epi32(acc, a, b);
            k_core(xp, ys, $sub, $mode, dpbusd, dpwssd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            k_core(xp, ys, $sub, $mode, dpbusd_model, dpwssd_model)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $avx2<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N] {
            let dpbusd = |acc, u, s| dpbusd_avx2(acc, u, s);
            let dpwssd = |acc, a, b| _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
            k_core(xp, ys, $sub, $mode, dpbusd, dpwssd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $unpack(xs: [&[u8]; LANES], out: &mut [u8]) {
            k_unpack(xs, $x_size, |xb, v| $levels(xb, v), $scales, |$xb: &[u8]| $dd, out)
        }
    )*};
}

k_lane_kernels! {
    q2_k_lanes, q2_k_lanes_model, q2_k_lanes_avx2, q2_k_lane_unpack:
        Q2_K, sub 16, KMode::Mins16, q2_k_levels, q2_k_scales,
        |xb| (f16_at(xb, 80), f16_at(xb, 82));
    q3_k_lanes, q3_k_lanes_model, q3_k_lanes_avx2, q3_k_lane_unpack:
        Q3_K, sub 16, KMode::Offset(2), q3_k_levels, q3_k_scales,
        |xb| (f16_at(xb, 108), 0.0);
    q4_k_lanes, q4_k_lanes_model, q4_k_lanes_avx2, q4_k_lane_unpack:
        Q4_K, sub 32, KMode::Mins32, q4_k_levels, k4_scales,
        |xb| (f16_at(xb, 0), f16_at(xb, 2));
    q5_k_lanes, q5_k_lanes_model, q5_k_lanes_avx2, q5_k_lane_unpack:
        Q5_K, sub 32, KMode::Mins32, q5_k_levels, k4_scales,
        |xb| (f16_at(xb, 0), f16_at(xb, 2));
    q6_k_lanes, q6_k_lanes_model, q6_k_lanes_avx2, q6_k_lane_unpack:
        Q6_K, sub 16, KMode::Offset(5), q6_k_levels, q6_k_scales,
        |xb| (f16_at(xb, 208), 0.0);
}
