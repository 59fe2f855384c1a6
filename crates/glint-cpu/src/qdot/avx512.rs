//! The prefill tiles — with AVX-512 VNNI's `vpdpbusd`, and on AVX2 with
//! `maddubs` + `madd` for the types whose levels cannot saturate it — the
//! decode rows (one weight row against one column prepared as the tiles'
//! are, with `vpdpbusd`), and the `vpdpwssd` versions of the K-quant
//! multi-column kernels.

#![allow(unsafe_code)]

use super::avx2::{prefetch_rows, q4_k_cols_with, q6_k_cols_with, rows_of};
use super::shared::*;
use super::*;
use std::arch::x86_64::*;

/// The K-quant multi-column kernels ([`q4_k_cols`](super::avx2::q4_k_cols),
/// [`q6_k_cols`](super::avx2::q6_k_cols)) with `vpdpwssd` for each
/// multiply-add of i16 pairs into i32 lanes (one instruction for `madd` +
/// `add`; the same exact integers), each twice: `$vnni` with the
/// instruction, `$model` with its lane model (AVX2 only, for the tests).
macro_rules! dpwssd_kernels {
    ($($vnni:ident, $model:ident = $body:ident;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
            $body(x, ys, |acc, a, b| _mm256_dpwssd_epi32(acc, a, b))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model<const N: usize>(x: &[u8], ys: [&[u8]; N]) -> [f32; N] {
            $body(x, ys, dpwssd_model)
        }
    )*};
}

dpwssd_kernels! {
    q4_k_cols_vnni, q4_k_cols_model = q4_k_cols_with;
    q6_k_cols_vnni, q6_k_cols_model = q6_k_cols_with;
}

/// [`emulated::dpwssd`] on vectors: `vpdpwssd` without VNNI.
pub(super) fn dpwssd_model(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    use bytemuck::cast;
    cast(emulated::dpwssd(cast(acc), cast(a), cast(b)))
}

/// [`emulated::dpbusd`] on vectors: `vpdpbusd` without VNNI.
pub(super) fn dpbusd_model(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    use bytemuck::cast;
    cast(emulated::dpbusd(cast(acc), cast(u), cast(s)))
}

// ---- AVX-512 VNNI prefill tiles (see `fast_tile`) ----

/// `vpdpbusd` on AVX2: `maddubs` sums each pair of u8·i8 products into an
/// i16 (saturating), `madd` with ones each pair of those into the i32
/// lane, added to `acc`. Exactly `vpdpbusd` where no pair sum leaves i16:
/// true of the AVX2 tiles' operands (weight levels `x + off` <= 31 against
/// Q8 levels in -127..=127: |2 · 31 · 127| = 7874) and of the column
/// preparation (`off` <= 128: 2 · 128 · 127 = 32512), not of Q8_0 weights
/// (`x + 128` up to 255), which keep the multi-column kernel on AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dpbusd_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(u, s);
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// [`prepare`] for the AVX2 tiles ([`dpbusd_avx2`]; the same bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prepare_avx2(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    prepare_with(ty, act, out, |acc, u, s| dpbusd_avx2(acc, u, s))
}

/// The offset that makes a type's weight levels unsigned, the byte
/// of its levels in a Q8 activation block, and whether it has a min.
fn tile_params(ty: GgmlType) -> (u8, usize, bool) {
    use GgmlType as T;
    match ty {
        T::Q4_0 => (8, 2, false),
        T::Q5_0 => (16, 2, false),
        T::Q8_0 => (128, 2, false),
        T::Q4_1 | T::Q5_1 => (0, 4, true),
        _ => (0, 2, false),
    }
}

/// One activation column into [`TILE_BLOCK`]-byte blocks (for `vpdpbusd`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn prepare(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    prepare_with(ty, act, out, |acc, u, s| _mm256_dpbusd_epi32(acc, u, s))
}

