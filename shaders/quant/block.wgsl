// dequant1 for the block formats, whose dequant4 decodes four consecutive
// elements at once: element e is one lane of its aligned group of four.
fn dequant1(row_byte: u32, e: u32) -> f32 {
    return dequant4(row_byte, e & ~3u)[e & 3u];
}
