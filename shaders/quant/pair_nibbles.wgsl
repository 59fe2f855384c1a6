// The pairing (quant/pair.wgsl) of the 32-element formats whose quant byte j
// holds elements j (low nibble) and j + 16 (high): pair g is 4 quant bytes
// of block g / 4 and both their nibbles, elements 4t .. 4t + 3 and
// 16 + 4t .. 19 + 4t of the block (t = g % 4). The format file defines
// dequant_pair.

const PAIR_GAP: u32 = 16u;

fn pair_at(g: u32) -> u32 {
    return (g / 4u) * BLOCK_SIZE + (g % 4u) * 4u;
}
