//! `mul_mat` and `get_rows`: everything that reads weight rows.

use glint_backend::{BackendError, GgmlType, Result};
use rayon::prelude::*;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::act;
use crate::amx;
use crate::elementwise;
use crate::qdot::{self, DotFn, DotRowsFn};
use crate::weights::{dequant_row, dot, row_dot};

/// Up to this many activation columns take the decode path.
pub const DECODE_MAX_M: usize = 8;
/// From this many activation columns the fast kernels take the AMX tiles
/// ([`amx`]) where the cpu has them, else the lane kernels
/// ([`qdot::fast_lanes`]) where the type has them: a prefill's worth. Both
/// give the same numbers (ggml's reference loops' for the 32-element
/// types, exact super-block sums for the K-quants); the vector kernels'
/// differ from those by rounding, and with activations quantized again at
/// every layer a rounding difference grows to the size of the
/// quantization's own (SmolLM2, one prompt: logits 0.5 apart on average,
/// KLD 0.004 between the two, as far from each other as each is from an
/// f32 run). So below this, where sequences decode together (up to 63 a
/// step), every column keeps the vector kernels' numbers whatever shares
/// the step, and a sequence decoding alone gets what it gets beside
/// others; a prompt's numbers depend on whether its micro-batch reached
/// this many tokens, as llama.cpp's do on its own kernel switches.
pub const AMX_MIN_M: usize = 64;
/// Weight rows per rayon task on the decode path.
const DECODE_ROWS_PER_TASK: usize = 16;
/// Weight rows dequantized together on the prefill path: `[k, PREFILL_ROWS]`
/// f32 stays in L2 (k = 4096: 256 KiB) while every column passes over it.
const PREFILL_ROWS: usize = 16;

/// A weight matrix as stored, `w[k, n]`: `n` rows of `row_bytes` bytes of
/// type `ty`, each `k` values once dequantized.
#[derive(Clone, Copy, Debug)]
pub struct WeightRows<'a> {
    pub ty: GgmlType,
    pub bytes: &'a [u8],
    pub row_bytes: usize,
    pub k: usize,
    pub n: usize,
}

impl WeightRows<'_> {
    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}

/// `out[n, m] = w[k, n] · x[k, m]`.
///
/// `x`: `[k, m]` f32; `out`: `[n, m]` f32. The cost of a forward pass is
/// mostly here.
pub fn mul_mat(w: WeightRows, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    let (ty, k, n) = (w.ty, w.k, w.n);
    if n == 0 || m == 0 {
        return Ok(());
    }
    // by_row: [m, n] — by_row[r * m + c] = out[c * n + r]; tasks own whole weight rows.
    let mut by_row = vec![0f32; n * m];
    if m <= DECODE_MAX_M {
        // Decode: each weight row is read once and dotted with every column.
        by_row
            .par_chunks_mut(m * DECODE_ROWS_PER_TASK)
            .enumerate()
            .try_for_each_init(
                || vec![0f32; k], // row: [k] f32, the dequantized weight row
                |row, (blk, chunk)| -> Result<()> {
                    for (rr, outs) in chunk.chunks_mut(m).enumerate() {
                        let r = blk * DECODE_ROWS_PER_TASK + rr;
                        if m == 1 {
                            outs[0] = row_dot(ty, w.row(r), &x[..k])?;
                        } else {
                            dequant_row(ty, w.row(r), row)?;
                            for (c, o) in outs.iter_mut().enumerate() {
                                *o = dot(row, &x[c * k..(c + 1) * k]);
                            }
                        }
                    }
                    Ok(())
                },
            )?;
    } else {
        // Prefill: dequantize a block of rows once, then pass every column over it.
        by_row
            .par_chunks_mut(m * PREFILL_ROWS)
            .enumerate()
            .try_for_each_init(
                || vec![0f32; k * PREFILL_ROWS], // rows: [k, PREFILL_ROWS] f32
                |rows, (blk, chunk)| -> Result<()> {
                    let r0 = blk * PREFILL_ROWS;
                    let nr = chunk.len() / m;
                    for rr in 0..nr {
                        dequant_row(ty, w.row(r0 + rr), &mut rows[rr * k..(rr + 1) * k])?;
                    }
                    for c in 0..m {
                        let xc = &x[c * k..(c + 1) * k];
                        for rr in 0..nr {
                            chunk[rr * m + c] = dot(&rows[rr * k..(rr + 1) * k], xc);
                        }
                    }
                    Ok(())
                },
            )?;
    }
    out.par_chunks_mut(n).enumerate().for_each(|(c, col)| {
        for (r, o) in col.iter_mut().enumerate() {
            *o = by_row[r * m + c];
        }
    });
    Ok(())
}

/// `mul_mat` with ggml's numerics: block-quantized weights meet activations
/// quantized once per column to the weight type's `vec_dot_type` (Q8_0, Q8_1
/// or Q8_K) through integer dots (`glint_quant::vec_dot`, ggml's reference
/// loops); F16/BF16 weights meet activations rounded to that type; F32 is
/// plain f32. Same shapes as `mul_mat`.
pub fn mul_mat_ggml(w: WeightRows, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    mul_mat_ggml_with(Kernels::Fast, w, x, m, out)
}

