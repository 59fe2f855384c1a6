// The matvec's sums, shared by mul_mat.wgsl's `matvec` and matvec_fused.wgsl
// so that a fused dispatch gives, to the bit, what separate ones give.
// A row's lanes (a workgroup of WG invocations, or with SGROW a subgroup)
// take every column of x (m <= MAX_COLS): each lane dequantizes its weights
// once and dots them with every column, so a decode step of m sequences
// reads each weight row once, not m times; a lane takes NR rows at once,
// x read once for them. Column c's sum is the same sequence of operations
// whatever m and NR are.
// The including shader declares `p` (fields k, m; eps with NORM), x ([k, m] f32: as
// `array<vec4<f32>>` with P8, else `array<f32>`), `const WG`, and includes
// TYPE_FILE (dequant4, dequant1, and its pairing: PAIR_GAP, pair_at,
// dequant_pair) and reduce.wgsl before this file.
//
// Flag P8 (ops/mul_mat.rs's matvec_key sets it where k % 4 == 0): a lane
// takes 8 weights a step, paired as the format's bytes hold them
// (quant/pair.wgsl), x is read a vec4 at a time, and UNROLL pairs' weights
// (UNROLL / NR steps of NR rows) are loaded before they are used. Without
// it (rows of plain floats whose length is not a multiple of 4): a group of
// 4 a step, x a float at a time.

// Columns one dispatch takes: ops/mul_mat.rs's MATVEC_MAX_M.
const MAX_COLS: u32 = 8u;

// Flag SGROW (with USE_SUBGROUPS; ops/mul_mat.rs's matvec_key sets it where
// the device has subgroups): a row is one subgroup's, not the workgroup's.
// Workgroup i takes rows i * RPW .. + RPW (RPW: the launcher's, the rows
// a subgroup takes at once, ops/mul_mat.rs's matvec_joint_rows, times WG
// over the adapter's smallest subgroup size), subgroup s of it rows s, s +
// n_sg, ..., NR at once (glu: NR / 2); its lanes stride the rows and one
// subgroupAdd sums a row's column, with no barrier and no workgroup
// memory. Without: one row a workgroup, WG lanes, reduce.wgsl's wg_sum.
override RPW: u32 = 1u;

// Rows a lane dots at once: their weights against one read of x (normed,
// the post-norm added), so x is read once for NR rows, not once a row.
// The launcher's (ops/mul_mat.rs's matvec_key): the rows a subgroup takes
// together in `matvec` and `multi` (1 without SGROW), twice that in `glu`
// (each row's gate and up), at most MAX_NR (ops/mul_mat.rs's
// MATVEC_MAX_JOINT; glu's default is its one gate and up row). Each row's
// sums are the one-row sums to the bit: the same operations in the same
// order, only the loads shared.
#ifdef GLU
override NR: u32 = 2u;
#else
override NR: u32 = 1u;
#endif
const MAX_NR: u32 = 4u;

// Row j's partial sums of column c: [j][c].
alias Sums = array<array<f32, MAX_COLS>, MAX_NR>;
// The byte offsets in W of the rows dotted at once (the first NR).
alias RowBytes = array<u32, MAX_NR>;

// A row's column sum of every lane's `v` (in the row's control flow).
fn row_sum(ln: Lane, v: f32) -> f32 {
#ifdef SGROW
    return subgroupAdd(v);
#else
    return wg_sum(ln, v);
#endif
}

// The entry points take their rows NR at once (glu: NR / 2, each a gate
// and an up row) as
//     for (var r = first; r < end; r += step * NR)
// rows r, r + step, ... (one past the end read again, not stored) with a
// row's lanes `lane` of `lanes`, set under flag SGROW from the
// subgroup (rows group * RPW + sg_id, + n_sg, ... below the group's end;
// lanes counted among the subgroup's active invocations, at entry, where
// all are active), else from the workgroup (its one
// row; lane lid of WG: bounds uniform across the workgroup, so the loop
// may hold wg_sum's barriers).