/// [`prepare`] with the lane model of `vpdpbusd` (AVX2 only).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn prepare_model(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    prepare_with(ty, act, out, dpbusd_model)
}

/// One activation column into [`TILE_BLOCK`]-byte blocks: levels,
/// `init = -off * lane sums of the levels`, `dy`, `sy` (Q8_1 only), and
/// the sum of `init`'s lanes (`-off * sum(y)`: where the lane kernels'
/// block sums start);
/// `dpbusd(acc, u, s)` is `vpdpbusd` or its model.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prepare_with(
    ty: GgmlType,
    act: &[u8],
    out: &mut [u8],
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    let (off, y_at, min) = tile_params(ty);
    let y_size = y_at + 32;
    let offv = _mm256_set1_epi8(off as i8);
    for (yb, ob) in act
        .chunks_exact(y_size)
        .zip(out.chunks_exact_mut(TILE_BLOCK))
    {
        let y = load32(yb, y_at);
        let lane_sums = dpbusd(_mm256_setzero_si256(), offv, y);
        let init = _mm256_sub_epi32(_mm256_setzero_si256(), lane_sums);
        let ob: &mut [u8; TILE_BLOCK] = (&mut ob[..]).try_into().expect("TILE_BLOCK bytes");
        ob[..32].copy_from_slice(&yb[y_at..y_at + 32]);
        let mut lanes = [0i32; 8];
        for (l, v) in lanes.iter_mut().enumerate() {
            *v = _mm256_extract_epi32_dyn(init, l);
        }
        for (l, v) in lanes.iter().enumerate() {
            ob[32 + 4 * l..36 + 4 * l].copy_from_slice(&v.to_le_bytes());
        }
        let ds = f16x2(yb, 0); // [d, s] for Q8_1; [d, first level bytes] for Q8_0
        let dy = _mm_cvtss_f32(ds);
        let sy = if min {
            _mm_cvtss_f32(_mm_movehdup_ps(ds))
        } else {
            0.0
        };
        ob[64..68].copy_from_slice(&dy.to_le_bytes());
        ob[68..72].copy_from_slice(&sy.to_le_bytes());
        let total = lanes.iter().fold(0i32, |a, &v| a.wrapping_add(v));
        ob[72..76].copy_from_slice(&total.to_le_bytes());
    }
}

/// Lane `l` of `v` (a runtime index).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn _mm256_extract_epi32_dyn(v: __m256i, l: usize) -> i32 {
    let mut a = [0i32; 8];
    // SAFETY: `a` is 32 writable bytes; storeu has no alignment need.
    unsafe { _mm256_storeu_si256(a.as_mut_ptr().cast(), v) };
    a[l & 7]
}

/// The tile loop, [`TILE`] weight rows against `N` prepared columns:
/// `block(b, xu, dx, mx)` gives block `b` of each row — its unsigned
/// levels (`x + off`), its `d` broadcast and, with `min`, its `m` (which
/// meets the column's `sy`); `dpbusd(acc, u, s)` is `vpdpbusd` or its
/// model. Compiled for AVX2 so the model's kernels run without VNNI;
/// inlined into the VNNI kernels, it is compiled with their features.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_core<const N: usize>(
    nb: usize,
    ys: [&[u8]; N],
    min: bool,
    block: impl Fn(usize, &mut [__m256i; TILE], &mut [__m256; TILE], &mut [f32; TILE]),
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; N]; TILE] {
    // No `array::from_fn` in here: it would stay out of line and spill
    // the tile.
    let mut acc = [[_mm256_setzero_ps(); N]; TILE];
    let mut summs = [[0.0f32; N]; TILE];
    let mut xu = [_mm256_setzero_si256(); TILE];
    let mut dx = [_mm256_setzero_ps(); TILE];
    let mut mx = [0.0f32; TILE];
    for b in 0..nb {
        block(b, &mut xu, &mut dx, &mut mx);
        for c in 0..N {
            let yb: &[u8; TILE_BLOCK] = arr(ys[c], b * TILE_BLOCK);
            let y = load32(yb, 0);
            let init = load32(yb, 32);
            let dy = _mm256_set1_ps(f32_at(yb, 64));
            let sy = f32_at(yb, 68);
            for r in 0..TILE {
                let l = dpbusd(init, xu[r], y);
                let d = _mm256_mul_ps(dx[r], dy);
                acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), acc[r][c]);
                if min {
                    summs[r][c] += mx[r] * sy;
                }
            }
        }
    }
    let mut out = [[0.0f32; N]; TILE];
    for r in 0..TILE {
        for c in 0..N {
            out[r][c] = hsum_f32(acc[r][c]) + if min { summs[r][c] } else { 0.0 };
        }
    }
    out
}

