//! Attention of a batch of queries over a window of cache rows (GQA/MQA,
//! mask, soft-capping), softmax in f32.

use glint_backend::AttnParams;
use half::{f16, slice::HalfFloatSliceExt};
use rayon::prelude::*;

use crate::matmul::Kernels;

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
/// Tasks on the current rayon pool when `par`, else all on the calling
/// thread.
///
/// `ggml_f16`: round as ggml's non-flash attention does over an F16 cache
/// (its `mul_mat`s convert the f32 operand to the cache's f16): Q is rounded
/// to f16 before `Q·K` when K is F16, and the normalized softmax weights are
/// rounded to f16 before weighting V when V is F16.
///
/// Two implementations of one formula, picked by `kernels`. With
/// [`Kernels::Fast`] (what the backend runs; [`Kernels::NoAmx`] alike, AMX
/// being for the products) on x86_64 with AVX2, FMA and
/// F16C (checked at run time): a prefill of at least [`TILED_MIN_TOKENS`]
/// tokens (and one per thread) runs one task per block of tokens, each kv
/// head's query heads of the whole block against [`TILE`]-row tiles of K
/// and V widened to f32 once per tile, tiles the whole block masks skipped
/// unread, tiles every token sees with a zero bias scored without reading
/// the mask (`wide::block`; on a cpu with AVX-512 F and DQ and heads of
/// whole 16-lane registers, its 512-bit kernels, `wide512`, the same bits;
/// [`Kernels::Avx2`] keeps to the AVX2 ones); fewer tokens (decode) over
/// a window of at least `split::SPLIT_MIN_KV` rows run the blocked path's
/// kernels in three passes split along the window and along the cache
/// row, K and V read from the cache (`split`); over a shorter window, one
/// task per (token, kv head), every query head of the group against
/// each K and V row as it is loaded (F16 rows widened in registers), with
/// fused multiply-adds (`wide::group`). The three sum in the same order,
/// so they give the same bits. Elsewhere, and
/// always with [`Kernels::Plain`] and [`Kernels::Reference`] (for tests and
/// benchmarks): one task per (token, head) in plain loops (`Heads::head`).
/// Each path computes a token the same way whatever else is in its batch,
/// so a batch gives, bit for bit, what its tokens give one at a time; the
/// two paths differ from each other by f32 rounding (the tests name the
/// tolerance).
///
/// Shapes as the backend's `attention` checks them: the caches hold
/// `kv_start + n_kv` rows of `head_dim * n_head_kv`, `n_head` is a multiple
/// of `n_head_kv`; with `n_kv == 0` or heads that do not group, `out` is
/// zeros.
#[allow(clippy::too_many_arguments)]
pub fn attention_with(
    kernels: Kernels,
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
    // The backend checks these before calling; a direct caller that breaks
    // them gets zeros, not a panic or another head's keys.
    if p.n_kv == 0 || p.n_head_kv == 0 || p.n_head % p.n_head_kv != 0 {
        out.fill(0.0);
        return;
    }
    let row = hd * p.n_head_kv; // elements of one cache row
    let group = p.n_head / p.n_head_kv; // query heads per kv head
    let m = q.len() / (hd * p.n_head);
    let ctx = Heads {
        k,
        v,
        mask,
        far: None,
        p,
        round_q,
        round_p,
        row,
        group,
        per_task: 1,
        wide512: matches!(kernels, Kernels::Fast | Kernels::NoAmx)
            && hd % 16 == 0
            && crate::qdot::has_avx512(),
    };

    #[cfg(target_arch = "x86_64")]
    let threads = if par { rayon::current_num_threads() } else { 1 };
    #[cfg(target_arch = "x86_64")]
    let fast = matches!(kernels, Kernels::Fast | Kernels::NoAmx | Kernels::Avx2);
    #[cfg(target_arch = "x86_64")]
    if fast && crate::qdot::has_avx2() && m >= TILED_MIN_TOKENS.max(threads) {
        // Prefill: blocks of tokens against tiles of K/V (`wide::block`).
        // Blocks of up to MAX_BLOCK tokens, small enough to leave about
        // four blocks per thread to balance the causal mask's uneven work.
        let bsz = (m / (4 * threads)).clamp(1, MAX_BLOCK);
        let rows = bsz * group;
        let init = || BlockScratch::new(rows, hd, p.n_kv, false);
        let w = bsz * hd * p.n_head;
        for_each_chunk(par, out, q, w, init, |s, ib, o, qb| {
            wide::block(&ctx, s, ib, o, qb, bsz)
        });
        return;
    }

    #[cfg(target_arch = "x86_64")]
    if fast && crate::qdot::has_avx2() && m > 0 && p.n_kv >= split::SPLIT_MIN_KV {
        // Decode at depth: passes split along the cache and the head
        // (`split`), the blocked path's bits.
        split::attend(&ctx, par, threads, m, out, q);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if fast && crate::qdot::has_avx2() {
        // A task takes a whole group, unless that leaves threads idle (a
        // decode step of a model with one or two kv heads): then a head.
        // Either way each head's sums are the same.
        let per_task = if m * p.n_head_kv < 2 * threads {
            1
        } else {
            group
        };
        let ctx = Heads { per_task, ..ctx };
        let gw = per_task * hd;
        let init = || GroupScratch {
            scores: vec![0f32; per_task * p.n_kv],
            max: vec![0f32; per_task],
            sum: vec![0f32; per_task],
            qr: vec![0f32; gw],
            qr2: Vec::new(),
            merged: Vec::new(),
        };
        for_each_chunk(par, out, q, gw, init, |s, ig, o, qg| {
            wide::group(&ctx, s, ig, o, qg)
        });
        return;
    }

    // Plain loops. Prefill: every query token reads the same window of
    // cache rows, so an f16 window is widened to f32 once (exact) instead
    // of once per token. kw, vw: [n_kv, row] f32.
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
    let ctx = Heads { k, v, p, ..ctx };
    let init = || Scratch {
        scores: vec![0f32; p.n_kv],
        kv: vec![0f32; hd],
        qr: vec![0f32; hd],
        qr2: vec![0f32; hd],
    };
    for_each_chunk(par, out, q, hd, init, |s, ih, o, qh| ctx.head(s, ih, o, qh));
}

/// Two-window SelfExtend attention (Jin et al. 2024): each (query,
/// key) pair gets one logit, `q · k` where `mask` lets it through (the
/// neighbour window), else `far.q · far.k` where `far.mask` does (queries
/// and keys rotated at their grouped positions), and one softmax runs over
/// the merged logits. Shapes as [`attention_with`]; `far`'s as `q`, `k`
/// and `mask`. On x86_64 with AVX2: a prefill of at least
/// [`TILED_MIN_TOKENS`] tokens (and one per thread) takes the blocked path
/// of [`attention_with`], each tile widened once per block and scored with
/// the near queries and keys, the distant ones, or both (a tile the
/// window's edge crosses); fewer tokens (decode; K and `far.k` of one
/// type) the grouped path, one task per (token, kv head) or (token, head),
/// each row scored against whichever query and key its pair uses. The two
/// sum in the same order, so a batch gives its tokens' bits. Elsewhere one
/// task per (token, head) in plain loops. On the
/// current rayon pool when `par`; `ggml_f16` rounds as [`attention_with`]
/// does (both queries over an F16 K, the weights over an F16 V).
#[allow(clippy::too_many_arguments)]
pub fn attention_window(
    par: bool,
    q: &[f32],
    k: Cache,
    v: Cache,
    mask: &[f32],
    far: Far,
    p: &AttnParams,
    out: &mut [f32],
    ggml_f16: bool,
) {
    let hd = p.head_dim;
    if hd == 0 || p.n_head == 0 {
        return;
    }
    if p.n_kv == 0 || p.n_head_kv == 0 || p.n_head % p.n_head_kv != 0 {
        out.fill(0.0);
        return;
    }
    let ctx = Heads {
        k,
        v,
        mask,
        far: Some(far),
        p,
        round_q: ggml_f16 && matches!(k, Cache::F16(_)),
        round_p: ggml_f16 && matches!(v, Cache::F16(_)),
        row: hd * p.n_head_kv,
        group: p.n_head / p.n_head_kv,
        per_task: 1,
        wide512: false,
    };
    #[cfg(target_arch = "x86_64")]
    {
        // A prefill of at least TILED_MIN_TOKENS tokens (and one per
        // thread): attention_with's blocked path. Fewer (decode): its
        // grouped path, one task per (token, kv head) or (token, head).
        let threads = if par { rayon::current_num_threads() } else { 1 };
        let m = q.len() / (hd * p.n_head);
        let same_type = matches!(
            (k, far.k),
            (Cache::F32(_), Cache::F32(_)) | (Cache::F16(_), Cache::F16(_))
        );
        if crate::qdot::has_avx2() && m >= TILED_MIN_TOKENS.max(threads) {
            // Prefill: the blocked path of attention_with, each tile
            // scored against the near queries and keys where some pair of
            // the block is near, against the distant ones where some pair
            // is distant.
            let (hd, group) = (p.head_dim, p.n_head / p.n_head_kv);
            let bsz = (m / (4 * threads)).clamp(1, MAX_BLOCK);
            let rows = bsz * group;
            let init = || BlockScratch::new(rows, hd, p.n_kv, true);
            let w = bsz * hd * p.n_head;
            for_each_chunk(par, out, q, w, init, |s, ib, o, qb| {
                wide::block(&ctx, s, ib, o, qb, bsz)
            });
            return;
        }
        if crate::qdot::has_avx2() && same_type {
            let group = p.n_head / p.n_head_kv;
            let per_task = if m * p.n_head_kv < 2 * threads {
                1
            } else {
                group
            };
            let ctx = Heads { per_task, ..ctx };
            let gw = per_task * hd;
            let init = || GroupScratch {
                scores: vec![0f32; per_task * p.n_kv],
                max: vec![0f32; per_task],
                sum: vec![0f32; per_task],
                qr: vec![0f32; gw],
                qr2: vec![0f32; gw],
                merged: Vec::with_capacity(p.n_kv),
            };
            for_each_chunk(par, out, q, gw, init, |s, ig, o, qg| {
                wide::group(&ctx, s, ig, o, qg)
            });
            return;
        }
    }
    let init = || Scratch {
        scores: vec![0f32; p.n_kv],
        kv: vec![0f32; hd],
        qr: vec![0f32; hd],
        qr2: vec![0f32; hd],
    };
    for_each_chunk(par, out, q, hd, init, |s, ih, o, qh| ctx.head(s, ih, o, qh));
}

/// `task(scratch, i, o, q)` for each chunk `i` of `width` elements of `out`
/// and of `q`, on the current rayon pool when `par` (one `init()` scratch
/// per worker), else on the calling thread.
fn for_each_chunk<S>(
    par: bool,
    out: &mut [f32],
    q: &[f32],
    width: usize,
    init: impl Fn() -> S + Sync + Send,
    task: impl Fn(&mut S, usize, &mut [f32], &[f32]) + Sync + Send,
) {
    if par {
        out.par_chunks_mut(width)
            .zip(q.par_chunks(width))
            .enumerate()
            .for_each_init(init, |s, (i, (o, q))| task(s, i, o, q));
    } else {
        let mut s = init();
        for (i, (o, q)) in out.chunks_mut(width).zip(q.chunks(width)).enumerate() {
            task(&mut s, i, o, q);
        }
    }
}

/// The distant half of two-window SelfExtend attention (see
/// [`attention_window`]): queries rotated at their grouped positions, keys
/// at theirs, and the mask of the (query, key) pairs that use them.
#[derive(Clone, Copy)]
pub struct Far<'a> {
    /// `[head_dim, n_head, m]`, like `q`.
    pub q: &'a [f32],
    /// `[head_dim * n_head_kv, n_rows]`, like `k`.
    pub k: Cache<'a>,
    /// `[n_kv, m]`: 0 (or a bias) where the pair is distant, else -inf.
    pub mask: &'a [f32],
}

