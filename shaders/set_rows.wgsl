// Write rows into a cache: dst[:, idx[i]] = src[:, i], converted to dst's type.
// One invocation per dst word: an f32, two f16 packed in a u32 (KV_F16,
// n even so no word spans two rows), or four bytes of a quantized row
// (KV_Q, kv_quant.wgsl: each invocation finds the scale of the one or two
// blocks its bytes fall in). Rows of idx outside dst are skipped.
// Bindings, in order:
//   0 src:    [n, m] f32
//   1 idx:    [m] i32
//   2 dst:    [n, n_rows] f32, f16 or Q8_0/Q4_0 (as u32 words)
//   3 params: uniform Params
#include "index.wgsl"
#include "kv_quant.wgsl"
override KV_F16: bool = false;

struct Params {
    n: u32,
    m: u32,
    n_rows: u32,
    per_row: u32, // dst words per row
}

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read> idx: array<i32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

// (d, 1/d) of the block of 32 source values starting at s0.
fn block_scale(s0: u32) -> vec2<f32> {
    var amax = 0.0;
    var mx = 0.0;
    for (var j = 0u; j < KVQ_BLOCK; j++) {
        let v = src[s0 + j];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    return kvq_scale(amax, mx);
}

// Word w of the quantized row made from source row i.
fn quant_word(i: u32, w: u32) -> u32 {
    let ts = kvq_type_size();
    var word = 0u;
    var blk = 0xffffffffu;
    var sc = vec2<f32>(0.0);
    for (var t = 0u; t < 4u; t++) {
        let byte = 4u * w + t;
        let b = byte / ts;
        let o = byte % ts;
        let s0 = i * p.n + b * KVQ_BLOCK;
        if (b != blk) {
            blk = b;
            sc = block_scale(s0);
        }
        var v: u32;
        if (o < 2u) {
            v = kvq_scale_byte(sc.x, o);
        } else if (KV_Q == 1u) {
            v = kvq_level8(src[s0 + o - 2u], sc.y);
        } else {
            let j = o - 2u;
            v = kvq_level4(src[s0 + j], sc.y) | (kvq_level4(src[s0 + j + 16u], sc.y) << 4u);
        }
        word |= v << (8u * t);
    }
    return word;
}

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let per_row = p.per_row;
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
    if (KV_Q != 0u) {
        dst[row * per_row + w] = quant_word(i, w);
    } else if (KV_F16) {
        let s = i * p.n + 2u * w;
        dst[row * per_row + w] = pack2x16float(vec2<f32>(src[s], src[s + 1u]));
    } else {
        dst[row * per_row + w] = bitcast<u32>(src[i * p.n + w]);
    }
}