// Flag NORM: the matvec of RMSNorm(x) * nw (the including shader binds
// `nw`, the norm's weights, typed as x, and has `p.eps`). Each lane dots
// its weights with x * nw and sums the squares of the x it reads, so the
// workgroup has column c's sum of squares when it has the dot, and the
// total is scaled by rms_norm.wgsl's 1 / sqrt(mean + eps): no norm kernel,
// no normed copy of x.
#ifdef NORM
var<private> ssq: array<f32, MAX_COLS>;

// 1 / RMS of x's column c, from every lane's ssq[c] (after partials).
// Q8: 1, the prologue having normed x before it quantized it.
fn inv_rms(ln: Lane, c: u32) -> f32 {
#ifdef Q8
    return 1.0;
#else
    return 1.0 / sqrt(row_sum(ln, ssq[c]) / f32(p.k) + p.eps);
#endif
}
#endif

// Flag POST (with NORM and P8; without P8 the module does not compile):
// x is the residual, and the input is x + RMSNorm(y) * pw, the previous
// block's post-norm not yet added (the including shader binds `y` and `pw`
// as x, and `xo`, where the workgroup `post_begin` names the writer stores
// the sum: the stream from then on; `p.post_eps`). Each workgroup sums y's
// squares first (`post_begin`), then forms each element of the sum as it
// reads it, with rms_norm.wgsl's ADD operations: the bits of that kernel's
// output up to the order the squares were summed in.
#ifdef POST
var<private> ry: array<f32, MAX_COLS>;
var<private> writes_x: bool;

// 1 / RMS of y's columns, every lane's strided squares reduced; `writer`:
// this workgroup stores the sums it forms into xo. Call first, in uniform
// control flow.
fn post_begin(ln: Lane, lid: u32, writer: bool) {
    writes_x = writer;
    let k4 = p.k / 4u;
    for (var c = 0u; c < COLS; c++) {
        var s = 0.0;
        if (c < p.m) {
            for (var i = lid; i < k4; i += WG) {
                let v = y[c * k4 + i];
                s += dot(v, v);
            }
        }
        ry[c] = 1.0 / sqrt(wg_sum(ln, s) / f32(p.k) + p.post_eps);
    }
}
#endif

// The pipeline's column bound: m rounded up to 1, 2, 4 or 8 (set by the
// launcher), so every loop over columns has a constant trip count once the
// pipeline is made, unrolls, and keeps the sums in registers (with only
// MAX_COLS, lavapipe ran a one-column decode 3.5x slower).
override COLS: u32 = MAX_COLS;

// `partials(lane, lanes, rb)`: this invocation's partial sums of the NR
// rows at bytes rb[j] of W with x's columns 0..p.m (the rest stay 0).
#ifdef P8
// Elements e..e+3 of column c (e % 4 == 0), not stored (POST).
fn x4_in(c: u32, e: u32) -> vec4<f32> {
    let i = (c * p.k + e) >> 2u;
#ifdef POST
    return x[i] + y[i] * ry[c] * pw[e >> 2u];
#else
    return x[i];
#endif
}

// Elements e..e+3 of column c (e % 4 == 0); POST: the writer stores them.
fn x4(c: u32, e: u32) -> vec4<f32> {
    let a = x4_in(c, e);
#ifdef POST
    if (writes_x) {
        xo[(c * p.k + e) >> 2u] = a;
    }
#endif
    return a;
}

