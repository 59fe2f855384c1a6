// Byte access into a weight bound as `W: array<u32>` (the including kernel
// declares W). GGUF blocks are not 4-byte aligned (Q4_0 is 18 bytes), so
// every read goes through these. Offsets are bytes from the start of the
// bound window.

#include "common.wgsl"

fn byte_at(b: u32) -> u32 {
    return (W[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// Two bytes at an even offset.
fn u16_at(b: u32) -> u32 {
    return (W[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}

// Four bytes at an even offset.
fn u32_at(b: u32) -> u32 {
    let i = b >> 2u;
    if ((b & 2u) == 0u) {
        return W[i];
    }
    return (W[i] >> 16u) | (W[i + 1u] << 16u);
}

fn f16_at(b: u32) -> f32 {
    return unpack2x16float(u16_at(b)).x;
}

fn bf16_at(b: u32) -> f32 {
    return bitcast<f32>(u16_at(b) << 16u);
}

// Signed byte t (0..3) of a word: its two's complement with the sign bit
// flipped is the value plus 128.
fn i8_of(w: u32, t: u32) -> f32 {
    return int_minus(((w >> (8u * t)) & 0xffu) ^ 0x80u, 128.0);
}

// The four signed bytes of a word.
fn i8x4(w: u32) -> vec4<f32> {
    let v = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return ints_minus(v, 128.0);
}

// Nibble t (0..3) of a word's bytes, low (hi = 0) or high (hi = 4) half,
// as integers.
fn nibs(w: u32, hi: u32) -> vec4<u32> {
    return (vec4<u32>(w >> hi) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xfu);
}

// The same as floats, minus `off`.
fn nib4_minus(w: u32, hi: u32, off: f32) -> vec4<f32> {
    return ints_minus(nibs(w, hi), off);
}

// The same as floats.
fn nib4(w: u32, hi: u32) -> vec4<f32> {
    return nib4_minus(w, hi, 0.0);
}

// Bit t (0..3) of a word at bit 4 (Q5_0/Q5_1's fifth bits of four
// elements, to OR onto their nibbles).
fn fifth_bits(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) << vec4<u32>(4u, 3u, 2u, 1u)) & vec4<u32>(0x10u);
}

// Bits shift .. shift+width of each of a word's four bytes (mask = 2^width - 1;
// shift + width <= 8): the K-quants' 2-, 4- and 1-bit fields of four
// consecutive elements.
fn fields(w: u32, shift: u32, mask: u32) -> vec4<u32> {
    let at = vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u);
    return (vec4<u32>(w) >> at) & vec4<u32>(mask);
}

// The same as floats.
fn field4(w: u32, shift: u32, mask: u32) -> vec4<f32> {
    return ints_minus(fields(w, shift, mask), 0.0);
}

// Q4_K/Q5_K: the 6-bit scale (x) and min (y) of 32-element sub-block j
// (0..8) from the 12 packed bytes at byte s (ggml's get_scale_min_k4):
// j < 4: scale = q[j] & 63, min = q[j + 4] & 63;
// j >= 4: low 4 bits from q[j + 4] (scale low nibble, min high nibble),
//         high 2 bits from the top of q[j - 4] (scale) and q[j] (min).
fn scale_min_k4(s: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        let v = vec2<u32>(byte_at(s + j), byte_at(s + j + 4u)) & vec2<u32>(63u);
        return vec2<f32>(int_minus(v.x, 0.0), int_minus(v.y, 0.0));
    }
    let q = byte_at(s + j + 4u);
    let sc = (q & 0xfu) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let m = (q >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(int_minus(sc, 0.0), int_minus(m, 0.0));
}

// Q4_K/Q5_K: the scales (x, y) and mins (z, w) of sub-blocks 2h and 2h + 1
// (h < 4) from the 12 packed bytes at byte s (s % 2 == 0), as scale_min_k4
// gives them, read as three words and picked apart with the same
// instructions for every h (no branch on h: lanes of one warp take
// different h).
fn scale_min_k4_pair(s: u32, h: u32) -> vec4<f32> {
    let q0 = u32_at(s);       // q[0..4]
    let q1 = u32_at(s + 4u);  // q[4..8]
    let q2 = u32_at(s + 8u);  // q[8..12]
    // Byte j' of each word: sub-block j = j' (h < 2) or 4 + j' (h >= 2).
    let hi = h >= 2u;
    let sc = select(q0 & 0x3f3f3f3fu, (q2 & 0x0f0f0f0fu) | ((q0 >> 2u) & 0x30303030u), hi);
    let mn = select(q1 & 0x3f3f3f3fu, ((q2 >> 4u) & 0x0f0f0f0fu) | ((q1 >> 2u) & 0x30303030u), hi);
    let sh = 16u * (h % 2u);
    let v = vec4<u32>(sc, sc, mn, mn) >> vec4<u32>(sh, sh + 8u, sh, sh + 8u);
    return ints_minus(v & vec4<u32>(0xffu), 0.0);
}

// A pair (quant/pair.wgsl) as the formats whose weights are a scale times a
// level give it (`pair_scaled`: Q4_0, Q5_0, Q8_0, Q3_K, Q6_K): the 8 levels, and
// the scales of the two groups of 4 (the weights are d.x * q[0], d.y * q[1]).
struct Scaled {
    q: array<vec4<f32>, 2>,
    d: vec2<f32>,
}
