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
// and `matmul` (64x64 output tiles, 4x4 per thread; TL: 128x128, 8x8).
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
// Output tiles of TILE rows by TILE columns, 256 threads, each a register
// tile of Q x Q blocks of 4 x 4 (rows r0 + qr * 64 + tx * 4 + a, columns
// c0 + qc * 64 + ty * 4 + b). Flag TL (ops/mul_mat.rs's matmul_tile picks
// it where both sides pass 64): 128 x 128 tiles, 8 x 8 a thread, twice the
// multiply-adds for each value read from workgroup memory (4 a value where
// 64 x 64 does 2). Each output sums k in order either way: the same bits.
#ifdef TL
const TILE: u32 = 128u;
#else
const TILE: u32 = 64u;
#endif
const Q: u32 = TILE / 64u;
const TK: u32 = 16u;
// [TK][TILE / 4]: k-step kk's TILE rows of W (columns of x) as vec4s, so a
// thread's 4 rows (columns) at kk are one vec4 and the 16 threads reading a
// step read 16 consecutive vec4s: no bank conflict (a [row][k] layout put
// the 16 rows a step reads 64 words apart, all in one bank). TL: 16 KiB
// together, what every adapter gives.
var<workgroup> ws: array<vec4<f32>, TK * TILE / 4u>;
var<workgroup> xs: array<vec4<f32>, TK * TILE / 4u>;

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

// Four consecutive k-elements e..e+3 of x column c (zeros past k or m).
fn x_group(c: u32, e: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (c < p.m) {
        for (var u = 0u; u < 4u; u++) {
            if (e + u < p.k) {
                v[u] = x[c * p.k + e + u];
            }
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
    let tx = inv.lid.x % 16u;
    let ty = inv.lid.x / 16u;
    // This thread loads rows (columns) lr + 64h of the tile, k-elements
    // lk..lk+3 of the step.
    let lr = inv.lid.x / 4u;
    let lk = (inv.lid.x % 4u) * 4u;
    // acc[(qr * 4 + a) * Q + qc][b]: row r0 + qr * 64 + tx * 4 + a,
    // column c0 + qc * 64 + ty * 4 + b.
    var acc: array<vec4<f32>, 4u * Q * Q>;
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        for (var h = 0u; h < Q; h++) {
            let l = lr + 64u * h;
            let wv = w_group(r0 + l, k0 + lk);
            let xv = x_group(c0 + l, k0 + lk);
            for (var u = 0u; u < 4u; u++) {
                ws[(lk + u) * (TILE / 4u) + l / 4u][l % 4u] = wv[u];
                xs[(lk + u) * (TILE / 4u) + l / 4u][l % 4u] = xv[u];
            }
        }
        workgroupBarrier();
        // The updates written out (constant indices: acc stays in
        // registers whatever the driver unrolls), in the order of
        // acc's index.
        for (var kk = 0u; kk < TK; kk++) {
            let wr0 = ws[kk * (TILE / 4u) + tx];
            let xr0 = xs[kk * (TILE / 4u) + ty];
#ifdef TL
            let wr1 = ws[kk * (TILE / 4u) + 16u + tx];
            let xr1 = xs[kk * (TILE / 4u) + 16u + ty];
            acc[0] += wr0.x * xr0;
            acc[1] += wr0.x * xr1;
            acc[2] += wr0.y * xr0;
            acc[3] += wr0.y * xr1;
            acc[4] += wr0.z * xr0;
            acc[5] += wr0.z * xr1;
            acc[6] += wr0.w * xr0;
            acc[7] += wr0.w * xr1;
            acc[8] += wr1.x * xr0;
            acc[9] += wr1.x * xr1;
            acc[10] += wr1.y * xr0;
            acc[11] += wr1.y * xr1;
            acc[12] += wr1.z * xr0;
            acc[13] += wr1.z * xr1;
            acc[14] += wr1.w * xr0;
            acc[15] += wr1.w * xr1;
#else
            acc[0] += wr0.x * xr0;
            acc[1] += wr0.y * xr0;
            acc[2] += wr0.z * xr0;
            acc[3] += wr0.w * xr0;
#endif
        }
        workgroupBarrier();
    }
    for (var qr = 0u; qr < Q; qr++) {
        for (var a = 0u; a < 4u; a++) {
            for (var qc = 0u; qc < Q; qc++) {
                for (var b = 0u; b < 4u; b++) {
                    let r = r0 + qr * 64u + tx * 4u + a;
                    let c = c0 + qc * 64u + ty * 4u + b;
                    if (r < p.n_local && c < p.m) {
                        out[c * p.n + p.row0 + r] = acc[(qr * 4u + a) * Q + qc][b];
                    }
                }
            }
        }
    }
}
#endif