#ifdef Q8
// Flag Q8 (with P8; ops/mul_mat.rs's matvec_key sets it where the
// backend's int8 path is on, the format has one and x fits): the integer
// path, held to the cpu backend's Precision::Ggml. `q8_begin` (each
// workgroup, first) quantizes x's columns, normed with NORM, the post-norm
// added with POST, into workgroup memory as glint-cpu's act.rs quantizes
// them for the format's vec_dot_type:
//   Q8_0/Q8_1 (32-element formats): ggml's x86 blocks of 32, levels
//   round(v * (127 / amax)) ties to even (WGSL's round), d = amax / 127
//   and s = d * sum(levels) both rounded to f16 as the blocks store them;
//   Q8_K (K-quants): super-blocks of 256, levels round(v * iscale) with
//   iscale = -127 / (the value of largest magnitude, the first), capped at
//   127, d = 1 / iscale (f32), and the sums of each 16 levels.
// The quotients are WGSL's `/`: correctly rounded on lavapipe, as on the
// cpu, but WGSL allows 2.5 ulp (GPUs multiply by a reciprocal), so on a
// GPU a level may move where x * (127 / amax) lands within an ulp of a
// half (a correction step on the remainder needs a fused fma, which
// lavapipe does not give: it made levels move there). Either way in units
// of 32 elements: 8 words of levels (4 a word, in
// order) and a vec2<u32> of scales (Q8_0/Q8_1: the bits of d and s; Q8_K:
// the bits of d, and the two 16-level sums as i16 halves).
// Then a lane takes one unit of a row a step: the format's 8 words of
// levels for the same 32 elements (quant/q8_dot.wgsl), 8 dot4I8Packed,
// integer sums of each half (16 elements: the K-quants' groups), scaled
// by the format's q8_block as ggml's vec_dot scales them.
//
// Room for Q8_BLOCKS units of all columns together: ops/mul_mat.rs's
// Q8_MAX_ELEMENTS / 32 (15 KiB with `red`: under the 16 KiB every adapter
// gives), or with flag Q8W (where x needs more and the adapter has 32 KiB)
// Q8_WIDE_ELEMENTS / 32 (30 KiB): a workgroup's memory is what its
// pipeline declares, so only the matvecs that need it pay for it.
#ifdef Q8W
const Q8_BLOCKS: u32 = 768u;
#else
const Q8_BLOCKS: u32 = 384u;
#endif
var<workgroup> xq: array<u32, 8u * Q8_BLOCKS>; // [8, Q8_BLOCKS]: 4 levels a word
var<workgroup> xd: array<vec2<u32>, Q8_BLOCKS>; // a unit's scales

// v rounded to f16 (to nearest, ties to even, as the cpu's half crate),
// as an f32: pack2x16float's rounding, subnormals and overflow are the
// implementation's, and activation blocks of amax < 0.0078 have
// subnormal scales.
fn f16_round(v: f32) -> f32 {
    let a = abs(v);
    var r: f32;
    if (a >= 65520.0) {
        r = bitcast<f32>(0x7f800000u); // past f16's largest: inf
    } else if (a < 6.103515625e-05) {
        // Subnormal: multiples of 2^-24 (scaling by 2^24 is exact).
        r = round(a * 16777216.0) * 5.9604644775390625e-08;
    } else {
        let bits = bitcast<u32>(a);
        r = bitcast<f32>((bits + 0xfffu + ((bits >> 13u) & 1u)) & ~0x1fffu);
    }
    return select(r, -r, v < 0.0);
}

// The input elements e..e+3 of column c as quantized: x (POST: the sum,
// stored by the writer when `store`), normed with NORM (ir: the column's
// 1 / RMS; rms_norm then mul, as the cpu backend rounds them).
fn q8_in(c: u32, e: u32, ir: f32, store: bool) -> vec4<f32> {
    var a: vec4<f32>;
    if (store) {
        a = x4(c, e);
    } else {
        a = x4_in(c, e);
    }
#ifdef NORM
    a = (a * ir) * nw[e >> 2u];
#endif
    return a;
}