/// Which integer dots [`mul_mat_ggml_with`] uses: the same integer sums
/// per block; the float sums differ by rounding only (the tests name the
/// tolerance per type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels {
    /// [`qdot::fast_dot`]: AVX2 where the cpu has it (decode on AVX-512
    /// VNNI: [`qdot::fast_dot_prepared`], the same bits), else the plain
    /// kernels; from [`AMX_MIN_M`] columns on a cpu with AMX-INT8
    /// ([`amx::available`]), the AMX tiles for the types [`amx::supports`].
    Fast,
    /// [`qdot::plain_dot`], the portable twins.
    Plain,
    /// [`Kernels::Fast`] without the AMX tiles (for tests and benchmarks).
    NoAmx,
    /// [`Kernels::Fast`] held to the AVX2 tier: no AVX-512 kernel and no
    /// AMX tile, what a cpu with AVX2 but without AVX-512 runs (for tests
    /// and benchmarks on cpus that have more); [`Kernels::Plain`]'s loops
    /// where the cpu lacks AVX2 too.
    Avx2,
    /// The AMX path at any column count, its tile products modelled in
    /// plain Rust ([`amx::Unit::Model`]; any cpu, slow) where the type has
    /// it; [`Kernels::Plain`] for the other types. For tests.
    AmxModel,
    /// `glint_quant::vec_dot`, ggml's reference loops.
    Reference,
}

/// [`mul_mat_ggml`] with a choice of dot kernels (for tests and benchmarks).
pub fn mul_mat_ggml_with(
    kernels: Kernels,
    w: WeightRows,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    mul_mat_ggml_par(true, kernels, w, x, m, out)
}

/// [`mul_mat_ggml_with`] on the current rayon pool when `par`, else on the
/// calling thread (for products too small to be worth waking the pool).
pub(crate) fn mul_mat_ggml_par(
    par: bool,
    kernels: Kernels,
    wr: WeightRows,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    let WeightRows {
        ty,
        bytes: w,
        row_bytes,
        k,
        n,
    } = wr;
    let vt = ty.vec_dot_type();
    match vt {
        GgmlType::F16 | GgmlType::BF16 => return mul_mat(wr, &round_to(vt, x), m, out),
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => {}
        _ => return mul_mat(wr, x, m, out),
    }
    if n == 0 || m == 0 {
        return Ok(());
    }
    let act_bytes = check_rows(ty, w, row_bytes, k, n)?;
    let fast: Option<DotFn> = match kernels {
        Kernels::Fast | Kernels::NoAmx => qdot::fast_dot(ty),
        // fast_dot, never anything but AVX2 or plain: spelled out so that
        // stays true of this tier if fast_dot gains one.
        Kernels::Avx2 => qdot::avx2_dot(ty).or_else(|| qdot::plain_dot(ty)),
        Kernels::Plain | Kernels::AmxModel => qdot::plain_dot(ty),
        Kernels::Reference => None,
    };
    if fast.is_none() {
        // ggml's reference loop; with the lengths checked above it can only
        // fail for a type it does not support, which this call reports.
        glint_quant::vec_dot(ty, &w[..row_bytes], &vec![0u8; act_bytes]).map_err(quant_err)?;
    }
    with_buffer(&ACT, |act| -> Result<()> {
        // act: [m] rows of act_bytes, each column of x quantized once.
        act.resize(act_bytes * m, 0);
        let act = &mut act[..act_bytes * m];
        // A few columns are quantized faster than the pool wakes.
        let par_quantize = par && k * m >= elementwise::ELEMS_PER_TASK;
        quantize_cols(par_quantize, vt, &x[..k * m], act_bytes, act)?;
        let unit = match kernels {
            Kernels::Fast if m >= AMX_MIN_M && amx::available() => Some(amx::Unit::Amx),
            Kernels::AmxModel => Some(amx::Unit::Model),
            _ => None,
        };
        if let Some(unit) = unit.filter(|_| amx::supports(ty)) {
            amx::mul_mat(unit, par, ty, w, row_bytes, n, act, act_bytes, m, out);
            return Ok(());
        }
        // multi-column and tile kernels
        let multi = matches!(kernels, Kernels::Fast | Kernels::NoAmx);
        let avx2 = kernels == Kernels::Avx2;
        let dot_cols = if avx2 {
            qdot::avx2_dot_cols(ty)
        } else {
            qdot::fast_dot_cols(ty).filter(|_| multi)
        };
        let product = QProduct {
            par,
            ty,
            fast,
            // fast_dot's, where fast is (the AVX2 kernels on these tiers).
            rows: qdot::fast_dot_rows(ty).filter(|_| multi || avx2),
            dot_cols,
            w,
            row_bytes,
            n,
            act,
            act_bytes,
            m,
        };
        let threads = if par {
            rayon::current_num_threads().max(1)
        } else {
            1
        };
        if m == 1 {
            match qdot::fast_dot_prepared(ty).filter(|_| multi) {
                Some(row) => with_buffer(&PREP, |buf| {
                    // prep: the column prepared for the VNNI row kernel.
                    let prep = prepare_col(ty, act, k, buf);
                    let product = QProduct {
                        fast: Some(row),
                        rows: qdot::fast_dot_prepared_rows(ty),
                        act: prep,
                        act_bytes: prep.len(),
                        ..product
                    };
                    product.decode(&mut out[..n]);
                }),
                None => product.decode(&mut out[..n]),
            }
            return Ok(());
        }
        // From AMX_MIN_M columns: the lane kernels where the type has them
        // (the AMX tiles' numbers); below, the tiles (the multi-column
        // kernels' numbers), else the multi-column kernels.
        let lanes = match kernels {
            _ if m < AMX_MIN_M => None,
            Kernels::Fast | Kernels::NoAmx => qdot::fast_lanes(ty),
            Kernels::Avx2 => qdot::avx2_lanes(ty),
            _ => None,
        };
        let (tiles, prepare): (_, PrepareFn) = if avx2 {
            (qdot::avx2_tile(ty), qdot::prepare_tile_col_avx2)
        } else {
            (qdot::fast_tile(ty), qdot::prepare_tile_col)
        };
        let tiles = tiles.filter(|_| product.dot_cols.is_some() && lanes.is_none());
        with_buffer(&PREP, |prep| {
            let prep = product.prepare(tiles, lanes, prepare, k, prep);
            if m >= 2 * threads * MIN_COL_BLOCK {
                product.prefill(&prep, threads, out);
            } else {
                product.few_columns(&prep, out);
            }
        });
        Ok(())
    })
}

