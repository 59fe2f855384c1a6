// Q2_K: super-blocks of 256 in 84 bytes:
//   0 u8 scales[16] (per 16-element sub-block: low nibble scale, high
//   nibble min), 16 u8 qs[64], 80 f16 d, 82 f16 dmin.
// Element i = 128*h + 32*s + l (h < 2, s < 4, l < 32) is bits 2s..2s+2 of
// qs[32*h + l]; sc = scales[i / 16];
// x = (d * (sc & 15)) * q - dmin * (sc >> 4).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

// The scale d * (sc & 15) (x) and the min dmin * (sc >> 4) (y) of the
// group of 16 that element i of the super-block at b is in.
fn q2_scale_min(b: u32, i: u32) -> vec2<f32> {
    let sc = byte_at(b + i / 16u);
    return vec2<f32>(f16_at(b + 80u) * int_minus(sc & 0xfu, 0.0), f16_at(b + 82u) * int_minus(sc >> 4u, 0.0));
}

// Elements i .. i + 3 of the super-block at b, their group's scale and min `sm`.
fn q2_weights(b: u32, i: u32, sm: vec2<f32>) -> vec4<f32> {
    let w = u32_at(b + 16u + 32u * (i / 128u) + i % 32u);
    return sm.x * field4(w, 2u * ((i % 128u) / 32u), 3u) - vec4<f32>(sm.y);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    return q2_weights(b, i, q2_scale_min(b, i));
}

// The plain pairing, the group's scale and min read once for the pair's 8
// (one group of 16).
#include "quant/pair_plain.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let e = 8u * g;
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let sm = q2_scale_min(b, i);
    return array<vec4<f32>, 2>(q2_weights(b, i, sm), q2_weights(b, i + 4u, sm));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Unit u of the row: elements 32j .. 32j + 31 of super-block u / 8 (j =
// u % 8; h = j / 4, s = j % 4): levels bits 2s of qs[32h ..] (0 .. 3); its
// two groups' scales and mins from scales[2j], scales[2j + 1].
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + (u / 8u) * TYPE_SIZE;
    let j = u % 8u;
    let dm = unpack2x16float(u32_at(b + 80u)); // d, dmin
    let sc = u16_at(b + 2u * j);
    var w: Q8w;
    w.d = dm.x;
    w.m = dm.y;
    w.sc = vec2<i32>(i32(sc & 0xfu), i32((sc >> 8u) & 0xfu));
    w.mn = vec2<i32>(i32((sc >> 4u) & 0xfu), i32(sc >> 12u));
    let qs = b + 16u + 32u * (j / 4u);
    for (var t = 0u; t < 8u; t++) {
        w.q[t] = (u32_at(qs + 4u * t) >> (2u * (j % 4u))) & 0x03030303u;
    }
    return w;
}

// ggml's vec_dot_q2_K_q8_K for one unit.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_k_min(w, sumi, xs);
}
#endif
