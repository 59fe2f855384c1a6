//! `mul_mat` and `get_rows`: everything that reads weight rows.

use glint_backend::{BackendError, GgmlType, Result};
use rayon::prelude::*;

use crate::weights::{dequant_row, dot, row_dot};

/// Up to this many activation columns take the decode path.
pub const DECODE_MAX_M: usize = 8;
/// Weight rows per rayon task on the decode path.
const DECODE_ROWS_PER_TASK: usize = 16;
/// Weight rows dequantized together on the prefill path: `[k, PREFILL_ROWS]`
/// f32 stays in L2 (k = 4096: 256 KiB) while every column passes over it.
const PREFILL_ROWS: usize = 16;

/// `out[n, m] = w[k, n] · x[k, m]`.
///
/// `w`: `n` rows of `row_bytes` bytes of type `ty`; `x`: `[k, m]` f32;
/// `out`: `[n, m]` f32. The cost of a forward pass is mostly here.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat(
    ty: GgmlType,
    w: &[u8],
    row_bytes: usize,
    k: usize,
    n: usize,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    if n == 0 || m == 0 {
        return Ok(());
    }
    let w_row = |r: usize| &w[r * row_bytes..(r + 1) * row_bytes];
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
                            outs[0] = row_dot(ty, w_row(r), &x[..k])?;
                        } else {
                            dequant_row(ty, w_row(r), row)?;
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
                        dequant_row(ty, w_row(r0 + rr), &mut rows[rr * k..(rr + 1) * k])?;
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
/// plain f32. Same shapes as [`mul_mat`].
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_ggml(
    ty: GgmlType,
    w: &[u8],
    row_bytes: usize,
    k: usize,
    n: usize,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    let vt = ty.vec_dot_type();
    match vt {
        GgmlType::F16 | GgmlType::BF16 => {
            // xr: [k, m] f32, x rounded to the weight's float type.
            let xr: Vec<f32> = match vt {
                GgmlType::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
                _ => x
                    .iter()
                    .map(|&v| half::bf16::from_f32(v).to_f32())
                    .collect(),
            };
            return mul_mat(ty, w, row_bytes, k, n, &xr, m, out);
        }
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K => {}
        _ => return mul_mat(ty, w, row_bytes, k, n, x, m, out),
    }
    if n == 0 || m == 0 {
        return Ok(());
    }
    let err = |e: glint_quant::QuantError| BackendError::Shape {
        op: "mul_mat",
        detail: e.to_string(),
    };
    let act_bytes = vt.bytes_for(k as u64).ok_or_else(|| BackendError::Shape {
        op: "mul_mat",
        detail: format!("row of {k} is not a whole number of {vt} blocks"),
    })? as usize;
    // act: [m] rows of act_bytes, each column of x quantized once.
    let mut act = vec![0u8; act_bytes * m];
    act.par_chunks_mut(act_bytes)
        .zip(x.par_chunks(k))
        .try_for_each(|(a, xc)| glint_quant::quantize_row(vt, xc, a).map_err(err))?;
    let w_row = |r: usize| &w[r * row_bytes..(r + 1) * row_bytes];
    // by_row: [m, n] as in mul_mat.
    let mut by_row = vec![0f32; n * m];
    by_row
        .par_chunks_mut(m * DECODE_ROWS_PER_TASK)
        .enumerate()
        .try_for_each(|(blk, chunk)| -> Result<()> {
            for (rr, outs) in chunk.chunks_mut(m).enumerate() {
                let row = w_row(blk * DECODE_ROWS_PER_TASK + rr);
                for (c, o) in outs.iter_mut().enumerate() {
                    *o = glint_quant::vec_dot(ty, row, &act[c * act_bytes..(c + 1) * act_bytes])
                        .map_err(err)?;
                }
            }
            Ok(())
        })?;
    out.par_chunks_mut(n).enumerate().for_each(|(c, col)| {
        for (r, o) in col.iter_mut().enumerate() {
            *o = by_row[r * m + c];
        }
    });
    Ok(())
}

/// `out[:, i] = dequantize(table[:, ids[i]])`; an id outside the table gives zeros.
/// `table`: `n_rows` rows of `row_bytes` bytes; `out`: `[k, ids.len()]` f32.
pub fn get_rows(
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
    out.par_chunks_mut(k)
        .zip(ids.par_iter())
        .try_for_each(|(o, &id)| match usize::try_from(id) {
            Ok(r) if r < n_rows => dequant_row(ty, &table[r * row_bytes..(r + 1) * row_bytes], o),
            _ => {
                o.fill(0.0);
                Ok(())
            }
        })
}
