//! Mirostat v1 and v2: selecting samplers that steer the observed surprise
//! (`-log2 p` of the emitted token) towards a target `tau` by adapting a
//! threshold `mu`, starting at `2 * tau`, by `mu -= eta * (surprise - tau)`.

use crate::rng::SeededRng;
use crate::samplers::top_k_impl;
use crate::{Sampler, TokenDataArray};

/// What both versions keep: the target surprise `tau`, the learning rate
/// `eta`, the threshold `mu` and the generator of the draw.
#[derive(Clone, Debug)]
struct Steer {
    tau: f32,
    eta: f32,
    mu: f32,
    rng: SeededRng,
}

impl Steer {
    fn new(seed: u32, tau: f32, eta: f32) -> Self {
        Steer {
            tau,
            eta,
            mu: 2.0 * tau,
            rng: SeededRng::new(seed),
        }
    }

    /// Softmax the candidates, let `truncate` cut them by `mu`, renormalize,
    /// draw one, and move `mu` by the surprise of the draw.
    fn sample(
        &mut self,
        cur_p: &mut TokenDataArray,
        truncate: impl FnOnce(&mut TokenDataArray, f32),
    ) {
        if cur_p.data.is_empty() {
            cur_p.selected = None;
            return;
        }
        cur_p.softmax(true);
        truncate(cur_p, self.mu);
        cur_p.softmax(true);
        let idx = self.rng.discrete(cur_p.data.iter().map(|t| t.p));
        cur_p.selected = Some(idx);
        let observed_surprise = -cur_p.data[idx].p.log2();
        self.mu -= self.eta * (observed_surprise - self.tau);
    }

    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.rng.reset();
    }
}

/// Mirostat 1.0 (Basu et al. 2020): estimate the Zipf exponent `s_hat` from
/// the `m` most probable tokens, derive `k` from it and `mu`, sample from the
/// top `k`.
#[derive(Clone, Debug)]
pub struct Mirostat {
    n_vocab: i32,
    m: i32,
    steer: Steer,
}

impl Mirostat {
    /// Mirostat v1 (llama.cpp uses `m = 100`).
    pub fn new(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> Self {
        Mirostat {
            n_vocab,
            m,
            steer: Steer::new(seed, tau, eta),
        }
    }

    /// The current `mu`.
    pub fn mu(&self) -> f32 {
        self.steer.mu
    }
}

/// The `k` that v1 truncates softmaxed, sorted candidates to at threshold `mu`.
fn k_for(cur_p: &TokenDataArray, n_vocab: i32, m: i32, mu: f32) -> f32 {
    let mut sum_ti_bi = 0.0f32;
    let mut sum_ti_sq = 0.0f32;
    let n_terms = ((m - 1).max(0) as usize).min(cur_p.data.len().saturating_sub(1));
    for i in 0..n_terms {
        let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
        let b_i = (cur_p.data[i].p / cur_p.data[i + 1].p).ln();
        sum_ti_bi += t_i * b_i;
        sum_ti_sq += t_i * t_i;
    }
    let s_hat = sum_ti_bi / sum_ti_sq;
    let epsilon_hat = s_hat - 1.0;
    ((epsilon_hat * 2f32.powf(mu)) / (1.0 - (n_vocab as f32).powf(-epsilon_hat))).powf(1.0 / s_hat)
}

impl Sampler for Mirostat {
    fn name(&self) -> &'static str {
        "mirostat"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        let (n_vocab, m) = (self.n_vocab, self.m);
        self.steer.sample(cur_p, |cur_p, mu| {
            let k = k_for(cur_p, n_vocab, m, mu);
            // `as` saturates (NaN -> 0) where C++'s int(k) would be undefined.
            top_k_impl(cur_p, (k as i32).max(1));
        });
    }

    fn reset(&mut self) {
        self.steer.reset();
    }
}

/// Mirostat 2.0: drop candidates whose surprise exceeds `mu` (keeping at
/// least the best one), renormalize, sample.
#[derive(Clone, Debug)]
pub struct MirostatV2 {
    steer: Steer,
}

impl MirostatV2 {
    /// Mirostat v2.
    pub fn new(seed: u32, tau: f32, eta: f32) -> Self {
        MirostatV2 {
            steer: Steer::new(seed, tau, eta),
        }
    }

    /// The current `mu`.
    pub fn mu(&self) -> f32 {
        self.steer.mu
    }
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &'static str {
        "mirostat-v2"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        self.steer.sample(cur_p, |cur_p, mu| {
            let keep = cur_p
                .data
                .iter()
                .position(|t| -t.p.log2() > mu)
                .unwrap_or(cur_p.data.len());
            cur_p.data.truncate(keep.max(1));
        });
    }

    fn reset(&mut self) {
        self.steer.reset();
    }
}
