// F16 rows (2 bytes an element; rows may start at any even byte).
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
