// Q4_K: super-blocks of 256 in 144 bytes:
//   0 f16 d, 2 f16 dmin, 4 u8 scales[12] (8 packed 6-bit scale/min pairs,
//   see scale_min_k4), 16 u8 qs[128].
// Element i = 64*h + 32*s + l (h < 4, s < 2, l < 32) is nibble s (low,
// high) of qs[32*h + l]; its sub-block is j = i / 32;
// x = (d * sc[j]) * q - dmin * m[j].
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let d = f16_at(b);
    let dmin = f16_at(b + 2u);
    let sm = scale_min_k4(b + 4u, i / 32u);
    let w = u32_at(b + 16u + 32u * (i / 64u) + i % 32u);
    let q = field4(w, 4u * ((i / 32u) % 2u), 0xfu);
    return (d * sm.x) * q - vec4<f32>(dmin * sm.y);
}
