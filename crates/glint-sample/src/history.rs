//! Samplers that depend on the emitted tokens (penalties, DRY) and the
//! static logit bias.

use std::collections::{HashMap, VecDeque};

use crate::{Sampler, TokenDataArray};

/// A fixed-capacity window of the most recent tokens (llama.cpp's
/// `ring_buffer`); capacity 0 keeps nothing.
#[derive(Clone, Debug)]
struct Window {
    cap: usize,
    buf: VecDeque<u32>,
}

impl Window {
    fn new(cap: usize) -> Self {
        Window {
            cap,
            buf: VecDeque::with_capacity(cap.min(1 << 16)),
        }
    }

    /// Push, returning the token that fell out of a full window.
    fn push(&mut self, token: u32) -> Option<u32> {
        if self.cap == 0 {
            return None;
        }
        let old = if self.buf.len() >= self.cap {
            self.buf.pop_front()
        } else {
            None
        };
        self.buf.push_back(token);
        old
    }

    /// The `i`-th most recent token (`rat(0)` is the last one).
    fn rat(&self, i: usize) -> u32 {
        self.buf[self.buf.len() - 1 - i]
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn clear(&mut self) {
        self.buf.clear();
    }
}

/// Repetition, frequency and presence penalties over the last
/// `penalty_last_n` accepted tokens. For a token seen `count > 0` times in
/// the window: a logit `<= 0` is multiplied by `penalty_repeat`, a positive
/// one divided by it; then `count * penalty_freq + penalty_present` is
/// subtracted. Other tokens are untouched.
#[derive(Clone, Debug)]
pub struct Penalties {
    penalty_last_n: usize,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
    prev: Window,
    token_count: HashMap<u32, u32>,
}

impl Penalties {
    /// Penalties over a window of `penalty_last_n` tokens (0 disables).
    pub fn new(
        penalty_last_n: usize,
        penalty_repeat: f32,
        penalty_freq: f32,
        penalty_present: f32,
    ) -> Self {
        Penalties {
            penalty_last_n,
            penalty_repeat,
            penalty_freq,
            penalty_present,
            prev: Window::new(penalty_last_n),
            token_count: HashMap::new(),
        }
    }

    /// How often `token` occurs in the current window.
    pub fn count(&self, token: u32) -> u32 {
        self.token_count.get(&token).copied().unwrap_or(0)
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &'static str {
        "penalties"
    }

    fn accept(&mut self, token: u32) {
        if self.penalty_last_n == 0 {
            return;
        }
        *self.token_count.entry(token).or_insert(0) += 1;
        if let Some(old) = self.prev.push(token) {
            if let Some(c) = self.token_count.get_mut(&old) {
                *c -= 1;
                if *c == 0 {
                    self.token_count.remove(&old);
                }
            }
        }
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.penalty_last_n == 0
            || (self.penalty_repeat == 1.0
                && self.penalty_freq == 0.0
                && self.penalty_present == 0.0)
        {
            return;
        }
        for t in &mut cur_p.data {
            let Some(&count) = self.token_count.get(&t.id) else {
                continue;
            };
            // Dividing a negative logit would make the token more likely.
            if t.logit <= 0.0 {
                t.logit *= self.penalty_repeat;
            } else {
                t.logit /= self.penalty_repeat;
            }
            t.logit -= count as f32 * self.penalty_freq
                + if count > 0 { self.penalty_present } else { 0.0 };
        }
        cur_p.sorted = false;
    }

