// dst = src, 16 bytes an invocation a step, the invocations striding over
// the buffer: the memory bandwidth a compute kernel sees (measure.rs's copy
// probe), beside `copy_buffer_to_buffer`'s, which on some drivers moves far
// less (an H200's Vulkan driver: about 0.8 TB/s, while the matvec kernels
// read at up to 1.5).
// Bindings, in order:
//   0 src:    [n] vec4<u32>
//   1 dst:    [n] vec4<u32>
//   2 params: uniform Params
#include "index.wgsl"

struct Params {
    n: u32,
    // Invocations in the dispatch (the step): nonzero.
    stride: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn copy(inv: Inv) {
    let step = max(p.stride, 1u);
    for (var i = global_index(inv, WG); i < p.n; i += step) {
        dst[i] = src[i];
    }
}