/// Several weights over one activation column (a decode step's Q, K and V,
/// or gate and up), with ggml's numerics and the fast dots: `x` (`[k]`) is
/// quantized once per `vec_dot_type` the weights need, and every weight's
/// rows go to the pool as one job instead of one job (one wake-up of the
/// pool) per weight. Each output element is the same dot `mul_mat_ggml`
/// computes, so the same bits (a weight with a VNNI row kernel reads the
/// column prepared once for its type). Returns `Ok(false)`, having done nothing,
/// where that does not apply (a weight without an integer dot or a fast
/// kernel, rows that do not fit): the caller runs the weights one by one.
pub(crate) fn mul_mats_decode(
    par: bool,
    ws: &[WeightRows],
    x: &[f32],
    outs: &mut [&mut [f32]],
) -> Result<bool> {
    // Per weight: its fast dot and where its activation bytes sit in act.
    // (and its kernel over consecutive rows, where there is one).
    let mut plan: Vec<(DotFn, Option<DotRowsFn>, usize, usize)> = Vec::with_capacity(ws.len());
    // The distinct vec_dot_types, each quantized once: (type, offset, bytes).
    let mut quants: Vec<(GgmlType, usize, usize)> = Vec::with_capacity(2);
    // The weight types with a VNNI row kernel, the column prepared once for
    // each (from its quantized vec_dot_type at quants' offset):
    // (type, offset, bytes, the quantized column's offset and bytes).
    let mut preps: Vec<(GgmlType, usize, usize, usize, usize)> = Vec::with_capacity(2);
    let mut total = 0;
    // The offset of `bytes` more in act.
    let place = |total: &mut usize, bytes: usize| {
        *total += bytes;
        *total - bytes
    };
    for w in ws {
        let vt = w.ty.vec_dot_type();
        if !matches!(vt, GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K) || w.k != x.len() {
            return Ok(false);
        }
        let Some(f) = qdot::fast_dot(w.ty) else {
            return Ok(false);
        };
        let act_bytes = check_rows(w.ty, w.bytes, w.row_bytes, w.k, w.n)?;
        let at = match quants.iter().find(|q| q.0 == vt) {
            Some(q) => q.1,
            None => {
                let at = place(&mut total, act_bytes);
                quants.push((vt, at, act_bytes));
                at
            }
        };
        plan.push(match qdot::fast_dot_prepared(w.ty) {
            Some(row) => {
                let bytes = prepared_col_bytes(w.k);
                let p_at = match preps.iter().find(|p| p.0 == w.ty) {
                    Some(p) => p.1,
                    None => {
                        let p_at = place(&mut total, bytes);
                        preps.push((w.ty, p_at, bytes, at, act_bytes));
                        p_at
                    }
                };
                (row, qdot::fast_dot_prepared_rows(w.ty), p_at, bytes)
            }
            None => (f, qdot::fast_dot_rows(w.ty), at, act_bytes),
        });
    }
    with_buffer(&ACT, |act| -> Result<bool> {
        act.resize(total.max(act.len()), 0);
        for &(vt, at, len) in &quants {
            act::quantize_row(vt, x, &mut act[at..at + len]).map_err(quant_err)?;
        }
        for &(ty, p_at, bytes, q_at, q_len) in &preps {
            // Every prepared column is placed after the quantized one it
            // reads (a weight's quantized column is placed before its own).
            let (q, p) = act.split_at_mut(p_at);
            qdot::prepare_tile_col(ty, &q[q_at..q_at + q_len], &mut p[..bytes]);
        }
        let act = &act[..total];
        // Tasks: (weight, first row, its outputs), rows_per_task rows each.
        let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::new();
        for (i, (w, o)) in ws.iter().zip(outs.iter_mut()).enumerate() {
            let rows = rows_per_task(w.n, w.row_bytes);
            for (t, chunk) in o[..w.n].chunks_mut(rows).enumerate() {
                tasks.push((i, t * rows, chunk));
            }
        }
        let run = |(i, r0, o): (usize, usize, &mut [f32])| {
            let (w, (f, more, at, len)) = (&ws[i], plan[i]);
            dot_rows(w.bytes, w.row_bytes, r0, &act[at..at + len], f, more, o);
        };
        if par {
            tasks.into_par_iter().for_each(run);
        } else {
            tasks.into_iter().for_each(run);
        }
        Ok(true)
    })
}

