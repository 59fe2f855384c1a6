//! The 512-bit tier of the blocked prefill path (`wide::block`), for cpus
//! with AVX-512 F and DQ: the same numbers as the AVX2 kernels, bit for
//! bit, in half the instructions.
//!
//! - `Q·K`: a score is [`wide::score8`]'s sum — lane `l` of a key's
//!   accumulator takes the elements `d ≡ l (mod 8)` in order, then a fixed
//!   tree folds the 8 lanes. Here one 512-bit register holds two keys' 8
//!   lanes (key `p` and key `p + 4` of a group of 8, the tile widened in
//!   that paired order by [`widen_pairs`]), so each fused multiply-add
//!   advances two keys, and the fold is the AVX2 tree's additions done
//!   with 512-bit shuffles.
//! - `P·V`: each output element sums its weighted V rows in key order
//!   with fused multiply-adds, as [`wide::weigh_tile`] does, 16 elements a
//!   register instead of 8.
//! - `exp`: [`wide::exp8`]'s operations on 16 lanes; the row's sum is
//!   taken 8 lanes at a time in [`wide::exp_row`]'s order.
//!
//! The tests hold this tier to the AVX2 one ([`Kernels::Avx2`]) and to
//! the per-token path, bit for bit.
//!
//! [`Kernels::Avx2`]: crate::Kernels::Avx2

#![allow(unsafe_code)]

use super::wide::{self, Elem};
use super::{AttnParams, VTile};
use std::arch::x86_64::*;

/// `hadd` of two registers within each 128-bit lane, as `_mm256_hadd_ps`
/// per lane: `[a0 + a1, a2 + a3, b0 + b1, b2 + b3]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
fn hadd(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(a, b),
        _mm512_shuffle_ps::<0xDD>(a, b),
    )
}

/// 16 elements from `p` as f32 (an F16 cache's widened in registers).
pub(super) trait Lanes16: Elem {
    /// # Safety
    /// `p..p + 16` readable; AVX-512 F (and F16C) present.
    unsafe fn ld16p(p: *const Self) -> __m512;
}

impl Lanes16 for f32 {
    #[inline(always)]
    unsafe fn ld16p(p: *const f32) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Lanes16 for half::f16 {
    #[inline(always)]
    unsafe fn ld16p(p: *const half::f16) -> __m512 {
        // SAFETY: the caller's contract (32 bytes from `p`).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

/// Where [`score_tile`] reads a tile's keys: a copy widened by
/// [`widen_pairs`] (a prefill block's many query rows share it), or the
/// cache rows themselves, widened in registers (a decode step's few do
/// not repay a copy).
///
/// # Safety
/// `holds(tn)` must be true only where every read `pair` and `tail` make
/// for a tile of `tn` keys is in bounds: `score_tile` checks it once and
/// then reads unchecked.
pub(super) unsafe trait Keys: Copy {
    /// Elements `8c..8c + 8` of keys `8gi + p` (low half) and `8gi + p +
    /// 4` (high half), `p < 4`.
    ///
    /// # Safety
    /// Group `gi` whole in the tile, `8c + 8 <= hd`; AVX-512 F and DQ.
    unsafe fn pair(self, gi: usize, p: usize, c: usize) -> __m512;
    /// `q · k` of the `n < 8` keys from `8gi` ([`wide::score8`]'s bits).
    fn tail(self, q: &[f32], gi: usize, n: usize) -> __m256;
    /// The tile holds `tn` keys.
    fn holds(self, tn: usize) -> bool;
}

/// A tile widened by [`widen_pairs`]: `[hd, tn]` floats.
#[derive(Clone, Copy)]
pub(super) struct Widened<'a> {
    pub(super) kt: &'a [f32],
    pub(super) hd: usize,
}

// SAFETY: `holds` checks the `8 * hd` floats a group reads, every group.
unsafe impl Keys for Widened<'_> {
    #[inline(always)]
    unsafe fn pair(self, gi: usize, p: usize, c: usize) -> __m512 {
        let chunks = self.hd / 8;
        // SAFETY: the caller's contract; group gi's 8 * hd floats are in
        // `kt` (`holds`), and (p * chunks + c) * 16 + 16 <= 8 * hd.
        unsafe {
            _mm512_loadu_ps(
                self.kt
                    .as_ptr()
                    .add(gi * 8 * self.hd + (p * chunks + c) * 16),
            )
        }
    }

    fn tail(self, q: &[f32], gi: usize, n: usize) -> __m256 {
        // SAFETY: reached from `score_tile`, after `has_avx512()`.
        unsafe { wide::score8(q, &self.kt[gi * 8 * self.hd..], self.hd, n, self.hd) }
    }

    fn holds(self, tn: usize) -> bool {
        self.kt.len() >= tn * self.hd
    }
}

/// A tile read from the cache: key `j` at `k[j * stride..][..hd]`.
#[derive(Clone, Copy)]
pub(super) struct Direct<'a, E> {
    pub(super) k: &'a [E],
    pub(super) stride: usize,
    pub(super) hd: usize,
}

