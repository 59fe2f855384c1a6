//! Fast integer dots of one quantized weight row with one row of quantized
//! activations: the same numbers as `glint_quant::vec_dot` (ggml's
//! `ggml_vec_dot_*_generic`), computed whole blocks at a time.
//!
//! Each type has a plain twin ([`plain_dot`]) written over fixed-size block
//! arrays so the compiler can vectorize it without bounds checks, and — on
//! x86_64 with AVX2, FMA and F16C, detected once at run time — an AVX2
//! version ([`avx2_dot`]). The plain kernels keep ggml's integer sums and
//! ggml's float operations in ggml's order, so they agree bit for bit with
//! `glint_quant::vec_dot`. The AVX2 Q5_K kernel is the plain one compiled
//! for AVX2 (also bit-exact); the other AVX2 kernels are ggml's own AVX2
//! loops, with exact integer sums but f32 lanes summed in a different order,
//! so they differ by rounding only. The tests hold every kernel to the
//! reference with a tolerance named per type. [`fast_dot_cols`] is the
//! prefill variant: one weight row against several activation columns.
//!
//! Callers guarantee that `x` and `y` hold the same number of whole blocks
//! (`mul_mat_ggml` checks the row lengths once per call). A short row is
//! never read out of bounds: the one-column kernels truncate it, the
//! multi-column and tile kernels panic on the bounds-checked slice.

use glint_backend::GgmlType;
use glint_quant::kquants::get_scale_min_k4;
use half::f16;

/// A dot of one weight row (`x`) with one activation row (`y`, the weight
/// type's `vec_dot_type`).
pub type DotFn = fn(&[u8], &[u8]) -> f32;

/// One weight row dotted with [`COLS`] activation rows at once (prefill):
/// the weight block is unpacked once for all of them. Each column's result
/// is what [`avx2_dot`] gives for it, up to f32 rounding.
pub type DotColsFn = fn(&[u8], [&[u8]; COLS]) -> [f32; COLS];

/// Activation columns per [`DotColsFn`] call.
pub const COLS: usize = 4;

/// The multi-column kernel for `ty` on this cpu, or `None`: use [`fast_dot`]
/// once per column.
pub fn fast_dot_cols(ty: GgmlType) -> Option<DotColsFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2() {
            return simd::dot_cols(ty);
        }
    }
    let _ = ty;
    None
}

/// The AVX2-only multi-column kernels (no VNNI), or `None` where the cpu
/// lacks AVX2: what [`fast_dot_cols`] gives on AVX2 cpus without AVX-512
/// VNNI (the tests hold the two equal).
pub fn avx2_dot_cols(ty: GgmlType) -> Option<DotColsFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2() {
            return simd::dot_cols_avx2(ty);
        }
    }
    let _ = ty;
    None
}

/// Weight rows and activation columns of one [`TileFn`] call.
pub const TILE: usize = 4;

/// Bytes of one prepared activation block ([`prepare_tile_col`]):
/// levels `[i8; 32]`, `init: [i32; 8]`, `dy: f32`, `sy: f32`.
pub const TILE_BLOCK: usize = 72;

/// [`TILE`] weight rows against [`TILE`] prepared activation columns:
/// `out[r][c]`. Each result is bit-identical to [`fast_dot_cols`]'s.
pub type TileFn = fn([&[u8]; TILE], [&[u8]; TILE]) -> [[f32; TILE]; TILE];

/// The prefill tile kernel for `ty` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) where the
/// cpu has AVX-512 VNNI (with VL and BW), else `None`.
///
/// The weight levels are made unsigned (`x + off`: 8, 16 or 128; 0 for the
/// types with a min) and meet the activation levels in `vpdpbusd`, which
/// sums four u8·i8 products into each i32 lane exactly; the lanes start at
/// `init = -off * (the sum of the lane's four activation levels)`, so each
/// lane ends at exactly the `sum(x * y)` of the AVX2 kernels' `maddubs` +
/// `madd`, and the float steps after it are theirs.
pub fn fast_tile(ty: GgmlType) -> Option<TileFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_vnni() {
            return simd::tile(ty);
        }
    }
    let _ = ty;
    None
}

/// One activation column (Q8_0 blocks for Q4_0/Q5_0/Q8_0 weights, Q8_1 for
/// Q4_1/Q5_1) prepared for [`fast_tile`]'s kernel of `ty`: `out` is
/// [`TILE_BLOCK`] bytes per block. Only call it where [`fast_tile`] gave a
/// kernel for `ty`; it does nothing otherwise.
pub fn prepare_tile_col(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_vnni() && simd::tile(ty).is_some() {
            simd::prepare(ty, act, out);
        }
    }
    let _ = (ty, act, out);
}

/// Whether this cpu has AVX2, FMA and F16C (detected once).
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        simd::has_avx2()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The fastest dot for `ty` on this cpu, or `None`: use `glint_quant::vec_dot`.
pub fn fast_dot(ty: GgmlType) -> Option<DotFn> {
    avx2_dot(ty).or_else(|| plain_dot(ty))
}

