// The quantized KV cache types, picked by the override KV_Q (0: none, the
// cache is F32 or F16; 1: Q8_0; 2: Q4_0), quantized as ggml's cpu backend
// quantizes cache rows (glint_cpu::act::quantize_row): Q8_0 with inverse
// scale 127 / amax and levels rounded half to even (its x86 quantize_row),
// Q4_0 with d = max / -8 (max: the first value of largest magnitude) and
// truncated levels + 8 capped at 15 (quantize_row_q4_0_ref). No bindings.
//   Q8_0: blocks of 32 in 34 bytes: f16 d, i8 qs[32]
//   Q4_0: blocks of 32 in 18 bytes: f16 d, u8 qs[16] (j low nibble, j+16 high)
// A cache row is a whole number of blocks and of u32 words (checked by the
// launchers), so a word never spans two rows.
override KV_Q: u32 = 0u;

#include "common.wgsl"

const KVQ_BLOCK: u32 = 32u;

fn kvq_type_size() -> u32 {
    if (KV_Q == 1u) {
        return 34u;
    }
    return 18u;
}

// (d, 1/d) of a block from its largest magnitude `amax` and the first value
// `mx` of that magnitude.
fn kvq_scale(amax: f32, mx: f32) -> vec2<f32> {
    if (KV_Q == 1u) {
        return vec2<f32>(amax / 127.0, select(0.0, 127.0 / amax, amax != 0.0));
    }
    let d = mx / -8.0;
    return vec2<f32>(d, select(0.0, 1.0 / d, d != 0.0));
}

// Byte t (0 or 1) of d as stored (f16).
fn kvq_scale_byte(d: f32, t: u32) -> u32 {
    return (pack2x16float(vec2<f32>(d, 0.0)) >> (8u * t)) & 0xffu;
}

// A Q8_0 level as a byte.
fn kvq_level8(x: f32, id: f32) -> u32 {
    return u32(i32(round(clamp(x * id, -128.0, 127.0)))) & 0xffu;
}

// A Q4_0 level (0..15).
fn kvq_level4(x: f32, id: f32) -> u32 {
    return min(15u, u32(max(x * id + 8.5, 0.0)));
}

// Element j (0..31) of a block from its scale and the word-aligned bytes of
// its levels: `b` is the byte holding it (Q8_0: level j; Q4_0: j % 16).
fn kvq_value(d: f32, b: u32, j: u32) -> f32 {
    if (KV_Q == 1u) {
        // The low byte as signed: with its sign bit flipped, the value
        // plus 128 (common.wgsl's int_minus: no conversion instruction).
        return d * int_minus((b & 0xffu) ^ 0x80u, 128.0);
    }
    return d * int_minus((b >> ((j / 16u) * 4u)) & 0xfu, 8.0);
}

// Byte offset in the block of element j's level byte.
fn kvq_level_byte(j: u32) -> u32 {
    if (KV_Q == 1u) {
        return 2u + j;
    }
    return 2u + (j % 16u);
}
