// Elementwise unary ops: scale, silu, gelu (tanh form).
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 out:    [n, m] f32
//   2 params: uniform Params
#include "index.wgsl"
#include "common.wgsl"

// 0 scale, 1 silu, 2 gelu
override OP: u32 = 0u;

struct Params {
    n_total: u32,
    s: f32, // the factor of scale
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let i = global_index(inv, 256u);
    if (i >= p.n_total) {
        return;
    }
    let v = x[i];
    var r: f32;
    switch OP {
        case 0u: { r = v * p.s; }
        case 1u: { r = silu(v); }
        default: { r = gelu(v); }
    }
    out[i] = r;
}
