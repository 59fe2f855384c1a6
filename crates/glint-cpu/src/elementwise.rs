//! Row-wise and elementwise ops on f32: rms_norm, add, mul, scale, unary,
//! glu, softmax, argmax, set_rows.

use glint_backend::{Glu, Unary};
use half::f16;
use rayon::prelude::*;

/// Elements per rayon task for elementwise ops (below this, threads cost more than they save).
pub const ELEMS_PER_TASK: usize = 16 * 1024;

/// `f(j, row)` for each row of `n` elements of `out`: on the current rayon
/// pool when `par`, else on the calling thread — for decode-sized ops,
/// waking the pool costs more than the work.
pub fn rows<T: Send>(
    par: bool,
    out: &mut [T],
    n: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if par {
        out.par_chunks_mut(n).enumerate().for_each(|(j, o)| f(j, o));
    } else {
        out.chunks_mut(n).enumerate().for_each(|(j, o)| f(j, o));
    }
}

/// `out[:, j] = x[:, j] / sqrt(mean(x[:, j]^2) + eps) * w`.
/// `x`, `out`: `[n, m]`; `w`: `[n]` or none. The sum of squares is f64, as ggml's.
pub fn rms_norm(par: bool, x: &[f32], w: Option<&[f32]>, eps: f32, n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    rows(par, out, n, |j, o| {
        let xr = &x[j * n..(j + 1) * n];
        let sum: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (sum / n as f64) as f32;
        let s = 1.0 / (mean + eps).sqrt();
        match w {
            Some(w) => {
                for ((o, &v), &wv) in o.iter_mut().zip(xr).zip(w) {
                    *o = v * s * wv;
                }
            }
            None => {
                for (o, &v) in o.iter_mut().zip(xr) {
                    *o = v * s;
                }
            }
        }
    });
}

/// `out = a (op) b`, with `b` either the same shape as `a` or one row `[n]`
/// broadcast over columns.
pub fn binary(
    par: bool,
    a: &[f32],
    b: &[f32],
    n: usize,
    out: &mut [f32],
    f: impl Fn(f32, f32) -> f32 + Sync + Send,
) {
    if n == 0 {
        return;
    }
    let broadcast = b.len() != a.len();
    rows(par, out, n, |j, o| {
        let ar = &a[j * n..(j + 1) * n];
        let br = if broadcast {
            &b[..n]
        } else {
            &b[j * n..(j + 1) * n]
        };
        for ((o, &x), &y) in o.iter_mut().zip(ar).zip(br) {
            *o = f(x, y);
        }
    });
}

/// `out[i] = f(x[i])`.
pub fn map(par: bool, x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32 + Sync + Send) {
    rows(par, out, ELEMS_PER_TASK, |j, o| {
        let xs = &x[j * ELEMS_PER_TASK..];
        for (o, &v) in o.iter_mut().zip(xs) {
            *o = f(v);
        }
    });
}

/// `x * sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// ggml's tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

/// ggml's cpu GELU (`GGML_GELU_FP16`, on by default): `x` rounded to f16
/// indexes a table of `f16(gelu(x))`; below -10 it is 0, from 10 up `x`.
/// What llama.cpp computes, and a lookup instead of a `tanh`.
pub fn gelu_ggml(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let t = gelu_table();
        f16::from_bits(t[f16::from_f32(x).to_bits() as usize]).to_f32()
    }
}

/// `out = gelu_ggml(g) * u`, elementwise over equal lengths: chunks of
/// [`ELEMS_PER_TASK`] on the pool when `par`. With F16C, eight at a time
/// (`vcvtps2ph` rounds to nearest even as `f16::from_f32` does, then the
/// table, then `vcvtph2ps`): the same bits as the scalar loop, which
/// converted through `half` one element at a time.
pub fn geglu_ggml(par: bool, g: &[f32], u: &[f32], out: &mut [f32]) {
    rows(par, out, ELEMS_PER_TASK, |j, o| {
        let at = j * ELEMS_PER_TASK;
        geglu_ggml_span(&g[at..at + o.len()], &u[at..at + o.len()], o)
    });
}

