//! Attention of a batch of queries over a window of cache rows (GQA/MQA,
//! mask, soft-capping), softmax in f32.

use glint_backend::AttnParams;
use half::f16;
use rayon::prelude::*;

use crate::weights::dot;

/// A K or V cache: `[head_dim * n_head_kv, n_rows]` of f32 or f16.
#[derive(Clone, Copy)]
pub enum Cache<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl Cache<'_> {
    /// Elements `at..at + dst.len()` as f32.
    #[inline]
    fn load(&self, at: usize, dst: &mut [f32]) {
        let end = at + dst.len();
        match self {
            Cache::F32(c) => dst.copy_from_slice(&c[at..end]),
            Cache::F16(c) => {
                for (d, h) in dst.iter_mut().zip(&c[at..end]) {
                    *d = h.to_f32();
                }
            }
        }
    }
}

/// `q`: `[head_dim, n_head, m]`; `mask`: `[n_kv, m]`; `out`: `[head_dim * n_head, m]`.
/// One rayon task per (query token, head).
pub fn attention(q: &[f32], k: Cache, v: Cache, mask: &[f32], p: &AttnParams, out: &mut [f32]) {
    let hd = p.head_dim;
    if hd == 0 || p.n_head == 0 {
        return;
    }
    let row = hd * p.n_head_kv; // elements of one cache row
    let group = p.n_head / p.n_head_kv; // query heads per kv head
    out.par_chunks_mut(hd)
        .zip(q.par_chunks(hd))
        .enumerate()
        .for_each_init(
            // scores: [n_kv] f32; kv: [head_dim] f32, one widened cache row head
            || (vec![0f32; p.n_kv], vec![0f32; hd]),
            |(scores, kv), (ih, (o, qh))| {
                let (i, h) = (ih / p.n_head, ih % p.n_head);
                let at_head = (h / group) * hd;
                let mask_i = &mask[i * p.n_kv..(i + 1) * p.n_kv];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    if mask_i[j] == f32::NEG_INFINITY {
                        *s = f32::NEG_INFINITY;
                        continue;
                    }
                    k.load((p.kv_start + j) * row + at_head, kv);
                    let mut x = dot(qh, kv);
                    if p.softcap > 0.0 {
                        x = p.softcap * (x / p.softcap).tanh();
                    }
                    *s = x * p.scale + mask_i[j];
                    max = max.max(*s);
                }
                o.fill(0.0);
                if max == f32::NEG_INFINITY {
                    return; // fully masked: zeros
                }
                let mut sum = 0f32;
                for (j, s) in scores.iter().enumerate() {
                    if *s == f32::NEG_INFINITY {
                        continue;
                    }
                    let w = (s - max).exp();
                    sum += w;
                    v.load((p.kv_start + j) * row + at_head, kv);
                    for (o, &vv) in o.iter_mut().zip(kv.iter()) {
                        *o += w * vv;
                    }
                }
                let inv = 1.0 / sum;
                for o in o.iter_mut() {
                    *o *= inv;
                }
            },
        );
}
