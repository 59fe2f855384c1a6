//! Shared test helpers: a seeded RNG (no `rand` dependency) and fixtures.
#![allow(dead_code)]

use glint_quant::GgmlType;
use std::path::PathBuf;

/// splitmix64: tiny, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f32(&mut self) -> f32 {
        (self.u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.f32()
    }
    /// Roughly normal (sum of 4 uniforms, centred, unit variance).
    pub fn normal(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.f32()).sum();
        (s - 2.0) * 3.0f32.sqrt()
    }
    pub fn normals(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u64() as u8).collect()
    }
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
            let v = if rng.f32() < 0.5 { -mag } else { mag };
            let bits = half::f16::from_f32(v).to_bits().to_le_bytes();
            row[b * ts + off..b * ts + off + 2].copy_from_slice(&bits);
        }
    }
    row
}

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/quant")
}

/// A fixture file's bytes; a missing file fails the test (never skips it).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
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
