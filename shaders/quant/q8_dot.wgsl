// The integer path of the 32-element formats (matvec_cols.wgsl, flag Q8):
// a weight block as 8 words of signed levels, four elements a word in
// order (word t: elements 4t .. 4t + 3), to meet x's Q8 levels in
// dot4I8Packed; `d` and `m` its scale and min. The format file defines
// q8_weights (the block at a byte) and q8_block (ggml's vec_dot of one
// block: the scales times the integer sum, in ggml's order).
struct Q8w {
    q: array<u32, 8>,
    d: f32,
    m: f32,
}

// Each byte of v (0 .. 127) less `bias` (at most 128), as a signed byte:
// v + (128 - bias) carries out of no byte, and flipping the top bit takes
// 128 back off mod 256.
fn sub_bytes(v: u32, bias: u32) -> u32 {
    return (v + (128u - bias) * 0x01010101u) ^ 0x80808080u;
}

// Bits 0..3 of h as bit 4 of bytes 0..3: Q5's fifth bits of four elements.
fn bit4_bytes(h: u32) -> u32 {
    return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}
