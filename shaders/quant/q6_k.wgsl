// Q6_K: super-blocks of 256 in 210 bytes:
//   0 u8 ql[128], 128 u8 qh[64], 192 i8 scales[16], 208 f16 d.
// Element i = 128*h + r (h < 2, r < 128): low 4 bits are nibble r / 64
// (low, high) of ql[64*h + r % 64], high 2 bits are bits 2*(r/32)..+2 of
// qh[32*h + r % 32]; q is 0..63;
// x = (d * scales[i / 16]) * (q - 32).
#include "quant/common.wgsl"
#include "quant/block.wgsl"

fn dequant4(row_byte: u32, e: u32) -> vec4<f32> {
    let b = row_byte + (e / BLOCK_SIZE) * TYPE_SIZE;
    let i = e % BLOCK_SIZE;
    let h = i / 128u;
    let r = i % 128u;
    let d = f16_at(b + 208u);
    let sc = f32(bitcast<i32>(byte_at(b + 192u + i / 16u) << 24u) >> 24u);
    let wl = u32_at(b + 64u * h + r % 64u);
    let wh = u32_at(b + 128u + 32u * h + r % 32u);
    let q = field4(wl, 4u * (r / 64u), 0xfu) + 16.0 * field4(wh, 2u * (r / 32u), 3u);
    return (d * sc) * (q - vec4<f32>(32.0));
}
