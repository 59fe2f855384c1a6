// A layer's queries and keys rotated and its keys and values stored in the
// cache, in one dispatch (Backend::rope_store): what rope(q), rope(k),
// set_rows(k) and set_rows(v) do, to the bit. Each rotated element is the
// expression rope.wgsl computes for it (x0 * cos - x1 * sin, or x0 * sin +
// x1 * cos, with the same theta and mscale), so a cache word can be built
// from its elements whatever pairs them (NORM: one pair a word; NEOX:
// elements of two pairs).
// Invocations, in three ranges (g below):
//   [0, nq):        q pair (token, head, j), j < head_dim / 2, as rope.wgsl
//   [nq, nq + nk):  a word of K's cache row of a token (KV_F16: two f16)
//   [nq + nk, ...): a word of V's cache row
// Bindings, in order:
//   0 q:      [head_dim, n_head, m] f32
//   1 k:      [head_dim, n_head_kv, m] f32
//   2 v:      [head_dim * n_head_kv, m] f32
//   3 pos:    [m] i32
//   4 idx:    [m] i32, the cache row of each token (outside: skipped)
//   5 qr:     [head_dim, n_head, m] f32
//   6 kc:     [head_dim * n_head_kv, n_rows] f32 or f16 (u32 words)
//   7 vc:     the same for V
//   8 params: uniform Params
#include "index.wgsl"
#include "rope_common.wgsl"
override KV_F16: bool = false;

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
    n_head_kv: u32,
    n_rows: u32,
    per_row: u32, // cache words per row
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> pos: array<i32>;
@group(0) @binding(4) var<storage, read> idx: array<i32>;
@group(0) @binding(5) var<storage, read_write> qr: array<f32>;
@group(0) @binding(6) var<storage, read_write> kc: array<u32>;
@group(0) @binding(7) var<storage, read_write> vc: array<u32>;
@group(0) @binding(8) var<uniform> p: Params;

// (cos, sin) * mscale of pair j at position `at`, as rope.wgsl.
fn rot(at: f32, j: u32) -> vec2<f32> {
    let theta = rope_theta(at, j);
    let ms = rope_mscale();
    return vec2<f32>(cos(theta) * ms, sin(theta) * ms);
}

// Element d of K's head starting at `base`, rotated at `at`.
fn k_elem(base: u32, d: u32, at: f32) -> f32 {
    if (d >= p.n_rot) {
        return k[base + d];
    }
    var j: u32;
    var second: bool;
    if (p.mode == 0u) {
        j = d / 2u;
        second = (d % 2u) == 1u;
    } else {
        let h = p.n_rot / 2u;
        j = select(d, d - h, d >= h);
        second = d >= h;
    }
    let ij = rope_pair(j);
    let cs = rot(at, j);
    let x0 = k[base + ij.x];
    let x1 = k[base + ij.y];
    if (second) {
        return x0 * cs.y + x1 * cs.x;
    }
    return x0 * cs.x - x1 * cs.y;
}

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let half_dim = p.head_dim / 2u;
    let nq = half_dim * p.n_head * p.m;
    let per_row = p.per_row;
    let nk = per_row * p.m;
    var g = global_index(inv, 256u);
    if (g < nq) {
        let j = g % half_dim;
        let head = g / half_dim; // token * n_head + h
        let token = head / p.n_head;
        let base = head * p.head_dim;
        if (j < p.n_rot / 2u) {
            let cs = rot(f32(pos[token]), j);
            let ij = rope_pair(j);
            let x0 = q[base + ij.x];
            let x1 = q[base + ij.y];
            qr[base + ij.x] = x0 * cs.x - x1 * cs.y;
            qr[base + ij.y] = x0 * cs.y + x1 * cs.x;
        } else {
            let d = p.n_rot + 2u * (j - p.n_rot / 2u);
            qr[base + d] = q[base + d];
            qr[base + d + 1u] = q[base + d + 1u];
        }
        return;
    }
    g -= nq;
    let is_k = g < nk;
    if (!is_k) {
        g -= nk;
        if (g >= nk) {
            return;
        }
    }
    let i = g / per_row; // token
    let w = g % per_row;
    let r = idx[i];
    if (r < 0 || u32(r) >= p.n_rows) {
        return;
    }
    let n = p.head_dim * p.n_head_kv; // elements of a row
    let at = f32(pos[i]);
    var word: u32;
    if (KV_F16) {
        let e = 2u * w; // elements e, e + 1 of the row: one head (head_dim even)
        var pair: vec2<f32>;
        if (is_k) {
            let base = i * n + (e / p.head_dim) * p.head_dim;
            let d = e % p.head_dim;
            pair = vec2<f32>(k_elem(base, d, at), k_elem(base, d + 1u, at));
        } else {
            pair = vec2<f32>(v[i * n + e], v[i * n + e + 1u]);
        }
        word = pack2x16float(pair);
    } else {
        if (is_k) {
            let base = i * n + (w / p.head_dim) * p.head_dim;
            word = bitcast<u32>(k_elem(base, w % p.head_dim, at));
        } else {
            word = bitcast<u32>(v[i * n + w]);
        }
    }
    if (is_k) {
        kc[u32(r) * per_row + w] = word;
    } else {
        vc[u32(r) * per_row + w] = word;
    }
}
