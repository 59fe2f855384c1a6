//! GGML block formats for glint: the scalar references every kernel is held to.
//!
//! One table ([`TYPES`]) lists every type with its id, name, block size,
//! bytes per block, what glint supports for it and the activation format of
//! its integer dot. Each block format is a `#[repr(C)]` struct whose size is
//! asserted at compile time ([`legacy`], [`kquants`], [`float`]).
//!
//! # Row operations
//!
//! - [`dequantize_row`]: bytes to f32, **bit-identical** to llama.cpp's
//!   gguf-py (and so to ggml's C `dequantize_row_*`); checked against golden
//!   fixtures in `fixtures/quant/`.
//! - [`quantize_row`]: f32 to bytes. F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1 and
//!   Q8_0 are **byte-identical** to gguf-py's `quantize`; Q8_1 and Q8_K follow
//!   ggml's `quantize_row_q8_{1,K}_ref`; Q4_K and Q6_K are ports of ggml's
//!   reference K-quantizers (no importance matrix), tested by error bounds.
//!
//! Why bit-identity is robust: every scale is an f16 (11 significant bits)
//! times integers of at most 8 bits, so products like `d * sc * q` are exact
//! in f32 whatever their grouping; only the final `+ m` / `- dmin * m`
//! rounds, once. A kernel may therefore fuse that last step into an FMA
//! (`fma(d * sc, q, -ml)`) and still match bit for bit.
//!
//! # The two dot products
//!
//! - [`dot_f32`]`(ty, row, x)`: a weight row against f32 activations. This is
//!   what the WGSL kernels compute (they dequantize in the shader), so it is
//!   their reference. Order of operations, fixed: for each block, dequantize
//!   it exactly as [`dequantize_row`] does, accumulate `acc += w[i] * x[i]` in
//!   f32 in element order starting from 0, then `sum += acc` in f32 in block
//!   order. (Float types have one-element blocks: a running f32 sum.)
//! - [`vec_dot`]`(ty, row, act)`: ggml's integer path for the fast cpu
//!   backend. `act` is the activation row already quantized to
//!   [`vec_dot_type`]`(ty)`: Q4_0/Q5_0/Q8_0 take Q8_0, Q4_1/Q5_1 take Q8_1
//!   (whose `s = d * sum(qs)` carries the weight offset `m`), Q2_K..Q6_K take
//!   Q8_K (whose `bsums` carry the mins), and F32/F16/BF16 take f32
//!   activations as little-endian bytes (summed in f64 like ggml's
//!   `ggml_vec_dot_f16`). The loops are ggml's `ggml_vec_dot_*_generic`, float
//!   operations in the same order. It differs from [`dot_f32`] by the
//!   activation quantization error only.
#![deny(unsafe_code)]

mod block;
mod error;
pub mod float;
pub mod kquants;
pub mod legacy;
mod types;

pub use block::{Block, Quantize};
pub use error::QuantError;
pub use float::Bf16;
pub use kquants::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K, QK_K};
pub use legacy::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
pub use types::{GgmlType, Support, TypeInfo, TYPES};

use block::read_blocks;
use half::f16;
use GgmlType as T;

/// The activation format [`vec_dot`] expects for a row of `ty` (a table column).
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    ty.vec_dot_type()
}

/// Checks that `n_elements` of `ty` are whole blocks taking exactly `n_bytes`.
fn check_lengths(ty: GgmlType, n_elements: usize, n_bytes: usize) -> Result<(), QuantError> {
    let block_size = ty.block_size();
    if !n_elements.is_multiple_of(block_size) {
        return Err(QuantError::PartialBlock {
            ty,
            n_elements,
            block_size,
        });
    }
    // Saturating: an impossible length simply fails the comparison below.
    let expected = (n_elements / block_size).saturating_mul(ty.type_size());
    if expected != n_bytes {
        return Err(QuantError::ByteLength {
            ty,
            n_elements,
            expected,
            got: n_bytes,
        });
    }
    Ok(())
}

