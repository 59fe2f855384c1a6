// BF16 rows: the high 16 bits of an f32.
#include "quant/common.wgsl"

fn dequant1(row_byte: u32, e: u32) -> f32 {
    return bf16_at(row_byte + 2u * e);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + 2u * e;
    let lo = u32_at(b);
    let hi = u32_at(b + 4u);
    return vec4<f32>(bitcast<f32>(lo << 16u), bitcast<f32>(lo & 0xffff0000u),
                     bitcast<f32>(hi << 16u), bitcast<f32>(hi & 0xffff0000u));
}

#include "quant/pair.wgsl"
