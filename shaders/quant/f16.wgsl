// F16 rows (2 bytes an element; rows may start at any even byte).
// SHADER_F16: the including kernel binds W as `array<f16>`; else as packed
// u32 words, read with unpack2x16float. Both widen to f32.
#ifdef SHADER_F16
fn dequant1(row_byte: u32, e: u32) -> f32 {
    return f32(W[(row_byte >> 1u) + e]);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let i = (row_byte >> 1u) + e;
    return vec4<f32>(vec4<f16>(W[i], W[i + 1u], W[i + 2u], W[i + 3u]));
}
#else
#include "quant/common.wgsl"

fn dequant1(row_byte: u32, e: u32) -> f32 {
    return f16_at(row_byte + 2u * e);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + 2u * e;
    let lo = unpack2x16float(u32_at(b));
    let hi = unpack2x16float(u32_at(b + 4u));
    return vec4<f32>(lo.x, lo.y, hi.x, hi.y);
}
#endif

#include "quant/pair.wgsl"
