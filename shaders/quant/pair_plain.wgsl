// The plain pairing (quant/pair.wgsl): pair g is the 8 consecutive
// elements 8g .. 8g + 7. pair.wgsl includes it with its dequant_pair (two
// dequant4 calls); a format that reads what the two would share once
// (Q2_K, Q5_1) includes it and defines dequant_pair itself.

const PAIR_GAP: u32 = 4u;

fn pair_at(g: u32) -> u32 {
    return 8u * g;
}
