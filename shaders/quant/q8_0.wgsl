// Q8_0: blocks of 32 in 34 bytes: f16 d, i8 qs[32]; x = d * q.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let d = f16_at(b);
    let w = u32_at(b + 2u + (e % BLOCK_SIZE));
    return d * i8x4(w);
}

#include "quant/pair_plain.wgsl"
#include "quant/pair_scaled.wgsl"

// Pair g (elements 8g .. 8g + 7 of one block) as levels and the block's d
// for both groups.
fn pair_scaled(row_byte: u32, g: u32) -> Scaled {
    let e = 8u * g;
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let at = b + 2u + (e % BLOCK_SIZE);
    let q = array<vec4<f32>, 2>(i8x4(u32_at(at)), i8x4(u32_at(at + 4u)));
    return Scaled(q, vec2<f32>(f16_at(b)));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels as stored.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + u * TYPE_SIZE;
    var w: Q8w;
    w.d = f16_at(b);
    for (var t = 0u; t < 8u; t++) {
        w.q[t] = u32_at(b + 2u + 4u * t);
    }
    return w;
}

// ggml's vec_dot_q8_0_q8_0: sumi * (d * d_x).
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return f32(sumi.x + sumi.y) * (w.d * x_ds(xs).x);
}
#endif
