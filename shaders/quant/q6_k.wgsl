// Q6_K: super-blocks of 256 in 210 bytes:
//   0 u8 ql[128], 128 u8 qh[64], 192 i8 scales[16], 208 f16 d.
// Element i = 128*h + r (h < 2, r < 128): low 4 bits are nibble r / 64
// (low, high) of ql[64*h + r % 64], high 2 bits are bits 2*(r/32)..+2 of
// qh[32*h + r % 32]; q is 0..63;
// x = (d * scales[i / 16]) * (q - 32).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let h = i / 128u;
    let r = i % 128u;
    let d = f16_at(b + 208u);
    let sc = i8_of(byte_at(b + 192u + i / 16u), 0u);
    let wl = u32_at(b + 64u * h + r % 64u);
    let wh = u32_at(b + 128u + 32u * h + r % 32u);
    let low = fields(wl, 4u * (r / 64u), 0xfu);
    let q = ints_minus(low | (fields(wh, 2u * (r / 32u), 3u) << vec4<u32>(4u)), 32.0);
    return (d * sc) * q;
}

// Pair g: 4 bytes ql[64h + j .. + 3] of super-block g / 32 (t = g % 32,
// h = t / 16, j = 4 (t % 16)), both nibbles, with the qh word both take
// their high bits from: elements 128h + j .. + 3 and 128h + 64 + j .. + 3.
const PAIR_GAP: u32 = 64u;

fn pair_at(g: u32) -> u32 {
    let t = g % 32u;
    return (g / 32u) * BLOCK_SIZE + 128u * (t / 16u) + 4u * (t % 16u);
}

// Pair g's levels q - 32 and its two groups' scales d * scales[..].
fn pair_scaled(row_byte: u32, g: u32) -> Scaled {
    let b = row_byte + (g / 32u) * TYPE_SIZE;
    let t = g % 32u;
    let h = t / 16u;
    let j = 4u * (t % 16u);
    let i = 128u * h + j;
    let d = f16_at(b + 208u);
    let sc0 = i8_of(byte_at(b + 192u + i / 16u), 0u);
    let sc1 = i8_of(byte_at(b + 196u + i / 16u), 0u);
    let wl = u32_at(b + 64u * h + j);
    let wh = u32_at(b + 128u + 32u * h + j % 32u);
    let sh = 2u * (j / 32u);
    let q0 = ints_minus(fields(wl, 0u, 0xfu) | (fields(wh, sh, 3u) << vec4<u32>(4u)), 32.0);
    let q1 = ints_minus(fields(wl, 4u, 0xfu) | (fields(wh, sh + 4u, 3u) << vec4<u32>(4u)), 32.0);
    return Scaled(array<vec4<f32>, 2>(q0, q1), vec2<f32>(d * sc0, d * sc1));
}

#include "quant/pair_scaled.wgsl"

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Unit u of the row: elements 32j .. 32j + 31 of super-block u / 8 (j =
// u % 8; half h = j / 4, r = j % 4): low 4 bits nibble r / 2 of
// ql[64h + 32 (r % 2) ..], high 2 bits bits 2r of qh[32h ..]; levels q - 32;
// its two groups' scales[2j], scales[2j + 1].
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + (u / 8u) * TYPE_SIZE;
    let j = u % 8u;
    let h = j / 4u;
    let r = j % 4u;
    let sc = u16_at(b + 192u + 2u * j);
    var w: Q8w;
    w.d = f16_at(b + 208u);
    w.sc = vec2<i32>(bitcast<i32>(sc << 24u) >> 24u, bitcast<i32>(sc << 16u) >> 24u);
    let ql = b + 64u * h + 32u * (r % 2u);
    for (var t = 0u; t < 8u; t++) {
        let lo = (u32_at(ql + 4u * t) >> (4u * (r / 2u))) & 0x0f0f0f0fu;
        let hi = ((u32_at(b + 128u + 32u * h + 4u * t) >> (2u * r)) & 0x03030303u) << 4u;
        w.q[t] = sub_bytes(lo | hi, 32u);
    }
    return w;
}

// ggml's vec_dot_q6_K_q8_K for one unit.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_k(w, sumi, xs);
}
#endif
