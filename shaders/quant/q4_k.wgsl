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

// Pair g: 4 quant bytes of a super-block, both nibbles.
#include "quant/pair_k_nibbles.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (g / 32u) * TYPE_SIZE;
    let t = g % 32u;
    let h = t / 8u;
    let dm = unpack2x16float(u32_at(b)); // d, dmin
    let sm = scale_min_k4_pair(b + 4u, h);
    let w = u32_at(b + 16u + 32u * h + 4u * (t % 8u));
    return array<vec4<f32>, 2>(
        (dm.x * sm.x) * field4(w, 0u, 0xfu) - vec4<f32>(dm.y * sm.z),
        (dm.x * sm.y) * field4(w, 4u, 0xfu) - vec4<f32>(dm.y * sm.w),
    );
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Unit u of the row: sub-block j = u % 8 of super-block u / 8, levels q
// (0 .. 15, nibble j % 2 of qs[32 (j / 2) ..]); d and dmin, and the
// integer scale sc[j] and min m[j] of both halves (q8_k4_scales).
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + (u / 8u) * TYPE_SIZE;
    let j = u % 8u;
    var w = q8_k4_scales(b, j);
    let qs = b + 16u + 32u * (j / 2u);
    for (var t = 0u; t < 8u; t++) {
        w.q[t] = (u32_at(qs + 4u * t) >> (4u * (j % 2u))) & 0x0f0f0f0fu;
    }
    return w;
}

// ggml's vec_dot_q4_K_q8_K for one sub-block.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_k_min(w, sumi, xs);
}
#endif