/// The portable kernels.
pub fn plain_dot(ty: GgmlType) -> Option<DotFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => plain::q4_0_q8_0,
        T::Q4_1 => plain::q4_1_q8_1,
        T::Q5_0 => plain::q5_0_q8_0,
        T::Q5_1 => plain::q5_1_q8_1,
        T::Q8_0 => plain::q8_0_q8_0,
        T::Q4_K => plain::q4_k_q8_k,
        T::Q5_K => plain::q5_k_q8_k,
        T::Q6_K => plain::q6_k_q8_k,
        _ => return None,
    })
}

/// The AVX2 kernels, or `None` where the cpu lacks AVX2, FMA or F16C (or is not x86_64).
pub fn avx2_dot(ty: GgmlType) -> Option<DotFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_avx2() {
            return simd::dot(ty);
        }
    }
    let _ = ty;
    None
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline(always)]
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `&b[at..at + N]` as an array: lets the kernels index without bounds checks.
#[inline(always)]
fn arr<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N].try_into().expect("slice of N bytes")
}

// Block sizes in bytes.
const Q4_0: usize = 18; // d: f16, qs: [u8; 16]
const Q4_1: usize = 20; // d, m: f16, qs: [u8; 16]
const Q5_0: usize = 22; // d: f16, qh: [u8; 4], qs: [u8; 16]
const Q5_1: usize = 24; // d, m: f16, qh: [u8; 4], qs: [u8; 16]
const Q8_0: usize = 34; // d: f16, qs: [i8; 32]
const Q8_1: usize = 36; // d, s: f16, qs: [i8; 32]
const Q4_K: usize = 144; // d, dmin: f16, scales: [u8; 12], qs: [u8; 128]
const Q5_K: usize = 176; // d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]
const Q6_K: usize = 210; // ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16
const Q8_K: usize = 292; // d: f32, qs: [i8; 256], bsums: [i16; 16]

/// The plain kernels. Bodies are `#[inline(always)]` so the AVX2 module can
/// compile the same code for AVX2.
pub mod plain {
    use super::*;

    /// The 32 signed levels of a Q8 block at `at`.
    #[inline(always)]
    fn q8(b: &[u8], at: usize) -> [i32; 32] {
        let q: &[u8; 32] = arr(b, at);
        std::array::from_fn(|j| q[j] as i8 as i32)
    }

    /// `sum(x[j] * y[j])` over a 32-element block, the weight levels given
    /// as (low nibble, high nibble) of `qs` plus `bias`.
    #[inline(always)]
    fn nibble_dot(qs: &[u8; 16], qh: u32, bias: i32, y: &[i32; 32]) -> i32 {
        let mut sumi = 0i32;
        for j in 0..16 {
            let h0 = (((qh >> j) & 1) << 4) as i32;
            let h1 = (((qh >> (j + 16)) & 1) << 4) as i32;
            sumi += (((qs[j] & 0x0f) as i32 | h0) - bias) * y[j];
            sumi += (((qs[j] >> 4) as i32 | h1) - bias) * y[j + 16];
        }
        sumi
    }

