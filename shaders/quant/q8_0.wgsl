// Q8_0: blocks of 32 in 34 bytes: f16 d, i8 qs[32]; x = d * q.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let d = f16_at(b);
    let w = u32_at(b + 2u + (e % BLOCK_SIZE));
    return d * vec4<f32>(i8_of(w, 0u), i8_of(w, 1u), i8_of(w, 2u), i8_of(w, 3u));
}

#include "quant/pair.wgsl"

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Levels as stored.
fn q8_weights(b: u32) -> Q8w {
    var w: Q8w;
    w.d = f16_at(b);
    for (var t = 0u; t < 8u; t++) {
        w.q[t] = u32_at(b + 2u + 4u * t);
    }
    return w;
}

// ggml's vec_dot_q8_0_q8_0: sumi * (d * d_x).
fn q8_block(w: Q8w, sumi: i32, xs: vec2<f32>) -> f32 {
    return f32(sumi) * (w.d * xs.x);
}
#endif
