//! Decode at depth: a few tokens against a long window, split across the
//! pool along the cache (scores) and along the head (weighted values), so
//! a model with few kv heads keeps every thread busy, and each kv head's K
//! and V rows are read once for all of its query heads.
//!
//! The grouped path (`wide::group`) gives a decode step one task per
//! (token, kv head), or per (token, head) when that leaves threads idle:
//! SmolLM2's 3 kv heads on 2 threads ran as 9 head tasks, each loading and
//! widening its kv head's K and V, 3 times the reads of the group, in
//! strided 128-byte pieces of each cache row, 8 lanes a step on a 512-bit
//! cpu. Here three passes on the pool, each reading whole runs of rows:
//!
//! 1. scores, a task per (token, chunk of [`TILE`]-row tiles): each tile
//!    widened one kv head at a time and scored for that head's query
//!    heads by the blocked path's kernels (`wide512::score_tile` or
//!    `wide::score_tile`), each row's largest kept per chunk;
//! 2. softmax, a task per (token, query head): the row's chunks gathered,
//!    its largest the largest of theirs, `exp` and sum over the whole row;
//! 3. weighted values, a task per (token, span of a cache row's elements,
//!    one or more kv heads' worth): each element sums its weighted V rows
//!    in key order, tile by tile (`weigh_tile`), live tiles only.
//!
//! Each step is the blocked path's on the same tiles in the same order
//! (a score by the same kernel; a maximum is exact; the row's `exp` and
//! sum are one call over the row; each output element's sum runs over the
//! rows in order, whole 16-lane registers of a head, or whole heads), so a
//! token gives the bits it gives in a prefill block, and a batch gives its
//! tokens' bits. One caveat, as the grouped path's: a tile this token
//! masks whole is skipped, where a block another token of which sees the
//! tile adds its rows with weight +0 — the same unless a masked V row
//! holds an infinity or a NaN.

#![allow(unsafe_code)]

use super::wide;
use super::{wide512, Cache, Heads, VTile, TILE};
use crate::matmul::{with_buffer, Cached};
use glint_backend::AttnParams;
use half::f16;
use rayon::prelude::*;
use std::cell::RefCell;

/// Fewest cache rows a decode step's tokens attend for this path: below
/// it the three passes' pool hand-offs cost what the grouped path's
/// repeated reads do (SmolLM2 on 2 threads: even at 256 rows, 1.2× at
/// 1024, 1.5-1.7× at 4096-8192).
pub(crate) const SPLIT_MIN_KV: usize = 256;

/// Fewest tiles a chunk of the scoring pass holds.
const MIN_CHUNK_TILES: usize = 4;

/// `m` tokens' queries `q` (`[head_dim, n_head, m]`) into `o` (the same
/// shape), as the blocked path computes them; `threads`: the pool's
/// (1 without `par`). No SelfExtend window (`h.far` is `None`).
pub(super) fn attend(h: &Heads, par: bool, threads: usize, m: usize, o: &mut [f32], q: &[f32]) {
    assert!(
        crate::qdot::has_avx2(),
        "split attention needs AVX2, FMA and F16C"
    );
    assert!(
        h.far.is_none(),
        "split attention takes no SelfExtend window"
    );
    // SAFETY: AVX2, FMA and F16C confirmed just above.
    unsafe { attend_body(h, par, threads, m, o, q) }
}

/// The passes' geometry: a token's window in `n_ch` chunks of `clen` cache
/// rows (the last may be short); a cache row's `n_head_kv * head_dim`
/// elements in `n_sp` spans of whole quanta of `qn` elements.
#[derive(Clone, Copy)]
struct Plan {
    clen: usize,
    n_ch: usize,
    qn: usize,
    n_sp: usize,
    /// Quanta in a row.
    nq: usize,
}

impl Plan {
    fn new(p: &AttnParams, m: usize, threads: usize) -> Plan {
        let n_tiles = p.n_kv.div_ceil(TILE);
        // About four scoring tasks a thread.
        let want = (4 * threads).div_ceil(m);
        let per = n_tiles.div_ceil(want).max(MIN_CHUNK_TILES);
        // Spans of whole 16-lane registers of a head (32 where they fit:
        // a 64-byte line of an F16 row), else of whole heads, so that each
        // element is summed as the whole head's `weigh_tile` sums it.
        let hd = p.head_dim;
        let qn = [32, 16].into_iter().find(|q| hd % q == 0).unwrap_or(hd);
        let nq = p.n_head_kv * hd / qn;
        Plan {
            clen: per * TILE,
            n_ch: n_tiles.div_ceil(per),
            qn,
            n_sp: threads.div_ceil(m).clamp(1, nq),
            nq,
        }
    }

