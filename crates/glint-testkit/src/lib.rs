//! Helpers shared by the workspace's tests, and the one seeded generator
//! (also behind synthetic weights and bench token ids in the command line).
//!
//! - [`Rng`]: one seeded generator (splitmix64) for random test data, so a
//!   failure reproduces from its seed and no crate needs `rand`.
//! - [`fixtures_dir`] / [`fixture`]: the repository's `fixtures/` folder,
//!   found from this crate's own manifest, so tests read golden data from the
//!   clone itself and nothing beside it.
//! - [`test_model`]: a real test model from the model cache, for the crates
//!   below the root package (which has `glint::models::test_model`).

use std::path::PathBuf;

/// splitmix64 (Steele, Lea, Flood 2014): tiny, seeded, good enough for test
/// data. The state is the seed; `Rng(seed)` and `Rng::new(seed)` are the same.
///
/// ```
/// let mut a = glint_testkit::Rng::new(7);
/// let mut b = glint_testkit::Rng(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// ```
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed` (any value, 0 included).
    pub const fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 24 bits, so every value is exact in f32.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [-1, 1), never exactly zero (0 becomes 0.5): a zero input
    /// would hide sign and scale bugs in the ops under test.
    pub fn f32(&mut self) -> f32 {
        let v = 2.0 * self.unit_f32() - 1.0;
        if v == 0.0 {
            0.5
        } else {
            v
        }
    }

    /// `n` values of [`Rng::f32`].
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    /// `n` values of [`Rng::f32`] times `scale`.
    pub fn vec_scaled(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit_f32()
    }

    /// Roughly normal: the sum of 4 uniforms, centred, unit variance.
    pub fn normal(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.unit_f32()).sum();
        (s - 2.0) * 3.0f32.sqrt()
    }

    /// `n` values of [`Rng::normal`] times `scale`.
    pub fn normals(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * scale).collect()
    }

    /// `n` random bytes (the low byte of each draw).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// In `0..n` (`n > 0`; modulo bias is irrelevant for test data).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// In `lo..hi` (`lo < hi`), as an i32 (positions, sequence ids); i64
    /// bounds so callers can pass sizes plus one without casts.
    pub fn range(&mut self, lo: i64, hi: i64) -> i32 {
        (lo + (self.next_u64() % (hi - lo) as u64) as i64) as i32
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// The repository's `fixtures/` folder (beside the workspace's Cargo.toml).
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"))
}

/// `fixtures/<rel>`; a missing file fails the test (never skips it), saying
/// what is missing and where the fixtures' README is.
pub fn fixture(rel: &str) -> PathBuf {
    let path = fixtures_dir().join(rel);
    assert!(
        path.exists(),
        "fixture {} is missing: it is part of the repository (see fixtures/reference/README.md)",
        path.display()
    );
    path
}

/// The model cache: `$GLINT_MODELS`, else `$HOME/.cache/glint/models`. The
/// one definition: the command line's fetcher (`glint_cli::models`) uses it.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GLINT_MODELS") {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("glint").join("models")
}

/// Path of a real test model (`file`, e.g. `SmolLM2-135M-Instruct.Q4_1.gguf`);
/// a missing model fails the test (never skips it) saying how to fetch it.
pub fn test_model(file: &str) -> PathBuf {
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "test model {file} not found in {}: run `scripts/fetch-models.sh` \
         (or set GLINT_MODELS to a directory holding it)",
        models_dir().display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_values() {
        // splitmix64 from seed 0: the first outputs of the reference C code.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn helpers_stay_in_their_ranges() {
        let mut r = Rng::new(42);
        for _ in 0..10_000 {
            let u = r.unit_f32();
            assert!((0.0..1.0).contains(&u));
            let s = r.f32();
            assert!((-1.0..1.0).contains(&s) && s != 0.0);
            assert!(r.below(7) < 7);
            assert!((-3..5).contains(&r.range(-3, 5)));
        }
    }

    #[test]
    fn fixtures_dir_is_the_repositorys() {
        assert!(fixtures_dir().join("quant").is_dir());
    }
}