/// The number of elements in `n_bytes` of `ty`, which must be whole blocks.
pub fn row_elements(ty: GgmlType, n_bytes: usize) -> Result<usize, QuantError> {
    let type_size = ty.type_size();
    if !n_bytes.is_multiple_of(type_size) {
        return Err(QuantError::PartialBlockBytes {
            ty,
            n_bytes,
            type_size,
        });
    }
    Ok(n_bytes / type_size * ty.block_size())
}

fn dequantize_blocks<B: Block>(src: &[u8], dst: &mut [f32]) {
    for (b, y) in read_blocks::<B>(src).zip(dst.chunks_exact_mut(B::BLOCK_SIZE)) {
        b.dequantize(y);
    }
}

/// What every block type gets from the generic loops: dequantizing a row
/// and its f32 dot.
#[derive(Clone, Copy)]
struct BlockFns {
    dequantize: fn(&[u8], &mut [f32]),
    dot_f32: fn(&[u8], &[f32]) -> f32,
}

impl BlockFns {
    const fn of<B: Block>() -> BlockFns {
        BlockFns {
            dequantize: dequantize_blocks::<B>,
            dot_f32: dot_f32_blocks::<B>,
        }
    }
}

/// The block struct of each type glint can dequantize.
fn block_fns(ty: GgmlType) -> Option<BlockFns> {
    Some(match ty {
        T::F32 => BlockFns::of::<f32>(),
        T::F16 => BlockFns::of::<f16>(),
        T::BF16 => BlockFns::of::<Bf16>(),
        T::Q4_0 => BlockFns::of::<BlockQ4_0>(),
        T::Q4_1 => BlockFns::of::<BlockQ4_1>(),
        T::Q5_0 => BlockFns::of::<BlockQ5_0>(),
        T::Q5_1 => BlockFns::of::<BlockQ5_1>(),
        T::Q8_0 => BlockFns::of::<BlockQ8_0>(),
        T::Q8_1 => BlockFns::of::<BlockQ8_1>(),
        T::Q2_K => BlockFns::of::<BlockQ2_K>(),
        T::Q3_K => BlockFns::of::<BlockQ3_K>(),
        T::Q4_K => BlockFns::of::<BlockQ4_K>(),
        T::Q5_K => BlockFns::of::<BlockQ5_K>(),
        T::Q6_K => BlockFns::of::<BlockQ6_K>(),
        T::Q8_K => BlockFns::of::<BlockQ8_K>(),
        _ => return None,
    })
}

/// Dequantizes one row: `src` holds `dst.len()` elements of `ty`.
///
/// Errors: `Unsupported` for a type with no dequantizer (SizeOnly),
/// `PartialBlock` if `dst.len()` is not whole blocks, `ByteLength` if `src`
/// is not exactly the bytes for `dst.len()` elements.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let f = block_fns(ty).ok_or(QuantError::Unsupported {
        ty,
        op: "dequantize",
    })?;
    check_lengths(ty, dst.len(), src.len())?;
    (f.dequantize)(src, dst);
    Ok(())
}

fn quantize_blocks<B: Quantize>(src: &[f32], dst: &mut [u8]) {
    let size = std::mem::size_of::<B>();
    for (x, out) in src
        .chunks_exact(B::BLOCK_SIZE)
        .zip(dst.chunks_exact_mut(size))
    {
        out.copy_from_slice(bytemuck::bytes_of(&B::quantize(x)));
    }
}

/// Quantizes one row of `src.len()` values into `dst`.
///
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q4_K, Q6_K,
/// Q8_K. Errors as for [`dequantize_row`].
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let f: fn(&[f32], &mut [u8]) = match ty {
        T::F32 => quantize_blocks::<f32>,
        T::F16 => quantize_blocks::<f16>,
        T::BF16 => quantize_blocks::<Bf16>,
        T::Q4_0 => quantize_blocks::<BlockQ4_0>,
        T::Q4_1 => quantize_blocks::<BlockQ4_1>,
        T::Q5_0 => quantize_blocks::<BlockQ5_0>,
        T::Q5_1 => quantize_blocks::<BlockQ5_1>,
        T::Q8_0 => quantize_blocks::<BlockQ8_0>,
        T::Q8_1 => quantize_blocks::<BlockQ8_1>,
        T::Q4_K => quantize_blocks::<BlockQ4_K>,
        T::Q6_K => quantize_blocks::<BlockQ6_K>,
        T::Q8_K => quantize_blocks::<BlockQ8_K>,
        _ => return Err(QuantError::Unsupported { ty, op: "quantize" }),
    };
    check_lengths(ty, src.len(), dst.len())?;
    f(src, dst);
    Ok(())
}

