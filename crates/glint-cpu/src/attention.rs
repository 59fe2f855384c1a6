//! Attention of a batch of queries over a window of cache rows (GQA/MQA,
//! mask, soft-capping), softmax in f32.

use glint_backend::AttnParams;
use half::{f16, slice::HalfFloatSliceExt};
use rayon::prelude::*;

/// A K or V cache: `[head_dim * n_head_kv, n_rows]` of f32 or f16.
#[derive(Clone, Copy)]
pub enum Cache<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl Cache<'_> {
    /// Elements `at..at + dst.len()` as f32.
    #[inline(always)]
    fn load(&self, at: usize, dst: &mut [f32]) {
        let end = at + dst.len();
        match self {
            Cache::F32(c) => dst.copy_from_slice(&c[at..end]),
            Cache::F16(c) => c[at..end].convert_to_f32_slice(dst),
        }
    }

    /// Elements `at..at + buf.len()` as f32: borrowed from an F32 cache,
    /// widened into `buf` from an F16 one.
    #[inline(always)]
    fn row<'b>(&'b self, at: usize, buf: &'b mut [f32]) -> &'b [f32] {
        match self {
            Cache::F32(c) => &c[at..at + buf.len()],
            Cache::F16(_) => {
                self.load(at, buf);
                buf
            }
        }
    }
}

/// `q`: `[head_dim, n_head, m]`; `mask`: `[n_kv, m]`; `out`: `[head_dim * n_head, m]`.
/// One rayon task per (query token, head) when `par`, else all on the
/// calling thread.
///
/// `ggml_f16`: round as ggml's non-flash attention does over an F16 cache
/// (its `mul_mat`s convert the f32 operand to the cache's f16): Q is rounded
/// to f16 before `Q·K` when K is F16, and the normalized softmax weights are
/// rounded to f16 before weighting V when V is F16.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    par: bool,
    q: &[f32],
    k: Cache,
    v: Cache,
    mask: &[f32],
    p: &AttnParams,
    out: &mut [f32],
    ggml_f16: bool,
) {
    let round_q = ggml_f16 && matches!(k, Cache::F16(_));
    let round_p = ggml_f16 && matches!(v, Cache::F16(_));
    let hd = p.head_dim;
    if hd == 0 || p.n_head == 0 {
        return;
    }
    let row = hd * p.n_head_kv; // elements of one cache row
    let group = p.n_head / p.n_head_kv; // query heads per kv head

    // Prefill: every query token reads the same window of cache rows, so an
    // f16 window is widened to f32 once (exact) instead of once per token.
    // kw, vw: [n_kv, row] f32.
    let m = q.len() / (hd * p.n_head);
    let (kw, vw);
    let mut pw = *p;
    let (k, v) = if m > 1 && (matches!(k, Cache::F16(_)) || matches!(v, Cache::F16(_))) {
        let widen = |c: Cache| {
            let mut w = vec![0f32; p.n_kv * row];
            c.load(p.kv_start * row, &mut w);
            w
        };
        (kw, vw) = (widen(k), widen(v));
        pw.kv_start = 0;
        (Cache::F32(&kw), Cache::F32(&vw))
    } else {
        (k, v)
    };
    let p = &pw;
    let ctx = Heads {
        k,
        v,
        mask,
        p,
        round_q,
        round_p,
        row,
        group,
    };
    let init = || Scratch {
        scores: vec![0f32; p.n_kv],
        kv: vec![0f32; hd],
        qr: vec![0f32; hd],
    };
    let head =
        |s: &mut Scratch, (ih, (o, qh)): (usize, (&mut [f32], &[f32]))| ctx.head(s, ih, o, qh);
    if par {
        out.par_chunks_mut(hd)
            .zip(q.par_chunks(hd))
            .enumerate()
            .for_each_init(init, head);
    } else {
        let mut state = init();
        for item in out.chunks_mut(hd).zip(q.chunks(hd)).enumerate() {
            head(&mut state, item);
        }
    }
}

/// What every (query token, head) of one attention call shares.
struct Heads<'a> {
    k: Cache<'a>,
    v: Cache<'a>,
    mask: &'a [f32],
    p: &'a AttnParams,
    /// Round Q to f16 before `Q·K` (ggml over an F16 K cache).
    round_q: bool,
    /// Round the normalized weights to f16 before weighting V.
    round_p: bool,
    /// Elements of one cache row (`head_dim * n_head_kv`).
    row: usize,
    /// Query heads per kv head.
    group: usize,
}

/// Per-task buffers. scores: `[n_kv]`; kv: `[head_dim]`, one widened cache
/// row; qr: `[head_dim]`, the query rounded to f16.
struct Scratch {
    scores: Vec<f32>,
    kv: Vec<f32>,
    qr: Vec<f32>,
}

