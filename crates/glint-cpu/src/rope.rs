//! RoPE (NORM and NEOX, YaRN) and the K-shift that re-rotates cached keys.
//!
//! Angles and their cos/sin are computed in f64 and rounded once to f32:
//! positions reach the tens of thousands, where an f32 angle is off by
//! ~1e-3 rad, and the K-shift invariant `shift(rope(k, p), q - p) == rope(k, q)`
//! is meant to hold to f32 precision.

use crate::matmul::Cached;
use glint_backend::{RopeMode, RopeParams};
use half::f16;
use rayon::prelude::*;
use std::cell::RefCell;

/// Per-pair `(cos, sin)` for one position, scaled by `mscale` when `magnitude`.
///
/// `theta_i(pos)` is linear in `pos`, so the K-shift by `delta` uses
/// `theta_i(delta) = theta_i(q) - theta_i(p)` with `magnitude = false`.
pub fn cos_sin(p: &RopeParams, pos: f64, magnitude: bool, cs: &mut [(f32, f32)]) {
    cos_sin_with(p, &inv_freqs(p, cs.len()), pos, magnitude, cs)
}

/// `base^(-2i / n_rot)` for the first `n` pairs: the part of every angle
/// that does not depend on the position, computed once per op.
fn inv_freqs(p: &RopeParams, n: usize) -> Vec<f64> {
    let (n_rot, base) = (p.n_rot as f64, p.freq_base as f64);
    (0..n).map(|i| base.powf(-2.0 * i as f64 / n_rot)).collect()
}

/// [`cos_sin`] with the pairs' inverse frequencies from [`inv_freqs`].
fn cos_sin_with(
    p: &RopeParams,
    inv_freq: &[f64],
    pos: f64,
    magnitude: bool,
    cs: &mut [(f32, f32)],
) {
    let freq_scale = p.freq_scale as f64;
    let ext_factor = p.ext_factor as f64;
    let [lo, hi] = p.yarn_corr_dims().map(|v| v as f64);
    let mut mscale = p.attn_factor as f64;
    if ext_factor != 0.0 {
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    if !magnitude {
        mscale = 1.0;
    }
    for (i, (c, &f)) in cs.iter_mut().zip(inv_freq).enumerate() {
        let theta_extrap = pos * f;
        let theta_interp = freq_scale * theta_extrap;
        let theta = if ext_factor != 0.0 {
            let y = (i as f64 - lo) / (hi - lo).max(0.001);
            let ramp = (1.0 - y.clamp(0.0, 1.0)) * ext_factor;
            theta_interp * (1.0 - ramp) + theta_extrap * ramp
        } else {
            theta_interp
        };
        *c = ((theta.cos() * mscale) as f32, (theta.sin() * mscale) as f32);
    }
}

/// The two indices of pair `i` within a head.
#[inline]
pub fn pair(mode: RopeMode, n_rot: usize, i: usize) -> (usize, usize) {
    match mode {
        RopeMode::Norm => (2 * i, 2 * i + 1),
        RopeMode::Neox => (i, i + n_rot / 2),
    }
}

/// Rotate one head: `src` → `dst` (both `[head_dim]`), dims `n_rot..` copied.
#[inline]
fn rotate_head(p: &RopeParams, cs: &[(f32, f32)], src: &[f32], dst: &mut [f32]) {
    dst.copy_from_slice(src);
    for (i, &(c, s)) in cs.iter().enumerate() {
        let (a, b) = pair(p.mode, p.n_rot, i);
        let (x0, x1) = (src[a], src[b]);
        dst[a] = x0 * c - x1 * s;
        dst[b] = x0 * s + x1 * c;
    }
}

/// `x`, `out`: `[head_dim, n_head, m]` f32; `pos`: `[m]`.
/// On the current rayon pool when `par`, else on the calling thread.
pub fn rope(par: bool, x: &[f32], pos: &[i32], p: &RopeParams, out: &mut [f32]) {
    let tok = p.head_dim * p.n_head;
    if tok == 0 {
        return;
    }
    let half = p.n_rot / 2;
    let pos = &pos[..out.len() / tok];
    with_table(par, p, pos, |cs| {
        // cs: [m, n_rot/2] (cos, sin)
        crate::elementwise::rows(par, out, tok, |j, o| {
            let (xt, cs) = (&x[j * tok..(j + 1) * tok], &cs[j * half..(j + 1) * half]);
            for (oh, xh) in o.chunks_mut(p.head_dim).zip(xt.chunks(p.head_dim)) {
                rotate_head(p, cs, xh, oh);
            }
        });
    });
}

/// One `(cos, sin)` table: what it was computed for, and its pairs.
struct Table {
    /// The parameters, with those that do not change an angle (mode,
    /// heads) cleared: Q and K of a layer share a table.
    key: RopeParams,
    /// pos: `[m]`; cs: `[m, n_rot/2]` (cos, sin).
    pos: Cached<i32>,
    cs: Cached<(f32, f32)>,
}

/// Tables a thread keeps: a forward pass ropes Q and K at every layer
/// with the same positions and one set of parameters (two for models that
/// alternate local and global layers, such as Gemma 3), so the table is
/// computed once a batch, where it was computed twice a layer.
const KEEP_TABLES: usize = 2;

/// The most pairs a kept table holds (8 MiB); a larger one is computed,
/// used and freed.
const KEEP_PAIRS: usize = 1 << 20;

thread_local! {
    /// This thread's kept tables, the newest first (counted in the thread
    /// scratch).
    static TABLES: RefCell<Vec<Table>> = const { RefCell::new(Vec::new()) };
}

/// `f` with the `(cos, sin)` table of `pos` (`[m, n_rot/2]`, the
/// magnitude applied): a kept one where this thread computed it for the
/// same angles, else a new one, kept where it is small enough. The same
/// numbers either way ([`cos_sin_with`] per position).
fn with_table<R>(par: bool, p: &RopeParams, pos: &[i32], f: impl FnOnce(&[(f32, f32)]) -> R) -> R {
    let key = RopeParams {
        mode: RopeMode::Norm,
        head_dim: 0,
        n_head: 0,
        ..*p
    };
    let half = p.n_rot / 2;
    let compute = || {
        let inv_freq = inv_freqs(p, half);
        let mut cs = vec![(0f32, 0f32); pos.len() * half];
        crate::elementwise::rows(par, &mut cs, half.max(1), |j, c| {
            cos_sin_with(p, &inv_freq, pos[j] as f64, true, c)
        });
        cs
    };
    TABLES.with(|cell| {
        // A worker waiting inside one op can run another's start on this
        // thread: then the tables are in use, and this call keeps nothing.
        let Ok(mut tables) = cell.try_borrow_mut() else {
            return f(&compute());
        };
        let found = tables
            .iter()
            .position(|t| t.key == key && t.pos.as_slice() == pos);
        let i = match found {
            Some(i) => i,
            None if pos.len() * half <= KEEP_PAIRS => {
                tables.truncate(KEEP_TABLES - 1);
                let pos = Cached::keep(pos.to_vec());
                tables.insert(
                    0,
                    Table {
                        key,
                        pos,
                        cs: Cached::keep(compute()),
                    },
                );
                0
            }
            None => return f(&compute()),
        };
        f(tables[i].cs.as_slice())
    })
}

/// An element of a K cache: f32, or f16 widened to f32 for the rotation
/// and rounded back.
pub trait CacheElem: Copy + Send + Sync {
    fn widen(self) -> f32;
    fn narrow(v: f32) -> Self;
}

impl CacheElem for f32 {
    fn widen(self) -> f32 {
        self
    }
    fn narrow(v: f32) -> Self {
        v
    }
}

impl CacheElem for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> Self {
        f16::from_f32(v)
    }
}

