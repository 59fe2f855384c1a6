// Q4_1: blocks of 32 in 20 bytes: f16 d, f16 m, u8 qs[16]; nibbles as Q4_0;
// x = d * q + m.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let d = f16_at(b);
    let m = f16_at(b + 2u);
    let w = u32_at(b + 4u + (j % 16u));
    return d * nib4(w, (j / 16u) * 4u) + vec4<f32>(m);
}