/// [`tile_core`] on the weight rows `xs` as stored: `levels(block)` gives
/// a block's unsigned levels; `x_size` bytes a block; with `min`, the
/// weight's `m` (f16 at bytes 2..4) meets the column's `sy`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<const N: usize>(
    xs: [&[u8]; TILE],
    ys: [&[u8]; N],
    x_size: usize,
    min: bool,
    levels: impl Fn(&[u8]) -> __m256i,
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; N]; TILE] {
    let nb = xs[0].len() / x_size;
    // The next tile's rows follow these in a weight matrix: a tile ahead.
    let ahead = TILE * xs[0].len();
    let block =
        |b: usize, xu: &mut [__m256i; TILE], dx: &mut [__m256; TILE], mx: &mut [f32; TILE]| {
            for r in 0..TILE {
                let xb = &xs[r][b * x_size..(b + 1) * x_size];
                // A hint to fetch the same block of the next tile's rows (never
                // faults); without it the tiles wait on memory once the weights
                // are out of cache.
                _mm_prefetch::<_MM_HINT_T0>(xb.as_ptr().wrapping_add(ahead).cast());
                xu[r] = levels(xb);
                let dm = f16x2(xb, 0); // [d, m]
                dx[r] = _mm256_broadcastss_ps(dm);
                if min {
                    mx[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
                }
            }
        };
    tile_core(nb, ys, min, block, dpbusd)
}

/// [`TILE`] weight rows unpacked by [`unpack`]: block `b` at `xp[b *
/// PRE_BLOCK..]`, the rows' levels (32 bytes each), then their `d`, then
/// their `m`, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_pre<const N: usize>(
    xp: &[u8],
    ys: [&[u8]; N],
    min: bool,
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[f32; N]; TILE] {
    let nb = xp.len() / PRE_BLOCK;
    let block =
        |b: usize, xu: &mut [__m256i; TILE], dx: &mut [__m256; TILE], mx: &mut [f32; TILE]| {
            let pb: &[u8; PRE_BLOCK] = arr(xp, b * PRE_BLOCK);
            for r in 0..TILE {
                xu[r] = load32(pb, 32 * r);
                dx[r] = _mm256_set1_ps(f32_at(pb, 32 * TILE + 4 * r));
                if min {
                    mx[r] = f32_at(pb, 36 * TILE + 4 * r);
                }
            }
        };
    tile_core(nb, ys, min, block, dpbusd)
}

