// Matvecs over the parts of one packed weight buffer (Backend::weights: a
// layer's Q/K/V, or its gate and up, uploaded into one buffer, each part at
// an aligned byte offset), in one dispatch. Every dot is mul_mat.wgsl's
// matvec to the bit: the same partial sums per invocation, the same
// reduction, so a fused dispatch gives what the separate ones give.
// Bindings, in order:
//   0 W:      the packed buffer, bound whole, parts of type TYPE (raw bytes
//             as u32 words; SHADER_F16: array<f16>)
//   1 x:      [k, m] f32
//   (NORM) nw: [k] f32, typed as x: the matvecs of RMSNorm(x) * nw
//             (matvec_cols.wgsl)
//   (POST, with NORM and P8) y: [k, m] f32, pw: [k] f32, typed as x: the
//             input is x + RMSNorm(y) * pw (matvec_cols.wgsl), which
//             workgroup 0 stores into xo, bound after the outputs below
//   then (default) out0 [n0, m], out1 [n1, m], with THREE out2 [n2, m]:
//             entry `multi`, out_i = W_i . x;
//   or (GLU) out [n0, m]: entry `glu`, out = act(W_0 . x) * (W_1 . x) with
//             act silu (OP 2) or gelu (OP 3), as binary.wgsl's glu (n1 = n0)
//   last: params, uniform Params
// Q8 (with P8; the formats whose files define q8_weights): each workgroup
// quantizes its input (normed, the post-norm added) as ggml's cpu does and
// takes the dots in integers (matvec_cols.wgsl).
// One workgroup (SGROW: subgroup) per row (of all the parts), every column
// (m <= MAX_COLS), as the matvec: the sums are matvec_cols.wgsl's.
#include "index.wgsl"
#include "common.wgsl"
#include "TYPE_FILE"
#include "reduce.wgsl"

// 2 swiglu, 3 geglu (binary.wgsl's codes)
override OP: u32 = 2u;

struct Params {
    k: u32,
    m: u32,
    row_bytes: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    wb0: u32, // byte offset of part 0 in W
    wb1: u32,
    wb2: u32,
#ifdef NORM
    eps: f32,
#endif
#ifdef POST
    post_eps: f32,
#endif
}

#ifdef SHADER_F16
@group(0) @binding(0) var<storage, read> W: array<f16>;
#else
@group(0) @binding(0) var<storage, read> W: array<u32>;
#endif
#ifdef P8
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
#else
@group(0) @binding(1) var<storage, read> x: array<f32>;
#endif
#ifdef POST
@group(0) @binding(2) var<storage, read> nw: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> y: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> pw: array<vec4<f32>>;
#ifdef GLU
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> xo: array<vec4<f32>>;
@group(0) @binding(7) var<uniform> p: Params;
#else
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;
#ifdef THREE
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;
@group(0) @binding(8) var<storage, read_write> xo: array<vec4<f32>>;
@group(0) @binding(9) var<uniform> p: Params;
#else
@group(0) @binding(7) var<storage, read_write> xo: array<vec4<f32>>;
@group(0) @binding(8) var<uniform> p: Params;
#endif
#endif
#else
#ifdef NORM
#ifdef P8
@group(0) @binding(2) var<storage, read> nw: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> nw: array<f32>;
#endif
#ifdef GLU
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
#else
@group(0) @binding(3) var<storage, read_write> out0: array<f32>;
@group(0) @binding(4) var<storage, read_write> out1: array<f32>;
#ifdef THREE
@group(0) @binding(5) var<storage, read_write> out2: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
#else
@group(0) @binding(5) var<uniform> p: Params;
#endif
#endif
#else
#ifdef GLU
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
#else
@group(0) @binding(2) var<storage, read_write> out0: array<f32>;
@group(0) @binding(3) var<storage, read_write> out1: array<f32>;
#ifdef THREE
@group(0) @binding(4) var<storage, read_write> out2: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#else
@group(0) @binding(4) var<uniform> p: Params;
#endif
#endif
#endif
#endif

