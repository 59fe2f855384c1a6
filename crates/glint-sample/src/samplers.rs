//! Samplers without history: selection (greedy, dist), truncation (top-k,
//! top-p, min-p, typical, top-n-sigma, XTC) and temperature.
//!
//! Each follows `src/llama-sampling.cpp` of llama.cpp line for line in its
//! arithmetic (f32 where llama.cpp uses float, f64 where it uses double) and
//! in how it leaves the order of the candidates, since the order decides
//! which token a given random draw lands on.

use crate::rng::SeededRng;
use crate::{Sampler, TokenDataArray};

/// Select the candidate with the highest logit (the first one on ties).
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl Sampler for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if cur_p.data.is_empty() {
            cur_p.selected = None;
            return;
        }
        let mut sel = 0;
        for i in 1..cur_p.data.len() {
            if cur_p.data[i].logit > cur_p.data[sel].logit {
                sel = i;
            }
        }
        cur_p.selected = Some(sel);
    }
}

/// Draw a candidate from the softmax of the logits: llama.cpp's `dist`.
///
/// Softmax in f32, sum in f64, one `canonical_f64` draw, the first candidate
/// whose running sum reaches `sum * draw`; probabilities are left normalized
/// in `p`. See [`crate::rng`] for the generator.
#[derive(Clone, Debug)]
pub struct Dist {
    rng: SeededRng,
}

impl Dist {
    /// A dist sampler; [`crate::DEFAULT_SEED`] picks a random seed.
    pub fn new(seed: u32) -> Self {
        Dist {
            rng: SeededRng::new(seed),
        }
    }

    /// The seed in use (the resolved one when created with the default seed).
    pub fn seed_cur(&self) -> u32 {
        self.rng.seed_cur()
    }
}

impl Sampler for Dist {
    fn name(&self) -> &'static str {
        "dist"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if cur_p.data.is_empty() {
            cur_p.selected = None;
            return;
        }
        cur_p.selected = Some(0);
        if cur_p.data.len() == 1 {
            cur_p.data[0].p = 1.0;
            return;
        }
        let max_l = cur_p.max_logit();
        let mut sum_cum = 0.0f64;
        for t in &mut cur_p.data {
            t.p = (t.logit - max_l).exp();
            sum_cum += f64::from(t.p);
        }
        let rnd = self.rng.canonical_f64();
        let sum_tgt = sum_cum * rnd;
        let mut sum_run = 0.0f64;
        let mut found = None;
        for (i, t) in cur_p.data.iter_mut().enumerate() {
            if found.is_none() {
                sum_run += f64::from(t.p);
                if sum_run >= sum_tgt {
                    found = Some(i);
                }
            }
            t.p = (f64::from(t.p) / sum_cum) as f32;
        }
        cur_p.selected = Some(found.unwrap_or(cur_p.data.len() - 1));
    }

    fn reset(&mut self) {
        self.rng.reset();
    }
}

/// Keep the `k` highest logits, sorted; `k <= 0` keeps everything.
#[derive(Clone, Copy, Debug)]
pub struct TopK {
    k: i32,
}

impl TopK {
    /// A top-k sampler.
    pub fn new(k: i32) -> Self {
        TopK { k }
    }
}

/// llama.cpp's `llama_sampler_top_k_impl`, shared with mirostat.
pub(crate) fn top_k_impl(cur_p: &mut TokenDataArray, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur_p.data.len());
    if !cur_p.sorted {
        cur_p.partial_sort_truncate(k);
    }
    cur_p.data.truncate(k);
}

impl Sampler for TopK {
    fn name(&self) -> &'static str {
        "top-k"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        top_k_impl(cur_p, self.k);
    }
}

/// Nucleus sampling: keep the shortest sorted prefix whose probabilities sum
/// to at least `p`, and at least `min_keep` candidates. `p >= 1` is a no-op.
#[derive(Clone, Copy, Debug)]
pub struct TopP {
    p: f32,
    min_keep: usize,
}

impl TopP {
    /// A top-p sampler.
    pub fn new(p: f32, min_keep: usize) -> Self {
        TopP { p, min_keep }
    }
}

impl Sampler for TopP {
    fn name(&self) -> &'static str {
        "top-p"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.p >= 1.0 || cur_p.data.is_empty() {
            return;
        }
        cur_p.softmax(false);
        if !cur_p.sorted {
            cur_p.sort();
        }
        let mut cum_sum = 0.0f32;
        let mut last_idx = cur_p.data.len();
        for (i, t) in cur_p.data.iter().enumerate() {
            cum_sum += t.p;
            if cum_sum >= self.p && i + 1 >= self.min_keep {
                last_idx = i + 1;
                break;
            }
        }
        cur_p.data.truncate(last_idx);
    }
}

/// Keep candidates with `p >= min_p * p_max` (in logits:
/// `logit >= max_logit + ln(min_p)`), and at least `min_keep`.
/// `min_p <= 0` is a no-op. An unsorted array stays in its order.
#[derive(Clone, Copy, Debug)]
pub struct MinP {
    p: f32,
    min_keep: usize,
}