    fn reset(&mut self) {
        self.prev.clear();
        self.token_count.clear();
    }
}

/// Add a fixed bias to given tokens' logits (`-inf` bans a token).
/// Biases for ids not among the candidates are ignored; a token listed twice
/// gets both biases, as in llama.cpp.
#[derive(Clone, Debug)]
pub struct LogitBias {
    biases: Vec<(u32, f32)>,
}

impl LogitBias {
    /// A logit-bias sampler from `(token, bias)` pairs.
    pub fn new(biases: Vec<(u32, f32)>) -> Self {
        LogitBias { biases }
    }
}

impl Sampler for LogitBias {
    fn name(&self) -> &'static str {
        "logit-bias"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if self.biases.is_empty() {
            return;
        }
        let mut to_search = Vec::new();
        for &(token, bias) in &self.biases {
            // Fast path: an array straight from the logits has id == index.
            match cur_p.data.get_mut(token as usize) {
                Some(t) if t.id == token => t.logit += bias,
                _ => to_search.push((token, bias)),
            }
        }
        for t in &mut cur_p.data {
            if let Some(&(_, bias)) = to_search.iter().find(|(tok, _)| *tok == t.id) {
                t.logit += bias;
            }
        }
        // llama.cpp leaves `sorted` alone; a biased array is no longer known
        // to be sorted (matters only when placed after a sorting sampler).
        cur_p.sorted = false;
    }
}

/// Longest tail kept of a multi-token sequence breaker (llama.cpp's
/// `MAX_SEQ_LEN`).
pub const DRY_MAX_BREAKER_TAIL: usize = 20;

/// DRY ("Don't Repeat Yourself"): a token that would extend a sequence
/// already seen in the last `penalty_last_n` tokens, by a repeat of length
/// `len >= allowed_length`, loses `multiplier * base^(len - allowed_length)`
/// from its logit. Sequence breakers cut the repeats short.
///
/// llama.cpp takes breakers as strings and matches them against every
/// token's text; glint's sampler crate has no vocabulary, so the caller
/// passes breakers already tokenized, as token-id sequences (llama.cpp's
/// `llama_sampler_init_dry_testing` form). The tail after the first token is
/// cut to [`DRY_MAX_BREAKER_TAIL`] tokens.
#[derive(Clone, Debug)]
pub struct Dry {
    total_context_size: usize,
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    penalty_last_n: i32,
    /// head token -> tails (empty tail: a single-token breaker).
    breakers: HashMap<u32, Vec<Vec<u32>>>,
    last_tokens: Window,
    repeat_count: Vec<i32>,
    max_token_repeat: HashMap<u32, i32>,
}

impl Dry {
    /// A DRY sampler. `total_context_size` is what `penalty_last_n == -1`
    /// means; `multiplier == 0`, `base < 1` or `penalty_last_n == 0` disable
    /// it. Empty breaker sequences are skipped.
    pub fn new(
        total_context_size: usize,
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        penalty_last_n: i32,
        seq_breakers: &[Vec<u32>],
    ) -> Self {
        let enabled = multiplier != 0.0 && base >= 1.0 && penalty_last_n != 0;
        let effective_last_n = effective_last_n(penalty_last_n, total_context_size);
        let mut breakers: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        if enabled {
            for seq in seq_breakers {
                if let Some((&head, tail)) = seq.split_first() {
                    let tail = tail[..tail.len().min(DRY_MAX_BREAKER_TAIL)].to_vec();
                    let tails = breakers.entry(head).or_default();
                    if !tails.contains(&tail) {
                        tails.push(tail);
                    }
                }
            }
        }
        Dry {
            total_context_size,
            multiplier,
            base,
            allowed_length,
            penalty_last_n,
            breakers,
            last_tokens: Window::new(if enabled { effective_last_n } else { 0 }),
            repeat_count: Vec::new(),
            max_token_repeat: HashMap::new(),
        }
    }

    fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n != 0
    }
}

impl Sampler for Dry {
    fn name(&self) -> &'static str {
        "dry"
    }

    fn accept(&mut self, token: u32) {
        if !self.enabled() {
            return;
        }
        self.last_tokens.push(token);
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        if !self.enabled() {
            return;
        }
        let last_n_repeat = self
            .last_tokens
            .len()
            .min(effective_last_n(
                self.penalty_last_n,
                self.total_context_size,
            ))
            .min(self.total_context_size);
        let last_n_repeat = i32::try_from(last_n_repeat).unwrap_or(i32::MAX);
        if last_n_repeat <= self.allowed_length {
            return;
        }
        let n = last_n_repeat as usize;
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        self.max_token_repeat.clear();

        let rep_limit = self.rep_limit(n);
        if rep_limit < self.allowed_length {
            return;
        }
        self.count_repeats(n, rep_limit);
        self.max_repeats(n);
        self.penalize(cur_p);
    }

    fn reset(&mut self) {
        self.last_tokens.clear();
        self.repeat_count.clear();
        self.max_token_repeat.clear();
    }
}

