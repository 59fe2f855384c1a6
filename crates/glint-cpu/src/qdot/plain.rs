//! The plain kernels, over fixed-size block arrays so the compiler can
//! vectorize them without bounds checks. Helpers are `#[inline(always)]` so
//! the AVX2 module can compile the same code for AVX2 (Q2_K, Q3_K, Q5_K).

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

/// `sumf += term(x block, y block)` over the blocks in order, as ggml's
/// loops add them.
#[inline(always)]
fn sum_blocks(
    x: &[u8],
    y: &[u8],
    x_size: usize,
    y_size: usize,
    term: impl Fn(&[u8], &[u8]) -> f32,
) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(x_size).zip(y.chunks_exact(y_size)) {
        sumf += term(xb, yb);
    }
    sumf
}

pub fn q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    sum_blocks(x, y, Q4_0, Q8_0, |xb, yb| {
        let sumi = nibble_dot(arr(xb, 2), 0, 8, &q8(yb, 2));
        sumi as f32 * f16_at(xb, 0) * f16_at(yb, 0)
    })
}

pub fn q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    sum_blocks(x, y, Q4_1, Q8_1, |xb, yb| {
        let sumi = nibble_dot(arr(xb, 4), 0, 0, &q8(yb, 4));
        (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32 + f16_at(xb, 2) * f16_at(yb, 2)
    })
}

pub fn q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    sum_blocks(x, y, Q5_0, Q8_0, |xb, yb| {
        let qh = u32::from_le_bytes(*arr(xb, 2));
        let sumi = nibble_dot(arr(xb, 6), qh, 16, &q8(yb, 2));
        (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32
    })
}

pub fn q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    sum_blocks(x, y, Q5_1, Q8_1, |xb, yb| {
        let qh = u32::from_le_bytes(*arr(xb, 4));
        let sumi = nibble_dot(arr(xb, 8), qh, 0, &q8(yb, 4));
        (f16_at(xb, 0) * f16_at(yb, 0)) * sumi as f32 + f16_at(xb, 2) * f16_at(yb, 2)
    })
}

pub fn q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    sum_blocks(x, y, Q8_0, Q8_0, |xb, yb| {
        let (xq, yq) = (q8(xb, 2), q8(yb, 2));
        let mut sumi = 0i32;
        for j in 0..32 {
            sumi += xq[j] * yq[j];
        }
        sumi as f32 * (f16_at(xb, 0) * f16_at(yb, 0))
    })
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

/// Q4_K/Q5_K: `levels(block)` gives a weight block's 256 levels; each
/// block's lanes and mins as ggml's loop adds them. `prefetch(block)` is
/// a hint before each block (the AVX2 build prefetches; the plain one not).
#[inline(always)]
fn k4_dot(
    x: &[u8],
    y: &[u8],
    x_size: usize,
    prefetch: impl Fn(&[u8]),
    levels: impl Fn(&[u8]) -> [i8; 256],
) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(x_size).zip(y.chunks_exact(Q8_K)) {
        prefetch(xb);
        k4_tail(&mut sums, &mut sumf, &levels(xb), xb, yb);
    }
    sums.iter().fold(sumf, |acc, &v| acc + v)
}

/// A Q4_K block's 256 levels (0..16).
#[inline(always)]
fn q4_k_levels(xb: &[u8]) -> [i8; 256] {
    let qs: &[u8; 128] = arr(xb, 16);
    let mut a = [0i8; 256];
    for h in 0..4 {
        for l in 0..32 {
            a[64 * h + l] = (qs[32 * h + l] & 0x0f) as i8;
            a[64 * h + 32 + l] = (qs[32 * h + l] >> 4) as i8;
        }
    }
    a
}

/// A Q5_K block's 256 levels (0..32).
#[inline(always)]
fn q5_k_levels(xb: &[u8]) -> [i8; 256] {
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
    a
}

