// Q2_K: super-blocks of 256 in 84 bytes:
//   0 u8 scales[16] (per 16-element sub-block: low nibble scale, high
//   nibble min), 16 u8 qs[64], 80 f16 d, 82 f16 dmin.
// Element i = 128*h + 32*s + l (h < 2, s < 4, l < 32) is bits 2s..2s+2 of
// qs[32*h + l]; sc = scales[i / 16];
// x = (d * (sc & 15)) * q - dmin * (sc >> 4).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let d = f16_at(b + 80u);
    let dmin = f16_at(b + 82u);
    let sc = byte_at(b + i / 16u);
    let w = u32_at(b + 16u + 32u * (i / 128u) + i % 32u);
    let q = field4(w, 2u * ((i % 128u) / 32u), 3u);
    return (d * int_minus(sc & 0xfu, 0.0)) * q - vec4<f32>(dmin * int_minus(sc >> 4u, 0.0));
}

#include "quant/pair.wgsl"

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
