//! The 256-element "K" super-block formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
//! and the Q8_K activation format.
//!
//! A super-block holds sub-blocks of 16 or 32 elements, each with a small
//! integer scale (and min) that multiplies the super-block's f16 `d` (`dmin`).
//! Dequantization computes the per-sub-block float scale `d * sc` first and
//! then `dl * q - ml`, the order gguf-py (and ggml) use, so results are
//! bit-identical. The quantizers for Q4_K, Q6_K and Q8_K are ports of ggml's
//! `quantize_row_*_ref` (with `make_qkx2_quants` / `make_qx_quants`) written
//! to the C source's unfused f32 operations.

use crate::block::{nearest_int, read_blocks, signed_absmax, Block, Quantize};
use bytemuck::{Pod, Zeroable};
use half::f16;

pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in Q4_K/Q5_K.
pub const K_SCALE_SIZE: usize = 12;
/// ggml's threshold for "this group is all zeros".
const GROUP_MAX_EPS: f32 = 1e-15;

/// 2-bit: 16 sub-blocks of 16, `x = d * (sc & 15) * q - dmin * (sc >> 4)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2_K {
    /// low nibble: scale, high nibble: min, per 16-element sub-block
    pub scales: [u8; QK_K / 16],
    /// element 128*h + 32*s + l is bits 2s..2s+2 of qs[32*h + l]
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ2_K>() == 84);

/// 3-bit: 16 sub-blocks of 16 with signed 6-bit scales, `x = d * (sc - 32) * q`,
/// q = low 2 bits - (high bit clear ? 4 : 0).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3_K {
    /// element `32*b + l` takes its high bit from bit `b` of `hmask[l]`
    pub hmask: [u8; QK_K / 8],
    /// low 2 bits, laid out like Q2_K's qs
    pub qs: [u8; QK_K / 4],
    /// 16 six-bit scales: low nibbles in bytes 0..8, high 2 bits in 8..12
    pub scales: [u8; 12],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ3_K>() == 110);

/// 4-bit: 8 sub-blocks of 32 with 6-bit scales and mins,
/// `x = d * sc * q - dmin * m`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_K {
    pub d: f16,
    pub dmin: f16,
    /// packed by `get_scale_min_k4`
    pub scales: [u8; K_SCALE_SIZE],
    /// element 64*h + l is the low nibble of qs[32*h + l], 64*h + 32 + l the high one
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_K>() == 144);

/// 5-bit: Q4_K plus a fifth bit per element.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    /// element `32*b + l` takes its fifth bit from bit `b` of `qh[l]`
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_K>() == 176);

/// 6-bit: 16 sub-blocks of 16 with signed 8-bit scales, `x = d * sc * (q - 32)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6_K {
    /// low 4 bits: element 128*h + l in ql[64*h + l] (low nibble),
    /// 128*h + 64 + l in its high nibble (l < 64)
    pub ql: [u8; QK_K / 2],
    /// high 2 bits: element 128*h + 32*s + l is bits 2s..2s+2 of qh[32*h + l]
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}
const _: () = assert!(std::mem::size_of::<BlockQ6_K>() == 210);