pub fn q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    k4_dot(x, y, Q4_K, |_| {}, q4_k_levels)
}

pub fn q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    q5_k_q8_k_body(x, y, |_| {})
}

/// [`q5_k_q8_k`] with a prefetch hint, for the AVX2 build.
#[inline(always)]
pub(super) fn q5_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
    k4_dot(x, y, Q5_K, prefetch, q5_k_levels)
}

pub fn q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in x.chunks_exact(Q6_K).zip(y.chunks_exact(Q8_K)) {
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

/// The 2-bit fields of Q2_K/Q3_K's `qs` (0..4): element `128 h + 32 s + l`
/// is bits `2s..2s+2` of `qs[32 h + l]`.
#[inline(always)]
fn q2_levels(qs: &[u8; 64]) -> [i8; 256] {
    let mut a = [0i8; 256];
    for h in 0..2 {
        for s in 0..4 {
            for l in 0..32 {
                a[128 * h + 32 * s + l] = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
            }
        }
    }
    a
}

pub fn q2_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    q2_k_q8_k_body(x, y, |_| {})
}

/// Q2_K x Q8_K as ggml's generic loop: per block, `dall * isum - dmin *
/// summs` with `isum` the levels scaled by each group's low nibble and
/// `summs` the mins (high nibbles) through `bsums`. With a prefetch hint,
/// for the AVX2 build.
#[inline(always)]
pub(super) fn q2_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
    let mut sumf = 0.0f32;
    for (xb, yb) in x.chunks_exact(Q2_K).zip(y.chunks_exact(Q8_K)) {
        prefetch(xb);
        let scales: &[u8; 16] = arr(xb, 0);
        let a = q2_levels(arr(xb, 16));
        let q8: &[u8; 256] = arr(yb, 4);
        let bsums: &[u8; 32] = arr(yb, 4 + 256);
        let mut summs = 0i32;
        for j in 0..16 {
            let b = i16::from_le_bytes([bsums[2 * j], bsums[2 * j + 1]]) as i32;
            summs += b * (scales[j] >> 4) as i32;
        }
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let mut isuml = 0i32;
            for i in 16 * g..16 * g + 16 {
                isuml += q8[i] as i8 as i32 * a[i] as i32;
            }
            isum += (sc & 0x0f) as i32 * isuml;
        }
        let yd = f32_at(yb, 0);
        let dall = yd * f16_at(xb, 80);
        let dmin = yd * f16_at(xb, 82);
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

pub fn q3_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    q3_k_q8_k_body(x, y, |_| {})
}

/// Q3_K x Q8_K as ggml's generic loop: levels `field - 4` where the high
/// bit (bit `i / 32` of `hmask[i % 32]`) is clear, 6-bit scales `- 32`,
/// ggml's 8 lanes.
#[inline(always)]
pub(super) fn q3_k_q8_k_body(x: &[u8], y: &[u8], prefetch: impl Fn(&[u8])) -> f32 {
    let mut sums = [0.0f32; 8];
    for (xb, yb) in x.chunks_exact(Q3_K).zip(y.chunks_exact(Q8_K)) {
        prefetch(xb);
        let hmask: &[u8; 32] = arr(xb, 0);
        let mut a = q2_levels(arr(xb, 32));
        for c in 0..8 {
            for l in 0..32 {
                a[32 * c + l] -= (((hmask[l] >> c) & 1) ^ 1) as i8 * 4;
            }
        }
        let s: &[u8; 12] = arr(xb, 96);
        let sc: [i32; 16] = std::array::from_fn(|i| {
            let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
            let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
            (low | (high << 4)) as i32 - 32
        });
        let aux = lanes(&a, arr(yb, 4), &sc);
        let d = f16_at(xb, 108) * f32_at(yb, 0);
        for l in 0..8 {
            sums[l] += d * aux[l] as f32;
        }
    }
    sums.iter().fold(0.0f32, |acc, &v| acc + v)
}
