// Gather rows of a weight table (any weight format TYPE), dequantized to f32;
// TYPE_FILE is its dequant file (quant/*.wgsl) from glint-quant's type table.
// The table may be bound as a window of rows row0 .. row0 + n_local; each
// window's dispatch writes only the ids inside it (the first also writes
// zero rows for ids outside 0..n_rows).
// Bindings, in order:
//   0 W:      [k, n_local] TYPE, raw bytes as u32 words (window of the table)
//   1 ids:    [m] i32
//   2 out:    [k, m] f32
//   3 params: uniform Params
#include "index.wgsl"
#include "TYPE_FILE"

struct Params {
    k: u32,
    m: u32,
    row0: u32,
    n_local: u32,
    row_bytes: u32,
    n_rows: u32,
    first: u32,
}

#ifdef SHADER_F16
@group(0) @binding(0) var<storage, read> W: array<f16>; // F16 tables only
#else
@group(0) @binding(0) var<storage, read> W: array<u32>;
#endif
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(inv: Inv) {
    let g = global_index(inv, 256u);
    if (g >= p.k * p.m) {
        return;
    }
    let i = g / p.k;
    let e = g % p.k;
    let id = ids[i];
    if (id < 0 || u32(id) >= p.n_rows) {
        if (p.first != 0u) {
            out[g] = 0.0;
        }
        return;
    }
    let r = u32(id);
    if (r < p.row0 || r >= p.row0 + p.n_local) {
        return;
    }
    out[g] = dequant1((r - p.row0) * p.row_bytes, e);
}