    /// Rows of chunk `c`.
    fn len(&self, c: usize, n_kv: usize) -> usize {
        self.clen.min(n_kv - c * self.clen)
    }

    /// The elements of a cache row span `k` covers.
    fn span(&self, k: usize) -> (usize, usize) {
        let at = |k: usize| k * self.nq / self.n_sp * self.qn;
        (at(k), at(k + 1))
    }

    /// The most elements a span covers.
    fn max_span(&self) -> usize {
        (0..self.n_sp)
            .map(|k| self.span(k).1 - self.span(k).0)
            .max()
            .unwrap_or(0)
    }
}

/// `task(scratch, i, a_i, b_i)` over the chunks of `a` (`wa` wide) and `b`
/// (`wb` wide), on the pool when `par`.
fn each<S, B: Send>(
    par: bool,
    (a, wa): (&mut [f32], usize),
    (b, wb): (&mut [B], usize),
    init: impl Fn() -> S + Sync + Send,
    task: impl Fn(&mut S, usize, &mut [f32], &mut [B]) + Sync + Send,
) {
    if par {
        a.par_chunks_mut(wa)
            .zip(b.par_chunks_mut(wb))
            .enumerate()
            .for_each_init(init, |s, (i, (x, y))| task(s, i, x, y));
    } else {
        let mut s = init();
        for (i, (x, y)) in a.chunks_mut(wa).zip(b.chunks_mut(wb)).enumerate() {
            task(&mut s, i, x, y);
        }
    }
}

/// What a token's mask lets through of the tile of `tn` rows from `j`:
/// (some row, every row with a bias of exactly +0).
fn tile_live(mask: &[f32], j: usize, tn: usize) -> (bool, bool) {
    let t = &mask[j..j + tn];
    let clear = t.iter().all(|&x| x.to_bits() == 0);
    (clear || t.iter().any(|&x| x != f32::NEG_INFINITY), clear)
}

thread_local! {
    /// The scores pass's output and the softmax pass's weights, kept by
    /// the calling thread between calls (every element is written before
    /// it is read, so they are not cleared; counted in the thread scratch).
    static SCORES: RefCell<Cached<f32>> = const { RefCell::new(Cached::new()) };
    static WEIGHTS: RefCell<Cached<f32>> = const { RefCell::new(Cached::new()) };
}

/// `buf`'s first `n` elements, grown to hold them.
fn first(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if buf.len() < n {
        buf.resize(n, 0.0);
    }
    &mut buf[..n]
}

/// The most floats of scores and weights a thread keeps between calls
/// (16 MiB): a larger call (many tokens over a long window) takes fresh
/// buffers, freed on return.
const KEEP_MAX: usize = 4 << 20;

#[target_feature(enable = "avx2,fma,f16c")]
fn attend_body(h: &Heads, par: bool, threads: usize, m: usize, o: &mut [f32], q: &[f32]) {
    let plan = Plan::new(h.p, m, threads);
    let n_seg = m * plan.n_ch * h.p.n_head * plan.clen;
    let n_w = m * h.p.n_head * h.p.n_kv;
    if n_seg + n_w > KEEP_MAX {
        let (mut seg, mut w) = (vec![0f32; n_seg], vec![0f32; n_w]);
        return passes(h, par, &plan, m, o, q, &mut seg, &mut w);
    }
    with_buffer(&SCORES, |seg| {
        with_buffer(&WEIGHTS, |w| {
            let (seg, w) = (first(seg, n_seg), first(w, n_w));
            passes(h, par, &plan, m, o, q, seg, w)
        })
    })
}

