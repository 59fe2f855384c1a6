// Pairs: what a matvec lane takes in one step (matvec_cols.wgsl, flag P8).
// Pair g (0 .. k / 8) of a row is the 8 elements pair_at(g) .. + 3 and
// pair_at(g) + PAIR_GAP .. + 3, dequantized by dequant_pair; pairs g and g + 1
// lie next to each other in the row's bytes, so the lanes of a step read
// adjacent bytes. This file is the plain pairing, 8 consecutive elements
// through dequant4 (the float formats; Q2_K and Q5_1 take pair_plain.wgsl
// with a dequant_pair of their own, the formats with pair_scaled with
// pair_scaled.wgsl's); a format whose bytes hold other runs together
// (Q4_0: a quant byte holds elements j and j + 16) defines its own.

#include "quant/pair_plain.wgsl"

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let e = 8u * g;
    return array<vec4<f32>, 2>(dequant4(row_byte, e), dequant4(row_byte, e + 4u));
}
