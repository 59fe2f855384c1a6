// F32 rows. Every weight format file defines:
//   dequant4(row_byte, e) -> vec4<f32>: elements e..e+3 (e % 4 == 0, e + 3 < k)
//   dequant1(row_byte, e) -> f32:       element e
// where row_byte is the row's first byte in the bound window. The loader
// prepends the format's row of glint-quant's type table as constants:
//   BLOCK_SIZE: u32 (elements per block), TYPE_SIZE: u32 (bytes per block).
#include "quant/common.wgsl"

fn dequant1(row_byte: u32, e: u32) -> f32 {
    return bitcast<f32>(W[(row_byte >> 2u) + e]);
}

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let i = (row_byte >> 2u) + e;
    return vec4<f32>(bitcast<f32>(W[i]), bitcast<f32>(W[i + 1u]), bitcast<f32>(W[i + 2u]), bitcast<f32>(W[i + 3u]));
}

#include "quant/pair.wgsl"