/// The three passes into `o`; `seg`: `[clen, n_head]` a (token, chunk),
/// the chunk's rows at a stride of its length; `w`: `[n_kv, n_head, m]`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
fn passes(
    h: &Heads,
    par: bool,
    plan: &Plan,
    m: usize,
    o: &mut [f32],
    q: &[f32],
    seg: &mut [f32],
    w: &mut [f32],
) {
    let p = h.p;
    let (hd, n_kv, nh, g) = (p.head_dim, p.n_kv, p.n_head, h.group);
    let plan = *plan;
    let Plan { clen, n_ch, .. } = plan;
    let mask = |i: usize| &h.mask[i * n_kv..(i + 1) * n_kv];

    // 1. Scores into seg; cmax: [n_head] a (token, chunk), each row's
    // largest.
    let mut cmax = vec![f32::NEG_INFINITY; m * n_ch * nh];
    let init = || (vec![0f32; nh * hd], vec![0f32; TILE * hd]);
    each(
        par,
        (&mut *seg, nh * clen),
        (&mut cmax, nh),
        init,
        |(qr, kt), ti, sg, mx| {
            let (i, c) = (ti / n_ch, ti % n_ch);
            let (c0, len) = (c * clen, plan.len(c, n_kv));
            for (d, &x) in qr.iter_mut().zip(&q[i * nh * hd..(i + 1) * nh * hd]) {
                *d = if h.round_q {
                    f16::from_f32(x).to_f32()
                } else {
                    x
                };
            }
            // The chunk as a window of its own: rows and mask from c0.
            let pc = AttnParams { n_kv: len, ..*p };
            let mrow = &mask(i)[c0..c0 + len];
            let sg = &mut sg[..nh * len];
            for jt in (0..len).step_by(TILE) {
                let tn = TILE.min(len - jt);
                let (live, clear) = tile_live(mrow, jt, tn);
                if !live {
                    for r in 0..nh {
                        sg[r * len + jt..][..tn].fill(f32::NEG_INFINITY);
                    }
                    continue;
                }
                for hk in 0..p.n_head_kv {
                    let at = (p.kv_start + c0 + jt) * h.row + hk * hd;
                    let (qg, sgh, mxh) = (
                        &qr[hk * g * hd..],
                        &mut sg[hk * g * len..],
                        &mut mx[hk * g..],
                    );
                    if h.wide512 {
                        // The 512-bit kernels on the cache's own rows.
                        // SAFETY: `wide512` is set only where
                        // `has_avx512()` confirmed AVX-512 F and DQ.
                        unsafe {
                            match h.k {
                                Cache::F32(k) => {
                                    let keys = direct(k, at, h.row, hd);
                                    wide512::score_tile(
                                        &pc, qg, g, g, keys, jt, tn, mrow, clear, sgh, mxh,
                                    )
                                }
                                Cache::F16(k) => {
                                    let keys = direct(k, at, h.row, hd);
                                    wide512::score_tile(
                                        &pc, qg, g, g, keys, jt, tn, mrow, clear, sgh, mxh,
                                    )
                                }
                            }
                        }
                    } else {
                        let kt = &mut kt[..tn * hd];
                        wide::widen_rows(h.k, at, h.row, hd, kt);
                        let kt = Some(&*kt);
                        wide::score_tile(&pc, g, qg, g, kt, None, jt, tn, mrow, clear, sgh, mxh);
                    }
                }
            }
        },
    );

    // 2. Softmax. w: a query head's weights; stats: [2, n_head, m], its
    // largest score and the sum of its exps.
    let seg = &*seg;
    let mut stats = vec![0f32; m * nh * 2];
    each(
        par,
        (&mut *w, n_kv),
        (&mut stats, 2),
        || (),
        |_, rr, row, st| {
            let (i, head) = (rr / nh, rr % nh);
            let mut max = f32::NEG_INFINITY;
            for c in 0..n_ch {
                let (c0, len) = (c * clen, plan.len(c, n_kv));
                let at = (i * n_ch + c) * nh * clen + head * len;
                row[c0..c0 + len].copy_from_slice(&seg[at..at + len]);
                max = max.max(cmax[(i * n_ch + c) * nh + head]);
            }
            let total = if h.wide512 {
                // SAFETY: as in pass 1.
                unsafe { wide512::exp_row(row, max) }
            } else {
                wide::exp_row(row, max)
            };
            if h.round_p && total > 0.0 {
                wide::round_weights(row, 1.0 / total);
            }
            st.copy_from_slice(&[max, total]);
        },
    );

    // 3. Weighted values. acc: [span, group] a (token, span): row t holds,
    // for each element of the span, query head t of that element's kv
    // head.
    let ms = plan.max_span();
    let mut acc = vec![0f32; m * plan.n_sp * g * ms];
    each(
        par,
        (&mut acc, g * ms),
        (&mut vec![(); m * plan.n_sp], 1),
        || (),
        |_, vi, acc, _| {
            let (i, k) = (vi / plan.n_sp, vi % plan.n_sp);
            let (e0, e1) = plan.span(k);
            let mrow = mask(i);
            for j0 in (0..n_kv).step_by(TILE) {
                let tn = TILE.min(n_kv - j0);
                if !tile_live(mrow, j0, tn).0 {
                    continue;
                }
                match h.v {
                    Cache::F32(v) => weigh_span(h, acc, &w[i * nh * n_kv..], v, j0, tn, (e0, e1)),
                    Cache::F16(v) => weigh_span(h, acc, &w[i * nh * n_kv..], v, j0, tn, (e0, e1)),
                }
            }
        },
    );

    // Each head's spans, normalized: zeros for a head every row masks.
    for (vi, a) in acc.chunks_exact(g * ms).enumerate() {
        let (i, k) = (vi / plan.n_sp, vi % plan.n_sp);
        let (e0, e1) = plan.span(k);
        let sw = e1 - e0;
        for hk in e0 / hd..e1.div_ceil(hd) {
            let (lo, hi) = (e0.max(hk * hd), e1.min((hk + 1) * hd));
            for t in 0..g {
                let head = i * nh + hk * g + t;
                let dst = &mut o[head * hd + lo - hk * hd..][..hi - lo];
                let src = &a[t * sw + lo - e0..][..hi - lo];
                let (max, total) = (stats[2 * head], stats[2 * head + 1]);
                if max == f32::NEG_INFINITY {
                    dst.fill(0.0);
                } else if h.round_p {
                    dst.copy_from_slice(src);
                } else {
                    let inv = 1.0 / total;
                    for (d, &x) in dst.iter_mut().zip(src) {
                        *d = x * inv;
                    }
                }
            }
        }
    }
}

