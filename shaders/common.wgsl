// Shared math for the elementwise, attention and weight kernels (no
// bindings).

// tanh that stays finite for large |x| (exp overflow would give inf/inf).
fn tanh_safe(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// ggml's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
fn gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_safe(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Integers below 2^23 as floats, minus `off` (an integer of magnitude
// below 2^23), with no conversion instruction: v in the mantissa of 2^23
// (bits 0x4b000000) is the float 2^23 + v, and subtracting 2^23 + off
// leaves v - off, each step exact, so the bits of f32(v) - off. NVIDIA
// converts integers to floats at 16 a clock an SM (sm_80 to sm_90), a
// quarter of its f32 multiply-add rate on sm_80 (64) and an eighth on
// sm_86 to sm_90 (128), and a quantized matvec converts every weight it
// reads: an H200 (3.9 TB/s, 132 SMs near 2 GHz) must dequantize ~26 Q4_0
// weights a clock an SM, so the conversions alone would hold it near 60%
// of the bandwidth. The OR folds into the masking (LOP3), and the add
// replaces the one that took the offset.
fn ints_minus(v: vec4<u32>, off: f32) -> vec4<f32> {
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0 + off);
}

fn int_minus(v: u32, off: f32) -> f32 {
    return bitcast<f32>(v | 0x4b000000u) - (8388608.0 + off);
}