/// `o[i]` = weight row `r0 + i` (of `w`, `row_bytes` each) · the column
/// `a`: with `rows` where there is one (the same bits as `one` on each),
/// else one by one with `one`.
fn dot_rows(
    w: &[u8],
    row_bytes: usize,
    r0: usize,
    a: &[u8],
    one: DotFn,
    rows: Option<DotRowsFn>,
    o: &mut [f32],
) {
    let w = &w[r0 * row_bytes..(r0 + o.len()) * row_bytes];
    match rows {
        Some(f) => f(w, row_bytes, a, o),
        None => {
            for (o, row) in o.iter_mut().zip(w.chunks_exact(row_bytes)) {
                *o = one(row, a);
            }
        }
    }
}

/// Bytes of one activation column of `k` elements prepared for the tile and
/// row kernels ([`qdot::prepare_tile_col`]): [`qdot::TILE_BLOCK`] a block.
fn prepared_col_bytes(k: usize) -> usize {
    (k / 32) * qdot::TILE_BLOCK
}

/// The quantized column `act` (`k` elements) prepared for `ty`'s VNNI row
/// kernel ([`qdot::fast_dot_prepared`]) in `buf`: [`qdot::TILE_BLOCK`]
/// bytes a block.
fn prepare_col<'b>(ty: GgmlType, act: &[u8], k: usize, buf: &'b mut Vec<u8>) -> &'b [u8] {
    let bytes = prepared_col_bytes(k);
    buf.resize(bytes.max(buf.len()), 0);
    let prep = &mut buf[..bytes];
    qdot::prepare_tile_col(ty, act, prep);
    prep
}

/// `x` (`[k, m]` f32) quantized to `vt` a column at a time into `act`
/// (`[m]` rows of `act_bytes` = `vt.bytes_for(k)`, checked by the caller).
fn quantize_cols(
    par: bool,
    vt: GgmlType,
    x: &[f32],
    act_bytes: usize,
    act: &mut [u8],
) -> Result<()> {
    if act.len() == act_bytes {
        return act::quantize_row(vt, x, act).map_err(quant_err);
    }
    // quantize_row cannot fail here: x has m columns of k, and act_bytes is
    // vt.bytes_for(k).
    let k = x.len() / (act.len() / act_bytes);
    elementwise::rows(par, act, act_bytes, |c, a| {
        let _ = act::quantize_row(vt, &x[c * k..(c + 1) * k], a);
    });
    Ok(())
}

/// `x` rounded to the float type `vt` (F16 or BF16), as f32.
fn round_to(vt: GgmlType, x: &[f32]) -> Vec<f32> {
    match vt {
        GgmlType::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
        _ => x
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_f32())
            .collect(),
    }
}

fn quant_err(e: glint_quant::QuantError) -> BackendError {
    BackendError::Shape {
        op: "mul_mat",
        detail: e.to_string(),
    }
}

/// The bytes of one activation row of `k` (the weight type's
/// `vec_dot_type`), once `n` weight rows of `row_bytes` hold `k` elements
/// each: the fast dots trust that a weight row and an activation row hold
/// the same number of blocks, so it is checked once here.
fn check_rows(ty: GgmlType, w: &[u8], row_bytes: usize, k: usize, n: usize) -> Result<usize> {
    let vt = ty.vec_dot_type();
    let act_bytes = vt.bytes_for(k as u64).ok_or_else(|| BackendError::Shape {
        op: "mul_mat",
        detail: format!("row of {k} is not a whole number of {vt} blocks"),
    })? as usize;
    if ty.bytes_for(k as u64) != Some(row_bytes as u64) || w.len() < n * row_bytes {
        return Err(BackendError::Shape {
            op: "mul_mat",
            detail: format!(
                "{n} rows of {k} {ty} need {:?} bytes each, got {row_bytes} ({} in all)",
                ty.bytes_for(k as u64),
                w.len()
            ),
        });
    }
    Ok(act_bytes)
}

/// [`qdot::prepare_tile_col`] or its AVX2 twin (the same bytes).
type PrepareFn = fn(GgmlType, &[u8], &mut [u8]);

/// One integer-dot product, its activations quantized: what its three
/// paths (decode, prefill, a few columns) share.
struct QProduct<'a> {
    par: bool,
    ty: GgmlType,
    /// The one-column dot; `None`: ggml's reference loop.
    fast: Option<DotFn>,
    /// Decode: `fast` over consecutive rows, where there is one.
    rows: Option<DotRowsFn>,
    /// The multi-column dots, for [`Kernels::Fast`] (and the AVX2 ones for
    /// [`Kernels::Avx2`]) where the cpu has them.
    dot_cols: Option<qdot::DotCols>,
    /// w: `n` rows of `row_bytes`.
    w: &'a [u8],
    row_bytes: usize,
    n: usize,
    /// act: `[m]` rows of `act_bytes`, the quantized activation columns
    /// (decode with a VNNI row kernel in `fast`: the one column prepared).
    act: &'a [u8],
    act_bytes: usize,
    m: usize,
}

