// The integer path of the matvec (matvec_cols.wgsl, flag Q8): a unit of
// 32 elements of a weight row as 8 words of signed levels, four elements a
// word in order (word t: elements 4t .. 4t + 3 of the unit), to meet x's
// Q8 levels in dot4I8Packed; `d` and `m` the scales the format multiplies
// the sums by, `sc` the integer scales of the unit's two halves (16
// elements each: the K-quants' groups; 1 where the format has none), `mn`
// Q2_K's integer mins of the two halves. The
// format file defines q8_weights (unit b of the row at byte rb) and
// q8_block (ggml's vec_dot of one unit: the scales times the integer sums
// of the halves, in ggml's order).
struct Q8w {
    q: array<u32, 8>,
    d: f32,
    m: f32,
    sc: vec2<i32>,
    mn: vec2<i32>,
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

// x's scales of a Q8_0/Q8_1 unit (a block): d and s, as stored (f16
// values).
fn x_ds(xs: vec2<u32>) -> vec2<f32> {
    return bitcast<vec2<f32>>(xs);
}

// x's scale of a Q8_K unit (its super-block's d, f32), and the sums of
// the unit's two halves' levels.
fn x_d(xs: vec2<u32>) -> f32 {
    return bitcast<f32>(xs.x);
}

fn x_bsums(xs: vec2<u32>) -> vec2<i32> {
    return vec2<i32>(bitcast<i32>(xs.y << 16u) >> 16u, bitcast<i32>(xs.y) >> 16u);
}

// ggml's vec_dot of one unit of the formats with a min and Q8_1 x (Q4_1,
// Q5_1): (d * d_x) * sumi + m * s_x.
fn q8_block_min(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    let x = x_ds(xs);
    return (w.d * x.x) * f32(sumi.x + sumi.y) + w.m * x.y;
}

// ggml's vec_dot of one unit of a K-quant without mins (Q3_K, Q6_K):
// (d * d_y) * the groups' scaled integer sums.
fn q8_block_k(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    return (w.d * x_d(xs)) * f32(w.sc.x * sumi.x + w.sc.y * sumi.y);
}

// ... with mins (Q2_K, Q4_K, Q5_K; `m` is dmin): less (dmin * d_y) * the
// groups' mins times x's group sums.
fn q8_block_k_min(w: Q8w, sumi: vec2<i32>, xs: vec2<u32>) -> f32 {
    let d = x_d(xs);
    let bs = x_bsums(xs);
    let summs = w.mn.x * bs.x + w.mn.y * bs.y;
    return q8_block_k(w, sumi, xs) - (w.m * d) * f32(summs);
}

// Q4_K/Q5_K: the scales of sub-block j (scale_min_k4) of the super-block
// at b, the levels left to the format.
fn q8_k4_scales(b: u32, j: u32) -> Q8w {
    let dm = unpack2x16float(u32_at(b)); // d, dmin
    let sm = scale_min_k4(b + 4u, j);
    var w: Q8w;
    w.d = dm.x;
    w.m = dm.y;
    w.sc = vec2<i32>(i32(sm.x));
    w.mn = vec2<i32>(i32(sm.y));
    return w;
}
