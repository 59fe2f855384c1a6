// K-shift: rotate cached K rows in place by a per-row position delta, as a
// pure rotation (mscale 1: the YaRN magnitude was applied when K was made).
// One invocation per (row, head); rows with shift 0 are untouched.
// `main_q`, for a quantized cache (KV_Q, kv_quant.wgsl): one invocation per
// row, each head dequantized, rotated and quantized again (llama.cpp's
// K-shift of a quantized cache); the row's words are its own.
// Bindings, in order:
//   0 shift:  [n_rows] i32
//   1 k:      [head_dim * n_head, n_rows] f32, or f16 packed two to a u32
//             (KV_F16), or Q8_0/Q4_0 bytes (KV_Q)
//   2 params: uniform Params
#include "index.wgsl"
#include "rope_common.wgsl"
#include "kv_quant.wgsl"

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

// The largest head main_q rotates (the launcher checks it).
const MAX_Q_HEAD: u32 = 256u;

fn k_byte(b: u32) -> u32 {
    return (k[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

fn set_k_byte(b: u32, v: u32) {
    let sh = (b & 3u) * 8u;
    k[b >> 2u] = (k[b >> 2u] & ~(0xffu << sh)) | (v << sh);
}

@compute @workgroup_size(64)
fn main_q(inv: Inv) {
    let row = global_index(inv, 64u);
    if (row >= p.m) {
        return;
    }
    let s = shift[row];
    if (s == 0) {
        return;
    }
    let ts = kvq_type_size();
    let nb_head = p.head_dim / KVQ_BLOCK;
    let row_byte = row * p.n_head * nb_head * ts;
    var x: array<f32, MAX_Q_HEAD>;
    for (var h = 0u; h < p.n_head; h++) {
        let hb = row_byte + h * nb_head * ts;
        for (var e = 0u; e < p.head_dim; e++) {
            let b0 = hb + (e / KVQ_BLOCK) * ts;
            let j = e % KVQ_BLOCK;
            let d = unpack2x16float(k_byte(b0) | (k_byte(b0 + 1u) << 8u)).x;
            x[e] = kvq_value(d, k_byte(b0 + kvq_level_byte(j)), j);
        }
        for (var i = 0u; i < p.n_rot / 2u; i++) {
            let theta = rope_theta(f32(s), i);
            let c = cos(theta);
            let sn = sin(theta);
            let ij = rope_pair(i);
            let x0 = x[ij.x];
            let x1 = x[ij.y];
            x[ij.x] = x0 * c - x1 * sn;
            x[ij.y] = x0 * sn + x1 * c;
        }
        for (var b = 0u; b < nb_head; b++) {
            let e0 = b * KVQ_BLOCK;
            var amax = 0.0;
            var mx = 0.0;
            for (var j = 0u; j < KVQ_BLOCK; j++) {
                let v = x[e0 + j];
                if (abs(v) > amax) {
                    amax = abs(v);
                    mx = v;
                }
            }
            let sc = kvq_scale(amax, mx);
            let b0 = hb + b * ts;
            set_k_byte(b0, kvq_scale_byte(sc.x, 0u));
            set_k_byte(b0 + 1u, kvq_scale_byte(sc.x, 1u));
            if (KV_Q == 1u) {
                for (var j = 0u; j < KVQ_BLOCK; j++) {
                    set_k_byte(b0 + 2u + j, kvq_level8(x[e0 + j], sc.y));
                }
            } else {
                for (var j = 0u; j < 16u; j++) {
                    let lo = kvq_level4(x[e0 + j], sc.y);
                    let hi = kvq_level4(x[e0 + j + 16u], sc.y);
                    set_k_byte(b0 + 2u + j, lo | (hi << 4u));
                }
            }
        }
    }
}