impl QProduct<'_> {
    fn w_row(&self, r: usize) -> &[u8] {
        &self.w[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    fn act_col(&self, c: usize) -> &[u8] {
        &self.act[c * self.act_bytes..(c + 1) * self.act_bytes]
    }

    /// Weight row `r` · activation column `a` (one column's bytes).
    #[inline]
    fn dot(&self, r: usize, a: &[u8]) -> f32 {
        match self.fast {
            Some(f) => f(self.w_row(r), a),
            None => glint_quant::vec_dot(self.ty, self.w_row(r), a).unwrap_or(f32::NAN),
        }
    }

    /// Activation columns `c..c + N`.
    fn cols_of<const N: usize>(&self, c: usize) -> [&[u8]; N] {
        std::array::from_fn(|i| self.act_col(c + i))
    }

    /// Weight row `r` · activation columns `c..c + outs.len()` (a group
    /// from [`col_groups`]) into `outs`: the weight row is read once for
    /// the group where there is a multi-column kernel (a lone column, which
    /// only the last column block of a prefill can leave, goes through the
    /// two-column kernel beside itself, for the same numbers as its
    /// neighbours).
    #[inline]
    fn dot_group(&self, r: usize, c: usize, outs: &mut [f32]) {
        let w = self.w_row(r);
        match (self.dot_cols, outs.len()) {
            (Some(k), qdot::COLS) => outs.copy_from_slice(&(k.four)(w, self.cols_of(c))),
            (Some(k), 3) => outs.copy_from_slice(&(k.three)(w, self.cols_of(c))),
            (Some(k), 2) => outs.copy_from_slice(&(k.two)(w, self.cols_of(c))),
            (Some(k), 1) => outs[0] = (k.two)(w, [self.act_col(c); 2])[0],
            _ => {
                for (i, o) in outs.iter_mut().enumerate() {
                    *o = self.dot(r, self.act_col(c + i));
                }
            }
        }
    }

    /// Weight rows `rs` · activation columns `c..c + width` (a group from
    /// [`col_groups`]): `put(r, i, v)` takes row `r`'s dot with column
    /// `c + i`. [`qdot::TILE`] rows a call where there is a tile kernel,
    /// the rows left a row at a time; the same numbers either way.
    #[inline]
    fn dot_rows(
        &self,
        prep: &Prepared,
        rs: std::ops::Range<usize>,
        c: usize,
        width: usize,
        mut put: impl FnMut(usize, usize, f32),
    ) {
        let mut r = rs.start;
        if let Some(t) = prep.tiles {
            while r + qdot::TILE <= rs.end {
                let xs = std::array::from_fn(|j| self.w_row(r + j));
                let kernels = (t.four, t.three, t.two);
                tile_width(kernels, xs, prep, c, width, r, &mut put);
                r += qdot::TILE;
            }
        }
        let mut outs = [0f32; qdot::COLS];
        let outs = &mut outs[..width];
        for r in r..rs.end {
            self.dot_group(r, c, outs);
            for (i, &v) in outs.iter().enumerate() {
                put(r, i, v);
            }
        }
    }

    /// Decode, one token: out is `[n]`; tasks write their rows in place.
    fn decode(&self, out: &mut [f32]) {
        let rows = rows_per_task(self.n, self.row_bytes);
        elementwise::rows(self.par, out, rows, |t, o| match (self.fast, self.rows) {
            (Some(one), more) => dot_rows(self.w, self.row_bytes, t * rows, self.act, one, more, o),
            (None, _) => {
                for (rr, o) in o.iter_mut().enumerate() {
                    *o = self.dot(t * rows + rr, self.act);
                }
            }
        });
    }

    /// The activation columns prepared for `tiles` or `lanes` by `prepare`,
    /// each once (`k` elements), into `buf`; nothing without either.
    fn prepare<'b>(
        &self,
        tiles: Option<qdot::Tiles>,
        lanes: Option<qdot::Lanes>,
        prepare: PrepareFn,
        k: usize,
        buf: &'b mut Vec<u8>,
    ) -> Prepared<'b> {
        // prep: [m] columns of prep_bytes, for the tile or lane kernels.
        let prep_bytes = prepared_col_bytes(k);
        let on = tiles.is_some() || lanes.is_some_and(|l| l.prepared);
        let n_bytes = if on { prep_bytes * self.m } else { 0 };
        buf.resize(n_bytes.max(buf.len()), 0);
        let cols = &mut buf[..n_bytes];
        if on {
            // A few columns are prepared faster than the pool wakes.
            let par = self.par && self.m * k >= elementwise::ELEMS_PER_TASK;
            elementwise::rows(par, cols, prep_bytes, |c, p| {
                prepare(self.ty, self.act_col(c), p)
            });
        }
        Prepared {
            tiles,
            lanes,
            bytes: prep_bytes,
            cols,
        }
    }

    /// Prefill: a task owns a block of output columns (contiguous in
    /// out: `[n, m]`) and passes every weight row over them, a tile of rows
    /// at a time (a few KiB, stays in L1).
    fn prefill(&self, prep: &Prepared, threads: usize, out: &mut [f32]) {
        // Tasks a thread: 4 for balance; 2 with the lane kernels, whose
        // tasks each unpack every weight row once (Q5_0's unpacking was 12%
        // of its kernel's time at 4: Gemma 3 pp512 about 3% faster at 2).
        let tasks = if prep.lanes.is_some() { 2 } else { 4 };
        let cb = col_block(self.m, tasks * threads);
        elementwise::rows(self.par, out, self.n * cb, |t, o| {
            self.prefill_task(prep, t * cb, o)
        });
    }

    /// One prefill task: output columns `c0..` (`o`: `[n, mc]`).
    fn prefill_task(&self, prep: &Prepared, c0: usize, o: &mut [f32]) {
        let n = self.n;
        let mc = o.len() / n;
        if let Some(l) = prep.lanes {
            let put = |r: usize, j: usize, v: &[f32]| o[j * n + r..][..v.len()].copy_from_slice(v);
            return with_buffer(&UNPACKED, |buf| {
                self.lane_rows(l, prep, 0..n, c0, mc, buf, put)
            });
        }
        if let Some(t) = prep.tiles {
            return with_buffer(&UNPACKED, |buf| self.prefill_unpacked(t, prep, c0, o, buf));
        }
        let tile = tile_rows(self.row_bytes);
        for r0 in (0..n).step_by(tile) {
            let rs = r0..(r0 + tile).min(n);
            for (c, width) in col_groups(mc) {
                self.dot_rows(prep, rs.clone(), c0 + c, width, |r, i, v| {
                    o[(c + i) * n + r] = v
                });
            }
        }
    }

    /// [`Self::prefill_task`] with tile kernels: each tile of weight rows
    /// unpacked once into `buf` (`Tiles::unpack`), then every column group
    /// of the task passes over it (`Tiles::pre_*`, the tiles' bits); the
    /// rows short of a whole tile at the end as [`Self::dot_rows`] does
    /// them.
    fn prefill_unpacked(
        &self,
        t: qdot::Tiles,
        prep: &Prepared,
        c0: usize,
        o: &mut [f32],
        buf: &mut Vec<u8>,
    ) {
        let n = self.n;
        let mc = o.len() / n;
        // One TILE-row subtile unpacked: [PRE_BLOCK, nb].
        let sub = prep.bytes / qdot::TILE_BLOCK * qdot::PRE_BLOCK;
        let tile = unpacked_tile_rows(sub);
        if buf.len() < tile / qdot::TILE * sub {
            buf.resize(tile / qdot::TILE * sub, 0);
        }
        for r0 in (0..n).step_by(tile) {
            let rs = r0..(r0 + tile).min(n);
            let subs = rs.len() / qdot::TILE;
            for (s, xp) in buf.chunks_exact_mut(sub).take(subs).enumerate() {
                let r = r0 + s * qdot::TILE;
                (t.unpack)(std::array::from_fn(|j| self.w_row(r + j)), xp);
            }
            for (c, width) in col_groups(mc) {
                let mut put = |r: usize, i: usize, v: f32| o[(c + i) * n + r] = v;
                for (s, xp) in buf.chunks_exact(sub).take(subs).enumerate() {
                    let r = r0 + s * qdot::TILE;
                    let kernels = (t.pre_four, t.pre_three, t.pre_two);
                    tile_width(kernels, xp, prep, c0 + c, width, r, &mut put);
                }
                // The rows short of a tile: the multi-column kernels.
                let rest = r0 + subs * qdot::TILE..rs.end;
                self.dot_rows(prep, rest, c0 + c, width, &mut put);
            }
        }
    }

    /// Weight rows `rs` · activation columns `c0..c0 + mc` through the
    /// lane kernels: a tile of [`qdot::LANES`]-row groups (~16 KiB) unpacked
    /// once into `buf` (`Lanes::unpack`), then every column group passes
    /// over it. A group short of rows at the end repeats its last row in the
    /// lanes left, whose results are dropped: every row takes the same
    /// steps wherever it sits. `put(r, j, v)` takes the dots of rows `r..r +
    /// v.len()` with column `c0 + j`.
    #[allow(clippy::too_many_arguments)]
    fn lane_rows(
        &self,
        l: qdot::Lanes,
        prep: &Prepared,
        rs: std::ops::Range<usize>,
        c0: usize,
        mc: usize,
        buf: &mut Vec<u8>,
        mut put: impl FnMut(usize, usize, &[f32]),
    ) {
        const L: usize = qdot::LANES;
        // One group of LANES rows unpacked: [block_bytes, nb].
        let sub = self.row_bytes / self.ty.type_size() * l.block_bytes;
        let per_tile = ((16 << 10) / sub.max(1)).clamp(1, 8);
        if buf.len() < per_tile * sub {
            buf.resize(per_tile * sub, 0);
        }
        for r0 in rs.clone().step_by(per_tile * L) {
            let groups = (rs.end - r0).div_ceil(L).min(per_tile);
            for (g, xp) in buf.chunks_exact_mut(sub).take(groups).enumerate() {
                let (r, last) = (r0 + g * L, rs.end - 1);
                (l.unpack)(std::array::from_fn(|j| self.w_row((r + j).min(last))), xp);
            }
            for (c, width) in col_groups(mc) {
                // The prepared columns, or the quantized ones (K-quants).
                let ys = |i: usize| match l.prepared {
                    true => prep.col(c0 + c + i),
                    false => self.act_col(c0 + c + i),
                };
                for (g, xp) in buf.chunks_exact(sub).take(groups).enumerate() {
                    let r = r0 + g * L;
                    // The group's rows short of the range's end.
                    let nr = L.min(rs.end - r);
                    let mut put_col = |i: usize, v: &[f32; L]| put(r, c + i, &v[..nr]);
                    let put = &mut put_col;
                    match width {
                        qdot::COLS => put_lanes((l.four)(xp, std::array::from_fn(ys)), put),
                        3 => put_lanes((l.three)(xp, std::array::from_fn(ys)), put),
                        2 => put_lanes((l.two)(xp, std::array::from_fn(ys)), put),
                        _ => put_lanes((l.one)(xp, std::array::from_fn(ys)), put),
                    }
                }
            }
        }
    }

    /// A few columns: by_row: `[m, n]` as in [`mul_mat`]. A task owns a
    /// tile of weight rows and passes every column over it; out is its
    /// transpose.
    fn few_columns(&self, prep: &Prepared, out: &mut [f32]) {
        let (n, m) = (self.n, self.m);
        let mut rows = rows_per_task(n, self.row_bytes).min(tile_rows(self.row_bytes));
        if prep.lanes.is_some() {
            rows = rows.div_ceil(qdot::LANES) * qdot::LANES;
        }
        let mut by_row = vec![0f32; n * m];
        elementwise::rows(self.par, &mut by_row, m * rows, |t, chunk| {
            let r0 = t * rows;
            let rs = r0..r0 + chunk.len() / m;
            if let Some(l) = prep.lanes {
                let put = |r: usize, j: usize, v: &[f32]| {
                    for (i, &v) in v.iter().enumerate() {
                        chunk[(r + i - r0) * m + j] = v;
                    }
                };
                return with_buffer(&UNPACKED, |buf| self.lane_rows(l, prep, rs, 0, m, buf, put));
            }
            for (c, width) in col_groups(m) {
                self.dot_rows(prep, rs.clone(), c, width, |r, i, v| {
                    chunk[(r - r0) * m + c + i] = v
                });
            }
        });
        // A few columns are transposed faster than the pool wakes.
        let par = self.par && n * m >= elementwise::ELEMS_PER_TASK;
        elementwise::rows(par, out, n, |c, col| {
            for (r, o) in col.iter_mut().enumerate() {
                *o = by_row[r * m + c];
            }
        });
    }
}

