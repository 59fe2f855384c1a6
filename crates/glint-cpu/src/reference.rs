//! The plainest single-threaded loops for the ops whose fast version is
//! restructured (blocked, transposed, fused). Tests hold the fast ops to these.
// Index loops are the point here: they read like the formula.
#![allow(clippy::needless_range_loop)]

use glint_backend::{AttnParams, Result};

use crate::attention::Cache;
use crate::matmul::WeightRows;
use crate::weights::dequant_row;

/// `out[c * n + r] = sum_i w[r][i] * x[c * k + i]`, one element at a time.
pub fn mul_mat(w: WeightRows, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    let (k, n) = (w.k, w.n);
    let mut row = vec![0f32; k];
    for r in 0..n {
        dequant_row(w.ty, w.row(r), &mut row)?;
        for c in 0..m {
            let mut s = 0f32;
            for i in 0..k {
                s += row[i] * x[c * k + i];
            }
            out[c * n + r] = s;
        }
    }
    Ok(())
}

fn at(c: Cache, i: usize) -> f32 {
    match c {
        Cache::F32(v) => v[i],
        Cache::F16(v) => v[i].to_f32(),
    }
}

/// Attention exactly as the trait's doc comment writes it, one query head at a time.
/// `q`: `[head_dim, n_head, m]`; `mask`: `[n_kv, m]`; `out`: `[head_dim * n_head, m]`.
pub fn attention(
    q: &[f32],
    k: Cache,
    v: Cache,
    mask: &[f32],
    p: &AttnParams,
    m: usize,
    out: &mut [f32],
) {
    let hd = p.head_dim;
    let row = hd * p.n_head_kv;
    for i in 0..m {
        for h in 0..p.n_head {
            let h_kv = h / (p.n_head / p.n_head_kv);
            let mut logits = vec![0f32; p.n_kv];
            for (j, l) in logits.iter_mut().enumerate() {
                let base = (p.kv_start + j) * row + h_kv * hd;
                let mut x = 0f32;
                for d in 0..hd {
                    x += q[(i * p.n_head + h) * hd + d] * at(k, base + d);
                }
                if p.softcap > 0.0 {
                    x = p.softcap * (x / p.softcap).tanh();
                }
                *l = x * p.scale + mask[i * p.n_kv + j];
            }
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let o = &mut out[(i * p.n_head + h) * hd..(i * p.n_head + h + 1) * hd];
            o.fill(0.0);
            if max == f32::NEG_INFINITY {
                continue;
            }
            let w: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
            let sum: f32 = w.iter().sum();
            for (j, wj) in w.iter().enumerate() {
                let base = (p.kv_start + j) * row + h_kv * hd;
                for d in 0..hd {
                    o[d] += wj / sum * at(v, base + d);
                }
            }
        }
    }
}
