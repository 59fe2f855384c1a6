//! What every block format shares: the [`Block`] trait the generic row
//! loops in `lib.rs` drive, and ggml's rounding helper.

use bytemuck::Pod;

/// One `#[repr(C)]` block of a GGML format: `BLOCK_SIZE` elements stored in
/// `size_of::<Self>()` bytes (asserted equal to the table's `type_size`).
pub trait Block: Pod {
    const BLOCK_SIZE: usize;

    /// Writes the block's `BLOCK_SIZE` values to `y[..BLOCK_SIZE]`, with the
    /// same f32 operations, in the same order, as gguf-py's dequantizer (so
    /// the result is bit-identical to it and to ggml's `dequantize_row_*`).
    fn dequantize(&self, y: &mut [f32]);
}

/// A block format with a quantizer.
pub trait Quantize: Block {
    /// Quantizes `x[..BLOCK_SIZE]` into one block.
    fn quantize(x: &[f32]) -> Self;
}

/// Reads whole blocks out of a byte slice. GGUF tensor data is only 32-byte
/// aligned at the tensor start and callers may hand us any sub-slice, so the
/// blocks are copied out unaligned rather than cast in place.
pub(crate) fn read_blocks<B: Pod>(src: &[u8]) -> impl Iterator<Item = B> + '_ {
    src.chunks_exact(std::mem::size_of::<B>())
        .map(bytemuck::pod_read_unaligned)
}

/// ggml's `nearest_int`: round half to even. ggml adds 1.5 * 2^23 and reads
/// the mantissa, which is exactly round-half-even for |x| <= 2^22 (the range
/// ggml asserts); `round_ties_even` agrees there and saturates instead of
/// returning garbage outside it, so hostile input cannot trip anything.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// `(max, amax)`: the value of largest magnitude (the first one on ties) and
/// its magnitude, the scan starting from `start` as if it came first. ggml
/// starts from 0; gguf-py's legacy quantizers start from `x[0]`, which differs
/// only for a block of all `-0.0`.
pub(crate) fn signed_absmax(x: &[f32], start: f32) -> (f32, f32) {
    let mut max = start;
    let mut amax = start.abs();
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}