// Quantize x's columns into xq/xd (unit c * k / 32 + j: column c's
// elements 32j ..); in uniform control flow, before any row.
fn q8_begin(ln: Lane, lid: u32) {
    var ir: array<f32, MAX_COLS>;
#ifdef NORM
    // rms_norm.wgsl's scale, from the input's squares.
    for (var c = 0u; c < COLS; c++) {
        var s = 0.0;
        if (c < p.m) {
            for (var i = lid; i < p.k / 4u; i += WG) {
                let a = x4_in(c, 4u * i);
                s += dot(a, a);
            }
        }
        ir[c] = 1.0 / sqrt(wg_sum(ln, s) / f32(p.k) + p.eps);
    }
#endif
    if (BLOCK_SIZE == 256u) {
        // Q8_K: a unit an invocation, in three steps with barriers
        // between (a super-block an invocation left 7 of 8 lanes idle and
        // read 256 values in a row): each unit's value of largest
        // magnitude (the first) into its scales' y; each unit's levels by
        // its super-block's (the first of its 8 units' largest), the
        // scale into x; then the half sums into y.
        let nu = p.k / 32u;
        for (var bi = lid; bi < p.m * nu; bi += WG) {
            let c = bi / nu;
            let e0 = (bi % nu) * 32u;
            var mx = 0.0;
            var amax = 0.0;
            for (var t = 0u; t < 8u; t++) {
                let a = q8_in(c, e0 + 4u * t, ir[c], false);
                for (var i = 0u; i < 4u; i++) {
                    if (abs(a[i]) > amax) {
                        amax = abs(a[i]);
                        mx = a[i];
                    }
                }
            }
            xd[bi].y = bitcast<u32>(mx);
        }
        workgroupBarrier();
        // This invocation's units' half sums, until the last step.
        var sums: array<u32, Q8_BLOCKS / WG>;
        var n = 0u;
        for (var bi = lid; bi < p.m * nu; bi += WG) {
            let c = bi / nu;
            let e0 = (bi % nu) * 32u;
            let first = (bi / 8u) * 8u;
            var mx = 0.0;
            var amax = 0.0;
            for (var u = 0u; u < 8u; u++) {
                let v = bitcast<f32>(xd[first + u].y);
                if (abs(v) > amax) {
                    amax = abs(v);
                    mx = v;
                }
            }
            let iscale = select(0.0, -127.0 / mx, amax != 0.0);
            let d = select(0.0, 1.0 / iscale, amax != 0.0);
            var hs = vec2<i32>(0);
            for (var t = 0u; t < 8u; t++) {
                let a = q8_in(c, e0 + 4u * t, ir[c], true);
                let q = vec4<i32>(clamp(round(a * iscale), vec4<f32>(-128.0), vec4<f32>(127.0)));
                hs[t / 4u] += q.x + q.y + q.z + q.w;
                xq[bi * 8u + t] = pack4xI8(q);
            }
            xd[bi].x = bitcast<u32>(d);
            sums[n] = (bitcast<u32>(hs.x) & 0xffffu) | (bitcast<u32>(hs.y) << 16u);
            n++;
        }
        workgroupBarrier();
        n = 0u;
        for (var bi = lid; bi < p.m * nu; bi += WG) {
            xd[bi].y = sums[n];
            n++;
        }
    } else {
        // Q8_0/Q8_1: a block an invocation.
        let nb = p.k / 32u;
        for (var bi = lid; bi < p.m * nb; bi += WG) {
            let c = bi / nb;
            let e0 = (bi % nb) * 32u;
            var v: array<vec4<f32>, 8>;
            var amax = 0.0;
            for (var t = 0u; t < 8u; t++) {
                let a = q8_in(c, e0 + 4u * t, ir[c], true);
                v[t] = a;
                let ab = abs(a);
                amax = max(amax, max(max(ab.x, ab.y), max(ab.z, ab.w)));
            }
            let d = amax / 127.0;
            let id = select(0.0, 127.0 / amax, amax != 0.0);
            var sum = 0i;
            for (var t = 0u; t < 8u; t++) {
                let q = vec4<i32>(clamp(round(v[t] * id), vec4<f32>(-128.0), vec4<f32>(127.0)));
                sum += q.x + q.y + q.z + q.w;
                xq[bi * 8u + t] = pack4xI8(q);
            }
            let ds = vec2<f32>(f16_round(d), f16_round(f32(sum) * d));
            xd[bi] = bitcast<vec2<u32>>(ds);
        }
    }
    workgroupBarrier();
}

