//! The AVX-512 VNNI tier without VNNI: plain-Rust lane models of its two
//! integer instructions, and the tier's own kernels with the models in the
//! instructions' place (everything else is the tier's code, compiled for
//! AVX2). So the tier's arithmetic (the tiles' unsigned offset trick, the
//! `init` lanes, the lane sums) is held bit for bit to the AVX2 kernels on
//! every AVX2 cpu, not only on those that have VNNI; where the cpu has it,
//! the tests hold the real instructions to the models too. Slow: for tests.

use glint_backend::GgmlType;

use super::{DotCols, DotFn, DotRowsFn, Lanes, Tiles};

/// `vpdpbusd` on one 256-bit vector: each i32 lane `l` of `acc` plus the
/// four products of unsigned `u` and signed `s` bytes `4l..4l + 4`,
/// products and sums exact in 32 bits, the final add wrapping (Intel's
/// pseudocode; the instruction does not saturate).
pub fn dpbusd(acc: [i32; 8], u: [u8; 32], s: [i8; 32]) -> [i32; 8] {
    std::array::from_fn(|l| {
        (4 * l..4 * l + 4).fold(acc[l], |sum, j| {
            sum.wrapping_add(i32::from(u[j]) * i32::from(s[j]))
        })
    })
}

/// `vpdpwssd` on one 256-bit vector: each i32 lane `l` of `acc` plus the
/// two products of the signed 16-bit `a` and `b` elements `2l`, `2l + 1`,
/// the adds wrapping (two `-32768²` make 2³¹, which wraps, as in `pmaddwd`).
pub fn dpwssd(acc: [i32; 8], a: [i16; 16], b: [i16; 16]) -> [i32; 8] {
    std::array::from_fn(|l| {
        (2 * l..2 * l + 2).fold(acc[l], |sum, j| {
            sum.wrapping_add(i32::from(a[j]) * i32::from(b[j]))
        })
    })
}

/// The tile kernels of `ty` (as [`super::fast_tile`] gives on a VNNI cpu)
/// with `vpdpbusd` replaced by [`dpbusd`]; `None` where the cpu lacks AVX2
/// or the type has no tile kernel.
pub fn tile(ty: GgmlType) -> Option<Tiles> {
    super::simd::tile_model(ty)
}

/// [`super::prepare_tile_col`] with `vpdpbusd` replaced by [`dpbusd`]:
/// the columns [`tile`]'s kernels read. Does nothing where [`tile`] gives
/// no kernel for `ty`.
pub fn prepare_tile_col(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    super::simd::prepare_tile_col_model(ty, act, out)
}

/// The lane kernels of `ty` (as [`super::fast_lanes`] gives on a VNNI
/// cpu) with `vpdpbusd` replaced by [`dpbusd`]; they read columns prepared
/// by [`prepare_tile_col`]. `None` where the cpu lacks AVX2 or the type
/// has no lane kernel.
pub fn lanes(ty: GgmlType) -> Option<Lanes> {
    super::simd::lanes_model(ty)
}

/// The one-column kernels of `ty` that [`super::fast_dot_prepared`] gives
/// on a VNNI cpu, with `vpdpbusd` replaced by [`dpbusd`] (and Q5_0's and
/// Q5_1's fifth bits spread as the AVX2 kernels do); they read a column
/// prepared by [`prepare_tile_col`]. `None` without AVX2.
pub fn dot_prepared(ty: GgmlType) -> Option<DotFn> {
    super::simd::dot_prepared_model(ty)
}

/// [`dot_prepared`] over consecutive rows, as
/// [`super::fast_dot_prepared_rows`] gives on a VNNI cpu.
pub fn dot_prepared_rows(ty: GgmlType) -> Option<DotRowsFn> {
    super::simd::dot_prepared_rows_model(ty)
}

/// The multi-column kernels of `ty` that [`super::fast_dot_cols`] gives on a
/// VNNI cpu, with `vpdpwssd` replaced by [`dpwssd`] (Q4_K, Q6_K; the other
/// types use the AVX2 kernels on that tier too); `None` without AVX2.
pub fn dot_cols(ty: GgmlType) -> Option<DotCols> {
    super::simd::dot_cols_model(ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpbusd_sums_four_exact_products_a_lane_and_wraps_the_add() {
        let mut u = [0u8; 32];
        let mut s = [0i8; 32];
        // lane 0: 255 · -128 four times, the extreme product sum
        u[..4].fill(255);
        s[..4].fill(-128);
        // lane 1: 1·1 + 2·-2 + 3·3 + 4·-4 = -10
        u[4..8].copy_from_slice(&[1, 2, 3, 4]);
        s[4..8].copy_from_slice(&[1, -2, 3, -4]);
        // lane 7: 255 · 127 four times onto an accumulator near i32::MAX
        u[28..].fill(255);
        s[28..].fill(127);
        let mut acc = [5i32; 8];
        acc[7] = i32::MAX;
        let got = dpbusd(acc, u, s);
        assert_eq!(got[0], 5 - 4 * 255 * 128);
        assert_eq!(got[1], 5 - 10);
        assert_eq!(got[2..7], [5; 5]);
        assert_eq!(got[7], i32::MAX.wrapping_add(4 * 255 * 127));
    }

    #[test]
    fn dpwssd_sums_two_exact_products_a_lane_and_wraps() {
        let mut a = [0i16; 16];
        let mut b = [0i16; 16];
        // lane 0: (-32768)² twice = 2³¹, which wraps to i32::MIN
        a[..2].fill(i16::MIN);
        b[..2].fill(i16::MIN);
        // lane 3: 300 · -7 + -2 · 1000 = -4100
        a[6..8].copy_from_slice(&[300, -2]);
        b[6..8].copy_from_slice(&[-7, 1000]);
        let got = dpwssd([0, 1, 2, 3, 4, 5, 6, 7], a, b);
        assert_eq!(got, [i32::MIN, 1, 2, 3 - 4100, 4, 5, 6, 7]);
    }
}
