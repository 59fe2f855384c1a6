// RoPE at explicit per-token positions. One invocation per (token, head, j),
// j < head_dim / 2: j < n_rot / 2 rotates pair j, the others copy two of the
// dims n_rot .. head_dim.
// Bindings, in order:
//   0 x:      [head_dim, n_head, m] f32
//   1 pos:    [m] i32
//   2 out:    [head_dim, n_head, m] f32
//   3 params: uniform Params
#include "index.wgsl"
#include "rope_common.wgsl"

struct Params {
    head_dim: u32,
    n_head: u32,
    m: u32,
    n_rot: u32,
    mode: u32, // 0 NORM, 1 NEOX
    theta_scale: f32,
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    corr_lo: f32,
    corr_hi: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> pos: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let half_dim = p.head_dim / 2u;
    let g = global_index(inv, 256u);
    if (g >= half_dim * p.n_head * p.m) {
        return;
    }
    let j = g % half_dim;
    let head = g / half_dim; // token * n_head + h
    let token = head / p.n_head;
    let base = head * p.head_dim;
    if (j < p.n_rot / 2u) {
        let theta = rope_theta(f32(pos[token]), j);
        let ms = rope_mscale();
        let cs = vec2<f32>(cos(theta) * ms, sin(theta) * ms);
        let ij = rope_pair(j);
        let x0 = x[base + ij.x];
        let x1 = x[base + ij.y];
        out[base + ij.x] = x0 * cs.x - x1 * cs.y;
        out[base + ij.y] = x0 * cs.y + x1 * cs.x;
    } else {
        let d = p.n_rot + 2u * (j - p.n_rot / 2u);
        out[base + d] = x[base + d];
        out[base + d + 1u] = x[base + d + 1u];
    }
}
