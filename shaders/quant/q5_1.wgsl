// Q5_1: blocks of 32 in 24 bytes: f16 d, f16 m, u8 qh[4], u8 qs[16]; bits as
// Q5_0; x = d * q + m.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let d = f16_at(b);
    let m = f16_at(b + 2u);
    let qh = u32_at(b + 4u) >> j;
    let w = u32_at(b + 8u + (j % 16u));
    let h = vec4<f32>(f32(qh & 1u), f32((qh >> 1u) & 1u), f32((qh >> 2u) & 1u), f32((qh >> 3u) & 1u));
    return d * (nib4(w, (j / 16u) * 4u) + 16.0 * h) + vec4<f32>(m);
}

#include "quant/pair.wgsl"