fn geglu_ggml_span(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::qdot::has_avx2() {
        return wide::geglu_ggml(g, u, out);
    }
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = gelu_ggml(g) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wide {
    use super::*;
    use std::arch::x86_64::*;

    pub(super) fn geglu_ggml(g: &[f32], u: &[f32], out: &mut [f32]) {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn tf(g: &[f32], u: &[f32], out: &mut [f32]) {
            let t = gelu_table();
            let n = out.len().min(g.len()).min(u.len());
            let full = n / 8 * 8;
            let (low, high) = (_mm256_set1_ps(-10.0), _mm256_set1_ps(10.0));
            for i in (0..full).step_by(8) {
                let gs: &[f32; 8] = g[i..i + 8].try_into().unwrap();
                let us: &[f32; 8] = u[i..i + 8].try_into().unwrap();
                // SAFETY (the loads and stores): each pointer is to 8 f32
                // (16 bytes for the halves) just bounds-checked or local.
                let x = unsafe { _mm256_loadu_ps(gs.as_ptr()) };
                let mut h = [0u16; 8];
                let hx = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                unsafe { _mm_storeu_si128(h.as_mut_ptr().cast(), hx) };
                let mut looked = [0u16; 8];
                for (v, &k) in looked.iter_mut().zip(&h) {
                    *v = t[k as usize];
                }
                let table = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(looked.as_ptr().cast()) });
                // x at or above 10 is x, at or below -10 is +0.
                let kept = _mm256_blendv_ps(table, x, _mm256_cmp_ps::<_CMP_GE_OQ>(x, high));
                let act = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, low), kept);
                let o = _mm256_mul_ps(act, unsafe { _mm256_loadu_ps(us.as_ptr()) });
                let os: &mut [f32; 8] = (&mut out[i..i + 8]).try_into().unwrap();
                unsafe { _mm256_storeu_ps(os.as_mut_ptr(), o) };
            }
            for i in full..n {
                out[i] = gelu_ggml(g[i]) * u[i];
            }
        }
        // SAFETY: called only after `has_avx2()` confirmed AVX2, FMA and F16C.
        unsafe { tf(g, u, out) }
    }
}

/// `table[h] = f16(gelu(f32(h)))` for every f16 bit pattern `h`: 128 KiB,
/// built once.
fn gelu_table() -> &'static [u16; 1 << 16] {
    static TABLE: std::sync::OnceLock<Box<[u16; 1 << 16]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0u16; 1 << 16]);
        for (h, v) in t.iter_mut().enumerate() {
            *v = f16::from_f32(gelu(f16::from_bits(h as u16).to_f32())).to_bits();
        }
        t
    })
}

/// The activation of `op` in f32 (the oracle's, and the WGSL kernels').
pub fn unary_fn(op: Unary) -> fn(f32) -> f32 {
    match op {
        Unary::Silu => silu,
        Unary::Gelu => gelu,
    }
}

/// The gate activation of `op` in f32.
pub fn glu_fn(op: Glu) -> fn(f32) -> f32 {
    match op {
        Glu::SwiGlu => silu,
        Glu::GeGlu => gelu,
    }
}

/// The activation of `op` as ggml's cpu computes it (GELU by table).
pub fn unary_fn_ggml(op: Unary) -> fn(f32) -> f32 {
    match op {
        Unary::Silu => silu,
        Unary::Gelu => gelu_ggml,
    }
}

/// The gate activation of `op` as ggml's cpu computes it (GELU by table).
pub fn glu_fn_ggml(op: Glu) -> fn(f32) -> f32 {
    match op {
        Glu::SwiGlu => silu,
        Glu::GeGlu => gelu_ggml,
    }
}

/// Softmax of each row of `n`: max-subtracted, sum in f64.
/// A row of all -inf gives zeros (nothing to attend to), never NaN.
pub fn softmax(par: bool, x: &[f32], n: usize, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    rows(par, out, n, |j, o| softmax_row(&x[j * n..(j + 1) * n], o));
}

