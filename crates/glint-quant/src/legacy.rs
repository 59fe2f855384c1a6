//! The 32-element "legacy" formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Element order inside a block (ggml's): the low nibbles of `qs` hold
//! elements 0..16 and the high nibbles 16..32; in the 5-bit formats bit `j`
//! of `qh` (a little-endian u32) is the fifth bit of element `j`.
//!
//! Quantizers follow gguf-py's numpy code, which is byte-identical to ggml's
//! `quantize_row_*_ref` except that it starts the |max| search at `x[0]`
//! (only a block of all `-0.0` tells the two apart).

use crate::block::{read_blocks, signed_absmax, Block, Quantize};
use bytemuck::{Pod, Zeroable};
use half::f16;

pub const QK: usize = 32;

/// 4-bit, symmetric: `x = d * (q - 8)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: f16,
    /// elements j (low nibble) and j + 16 (high nibble)
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

/// 4-bit with an offset: `x = d * q + m`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

/// 5-bit, symmetric: `x = d * (q - 16)`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: f16,
    /// fifth bits, little-endian u32, bit j for element j
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

/// 5-bit with an offset: `x = d * q + m`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

/// 8-bit, symmetric: `x = d * q`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

/// 8-bit activations for the Q4_1/Q5_1 dots: `x = d * q`, plus
/// `s = d * sum(qs)` so the weight's offset `m` costs one multiply per block.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_1>() == 36);

/// The value at |max| (first one on ties), as numpy's `argmax(abs)` picks it.
fn absmax_from_x0(x: &[f32]) -> f32 {
    signed_absmax(x, x[0]).0
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((x[0], x[0]), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// `1/d`, or 0 for an all-zero block so it quantizes to q = offset.
fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// Truncating f32 -> level, clamped to `max_q` (ggml: `MIN(max_q, (int8_t)(v))`
/// where v >= 0 by construction).
fn trunc_level(v: f32, max_q: u8) -> u8 {
    (v.trunc() as u8).min(max_q)
}

/// The 4- and 5-bit blocks' levels, unsigned (before any `- 8` or `- 16`),
/// in pairs `(j, j + 16)` for `j < 16` as ggml's loops take them.
trait Pairs: Pod {
    fn pair(&self, j: usize) -> (i32, i32);
}

/// Low and high nibble of `qs[j]`.
fn nibbles(qs: &[u8; QK / 2], j: usize) -> (i32, i32) {
    ((qs[j] & 0x0f) as i32, (qs[j] >> 4) as i32)
}

/// The nibbles plus their fifth bits, bits `j` and `j + 16` of `qh`.
fn nibbles_5(qs: &[u8; QK / 2], qh: [u8; 4], j: usize) -> (i32, i32) {
    let qh = u32::from_le_bytes(qh);
    let h0 = ((qh >> j) & 1) as u8;
    let h1 = ((qh >> (j + QK / 2)) & 1) as u8;
    (
        ((qs[j] & 0x0f) | (h0 << 4)) as i32,
        ((qs[j] >> 4) | (h1 << 4)) as i32,
    )
}

impl Pairs for BlockQ4_0 {
    fn pair(&self, j: usize) -> (i32, i32) {
        nibbles(&self.qs, j)
    }
}

impl Pairs for BlockQ4_1 {
    fn pair(&self, j: usize) -> (i32, i32) {
        nibbles(&self.qs, j)
    }
}

impl Pairs for BlockQ5_0 {
    fn pair(&self, j: usize) -> (i32, i32) {
        nibbles_5(&self.qs, self.qh, j)
    }
}

impl Pairs for BlockQ5_1 {
    fn pair(&self, j: usize) -> (i32, i32) {
        nibbles_5(&self.qs, self.qh, j)
    }
}

/// `x = d * (q - offset)` for Q4_0 and Q5_0.
fn dequantize_symmetric<B: Pairs>(b: &B, d: f16, offset: i32, y: &mut [f32]) {
    let d = d.to_f32();
    for j in 0..QK / 2 {
        let (q0, q1) = b.pair(j);
        y[j] = d * (q0 - offset) as f32;
        y[j + QK / 2] = d * (q1 - offset) as f32;
    }
}

/// `x = d * q + m` for Q4_1 and Q5_1.
fn dequantize_with_min<B: Pairs>(b: &B, d: f16, m: f16, y: &mut [f32]) {
    let (d, m) = (d.to_f32(), m.to_f32());
    for j in 0..QK / 2 {
        let (q0, q1) = b.pair(j);
        y[j] = d * q0 as f32 + m;
        y[j + QK / 2] = d * q1 as f32 + m;
    }
}

/// `sum(x_j * y_j)` over a block of levels (less `offset`) and Q8 levels,
/// as ggml sums them: two halves, added at the end (exact in i32).
fn pair_dot<B: Pairs>(xb: &B, offset: i32, yq: &[i8; QK]) -> i32 {
    let (mut sumi0, mut sumi1) = (0i32, 0i32);
    for j in 0..QK / 2 {
        let (v0, v1) = xb.pair(j);
        sumi0 += (v0 - offset) * yq[j] as i32;
        sumi1 += (v1 - offset) * yq[j + QK / 2] as i32;
    }
    sumi0 + sumi1
}

impl Block for BlockQ4_0 {
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_symmetric(self, self.d, 8, y);
    }
}

impl Quantize for BlockQ4_0 {
    fn quantize(x: &[f32]) -> Self {
        let d = absmax_from_x0(&x[..QK]) / -8.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for j in 0..QK / 2 {
            let q0 = trunc_level(x[j] * id + 8.5, 15);
            let q1 = trunc_level(x[j + QK / 2] * id + 8.5, 15);
            qs[j] = q0 | (q1 << 4);
        }
        BlockQ4_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

impl Block for BlockQ4_1 {
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_with_min(self, self.d, self.m, y);
    }
}

impl Quantize for BlockQ4_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(&x[..QK]);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        let mut qs = [0u8; QK / 2];
        for j in 0..QK / 2 {
            let q0 = trunc_level((x[j] - min) * id + 0.5, 15);
            let q1 = trunc_level((x[j + QK / 2] - min) * id + 0.5, 15);
            qs[j] = q0 | (q1 << 4);
        }
        BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs,
        }
    }
}