// A lane a unit a step of each of the NR rows: the integer sums of its
// halves with each column's (x's levels read once for the rows), scaled
// by q8_block. A row's sums take its units in the order one row alone
// takes them (the integer sums have no order).
fn partials(lane: u32, lanes: u32, rb: RowBytes) -> Sums {
    var s: Sums;
    let nb = p.k / 32u;
    for (var b = lane; b < nb; b += lanes) {
        var w: array<Q8w, MAX_NR>;
        for (var j = 0u; j < NR; j++) {
            w[j] = q8_weights(rb[j], b);
        }
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                let xb = c * nb + b;
                var sumi: array<vec2<i32>, MAX_NR>;
                for (var t = 0u; t < 8u; t++) {
                    let xv = xq[xb * 8u + t];
                    for (var j = 0u; j < NR; j++) {
                        sumi[j][t / 4u] += dot4I8Packed(w[j].q[t], xv);
                    }
                }
                let xs = xd[xb];
                for (var j = 0u; j < NR; j++) {
                    s[j][c] += q8_block(w[j], sumi[j], xs);
                }
            }
        }
    }
    return s;
}
#else

// How many pairs (groups of 8) a lane loads before it uses them.
const UNROLL: u32 = 4u;

// Elements e..e+3 of column c (e % 4 == 0) as the weights meet them:
// NORM: times nw, the squares of x summed into ssq[c].
fn xn4(c: u32, e: u32) -> vec4<f32> {
    let a = x4(c, e);
#ifdef NORM
    ssq[c] += dot(a, a);
    return a * nw[e >> 2u];
#else
    return a;
#endif
}

#ifdef PS
// Flag PS (ops/mul_mat.rs's matvec_key sets it for the formats whose
// weights are a scale times a level, Q4_0, Q5_0, Q8_0, Q3_K and Q6_K; their
// files define `pair_scaled`): a pair's 8 levels and the scales of its two
// groups of 4, the levels dotted with x and each dot scaled once, so a
// level costs no multiply by its scale (one a group of 4 instead).
alias PairW = Scaled;

fn pair_w(rb: u32, g: u32) -> PairW {
    return pair_scaled(rb, g);
}

fn pair_dot(w: PairW, a: array<vec4<f32>, 2>) -> f32 {
    return w.d.x * dot(w.q[0], a[0]) + w.d.y * dot(w.q[1], a[1]);
}
#else
// A pair's 8 weights: the format's dequant_pair.
alias PairW = array<vec4<f32>, 2>;

fn pair_w(rb: u32, g: u32) -> PairW {
    return dequant_pair(rb, g);
}

// Row j's share of column c's sum for the 8 weights `w` of a pair whose
// inputs are `a` (xn4 at e and e + PAIR_GAP).
fn pair_dot(w: PairW, a: array<vec4<f32>, 2>) -> f32 {
    return dot(w[0], a[0]) + dot(w[1], a[1]);
}
#endif

// The inputs of pair g's 8 weights, column c.
fn pair_x(c: u32, e: u32) -> array<vec4<f32>, 2> {
    let a0 = xn4(c, e);
    return array<vec4<f32>, 2>(a0, xn4(c, e + PAIR_GAP));
}