fn dot_f32_blocks<B: Block>(row: &[u8], x: &[f32]) -> f32 {
    // Largest block is QK_K; the float types use one slot.
    let mut w = [0.0f32; QK_K];
    let w = &mut w[..B::BLOCK_SIZE];
    let mut sum = 0.0f32;
    for (b, xs) in read_blocks::<B>(row).zip(x.chunks_exact(B::BLOCK_SIZE)) {
        b.dequantize(w);
        let mut acc = 0.0f32;
        for (wi, xi) in w.iter().zip(xs) {
            acc += wi * xi;
        }
        sum += acc;
    }
    sum
}

/// `row · x`: one row of `ty` (x.len() elements) against f32 activations,
/// in the order documented in the crate docs. The reference for the WGSL
/// matvec kernels.
pub fn dot_f32(ty: GgmlType, row: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    let f = block_fns(ty).ok_or(QuantError::Unsupported { ty, op: "dot_f32" })?;
    check_lengths(ty, x.len(), row.len())?;
    Ok((f.dot_f32)(row, x))
}

/// ggml's float dots (`ggml_vec_dot_f32`/`_f16` generic): f32 products summed
/// in f64, rounded to f32 once at the end.
fn vec_dot_float<B: Block>(row: &[u8], act: &[u8]) -> f32 {
    let mut w = [0.0f32];
    let mut sum = 0.0f64;
    for (b, x) in read_blocks::<B>(row).zip(read_blocks::<f32>(act)) {
        b.dequantize(&mut w);
        sum += f64::from(w[0] * x);
    }
    sum as f32
}

