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
// One workgroup per row (of all the parts; SGROW: a subgroup per NR rows,
// glu: NR / 2 rows, each a gate and an up row), every column (m <=
// MAX_COLS), as the matvec: the sums are matvec_cols.wgsl's.
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
    // NR / 2 rows at once (1 without SGROW), each its gate row (at
    // 2j) and its up row (2j + 1): r, r + step, ...; one past the end
    // reads the last row again and stores nothing.
    let nr = max(1u, NR / 2u);
    for (var r = first; r < end; r += step * nr) {
        var rb: RowBytes;
        for (var j = 0u; j < nr; j++) {
            let rj = min(r + j * step, end - 1u) * p.row_bytes;
            rb[2u * j] = p.wb0 + rj;
            rb[2u * j + 1u] = p.wb1 + rj;
        }
        let s = partials(lane, lanes, rb);
        for (var j = 0u; j < nr; j++) {
            let rj = r + j * step;
            if (rj < end) {
                for (var c = 0u; c < COLS; c++) {
                    if (c < p.m) {
                        var gate = row_sum(ln, s[2u * j][c]);
                        var up = row_sum(ln, s[2u * j + 1u][c]);
#ifdef NORM
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
                            out[c * p.n0 + rj] = a * up;
                        }
                    }
                }
            }
        }
    }
}
#else
// Row `row` of the parts (part 0's rows, then part 1's, then part 2's):
// its part, its byte offset in W, its row in the part.
fn part_row(row: u32) -> vec3<u32> {
    if (row >= p.n0 + p.n1) {
        let r = row - p.n0 - p.n1;
        return vec3<u32>(2u, p.wb2 + r * p.row_bytes, r);
    }
    if (row >= p.n0) {
        let r = row - p.n0;
        return vec3<u32>(1u, p.wb1 + r * p.row_bytes, r);
    }
    return vec3<u32>(0u, p.wb0 + row * p.row_bytes, row);
}

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
    // NR rows at once (1 without SGROW): row, row + step, ...; one past
    // the end reads the last row again and stores nothing.
    for (var row = first; row < end; row += step * NR) {
        var rb: RowBytes;
        for (var j = 0u; j < NR; j++) {
            rb[j] = part_row(min(row + j * step, end - 1u)).y;
        }
        let s = partials(lane, lanes, rb);
        for (var j = 0u; j < NR; j++) {
            let rj = row + j * step;
            if (rj < end) {
                let pr = part_row(rj);
                let part = pr.x;
                let r = pr.z;
                for (var c = 0u; c < COLS; c++) {
                    if (c < p.m) {
                        var total = row_sum(ln, s[j][c]);
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
    }
}
#endif
