//! `mul_mat` and `get_rows`: everything that reads weight rows.

use glint_backend::{GgmlType, Result};
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
