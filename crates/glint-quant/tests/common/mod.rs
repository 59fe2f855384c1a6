//! Shared test helpers: the seeded RNG (glint-testkit's) and fixtures.
#![allow(dead_code)]

use glint_quant::GgmlType;

pub use glint_testkit::Rng;

/// The quant tests' generator for `seed`: their seeds have always been mixed
/// with splitmix64's increment first, kept so every test sees the same data.
pub fn seeded(seed: u64) -> Rng {
    Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15)
}

/// Byte offsets of the f16 scale fields (d, dmin, m) inside one block.
pub fn scale_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        _ => &[],
    }
}

/// A row of `n_blocks` random blocks of a quant type: random payload bytes,
/// scale fields set to random finite f16 values of magnitude 1e-3..1.
pub fn random_quant_row(rng: &mut Rng, ty: GgmlType, n_blocks: usize) -> Vec<u8> {
    let ts = ty.type_size();
    let mut row = rng.bytes(n_blocks * ts);
    for b in 0..n_blocks {
        for &off in scale_fields(ty) {
            let mag = 10f32.powf(rng.uniform(-3.0, 0.0));
            let v = if rng.unit_f32() < 0.5 { -mag } else { mag };
            let bits = half::f16::from_f32(v).to_bits().to_le_bytes();
            row[b * ts + off..b * ts + off + 2].copy_from_slice(&bits);
        }
    }
    row
}

/// A fixture file's bytes; a missing file fails the test (never skips it).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = glint_testkit::fixtures_dir().join("quant").join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "missing fixture {}: {e}; run fixtures/quant/make_golden.py",
            path.display()
        )
    })
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