/// [`TILE`] weight rows `xs` unpacked for [`tile_pre`] into `out`
/// ([`PRE_BLOCK`] bytes a block): what [`tile`] computes of each block
/// before it meets the columns (`levels`, `d` and `m` widened from f16:
/// exact), so the two give the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack(xs: [&[u8]; TILE], x_size: usize, levels: impl Fn(&[u8]) -> __m256i, out: &mut [u8]) {
    let nb = xs[0].len() / x_size;
    assert!(
        out.len() >= nb * PRE_BLOCK,
        "unpack: {nb} blocks into {} bytes",
        out.len()
    );
    for (b, pb) in out.chunks_exact_mut(PRE_BLOCK).take(nb).enumerate() {
        for r in 0..TILE {
            let xb = &xs[r][b * x_size..(b + 1) * x_size];
            let lv: &mut [u8; 32] = (&mut pb[32 * r..32 * (r + 1)]).try_into().expect("32");
            // SAFETY: `lv` is 32 writable bytes; storeu has no alignment need.
            unsafe { _mm256_storeu_si256(lv.as_mut_ptr().cast(), levels(xb)) };
            let dm = f16x2(xb, 0); // [d, m]
            let (d, m) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
            pb[32 * TILE + 4 * r..][..4].copy_from_slice(&d.to_le_bytes());
            pb[36 * TILE + 4 * r..][..4].copy_from_slice(&m.to_le_bytes());
        }
    }
}

/// Each tile kernel twice: `$vnni` with `vpdpbusd`, `$model` with its lane
/// model (AVX2 only, for the tests); `$pre`, `$pre_model` the same on rows
/// unpacked by `$unpack`; `$levels` gives a weight block's levels made
/// unsigned (`x + off`, see [`tile_params`]).
macro_rules! tile_kernels {
    ($($vnni:ident, $model:ident, $pre:ident, $pre_model:ident, $unpack:ident:
        $x_size:expr, $min:expr, |$xb:ident| $levels:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni<const N: usize>(xs: [&[u8]; TILE], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            tile(xs, ys, $x_size, $min, |$xb: &[u8]| $levels, dpbusd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model<const N: usize>(xs: [&[u8]; TILE], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            tile(xs, ys, $x_size, $min, |$xb: &[u8]| $levels, dpbusd_model)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $pre<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            tile_pre(xp, ys, $min, dpbusd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $pre_model<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            tile_pre(xp, ys, $min, dpbusd_model)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $unpack(xs: [&[u8]; TILE], out: &mut [u8]) {
            unpack(xs, $x_size, |$xb: &[u8]| $levels, out)
        }
    )*};
}

/// The AVX2 tile kernels: [`tile`] with `vpdpbusd` as [`dpbusd_avx2`],
/// so each result is the VNNI tile's (and the multi-column kernel's), bit
/// for bit; `$pre` the same on rows unpacked by the VNNI tile's `unpack`.
/// Only Q4_0 and Q5_0: measured on an AVX2 EPYC (Zen 3, one
/// thread, `matvec_bench 5 512 1024 1024`), G multiply-adds/s from the
/// multi-column kernel to the tile: Q4_0 22.4 -> 26.7, Q5_0 20.6 -> 25.8
/// (4 alternating runs each); Q4_1 25.1 -> 20.7 and Q5_1 21.4 -> 17.3
/// (medians of 6) lose — their multi-column kernels need no sign step and
/// the tile's min term is scalar — so they keep the multi-column kernels.
macro_rules! avx2_tile_kernels {
    ($($name:ident, $pre:ident: $x_size:expr, |$xb:ident| $levels:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $name<const N: usize>(xs: [&[u8]; TILE], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            let dpbusd = |acc, u, s| dpbusd_avx2(acc, u, s);
            tile(xs, ys, $x_size, false, |$xb: &[u8]| $levels, dpbusd)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $pre<const N: usize>(xp: &[u8], ys: [&[u8]; N]) -> [[f32; N]; TILE] {
            let dpbusd = |acc, u, s| dpbusd_avx2(acc, u, s);
            tile_pre(xp, ys, false, dpbusd)
        }
    )*};
}

avx2_tile_kernels! {
    q4_0_tile_avx2, q4_0_tile_avx2_pre: Q4_0, |xb| nibbles(xb, 2);
    q5_0_tile_avx2, q5_0_tile_avx2_pre: Q5_0, |xb| _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2));
}

tile_kernels! {
    q4_0_tile, q4_0_tile_model, q4_0_tile_pre, q4_0_tile_pre_model, q4_0_unpack:
        Q4_0, false, |xb| nibbles(xb, 2);
    q4_1_tile, q4_1_tile_model, q4_1_tile_pre, q4_1_tile_pre_model, q4_1_unpack:
        Q4_1, true, |xb| nibbles(xb, 4);
    q5_0_tile, q5_0_tile_model, q5_0_tile_pre, q5_0_tile_pre_model, q5_0_unpack:
        Q5_0, false, |xb| _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2));
    q5_1_tile, q5_1_tile_model, q5_1_tile_pre, q5_1_tile_pre_model, q5_1_unpack:
        Q5_1, true, |xb| _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4));
    q8_0_tile, q8_0_tile_model, q8_0_tile_pre, q8_0_tile_pre_model, q8_0_unpack:
        Q8_0, false, |xb| _mm256_xor_si256(load32(xb, 2), _mm256_set1_epi8(-128));
}