impl Block for BlockQ5_0 {
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_symmetric(self, self.d, 16, y);
    }
}

/// Packs 32 five-bit levels into (`qh`, `qs`).
fn pack_q5(q: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
    let mut qs = [0u8; QK / 2];
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0f) | (q[j + QK / 2] << 4);
    }
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from(v >> 4) << j;
    }
    (qh.to_le_bytes(), qs)
}

impl Quantize for BlockQ5_0 {
    fn quantize(x: &[f32]) -> Self {
        let d = absmax_from_x0(&x[..QK]) / -16.0;
        let id = inverse(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_level(x[j] * id + 16.5, 31));
        let (qh, qs) = pack_q5(&q);
        BlockQ5_0 {
            d: f16::from_f32(d),
            qh,
            qs,
        }
    }
}

impl Block for BlockQ5_1 {
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_with_min(self, self.d, self.m, y);
    }
}

impl Quantize for BlockQ5_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(&x[..QK]);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let q: [u8; QK] = std::array::from_fn(|j| trunc_level((x[j] - min) * id + 0.5, 31));
        let (qh, qs) = pack_q5(&q);
        BlockQ5_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh,
            qs,
        }
    }
}

impl Block for BlockQ8_0 {
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_q8(self.d, &self.qs, y);
    }
}

/// `x = q * d` for Q8_0 and Q8_1.
fn dequantize_q8(d: f16, qs: &[i8; QK], y: &mut [f32]) {
    let d = d.to_f32();
    for (out, &q) in y[..QK].iter_mut().zip(qs) {
        *out = q as f32 * d;
    }
}

/// The Q8_0/Q8_1 scale: `d = amax / 127`, levels `round(x / d)` (half away
/// from zero, C's `roundf`).
fn q8_levels(x: &[f32]) -> (f32, [i8; QK]) {
    let amax = x[..QK].iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    (d, std::array::from_fn(|j| (x[j] * id).round() as i8))
}

impl Quantize for BlockQ8_0 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_levels(x);
        BlockQ8_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

impl Block for BlockQ8_1 {
    /// `s` is redundant for dequantization; ggml has no `dequantize_row_q8_1`
    /// and the value is `d * q` like Q8_0.
    const BLOCK_SIZE: usize = QK;
    fn dequantize(&self, y: &mut [f32]) {
        dequantize_q8(self.d, &self.qs, y);
    }
}

impl Quantize for BlockQ8_1 {
    /// ggml's `quantize_row_q8_1_ref`: Q8_0's levels plus `s = sum(qs) * d`
    /// with the f32 `d` (before it is rounded to f16).
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_levels(x);
        let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
        BlockQ8_1 {
            d: f16::from_f32(d),
            s: f16::from_f32(sum as f32 * d),
            qs,
        }
    }
}

// Integer dot products, one weight row against one row of quantized
// activations: ggml's `ggml_vec_dot_*_generic`, including the order of the
// float operations in each block's contribution. The callers have checked
// that both rows hold the same number of whole blocks.

/// Q4_0 x Q8_0.
pub(crate) fn vec_dot_q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ4_0>(x).zip(read_blocks::<BlockQ8_0>(y)) {
        let sumi = pair_dot(&xb, 8, &yb.qs);
        sumf += sumi as f32 * xb.d.to_f32() * yb.d.to_f32();
    }
    sumf
}

/// Q5_0 x Q8_0 (ggml multiplies the scales first here, unlike Q4_0).
pub(crate) fn vec_dot_q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ5_0>(x).zip(read_blocks::<BlockQ8_0>(y)) {
        let sumi = pair_dot(&xb, 16, &yb.qs);
        sumf += (xb.d.to_f32() * yb.d.to_f32()) * sumi as f32;
    }
    sumf
}

/// Q4_1 x Q8_1: the offset term is `m * s` (s = d_y * sum(q_y)).
pub(crate) fn vec_dot_q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ4_1>(x).zip(read_blocks::<BlockQ8_1>(y)) {
        sumf += with_min_term(pair_dot(&xb, 0, &yb.qs), xb.d, xb.m, &yb);
    }
    sumf
}

/// Q5_1 x Q8_1, the same way.
pub(crate) fn vec_dot_q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ5_1>(x).zip(read_blocks::<BlockQ8_1>(y)) {
        sumf += with_min_term(pair_dot(&xb, 0, &yb.qs), xb.d, xb.m, &yb);
    }
    sumf
}

/// One Q4_1/Q5_1 block's contribution: `(d_x * d_y) * sumi + m * s`.
fn with_min_term(sumi: i32, d: f16, m: f16, yb: &BlockQ8_1) -> f32 {
    (d.to_f32() * yb.d.to_f32()) * sumi as f32 + m.to_f32() * yb.s.to_f32()
}

/// Q8_0 x Q8_0.
pub(crate) fn vec_dot_q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in read_blocks::<BlockQ8_0>(x).zip(read_blocks::<BlockQ8_0>(y)) {
        let sumi: i32 = (0..QK).map(|j| xb.qs[j] as i32 * yb.qs[j] as i32).sum();
        sumf += sumi as f32 * (xb.d.to_f32() * yb.d.to_f32());
    }
    sumf
}
