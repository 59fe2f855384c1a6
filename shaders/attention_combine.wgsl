// The second pass of split-KV attention (attention.wgsl with n_split > 1):
// one workgroup per (token, head) folds the n_split partials (max m_s, sum
// l_s, unnormalized accumulators a_s) into the output,
//   M = max_s m_s,  L = sum_s l_s * exp(m_s - M),
//   out[d] = sum_s a_s[d] * exp(m_s - M) / L   (0 where L = 0: all masked).
// A split whose cells are all masked has m_s = NEG_INF (finite) and l_s = 0,
// so it adds nothing.
// Bindings, in order:
//   0 part:   [2 + head_dim, n_split, n_rows] f32 (m_s, l_s, a_s)
//   1 out:    [head_dim, n_rows] f32 (n_rows = n_head * m)
//   2 params: uniform Params
#include "index.wgsl"

struct Params {
    head_dim: u32,
    n_split: u32,
    n_rows: u32,
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(inv: Inv) {
    let r = group_index(inv);
    if (r >= p.n_rows) {
        return;
    }
    let hd = p.head_dim;
    let stride = hd + 2u;
    let base = r * p.n_split * stride;
    var big = part[base];
    for (var s = 1u; s < p.n_split; s++) {
        big = max(big, part[base + s * stride]);
    }
    var total = 0.0;
    for (var s = 0u; s < p.n_split; s++) {
        let b = base + s * stride;
        total += part[b + 1u] * exp(part[b] - big);
    }
    for (var d = inv.lid.x; d < hd; d += WG) {
        var o = 0.0;
        for (var s = 0u; s < p.n_split; s++) {
            let b = base + s * stride;
            o += part[b + 2u + d] * exp(part[b] - big);
        }
        if (total > 0.0) {
            out[r * hd + d] = o / total;
        } else {
            out[r * hd + d] = 0.0;
        }
    }
}