pub fn softmax_row(x: &[f32], out: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        out.fill(0.0);
        return;
    }
    let mut sum = 0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - max).exp();
        sum += *o as f64;
    }
    let inv = (1.0 / sum) as f32;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// Index of the largest value of each row of `n` (the first on ties).
pub fn argmax(par: bool, x: &[f32], n: usize, out: &mut [i32]) {
    if n == 0 {
        return;
    }
    rows(par, out, 1, |j, o| {
        o[0] = argmax_row(&x[j * n..(j + 1) * n]) as i32
    });
}

/// The index of `x`'s largest value, the first on ties: what the loop
/// `if v > x[best] { best = i }` from `best = 0` gives (a NaN is never
/// taken, and a NaN at 0 is never left), in two passes that vectorize —
/// the largest value in 8 lanes, then the first index holding it — where
/// that loop's compare chains a whole vocabulary's logits.
pub fn argmax_row(x: &[f32]) -> usize {
    const L: usize = 8;
    match x.first() {
        None => return 0,
        Some(v) if v.is_nan() => return 0,
        Some(_) => {}
    }
    // Lane-wise `if v > m { v } else { m }`: a NaN never replaces.
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = x.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let top = tail
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    // The first element equal to it (x[0] is a number, so one is: the
    // first value the loop would keep; -0 and +0 compare equal there too).
    let at = x
        .chunks(L)
        .position(|c| c.iter().fold(false, |any, &v| any | (v == top)))
        .unwrap_or(0);
    at * L + x[at * L..].iter().position(|&v| v == top).unwrap_or(0)
}

/// Backend::top_k of each row of `n`: the count of keys at or above the
/// `k`-th largest, then the first `cap` of those elements by index, as
/// (index, logit bits) pairs. The plain twin of `shaders/top_k.wgsl`: a
/// selection of the keys (`select_nth_unstable`), not a radix select.
pub fn top_k(par: bool, x: &[f32], n: usize, k: usize, cap: usize, out: &mut [i32]) {
    if n == 0 {
        return;
    }
    let k = k.min(n);
    let stride = 1 + 2 * cap;
    rows(par, out, stride, |j, o| {
        let xr = &x[j * n..(j + 1) * n];
        let mut keys: Vec<u32> = xr
            .iter()
            .map(|&v| glint_backend::check::top_k_key(v))
            .collect();
        let t = *keys.select_nth_unstable_by(k - 1, |a, b| b.cmp(a)).1;
        let mut count = 0usize;
        for (i, &v) in xr.iter().enumerate() {
            if glint_backend::check::top_k_key(v) >= t {
                if count < cap {
                    o[1 + 2 * count] = i as i32;
                    o[2 + 2 * count] = v.to_bits() as i32;
                }
                count += 1;
            }
        }
        o[0] = count as i32;
    });
}

/// `dst[:, idx[i]] = src[:, i]`; rows outside `dst` are skipped.
/// `src`: `[n, m]` f32; `dst`: `[n, n_rows]` f32.
pub fn set_rows_f32(src: &[f32], idx: &[i32], n: usize, dst: &mut [f32]) {
    set_rows(src, idx, n, dst, |v| v);
}

/// As [`set_rows_f32`] into an f16 cache, rounding as `f16::from_f32`.
pub fn set_rows_f16(src: &[f32], idx: &[i32], n: usize, dst: &mut [f16]) {
    set_rows(src, idx, n, dst, f16::from_f32);
}

fn set_rows<T: Copy>(src: &[f32], idx: &[i32], n: usize, dst: &mut [T], conv: impl Fn(f32) -> T) {
    if n == 0 {
        return;
    }
    let n_rows = dst.len() / n;
    for (i, &id) in idx.iter().enumerate() {
        if let Ok(r) = usize::try_from(id) {
            if r < n_rows {
                for (d, &s) in dst[r * n..(r + 1) * n]
                    .iter_mut()
                    .zip(&src[i * n..(i + 1) * n])
                {
                    *d = conv(s);
                }
            }
        }
    }
}
