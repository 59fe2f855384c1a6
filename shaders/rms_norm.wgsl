// RMSNorm, one workgroup per row; the sum of squares through reduce.wgsl
// (subgroups with USE_SUBGROUPS, else a tree in workgroup memory).
#include "index.wgsl"
#include "reduce.wgsl"
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 w:      [n] f32 (x again when there is no weight; has_w = 0)
//   (ADD) res: [n, m] f32, added to the normed row: out = res + norm(x) * w,
//             the bits of rms_norm then add (a post-norm's residual)
//   2 out:    [n, m] f32
//   3 params: uniform Params
struct Params {
    n: u32,
    m: u32,
    eps: f32,
    has_w: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
#ifdef ADD
@group(0) @binding(2) var<storage, read> res: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
#else
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
#endif

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(inv: Inv, ln: Lane) {
    let row = group_index(inv);
    if (row >= p.m) {
        return;
    }
    let base = row * p.n;
    var s = 0.0;
    for (var i = inv.lid.x; i < p.n; i += WG) {
        let v = x[base + i];
        s += v * v;
    }
    let r = 1.0 / sqrt(wg_sum(ln, s) / f32(p.n) + p.eps);
    for (var i = inv.lid.x; i < p.n; i += WG) {
        var v = x[base + i] * r;
        if (p.has_w != 0u) {
            v *= w[i];
        }
#ifdef ADD
        out[base + i] = res[base + i] + v;
#else
        out[base + i] = v;
#endif
    }
}
