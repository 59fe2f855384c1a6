// The top k candidates of each row of logits (Backend::top_k), one
// workgroup a row. A radix select over order-preserving keys (f32 bits
// mapped so that u32 order is total_cmp's, NaN above all: glint-backend's
// check::top_k_key) finds t, the k-th largest key: four passes, each a
// 256-bin histogram of one byte of the keys that match the bytes chosen so
// far, from the top byte down. A last pass writes every element whose key is
// >= t (k, or more where others tie with the k-th), in the order the
// atomics give (the host sorts), up to cap.
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 out:    [1 + 2 cap, m] u32: the count of keys >= t, then up to cap
//             (index, logit bits) pairs
//   2 params: uniform Params (k >= 1, k <= cap: the launcher checks)
#include "index.wgsl"
struct Params {
    n: u32,
    m: u32,
    k: u32,
    cap: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;
var<workgroup> hist: array<atomic<u32>, 256>;
// The byte chosen by a pass and how many elements with the key prefix so
// far must still be taken from those that share it.
var<workgroup> chosen: array<u32, 2>;
var<workgroup> n_out: atomic<u32>;

fn key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

@compute @workgroup_size(WG)
fn main(inv: Inv) {
    let row = group_index(inv);
    if (row >= p.m) {
        return;
    }
    let lid = inv.lid.x;
    let base = row * p.n;
    var prefix = 0u;
    var mask = 0u;
    var left = min(p.k, p.n);
    for (var pi = 0u; pi < 4u; pi++) {
        let shift = 24u - 8u * pi;
        atomicStore(&hist[lid], 0u);
        workgroupBarrier();
        for (var i = lid; i < p.n; i += WG) {
            let kk = key(x[base + i]);
            if ((kk & mask) == prefix) {
                atomicAdd(&hist[(kk >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        // From the top byte down, the first whose count reaches `left`.
        if (lid == 0u) {
            var above = 0u;
            var d = 255u;
            loop {
                let h = atomicLoad(&hist[d]);
                if (above + h >= left || d == 0u) {
                    break;
                }
                above += h;
                d -= 1u;
            }
            chosen[0] = d;
            chosen[1] = left - above;
        }
        workgroupBarrier();
        prefix |= chosen[0] << shift;
        mask |= 255u << shift;
        left = chosen[1];
        workgroupBarrier();
    }
    // prefix is t, the k-th largest key.
    if (lid == 0u) {
        atomicStore(&n_out, 0u);
    }
    workgroupBarrier();
    let ob = row * (1u + 2u * p.cap);
    for (var i = lid; i < p.n; i += WG) {
        let v = x[base + i];
        if (key(v) >= prefix) {
            let s = atomicAdd(&n_out, 1u);
            if (s < p.cap) {
                out[ob + 1u + 2u * s] = i;
                out[ob + 2u + 2u * s] = bitcast<u32>(v);
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        out[ob] = atomicLoad(&n_out);
    }
}