// A pair of groups of 4 a lane a step (the format's dequant_pair: for Q4_0,
// a lane takes 4 bytes of a block's quants and both their nibbles), the
// lanes of a step on adjacent pairs, of each of the NR rows, x read once
// for them; UNROLL / NR steps' weights (at least one) loaded before they
// are used, so UNROLL pairs' loads are in flight whatever NR is. A row's
// sums take its pairs in the order one row alone takes them.
fn partials(lane: u32, lanes: u32, rb: RowBytes) -> Sums {
    var s: Sums;
#ifdef NORM
    ssq = array<f32, MAX_COLS>();
#endif
    let k8 = p.k / 8u;
    let un = max(1u, UNROLL / NR);
    var g = lane;
    for (; g + (un - 1u) * lanes < k8; g += un * lanes) {
        // Step u of row j at [u * NR + j].
        var w: array<PairW, MAX_NR>;
        for (var u = 0u; u < un; u++) {
            for (var j = 0u; j < NR; j++) {
                w[u * NR + j] = pair_w(rb[j], g + u * lanes);
            }
        }
        for (var u = 0u; u < un; u++) {
            let e = pair_at(g + u * lanes);
            for (var c = 0u; c < COLS; c++) {
                if (c < p.m) {
                    let a = pair_x(c, e);
                    for (var j = 0u; j < NR; j++) {
                        s[j][c] += pair_dot(w[u * NR + j], a);
                    }
                }
            }
        }
    }
    for (; g < k8; g += lanes) {
        var w: array<PairW, MAX_NR>;
        for (var j = 0u; j < NR; j++) {
            w[j] = pair_w(rb[j], g);
        }
        let e = pair_at(g);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                let a = pair_x(c, e);
                for (var j = 0u; j < NR; j++) {
                    s[j][c] += pair_dot(w[j], a);
                }
            }
        }
    }
    // k % 8 == 4 (plain floats only; P8 holds k % 4 == 0): the last 4.
    if (k8 * 8u < p.k && lane == 0u) {
        let e = k8 * 8u;
        var w: array<vec4<f32>, MAX_NR>;
        for (var j = 0u; j < NR; j++) {
            w[j] = dequant4(rb[j], e);
        }
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                let a = xn4(c, e);
                for (var j = 0u; j < NR; j++) {
                    s[j][c] += dot(w[j], a);
                }
            }
        }
    }
    return s;
}
#endif
#else
#ifdef Q8
// Q8 reads x as vec4s (q8_begin): a variant without P8 must not compile.
const Q8_WITHOUT_P8: u32 = q8_needs_p8;
#endif
#ifdef POST
// POST forms its sums in the P8 x4 only: a variant without P8 must not
// compile (ops/fused.rs's takes_post asks for POST only where P8 is set).
const POST_WITHOUT_P8: u32 = post_needs_p8;
#endif
// w . elements e..e+3 of column c, x read a float at a time; NORM as in
// the P8 xn4.
fn dot4(w: vec4<f32>, c: u32, e: u32) -> f32 {
    let xb = c * p.k + e;
    let a = vec4<f32>(x[xb], x[xb + 1u], x[xb + 2u], x[xb + 3u]);
#ifdef NORM
    ssq[c] += dot(a, a);
    return dot(w, a * vec4<f32>(nw[e], nw[e + 1u], nw[e + 2u], nw[e + 3u]));
#else
    return dot(w, a);
#endif
}

// w times element e of column c (NORM: of x * nw).
fn dot1(w: f32, c: u32, e: u32) -> f32 {
    let a = x[c * p.k + e];
#ifdef NORM
    ssq[c] += a * a;
    return w * (a * nw[e]);
#else
    return w * a;
#endif
}

// The rows take their turns (rows of plain floats whose length is not a
// multiple of 4: no decode-sized weight of a model).
fn partials(lane: u32, lanes: u32, rb: RowBytes) -> Sums {
    var s: Sums;
    for (var j = 0u; j < NR; j++) {
        s[j] = row_partials(lane, lanes, rb[j]);
    }
    return s;
}

fn row_partials(lane: u32, lanes: u32, rb: u32) -> array<f32, MAX_COLS> {
    var s: array<f32, MAX_COLS>;
#ifdef NORM
    ssq = array<f32, MAX_COLS>();
#endif
    let k4 = p.k / 4u;
    for (var q = lane; q < k4; q += lanes) {
        let e = q * 4u;
        let w = dequant4(rb, e);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                s[c] += dot4(w, c, e);
            }
        }
    }
    for (var e = k4 * 4u + lane; e < p.k; e += lanes) {
        let w = dequant1(rb, e);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                s[c] += dot1(w, c, e);
            }
        }
    }
    return s;
}
#endif
