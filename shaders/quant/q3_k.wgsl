// Q3_K: super-blocks of 256 in 110 bytes:
//   0 u8 hmask[32], 32 u8 qs[64], 96 u8 scales[12], 108 f16 d.
// Element i = 128*h + 32*s + l (h < 2, s < 4, l < 32): low 2 bits are bits
// 2s..2s+2 of qs[32*h + l] (as Q2_K), high bit is bit i / 32 of hmask[l];
// q = low - 4 when the high bit is clear, else low (-4..3).
// Scale of sub-block j = i / 16 (6 bits, signed by -32): low 4 bits are
// the low nibble of scales[j] (j < 8) or the high nibble of scales[j - 8],
// high 2 bits are bits 2*(j/4)..+2 of scales[8 + j % 4];
// x = (d * (sc - 32)) * q.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

// The levels of elements i .. i + 3 (i % 4 == 0) of the super-block at b.
fn q3_levels(b: u32, i: u32) -> vec4<f32> {
    let l = i % 32u;
    let wq = u32_at(b + 32u + 32u * (i / 128u) + l);
    let wh = u32_at(b + l);
    let low = fields(wq, 2u * ((i % 128u) / 32u), 3u);
    return ints_minus(low | (fields(wh, i / 32u, 1u) << vec4<u32>(2u)), 4.0);
}

// The 6 bits of group j's scale (0 .. 16) of the super-block at b.
fn q3_scale_bits(b: u32, j: u32) -> u32 {
    let lo = (byte_at(b + 96u + j % 8u) >> (4u * (j / 8u))) & 0xfu;
    let hi = (byte_at(b + 104u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return lo | (hi << 4u);
}

// d * (sc - 32) of group j of the super-block at b.
fn q3_group_scale(b: u32, j: u32) -> f32 {
    return f16_at(b + 108u) * int_minus(q3_scale_bits(b, j), 32.0);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    return q3_group_scale(b, i / 16u) * q3_levels(b, i);
}

#include "quant/pair_plain.wgsl"
#include "quant/pair_scaled.wgsl"

// Pair g (elements 8g .. 8g + 7: one group of 16, so one scale) as levels
// and that group's scale for both halves: dequant4 at 8g and 8g + 4 with
// the scale taken once.
fn pair_scaled(row_byte: u32, g: u32) -> Scaled {
    let e = 8u * g;
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let q = array<vec4<f32>, 2>(q3_levels(b, i), q3_levels(b, i + 4u));
    return Scaled(q, vec2<f32>(q3_group_scale(b, i / 16u)));
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// The signed 6-bit scale of group g (0 .. 16) of the super-block at b.
fn q3_scale(b: u32, g: u32) -> i32 {
    return i32(q3_scale_bits(b, g)) - 32;
}

// Unit u of the row: elements 32j .. 32j + 31 of super-block u / 8 (j =
// u % 8; h = j / 4, s = j % 4): low bits 2s of qs[32h ..], bit j of
// hmask[..] on top, levels (low | high << 2) - 4 (-4 .. 3); its two
// groups' scales.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + (u / 8u) * TYPE_SIZE;
    let j = u % 8u;
    var w: Q8w;
    w.d = f16_at(b + 108u);
    w.sc = vec2<i32>(q3_scale(b, 2u * j), q3_scale(b, 2u * j + 1u));
    let qs = b + 32u + 32u * (j / 4u);
    for (var t = 0u; t < 8u; t++) {
        let lo = (u32_at(qs + 4u * t) >> (2u * (j % 4u))) & 0x03030303u;
        let hi = ((u32_at(b + 4u * t) >> j) & 0x01010101u) << 2u;
        w.q[t] = sub_bytes(lo | hi, 4u);
    }
    return w;
}

// ggml's vec_dot_q3_K_q8_K for one unit.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_k(w, sumi, xs);
}
#endif