/// What every task of one attention call shares.
struct Heads<'a> {
    k: Cache<'a>,
    v: Cache<'a>,
    mask: &'a [f32],
    /// Two-window SelfExtend: pairs the near mask hides and this one's
    /// mask lets through are scored with its queries and keys.
    far: Option<Far<'a>>,
    p: &'a AttnParams,
    /// Round Q to f16 before `Q·K` (ggml over an F16 K cache).
    round_q: bool,
    /// Round the normalized weights to f16 before weighting V.
    round_p: bool,
    /// Elements of one cache row (`head_dim * n_head_kv`).
    row: usize,
    /// Query heads per kv head.
    group: usize,
    /// Query heads per task of the grouped path: `group`, or 1.
    per_task: usize,
    /// The blocked path may take the 512-bit kernels (`wide512`): the cpu
    /// has them, the kernels asked for allow them, `head_dim` is whole
    /// 16-element registers.
    wide512: bool,
}

/// Per-task buffers of the grouped path. scores: `[group, n_kv]`; max,
/// sum: `[group]`; qr: `[head_dim, group]`, the queries rounded to f16.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct GroupScratch {
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    qr: Vec<f32>,
    /// SelfExtend window: the distant queries rounded `[head_dim, group]`,
    /// and each row's bias, near or far `[n_kv]` (-inf: masked).
    qr2: Vec<f32>,
    merged: Vec<f32>,
}

/// Cache rows per K/V tile of the blocked prefill path: 64 rows of a
/// 64-element head widened to f32 are 16 KiB each for K and V, in L1/L2
/// with the block's queries.
const TILE: usize = 64;

/// Most tokens per block of the blocked prefill path (each tile is read
/// once per block).
const MAX_BLOCK: usize = 16;

/// Fewest tokens that take the blocked path; fewer (a decode step) take
/// the per-token paths: the split one over a long window (`split`), the
/// grouped one, which splits a group across threads, over a short one. A
/// server's decode step holds one token per slot, often of sequences in
/// different streams: no tile is masked for all of them, so a block would
/// score every tile for every token; below a block's worth of tokens the
/// per-token path, which skips each token's masked rows, is the faster.
pub const TILED_MIN_TOKENS: usize = 16;

/// Per-task buffers of the blocked path, `rows` = tokens of a block times
/// the heads of a group. qr: `[head_dim, rows]`; scores: `[n_kv, rows]`;
/// max, sum: `[rows]`; acc: `[head_dim, rows]`; kt, vt: `[head_dim,
/// TILE]`, one tile widened (K in `wide512::widen_pairs`' order on the
/// 512-bit path); live: `[n_kv.div_ceil(TILE)]`, what the block's masks
/// let through of each tile.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct BlockScratch {
    qr: Vec<f32>,
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
    kt: Vec<f32>,
    vt: Vec<f32>,
    live: Vec<TileLive>,
    /// Two-window SelfExtend only (empty otherwise): the distant queries
    /// `[head_dim, rows]` and one tile of the grouped keys `[head_dim,
    /// TILE]`.
    qr2: Vec<f32>,
    kt2: Vec<f32>,
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl BlockScratch {
    /// For blocks of `rows` query rows of `hd` over `n_kv` cache rows;
    /// `far`: with a SelfExtend window's distant buffers.
    fn new(rows: usize, hd: usize, n_kv: usize, far: bool) -> Self {
        let if_far = |n: usize| if far { vec![0f32; n] } else { Vec::new() };
        BlockScratch {
            qr: vec![0f32; rows * hd],
            scores: vec![0f32; rows * n_kv],
            max: vec![0f32; rows],
            sum: vec![0f32; rows],
            acc: vec![0f32; rows * hd],
            kt: vec![0f32; TILE * hd],
            vt: vec![0f32; TILE * hd],
            live: Vec::new(),
            qr2: if_far(rows * hd),
            kt2: if_far(TILE * hd),
        }
    }
}

