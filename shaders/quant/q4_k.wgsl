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

// Pair g: 4 quant bytes qs[32h + l .. + 3] of super-block g / 32 (t = g % 32,
// h = t / 8, l = 4 (t % 8)), both nibbles: elements 64h + l .. + 3 (sub-block
// 2h) and 64h + 32 + l .. + 3 (sub-block 2h + 1).
const PAIR_GAP: u32 = 32u;

fn pair_at(g: u32) -> u32 {
    let t = g % 32u;
    return (g / 32u) * BLOCK_SIZE + 64u * (t / 8u) + 4u * (t % 8u);
}

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (g / 32u) * TYPE_SIZE;
    let t = g % 32u;
    let h = t / 8u;
    let d = f16_at(b);
    let dmin = f16_at(b + 2u);
    let s0 = scale_min_k4(b + 4u, 2u * h);
    let s1 = scale_min_k4(b + 4u, 2u * h + 1u);
    let w = u32_at(b + 16u + 32u * h + 4u * (t % 8u));
    return array<vec4<f32>, 2>(
        (d * s0.x) * field4(w, 0u, 0xfu) - vec4<f32>(dmin * s0.y),
        (d * s1.x) * field4(w, 4u, 0xfu) - vec4<f32>(dmin * s1.y),
    );
}
