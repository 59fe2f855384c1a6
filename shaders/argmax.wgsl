// Index of the largest value of each row (first one on ties); one workgroup per row.
// Bindings, in order:
//   0 x:      [n, m] f32
//   1 out:    [m] i32
//   2 params: uniform Params
#include "index.wgsl"
struct Params {
    n: u32,
    m: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<i32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;
var<workgroup> red_v: array<f32, WG>;
var<workgroup> red_i: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(inv: Inv) {
    let row = group_index(inv);
    if (row >= p.m) {
        return;
    }
    let base = row * p.n;
    var bv = -3.4028235e38;
    var bi = 0xffffffffu;
    // Each thread scans increasing indices, so a strict > keeps the first.
    for (var i = inv.lid.x; i < p.n; i += WG) {
        let v = x[base + i];
        if (bi == 0xffffffffu || v > bv) {
            bv = v;
            bi = i;
        }
    }
    red_v[inv.lid.x] = bv;
    red_i[inv.lid.x] = bi;
    workgroupBarrier();
    for (var st = WG / 2u; st > 0u; st >>= 1u) {
        if (inv.lid.x < st) {
            let ov = red_v[inv.lid.x + st];
            let oi = red_i[inv.lid.x + st];
            let mv = red_v[inv.lid.x];
            let mi = red_i[inv.lid.x];
            if (oi != 0xffffffffu && (mi == 0xffffffffu || ov > mv || (ov == mv && oi < mi))) {
                red_v[inv.lid.x] = ov;
                red_i[inv.lid.x] = oi;
            }
        }
        workgroupBarrier();
    }
    if (inv.lid.x == 0u) {
        out[row] = i32(red_i[0]);
    }
}
