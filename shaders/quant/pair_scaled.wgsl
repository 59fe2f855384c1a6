// dequant_pair of the formats whose weights are a scale times a level,
// from their `pair_scaled` (quant/common.wgsl's `Scaled`): each group's 4
// levels times its scale. The format file includes its pairing (PAIR_GAP,
// pair_at) and defines pair_scaled; the float matvec with flag PS takes
// pair_scaled itself (matvec_cols.wgsl).

fn dequant_pair(row_byte: u32, g: u32) -> array<vec4<f32>, 2> {
    let p = pair_scaled(row_byte, g);
    return array<vec4<f32>, 2>(p.d.x * p.q[0], p.d.y * p.q[1]);
}
