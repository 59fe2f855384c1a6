// Softmax over each row (ne[0]), max-subtracted, in f32; one workgroup per row.
// Max and sum through reduce.wgsl (subgroups with USE_SUBGROUPS, else a tree).
#include "index.wgsl"
#include "reduce.wgsl"
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 out:    [n, m] f32
//   2 params: uniform Params
struct Params {
    n: u32,
    m: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(inv: Inv, ln: Lane) {
    let row = group_index(inv);
    if (row >= p.m) {
        return;
    }
    let base = row * p.n;
    var mx = -3.4028235e38;
    for (var i = inv.lid.x; i < p.n; i += WG) {
        mx = max(mx, x[base + i]);
    }
    let row_max = wg_max(ln, mx);
    var s = 0.0;
    for (var i = inv.lid.x; i < p.n; i += WG) {
        let e = exp(x[base + i] - row_max);
        out[base + i] = e;
        s += e;
    }
    let inv_sum = 1.0 / wg_sum(ln, s);
    for (var i = inv.lid.x; i < p.n; i += WG) {
        out[base + i] *= inv_sum;
    }
}
