// The attention mask built from a copy of the cache's cells, so that it is
// not uploaded: one invocation per (cell j, query t), out[t * n_kv + j].
// glint_backend::KqMask::value is its plain twin, to the bit.
// Bindings, in order:
//   0 cells:  [w, n_rows] i32: position (-1 empty), then the sequence
//             set, bit s % 32 of word 1 + s / 32 (w - 1 words: sequences
//             0 .. 32 (w - 1))
//   1 pos:    [m] i32, each query's position
//   2 seqs:   [m] i32, each query's sequence
//   3 out:    [n_kv, m] f32: 0 (or ALiBi's -|p0 - p1|) or -inf
//   4 params: uniform Params
#include "index.wgsl"

struct Params {
    n_kv: u32,
    m: u32,
    first_row: u32, // the copy's row that is the mask's cell 0
    causal: u32,    // 1: hide keys after the query
    window: u32,    // 0 none, 1 standard, 2 chunked, 3 symmetric
    n_swa: u32,     // the window (> 0 with one)
    alibi: u32,     // 1: a visible key's value is -|p0 - p1|
    w: u32,         // words a cell, 2 to 9
}

@group(0) @binding(0) var<storage, read> cells: array<i32>;
@group(0) @binding(1) var<storage, read> pos: array<i32>;
@group(0) @binding(2) var<storage, read> seqs: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

// Whether the window hides a key at p0 from a query at p1 (both >= 0, so
// no difference overflows).
fn outside(p0: i32, p1: i32) -> bool {
    let n = i32(p.n_swa);
    switch p.window {
        case 1u: { return p1 - p0 >= n; }
        case 2u: { return p0 < (p1 / n) * n; }
        case 3u: {
            let d = p1 - p0;
            return d < -(n / 2) || d > n / 2;
        }
        default: { return false; }
    }
}

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let i = global_index(inv, 256u);
    if (i >= p.n_kv * p.m) {
        return;
    }
    let t = i / p.n_kv;
    let c = (p.first_row + i % p.n_kv) * p.w;
    let p0 = cells[c];
    let p1 = pos[t];
    let s = seqs[t];
    var held = false;
    if (s >= 0 && u32(s) < 32u * (p.w - 1u)) {
        let w = bitcast<u32>(cells[c + 1u + u32(s) / 32u]);
        held = ((w >> (u32(s) % 32u)) & 1u) == 1u;
    }
    var v = bitcast<f32>(0xff800000u); // -inf
    if (p0 >= 0 && p1 >= 0 && held && !(p.causal == 1u && p0 > p1) && !outside(p0, p1)) {
        v = 0.0;
        if (p.alibi == 1u) {
            v = -f32(abs(p0 - p1));
        }
    }
    out[i] = v;
}