impl MinP {
    /// A min-p sampler.
    pub fn new(p: f32, min_keep: usize) -> Self {
        MinP { p, min_keep }
    }
}

impl Sampler for MinP {
    fn name(&self) -> &'static str {
        "min-p"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.p <= 0.0 || cur_p.data.is_empty() {
            return;
        }
        if !cur_p.sorted {
            // Filter in place, keeping the order, when enough survive.
            let max_logit = cur_p.data.iter().map(|t| t.logit).fold(-f32::MAX, f32::max);
            let min_logit = max_logit + self.p.ln();
            let n_keep = cur_p.data.iter().filter(|t| t.logit >= min_logit).count();
            if n_keep > 0 && n_keep >= self.min_keep {
                cur_p.data.retain(|t| t.logit >= min_logit);
                return;
            }
            cur_p.sort();
        }
        let min_logit = cur_p.data[0].logit + self.p.ln();
        let mut i = 1; // the first token always stays
        while i < cur_p.data.len() {
            if cur_p.data[i].logit < min_logit && i >= self.min_keep {
                break;
            }
            i += 1;
        }
        cur_p.data.truncate(i);
    }
}

/// Locally typical sampling: order candidates by `|-ln p - H|` (H the
/// entropy) and keep the shortest prefix whose probability exceeds `p`, and
/// at least `min_keep`. `p >= 1` is a no-op. Leaves the array unsorted.
#[derive(Clone, Copy, Debug)]
pub struct Typical {
    p: f32,
    min_keep: usize,
}

impl Typical {
    /// A typical sampler.
    pub fn new(p: f32, min_keep: usize) -> Self {
        Typical { p, min_keep }
    }
}

impl Sampler for Typical {
    fn name(&self) -> &'static str {
        "typical"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.p >= 1.0 || cur_p.data.is_empty() {
            return;
        }
        cur_p.softmax(true);
        let entropy: f32 = cur_p.data.iter().map(|t| -t.p * t.p.ln()).sum();
        let shifted: Vec<f32> = cur_p
            .data
            .iter()
            .map(|t| (-t.p.ln() - entropy).abs())
            .collect();
        let mut indices: Vec<usize> = (0..cur_p.data.len()).collect();
        indices.sort_by(|&a, &b| shifted[a].total_cmp(&shifted[b]));
        let mut cum_sum = 0.0f32;
        let mut last_idx = indices.len();
        for (i, &idx) in indices.iter().enumerate() {
            cum_sum += cur_p.data[idx].p;
            if cum_sum > self.p && (self.min_keep == 0 || i + 1 >= self.min_keep) {
                last_idx = i + 1;
                break;
            }
        }
        cur_p.data = indices[..last_idx].iter().map(|&i| cur_p.data[i]).collect();
        cur_p.sorted = false;
    }
}