/// One tile's `width` columns from `c` (one column as two of the same)
/// through `kernels`' kernel of that width (four, three, two columns; `x`:
/// the tile's rows as they take them), each result to `put`.
#[allow(clippy::type_complexity)]
fn tile_width<X: Copy>(
    kernels: (
        fn(X, [&[u8]; qdot::TILE]) -> [[f32; qdot::TILE]; qdot::TILE],
        fn(X, [&[u8]; 3]) -> [[f32; 3]; qdot::TILE],
        fn(X, [&[u8]; 2]) -> [[f32; 2]; qdot::TILE],
    ),
    x: X,
    prep: &Prepared,
    c: usize,
    width: usize,
    r: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let (four, three, two) = kernels;
    match width {
        qdot::TILE => put_tile(four(x, prep.cols_of(c)), r, put),
        3 => put_tile(three(x, prep.cols_of(c)), r, put),
        2 => put_tile(two(x, prep.cols_of(c)), r, put),
        _ => put_tile(two(x, [prep.col(c); 2]).map(|[v, _]| [v]), r, put),
    }
}

/// A lane kernel's results, `out[i]`: column `i`'s, [`qdot::LANES`] rows.
fn put_lanes<const N: usize>(
    out: [[f32; qdot::LANES]; N],
    put: &mut impl FnMut(usize, &[f32; qdot::LANES]),
) {
    for (i, col) in out.iter().enumerate() {
        put(i, col);
    }
}

