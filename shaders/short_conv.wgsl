// LFM2's short causal convolution over time with a per-sequence state
// (ggml's ssm_conv): one invocation per channel walks the tokens in order,
// so a sequence's tokens read the state its earlier tokens left and no two
// invocations touch the same state values.
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 kernel: [l, n] f32
//   2 slots:  [m] i32, each token's state slot
//   3 state:  [(l - 1) * n, n_slots] f32, updated in place
//   4 out:    [n, m] f32
//   5 params: uniform Params
#include "index.wgsl"

struct Params {
    n: u32,
    m: u32,
    l: u32,
    n_slots: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> kernel: array<f32>;
@group(0) @binding(2) var<storage, read> slots: array<i32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(inv: Inv) {
    let c = global_index(inv, 64u);
    if (c >= p.n) {
        return;
    }
    let d = p.l - 1u;
    let kb = c * p.l;
    for (var i = 0u; i < p.m; i++) {
        let s = slots[i];
        let xi = x[i * p.n + c];
        if (s < 0 || u32(s) >= p.n_slots) {
            out[i * p.n + c] = 0.0;
            continue;
        }
        let sb = u32(s) * d * p.n + c * d;
        // The window in order: the d state values, then the new input.
        var sum = 0.0;
        for (var j = 0u; j < d; j++) {
            sum += state[sb + j] * kernel[kb + j];
        }
        sum += xi * kernel[kb + d];
        out[i * p.n + c] = sum;
        for (var j = 0u; j + 1u < d; j++) {
            state[sb + j] = state[sb + j + 1u];
        }
        state[sb + d - 1u] = xi;
    }
}
