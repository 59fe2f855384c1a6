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
// NORM (QK-norm, Gemma 3): q and k RMS-normed per head first, what
// rms_norm(q, qn) and rms_norm(k, kn) do, to the bit: one workgroup per q
// head, then one per k head, each normalizing its head into workgroup memory
// (the sum of squares as rms_norm.wgsl sums it: the same workgroup size and
// reduction; with USE_SUBGROUPS the same bits where the driver gives both
// pipelines the same subgroup size, as lavapipe does, and within rounding
// where it picks sizes per pipeline) and rotating from there; then the V
// words, 256 a workgroup.
// Bindings, in order:
//   0 q:      [head_dim, n_head, m] f32
//   1 k:      [head_dim, n_head_kv, m] f32
//   2 v:      [head_dim * n_head_kv, m] f32
//   3 pos:    [m] i32
//   4 idx:    [m] i32, the cache row of each token (outside: skipped)
//   (NORM) qn: [head_dim] f32, kn: [head_dim] f32 (bindings 5, 6; the
//             outputs and params follow them)
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
    eps: f32, // NORM
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> pos: array<i32>;
@group(0) @binding(4) var<storage, read> idx: array<i32>;
#ifdef NORM
@group(0) @binding(5) var<storage, read> qn: array<f32>;
@group(0) @binding(6) var<storage, read> kn: array<f32>;
@group(0) @binding(7) var<storage, read_write> qr: array<f32>;
@group(0) @binding(8) var<storage, read_write> kc: array<u32>;
@group(0) @binding(9) var<storage, read_write> vc: array<u32>;
@group(0) @binding(10) var<uniform> p: Params;

#include "reduce.wgsl"
const WG: u32 = 256u;
const MAX_HEAD_DIM: u32 = 512u;
// The workgroup's head, normed.
var<workgroup> xs: array<f32, MAX_HEAD_DIM>;

// Element i of the K head that starts at `base` (NORM: of xs, normed).
fn k_at(base: u32, i: u32) -> f32 {
    return xs[i];
}
#else
@group(0) @binding(5) var<storage, read_write> qr: array<f32>;
@group(0) @binding(6) var<storage, read_write> kc: array<u32>;
@group(0) @binding(7) var<storage, read_write> vc: array<u32>;
@group(0) @binding(8) var<uniform> p: Params;

fn k_at(base: u32, i: u32) -> f32 {
    return k[base + i];
}
#endif

// (cos, sin) * mscale of pair j at position `at`, as rope.wgsl.
fn rot(at: f32, j: u32) -> vec2<f32> {
    let theta = rope_theta(at, j);
    let ms = rope_mscale();
    return vec2<f32>(cos(theta) * ms, sin(theta) * ms);
}

// Element d of K's head starting at `base`, rotated at `at`.
fn k_elem(base: u32, d: u32, at: f32) -> f32 {
    if (d >= p.n_rot) {
        return k_at(base, d);
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
    let x0 = k_at(base, ij.x);
    let x1 = k_at(base, ij.y);
    if (second) {
        return x0 * cs.y + x1 * cs.x;
    }
    return x0 * cs.x - x1 * cs.y;
}

// Word w of token i's K (is_k) or V cache row, built and stored (its
// row outside the cache: skipped). K's elements come through k_elem from
// the head that starts at `kbase` (NORM: xs).
fn store_word(i: u32, w: u32, is_k: bool, kbase: u32) {
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
            let d = e % p.head_dim;
            pair = vec2<f32>(k_elem(kbase, d, at), k_elem(kbase, d + 1u, at));
        } else {
            pair = vec2<f32>(v[i * n + e], v[i * n + e + 1u]);
        }
        word = pack2x16float(pair);
    } else {
        if (is_k) {
            word = bitcast<u32>(k_elem(kbase, w % p.head_dim, at));
        } else {
            word = bitcast<u32>(v[i * n + w]);
        }
    }
    if (is_k) {
        kc[u32(r) * p.per_row + w] = word;
    } else {
        vc[u32(r) * p.per_row + w] = word;
    }
}

// Rotated pair j of the q head at `base` (NORM: xs) into qr, as rope.wgsl.
fn store_q_pair(token: u32, base: u32, j: u32) {
    if (j < p.n_rot / 2u) {
        let cs = rot(f32(pos[token]), j);
        let ij = rope_pair(j);
#ifdef NORM
        let x0 = xs[ij.x];
        let x1 = xs[ij.y];
#else
        let x0 = q[base + ij.x];
        let x1 = q[base + ij.y];
#endif
        qr[base + ij.x] = x0 * cs.x - x1 * cs.y;
        qr[base + ij.y] = x0 * cs.y + x1 * cs.x;
    } else {
        let d = p.n_rot + 2u * (j - p.n_rot / 2u);
#ifdef NORM
        qr[base + d] = xs[d];
        qr[base + d + 1u] = xs[d + 1u];
#else
        qr[base + d] = q[base + d];
        qr[base + d + 1u] = q[base + d + 1u];
#endif
    }
}

#ifdef NORM
@compute @workgroup_size(WG)
fn main(inv: Inv, ln: Lane) {
    let gi = group_index(inv);
    let nqh = p.n_head * p.m;
    let nh = nqh + p.n_head_kv * p.m;
    let hd = p.head_dim;
    if (gi < nh) {
        // A q head (token * n_head + h) or a k head (token * n_head_kv + h).
        let is_q = gi < nqh;
        let head = select(gi - nqh, gi, is_q);
        let base = head * hd;
        // rms_norm.wgsl's row, n = head_dim.
        var s = 0.0;
        for (var i = inv.lid.x; i < hd; i += WG) {
            var x: f32;
            if (is_q) {
                x = q[base + i];
            } else {
                x = k[base + i];
            }
            s += x * x;
        }
        let r = 1.0 / sqrt(wg_sum(ln, s) / f32(hd) + p.eps);
        for (var i = inv.lid.x; i < hd; i += WG) {
            if (is_q) {
                xs[i] = q[base + i] * r * qn[i];
            } else {
                xs[i] = k[base + i] * r * kn[i];
            }
        }
        workgroupBarrier();
        if (is_q) {
            for (var j = inv.lid.x; j < hd / 2u; j += WG) {
                store_q_pair(head / p.n_head, base, j);
            }
        } else {
            // The head's words of its token's K row.
            let token = head / p.n_head_kv;
            let words = select(hd, hd / 2u, KV_F16);
            let w0 = (head % p.n_head_kv) * words;
            for (var w = inv.lid.x; w < words; w += WG) {
                store_word(token, w0 + w, true, 0u);
            }
        }
        return;
    }
    let g = (gi - nh) * WG + inv.lid.x;
    if (g < p.per_row * p.m) {
        store_word(g / p.per_row, g % p.per_row, false, 0u);
    }
}
#else
@compute @workgroup_size(256)
fn main(inv: Inv) {
    let half_dim = p.head_dim / 2u;
    let nq = half_dim * p.n_head * p.m;
    let nk = p.per_row * p.m;
    var g = global_index(inv, 256u);
    if (g < nq) {
        let head = g / half_dim; // token * n_head + h
        store_q_pair(head / p.n_head, head * p.head_dim, g % half_dim);
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
    let i = g / p.per_row; // token
    let w = g % p.per_row;
    // The K head of word w (KV_F16: of its elements 2w, 2w + 1).
    let e = select(w, 2u * w, KV_F16);
    let kbase = i * p.head_dim * p.n_head_kv + (e / p.head_dim) * p.head_dim;
    store_word(i, w, is_k, kbase);
}
#endif