/// The window a `penalty_last_n` of -1 (all of `total_context_size`) or
/// more stands for.
fn effective_last_n(penalty_last_n: i32, total_context_size: usize) -> usize {
    if penalty_last_n == -1 {
        total_context_size
    } else {
        penalty_last_n.max(0) as usize
    }
}

/// The four steps of [`Dry::apply`] over the last `n` tokens.
impl Dry {
    /// Step 1: the nearest sequence breaker limits how far back a repeat may
    /// reach.
    fn rep_limit(&self, n: usize) -> i32 {
        let lt = &self.last_tokens;
        for i in 0..n {
            let Some(tails) = self.breakers.get(&lt.rat(i)) else {
                continue;
            };
            let mut longest_match: i32 = -1;
            for tail in tails {
                let seq_len = tail.len() as i32;
                if seq_len > longest_match && tail.len() <= i {
                    let matches = tail
                        .iter()
                        .enumerate()
                        .all(|(off, &tok)| tok == lt.rat(i - off - 1));
                    if matches {
                        longest_match = seq_len;
                    }
                }
            }
            if longest_match >= 0 {
                return i as i32 - longest_match;
            }
        }
        n as i32
    }

    /// Step 2: Z-algorithm over the reversed window; repeat_count[last - k]
    /// is the length of the longest suffix of the context that also ends
    /// k tokens before the end.
    fn count_repeats(&mut self, n: usize, rep_limit: i32) {
        let lt = &self.last_tokens;
        let last = n - 1;
        let mut rt = 0usize;
        let mut ltb = 0usize;
        for k in 1..n {
            if k > rt {
                let mut m = 0usize;
                while m + k < n && lt.rat(m) == lt.rat(m + k) {
                    m += 1;
                }
                self.repeat_count[last - k] = (m as i32).min(rep_limit);
                if m > 0 {
                    ltb = k;
                    rt = k + m - 1;
                }
            } else {
                let p = k - ltb;
                let right_part_len = (rt - k + 1) as i32;
                if self.repeat_count[last - p] < right_part_len {
                    self.repeat_count[last - k] = self.repeat_count[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && lt.rat(i) == lt.rat(i - k) {
                        i += 1;
                    }
                    self.repeat_count[last - k] = ((i - k) as i32).min(rep_limit);
                    ltb = k;
                    rt = i - 1;
                }
            }
        }
    }

    /// Step 3: the token after each repeat would extend it.
    fn max_repeats(&mut self, n: usize) {
        let lt = &self.last_tokens;
        for i in 0..n - 1 {
            let repeat_len = self.repeat_count[i];
            if repeat_len >= self.allowed_length {
                let token = lt.rat(n - 2 - i);
                let e = self.max_token_repeat.entry(token).or_insert(repeat_len);
                if *e < repeat_len {
                    *e = repeat_len;
                }
            }
        }
    }

    /// Step 4: penalize, clamping the exponent so base^exp stays finite.
    fn penalize(&self, cur_p: &mut TokenDataArray) {
        const FLOAT_MAX_LOG: f32 = 88.722_84;
        let max_exponent = if self.base > 1.000_001 {
            (FLOAT_MAX_LOG / self.base.ln()) as i32
        } else {
            0
        };
        for t in &mut cur_p.data {
            let Some(&max_repeat) = self.max_token_repeat.get(&t.id) else {
                continue;
            };
            let single_token_breaker = self
                .breakers
                .get(&t.id)
                .is_some_and(|tails| tails.iter().any(|tail| tail.is_empty()));
            if single_token_breaker {
                continue;
            }
            let mut repeat_exp = max_repeat - self.allowed_length;
            if max_exponent > 0 && repeat_exp > max_exponent {
                repeat_exp = max_exponent;
            }
            // float * pow(float, int) is computed in double in C++.
            let penalty =
                (f64::from(self.multiplier) * f64::from(self.base).powi(repeat_exp)) as f32;
            t.logit -= penalty;
        }
        cur_p.sorted = false;
    }
}
