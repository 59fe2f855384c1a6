// Q5_1: blocks of 32 in 24 bytes: f16 d, f16 m, u8 qh[4], u8 qs[16]; bits as
// Q5_0; x = d * q + m.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

// Elements j .. j + 3 (j % 4 == 0) of the block at b, whose d and m are
// `dm`.
fn q5_1_weights(b: u32, j: u32, dm: vec2<f32>) -> vec4<f32> {
    let qh = u32_at(b + 4u) >> j;
    let w = u32_at(b + 8u + (j % 16u));
    return dm.x * ints_minus(nibs(w, (j / 16u) * 4u) | fifth_bits(qh), 0.0) + vec4<f32>(dm.y);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    return q5_1_weights(b, e % BLOCK_SIZE, vec2<f32>(f16_at(b), f16_at(b + 2u)));
}

// The plain pairing (the pair's 8 in one block), d and m read once for
// them.
#include "quant/pair_plain.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let e = 8u * g;
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let dm = vec2<f32>(f16_at(b), f16_at(b + 2u));
    return array<vec4<f32>, 2>(q5_1_weights(b, j, dm), q5_1_weights(b, j + 4u, dm));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels q (0 .. 31), bits as Q5_0.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + u * TYPE_SIZE;
    var w: Q8w;
    w.d = f16_at(b);
    w.m = f16_at(b + 2u);
    let qh = u32_at(b + 4u);
    for (var i = 0u; i < 4u; i++) {
        let v = u32_at(b + 8u + 4u * i);
        w.q[i] = (v & 0x0f0f0f0fu) | bit4_bytes(qh >> (4u * i));
        w.q[i + 4u] = ((v >> 4u) & 0x0f0f0f0fu) | bit4_bytes(qh >> (16u + 4u * i));
    }
    return w;
}

// ggml's vec_dot_q5_1_q8_1: (d * d_x) * sumi + m * s_x.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_min(w, sumi, xs);
}
#endif