/// 8-bit activations for the K-quant dots: `x = d * q` with an f32 `d`, and
/// `bsums[j]` = sum of the 16 levels of group j, so the weights' mins cost
/// one multiply per group.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_K>() == 292);

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j`.
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed scales of a Q3_K block (before the `- 32`), as 6-bit values.
fn q3_k_scales(s: &[u8; 12]) -> [u8; 16] {
    std::array::from_fn(|i| {
        let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        low | (high << 4)
    })
}

/// The 2-bit field of element `i` (0..256) in Q2_K/Q3_K's `qs` layout.
fn q2_field(qs: &[u8; QK_K / 4], i: usize) -> u8 {
    let (h, s, l) = (i / 128, (i % 128) / 32, i % 32);
    (qs[32 * h + l] >> (2 * s)) & 3
}

/// The 4-bit field of element `i` in Q4_K/Q5_K's `qs` layout.
fn q4_field(qs: &[u8; QK_K / 2], i: usize) -> u8 {
    let (h, s, l) = (i / 64, (i % 64) / 32, i % 32);
    (qs[32 * h + l] >> (4 * s)) & 0x0f
}

/// Bit `i / 32` of `bits[i % 32]`: Q3_K's hmask and Q5_K's qh layout.
fn high_bit(bits: &[u8; QK_K / 8], i: usize) -> u8 {
    (bits[i % 32] >> (i / 32)) & 1
}

/// The 6-bit level (0..64) of element `i` of a Q6_K block.
fn q6_level(b: &BlockQ6_K, i: usize) -> u8 {
    let (h, r) = (i / 128, i % 128);
    let low = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
    let high = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    low | (high << 4)
}

impl Block for BlockQ2_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let dmin = self.dmin.to_f32();
        for (i, out) in y[..QK_K].iter_mut().enumerate() {
            let sc = self.scales[i / 16];
            let dl = d * (sc & 0x0f) as f32;
            let ml = dmin * (sc >> 4) as f32;
            *out = dl * q2_field(&self.qs, i) as f32 - ml;
        }
    }
}

impl Block for BlockQ3_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        let scales = q3_k_scales(&self.scales);
        for (i, out) in y[..QK_K].iter_mut().enumerate() {
            let dl = d * (scales[i / 16] as i32 - 32) as f32;
            // The offset of 4 applies when the high bit is *clear*.
            let q =
                q2_field(&self.qs, i) as i32 - if high_bit(&self.hmask, i) == 0 { 4 } else { 0 };
            *out = dl * q as f32;
        }
    }
}

/// What Q4_K and Q5_K share: `d`, `dmin` and 8 packed 6-bit scales and
/// mins; they differ only in how a level is stored.
trait K4Block: Pod {
    fn d_dmin_scales(&self) -> (f16, f16, &[u8; K_SCALE_SIZE]);
    /// The unsigned level of element `i` (0..256).
    fn level(&self, i: usize) -> u8;
}

impl K4Block for BlockQ4_K {
    fn d_dmin_scales(&self) -> (f16, f16, &[u8; K_SCALE_SIZE]) {
        (self.d, self.dmin, &self.scales)
    }
    fn level(&self, i: usize) -> u8 {
        q4_field(&self.qs, i)
    }
}

impl K4Block for BlockQ5_K {
    fn d_dmin_scales(&self) -> (f16, f16, &[u8; K_SCALE_SIZE]) {
        (self.d, self.dmin, &self.scales)
    }
    fn level(&self, i: usize) -> u8 {
        q4_field(&self.qs, i) | (high_bit(&self.qh, i) << 4)
    }
}

/// `x = (d * sc) * q - dmin * m` per 32-element sub-block.
fn dequantize_k4<B: K4Block>(b: &B, y: &mut [f32]) {
    let (d, dmin, scales) = b.d_dmin_scales();
    let (d, dmin) = (d.to_f32(), dmin.to_f32());
    for (i, out) in y[..QK_K].iter_mut().enumerate() {
        let (sc, m) = get_scale_min_k4(i / 32, scales);
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        *out = dl * b.level(i) as f32 - ml;
    }
}

impl Block for BlockQ4_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_k4(self, y);
    }
}

impl Block for BlockQ5_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_k4(self, y);
    }
}

impl Block for BlockQ6_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        let d = self.d.to_f32();
        for (i, out) in y[..QK_K].iter_mut().enumerate() {
            let dl = d * self.scales[i / 16] as f32;
            *out = dl * (q6_level(self, i) as i32 - 32) as f32;
        }
    }
}

impl Block for BlockQ8_K {
    const BLOCK_SIZE: usize = QK_K;
    fn dequantize(&self, y: &mut [f32]) {
        for (out, &q) in y[..QK_K].iter_mut().zip(&self.qs) {
            *out = self.d * q as f32;
        }
    }
}

impl Quantize for BlockQ8_K {
    /// ggml's `quantize_row_q8_K_ref`: `d = max / -127` where `max` is the
    /// value of largest magnitude, levels rounded half to even.
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let (max, amax) = signed_absmax(x, 0.0);
        let mut b = BlockQ8_K::zeroed();
        if amax == 0.0 {
            // ggml leaves bsums unwritten here; zero is what they would sum to.
            return b;
        }
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (j, sum) in b.bsums.iter_mut().enumerate() {
            *sum = b.qs[16 * j..16 * j + 16]
                .iter()
                .map(|&q| i16::from(q))
                .sum();
        }
        b.d = 1.0 / iscale;
        b
    }
}

/// ggml's `make_qkx2_quants`: levels `L[i]` in 0..=nmax and (scale, min) for
/// `x ~ scale * L - min`, minimising the weighted squared error over a few
/// candidate scales around `nmax / (max - min)`. Returns (scale, the_min)
/// where `the_min` is the positive amount subtracted.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

impl Quantize for BlockQ4_K {
    /// ggml's `quantize_row_q4_K_ref` (no importance matrix).
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut levels = [0u8; QK_K];
        let (scales, mins, max_scale, max_min) = q4_k_sub_blocks(x, &mut levels);

        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let mut b = BlockQ4_K::zeroed();
        for j in 0..QK_K / 32 {
            // C stores nearest_int's int into a uint8_t (truncating) before MIN.
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            put_scale_min_k4(j, ls, lm, &mut b.scales);
        }
        b.d = f16::from_f32(max_scale / 63.0);
        b.dmin = f16::from_f32(max_min / 63.0);

        // Re-quantize against the rounded scales actually stored.
        for j in 0..QK_K / 32 {
            let (sc, m) = get_scale_min_k4(j, &b.scales);
            let d = b.d.to_f32() * sc as f32;
            if d == 0.0 {
                continue;
            }
            let dm = b.dmin.to_f32() * m as f32;
            for ii in 0..32 {
                let l = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, 15);
                levels[32 * j + ii] = l as u8;
            }
        }
        for h in 0..QK_K / 64 {
            for l in 0..32 {
                b.qs[32 * h + l] = levels[64 * h + l] | (levels[64 * h + l + 32] << 4);
            }
        }
        b
    }
}

/// Q4_K's first pass: each 32-element sub-block's float scale and min from
/// `make_qkx2_quants` (weights `sqrt(mean(x^2)) + |x|`), its levels into
/// `levels`, and the largest scale and min. Returns
/// `(scales, mins, max_scale, max_min)`.
fn q4_k_sub_blocks(
    x: &[f32],
    levels: &mut [u8; QK_K],
) -> ([f32; QK_K / 32], [f32; QK_K / 32], f32, f32) {
    let mut scales = [0.0f32; QK_K / 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        let (scale, min) = make_qkx2_quants(
            15,
            xs,
            &weights,
            &mut levels[32 * j..32 * j + 32],
            -1.0,
            0.1,
            20,
            false,
        );
        scales[j] = scale;
        mins[j] = min;
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    (scales, mins, max_scale, max_min)
}

/// The inverse of [`get_scale_min_k4`]: stores the 6-bit scale `ls` and min
/// `lm` of sub-block `j`. Called for j = 0..8 in order on a zeroed `q`:
/// sub-blocks 4..8 put their top two bits beside those of 0..4.
fn put_scale_min_k4(j: usize, ls: u8, lm: u8, q: &mut [u8; K_SCALE_SIZE]) {
    if j < 4 {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
        q[j - 4] |= (ls >> 4) << 6;
        q[j] |= (lm >> 4) << 6;
    }
}

/// ggml's `make_qx_quants` with `rmse_type == 1` and no importance weights
/// (the only way Q6_K calls it): weights `x^2`, levels in -nmax..nmax-1, and
/// a search over 18 scales around `-nmax / max`. Returns the scale; the
/// levels are not needed because Q6_K recomputes them from stored scales.
fn make_qx_quants_rmse1(nmax: i32, x: &[f32]) -> f32 {
    let (max, amax) = signed_absmax(x, 0.0);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let (sumlx, suml2) = sums(-(nmax as f32) / max);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

impl Quantize for BlockQ6_K {
    /// ggml's `quantize_row_q6_K_ref` (no importance matrix).
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let scales: [f32; QK_K / 16] =
            std::array::from_fn(|ib| make_qx_quants_rmse1(32, &x[16 * ib..16 * ib + 16]));
        let (max_scale, max_abs_scale) = signed_absmax(&scales, 0.0);
        let mut b = BlockQ6_K::zeroed();
        if max_abs_scale < GROUP_MAX_EPS {
            return b;
        }
        let iscale = -128.0 / max_scale;
        b.d = f16::from_f32(1.0 / iscale);
        for (dst, &s) in b.scales.iter_mut().zip(&scales) {
            *dst = nearest_int(iscale * s).min(127) as i8;
        }

        let mut levels = [0u8; QK_K];
        for j in 0..QK_K / 16 {
            let d = b.d.to_f32() * b.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let l = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                levels[16 * j + ii] = (l + 32) as u8;
            }
        }
        for h in 0..QK_K / 128 {
            let lv = &levels[128 * h..128 * h + 128];
            for l in 0..32 {
                let (q1, q2, q3, q4) = (lv[l], lv[l + 32], lv[l + 64], lv[l + 96]);
                b.ql[64 * h + l] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
                b.ql[64 * h + l + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
                b.qh[32 * h + l] =
                    (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        b
    }
}

// Integer dot products against Q8_K activations: ggml's
// `ggml_vec_dot_q*_K_q8_K_generic`. Q3_K..Q6_K keep ggml's 8 float lanes
// (`sums[8]`, summed at the end) so the float rounding matches too.

/// Q2_K x Q8_K: the mins meet the activations through `bsums`.
pub(crate) fn vec_dot_q2_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ2_K>(x).zip(read_blocks::<BlockQ8_K>(y)) {
        let summs: i32 = (0..16)
            .map(|j| yb.bsums[j] as i32 * (xb.scales[j] >> 4) as i32)
            .sum();
        let dall = yb.d * xb.d.to_f32();
        let dmin = yb.d * xb.dmin.to_f32();
        let mut isum = 0i32;
        for (g, &sc) in xb.scales.iter().enumerate() {
            let isuml: i32 = (16 * g..16 * g + 16)
                .map(|i| yb.qs[i] as i32 * q2_field(&xb.qs, i) as i32)
                .sum();
            isum += (sc & 0x0f) as i32 * isuml;
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// The shared tail of ggml's Q3_K..Q6_K dots: `a` holds the 256 signed
/// levels, `scale(g)` the integer scale of 16-element group g; products are
/// accumulated into 8 integer lanes, then `d * lane` into 8 float lanes.
fn lanes_accumulate(
    sums: &mut [f32; 8],
    d: f32,
    a: &[i8; QK_K],
    q8: &[i8; QK_K],
    scale: impl Fn(usize) -> i32,
) {
    let mut aux32 = [0i32; 8];
    for g in 0..QK_K / 16 {
        let sc = scale(g);
        for half in 0..2 {
            let base = 16 * g + 8 * half;
            for l in 0..8 {
                let aux16 = q8[base + l] as i32 * a[base + l] as i32;
                aux32[l] += sc * aux16;
            }
        }
    }
    for l in 0..8 {
        sums[l] += d * aux32[l] as f32;
    }
}

/// Q3_K x Q8_K.
pub(crate) fn vec_dot_q3_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in read_blocks::<BlockQ3_K>(x).zip(read_blocks::<BlockQ8_K>(y)) {
        let a: [i8; QK_K] = std::array::from_fn(|i| {
            q2_field(&xb.qs, i) as i8 - if high_bit(&xb.hmask, i) == 0 { 4 } else { 0 }
        });
        let scales = q3_k_scales(&xb.scales);
        let d = xb.d.to_f32() * yb.d;
        lanes_accumulate(&mut sums, d, &a, &yb.qs, |g| scales[g] as i32 - 32);
    }
    sums.iter().fold(0.0f32, |acc, &v| acc + v)
}

/// Q4_K x Q8_K: the mins meet the activations through `bsums`.
pub(crate) fn vec_dot_q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    vec_dot_k4::<BlockQ4_K>(x, y)
}

/// Q5_K x Q8_K, the same way.
pub(crate) fn vec_dot_q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    vec_dot_k4::<BlockQ5_K>(x, y)
}

/// Q4_K/Q5_K x Q8_K: scaled levels into the lanes, `dmin * sum(bsums * min)`
/// off `sumf`.
fn vec_dot_k4<B: K4Block>(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<B>(x).zip(read_blocks::<BlockQ8_K>(y)) {
        let a: [i8; QK_K] = std::array::from_fn(|i| xb.level(i) as i8);
        let (d, dmin, scales) = xb.d_dmin_scales();
        let sc_m: [(u8, u8); 8] = std::array::from_fn(|j| get_scale_min_k4(j, scales));
        let sumi: i32 = (0..QK_K / 16)
            .map(|j| yb.bsums[j] as i32 * sc_m[j / 2].1 as i32)
            .sum();
        lanes_accumulate(&mut sums, d.to_f32() * yb.d, &a, &yb.qs, |g| {
            sc_m[g / 2].0 as i32
        });
        sumf -= dmin.to_f32() * yb.d * sumi as f32;
    }
    // ggml: `for l in 0..8 { sumf += sums[l] }`, after the min terms.
    sums.iter().fold(sumf, |acc, &v| acc + v)
}

/// Q6_K x Q8_K.
pub(crate) fn vec_dot_q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in read_blocks::<BlockQ6_K>(x).zip(read_blocks::<BlockQ8_K>(y)) {
        let a: [i8; QK_K] = std::array::from_fn(|i| q6_level(&xb, i) as i8 - 32);
        let d = xb.d.to_f32() * yb.d;
        lanes_accumulate(&mut sums, d, &a, &yb.qs, |g| xb.scales[g] as i32);
    }
    sums.iter().fold(0.0f32, |acc, &v| acc + v)
}
