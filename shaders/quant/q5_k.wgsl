// Q5_K: super-blocks of 256 in 176 bytes:
//   0 f16 d, 2 f16 dmin, 4 u8 scales[12] (as Q4_K), 16 u8 qh[32],
//   48 u8 qs[128].
// Element i = 64*h + 32*s + l: low 4 bits as Q4_K (nibble s of
// qs[32*h + l]), 5th bit is bit i / 32 of qh[l];
// x = (d * sc[j]) * q - dmin * m[j], j = i / 32.
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let l = i % 32u;
    let d = f16_at(b);
    let dmin = f16_at(b + 2u);
    let sm = scale_min_k4(b + 4u, i / 32u);
    let wh = u32_at(b + 16u + l);
    let wl = u32_at(b + 48u + 32u * (i / 64u) + l);
    let low = fields(wl, 4u * ((i / 32u) % 2u), 0xfu);
    let q = ints_minus(low | (fields(wh, i / 32u, 1u) << vec4<u32>(4u)), 0.0);
    return (d * sm.x) * q - vec4<f32>(dmin * sm.y);
}

// Pair g: 4 quant bytes of a super-block, both nibbles (as Q4_K), and their
// 5th bits: bits 2h and 2h + 1 of qh[l .. l + 4].
#include "quant/pair_k_nibbles.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (g / 32u) * TYPE_SIZE;
    let t = g % 32u;
    let h = t / 8u;
    let l = 4u * (t % 8u);
    let dm = unpack2x16float(u32_at(b)); // d, dmin
    let sm = scale_min_k4_pair(b + 4u, h);
    let wh = u32_at(b + 16u + l);
    let wl = u32_at(b + 48u + 32u * h + l);
    let q0 = ints_minus(fields(wl, 0u, 0xfu) | (fields(wh, 2u * h, 1u) << vec4<u32>(4u)), 0.0);
    let q1 = ints_minus(fields(wl, 4u, 0xfu) | (fields(wh, 2u * h + 1u, 1u) << vec4<u32>(4u)), 0.0);
    return array<vec4<f32>, 2>(
        (dm.x * sm.x) * q0 - vec4<f32>(dm.y * sm.z),
        (dm.x * sm.y) * q1 - vec4<f32>(dm.y * sm.w),
    );
}

#ifdef Q8
#include "quant/q8_dot.wgsl"

// Unit u of the row: sub-block j = u % 8 of super-block u / 8, levels q
// (0 .. 31: nibble j % 2 of qs[32 (j / 2) ..], bit j of qh[..] on top);
// scales as Q4_K.
fn q8_weights(rb: u32, u: u32) -> Q8w {
    let b = rb + (u / 8u) * TYPE_SIZE;
    let j = u % 8u;
    var w = q8_k4_scales(b, j);
    let qs = b + 48u + 32u * (j / 2u);
    for (var t = 0u; t < 8u; t++) {
        let lo = (u32_at(qs + 4u * t) >> (4u * (j % 2u))) & 0x0f0f0f0fu;
        let hi = ((u32_at(b + 16u + 4u * t) >> j) & 0x01010101u) << 4u;
        w.q[t] = lo | hi;
    }
    return w;
}

// ggml's vec_dot_q5_K_q8_K for one sub-block.
fn q8_block(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return q8_block_k_min(w, sumi, xs);
}
#endif