    #[inline(always)]
    pub(super) fn q4_0_q8_0_body(x: &[u8], y: &[u8]) -> f32 {
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q4_0).zip(y.chunks_exact(Q8_0)) {
            let sumi = nibble_dot(arr(xb, 2), 0, 8, &q8(yb, 2));
            sumf += sumi as f32 * f16_at(xb, 0) * f16_at(yb, 0);
        }
        sumf
    }

    #[inline(always)]
    pub(super) fn q4_1_q8_1_body(x: &[u8], y: &[u8]) -> f32 {
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q4_1).zip(y.chunks_exact(Q8_1)) {
            let sumi = nibble_dot(arr(xb, 4), 0, 0, &q8(yb, 4));
            sumf += (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32 + f16_at(xb, 2) * f16_at(yb, 2);
        }
        sumf
    }

    #[inline(always)]
    pub(super) fn q5_0_q8_0_body(x: &[u8], y: &[u8]) -> f32 {
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q5_0).zip(y.chunks_exact(Q8_0)) {
            let qh = u32::from_le_bytes(*arr(xb, 2));
            let sumi = nibble_dot(arr(xb, 6), qh, 16, &q8(yb, 2));
            sumf += (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32;
        }
        sumf
    }

    #[inline(always)]
    pub(super) fn q5_1_q8_1_body(x: &[u8], y: &[u8]) -> f32 {
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q5_1).zip(y.chunks_exact(Q8_1)) {
            let qh = u32::from_le_bytes(*arr(xb, 4));
            let sumi = nibble_dot(arr(xb, 8), qh, 0, &q8(yb, 4));
            sumf += (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32 + f16_at(xb, 2) * f16_at(yb, 2);
        }
        sumf
    }

    #[inline(always)]
    pub(super) fn q8_0_q8_0_body(x: &[u8], y: &[u8]) -> f32 {
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q8_0).zip(y.chunks_exact(Q8_0)) {
            let (xq, yq) = (q8(xb, 2), q8(yb, 2));
            let mut sumi = 0i32;
            for j in 0..32 {
                sumi += xq[j] * yq[j];
            }
            sumf += sumi as f32 * (f16_at(xb, 0) * f16_at(yb, 0));
        }
        sumf
    }

    /// ggml's K-quant lanes: `aux[l] += sc(g) * a[i] * q8[i]` for the
    /// elements `i = 16 g + l` and `16 g + 8 + l` of each 16-element group.
    #[inline(always)]
    fn lanes(a: &[i8; 256], q8: &[u8; 256], sc: &[i32; 16]) -> [i32; 8] {
        let mut aux = [0i32; 8];
        for g in 0..16 {
            for l in 0..8 {
                let p0 = a[16 * g + l] as i32 * q8[16 * g + l] as i8 as i32;
                let p1 = a[16 * g + 8 + l] as i32 * q8[16 * g + 8 + l] as i8 as i32;
                aux[l] += sc[g] * (p0 + p1);
            }
        }
        aux
    }

    /// Q4_K/Q5_K after the levels: lanes plus the mins through `bsums`.
    #[inline(always)]
    fn k4_tail(sums: &mut [f32; 8], sumf: &mut f32, a: &[i8; 256], xb: &[u8], yb: &[u8]) {
        let scales: &[u8; 12] = arr(xb, 4);
        let sc_m: [(u8, u8); 8] = std::array::from_fn(|j| get_scale_min_k4(j, scales));
        let sc: [i32; 16] = std::array::from_fn(|g| sc_m[g / 2].0 as i32);
        let bsums: &[u8; 32] = arr(yb, 4 + 256);
        let mut sumi = 0i32;
        for j in 0..16 {
            let b = i16::from_le_bytes([bsums[2 * j], bsums[2 * j + 1]]) as i32;
            sumi += b * sc_m[j / 2].1 as i32;
        }
        let yd = f32_at(yb, 0);
        let aux = lanes(a, arr(yb, 4), &sc);
        let d = f16_at(xb, 0) * yd;
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
        *sumf -= f16_at(xb, 2) * yd * sumi as f32;
    }

    #[inline(always)]
    pub(super) fn q4_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
        let mut sums = [0.0f32; 8];
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q4_K).zip(y.chunks_exact(Q8_K)) {
            prefetch(xb);
            let qs: &[u8; 128] = arr(xb, 16);
            let mut a = [0i8; 256];
            for h in 0..4 {
                for l in 0..32 {
                    a[64 * h + l] = (qs[32 * h + l] & 0x0f) as i8;
                    a[64 * h + 32 + l] = (qs[32 * h + l] >> 4) as i8;
                }
            }
            k4_tail(&mut sums, &mut sumf, &a, xb, yb);
        }
        sums.iter().fold(sumf, |acc, &v| acc + v)
    }

    #[inline(always)]
    pub(super) fn q5_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
        let mut sums = [0.0f32; 8];
        let mut sumf = 0.0f32;
        for (xb, yb) in x.chunks_exact(Q5_K).zip(y.chunks_exact(Q8_K)) {
            prefetch(xb);
            let qh: &[u8; 32] = arr(xb, 16);
            let qs: &[u8; 128] = arr(xb, 48);
            let mut a = [0i8; 256];
            for h in 0..4 {
                for l in 0..32 {
                    let h0 = ((qh[l] >> (2 * h)) & 1) << 4;
                    let h1 = ((qh[l] >> (2 * h + 1)) & 1) << 4;
                    a[64 * h + l] = ((qs[32 * h + l] & 0x0f) | h0) as i8;
                    a[64 * h + 32 + l] = ((qs[32 * h + l] >> 4) | h1) as i8;
                }
            }
            k4_tail(&mut sums, &mut sumf, &a, xb, yb);
        }
        sums.iter().fold(sumf, |acc, &v| acc + v)
    }

    #[inline(always)]
    pub(super) fn q6_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
        let mut sums = [0.0f32; 8];
        for (xb, yb) in x.chunks_exact(Q6_K).zip(y.chunks_exact(Q8_K)) {
            prefetch(xb);
            let ql: &[u8; 128] = arr(xb, 0);
            let qh: &[u8; 64] = arr(xb, 128);
            let scales: &[u8; 16] = arr(xb, 192);
            let mut a = [0i8; 256];
            for h in 0..2 {
                for l in 0..32 {
                    let (lo, hi, b) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
                    a[128 * h + l] = ((lo & 0x0f) | ((b & 3) << 4)) as i8 - 32;
                    a[128 * h + 32 + l] = ((hi & 0x0f) | (((b >> 2) & 3) << 4)) as i8 - 32;
                    a[128 * h + 64 + l] = ((lo >> 4) | (((b >> 4) & 3) << 4)) as i8 - 32;
                    a[128 * h + 96 + l] = ((hi >> 4) | (((b >> 6) & 3) << 4)) as i8 - 32;
                }
            }
            let sc: [i32; 16] = std::array::from_fn(|g| scales[g] as i8 as i32);
            let aux = lanes(&a, arr(yb, 4), &sc);
            let d = f16_at(xb, 208) * f32_at(yb, 0);
            for l in 0..8 {
                sums[l] += d * aux[l] as f32;
            }
        }
        sums.iter().fold(0.0f32, |acc, &v| acc + v)
    }

    pub fn q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
        q4_0_q8_0_body(x, y)
    }
    pub fn q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
        q4_1_q8_1_body(x, y)
    }
    pub fn q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
        q5_0_q8_0_body(x, y)
    }
    pub fn q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
        q5_1_q8_1_body(x, y)
    }
    pub fn q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
        q8_0_q8_0_body(x, y)
    }
    pub fn q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
        q4_k_q8_k_body(x, y, |_| {})
    }
    pub fn q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
        q5_k_q8_k_body(x, y, |_| {})
    }
    pub fn q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
        q6_k_q8_k_body(x, y, |_| {})
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(crate) mod simd {
    use super::*;
    use std::sync::OnceLock;

    pub(super) fn has_avx2() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
        })
    }

    /// Only called after [`has_avx2`] said yes.
    pub(super) fn dot(ty: GgmlType) -> Option<DotFn> {
        use GgmlType as T;
        Some(match ty {
            T::Q4_0 => q4_0_q8_0,
            T::Q4_1 => q4_1_q8_1,
            T::Q5_0 => q5_0_q8_0,
            T::Q5_1 => q5_1_q8_1,
            T::Q8_0 => q8_0_q8_0,
            T::Q4_K => q4_k_q8_k,
            T::Q5_K => q5_k_q8_k,
            T::Q6_K => q6_k_q8_k,
            _ => return None,
        })
    }

    pub(super) fn has_vnni() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            has_avx2()
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni")
        })
    }

    /// Only called after [`has_vnni`] said yes.
    pub(super) fn tile(ty: GgmlType) -> Option<TileFn> {
        use GgmlType as T;
        Some(match ty {
            T::Q4_0 => q4_0_tile,
            T::Q4_1 => q4_1_tile,
            T::Q5_0 => q5_0_tile,
            T::Q5_1 => q5_1_tile,
            T::Q8_0 => q8_0_tile,
            _ => return None,
        })
    }

    /// Only called after [`has_vnni`] said yes.
    pub(super) fn prepare(ty: GgmlType, act: &[u8], out: &mut [u8]) {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        fn tf(ty: GgmlType, act: &[u8], out: &mut [u8]) {
            kernels::prepare(ty, act, out)
        }
        // SAFETY: reachable only after `has_vnni()`.
        unsafe { tf(ty, act, out) }
    }

    macro_rules! entry_tile {
        ($name:ident, $body:path) => {
            fn $name(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
                #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
                fn tf(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
                    $body(xs, ys)
                }
                // SAFETY: reachable only through `tile`, after `has_vnni()`.
                unsafe { tf(xs, ys) }
            }
        };
    }
    entry_tile!(q4_0_tile, kernels::q4_0_tile);

    macro_rules! entry_cols_vnni {
        ($name:ident, $body:path) => {
            fn $name(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
                fn tf(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                    $body(x, ys)
                }
                // SAFETY: reachable only through `dot_cols`, after `has_vnni()`.
                unsafe { tf(x, ys) }
            }
        };
    }
    entry_cols_vnni!(q4_k_cols_vnni, kernels::q4_k_cols_vnni);
    entry_cols_vnni!(q6_k_cols_vnni, kernels::q6_k_cols_vnni);
    entry_tile!(q4_1_tile, kernels::q4_1_tile);
    entry_tile!(q5_0_tile, kernels::q5_0_tile);
    entry_tile!(q5_1_tile, kernels::q5_1_tile);
    entry_tile!(q8_0_tile, kernels::q8_0_tile);

    /// Only called after [`has_avx2`] said yes.
    pub(super) fn dot_cols(ty: GgmlType) -> Option<DotColsFn> {
        use GgmlType as T;
        Some(match ty {
            T::Q4_K if has_vnni() => q4_k_cols_vnni,
            T::Q6_K if has_vnni() => q6_k_cols_vnni,
            _ => return dot_cols_avx2(ty),
        })
    }

    /// Only called after [`has_avx2`] said yes.
    pub(super) fn dot_cols_avx2(ty: GgmlType) -> Option<DotColsFn> {
        use GgmlType as T;
        Some(match ty {
            T::Q4_0 => q4_0_cols,
            T::Q4_1 => q4_1_cols,
            T::Q5_0 => q5_0_cols,
            T::Q5_1 => q5_1_cols,
            T::Q8_0 => q8_0_cols,
            T::Q4_K => q4_k_cols,
            T::Q6_K => q6_k_cols,
            _ => return None,
        })
    }

    /// As `entry!`, for the multi-column kernels (handed out by `dot_cols`).
    macro_rules! entry_cols {
        ($name:ident, $body:path) => {
            fn $name(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                #[target_feature(enable = "avx2,fma,f16c")]
                fn tf(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                    $body(x, ys)
                }
                // SAFETY: reachable only through `dot_cols`, after `has_avx2()`.
                unsafe { tf(x, ys) }
            }
        };
    }
    entry_cols!(q4_0_cols, kernels::q4_0_cols);
    entry_cols!(q4_1_cols, kernels::q4_1_cols);
    entry_cols!(q5_0_cols, kernels::q5_0_cols);
    entry_cols!(q5_1_cols, kernels::q5_1_cols);
    entry_cols!(q8_0_cols, kernels::q8_0_cols);
    entry_cols!(q4_k_cols, kernels::q4_k_cols);
    entry_cols!(q6_k_cols, kernels::q6_k_cols);

    /// A safe entry for each AVX2 kernel; they are handed out only by
    /// [`dot`], which runs only after [`has_avx2`] confirmed AVX2 and FMA.
    macro_rules! entry {
        ($name:ident, $body:path) => {
            fn $name(x: &[u8], y: &[u8]) -> f32 {
                #[target_feature(enable = "avx2,fma,f16c")]
                fn tf(x: &[u8], y: &[u8]) -> f32 {
                    $body(x, y)
                }
                // SAFETY: reachable only through `dot`, after `has_avx2()`.
                unsafe { tf(x, y) }
            }
        };
    }
    entry!(q4_0_q8_0, kernels::q4_0_q8_0);
    entry!(q4_1_q8_1, kernels::q4_1_q8_1);
    entry!(q5_0_q8_0, kernels::q5_0_q8_0);
    entry!(q5_1_q8_1, kernels::q5_1_q8_1);
    entry!(q8_0_q8_0, kernels::q8_0_q8_0);
    entry!(q4_k_q8_k, kernels::q4_k_q8_k);
    entry!(q5_k_q8_k, kernels::q5_k_q8_k);
    entry!(q6_k_q8_k, kernels::q6_k_q8_k);

    /// The kernels with AVX2 intrinsics: each block's integer products in
    /// registers (`maddubs` + `madd`, exact: no i16 pair can saturate for
    /// levels in -127..=127, which ggml's quantizers keep to).
    pub(crate) mod kernels {
        use super::super::*;
        use std::arch::x86_64::*;

        /// One 32-byte vector from `b[at..at + 32]`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn load32(b: &[u8], at: usize) -> __m256i {
            let b: &[u8; 32] = arr(b, at);
            // SAFETY: `b` is 32 readable bytes; loadu has no alignment need.
            unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
        }

        /// One 16-byte vector from `b[at..at + 16]`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn load16(b: &[u8], at: usize) -> __m128i {
            let b: &[u8; 16] = arr(b, at);
            // SAFETY: `b` is 16 readable bytes; loadu has no alignment need.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        }

        /// The 32 4-bit levels of `b[at..at + 16]` in element order: low
        /// nibbles (elements 0..16), then high nibbles (16..32).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn nibbles(b: &[u8], at: usize) -> __m256i {
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
        fn fifth_bits(b: &[u8], at: usize) -> __m256i {
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
        fn f16x2(b: &[u8], at: usize) -> __m128 {
            let h = u32::from_le_bytes(*arr(b, at));
            _mm_cvtph_ps(_mm_cvtsi32_si128(h as i32))
        }

        /// How far ahead of the weight block being read to prefetch (bytes).
        const PREFETCH: usize = 1024;

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

        /// The sum of `v`'s 8 lanes: halves folded (4, 2, 1).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) fn hsum_f32(v: __m256) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }

        // The kernels below are ggml's AVX2 loops (`ggml_vec_dot_*_q8_*` in
        // arch/x86/quants.c): block integer sums stay exact, but each block
        // adds `d * lanes` into 8 f32 lanes with FMA and the lanes are summed
        // at the end, so they differ from the reference loop by float
        // rounding only (the tests name the tolerance).

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
            let eight = _mm256_set1_epi8(8);
            let levels = |xb: &[u8]| _mm256_sub_epi8(nibbles(xb, 2), eight);
            pairs_i8(x, y, Q4_0, levels)
        }

        /// The loop shared by the symmetric formats (Q4_0, Q5_0, Q8_0):
        /// `levels(block)` gives a weight block's 32 signed levels, its
        /// activation block (Q8_0) has its levels at byte `2`. Two blocks
        /// an iteration into two accumulators (ggml sums them at the end).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn pairs_i8(x: &[u8], y: &[u8], size: usize, levels: impl Fn(&[u8]) -> __m256i) -> f32 {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut xs = x.chunks_exact(2 * size);
            let mut ys = y.chunks_exact(2 * Q8_0);
            for (xb, yb) in (&mut xs).zip(&mut ys) {
                prefetch(xb);
                let (d0, d1) = dd2(xb, yb, size, Q8_0);
                let l0 = lanes_i8_i8(levels(xb), load32(yb, 2));
                let l1 = lanes_i8_i8(levels(&xb[size..]), load32(yb, Q8_0 + 2));
                acc0 = _mm256_fmadd_ps(d0, l0, acc0);
                acc1 = _mm256_fmadd_ps(d1, l1, acc1);
            }
            let (xr, yr) = (xs.remainder(), ys.remainder());
            for (xb, yb) in xr.chunks_exact(size).zip(yr.chunks_exact(Q8_0)) {
                let l = lanes_i8_i8(levels(xb), load32(yb, 2));
                acc0 = _mm256_fmadd_ps(dd(xb, yb), l, acc0);
            }
            hsum_f32(_mm256_add_ps(acc0, acc1))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summs = 0.0f32;
            for (xb, yb) in x.chunks_exact(Q4_1).zip(y.chunks_exact(Q8_1)) {
                prefetch(xb);
                // [dx * dy, mx * sy]
                let p = _mm_mul_ps(f16x2(xb, 0), f16x2(yb, 0));
                summs += _mm_cvtss_f32(_mm_movehdup_ps(p));
                let d = _mm256_broadcastss_ps(p);
                acc = _mm256_fmadd_ps(d, lanes_u8_i8(nibbles(xb, 4), load32(yb, 4)), acc);
            }
            hsum_f32(acc) + summs
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
            let sixteen = _mm256_set1_epi8(16);
            let levels = |xb: &[u8]| {
                _mm256_sub_epi8(_mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2)), sixteen)
            };
            pairs_i8(x, y, Q5_0, levels)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summs = 0.0f32;
            for (xb, yb) in x.chunks_exact(Q5_1).zip(y.chunks_exact(Q8_1)) {
                prefetch(xb);
                // [dx * dy, mx * sy]
                let p = _mm_mul_ps(f16x2(xb, 0), f16x2(yb, 0));
                summs += _mm_cvtss_f32(_mm_movehdup_ps(p));
                let d = _mm256_broadcastss_ps(p);
                let xv = _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4));
                acc = _mm256_fmadd_ps(d, lanes_u8_i8(xv, load32(yb, 4)), acc);
            }
            hsum_f32(acc) + summs
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
            let m4 = _mm256_set1_epi8(0x0f);
            let mut acc = _mm256_setzero_ps();
            let mut sumf = 0.0f32;
            for (xb, yb) in x.chunks_exact(Q4_K).zip(y.chunks_exact(Q8_K)) {
                prefetch(xb);
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
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d * yd), _mm256_cvtepi32_ps(sumi), acc);
                sumf -= dmin * yd * sumi_m as f32;
            }
            sumf + hsum_f32(acc)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
            plain::q5_k_q8_k_body(x, y, |xb| prefetch(xb))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
            let m4 = _mm256_set1_epi8(0x0f);
            let m30 = _mm256_set1_epi8(0x30);
            let thirty_two = _mm256_set1_epi8(32);
            let mut acc = _mm256_setzero_ps();
            for (xb, yb) in x.chunks_exact(Q6_K).zip(y.chunks_exact(Q8_K)) {
                prefetch(xb);
                let scales: &[u8; 16] = arr(xb, 192);
                let mut sumi = _mm256_setzero_si256();
                for h in 0..2 {
                    let (qa, qb) = (load32(xb, 64 * h), load32(xb, 64 * h + 32));
                    let qh = load32(xb, 128 + 32 * h);
                    // the 6-bit levels (0..64) of elements 128h + 32s + l
                    let q = [
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
                    ];
                    for (s, &qs) in q.iter().enumerate() {
                        let y8 = load32(yb, 4 + 128 * h + 32 * s);
                        // (q - 32) * y in i16 pairs, exact
                        let p = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(qs, y8),
                            _mm256_maddubs_epi16(thirty_two, y8),
                        );
                        let g = 8 * h + 2 * s; // the two 16-element groups
                        let sc = _mm256_set_m128i(
                            _mm_set1_epi16(scales[g + 1] as i8 as i16),
                            _mm_set1_epi16(scales[g] as i8 as i16),
                        );
                        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
                    }
                }
                // d: the f16 at bytes 208..210, lane 1 of the pair at 206
                let d = _mm_cvtss_f32(_mm_movehdup_ps(f16x2(xb, 206))) * f32_at(yb, 0);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
            }
            hsum_f32(acc)
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

        /// [`q4_k_q8_k`] for [`COLS`] activation rows: each weight block's
        /// nibbles and scales are unpacked once; every column's float
        /// operations are those of the one-column kernel, in its order.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q4_k_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            q4_k_cols_with(x, ys, |acc, a, b| {
                _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
            })
        }

        /// [`q4_k_cols`] with `vpdpwssd` for each multiply-add of i16
        /// pairs into i32 lanes (one instruction for `madd` + `add`; the
        /// same exact integers).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q4_k_cols_vnni(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            q4_k_cols_with(x, ys, |acc, a, b| _mm256_dpwssd_epi32(acc, a, b))
        }

        /// The body of [`q4_k_cols`]; `madd_acc(acc, a, b)` is
        /// `acc + madd(a, b)` (i16 pairs into i32 lanes).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn q4_k_cols_with(
            x: &[u8],
            ys: [&[u8]; COLS],
            madd_acc: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
        ) -> [f32; COLS] {
            let m4 = _mm256_set1_epi8(0x0f);
            let mut acc = [_mm256_setzero_ps(); COLS];
            let mut sumf = [0.0f32; COLS];
            for (b, xb) in x.chunks_exact(Q4_K).enumerate() {
                prefetch(xb);
                // (a loop, not `array::from_fn`: its closure would stay out of line)
                let mut yb: [&[u8]; COLS] = [&[]; COLS];
                for c in 0..COLS {
                    yb[c] = &ys[c][b * Q8_K..(b + 1) * Q8_K];
                }
                let (sc, mins) = k4_scales_mins(xb);
                let mut sumi = [_mm256_setzero_si256(); COLS];
                for h in 0..4 {
                    let q4 = load32(xb, 16 + 32 * h);
                    let lo = _mm256_and_si256(q4, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                    let s_lo = _mm256_set1_epi16(sc[2 * h] as i16);
                    let s_hi = _mm256_set1_epi16(sc[2 * h + 1] as i16);
                    for c in 0..COLS {
                        let p_lo = _mm256_maddubs_epi16(lo, load32(yb[c], 4 + 64 * h));
                        let p_hi = _mm256_maddubs_epi16(hi, load32(yb[c], 4 + 64 * h + 32));
                        sumi[c] = madd_acc(sumi[c], s_lo, p_lo);
                        sumi[c] = madd_acc(sumi[c], s_hi, p_hi);
                    }
                }
                let dd = f16x2(xb, 0); // [d, dmin]
                let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
                for c in 0..COLS {
                    let yd = f32_at(yb[c], 0);
                    let sumi_m = k4_min_sum(mins, yb[c]);
                    acc[c] = _mm256_fmadd_ps(
                        _mm256_set1_ps(d * yd),
                        _mm256_cvtepi32_ps(sumi[c]),
                        acc[c],
                    );
                    sumf[c] -= dmin * yd * sumi_m as f32;
                }
            }
            let mut out = [0.0f32; COLS];
            for c in 0..COLS {
                out[c] = sumf[c] + hsum_f32(acc[c]);
            }
            out
        }

        /// The 6-bit levels (0..64) of Q6_K elements `128h + 32s + l`
        /// (s = 0..4) of block `xb`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn q6_levels(xb: &[u8], h: usize) -> [__m256i; 4] {
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

        /// [`q6_k_q8_k`] for [`COLS`] activation rows. The `- 32` offset is
        /// taken out through the activation's block sums:
        /// `sum(sc * (q - 32) * y) = sum(sc * q * y) - 32 * sum(sc * bsum)`,
        /// the same exact integer per block (spread over the 8 lanes
        /// differently, so the f32 sums round differently).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q6_k_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            q6_k_cols_with(x, ys, |acc, a, b| {
                _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
            })
        }

        /// [`q6_k_cols`] with `vpdpwssd` (see [`q4_k_cols_vnni`]).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q6_k_cols_vnni(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            q6_k_cols_with(x, ys, |acc, a, b| _mm256_dpwssd_epi32(acc, a, b))
        }

        /// The body of [`q6_k_cols`], `madd_acc` as in [`q4_k_cols_with`].
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn q6_k_cols_with(
            x: &[u8],
            ys: [&[u8]; COLS],
            madd_acc: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
        ) -> [f32; COLS] {
            let mut acc = [_mm256_setzero_ps(); COLS];
            for (b, xb) in x.chunks_exact(Q6_K).enumerate() {
                prefetch(xb);
                // (a loop, not `array::from_fn`: its closure would stay out of line)
                let mut yb: [&[u8]; COLS] = [&[]; COLS];
                for c in 0..COLS {
                    yb[c] = &ys[c][b * Q8_K..(b + 1) * Q8_K];
                }
                let scales: &[u8; 16] = arr(xb, 192);
                // sc16: the 16 scales as i16, to meet the 16 bsums.
                let sc16 = _mm256_cvtepi8_epi16(load16(xb, 192));
                let mut sumi = [_mm256_setzero_si256(); COLS];
                for h in 0..2 {
                    let q = q6_levels(xb, h);
                    for (s, &qs) in q.iter().enumerate() {
                        let sc = q6_scales(scales, 8 * h + 2 * s);
                        for c in 0..COLS {
                            let p = _mm256_maddubs_epi16(qs, load32(yb[c], 4 + 128 * h + 32 * s));
                            sumi[c] = madd_acc(sumi[c], p, sc);
                        }
                    }
                }
                let d = _mm_cvtss_f32(_mm_movehdup_ps(f16x2(xb, 206)));
                for c in 0..COLS {
                    // 32 * sum(sc * bsum), spread over the lanes before the sum
                    let off = _mm256_madd_epi16(load32(yb[c], 4 + 256), sc16);
                    let si = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off, 5));
                    let dc = d * f32_at(yb[c], 0);
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dc), _mm256_cvtepi32_ps(si), acc[c]);
                }
            }
            let mut out = [0.0f32; COLS];
            for c in 0..COLS {
                out[c] = hsum_f32(acc[c]);
            }
            out
        }

        /// A hint to fetch the weights [`PREFETCH`] bytes past `xb` (never
        /// faults; past the end of the row it fetches the next row).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn prefetch(xb: &[u8]) {
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
        fn cols(
            x: &[u8],
            ys: [&[u8]; COLS],
            x_size: usize,
            y_size: usize,
            y_at: usize,
            signed: bool,
            min: bool,
            levels: impl Fn(&[u8]) -> __m256i,
        ) -> [f32; COLS] {
            let mut acc = [_mm256_setzero_ps(); COLS];
            let mut summs = [_mm_setzero_ps(); COLS];
            for (b, xb) in x.chunks_exact(x_size).enumerate() {
                prefetch(xb);
                let xv = levels(xb);
                let ux = if signed { _mm256_sign_epi8(xv, xv) } else { xv };
                let dx = f16x2(xb, 0); // [d, m] (m only with `min`)
                for c in 0..COLS {
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
            let mut out = [0.0f32; COLS];
            for c in 0..COLS {
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
        pub(super) fn q4_0_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            let eight = _mm256_set1_epi8(8);
            let levels = |xb: &[u8]| _mm256_sub_epi8(nibbles(xb, 2), eight);
            cols(x, ys, Q4_0, Q8_0, 2, true, false, levels)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q5_0_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            let sixteen = _mm256_set1_epi8(16);
            let levels = |xb: &[u8]| {
                _mm256_sub_epi8(_mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2)), sixteen)
            };
            cols(x, ys, Q5_0, Q8_0, 2, true, false, levels)
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q8_0_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            cols(x, ys, Q8_0, Q8_0, 2, true, false, |xb| load32(xb, 2))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q4_1_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            cols(x, ys, Q4_1, Q8_1, 4, false, true, |xb| nibbles(xb, 4))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn q5_1_cols(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            let levels = |xb: &[u8]| _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4));
            cols(x, ys, Q5_1, Q8_1, 4, false, true, levels)
        }

        // ---- AVX-512 VNNI prefill tiles (see `fast_tile`) ----

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

        /// One activation column into [`TILE_BLOCK`]-byte blocks: levels,
        /// `init = -off * lane sums of the levels`, `dy`, `sy` (Q8_1 only).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn prepare(ty: GgmlType, act: &[u8], out: &mut [u8]) {
            let (off, y_at, min) = tile_params(ty);
            let y_size = y_at + 32;
            let offv = _mm256_set1_epi8(off as i8);
            for (yb, ob) in act
                .chunks_exact(y_size)
                .zip(out.chunks_exact_mut(TILE_BLOCK))
            {
                let y = load32(yb, y_at);
                let lane_sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), offv, y);
                let init = _mm256_sub_epi32(_mm256_setzero_si256(), lane_sums);
                let ob: &mut [u8; TILE_BLOCK] = (&mut ob[..]).try_into().expect("72 bytes");
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

        /// The tile loop: `levels(block)` gives a weight block's unsigned
        /// levels (`x + off`); `x_size` bytes a weight block; with `min`,
        /// the weight's `m` (f16 at bytes 2..4) meets the column's `sy`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        fn tile(
            xs: [&[u8]; TILE],
            ys: [&[u8]; TILE],
            x_size: usize,
            min: bool,
            levels: impl Fn(&[u8]) -> __m256i,
        ) -> [[f32; TILE]; TILE] {
            // No closures or `array::from_fn` in here: they would not inherit
            // the target features, stay out of line and spill the tile.
            let nb = xs[0].len() / x_size;
            let mut acc = [[_mm256_setzero_ps(); TILE]; TILE];
            let mut summs = [[0.0f32; TILE]; TILE];
            let mut xu = [_mm256_setzero_si256(); TILE];
            let mut dx = [_mm256_setzero_ps(); TILE];
            let mut mx = [0.0f32; TILE];
            for b in 0..nb {
                for r in 0..TILE {
                    let xb = &xs[r][b * x_size..(b + 1) * x_size];
                    xu[r] = levels(xb);
                    let dm = f16x2(xb, 0); // [d, m]
                    dx[r] = _mm256_broadcastss_ps(dm);
                    if min {
                        mx[r] = _mm_cvtss_f32(_mm_movehdup_ps(dm));
                    }
                }
                for c in 0..TILE {
                    let yb: &[u8; TILE_BLOCK] = arr(ys[c], b * TILE_BLOCK);
                    let y = load32(yb, 0);
                    let init = load32(yb, 32);
                    let dy = _mm256_set1_ps(f32_at(yb, 64));
                    let sy = f32_at(yb, 68);
                    for r in 0..TILE {
                        let l = _mm256_dpbusd_epi32(init, xu[r], y);
                        let d = _mm256_mul_ps(dx[r], dy);
                        acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), acc[r][c]);
                        if min {
                            summs[r][c] += mx[r] * sy;
                        }
                    }
                }
            }
            let mut out = [[0.0f32; TILE]; TILE];
            for r in 0..TILE {
                for c in 0..TILE {
                    out[r][c] = hsum_f32(acc[r][c]) + if min { summs[r][c] } else { 0.0 };
                }
            }
            out
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q4_0_tile(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            tile(xs, ys, Q4_0, false, |xb| nibbles(xb, 2))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q5_0_tile(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            tile(xs, ys, Q5_0, false, |xb| {
                _mm256_or_si256(nibbles(xb, 6), fifth_bits(xb, 2))
            })
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q8_0_tile(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            let flip = _mm256_set1_epi8(-128);
            tile(xs, ys, Q8_0, false, |xb| {
                _mm256_xor_si256(load32(xb, 2), flip)
            })
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q4_1_tile(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            tile(xs, ys, Q4_1, true, |xb| nibbles(xb, 4))
        }

        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(super) fn q5_1_tile(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            tile(xs, ys, Q5_1, true, |xb| {
                _mm256_or_si256(nibbles(xb, 8), fifth_bits(xb, 4))
            })
        }
    }
}
