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

// Pair g: 4 quant bytes of block g / 4, both nibbles.
#include "quant/pair_nibbles.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (g / 4u) * TYPE_SIZE;
    let d = f16_at(b);
    let m = vec4<f32>(f16_at(b + 2u));
    let w = u32_at(b + 4u + (g % 4u) * 4u);
    return array<vec4<f32>, 2>(d * nib4(w, 0u) + m, d * nib4(w, 4u) + m);
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels q (0 .. 15), nibbles as Q4_0.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + u * TYPE_SIZE;
    var w: Q8w;
    w.d = f16_at(b);
    w.m = f16_at(b + 2u);
    for (var i = 0u; i < 4u; i++) {
        let v = u32_at(b + 4u + 4u * i);
        w.q[i] = v & 0x0f0f0f0fu;
        w.q[i + 4u] = (v >> 4u) & 0x0f0f0f0fu;
    }
    return w;
}

// ggml's vec_dot_q4_1_q8_1: (d * d_x) * sumi + m * s_x.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_min(w, sumi, xs);
}
#endif
