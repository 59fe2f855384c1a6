// The pairing (quant/pair.wgsl) of Q4_K and Q5_K, whose quant byte
// qs[32h + l] holds elements 64h + l (low nibble) and 64h + 32 + l (high):
// pair g is 4 quant bytes of super-block g / 32 (t = g % 32, h = t / 8,
// l = 4 (t % 8)) and both their nibbles, elements 64h + l .. + 3 (sub-block
// 2h) and 64h + 32 + l .. + 3 (sub-block 2h + 1). The format file defines
// dequant_pair.

const PAIR_GAP: u32 = 32u;

fn pair_at(g: u32) -> u32 {
    let t = g % 32u;
    return (g / 32u) * BLOCK_SIZE + 64u * (t / 8u) + 4u * (t % 8u);
}