/// llama.cpp's `llama_sampler_temp_impl`: divide logits by `temp`; for
/// `temp <= 0` keep only the first highest logit and set the rest to `-inf`.
pub(crate) fn temp_impl(cur_p: &mut TokenDataArray, temp: f32) {
    if cur_p.data.is_empty() {
        return;
    }
    // A positive temperature so small that a logit divided by it is no
    // longer finite (1e-38, say) is greedy: dividing would turn the best
    // logits into +inf (and their differences into NaN).
    let max_abs = cur_p
        .data
        .iter()
        .map(|t| t.logit.abs())
        .filter(|a| a.is_finite())
        .fold(0.0f32, f32::max);
    if temp <= 0.0 || !(max_abs / temp).is_finite() {
        let mut max_i = 0;
        let mut max_l = cur_p.data[0].logit;
        for i in 1..cur_p.data.len() {
            if cur_p.data[i].logit > max_l {
                cur_p.data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
                max_l = cur_p.data[i].logit;
            } else {
                cur_p.data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for t in &mut cur_p.data {
        t.logit /= temp;
    }
}

/// Temperature: `logit /= temp`; `temp <= 0` masks all but the best token.
#[derive(Clone, Copy, Debug)]
pub struct Temp {
    temp: f32,
}

impl Temp {
    /// A temperature sampler.
    pub fn new(temp: f32) -> Self {
        Temp { temp }
    }
}

impl Sampler for Temp {
    fn name(&self) -> &'static str {
        "temp"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        temp_impl(cur_p, self.temp);
    }
}

/// Dynamic temperature (`temp_ext`): with `delta > 0` the temperature is
/// `min_t + (max_t - min_t) * (H / ln n)^exponent`, where
/// `min_t = max(0, temp - delta)`, `max_t = temp + delta`, H the entropy of
/// the softmax and n the number of candidates; otherwise plain [`Temp`].
#[derive(Clone, Copy, Debug)]
pub struct TempExt {
    temp: f32,
    delta: f32,
    exponent: f32,
}

impl TempExt {
    /// A dynamic-temperature sampler (`dynatemp_range` is `delta`).
    pub fn new(temp: f32, delta: f32, exponent: f32) -> Self {
        TempExt {
            temp,
            delta,
            exponent,
        }
    }

    /// The temperature this sampler would use for `cur_p` (`None`: fewer
    /// than two candidates with `delta > 0`, where it does nothing).
    pub fn dyn_temp(&self, cur_p: &TokenDataArray) -> Option<f32> {
        if self.delta <= 0.0 {
            return Some(self.temp);
        }
        if cur_p.data.len() <= 1 {
            return None;
        }
        let mut tmp = cur_p.clone();
        tmp.softmax(true);
        Some(self.dyn_temp_of_softmaxed(&tmp))
    }

    fn dyn_temp_of_softmaxed(&self, cur_p: &TokenDataArray) -> f32 {
        let min_temp = (self.temp - self.delta).max(0.0);
        let max_temp = self.temp + self.delta;
        let max_entropy = -(1.0f32 / cur_p.data.len() as f32).ln();
        let mut entropy = 0.0f32;
        for t in &cur_p.data {
            if t.p > 0.0 {
                entropy -= t.p * t.p.ln();
            }
        }
        let normalized_entropy = entropy / max_entropy;
        min_temp + (max_temp - min_temp) * normalized_entropy.powf(self.exponent)
    }
}

impl Sampler for TempExt {
    fn name(&self) -> &'static str {
        "temp-ext"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.delta <= 0.0 {
            temp_impl(cur_p, self.temp);
            return;
        }
        if cur_p.data.len() <= 1 {
            return;
        }
        cur_p.softmax(true);
        let dyn_temp = self.dyn_temp_of_softmaxed(cur_p);
        temp_impl(cur_p, dyn_temp);
        // Probabilities again, in double as llama.cpp does here.
        let max_l = f64::from(cur_p.data[0].logit);
        let mut cum_sum = 0.0f64;
        for t in &mut cur_p.data {
            let p = (f64::from(t.logit) - max_l).exp();
            t.p = p as f32;
            cum_sum += p;
        }
        for t in &mut cur_p.data {
            t.p = (f64::from(t.p) / cum_sum) as f32;
        }
    }
}

/// Exclude Top Choices: with chance `probability`, drop every candidate with
/// `p >= threshold` except the least probable of them, if at least
/// `min_keep` remain. A no-op for `probability <= 0`, `threshold > 0.5` or
/// fewer than two candidates (without drawing a random number).
#[derive(Clone, Debug)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    min_keep: usize,
    rng: SeededRng,
}

impl Xtc {
    /// An XTC sampler; [`crate::DEFAULT_SEED`] picks a random seed.
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Self {
        Xtc {
            probability,
            threshold,
            min_keep,
            rng: SeededRng::new(seed),
        }
    }
}

impl Sampler for Xtc {
    fn name(&self) -> &'static str {
        "xtc"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.probability <= 0.0 || self.threshold > 0.5 || cur_p.data.len() < 2 {
            return;
        }
        let chance = self.rng.canonical_f32();
        if chance > self.probability {
            return;
        }
        cur_p.softmax(true);
        let mut pos_last = 0;
        for (i, t) in cur_p.data.iter().enumerate() {
            if t.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur_p.data.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur_p.data.drain(..pos_last);
        }
    }

    fn reset(&mut self) {
        self.rng.reset();
    }
}

/// Top-n-sigma: mask to `-inf` every logit below `max - n * sigma` (mean and
/// standard deviation over the logits that are not `-inf`), then softmax.
/// `n <= 0` is a no-op.
#[derive(Clone, Copy, Debug)]
pub struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// A top-n-sigma sampler.
    pub fn new(n: f32) -> Self {
        TopNSigma { n }
    }
}

impl Sampler for TopNSigma {
    fn name(&self) -> &'static str {
        "top-n-sigma"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.n <= 0.0 || cur_p.data.len() <= 1 {
            return;
        }
        let mut max = cur_p.data[0].logit;
        let mut logits_sum = 0.0f32;
        let mut valid_count = 0usize;
        for t in &cur_p.data {
            if t.logit != f32::NEG_INFINITY {
                if t.logit > max {
                    max = t.logit;
                }
                logits_sum += t.logit;
                valid_count += 1;
            }
        }
        let mean = if valid_count > 0 {
            logits_sum / valid_count as f32
        } else {
            0.0
        };
        let mut acc = 0.0f32;
        for t in &cur_p.data {
            if t.logit != f32::NEG_INFINITY {
                // float += double, as in llama.cpp's `acc += pow(x - mean, 2)`
                acc = (f64::from(acc) + f64::from(t.logit - mean).powi(2)) as f32;
            }
        }
        let std = if valid_count > 0 {
            (acc / valid_count as f32).sqrt()
        } else {
            0.0
        };
        for t in &mut cur_p.data {
            if t.logit < max - self.n * std {
                t.logit = f32::NEG_INFINITY;
            }
        }
        cur_p.softmax(true);
    }
}
