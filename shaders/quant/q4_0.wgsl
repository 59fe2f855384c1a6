// Q4_0: blocks of 32 in 18 bytes: f16 d, u8 qs[16]; element j < 16 is the low
// nibble of qs[j], j >= 16 the high nibble of qs[j - 16]; x = d * (q - 8).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let j = e % BLOCK_SIZE;
    let d = f16_at(b);
    let w = u32_at(b + 2u + (j % 16u));
    return d * nib4_minus(w, (j / 16u) * 4u, 8.0);
}

// Pair g: 4 quant bytes of block g / 4, both nibbles.
#include "quant/pair_nibbles.wgsl"
#include "quant/pair_scaled.wgsl"

// Pair g as levels q - 8 and the block's d for both groups.
fn pair_scaled(row_byte: u32, g: u32) -> Scaled {
    let b = row_byte + (g / 4u) * TYPE_SIZE;
    let w = u32_at(b + 2u + (g % 4u) * 4u);
    let q = array<vec4<f32>, 2>(nib4_minus(w, 0u, 8.0), nib4_minus(w, 4u, 8.0));
    return Scaled(q, vec2<f32>(f16_at(b)));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels q - 8: quant byte i's low nibbles are elements 4i .. 4i + 3,
// its high nibbles 16 + 4i .. 19 + 4i.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + u * TYPE_SIZE;
    var w: Q8w;
    w.d = f16_at(b);
    for (var i = 0u; i < 4u; i++) {
        let v = u32_at(b + 2u + 4u * i);
        w.q[i] = sub_bytes(v & 0x0f0f0f0fu, 8u);
        w.q[i + 4u] = sub_bytes((v >> 4u) & 0x0f0f0f0fu, 8u);
    }
    return w;
}

// ggml's vec_dot_q4_0_q8_0: sumi * d * d_x.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return f32(sumi.x + sumi.y) * w.d * x_ds(xs).x;
}
#endif