/// One tile's results, `out[j][i]`: row `r + j`, column `c + i`.
fn put_tile<const N: usize>(
    out: [[f32; N]; qdot::TILE],
    r: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    for (j, v) in out.into_iter().enumerate() {
        for (i, v) in v.into_iter().enumerate() {
            put(r + j, i, v);
        }
    }
}

/// The groups `(first column, width)` that `m` columns are dotted in:
/// [`qdot::COLS`] at a time, the rest as one group of two or three (five
/// left: three and two); one column is a group of one. Every group goes
/// through the multi-column kernels (or the tiles, which equal them), whose
/// results do not depend on the width: from two columns up, a column's
/// result is the same whatever else shares the product.
fn col_groups(m: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut c = 0;
    std::iter::from_fn(move || {
        let width = match m - c {
            0 => return None,
            5 => 3,
            left => left.min(qdot::COLS),
        };
        c += width;
        Some((c - width, width))
    })
}

/// Activation columns prepared for the tile kernels (`[m]` columns of
/// `bytes`; empty without them).
struct Prepared<'a> {
    tiles: Option<qdot::Tiles>,
    /// The lane kernels (then `tiles` is `None`).
    lanes: Option<qdot::Lanes>,
    bytes: usize,
    cols: &'a [u8],
}

impl Prepared<'_> {
    fn col(&self, c: usize) -> &[u8] {
        &self.cols[c * self.bytes..(c + 1) * self.bytes]
    }

    /// Prepared columns `c..c + N`.
    fn cols_of<const N: usize>(&self, c: usize) -> [&[u8]; N] {
        std::array::from_fn(|i| self.col(c + i))
    }
}

/// Bytes held by every thread's cached buffers ([`ACT`], [`PREP`],
/// [`UNPACKED`]) in this
/// process: they outlive the op that grew them, so the memory report counts
/// them ([`thread_scratch_bytes`]).
static THREAD_SCRATCH: AtomicUsize = AtomicUsize::new(0);

/// Bytes of per-thread scratch the cpu kernels keep between ops, over all
/// threads of the process (each thread's buffers grow to the largest op it
/// ran and are freed when the thread ends).
pub fn thread_scratch_bytes() -> usize {
    THREAD_SCRATCH.load(Ordering::Relaxed)
}

/// A thread's cached buffer, its capacity counted in [`THREAD_SCRATCH`]
/// while the thread lives.
#[derive(Default)]
pub(crate) struct Cached<T = u8>(Vec<T>);