/// One weight block's lanes against a prepared activation block `yb`
/// ([`TILE_BLOCK`] bytes): `dpbusd(init, levels, y)`, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_lanes(
    xu: __m256i,
    yb: &[u8; TILE_BLOCK],
    dpbusd: &impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> __m256 {
    _mm256_cvtepi32_ps(dpbusd(load32(yb, 32), xu, load32(yb, 0)))
}

/// `[dx * dy, mx * sy]` of a weight block (f16 `d`, `m` at bytes 0..4)
/// and a prepared activation block (f32 `dy`, `sy` at bytes 64..72): the
/// f32 products of the AVX2 kernels' `_mm_mul_ps` of the blocks' pairs.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_scales(xb: &[u8], yb: &[u8; TILE_BLOCK]) -> __m128 {
    let dys = _mm_castpd_ps(_mm_set_sd(f64::from_le_bytes(*arr(yb, 64))));
    _mm_mul_ps(f16x2(xb, 0), dys)
}

/// `dx * dy` in lane 0, as [`row_scales`] (types without a min).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn row_scale(xb: &[u8], yb: &[u8; TILE_BLOCK]) -> __m128 {
    _mm_mul_ss(f16x2(xb, 0), _mm_set_ss(f32_at(yb, 64)))
}

/// The one-column loop of the 32-element types (decode): `R` weight rows
/// (`x_size` bytes a block) against one column prepared by [`prepare`],
/// each row's arithmetic its own, so row `r`'s result is the same at
/// every `R` (one row a call, or four reading each column block once).
/// Each block's lanes are `dpbusd(init, levels, y)`, the same exact
/// integers as the AVX2 kernels' `maddubs` + `madd` of the signed levels,
/// and the float steps after them are those kernels', in their order:
/// one accumulator, the blocks in order (`avx2::pairs_i8`: ggml's
/// order), and with a min the `mx * sy` terms summed apart
/// (`avx2::q4_1_q8_1`).
/// So each result is the AVX2 kernel's, bit for bit, with fewer integer
/// instructions a block (one `vpdpbusd` for `maddubs` + `madd`, and for
/// the symmetric types for the two `sign`s as well).
/// `dpbusd(acc, u, s)` is `vpdpbusd` or its model.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<const R: usize>(
    xs: [&[u8]; R],
    y: &[u8],
    x_size: usize,
    min: bool,
    levels: impl Fn(&[u8]) -> __m256i,
    dpbusd: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [f32; R] {
    let nb = xs[0].len() / x_size;
    let block = |r: usize, b: usize| &xs[r][b * x_size..(b + 1) * x_size];
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0.0f32; R];
    for b in 0..nb {
        let yb: &[u8; TILE_BLOCK] = arr(y, b * TILE_BLOCK);
        prefetch_rows::<R>(xs[0], b, x_size);
        for r in 0..R {
            let xb = block(r, b);
            let p = if min {
                let p = row_scales(xb, yb);
                summs[r] += _mm_cvtss_f32(_mm_movehdup_ps(p));
                p
            } else {
                row_scale(xb, yb)
            };
            let l = block_lanes(levels(xb), yb, &dpbusd);
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), l, acc[r]);
        }
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let s = hsum_f32(acc[r]);
        out[r] = if min { s + summs[r] } else { s };
    }
    out
}

