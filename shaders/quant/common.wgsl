// Byte access into a weight bound as `W: array<u32>` (the including kernel
// declares W). GGUF blocks are not 4-byte aligned (Q4_0 is 18 bytes), so
// every read goes through these. Offsets are bytes from the start of the
// bound window.

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

// Signed byte t (0..3) of a word.
fn i8_of(w: u32, t: u32) -> f32 {
    return f32(bitcast<i32>(w << (24u - 8u * t)) >> 24u);
}

// Nibble t (0..3) of a word's bytes, low (hi = 0) or high (hi = 4) half.
fn nib4(w: u32, hi: u32) -> vec4<f32> {
    let s = w >> hi;
    return vec4<f32>(f32(s & 0xfu), f32((s >> 8u) & 0xfu), f32((s >> 16u) & 0xfu), f32((s >> 24u) & 0xfu));
}