// SAFETY: `holds` checks the last key's row, the furthest any read
// reaches.
unsafe impl<E: Elem> Keys for Direct<'_, E> {
    #[inline(always)]
    unsafe fn pair(self, gi: usize, p: usize, c: usize) -> __m512 {
        // SAFETY: the caller's contract; keys 8gi + p and 8gi + p + 4 are
        // in `k` (`holds`), 8c + 8 <= hd.
        unsafe {
            let at = self.k.as_ptr().add((8 * gi + p) * self.stride + 8 * c);
            let lo = _mm512_castps256_ps512(E::ld8p(at));
            _mm512_insertf32x8::<1>(lo, E::ld8p(at.add(4 * self.stride)))
        }
    }

    fn tail(self, q: &[f32], gi: usize, n: usize) -> __m256 {
        // SAFETY: reached from `score_tile`, after `has_avx512()`.
        unsafe { wide::score8(q, &self.k[gi * 8 * self.stride..], self.stride, n, self.hd) }
    }

    fn holds(self, tn: usize) -> bool {
        tn == 0 || self.k.len() >= (tn - 1) * self.stride + self.hd
    }
}

/// Rows `r0..r0 + R` of `q` (`[hd, rows]`) against group `gi` of 8 keys
/// of a tile, the scores in the lanes of each result: [`wide::score8`]'s
/// bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
fn score_pairs<const R: usize, K: Keys>(
    q: &[f32],
    r0: usize,
    keys: K,
    gi: usize,
    hd: usize,
) -> [__m256; R] {
    assert!(
        hd % 8 == 0 && q.len() >= (r0 + R) * hd,
        "score_pairs: {R} rows of {hd} from {r0} in {} floats",
        q.len()
    );
    let chunks = hd / 8;
    // acc[r][p]: row r against keys p (low half) and p + 4 (high half).
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    let qp = q.as_ptr();
    for c in 0..chunks {
        // SAFETY: (r0 + r) * hd + 8c + 8 <= (r0 + R) * hd <= q.len()
        // (asserted above); group gi is whole in the tile (the caller's).
        unsafe {
            let qb: [__m512; R] = std::array::from_fn(|r| {
                _mm512_broadcast_f32x8(_mm256_loadu_ps(qp.add((r0 + r) * hd + 8 * c)))
            });
            let kv: [__m512; 4] = std::array::from_fn(|p| keys.pair(gi, p, c));
            for (ar, &qr) in acc.iter_mut().zip(&qb) {
                for (a, &k) in ar.iter_mut().zip(&kv) {
                    *a = _mm512_fmadd_ps(qr, k, *a);
                }
            }
        }
    }
    // score8's tree: pairs of lanes, then pairs of pairs, then the halves.
    // Per 128-bit lane L of u: L0 keys 0-3's lanes 0-3 summed, L1 their
    // lanes 4-7, L2 and L3 the same of keys 4-7.
    std::array::from_fn(|r| {
        let a = acc[r];
        let u = hadd(hadd(a[0], a[1]), hadd(a[2], a[3]));
        let lo = _mm512_castps512_ps256(_mm512_shuffle_f32x4::<0x88>(u, u));
        let hi = _mm512_castps512_ps256(_mm512_shuffle_f32x4::<0xDD>(u, u));
        _mm256_add_ps(lo, hi)
    })
}

