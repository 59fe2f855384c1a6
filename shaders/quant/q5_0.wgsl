// Q5_0: blocks of 32 in 22 bytes: f16 d, u8 qh[4], u8 qs[16]; the 5th bit of
// element j is bit j of qh; x = d * (q - 16).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let d = f16_at(b);
    let qh = u32_at(b + 2u) >> j;
    let w = u32_at(b + 6u + (j % 16u));
    return d * ints_minus(nibs(w, (j / 16u) * 4u) | fifth_bits(qh), 16.0);
}

#include "quant/pair_plain.wgsl"
#include "quant/pair_scaled.wgsl"

// Pair g (elements 8g .. 8g + 7, one half of one block's quant bytes) as
// levels q - 16 and the block's d for both groups.
fn pair_scaled(row_byte: u32, g: u32) -> Scaled {
    let e = 8u * g;
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let qh = u32_at(b + 2u) >> j;
    let hi = (j / 16u) * 4u;
    let at = b + 6u + (j % 16u);
    let q0 = ints_minus(nibs(u32_at(at), hi) | fifth_bits(qh), 16.0);
    let q1 = ints_minus(nibs(u32_at(at + 4u), hi) | fifth_bits(qh >> 4u), 16.0);
    return Scaled(array<vec4<f32>, 2>(q0, q1), vec2<f32>(f16_at(b)));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels q - 16, nibbles as Q4_0 with bit j of qh on top.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + u * TYPE_SIZE;
    var w: Q8w;
    w.d = f16_at(b);
    let qh = u32_at(b + 2u);
    for (var i = 0u; i < 4u; i++) {
        let v = u32_at(b + 6u + 4u * i);
        w.q[i] = sub_bytes((v & 0x0f0f0f0fu) | bit4_bytes(qh >> (4u * i)), 16u);
        w.q[i + 4u] = sub_bytes(((v >> 4u) & 0x0f0f0f0fu) | bit4_bytes(qh >> (16u + 4u * i)), 16u);
    }
    return w;
}

// ggml's vec_dot_q5_0_q8_0: (d * d_x) * sumi.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return (w.d * x_ds(xs).x) * f32(sumi.x + sumi.y);
}
#endif