impl Heads<'_> {
    /// Query head `ih % n_head` of token `ih / n_head` into `o`. On x86_64
    /// with AVX2 the same code compiled for AVX2 (wider vectors, no fused
    /// multiply-adds: the same numbers as the baseline build).
    fn head(&self, s: &mut Scratch, ih: usize, o: &mut [f32], qh: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::qdot::has_avx2() {
            return wide::head(self, s, ih, o, qh);
        }
        self.head_body(s, ih, o, qh)
    }

    #[inline(always)]
    fn head_body(&self, s: &mut Scratch, ih: usize, o: &mut [f32], qh: &[f32]) {
        let (p, k, v, row) = (self.p, self.k, self.v, self.row);
        let hd = p.head_dim;
        let Scratch { scores, kv, qr } = s;
        let (i, h) = (ih / p.n_head, ih % p.n_head);
        let qh: &[f32] = if self.round_q {
            for (d, &s) in qr.iter_mut().zip(qh) {
                *d = f16::from_f32(s).to_f32();
            }
            qr
        } else {
            qh
        };
        let at_head = (h / self.group) * hd;
        let mask_i = &self.mask[i * p.n_kv..(i + 1) * p.n_kv];
        let mut max = f32::NEG_INFINITY;
        for (j, s) in scores.iter_mut().enumerate() {
            if mask_i[j] == f32::NEG_INFINITY {
                *s = f32::NEG_INFINITY;
                continue;
            }
            let mut x = dot32(qh, k.row((p.kv_start + j) * row + at_head, kv));
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
        for s in scores.iter_mut() {
            if *s == f32::NEG_INFINITY {
                continue;
            }
            *s = (*s - max).exp();
            sum += *s;
        }
        if self.round_p {
            // ggml normalizes first, then rounds the weights to f16.
            let inv = 1.0 / sum;
            for s in scores.iter_mut() {
                if *s != f32::NEG_INFINITY {
                    *s = f16::from_f32(*s * inv).to_f32();
                }
            }
        }
        match v {
            Cache::F32(c) => weigh_v(o, scores, &c[p.kv_start * row + at_head..], row),
            Cache::F16(_) => {
                for (j, s) in scores.iter().enumerate() {
                    if *s == f32::NEG_INFINITY {
                        continue;
                    }
                    let vr = v.row((p.kv_start + j) * row + at_head, kv);
                    for (o, &vv) in o.iter_mut().zip(vr) {
                        *o += s * vv;
                    }
                }
            }
        }
        if self.round_p {
            return;
        }
        let inv = 1.0 / sum;
        for o in o.iter_mut() {
            *o *= inv;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wide {
    use super::*;

    pub(super) fn head(h: &Heads, s: &mut Scratch, ih: usize, o: &mut [f32], qh: &[f32]) {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn tf(h: &Heads, s: &mut Scratch, ih: usize, o: &mut [f32], qh: &[f32]) {
            h.head_body(s, ih, o, qh)
        }
        // SAFETY: called only after `has_avx2()` confirmed AVX2, FMA and F16C.
        unsafe { tf(h, s, ih, o, qh) }
    }
}

/// `sum(a[i] * b[i])` over 32 independent f32 lanes (four vectors' worth),
/// so a long dot is not one chain of dependent adds.
#[inline(always)]
fn dot32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 32];
    let ca = a.chunks_exact(32);
    let cb = b.chunks_exact(32);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..32 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    // pairwise: 32 -> 16 -> 8 -> 4 -> 2 -> 1
    let mut w = 16;
    while w > 0 {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
        w /= 2;
    }
    acc[0] + tail
}

/// `o += sum_j w[j] * V[j]` over the rows `j` whose weight is not -inf, in
/// order of `j` for each element (the plain loop's order, so the same
/// numbers). V[j] is `v[j * row..][..o.len()]`. `o` is walked a chunk of
/// [`CHUNK`] elements at a time, held in registers across all rows instead
/// of being reloaded and stored once per row.
#[inline(always)]
fn weigh_v(o: &mut [f32], w: &[f32], v: &[f32], row: usize) {
    const CHUNK: usize = 64;
    let hd = o.len();
    let mut c0 = 0;
    while c0 + CHUNK <= hd {
        let oc: &mut [f32; CHUNK] = (&mut o[c0..c0 + CHUNK]).try_into().expect("chunk");
        let mut acc = *oc;
        for (j, &wj) in w.iter().enumerate() {
            if wj == f32::NEG_INFINITY {
                continue;
            }
            let at = j * row + c0;
            let vr: &[f32; CHUNK] = v[at..at + CHUNK].try_into().expect("chunk");
            for e in 0..CHUNK {
                acc[e] += wj * vr[e];
            }
        }
        *oc = acc;
        c0 += CHUNK;
    }
    if c0 < hd {
        for (j, &wj) in w.iter().enumerate() {
            if wj == f32::NEG_INFINITY {
                continue;
            }
            let at = j * row + c0;
            for (o, &vv) in o[c0..].iter_mut().zip(&v[at..at + hd - c0]) {
                *o += wj * vv;
            }
        }
    }
}