/// The tile's `dst.len() / hd` cache rows from `at`, `stride` elements
/// apart, as f32 (exact), each whole group of 8 in the order
/// [`score_pairs`] reads (for `p < 4` and each 8-element chunk `c`: key `p`'s
/// chunk, then key `p + 4`'s), the rows after the last whole group as
/// rows (`[hd, rest]`). `hd` a multiple of 8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
pub(super) fn widen_pairs<E: Elem>(c: &[E], at: usize, stride: usize, hd: usize, dst: &mut [f32]) {
    assert!(
        hd % 8 == 0,
        "widen_pairs: heads of {hd}, not whole 8-lane steps"
    );
    let tn = dst.len() / hd;
    let groups = tn / 8;
    let chunks = hd / 8;
    for g in 0..groups {
        let out = &mut dst[g * 8 * hd..(g + 1) * 8 * hd];
        for p in 0..4 {
            let (a, b) = (at + (8 * g + p) * stride, at + (8 * g + p + 4) * stride);
            for ch in 0..chunks {
                let o = (p * chunks + ch) * 16;
                wide::st(out, o, E::ld8(c, a + 8 * ch));
                wide::st(out, o + 8, E::ld8(c, b + 8 * ch));
            }
        }
    }
    for (jj, row) in dst[groups * 8 * hd..].chunks_exact_mut(hd).enumerate() {
        let from = at + (groups * 8 + jj) * stride;
        for (ch, d) in row.chunks_exact_mut(8).enumerate() {
            wide::st(d, 0, E::ld8(c, from + 8 * ch));
        }
    }
}

/// Scores of rows `0..rows` of `q` (`[hd, rows]`, row `r` of token `r /
/// g`) against one tile (`kt` widened by [`widen_pairs`], `tn` keys from
/// cache row `j0`), into `scores` (row `r` at `scores[r * n_kv..]`), each
/// row's largest score folded into `max`: what `wide::block`'s AVX2 loop
/// stores, bit for bit. `mask`: `[n_kv, tokens]`; `clear`: the tile's
/// mask is +0 for every token (not read).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
pub(super) fn score_tile<K: Keys>(
    p: &AttnParams,
    q: &[f32],
    rows: usize,
    g: usize,
    keys: K,
    j0: usize,
    tn: usize,
    mask: &[f32],
    clear: bool,
    scores: &mut [f32],
    max: &mut [f32],
) {
    let (hd, n_kv) = (p.head_dim, p.n_kv);
    assert!(keys.holds(tn), "score_tile: a tile short of {tn} keys");
    let groups = tn / 8;
    let tail = tn - 8 * groups;
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(4);
        let mut vmax = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        let mut finish = |t: usize, x: __m256, c: usize, n: usize| {
            let r = r0 + t;
            let srow = &mut scores[r * n_kv..(r + 1) * n_kv];
            let sc = if clear && n == 8 {
                wide::finish8_clear(p, x, j0 + c, srow)
            } else {
                let b = r / g;
                let near = &mask[b * n_kv..(b + 1) * n_kv];
                wide::finish8(p, [x, x], near, None, j0 + c, n, srow)
            };
            vmax[t] = _mm256_max_ps(vmax[t], sc);
        };
        for gi in 0..groups {
            let x: [__m256; 4] = match nr {
                4 => score_pairs::<4, K>(q, r0, keys, gi, hd),
                3 => pad(score_pairs::<3, K>(q, r0, keys, gi, hd)),
                2 => pad(score_pairs::<2, K>(q, r0, keys, gi, hd)),
                _ => pad(score_pairs::<1, K>(q, r0, keys, gi, hd)),
            };
            for (t, &x) in x.iter().enumerate().take(nr) {
                finish(t, x, 8 * gi, 8);
            }
        }
        if tail > 0 {
            for t in 0..nr {
                let qr = &q[(r0 + t) * hd..(r0 + t + 1) * hd];
                finish(t, keys.tail(qr, groups, tail), 8 * groups, tail);
            }
        }
        for t in 0..nr {
            max[r0 + t] = max[r0 + t].max(wide::hmax8(vmax[t]));
        }
        r0 += nr;
    }
}

/// `N` results in an array of 4 (the rest zeros).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
fn pad<const N: usize>(x: [__m256; N]) -> [__m256; 4] {
    std::array::from_fn(|t| if t < N { x[t] } else { _mm256_setzero_ps() })
}

