// Elementwise binary ops: add, mul (b broadcast over columns when it is [n]),
// swiglu, geglu (a = gate, b = up).
// Bindings, in order:
//   0 a:      [n, m] f32
//   1 b:      [n, m] or [n] f32
//   2 out:    [n, m] f32
//   3 params: uniform Params
#include "index.wgsl"
#include "common.wgsl"

// 0 add, 1 mul, 2 swiglu, 3 geglu
override OP: u32 = 0u;

struct Params {
    n_total: u32, // n * m
    n_b: u32,     // elements of b (n * m, or n when broadcast)
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let i = global_index(inv, 256u);
    if (i >= p.n_total) {
        return;
    }
    let x = a[i];
    let y = b[i % p.n_b];
    var r: f32;
    switch OP {
        case 0u: { r = x + y; }
        case 1u: { r = x * y; }
        case 2u: { r = silu(x) * y; }
        default: { r = gelu(x) * y; }
    }
    out[i] = r;
}