/// The keys of a tile from cache element `at` (rows `stride` apart) for
/// the 512-bit scoring kernel.
fn direct<E>(k: &[E], at: usize, stride: usize, hd: usize) -> wide512::Direct<'_, E> {
    wide512::Direct {
        k: &k[at..],
        stride,
        hd,
    }
}

/// The tile of `tn` rows from window row `j0` weighed into `acc` (`[e1 -
/// e0, group]`) for the cache row elements `e0..e1`: each kv head's part
/// of the span with its query heads' weights (`w`: `[n_kv, n_head]`, the
/// token's), V read from the cache and widened in registers.
#[target_feature(enable = "avx2,fma,f16c")]
fn weigh_span<E: wide512::Lanes16>(
    h: &Heads,
    acc: &mut [f32],
    w: &[f32],
    v: &[E],
    j0: usize,
    tn: usize,
    (e0, e1): (usize, usize),
) {
    let (p, g) = (h.p, h.group);
    let (hd, n_kv, sw) = (p.head_dim, p.n_kv, e1 - e0);
    for hk in e0 / hd..e1.div_ceil(hd) {
        let (lo, hi) = (e0.max(hk * hd), e1.min((hk + 1) * hd));
        let tile = VTile {
            v: &v[(p.kv_start + j0) * h.row + lo..],
            stride: h.row,
            rows: tn,
            width: hi - lo,
        };
        let w = &w[hk * g * n_kv + j0..];
        let mut r0 = 0;
        while r0 < g {
            let nr = (g - r0).min(4);
            let (o, wr) = (&mut acc[r0 * sw + lo - e0..], &w[r0 * n_kv..]);
            if h.wide512 {
                // SAFETY: `wide512` is set only where `has_avx512()`
                // confirmed AVX-512 F and DQ.
                unsafe {
                    match nr {
                        4 => wide512::weigh_tile::<E, 4>(o, sw, wr, n_kv, tile),
                        3 => wide512::weigh_tile::<E, 3>(o, sw, wr, n_kv, tile),
                        2 => wide512::weigh_tile::<E, 2>(o, sw, wr, n_kv, tile),
                        _ => wide512::weigh_tile::<E, 1>(o, sw, wr, n_kv, tile),
                    }
                }
            } else {
                match nr {
                    4 => wide::weigh_tile::<E, 4>(o, sw, wr, n_kv, tile),
                    3 => wide::weigh_tile::<E, 3>(o, sw, wr, n_kv, tile),
                    2 => wide::weigh_tile::<E, 2>(o, sw, wr, n_kv, tile),
                    _ => wide::weigh_tile::<E, 1>(o, sw, wr, n_kv, tile),
                }
            }
            r0 += nr;
        }
    }
}