/// [`wide::weigh_tile`]'s sums, 16 elements a register: `o[t * os..] +=
/// sum_jj w[t * ws + jj] * V[jj]` for `N` rows over the tile's rows, each
/// element summed over the rows in order with fused multiply-adds.
/// `vt.width` a multiple of 16 (this tier takes heads of whole registers
/// only), so there is no scalar tail.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
pub(super) fn weigh_tile<E: Lanes16, const N: usize>(
    o: &mut [f32],
    os: usize,
    w: &[f32],
    ws: usize,
    vt: VTile<E>,
) {
    vt.check(N, o.len(), os, w.len(), ws);
    assert!(
        vt.width % 16 == 0,
        "weigh_tile: {} elements, not whole 16-lane registers",
        vt.width
    );
    let mut d = 0;
    while d + 64 <= vt.width {
        weigh_chunks::<E, N, 4>(o, os, w, ws, vt, d);
        d += 64;
    }
    while d < vt.width {
        weigh_chunks::<E, N, 1>(o, os, w, ws, vt, d);
        d += 16;
    }
}

/// Elements `d..d + 16 * C` of [`weigh_tile`]'s `N` rows, in registers
/// across the tile.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
fn weigh_chunks<E: Lanes16, const N: usize, const C: usize>(
    o: &mut [f32],
    os: usize,
    w: &[f32],
    ws: usize,
    vt: VTile<E>,
    d: usize,
) {
    vt.check(N, o.len(), os, w.len(), ws);
    assert!(
        d + 16 * C <= vt.width,
        "weigh_chunks: {C} chunks from {d} of {}",
        vt.width
    );
    let (op, vp, wp) = (o.as_mut_ptr(), vt.v.as_ptr(), w.as_ptr());
    // SAFETY: t * os + d + 16c + 16 <= (N - 1) * os + width <= o.len();
    // jj * stride + d + 16c + 16 <= (rows - 1) * stride + width <=
    // v.len(); t * ws + jj < (N - 1) * ws + rows <= w.len() (`check`).
    unsafe {
        let mut a: [[__m512; C]; N] = std::array::from_fn(|t| {
            std::array::from_fn(|c| _mm512_loadu_ps(op.add(t * os + d + 16 * c)))
        });
        for jj in 0..vt.rows {
            let v: [__m512; C] =
                std::array::from_fn(|c| E::ld16p(vp.add(jj * vt.stride + d + 16 * c)));
            for (t, at) in a.iter_mut().enumerate() {
                let wj = _mm512_set1_ps(*wp.add(t * ws + jj));
                for c in 0..C {
                    at[c] = _mm512_fmadd_ps(wj, v[c], at[c]);
                }
            }
        }
        for (t, at) in a.iter().enumerate() {
            for (c, &x) in at.iter().enumerate() {
                _mm512_storeu_ps(op.add(t * os + d + 16 * c), x);
            }
        }
    }
}

/// [`wide::exp8`] on 16 lanes: the same operations, so the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
fn exp16(x: __m512) -> __m512 {
    let x = _mm512_min_ps(x, _mm512_set1_ps(wide::EXP_HI));
    let x = _mm512_max_ps(x, _mm512_set1_ps(wide::EXP_LO));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(wide::LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(wide::LN2_LO), r);
    let mut y = _mm512_set1_ps(wide::EXP_POLY[0]);
    for &c in &wide::EXP_POLY[1..] {
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
    }
    let y = _mm512_fmadd_ps(
        y,
        _mm512_mul_ps(r, r),
        _mm512_add_ps(r, _mm512_set1_ps(1.0)),
    );
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    _mm512_mul_ps(y, _mm512_castsi512_ps(e))
}

/// [`wide::exp_row`], 16 lanes a step: each `exp` the same bits, the sum
/// taken 8 lanes at a time in the same order (low half, then high half).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
pub(super) fn exp_row(row: &mut [f32], max: f32) -> f32 {
    let n = row.len();
    let (vmax, ninf) = (_mm512_set1_ps(max), _mm512_set1_ps(f32::NEG_INFINITY));
    let mut acc = _mm256_setzero_ps();
    let mut j = 0;
    let p = row.as_mut_ptr();
    while j + 16 <= n {
        // SAFETY: j + 16 <= n = row.len().
        unsafe {
            let x = _mm512_loadu_ps(p.add(j));
            let live = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(x, ninf);
            // x - max on the live lanes, 0 on the masked ones (as
            // `wide::live_diff`: no subnormal from exp(-inf)), and those
            // lanes' results 0.
            let e = _mm512_maskz_mov_ps(live, exp16(_mm512_maskz_sub_ps(live, x, vmax)));
            _mm512_storeu_ps(p.add(j), e);
            acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
            acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps::<1>(e));
        }
        j += 16;
    }
    wide::exp_row_from(row, max, j, acc)
}