impl<T> Cached<T> {
    pub(crate) const fn new() -> Self {
        Cached(Vec::new())
    }

    /// `v` kept by this thread, its capacity counted in [`THREAD_SCRATCH`]
    /// until it is dropped.
    pub(crate) fn keep(v: Vec<T>) -> Self {
        let bytes = v.capacity() * std::mem::size_of::<T>();
        THREAD_SCRATCH.fetch_add(bytes, Ordering::Relaxed);
        Cached(v)
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        &self.0
    }
}

impl<T> Drop for Cached<T> {
    fn drop(&mut self) {
        let bytes = self.0.capacity() * std::mem::size_of::<T>();
        THREAD_SCRATCH.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// `f` with this thread's cached buffer from `key`; with a fresh one when
/// the cached one is in use (a worker waiting inside one product can steal
/// the start of another: two contexts sharing a backend). The cached one's
/// growth is counted in [`THREAD_SCRATCH`]; a fresh one is freed on return.
pub(crate) fn with_buffer<T, R>(
    key: &'static std::thread::LocalKey<RefCell<Cached<T>>>,
    f: impl FnOnce(&mut Vec<T>) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut cached) => {
            let size = std::mem::size_of::<T>();
            let before = cached.0.capacity() * size;
            let r = f(&mut cached.0);
            let after = cached.0.capacity() * size;
            if after >= before {
                THREAD_SCRATCH.fetch_add(after - before, Ordering::Relaxed);
            } else {
                THREAD_SCRATCH.fetch_sub(before - after, Ordering::Relaxed);
            }
            r
        }
        Err(_) => f(&mut Vec::new()),
    })
}

thread_local! {
    /// Activation columns prepared for the tile kernels ([`qdot::fast_tile`])
    /// and the decode column for the VNNI rows ([`qdot::fast_dot_prepared`]).
    static PREP: RefCell<Cached> = const { RefCell::new(Cached::new()) };
    /// A prefill task's tile of weight rows unpacked for the tile kernels
    /// (`qdot::Tiles::unpack`).
    static UNPACKED: RefCell<Cached> = const { RefCell::new(Cached::new()) };
    /// Quantized activations of the current `mul_mat_ggml` call, reused
    /// across calls on the same thread: `[m]` rows of `vec_dot_type` bytes.
    static ACT: RefCell<Cached> = const { RefCell::new(Cached::new()) };
}

/// Weight rows per rayon task: at least 64 rows or 32 KiB of weights so
/// scheduling is amortized, and at most enough for ~4 tasks per thread.
fn rows_per_task(n: usize, row_bytes: usize) -> usize {
    let min_rows = 64.max((32 << 10) / row_bytes.max(1));
    let per_thread = n.div_ceil(4 * rayon::current_num_threads().max(1));
    min_rows.max(per_thread).min(n).max(1)
}

/// The smallest block of output columns a prefill task owns.
const MIN_COL_BLOCK: usize = 16;

/// Output columns per prefill task: `m` over `tasks`, at least
/// [`MIN_COL_BLOCK`], a multiple of [`qdot::COLS`]. Every task reads all the
/// weights once (from L2 for small models), so fewer, wider blocks read less.
fn col_block(m: usize, tasks: usize) -> usize {
    let per = m.div_ceil(tasks).max(MIN_COL_BLOCK);
    per.div_ceil(qdot::COLS) * qdot::COLS
}

/// Weight rows per prefill tile: ~16 KiB of weights, so the tile stays in
/// L1 while every activation column passes over it; a multiple of
/// [`qdot::TILE`], so the tile kernels leave no odd rows but at the end.
fn tile_rows(row_bytes: usize) -> usize {
    let rows = ((16 << 10) / row_bytes.max(1)).clamp(qdot::TILE, 64);
    rows / qdot::TILE * qdot::TILE
}

/// Weight rows per prefill tile when the tile is unpacked first
/// ([`qdot::PRE_BLOCK`] bytes a block of [`qdot::TILE`] rows; `sub` bytes
/// such a subtile): ~16 KiB unpacked, as [`tile_rows`] keeps the packed
/// rows.
fn unpacked_tile_rows(sub: usize) -> usize {
    ((16 << 10) / sub.max(1)).clamp(1, 16) * qdot::TILE
}

/// `out[:, i] = dequantize(table[:, ids[i]])`; an id outside the table gives zeros.
/// `table`: `n_rows` rows of `row_bytes` bytes; `out`: `[k, ids.len()]` f32.
/// On the current rayon pool when `par`, else on the calling thread.
#[allow(clippy::too_many_arguments)]
pub fn get_rows(
    par: bool,
    ty: GgmlType,
    table: &[u8],
    row_bytes: usize,
    n_rows: usize,
    k: usize,
    ids: &[i32],
    out: &mut [f32],
) -> Result<()> {
    if k == 0 {
        return Ok(());
    }
    let row = |o: &mut [f32], id: i32| match usize::try_from(id) {
        Ok(r) if r < n_rows => dequant_row(ty, &table[r * row_bytes..(r + 1) * row_bytes], o),
        _ => {
            o.fill(0.0);
            Ok(())
        }
    };
    if par {
        out.par_chunks_mut(k)
            .zip(ids.par_iter())
            .try_for_each(|(o, &id)| row(o, id))
    } else {
        out.chunks_mut(k)
            .zip(ids)
            .try_for_each(|(o, &id)| row(o, id))
    }
}
