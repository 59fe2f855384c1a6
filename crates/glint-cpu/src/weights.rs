//! Reading weight rows of any Compute type: the two functions every
//! quantized path goes through, plus the f32 dot they all end in.

use glint_backend::{BackendError, GgmlType, Result};
use half::{bf16, f16};

/// Elements converted per chunk when a row is dotted without a full
/// dequantized copy (fits in L1 beside the row).
const CHUNK: usize = 256;

/// `sum(a[i] * b[i])` with 8 independent accumulators, so the compiler keeps
/// them in one SIMD register and the adds do not serialize.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ta.iter().zip(tb) {
        tail += x * y;
    }
    let s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    s + tail
}

fn unsupported(ty: GgmlType) -> BackendError {
    BackendError::Type {
        op: "dequantize",
        ty,
        what: "weights",
    }
}

/// Dequantize one row: `src` is `ty.bytes_for(dst.len())` bytes.
pub fn dequant_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        _ => return Err(unsupported(ty)),
    }
    Ok(())
}

/// Dot of one weight row of type `ty` with an f32 vector `x` of the row's length.
pub fn row_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> Result<f32> {
    match ty {
        GgmlType::F32 => match bytemuck::try_cast_slice::<u8, f32>(row) {
            Ok(w) => Ok(dot(w, x)),
            Err(_) => chunked_dot(ty, 4, row, x),
        },
        GgmlType::F16 | GgmlType::BF16 => chunked_dot(ty, 2, row, x),
        _ => Err(unsupported(ty)),
    }
}

/// Dequantize `CHUNK` elements at a time into a stack buffer and dot them.
fn chunked_dot(ty: GgmlType, elem_bytes: usize, row: &[u8], x: &[f32]) -> Result<f32> {
    let mut buf = [0f32; CHUNK];
    let mut s = 0f32;
    for (src, xs) in row.chunks(CHUNK * elem_bytes).zip(x.chunks(CHUNK)) {
        let b = &mut buf[..xs.len()];
        dequant_row(ty, src, b)?;
        s += dot(b, xs);
    }
    Ok(s)
}
