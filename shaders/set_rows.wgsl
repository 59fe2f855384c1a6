// Write rows into a cache: dst[:, idx[i]] = src[:, i], converted to dst's type.
// One invocation per dst word: an f32, or two f16 packed in a u32 (KV_F16,
// n even so no word spans two rows). Rows of idx outside dst are skipped.
// Bindings, in order:
//   0 src:    [n, m] f32
//   1 idx:    [m] i32
//   2 dst:    [n, n_rows] f32 or f16 (as u32 words)
//   3 params: uniform Params
#include "index.wgsl"
override KV_F16: bool = false;

struct Params {
    n: u32,
    m: u32,
    n_rows: u32,
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(inv: Inv) {
    var per_row = p.n;
    if (KV_F16) {
        per_row = p.n / 2u;
    }
    let g = global_index(inv, 256u);
    if (g >= per_row * p.m) {
        return;
    }
    let i = g / per_row;
    let w = g % per_row;
    let r = idx[i];
    if (r < 0 || u32(r) >= p.n_rows) {
        return;
    }
    let row = u32(r);
    if (KV_F16) {
        let s = i * p.n + 2u * w;
        dst[row * per_row + w] = pack2x16float(vec2<f32>(src[s], src[s + 1u]));
    } else {
        dst[row * per_row + w] = bitcast<u32>(src[i * p.n + w]);
    }
}
