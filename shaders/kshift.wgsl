// K-shift: rotate cached K rows in place by a per-row position delta, as a
// pure rotation (mscale 1: the YaRN magnitude was applied when K was made).
// One invocation per (row, head); rows with shift 0 are untouched.
// Bindings, in order:
//   0 shift:  [n_rows] i32
//   1 k:      [head_dim * n_head, n_rows] f32, or f16 packed two to a u32 (KV_F16)
//   2 params: uniform Params
#include "index.wgsl"
#include "rope_common.wgsl"

override KV_F16: bool = false;

struct Params {
    head_dim: u32,
    n_head: u32,
    m: u32, // rows
    n_rot: u32,
    mode: u32,
    theta_scale: f32,
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32, // unused: a shift never applies rope_mscale()
    corr_lo: f32,
    corr_hi: f32,
}

@group(0) @binding(0) var<storage, read> shift: array<i32>;
@group(0) @binding(1) var<storage, read_write> k: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

fn load_k(i: u32) -> f32 {
    if (KV_F16) {
        return unpack2x16float(k[i >> 1u])[i & 1u];
    }
    return bitcast<f32>(k[i]);
}

fn store_k(i: u32, v: f32) {
    if (KV_F16) {
        var h = unpack2x16float(k[i >> 1u]);
        h[i & 1u] = v;
        k[i >> 1u] = pack2x16float(h);
    } else {
        k[i] = bitcast<u32>(v);
    }
}

@compute @workgroup_size(64)
fn main(inv: Inv) {
    let g = global_index(inv, 64u); // row * n_head + h
    if (g >= p.n_head * p.m) {
        return;
    }
    let row = g / p.n_head;
    let s = shift[row];
    if (s == 0) {
        return;
    }
    let base = g * p.head_dim;
    for (var i = 0u; i < p.n_rot / 2u; i++) {
        let theta = rope_theta(f32(s), i);
        let c = cos(theta);
        let sn = sin(theta);
        let ij = rope_pair(i);
        let x0 = load_k(base + ij.x);
        let x1 = load_k(base + ij.y);
        store_k(base + ij.x, x0 * c - x1 * sn);
        store_k(base + ij.y, x0 * sn + x1 * c);
    }
}