/// A tile of V rows for `weigh_tile`: `rows` rows `stride` apart in `v`,
/// of which the weighting reads the first `width` elements (a slice of a
/// wider tile, or of the cache's rows, from where `v` starts); widened to
/// f32, or the cache's own elements widened in registers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct VTile<'a, E> {
    v: &'a [E],
    stride: usize,
    rows: usize,
    width: usize,
}

impl<E> Clone for VTile<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for VTile<'_, E> {}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl<E> VTile<'_, E> {
    /// Panics unless `n` output rows `os` apart (`o_len` floats) and their
    /// weights `ws` apart (`w_len` floats) fit this tile.
    fn check(&self, n: usize, o_len: usize, os: usize, w_len: usize, ws: usize) {
        let fits = n >= 1
            && self.width <= os.min(self.stride)
            && o_len >= (n - 1) * os + self.width
            && w_len >= (n - 1) * ws + self.rows
            && (self.rows == 0 || self.v.len() >= (self.rows - 1) * self.stride + self.width);
        assert!(
            fits,
            "weigh_tile: {n} rows of {} over {} keys at stride {}",
            self.width, self.rows, self.stride
        );
    }
}

/// What the masks of a block of tokens let through of one tile of cache
/// rows.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct TileLive {
    /// Some token of the block sees a row of the tile through the near
    /// mask.
    near: bool,
    /// Some token sees a row through the distant mask of a SelfExtend
    /// window.
    far: bool,
    /// Every token of the block sees every row of the tile through the
    /// near mask with a bias of exactly +0 (a causal mask's rows well
    /// behind the block), and there is no distant window: the scores need
    /// no mask read.
    clear: bool,
}

/// Per-task buffers of the plain path. scores: `[n_kv]`; kv: `[head_dim]`,
/// one widened cache row; qr, qr2: `[head_dim]`, the query (and the
/// distant one of a SelfExtend window) rounded to f16.
struct Scratch {
    scores: Vec<f32>,
    kv: Vec<f32>,
    qr: Vec<f32>,
    qr2: Vec<f32>,
}