/// K-shift of a cache in place: each head is widened to f32, rotated,
/// narrowed back. `k`: `[head_dim * n_head, n_rows]`; `shift`: `[n_rows]`.
pub fn kshift<T: CacheElem>(k: &mut [T], shift: &[i32], p: &RopeParams) {
    let row = p.head_dim * p.n_head;
    if row == 0 {
        return;
    }
    let inv_freq = inv_freqs(p, p.n_rot / 2);
    k.par_chunks_mut(row).zip(shift.par_iter()).for_each_init(
        || {
            let hd = p.head_dim;
            (
                vec![(0f32, 0f32); p.n_rot / 2],
                vec![0f32; hd],
                vec![0f32; hd],
            )
        },
        |(cs, src, dst), (kr, &d)| {
            if d == 0 {
                return;
            }
            cos_sin_with(p, &inv_freq, d as f64, false, cs);
            for kh in kr.chunks_mut(p.head_dim) {
                for (s, h) in src.iter_mut().zip(kh.iter()) {
                    *s = h.widen();
                }
                rotate_head(p, cs, src, dst);
                for (h, &v) in kh.iter_mut().zip(dst.iter()) {
                    *h = T::narrow(v);
                }
            }
        },
    );
}

/// K-shift of a quantized (Q8_0 or Q4_0) cache in place: each row with a
/// shift is dequantized, each head rotated as [`kshift`] rotates it, and
/// the row quantized again as `set_rows` quantizes (llama.cpp's K-shift of
/// a quantized cache: dequantize, rope, requantize). `k`: rows of
/// `ty.bytes_for(head_dim * n_head)` bytes; `shift`: `[n_rows]`.
pub fn kshift_quant(
    ty: glint_backend::GgmlType,
    k: &mut [u8],
    shift: &[i32],
    p: &RopeParams,
) -> Result<(), glint_quant::QuantError> {
    let row = p.head_dim * p.n_head;
    let Some(rb) = ty.bytes_for(row as u64).filter(|&b| b > 0) else {
        return Ok(());
    };
    let inv_freq = inv_freqs(p, p.n_rot / 2);
    k.par_chunks_mut(rb as usize)
        .zip(shift.par_iter())
        .try_for_each_init(
            || {
                let hd = p.head_dim;
                (
                    vec![(0f32, 0f32); p.n_rot / 2],
                    vec![0f32; row],
                    vec![0f32; hd],
                )
            },
            |(cs, x, dst), (kr, &d)| {
                if d == 0 {
                    return Ok(());
                }
                cos_sin_with(p, &inv_freq, d as f64, false, cs);
                glint_quant::dequantize_row(ty, kr, x)?;
                for kh in x.chunks_mut(p.head_dim) {
                    rotate_head(p, cs, kh, dst);
                    kh.copy_from_slice(dst);
                }
                crate::act::quantize_row(ty, x, kr)
            },
        )
}