/// Q5_0's unsigned levels (`x + 16`: the nibble plus 16 where the block's
/// fifth bit is set) with one masked add of AVX-512 BW, where the AVX2
/// kernels spread the bits with a shuffle, an or and a compare.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn q5_levels_bw(xb: &[u8], nibbles_at: usize, bits_at: usize) -> __m256i {
    let bits = u32::from_le_bytes(*arr(xb, bits_at));
    let nib = nibbles(xb, nibbles_at);
    _mm256_mask_add_epi8(nib, bits, nib, _mm256_set1_epi8(16))
}

/// Each one-column kernel twice: `$vnni` with `vpdpbusd` (and `$bw`'s
/// levels, AVX-512 BW), `$model` with its lane model and `$levels` (AVX2
/// only, for the tests); both read a column prepared by [`prepare`]
/// (with [`prepare_model`] for the model: the same bytes). And each over
/// consecutive rows (`$vnni_rows`, `$model_rows`, `avx2::rows_of`): every
/// row's bits are the one-row kernel's.
macro_rules! row_kernels {
    ($($vnni:ident, $model:ident, $vnni_rows:ident, $model_rows:ident:
        $x_size:expr, $min:expr, |$xb:ident| $bw:expr, $levels:expr;)*) => {$(
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni(x: &[u8], y: &[u8]) -> f32 {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            rows::<1>([x], y, $x_size, $min, |$xb: &[u8]| $bw, dpbusd)[0]
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model(x: &[u8], y: &[u8]) -> f32 {
            rows::<1>([x], y, $x_size, $min, |$xb: &[u8]| $levels, dpbusd_model)[0]
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn $vnni_rows(w: &[u8], row_bytes: usize, y: &[u8], out: &mut [f32]) {
            let dpbusd = |acc, u, s| _mm256_dpbusd_epi32(acc, u, s);
            let levels = |$xb: &[u8]| $bw;
            rows_of(
                w,
                row_bytes,
                out,
                |xs| rows::<ROWS>(xs, y, $x_size, $min, levels, dpbusd),
                |x| rows::<1>([x], y, $x_size, $min, levels, dpbusd)[0],
            )
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $model_rows(w: &[u8], row_bytes: usize, y: &[u8], out: &mut [f32]) {
            let levels = |$xb: &[u8]| $levels;
            rows_of(
                w,
                row_bytes,
                out,
                |xs| rows::<ROWS>(xs, y, $x_size, $min, levels, dpbusd_model),
                |x| rows::<1>([x], y, $x_size, $min, levels, dpbusd_model)[0],
            )
        }
    )*};
}

row_kernels! {
    q4_0_row, q4_0_row_model, q4_0_rows, q4_0_rows_model: Q4_0, false, |xb| nibbles(xb, 2), nibbles(xb, 2);
    q4_1_row, q4_1_row_model, q4_1_rows, q4_1_rows_model: Q4_1, true, |xb| nibbles(xb, 4), nibbles(xb, 4);
    q5_0_row, q5_0_row_model, q5_0_rows, q5_0_rows_model: Q5_0, false, |xb| q5_levels_bw(xb, 6, 2),
        _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2));
    q5_1_row, q5_1_row_model, q5_1_rows, q5_1_rows_model: Q5_1, true, |xb| q5_levels_bw(xb, 8, 4),
        _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4));
    q8_0_row, q8_0_row_model, q8_0_rows, q8_0_rows_model: Q8_0, false,
        |xb| _mm256_xor_si256(load32(xb, 2), _mm256_set1_epi8(-128)),
        _mm256_xor_si256(load32(xb, 2), _mm256_set1_epi8(-128));
}