/// `row · act` by ggml's integer path: `act` holds the activations quantized
/// to [`vec_dot_type`]`(ty)` (f32 bytes for the float types), the same
/// number of elements as `row`.
///
/// Errors: `Unsupported` for types with no integer dot (SizeOnly, Q8_1,
/// Q8_K), `PartialBlockBytes` if `row` is not whole blocks, `ByteLength` if
/// `act` is not exactly the bytes for as many activations.
pub fn vec_dot(ty: GgmlType, row: &[u8], act: &[u8]) -> Result<f32, QuantError> {
    let f: fn(&[u8], &[u8]) -> f32 = match ty {
        T::F32 => vec_dot_float::<f32>,
        T::F16 => vec_dot_float::<f16>,
        T::BF16 => vec_dot_float::<Bf16>,
        T::Q4_0 => legacy::vec_dot_q4_0_q8_0,
        T::Q4_1 => legacy::vec_dot_q4_1_q8_1,
        T::Q5_0 => legacy::vec_dot_q5_0_q8_0,
        T::Q5_1 => legacy::vec_dot_q5_1_q8_1,
        T::Q8_0 => legacy::vec_dot_q8_0_q8_0,
        T::Q2_K => kquants::vec_dot_q2_k_q8_k,
        T::Q3_K => kquants::vec_dot_q3_k_q8_k,
        T::Q4_K => kquants::vec_dot_q4_k_q8_k,
        T::Q5_K => kquants::vec_dot_q5_k_q8_k,
        T::Q6_K => kquants::vec_dot_q6_k_q8_k,
        _ => return Err(QuantError::Unsupported { ty, op: "vec_dot" }),
    };
    let n = row_elements(ty, row.len())?;
    check_lengths(ty.vec_dot_type(), n, act.len())?;
    Ok(f(row, act))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block struct's size is its table row's `type_size`, and each
    /// `BLOCK_SIZE` its `block_size`: the table and the structs cannot drift.
    #[test]
    fn block_structs_match_the_table() {
        fn check<B: Block>(ty: GgmlType) {
            assert_eq!(
                std::mem::size_of::<B>(),
                ty.type_size(),
                "{ty} bytes per block"
            );
            assert_eq!(B::BLOCK_SIZE, ty.block_size(), "{ty} elements per block");
        }
        check::<f32>(T::F32);
        check::<f16>(T::F16);
        check::<Bf16>(T::BF16);
        check::<BlockQ4_0>(T::Q4_0);
        check::<BlockQ4_1>(T::Q4_1);
        check::<BlockQ5_0>(T::Q5_0);
        check::<BlockQ5_1>(T::Q5_1);
        check::<BlockQ8_0>(T::Q8_0);
        check::<BlockQ8_1>(T::Q8_1);
        check::<BlockQ2_K>(T::Q2_K);
        check::<BlockQ3_K>(T::Q3_K);
        check::<BlockQ4_K>(T::Q4_K);
        check::<BlockQ5_K>(T::Q5_K);
        check::<BlockQ6_K>(T::Q6_K);
        check::<BlockQ8_K>(T::Q8_K);
    }

    /// Every Compute or Activation type has a dequantizer; SizeOnly ones none.
    #[test]
    fn dequantizer_exists_exactly_for_supported_types() {
        for r in TYPES {
            let has = block_fns(r.ty).is_some();
            assert_eq!(has, r.support != Support::SizeOnly, "{}", r.name);
        }
    }

    #[test]
    fn errors_name_the_type_and_lengths() {
        let mut out = [0.0f32; 32];
        let e = dequantize_row(T::IQ2_XXS, &[0; 66], &mut [0.0; 256]).unwrap_err();
        assert_eq!(
            e,
            QuantError::Unsupported {
                ty: T::IQ2_XXS,
                op: "dequantize"
            }
        );
        assert_eq!(e.to_string(), "dequantize is not supported for IQ2_XXS");
        let e = dequantize_row(T::Q4_0, &[0; 17], &mut out).unwrap_err();
        assert_eq!(e.to_string(), "Q4_0: 32 elements take 18 bytes, got 17");
        let e = dequantize_row(T::Q4_0, &[0; 18], &mut out[..31]).unwrap_err();
        assert_eq!(
            e,
            QuantError::PartialBlock {
                ty: T::Q4_0,
                n_elements: 31,
                block_size: 32
            }
        );
        let e = quantize_row(T::Q2_K, &[0.0; 256], &mut [0; 84]).unwrap_err();
        assert_eq!(
            e,
            QuantError::Unsupported {
                ty: T::Q2_K,
                op: "quantize"
            }
        );
        let e = vec_dot(T::Q4_0, &[0; 19], &[0; 34]).unwrap_err();
        assert_eq!(
            e,
            QuantError::PartialBlockBytes {
                ty: T::Q4_0,
                n_bytes: 19,
                type_size: 18
            }
        );
        let e = vec_dot(T::Q4_K, &[0; 144], &[0; 291]).unwrap_err();
        assert_eq!(
            e,
            QuantError::ByteLength {
                ty: T::Q8_K,
                n_elements: 256,
                expected: 292,
                got: 291
            }
        );
        let e = dot_f32(T::Q6_K, &[0; 210], &[0.0; 255]).unwrap_err();
        assert!(
            matches!(e, QuantError::PartialBlock { ty: T::Q6_K, .. }),
            "{e}"
        );
        assert_eq!(vec_dot_type(T::Q5_1), T::Q8_1);
        assert_eq!(vec_dot_type(T::F16), T::F32);
    }

    #[test]
    fn empty_rows_are_fine() {
        dequantize_row(T::Q4_K, &[], &mut []).unwrap();
        assert_eq!(dot_f32(T::Q8_0, &[], &[]).unwrap(), 0.0);
        assert_eq!(vec_dot(T::Q8_0, &[], &[]).unwrap(), 0.0);
    }
}
