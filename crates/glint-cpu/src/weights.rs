//! Reading weight rows of any Compute type: the two functions every weight
//! path goes through, plus the f32 dot they all end in. F32/F16/BF16 are
//! converted here; block types are dequantized by `glint_quant` (bit-identical
//! to ggml), a chunk of whole blocks at a time.

use glint_backend::{BackendError, GgmlType, Result};
use half::{bf16, f16};

/// Elements converted per chunk when a row is dotted without a full
/// dequantized copy (fits in L1 beside the row). A multiple of every
/// Compute type's block size (1, 32, 256).
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

fn quant_err(ty: GgmlType, e: glint_quant::QuantError) -> BackendError {
    match e {
        glint_quant::QuantError::Unsupported { .. } => BackendError::Type {
            op: "dequantize",
            ty,
            what: "weights",
        },
        e => BackendError::Shape {
            op: "dequantize",
            detail: e.to_string(),
        },
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
        _ => glint_quant::dequantize_row(ty, src, dst).map_err(|e| quant_err(ty, e))?,
    }
    Ok(())
}

/// Dot of one weight row of type `ty` with an f32 vector `x` of the row's
/// length. Same value as `glint_quant::dot_f32` up to the summation order
/// (here 8 f32 lanes per chunk of `CHUNK`, there one f32 sum per block).
pub fn row_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> Result<f32> {
    if ty == GgmlType::F32 {
        if let Ok(w) = bytemuck::try_cast_slice::<u8, f32>(row) {
            return Ok(dot(w, x));
        }
    }
    let chunk_bytes = ty
        .bytes_for(CHUNK as u64)
        .ok_or_else(|| quant_err(ty, glint_quant::QuantError::Unsupported { ty, op: "dot" }))?
        as usize;
    let mut buf = [0f32; CHUNK];
    let mut s = 0f32;
    for (src, xs) in row.chunks(chunk_bytes).zip(x.chunks(CHUNK)) {
        let b = &mut buf[..xs.len()];
        dequant_row(ty, src, b)?;
        s += dot(b, xs);
    }
    Ok(s)
}