impl Heads<'_> {
    /// Query head `ih % n_head` of token `ih / n_head` into `o`, in plain loops.
    fn head(&self, s: &mut Scratch, ih: usize, o: &mut [f32], qh: &[f32]) {
        let (p, k, v, row) = (self.p, self.k, self.v, self.row);
        let hd = p.head_dim;
        let Scratch {
            scores,
            kv,
            qr,
            qr2,
        } = s;
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
        // Two-window SelfExtend: the distant pairs' query, keys and mask.
        let far = self.far.map(|f| {
            let at = (i * p.n_head + h) * hd;
            let fq = &f.q[at..at + hd];
            let fq: &[f32] = if self.round_q {
                for (d, &s) in qr2.iter_mut().zip(fq) {
                    *d = f16::from_f32(s).to_f32();
                }
                qr2
            } else {
                fq
            };
            (fq, f.k, &f.mask[i * p.n_kv..(i + 1) * p.n_kv])
        });
        let mut max = f32::NEG_INFINITY;
        for (j, s) in scores.iter_mut().enumerate() {
            let at = (p.kv_start + j) * row + at_head;
            let (mut x, bias) = if mask_i[j] != f32::NEG_INFINITY {
                (dot16(qh, k.row(at, kv)), mask_i[j])
            } else if let Some((fq, fk, fm)) = far.filter(|f| f.2[j] != f32::NEG_INFINITY) {
                (dot16(fq, fk.row(at, kv)), fm[j])
            } else {
                *s = f32::NEG_INFINITY;
                continue;
            };
            if p.softcap > 0.0 {
                x = p.softcap * (x / p.softcap).tanh();
            }
            *s = x * p.scale + bias;
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
mod split;
#[cfg(target_arch = "x86_64")]
mod wide512;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wide {
    use super::*;
    use crate::qdot::shared::hsum_f32;
    use std::arch::x86_64::*;

    /// Task `ig`: the `per_task` query heads from `(ig % tasks_per_token) *
    /// per_task` of token `ig / tasks_per_token`, all of one kv head and
    /// computed at once: each K and V row is loaded once for them (an F16
    /// row widened in registers), and the products are fused multiply-adds.
    pub(super) fn group(h: &Heads, s: &mut GroupScratch, ig: usize, o: &mut [f32], q: &[f32]) {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn tf(h: &Heads, s: &mut GroupScratch, ig: usize, o: &mut [f32], q: &[f32]) {
            match (h.k, h.v) {
                (Cache::F32(k), Cache::F32(v)) => group_body(h, s, ig, o, q, k, v),
                (Cache::F16(k), Cache::F16(v)) => group_body(h, s, ig, o, q, k, v),
                (Cache::F32(k), Cache::F16(v)) => group_body(h, s, ig, o, q, k, v),
                (Cache::F16(k), Cache::F32(v)) => group_body(h, s, ig, o, q, k, v),
            }
        }
        // SAFETY: called only after `has_avx2()` confirmed AVX2, FMA and F16C.
        unsafe { tf(h, s, ig, o, q) }
    }

    /// Token block `ib` (`bsz` tokens from `ib * bsz`; fewer in the last
    /// block) against the whole window, one kv head at a time: all query
    /// heads of all the block's tokens that share the kv head run against
    /// each [`TILE`]-row tile of K and V while it sits in cache, widened to
    /// f32 once per tile. Tiles that every token of the block masks are
    /// not read at all. Sums in the same order as [`group`] (each score is
    /// the same `dots`, each output element adds the rows in order), so the
    /// two agree but for a masked row's `+ 0 * v`.
    pub(super) fn block(
        h: &Heads,
        s: &mut BlockScratch,
        ib: usize,
        o: &mut [f32],
        q: &[f32],
        bsz: usize,
    ) {
        // SAFETY: called only after `has_avx2()` confirmed AVX2, FMA and F16C.
        unsafe { block_body(h, s, ib, o, q, bsz) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_body(
        h: &Heads,
        s: &mut BlockScratch,
        ib: usize,
        o: &mut [f32],
        q: &[f32],
        bsz: usize,
    ) {
        let p = h.p;
        let (hd, n_kv, n_head, g) = (p.head_dim, p.n_kv, p.n_head, h.group);
        let nb = o.len() / (n_head * hd); // tokens in this block
        let i0 = ib * bsz;
        let rows = nb * g; // query rows per kv head: row b * g + t
        let mask = &h.mask[i0 * n_kv..(i0 + nb) * n_kv];
        // Two-window SelfExtend: the block's distant queries, the grouped
        // keys and the distant pairs' mask.
        let far = h.far.map(|f| {
            let w = n_head * hd;
            (
                &f.q[i0 * w..(i0 + nb) * w],
                f.k,
                &f.mask[i0 * n_kv..(i0 + nb) * n_kv],
            )
        });
        let n_tiles = n_kv.div_ceil(TILE);
        // The 512-bit kernels, where allowed and there is no distant window
        // (attention_window never allows them; this keeps it so).
        let w512 = h.wide512 && far.is_none();
        let BlockScratch {
            qr,
            scores,
            max,
            sum,
            acc,
            kt,
            vt,
            live,
            qr2,
            kt2,
        } = s;
        let any_in = |m: &[f32], j0: usize, j1: usize| {
            (0..nb).any(|b| {
                m[b * n_kv + j0..b * n_kv + j1]
                    .iter()
                    .any(|&x| x != f32::NEG_INFINITY)
            })
        };
        let all_clear = |j0: usize, j1: usize| {
            (0..nb).all(|b| {
                mask[b * n_kv + j0..b * n_kv + j1]
                    .iter()
                    .all(|&x| x.to_bits() == 0)
            })
        };
        live.clear();
        live.extend((0..n_tiles).map(|t| {
            let (j0, j1) = (t * TILE, ((t + 1) * TILE).min(n_kv));
            let clear = far.is_none() && all_clear(j0, j1);
            TileLive {
                near: clear || any_in(mask, j0, j1),
                far: far.is_some_and(|f| any_in(f.2, j0, j1)),
                clear,
            }
        }));
        let round = |dst: &mut [f32], src: &[f32]| {
            if h.round_q {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = f16::from_f32(x).to_f32();
                }
            } else {
                dst.copy_from_slice(src);
            }
        };
        for hk in 0..p.n_head_kv {
            let at_head = hk * hd;
            // qr (and qr2): [hd, rows], the group's queries of every token,
            // rounded to f16 as `group` rounds them.
            for b in 0..nb {
                for t in 0..g {
                    let at = (b * n_head + hk * g + t) * hd;
                    let r = b * g + t;
                    round(&mut qr[r * hd..][..hd], &q[at..][..hd]);
                    if let Some((q2, ..)) = far {
                        round(&mut qr2[r * hd..][..hd], &q2[at..][..hd]);
                    }
                }
            }
            max[..rows].fill(f32::NEG_INFINITY);
            // Scores: [n_kv, rows] (row r at scores[r * n_kv..]).
            for (ti, tl) in live.iter().enumerate() {
                let (near_live, far_live) = (tl.near, tl.far);
                let (j0, tn) = (ti * TILE, TILE.min(n_kv - ti * TILE));
                if !(near_live || far_live) {
                    for r in 0..rows {
                        scores[r * n_kv + j0..r * n_kv + j0 + tn].fill(f32::NEG_INFINITY);
                    }
                    continue;
                }
                let at = (p.kv_start + j0) * h.row + at_head;
                if w512 {
                    let kt = &mut kt[..tn * hd];
                    // SAFETY: `wide512` is set only where `has_avx512()`
                    // confirmed AVX-512 F and DQ (with AVX2, FMA, F16C).
                    unsafe {
                        match h.k {
                            Cache::F32(c) => wide512::widen_pairs(c, at, h.row, hd, kt),
                            Cache::F16(c) => wide512::widen_pairs(c, at, h.row, hd, kt),
                        }
                        let keys = wide512::Widened { kt, hd };
                        wide512::score_tile(
                            p, qr, rows, g, keys, j0, tn, mask, tl.clear, scores, max,
                        );
                    }
                    continue;
                }
                if near_live {
                    widen_rows(h.k, at, h.row, hd, &mut kt[..tn * hd]);
                }
                let far_tile = match far {
                    Some((_, k2, fm)) if far_live => {
                        widen_rows(k2, at, h.row, hd, &mut kt2[..tn * hd]);
                        Some((&qr2[..], &kt2[..tn * hd], fm))
                    }
                    _ => None,
                };
                let near_tile = near_live.then_some(&kt[..tn * hd]);
                score_tile(
                    p, g, qr, rows, near_tile, far_tile, j0, tn, mask, tl.clear, scores, max,
                );
            }
            // Softmax as `group` does it: masked weights 0, ggml's
            // normalize-then-round to f16 when asked.
            for r in 0..rows {
                let srow = &mut scores[r * n_kv..(r + 1) * n_kv];
                let total = if w512 {
                    // SAFETY: as above.
                    unsafe { wide512::exp_row(srow, max[r]) }
                } else {
                    exp_row(srow, max[r])
                };
                sum[r] = total;
                if h.round_p && total > 0.0 {
                    round_weights(&mut scores[r * n_kv..(r + 1) * n_kv], 1.0 / total);
                }
            }
            // acc: [hd, rows], the weighted V rows summed tile by tile.
            acc[..rows * hd].fill(0.0);
            for (ti, tl) in live.iter().enumerate() {
                if !(tl.near || tl.far) {
                    continue;
                }
                let (j0, tn) = (ti * TILE, TILE.min(n_kv - ti * TILE));
                let at = (p.kv_start + j0) * h.row + at_head;
                widen_rows(h.v, at, h.row, hd, &mut vt[..tn * hd]);
                let vt = VTile {
                    v: &vt[..tn * hd],
                    stride: hd,
                    rows: tn,
                    width: hd,
                };
                let mut r0 = 0;
                while r0 < rows {
                    let nr = (rows - r0).min(4);
                    let (oa, w) = (&mut acc[r0 * hd..], &scores[r0 * n_kv + j0..]);
                    if w512 {
                        // SAFETY: as above.
                        unsafe {
                            match nr {
                                4 => wide512::weigh_tile::<_, 4>(oa, hd, w, n_kv, vt),
                                3 => wide512::weigh_tile::<_, 3>(oa, hd, w, n_kv, vt),
                                2 => wide512::weigh_tile::<_, 2>(oa, hd, w, n_kv, vt),
                                _ => wide512::weigh_tile::<_, 1>(oa, hd, w, n_kv, vt),
                            }
                        }
                        r0 += nr;
                        continue;
                    }
                    match nr {
                        4 => weigh_tile::<_, 4>(oa, hd, w, n_kv, vt),
                        3 => weigh_tile::<_, 3>(oa, hd, w, n_kv, vt),
                        2 => weigh_tile::<_, 2>(oa, hd, w, n_kv, vt),
                        _ => weigh_tile::<_, 1>(oa, hd, w, n_kv, vt),
                    }
                    r0 += nr;
                }
            }
            for r in 0..rows {
                let (b, t) = (r / g, r % g);
                let dst = &mut o[(b * n_head + hk * g + t) * hd..][..hd];
                let src = &acc[r * hd..(r + 1) * hd];
                if max[r] == f32::NEG_INFINITY {
                    dst.fill(0.0); // fully masked: zeros
                } else if h.round_p {
                    dst.copy_from_slice(src);
                } else {
                    let inv = 1.0 / sum[r];
                    for (d, &x) in dst.iter_mut().zip(src) {
                        *d = x * inv;
                    }
                }
            }
        }
    }

    /// Rows `0..rows` of `qr` (`[hd, rows]`, row `r` of token `r / g`)
    /// against one tile of `tn` keys from cache row `j0`, two rows and 8
    /// keys at a time ([`score_rows`]: each score as [`score8`] gives it):
    /// `near`, the tile widened, where some pair of it uses the near keys;
    /// `far`, a SelfExtend window's distant queries, its tile of grouped
    /// keys and its mask (`[n_kv, tokens]`), where some pair uses those.
    /// Scores into `scores` (row `r` at `scores[r * p.n_kv..]`), each row's
    /// largest folded into `max`. `mask`: `[n_kv, tokens]`; `clear`: the
    /// tile's mask is +0 for every token (not read).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn score_tile(
        p: &AttnParams,
        g: usize,
        qr: &[f32],
        rows: usize,
        near: Option<&[f32]>,
        far: Option<(&[f32], &[f32], &[f32])>,
        j0: usize,
        tn: usize,
        mask: &[f32],
        clear: bool,
        scores: &mut [f32],
        max: &mut [f32],
    ) {
        let (hd, n_kv) = (p.head_dim, p.n_kv);
        let zero = [_mm256_setzero_ps(); 2];
        let mut r0 = 0;
        while r0 < rows {
            let nr = (rows - r0).min(2);
            let mut vmax = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
            let mut c = 0;
            while c < tn {
                let n = (tn - c).min(8);
                let x = match near {
                    Some(kt) => score_rows(qr, r0, nr, &kt[c * hd..], n, hd),
                    None => zero,
                };
                let x2 = match far {
                    Some((qr2, kt2, _)) => score_rows(qr2, r0, nr, &kt2[c * hd..], n, hd),
                    None => zero,
                };
                for t in 0..nr {
                    let (r, b) = (r0 + t, (r0 + t) / g);
                    let srow = &mut scores[r * n_kv..(r + 1) * n_kv];
                    let sc = if clear && n == 8 {
                        finish8_clear(p, x[t], j0 + c, srow)
                    } else {
                        let near_m = &mask[b * n_kv..(b + 1) * n_kv];
                        let far_m = far.map(|f| &f.2[b * n_kv..(b + 1) * n_kv]);
                        finish8(p, [x[t], x2[t]], near_m, far_m, j0 + c, n, srow)
                    };
                    vmax[t] = _mm256_max_ps(vmax[t], sc);
                }
                c += n;
            }
            for t in 0..nr {
                max[r0 + t] = max[r0 + t].max(hmax8(vmax[t]));
            }
            r0 += nr;
        }
    }

    /// `o[t] += sum_jj w[t * ws + jj] * V[jj]` for `N` rows (`o[t *
    /// os..][..vt.width]`) over the rows `V[jj]` of a tile, a 16-element
    /// chunk of each row's sum in registers across the tile.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn weigh_tile<E: Elem, const N: usize>(
        o: &mut [f32],
        os: usize,
        w: &[f32],
        ws: usize,
        vt: VTile<E>,
    ) {
        let VTile {
            v,
            stride,
            rows: tn,
            width,
        } = vt;
        vt.check(N, o.len(), os, w.len(), ws);
        let mut d = 0;
        while d + 16 <= width {
            let mut a0 = [_mm256_setzero_ps(); N];
            let mut a1 = [_mm256_setzero_ps(); N];
            for t in 0..N {
                a0[t] = f32::ld8(o, t * os + d);
                a1[t] = f32::ld8(o, t * os + d + 8);
            }
            let (vp, wp) = (v.as_ptr(), w.as_ptr());
            for jj in 0..tn {
                // SAFETY: jj * stride + d + 16 <= (tn - 1) * stride +
                // width <= v.len(), and t * ws + jj < (N - 1) * ws + tn
                // <= w.len() (`check`).
                unsafe {
                    let v0 = E::ld8p(vp.add(jj * stride + d));
                    let v1 = E::ld8p(vp.add(jj * stride + d + 8));
                    for t in 0..N {
                        let wj = _mm256_broadcast_ss(&*wp.add(t * ws + jj));
                        a0[t] = _mm256_fmadd_ps(wj, v0, a0[t]);
                        a1[t] = _mm256_fmadd_ps(wj, v1, a1[t]);
                    }
                }
            }
            for t in 0..N {
                st(o, t * os + d, a0[t]);
                st(o, t * os + d + 8, a1[t]);
            }
            d += 16;
        }
        for t in 0..N {
            for e in d..width {
                let mut x = o[t * os + e];
                for jj in 0..tn {
                    x += w[t * ws + jj] * E::get(v, jj * stride + e);
                }
                o[t * os + e] = x;
            }
        }
    }

    /// `x = exp(x - max)` for every `x` of `row` (-inf to 0), and their sum.
    /// Eight at a time in a polynomial `exp` (Cephes' `expf`: range
    /// reduction by ln 2, a degree-5 polynomial; within 2 ulp of f32's own
    /// for the arguments <= 0 a softmax gives it), a scalar libm call per
    /// score having been the largest cost of prefill at depth. Both fast
    /// paths use it, so they agree bit for bit.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn exp_row(row: &mut [f32], max: f32) -> f32 {
        exp_row_from(row, max, 0, _mm256_setzero_ps())
    }

    /// [`exp_row`] from element `j` on (a multiple of 8), the sum of the
    /// elements before `j` in `acc`'s lanes (lane `l`: those `≡ l (mod
    /// 8)`, in order).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn exp_row_from(row: &mut [f32], max: f32, mut j: usize, mut acc: __m256) -> f32 {
        let n = row.len();
        let (vmax, ninf) = (_mm256_set1_ps(max), _mm256_set1_ps(f32::NEG_INFINITY));
        while j + 8 <= n {
            let x = f32::ld8(row, j);
            let dead = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, ninf);
            let e = _mm256_andnot_ps(dead, exp8(live_diff(x, vmax, dead)));
            st(row, j, e);
            acc = _mm256_add_ps(acc, e);
            j += 8;
        }
        let mut total = hsum_f32(acc);
        if j < n {
            // The tail through the same vector code, padded with -inf.
            let mut pad = [f32::NEG_INFINITY; 8];
            pad[..n - j].copy_from_slice(&row[j..]);
            let x = f32::ld8(&pad, 0);
            let dead = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, ninf);
            let e = _mm256_andnot_ps(dead, exp8(live_diff(x, vmax, dead)));
            st(&mut pad, 0, e);
            for (d, &e) in row[j..].iter_mut().zip(&pad) {
                *d = e;
                total += e;
            }
        }
        total
    }

    /// `x - max` on the live lanes, 0 on the `dead` (masked, -inf) ones:
    /// [`exp8`] of a masked lane's -inf would be about 2^-126 · 0.99999, a
    /// subnormal, and each subnormal result costs a microcode assist of
    /// ~100 cycles on Intel cpus (32% of the attention's time at depth
    /// 4096 went to that one multiply). The caller zeroes those lanes
    /// anyway; the live lanes' bits do not change.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn live_diff(x: __m256, vmax: __m256, dead: __m256) -> __m256 {
        _mm256_andnot_ps(dead, _mm256_sub_ps(x, vmax))
    }

    /// `x = f16(x * inv)` widened back, for every `x` of `row`: ggml's
    /// normalized weights rounded to f16, 8 at a time (F16C rounds to
    /// nearest even, as `f16::from_f32` does: the same bits).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn round_weights(row: &mut [f32], inv: f32) {
        let vinv = _mm256_set1_ps(inv);
        let mut chunks = row.chunks_exact_mut(8);
        for c in &mut chunks {
            let x = _mm256_mul_ps(f32::ld8(c, 0), vinv);
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            st(c, 0, _mm256_cvtph_ps(h));
        }
        for x in chunks.into_remainder() {
            *x = f16::from_f32(*x * inv).to_f32();
        }
    }

    /// [`exp_row`] for the unit tests.
    #[cfg(test)]
    pub(super) fn exp_row_for_test(row: &mut [f32], max: f32) -> f32 {
        assert!(crate::qdot::has_avx2(), "exp_row needs AVX2, FMA and F16C");
        // SAFETY: AVX2, FMA and F16C confirmed just above.
        unsafe { exp_row(row, max) }
    }

    /// [`exp8`]'s clamp of its argument.
    pub(super) const EXP_HI: f32 = 88.376_26;
    pub(super) const EXP_LO: f32 = -87.336_55;
    /// ln 2 in two parts (the high one exact in f32 times any `n`).
    pub(super) const LN2_HI: f32 = 0.693_359_4;
    pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
    /// Cephes' `expf` polynomial, highest power first.
    pub(super) const EXP_POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];

    /// `exp(x)` of 8 lanes (Cephes' `expf`); arguments below -87.3 give
    /// about 1e-38 rather than 0 (the caller zeroes masked lanes itself).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
        let x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
        // n = round(x / ln 2); r = x - n ln 2 in two steps (hi exact in f32).
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut y = _mm256_set1_ps(EXP_POLY[0]);
        for &c in &EXP_POLY[1..] {
            y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
        }
        let y = _mm256_fmadd_ps(
            y,
            _mm256_mul_ps(r, r),
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        // y * 2^n: n added to the exponent field.
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }

    /// A cache element type: 8 of them from `at`, or one, as f32.
    pub(super) trait Elem: Copy {
        fn ld8(s: &[Self], at: usize) -> __m256;
        /// 8 elements from `p` as f32.
        ///
        /// # Safety
        /// `p..p + 8` must be readable; AVX2 and F16C present.
        unsafe fn ld8p(p: *const Self) -> __m256;
        fn get(s: &[Self], i: usize) -> f32;
        /// `c`'s elements, if it holds this type.
        fn of<'c>(c: Cache<'c>) -> Option<&'c [Self]>;
    }

    impl Elem for f32 {
        fn of<'c>(c: Cache<'c>) -> Option<&'c [f32]> {
            match c {
                Cache::F32(s) => Some(s),
                Cache::F16(_) => None,
            }
        }

        #[inline(always)]
        fn get(s: &[f32], i: usize) -> f32 {
            s[i]
        }

        #[inline(always)]
        unsafe fn ld8p(p: *const f32) -> __m256 {
            // SAFETY: the caller's contract.
            unsafe { _mm256_loadu_ps(p) }
        }

        #[inline(always)]
        fn ld8(s: &[f32], at: usize) -> __m256 {
            let c: &[f32; 8] = s[at..at + 8].try_into().expect("8 floats");
            // SAFETY: `c` is 8 readable floats; loadu has no alignment need;
            // reached only from `group` and `block` (and `wide512`), after
            // `has_avx2()`.
            unsafe { _mm256_loadu_ps(c.as_ptr()) }
        }
    }

    impl Elem for f16 {
        fn of<'c>(c: Cache<'c>) -> Option<&'c [f16]> {
            match c {
                Cache::F16(s) => Some(s),
                Cache::F32(_) => None,
            }
        }

        #[inline(always)]
        fn get(s: &[f16], i: usize) -> f32 {
            s[i].to_f32()
        }

        #[inline(always)]
        unsafe fn ld8p(p: *const f16) -> __m256 {
            // SAFETY: the caller's contract (16 bytes from `p`).
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
        }

        #[inline(always)]
        fn ld8(s: &[f16], at: usize) -> __m256 {
            let c: &[f16; 8] = s[at..at + 8].try_into().expect("8 halves");
            // SAFETY: `c` is 16 readable bytes (f16 is a u16); loadu has no
            // alignment need; F16C confirmed by `has_avx2()` before `group`.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(c.as_ptr().cast())) }
        }
    }

    /// Stores 8 floats into `s` at `at`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn st(s: &mut [f32], at: usize, v: __m256) {
        let c: &mut [f32; 8] = (&mut s[at..at + 8]).try_into().expect("8 floats");
        // SAFETY: `c` is 8 writable floats; storeu has no alignment need.
        unsafe { _mm256_storeu_ps(c.as_mut_ptr(), v) }
    }

    /// `q · k_j` for the keys `k_j = k[j * stride..][..hd]`, `j < n <= 8`,
    /// in the lanes of the result (lanes from `n` hold the last key's
    /// again). One 8-lane accumulator a key, lane `l` summing the elements
    /// `d ≡ l (mod 8)` in order; the lanes folded by a fixed tree of
    /// horizontal adds; the `hd % 8` tail added after, in order. Both fast
    /// paths score through this one function, so a block of tokens gives
    /// each token's bits. Eight independent chains of fused multiply-adds
    /// and no horizontal sum per key: the `Q·K` half of prefill at depth.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn score8<E: Elem>(
        q: &[f32],
        k: &[E],
        stride: usize,
        n: usize,
        hd: usize,
    ) -> __m256 {
        assert!(
            (1..=8).contains(&n) && q.len() >= hd && k.len() >= (n - 1) * stride + hd,
            "score8: {n} keys of {hd} at stride {stride} in {} elements",
            k.len()
        );
        let base: [usize; 8] = std::array::from_fn(|j| j.min(n - 1) * stride);
        let (qp, kp) = (q.as_ptr(), k.as_ptr());
        let mut a = [_mm256_setzero_ps(); 8];
        let mut d = 0;
        while d + 8 <= hd {
            // SAFETY: d + 8 <= hd <= q.len(), and base[j] + d + 8 <=
            // (n - 1) * stride + hd <= k.len() (asserted above).
            unsafe {
                let qd = _mm256_loadu_ps(qp.add(d));
                for j in 0..8 {
                    a[j] = _mm256_fmadd_ps(qd, E::ld8p(kp.add(base[j] + d)), a[j]);
                }
            }
            d += 8;
        }
        // hadd(x, y) = [x01 x23 y01 y23 x45 x67 y45 y67]: u0 holds keys
        // 0-3's lanes 0-3 then 4-7 summed, u1 keys 4-7's.
        let t0 = _mm256_hadd_ps(a[0], a[1]);
        let t1 = _mm256_hadd_ps(a[2], a[3]);
        let t2 = _mm256_hadd_ps(a[4], a[5]);
        let t3 = _mm256_hadd_ps(a[6], a[7]);
        let (u0, u1) = (_mm256_hadd_ps(t0, t1), _mm256_hadd_ps(t2, t3));
        let s = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(u0, u1),
            _mm256_permute2f128_ps::<0x31>(u0, u1),
        );
        if d == hd {
            return s;
        }
        let mut out = [0f32; 8];
        st(&mut out, 0, s);
        for (j, o) in out.iter_mut().enumerate().take(n) {
            for (e, &qe) in q.iter().enumerate().take(hd).skip(d) {
                *o += qe * E::get(k, base[j] + e);
            }
        }
        f32::ld8(&out, 0)
    }

    /// Rows `r0..r0 + nr` (`nr` <= 2) of `q` (`[hd, rows]`) against keys
    /// `k[j * hd..][..hd]`, `j < n <= 8`, of a widened tile: [`score8`]'s
    /// lanes for each row, the same bits. Two full rows of 8 keys and a
    /// head that is whole 8-lane steps go through [`score2x8`], which
    /// loads each key once for both rows; the rest through `score8`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn score_rows(
        q: &[f32],
        r0: usize,
        nr: usize,
        k: &[f32],
        n: usize,
        hd: usize,
    ) -> [__m256; 2] {
        let row = |r: usize| &q[r * hd..(r + 1) * hd];
        if nr == 2 && n == 8 && hd % 8 == 0 {
            return score2x8(row(r0), row(r0 + 1), k, hd);
        }
        let mut out = [_mm256_setzero_ps(); 2];
        for (t, o) in out.iter_mut().enumerate().take(nr) {
            *o = score8(row(r0 + t), k, hd, n, hd);
        }
        out
    }

    /// `q0 · k_j` and `q1 · k_j` for the 8 keys `k_j = k[j * hd..][..hd]`
    /// (`hd` a multiple of 8), in the lanes of the two results, summed as
    /// [`score8`] sums (lane `l` of a key's accumulator takes the elements
    /// `d ≡ l (mod 8)` in order, then the same tree of adds), so the same
    /// bits; but four keys at a time for both rows, eight accumulators,
    /// each key's 8 elements loaded once for two fused multiply-adds: 6
    /// loads per 8 multiply-adds where `score8` needs 9.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn score2x8(q0: &[f32], q1: &[f32], k: &[f32], hd: usize) -> [__m256; 2] {
        assert!(
            hd % 8 == 0 && q0.len() >= hd && q1.len() >= hd && k.len() >= 8 * hd,
            "score2x8: 8 keys of {hd} in {} elements",
            k.len()
        );
        let (p0, p1, kp) = (q0.as_ptr(), q1.as_ptr(), k.as_ptr());
        // Keys 4h..4h + 4 of both rows: [row 0's 4 scores, row 1's].
        let half = |h: usize| {
            let mut a = [_mm256_setzero_ps(); 4];
            let mut b = [_mm256_setzero_ps(); 4];
            let mut d = 0;
            while d < hd {
                // SAFETY: d + 8 <= hd <= q0.len(), q1.len(), and
                // (4h + j) * hd + d + 8 <= 8 * hd <= k.len() (asserted).
                unsafe {
                    let x0 = _mm256_loadu_ps(p0.add(d));
                    let x1 = _mm256_loadu_ps(p1.add(d));
                    for j in 0..4 {
                        let kj = _mm256_loadu_ps(kp.add((4 * h + j) * hd + d));
                        a[j] = _mm256_fmadd_ps(x0, kj, a[j]);
                        b[j] = _mm256_fmadd_ps(x1, kj, b[j]);
                    }
                }
                d += 8;
            }
            // score8's tree: hadd pairs, hadd again, then the two 128-bit
            // halves added.
            let fold = |a: [__m256; 4]| {
                let u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
                _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps::<1>(u))
            };
            (fold(a), fold(b))
        };
        let (lo0, lo1) = half(0);
        let (hi0, hi1) = half(1);
        [_mm256_set_m128(hi0, lo0), _mm256_set_m128(hi1, lo1)]
    }

    /// Elements `at..at + dst.len()` of a cache as f32, an F16 one widened
    /// 8 at a time with F16C (exact, as `Cache::load`), inline.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn widen(c: Cache, at: usize, dst: &mut [f32]) {
        match c {
            Cache::F32(s) => dst.copy_from_slice(&s[at..at + dst.len()]),
            Cache::F16(s) => {
                let src = &s[at..at + dst.len()];
                let mut i = 0;
                while i + 8 <= dst.len() {
                    st(dst, i, f16::ld8(src, i));
                    i += 8;
                }
                for (d, x) in dst[i..].iter_mut().zip(&src[i..]) {
                    *d = x.to_f32();
                }
            }
        }
    }

    /// The `dst.len() / hd` cache rows from `at`, `stride` elements apart,
    /// `hd` elements each, as f32 into `dst` (`[hd, rows]`): a tile of one
    /// kv head's K or V, widened as [`widen`] widens.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn widen_rows(c: Cache, at: usize, stride: usize, hd: usize, dst: &mut [f32]) {
        for (jj, d) in dst.chunks_exact_mut(hd).enumerate() {
            widen(c, at + jj * stride, d);
        }
    }

    /// Scores `j..j + 8` of a row from their dots where the tile is
    /// [`TileLive::clear`]: [`finish8`]'s numbers for a bias of +0 (`x *
    /// scale + 0`, the same bits) without reading the mask.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn finish8_clear(p: &AttnParams, x: __m256, j: usize, out: &mut [f32]) -> __m256 {
        let x = softcap8(p, x);
        let sc = _mm256_add_ps(
            _mm256_mul_ps(x, _mm256_set1_ps(p.scale)),
            _mm256_setzero_ps(),
        );
        st(out, j, sc);
        sc
    }

    /// `softcap * tanh(x / softcap)` of each lane where the model caps its
    /// scores (`p.softcap > 0`), else `x`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn softcap8(p: &AttnParams, x: __m256) -> __m256 {
        if p.softcap <= 0.0 {
            return x;
        }
        let mut t = [0f32; 8];
        st(&mut t, 0, x);
        for v in t.iter_mut() {
            *v = p.softcap * (*v / p.softcap).tanh();
        }
        f32::ld8(&t, 0)
    }

    /// Scores `j..j + n` of a row from their dots: the near pair's `x[0]`
    /// where `near` lets it through, else the distant pair's `x[1]` where
    /// `far` does; soft-capped, scaled, biased (`x * scale + bias`), -inf
    /// where both masks hide the key. Stored into `out[j..j + n]` and
    /// returned (lanes from `n`: -inf).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn finish8(
        p: &AttnParams,
        [x, x2]: [__m256; 2],
        near: &[f32],
        far: Option<&[f32]>,
        j: usize,
        n: usize,
        out: &mut [f32],
    ) -> __m256 {
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut bias = ld_pad(near, j, n);
        let mut x = x;
        if let Some(fm) = far {
            let hidden = _mm256_cmp_ps::<_CMP_EQ_OQ>(bias, ninf);
            x = _mm256_blendv_ps(x, x2, hidden);
            bias = _mm256_blendv_ps(bias, ld_pad(fm, j, n), hidden);
        }
        let x = softcap8(p, x);
        let sc = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(p.scale)), bias);
        let sc = _mm256_blendv_ps(sc, ninf, _mm256_cmp_ps::<_CMP_EQ_OQ>(bias, ninf));
        if n == 8 {
            st(out, j, sc);
        } else {
            let mut t = [0f32; 8];
            st(&mut t, 0, sc);
            out[j..j + n].copy_from_slice(&t[..n]);
        }
        sc
    }

    /// `m[j..j + n]` in 8 lanes, -inf from `n`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn ld_pad(m: &[f32], j: usize, n: usize) -> __m256 {
        if n == 8 {
            return f32::ld8(m, j);
        }
        let mut t = [f32::NEG_INFINITY; 8];
        t[..n].copy_from_slice(&m[j..j + n]);
        f32::ld8(&t, 0)
    }

    /// The largest of 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn hmax8(v: __m256) -> f32 {
        let h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_max_ss(h, _mm_shuffle_ps::<1>(h, h));
        _mm_cvtss_f32(h)
    }

    /// `o[t] = sum_j w[t][j] * V[j]` for `N` heads (`o[t * hd..]`,
    /// `w[t * n_kv..]`) over the rows `j` that `live[j]` keeps; `V[j]` is
    /// `v[j * row..][..hd]`. A chunk of every head's output stays in
    /// registers across all rows, and each V chunk is loaded once for the
    /// group: `16 * C` elements a chunk, `C` chosen by the caller so that
    /// `2 * N * C` sums are in flight (one head's two alone would wait on
    /// the FMA's latency every row). Each element sums its rows in order
    /// whatever the chunk, so the same bits at every `C`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn weigh<E: Elem, const N: usize, const C: usize>(
        o: &mut [f32],
        w: &[f32],
        live: &[f32],
        v: &[E],
        row: usize,
        hd: usize,
    ) {
        let d = weigh_chunks::<E, N, C>(o, w, live, v, row, hd, 0);
        let d = weigh_chunks::<E, N, 1>(o, w, live, v, row, hd, d);
        let n_kv = live.len();
        for t in 0..N {
            for e in d..hd {
                let mut x = 0f32;
                for j in 0..n_kv {
                    if live[j] != f32::NEG_INFINITY {
                        x += w[t * n_kv + j] * E::get(v, j * row + e);
                    }
                }
                o[t * hd + e] = x;
            }
        }
    }

    /// [`weigh`]'s chunks of `16 * C` elements from `d` while whole ones
    /// fit; returns where they stopped.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn weigh_chunks<E: Elem, const N: usize, const C: usize>(
        o: &mut [f32],
        w: &[f32],
        live: &[f32],
        v: &[E],
        row: usize,
        hd: usize,
        mut d: usize,
    ) -> usize {
        const { assert!(C <= 4, "8 chunks of 8 at most") };
        let n_kv = live.len();
        while d + 16 * C <= hd {
            let mut acc = [[_mm256_setzero_ps(); N]; 8];
            for j in 0..n_kv {
                if live[j] == f32::NEG_INFINITY {
                    continue;
                }
                let mut wj = [_mm256_setzero_ps(); N];
                for (t, x) in wj.iter_mut().enumerate() {
                    *x = _mm256_set1_ps(w[t * n_kv + j]);
                }
                for (c, ac) in acc.iter_mut().take(2 * C).enumerate() {
                    let vc = E::ld8(v, j * row + d + 8 * c);
                    for (a, &x) in ac.iter_mut().zip(&wj) {
                        *a = _mm256_fmadd_ps(x, vc, *a);
                    }
                }
            }
            for (c, ac) in acc.iter().take(2 * C).enumerate() {
                for (t, &a) in ac.iter().enumerate() {
                    st(o, t * hd + d + 8 * c, a);
                }
            }
            d += 16 * C;
        }
        d
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn group_body<K: Elem, V: Elem>(
        h: &Heads,
        s: &mut GroupScratch,
        ig: usize,
        o: &mut [f32],
        q: &[f32],
        kc: &[K],
        vc: &[V],
    ) {
        let p = h.p;
        let (hd, n_kv, gsz) = (p.head_dim, p.n_kv, h.per_task);
        let tasks_per_token = p.n_head / gsz;
        let (i, first_head) = (ig / tasks_per_token, (ig % tasks_per_token) * gsz);
        let at_head = (first_head / h.group) * hd;
        let near = &h.mask[i * n_kv..(i + 1) * n_kv];
        let kw = &kc[p.kv_start * h.row + at_head..];
        let vw = &vc[p.kv_start * h.row + at_head..];
        let q: &[f32] = if h.round_q {
            for (d, &x) in s.qr.iter_mut().zip(q) {
                *d = f16::from_f32(x).to_f32();
            }
            &s.qr
        } else {
            q
        };
        // Two-window SelfExtend: the distant queries (rounded like `q`),
        // grouped keys, and per row the bias of whichever pair applies.
        let far = h.far.and_then(|f| {
            let k2 = K::of(f.k)?;
            let gw = gsz * hd;
            let q2 = &f.q[ig * gw..(ig + 1) * gw];
            s.qr2.resize(gw, 0.0);
            let q2: &[f32] = if h.round_q {
                for (d, &x) in s.qr2.iter_mut().zip(q2) {
                    *d = f16::from_f32(x).to_f32();
                }
                &s.qr2
            } else {
                q2
            };
            let fm = &f.mask[i * n_kv..(i + 1) * n_kv];
            s.merged.clear();
            s.merged.extend(
                near.iter()
                    .zip(fm)
                    .map(|(&a, &b)| if a != f32::NEG_INFINITY { a } else { b }),
            );
            Some((q2, &k2[p.kv_start * h.row + at_head..], fm))
        });
        let GroupScratch {
            scores,
            max,
            sum,
            merged,
            ..
        } = s;
        let live: &[f32] = if far.is_some() { merged } else { near };
        max.fill(f32::NEG_INFINITY);
        // 8 keys at a time (`score8`, as `block` scores them); a chunk no
        // pair of it sees is not read.
        let zero = _mm256_setzero_ps();
        let dead = |m: &[f32]| m.iter().all(|&x| x == f32::NEG_INFINITY);
        let mut c = 0;
        while c < n_kv {
            let n = (n_kv - c).min(8);
            let near_live = !dead(&near[c..c + n]);
            let far_live = far.is_some_and(|(_, _, fm)| !dead(&fm[c..c + n]));
            if !(near_live || far_live) {
                for t in 0..gsz {
                    scores[t * n_kv + c..t * n_kv + c + n].fill(f32::NEG_INFINITY);
                }
                c += n;
                continue;
            }
            let kn = &kw[c * h.row..];
            for t in 0..gsz {
                let x = if near_live {
                    score8(&q[t * hd..(t + 1) * hd], kn, h.row, n, hd)
                } else {
                    zero
                };
                let x2 = match far {
                    Some((q2, k2, _)) if far_live => {
                        score8(&q2[t * hd..(t + 1) * hd], &k2[c * h.row..], h.row, n, hd)
                    }
                    _ => zero,
                };
                let fm = far.map(|f| f.2);
                let sc = finish8(
                    p,
                    [x, x2],
                    near,
                    fm,
                    c,
                    n,
                    &mut scores[t * n_kv..(t + 1) * n_kv],
                );
                max[t] = max[t].max(hmax8(sc));
            }
            c += n;
        }
        for t in 0..gsz {
            let total = exp_row(&mut scores[t * n_kv..(t + 1) * n_kv], max[t]);
            sum[t] = total;
            if h.round_p && total > 0.0 {
                // ggml normalizes first, then rounds the weights to f16.
                round_weights(&mut scores[t * n_kv..(t + 1) * n_kv], 1.0 / total);
            }
        }
        let mut h0 = 0;
        while h0 < gsz {
            let nh = (gsz - h0).min(4);
            let (oh, wh) = (&mut o[h0 * hd..], &scores[h0 * n_kv..]);
            match nh {
                4 => weigh::<V, 4, 1>(oh, wh, live, vw, h.row, hd),
                3 => weigh::<V, 3, 1>(oh, wh, live, vw, h.row, hd),
                2 => weigh::<V, 2, 2>(oh, wh, live, vw, h.row, hd),
                _ => weigh::<V, 1, 4>(oh, wh, live, vw, h.row, hd),
            }
            h0 += nh;
        }
        for t in 0..gsz {
            let ot = &mut o[t * hd..(t + 1) * hd];
            if max[t] == f32::NEG_INFINITY {
                ot.fill(0.0); // fully masked: zeros
            } else if !h.round_p {
                let inv = 1.0 / sum[t];
                for x in ot.iter_mut() {
                    *x *= inv;
                }
            }
        }
    }
}