const WG: u32 = 64u;

#include "matvec_cols.wgsl"

#ifdef GLU
@compute @workgroup_size(WG)
fn glu(inv: Inv, ln: Lane) {
#ifdef POST
    post_begin(ln, inv.lid.x, group_index(inv) == 0u);
#endif
#ifdef Q8
    q8_begin(ln, inv.lid.x);
#endif
#ifdef SGROW
    let r0 = group_index(inv) * RPW;
    let first = r0 + ln.sg_id;
    let end = min(r0 + RPW, p.n0);
    let step = ln.n_sg;
    // The subgroup's active lanes, counted: a driver may run the 64
    // lanes in a larger subgroup (sg_size 128, lanes 64..127 inactive).
    let lane = subgroupExclusiveAdd(1u);
    let lanes = subgroupAdd(1u);
#else
    let first = group_index(inv);
    let end = min(first + 1u, p.n0);
    let step = 1u;
    let lane = inv.lid.x;
    let lanes = WG;
#endif
    for (var r = first; r < end; r += step) {
        let sg = partials(lane, lanes, p.wb0 + r * p.row_bytes);
        let su = partials(lane, lanes, p.wb1 + r * p.row_bytes);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                var gate = row_sum(ln, sg[c]);
                var up = row_sum(ln, su[c]);
#ifdef NORM
                // ssq: from su's partials, the squares sg's summed too.
                let ir = inv_rms(ln, c);
                gate *= ir;
                up *= ir;
#endif
                if (lane == 0u) {
                    var a: f32;
                    if (OP == 2u) {
                        a = silu(gate);
                    } else {
                        a = gelu(gate);
                    }
                    out[c * p.n0 + r] = a * up;
                }
            }
        }
    }
}
#else
@compute @workgroup_size(WG)
fn multi(inv: Inv, ln: Lane) {
    // Rows of every part: part 0's rows, then part 1's, then part 2's.
#ifdef POST
    post_begin(ln, inv.lid.x, group_index(inv) == 0u);
#endif
#ifdef Q8
    q8_begin(ln, inv.lid.x);
#endif
#ifdef SGROW
    let r0 = group_index(inv) * RPW;
    let first = r0 + ln.sg_id;
    let end = min(r0 + RPW, p.n0 + p.n1 + p.n2);
    let step = ln.n_sg;
    // The subgroup's active lanes, counted: a driver may run the 64
    // lanes in a larger subgroup (sg_size 128, lanes 64..127 inactive).
    let lane = subgroupExclusiveAdd(1u);
    let lanes = subgroupAdd(1u);
#else
    let first = group_index(inv);
    let end = min(first + 1u, p.n0 + p.n1 + p.n2);
    let step = 1u;
    let lane = inv.lid.x;
    let lanes = WG;
#endif
    for (var row = first; row < end; row += step) {
        var part = 0u;
        var r = row;
        var wb = p.wb0;
        if (row >= p.n0 + p.n1) {
            part = 2u;
            r = row - p.n0 - p.n1;
            wb = p.wb2;
        } else if (row >= p.n0) {
            part = 1u;
            r = row - p.n0;
            wb = p.wb1;
        }
        let s = partials(lane, lanes, wb + r * p.row_bytes);
        for (var c = 0u; c < COLS; c++) {
            if (c < p.m) {
                var total = row_sum(ln, s[c]);
#ifdef NORM
                total *= inv_rms(ln, c);
#endif
                if (lane == 0u) {
                    if (part == 0u) {
                        out0[c * p.n0 + r] = total;
                    } else if (part == 1u) {
                        out1[c * p.n1 + r] = total;
                    } else {
#ifdef THREE
                        out2[c * p.n2 + r] = total;
#endif
                    }
                }
            }
        }
    }
}
#endif
