//! The unquantized element types: F32, F16, BF16 (a "block" of one value).

use crate::block::{Block, Quantize};
use half::f16;

impl Block for f32 {
    const BLOCK_SIZE: usize = 1;
    fn dequantize(&self, y: &mut [f32]) {
        y[0] = *self;
    }
}

impl Quantize for f32 {
    fn quantize(x: &[f32]) -> Self {
        x[0]
    }
}

impl Block for f16 {
    const BLOCK_SIZE: usize = 1;
    fn dequantize(&self, y: &mut [f32]) {
        // f16 -> f32 is exact (subnormals included).
        y[0] = self.to_f32();
    }
}

impl Quantize for f16 {
    /// Round to nearest even, overflow to infinity: numpy's `astype(float16)`
    /// and ggml's `GGML_FP32_TO_FP16`.
    fn quantize(x: &[f32]) -> Self {
        f16::from_f32(x[0])
    }
}

/// bfloat16 as its raw bits. Not `half::bf16`: its f32 conversion handles NaN
/// differently from ggml's `ggml_compute_fp32_to_bf16`, which we must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Bf16(pub u16);

const _: () = assert!(std::mem::size_of::<Bf16>() == 2);

impl Bf16 {
    /// ggml's `ggml_compute_fp32_to_bf16`: NaNs become quiet NaNs keeping the
    /// sign and top mantissa bits; everything else rounds to nearest even
    /// (overflowing to infinity).
    pub fn from_f32(x: f32) -> Bf16 {
        let n = x.to_bits();
        if n & 0x7fff_ffff > 0x7f80_0000 {
            return Bf16(((n >> 16) | 64) as u16);
        }
        // u64 so the rounding increment cannot wrap.
        let n = u64::from(n);
        Bf16(((n + 0x7fff + ((n >> 16) & 1)) >> 16) as u16)
    }

    /// Exact: bf16 is the top half of an f32.
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

impl Block for Bf16 {
    const BLOCK_SIZE: usize = 1;
    fn dequantize(&self, y: &mut [f32]) {
        y[0] = self.to_f32();
    }
}

impl Quantize for Bf16 {
    fn quantize(x: &[f32]) -> Self {
        Bf16::from_f32(x[0])
    }
}