/// `sum(a[i] * b[i])` over 16 independent f32 lanes (two 8-lane vectors,
/// 16 elements a step), so a long dot is not one chain of dependent adds.
#[inline(always)]
fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    // acc[v][l]: elements 16i + 8v + l.
    let mut acc = [[0f32; 8]; 2];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for (v, acc) in acc.iter_mut().enumerate() {
            for l in 0..8 {
                acc[l] += x[8 * v + l] * y[8 * v + l];
            }
        }
    }
    let mut s = [0f32; 8];
    for l in 0..8 {
        s[l] = acc[0][l] + acc[1][l];
    }
    finish_dot(s, ta, tb)
}

/// The 8 lanes of a dot summed as a vector's halves fold (4, 2, 1), plus
/// the tail: the order every version shares.
#[inline(always)]
fn finish_dot(s: [f32; 8], ta: &[f32], tb: &[f32]) -> f32 {
    let mut tail = 0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    let s = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    s + tail
}

/// `o += sum_j w[j] * V[j]` over the rows `j` whose weight is not -inf, in
/// order of `j` for each element (the plain loop's order, so the same
/// numbers). `V[j]` is `v[j * row..][..o.len()]`. `o` is walked a chunk of
/// `CHUNK` elements at a time, held in registers across all rows instead
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// `wide::exp_row`'s polynomial vs libm's `exp`: Cephes' `expf` is
    /// within 2 ulp; 4 ulp of relative error (2^-21) leaves room.
    const EXP_REL_TOL: f32 = 4.0 * f32::EPSILON / 2.0;

    #[test]
    fn exp_row_matches_libm_and_zeroes_masked() {
        if !crate::qdot::has_avx2() {
            return; // the scalar twin is the plain path's own `exp`
        }
        // 0 down to -100 (past f32's smallest normal) in odd steps, a -inf
        // every 7th, and a tail of 3 after the 8-wide chunks.
        let mut row: Vec<f32> = (0..1003)
            .map(|i| {
                if i % 7 == 3 {
                    f32::NEG_INFINITY
                } else {
                    1.5 - i as f32 * 0.0997
                }
            })
            .collect();
        let want: Vec<f32> = row
            .iter()
            .map(|&x| {
                if x == f32::NEG_INFINITY {
                    0.0
                } else {
                    (x - 1.5).exp()
                }
            })
            .collect();
        let sum = super::wide::exp_row_for_test(&mut row, 1.5);
        for (j, (&g, &w)) in row.iter().zip(&want).enumerate() {
            let err = (g - w).abs();
            assert!(
                err <= EXP_REL_TOL * w || err < 1e-37,
                "exp at {j}: got {g:e}, libm {w:e}"
            );
        }
        let total: f32 = want.iter().sum();
        assert!((sum - total).abs() <= 1e-5 * total, "sum {sum} vs {total}");
    }

    /// The 512-bit `exp_row` gives the AVX2 one's bits, each value and the
    /// sum, over rows with a whole number of 16-lane steps, an 8-lane step
    /// left over, and a tail.
    #[test]
    #[cfg_attr(not(host_avx512), ignore = "this cpu lacks AVX-512 F or DQ")]
    fn exp_row_512_equals_the_avx2_one() {
        for n in [64usize, 72, 75, 1003] {
            let row: Vec<f32> = (0..n)
                .map(|i| {
                    if i % 5 == 2 {
                        f32::NEG_INFINITY
                    } else {
                        0.7 - i as f32 * 0.113
                    }
                })
                .collect();
            let (mut a, mut b) = (row.clone(), row);
            let sa = super::wide::exp_row_for_test(&mut a, 0.7);
            // A binary built where AVX-512 ran, run where it does not: say
            // so rather than fault.
            assert!(crate::qdot::has_avx512(), "this cpu lacks AVX-512 F or DQ");
            // SAFETY: AVX-512 F and DQ (and AVX2) confirmed just above.
            #[allow(unsafe_code)]
            let sb = unsafe { super::wide512::exp_row(&mut b, 0.7) };
            assert_eq!(sa.to_bits(), sb.to_bits(), "sum of {n}");
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "row of {n}"
            );
        }
    }
}
