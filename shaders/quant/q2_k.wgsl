// Q2_K: super-blocks of 256 in 84 bytes:
//   0 u8 scales[16] (per 16-element sub-block: low nibble scale, high
//   nibble min), 16 u8 qs[64], 80 f16 d, 82 f16 dmin.
// Element i = 128*h + 32*s + l (h < 2, s < 4, l < 32) is bits 2s..2s+2 of
// qs[32*h + l]; sc = scales[i / 16];
// x = (d * (sc & 15)) * q - dmin * (sc >> 4).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let d = f16_at(b + 80u);
    let dmin = f16_at(b + 82u);
    let sc = byte_at(b + i / 16u);
    let w = u32_at(b + 16u + 32u * (i / 128u) + i % 32u);
    let q = field4(w, 2u * ((i % 128u) / 32u), 3u);
    return (d * f32(sc & 0xfu)) * q - vec4<f32>(dmin * f32(sc >> 4u));
}

#include "quant/pair.wgsl"
