//! The random numbers behind `dist`, `xtc` and `mirostat`.
//!
//! glint uses the same generator llama.cpp uses, `std::mt19937` (32-bit
//! Mersenne Twister, Matsumoto & Nishimura 1998, as specified by the C++
//! standard), and the same conversions to floating point that libstdc++ (GCC)
//! applies in `std::uniform_real_distribution` and
//! `std::discrete_distribution`. A seed therefore yields the same stream of
//! draws on every platform glint runs on, and the same draws as a llama.cpp
//! built with GCC's standard library. The tests pin this against values
//! printed by a program compiled with g++ 12 (libstdc++). llama.cpp built
//! with MSVC's standard library converts differently and will not match;
//! libc++ was not checked.

/// `std::mt19937`: the 32-bit Mersenne Twister MT19937.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; Self::N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    const N: usize = 624;
    const M: usize = 397;
    const MATRIX_A: u32 = 0x9908_b0df;
    const UPPER: u32 = 0x8000_0000;
    const LOWER: u32 = 0x7fff_ffff;

    /// The generator seeded like `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Self {
        let mut rng = Mt19937 {
            state: [0; Self::N],
            index: Self::N,
        };
        rng.seed(seed);
        rng
    }

    /// Re-seed in place, like `std::mt19937::seed(seed)`.
    pub fn seed(&mut self, seed: u32) {
        self.state[0] = seed;
        for i in 1..Self::N {
            let prev = self.state[i - 1];
            self.state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        self.index = Self::N;
    }

    fn twist(&mut self) {
        for i in 0..Self::N {
            let y = (self.state[i] & Self::UPPER) | (self.state[(i + 1) % Self::N] & Self::LOWER);
            let mut next = self.state[(i + Self::M) % Self::N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= Self::MATRIX_A;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= Self::N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// A double in `[0, 1)`, as libstdc++'s
    /// `std::uniform_real_distribution<double>(0, 1)` draws it: two outputs,
    /// `(lo + hi * 2^32) / 2^64` computed in double, clamped below 1.
    pub fn canonical_f64(&mut self) -> f64 {
        const R: f64 = 4_294_967_296.0;
        let lo = self.next_u32() as f64;
        let hi = self.next_u32() as f64;
        let sum = lo + hi * R;
        let ret = sum / (R * R);
        if ret >= 1.0 {
            // nextafter(1.0, 0.0)
            1.0 - f64::EPSILON / 2.0
        } else {
            ret
        }
    }

    /// A float in `[0, 1)`, as libstdc++'s
    /// `std::uniform_real_distribution<float>(0, 1)` draws it: one output
    /// converted to float and divided by 2^32, clamped below 1.
    pub fn canonical_f32(&mut self) -> f32 {
        let x = self.next_u32() as f32;
        let ret = x / 4_294_967_296.0f32;
        if ret >= 1.0 {
            // nextafter(1.0f, 0.0f)
            1.0 - f32::EPSILON / 2.0
        } else {
            ret
        }
    }

    /// An index drawn with weights `weights`, as libstdc++'s
    /// `std::discrete_distribution<int>` does it (llama.cpp's
    /// `llama_sample_dist`, used by mirostat): weights normalized in double,
    /// cumulative sums with the last forced to 1, then the first cumulative
    /// sum `>=` a [`canonical_f64`](Self::canonical_f64) draw. Fewer than two
    /// weights return 0 without drawing.
    pub fn discrete(&mut self, weights: impl ExactSizeIterator<Item = f32> + Clone) -> usize {
        let n = weights.len();
        if n < 2 {
            return 0;
        }
        let sum: f64 = weights.clone().map(f64::from).sum();
        let mut cp = Vec::with_capacity(n);
        let mut acc = 0.0f64;
        for w in weights {
            acc += f64::from(w) / sum;
            cp.push(acc);
        }
        cp[n - 1] = 1.0;
        let p = self.canonical_f64();
        // lower_bound: the first cumulative sum that is not less than p.
        cp.partition_point(|&c| c < p).min(n - 1)
    }
}

/// llama.cpp's `LLAMA_DEFAULT_SEED`: a seed of this value means "pick a
/// random seed" when a sampler is created or reset.
pub const DEFAULT_SEED: u32 = 0xFFFF_FFFF;

/// llama.cpp's `get_rng_seed`: `seed` itself, or for [`DEFAULT_SEED`] a
/// fresh seed from the standard library's per-process hasher keys mixed with
/// the clock (not reproducible, by design).
pub fn resolve_seed(seed: u32) -> u32 {
    if seed != DEFAULT_SEED {
        return seed;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish() as u32
}

/// A generator together with the seed it was asked for and the seed in use:
/// what llama.cpp's seeded samplers (`dist`, `xtc`, `mirostat`) keep, so that
/// `reset` re-seeds (drawing a fresh seed again for [`DEFAULT_SEED`]).
#[derive(Clone, Debug)]
pub(crate) struct SeededRng {
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl SeededRng {
    pub(crate) fn new(seed: u32) -> Self {
        let seed_cur = resolve_seed(seed);
        SeededRng {
            seed,
            seed_cur,
            rng: Mt19937::new(seed_cur),
        }
    }

    /// The seed in use (the resolved one for [`DEFAULT_SEED`]).
    pub(crate) fn seed_cur(&self) -> u32 {
        self.seed_cur
    }

    /// Re-seed from the seed asked for, as the sampler's `reset` does.
    pub(crate) fn reset(&mut self) {
        self.seed_cur = resolve_seed(self.seed);
        self.rng.seed(self.seed_cur);
    }
}

impl std::ops::Deref for SeededRng {
    type Target = Mt19937;
    fn deref(&self) -> &Mt19937 {
        &self.rng
    }
}

impl std::ops::DerefMut for SeededRng {
    fn deref_mut(&mut self) -> &mut Mt19937 {
        &mut self.rng
    }
}
