// out[n, m] = W[k, n] . x[k, m] for any weight format TYPE: TYPE_FILE is its
// dequant file (quant/*.wgsl) from glint-quant's type table.
// W may be bound as a window of rows row0 .. row0 + n_local; the dispatch
// writes output rows row0 .. row0 + n_local.
// Bindings, in order:
//   0 W:      [k, n_local] TYPE, raw bytes as u32 words (window of the weight)
//   1 x:      [k, m] f32
//   2 out:    [n, m] f32
//   3 params: uniform Params
// Entry points: `matvec` (m <= 8: one workgroup per row for every column,
// matvec_cols.wgsl; partial sums reduced with reduce.wgsl: subgroups with
// USE_SUBGROUPS, else a tree)
// and `matmul` (64x64 output tiles, 4x4 per thread).
// SHADER_F16 (F16 weights only): W is bound as `array<f16>`.
// P8 (matvec only): x as vec4s, 8 weights a lane a step (matvec_cols.wgsl).
// ADD (matvec only): a binding `res` ([n, m] f32) after x, added in the
// epilogue: out = res + W . x (mul_mat_add), the bits of matvec then add.
// NORM (matvec only): a binding `nw` ([k] f32, typed as x) after x, and
// out = W . (RMSNorm(x) * nw), the norm folded in (matvec_cols.wgsl).
// Q8 (matvec only, with P8; the formats whose files define q8_weights):
// x quantized to ggml's Q8_0/Q8_1/Q8_K blocks by each workgroup and the dots taken in integers
// (matvec_cols.wgsl).
#include "index.wgsl"
#include "TYPE_FILE"
#include "reduce.wgsl"

struct Params {
    k: u32,
    n: u32,
    m: u32,
    row0: u32,
    n_local: u32,
    row_bytes: u32,
#ifdef NORM
    eps: f32,
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
#ifdef NORM
#ifdef P8
@group(0) @binding(2) var<storage, read> nw: array<vec4<f32>>;
#else
@group(0) @binding(2) var<storage, read> nw: array<f32>;
#endif
#ifdef ADD
@group(0) @binding(3) var<storage, read> res: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
#else
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
#endif
#else
#ifdef ADD
@group(0) @binding(2) var<storage, read> res: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
#else
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
#endif
#endif

const WG: u32 = 64u; // matvec
#include "matvec_cols.wgsl"

// One workgroup per row of the window (SGROW: a subgroup per NR rows),
// every column (m <= MAX_COLS).
@compute @workgroup_size(WG)
fn matvec(inv: Inv, ln: Lane) {
#ifdef Q8
    q8_begin(ln, inv.lid.x);
#endif
#ifdef SGROW
    let r0 = group_index(inv) * RPW;
    let first = r0 + ln.sg_id;
    let end = min(r0 + RPW, p.n_local);
    let step = ln.n_sg;
    // The subgroup's active lanes, counted: a driver may run the 64
    // lanes in a larger subgroup (sg_size 128, lanes 64..127 inactive).
    let lane = subgroupExclusiveAdd(1u);
    let lanes = subgroupAdd(1u);
#else
    let first = group_index(inv);
    let end = min(first + 1u, p.n_local);
    let step = 1u;
    let lane = inv.lid.x;
    let lanes = WG;
#endif
    // NR rows at once (1 without SGROW): r, r + step, ...; one past the
    // end reads the last row again and stores nothing.
    for (var r = first; r < end; r += step * NR) {
        var rb: RowBytes;
        for (var j = 0u; j < NR; j++) {
            rb[j] = min(r + j * step, end - 1u) * p.row_bytes;
        }
        let s = partials(lane, lanes, rb);
        for (var j = 0u; j < NR; j++) {
            let rj = r + j * step;
            if (rj < end) {
                for (var c = 0u; c < COLS; c++) {
                    if (c < p.m) {
                        var total = row_sum(ln, s[j][c]);
#ifdef NORM
                        total *= inv_rms(ln, c);
#endif
                        if (lane == 0u) {
                            let o = c * p.n + p.row0 + rj;
#ifdef ADD
                            out[o] = res[o] + total;
#else
                            out[o] = total;
#endif
                        }
                    }
                }
            }
        }
    }
}

// matmul reads x a scalar at a time: its pipelines never take P8.
#ifndef P8
const TILE: u32 = 64u;
const TK: u32 = 16u;
// [TK][TILE / 4]: k-step kk's 64 rows of W (columns of x) as 16 vec4s, so a
// thread's 4 rows (columns) at kk are one vec4 and the 16 threads reading a
// step read 16 consecutive vec4s: no bank conflict (a [row][k] layout put
// the 16 rows a step reads 64 words apart, all in one bank).
var<workgroup> ws: array<vec4<f32>, 256>;
var<workgroup> xs: array<vec4<f32>, 256>;

// Four consecutive k-elements e..e+3 of W row r (zeros past k).
fn w_group(r: u32, e: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (r >= p.n_local) {
        return v;
    }
    let rb = r * p.row_bytes;
    if (e + 3u < p.k) {
        return dequant4(rb, e);
    }
    for (var t = 0u; t < 4u; t++) {
        if (e + t < p.k) {
            v[t] = dequant1(rb, e + t);
        }
    }
    return v;
}

@compute @workgroup_size(256)
fn matmul(inv: Inv) {
    let tiles_n = (p.n_local + TILE - 1u) / TILE;
    let t = group_index(inv);
    if (t >= tiles_n * ((p.m + TILE - 1u) / TILE)) {
        return;
    }
    let r0 = (t % tiles_n) * TILE;
    let c0 = (t / tiles_n) * TILE;
    let tx = inv.lid.x % 16u; // rows r0 + tx*4 + a
    let ty = inv.lid.x / 16u; // columns c0 + ty*4 + b
    let lr = inv.lid.x / 4u;  // the row/column this thread loads
    let lk = (inv.lid.x % 4u) * 4u;
    // acc[a][b]: row r0 + tx*4 + a, column c0 + ty*4 + b.
    var acc: array<vec4<f32>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        let wv = w_group(r0 + lr, k0 + lk);
        var xv = vec4<f32>(0.0);
        let col = c0 + lr;
        if (col < p.m) {
            for (var u = 0u; u < 4u; u++) {
                if (k0 + lk + u < p.k) {
                    xv[u] = x[col * p.k + k0 + lk + u];
                }
            }
        }
        for (var u = 0u; u < 4u; u++) {
            ws[(lk + u) * 16u + lr / 4u][lr % 4u] = wv[u];
            xs[(lk + u) * 16u + lr / 4u][lr % 4u] = xv[u];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let wr = ws[kk * 16u + tx];
            let xr = xs[kk * 16u + ty];
            acc[0] += wr[0] * xr;
            acc[1] += wr[1] * xr;
            acc[2] += wr[2] * xr;
            acc[3] += wr[3] * xr;
        }
        workgroupBarrier();
    }
    for (var a = 0u; a < 4u; a++) {
        for (var b = 0u; b < 4u; b++) {
            let r = r0 + tx * 4u + a;
            let c = c0 + ty * 4u + b;
            if (r < p.n_local && c < p.m) {
                out[c * p.n + p.row0 + r] = acc[a][b];
            }
        }
    }
}
#endif
