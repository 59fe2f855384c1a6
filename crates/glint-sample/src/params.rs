//! `SamplerParams`, glint's `common_params_sampling`: the knobs, llama.cpp's
//! defaults, validation, the chain they build, and the command-line parsers.

use crate::history::{Dry, LogitBias, Penalties};
use crate::mirostat::{Mirostat, MirostatV2};
use crate::rng::DEFAULT_SEED;
use crate::samplers::{Dist, Greedy, MinP, Temp, TempExt, TopK, TopNSigma, TopP, Typical, Xtc};
use crate::{Chain, SampleError, Sampler};

/// A configurable step of the chain: llama.cpp's `common_sampler_type`
/// (without `infill` and `adaptive_p`, which glint does not implement).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplerType {
    /// Repetition/frequency/presence penalties (`penalties`, `e`).
    Penalties,
    /// DRY (`dry`, `d`).
    Dry,
    /// Top-n-sigma (`top_n_sigma`, `s`).
    TopNSigma,
    /// Top-k (`top_k`, `k`).
    TopK,
    /// Locally typical (`typ_p`, `y`).
    TypicalP,
    /// Top-p (`top_p`, `p`).
    TopP,
    /// Min-p (`min_p`, `m`).
    MinP,
    /// XTC (`xtc`, `x`).
    Xtc,
    /// Temperature, dynamic when `dynatemp_range > 0` (`temperature`, `t`).
    Temperature,
}

impl SamplerType {
    /// Every type, in llama.cpp's table order.
    pub const ALL: [SamplerType; 9] = [
        SamplerType::Penalties,
        SamplerType::Dry,
        SamplerType::TopNSigma,
        SamplerType::TopK,
        SamplerType::TypicalP,
        SamplerType::TopP,
        SamplerType::MinP,
        SamplerType::Xtc,
        SamplerType::Temperature,
    ];

    /// llama.cpp's canonical name (`common_sampler_type_to_str`).
    pub fn name(self) -> &'static str {
        match self {
            SamplerType::Penalties => "penalties",
            SamplerType::Dry => "dry",
            SamplerType::TopNSigma => "top_n_sigma",
            SamplerType::TopK => "top_k",
            SamplerType::TypicalP => "typ_p",
            SamplerType::TopP => "top_p",
            SamplerType::MinP => "min_p",
            SamplerType::Xtc => "xtc",
            SamplerType::Temperature => "temperature",
        }
    }

    /// llama.cpp's one-letter code (`common_sampler_type_to_chr`).
    pub fn chr(self) -> char {
        match self {
            SamplerType::Penalties => 'e',
            SamplerType::Dry => 'd',
            SamplerType::TopNSigma => 's',
            SamplerType::TopK => 'k',
            SamplerType::TypicalP => 'y',
            SamplerType::TopP => 'p',
            SamplerType::MinP => 'm',
            SamplerType::Xtc => 'x',
            SamplerType::Temperature => 't',
        }
    }

    /// A canonical or alternative name (`top-k`, `nucleus`, `typical`,
    /// `temp`, ...), as llama.cpp's `--samplers` accepts them.
    pub fn from_name(name: &str) -> Option<SamplerType> {
        let t = match name {
            "penalties" => SamplerType::Penalties,
            "dry" => SamplerType::Dry,
            "top_n_sigma" | "top-n-sigma" => SamplerType::TopNSigma,
            "top_k" | "top-k" => SamplerType::TopK,
            "typ_p" | "typical-p" | "typical" | "typ-p" | "typ" => SamplerType::TypicalP,
            "top_p" | "top-p" | "nucleus" => SamplerType::TopP,
            "min_p" | "min-p" => SamplerType::MinP,
            "xtc" => SamplerType::Xtc,
            "temperature" | "temp" => SamplerType::Temperature,
            _ => return None,
        };
        Some(t)
    }

    /// The type for a one-letter code.
    pub fn from_chr(c: char) -> Option<SamplerType> {
        SamplerType::ALL.into_iter().find(|t| t.chr() == c)
    }
}

/// llama.cpp's default order, `--sampling-seq edskypmxt`:
/// `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`.
pub const DEFAULT_SAMPLERS: [SamplerType; 9] = SamplerType::ALL;

/// Parse a `--samplers` list: names separated by `;` (llama.cpp's canonical
/// and alternative names). Unknown or empty names are an error (llama.cpp
/// warns and skips them).
pub fn parse_sampler_list(s: &str) -> Result<Vec<SamplerType>, SampleError> {
    s.split(';')
        .map(|name| {
            let name = name.trim();
            SamplerType::from_name(name).ok_or_else(|| SampleError::UnknownSampler {
                name: name.to_string(),
            })
        })
        .collect()
}

/// Parse a `--sampling-seq` string of one-letter codes (`edskypmxt`).
/// Unknown letters are an error.
pub fn parse_sampler_seq(s: &str) -> Result<Vec<SamplerType>, SampleError> {
    s.chars()
        .map(|c| {
            SamplerType::from_chr(c).ok_or_else(|| SampleError::UnknownSampler {
                name: c.to_string(),
            })
        })
        .collect()
}

/// One `--logit-bias` entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitBiasEntry {
    /// Token id.
    pub token: u32,
    /// Added to the token's logit; `-inf` bans it.
    pub bias: f32,
}

/// Parse `TOKEN(+|-)BIAS` entries separated by commas, e.g.
/// `"15043+1,2-inf"` (llama.cpp takes one entry per `--logit-bias` flag).
/// NaN and `+inf` biases are rejected; `-inf` bans a token.
pub fn parse_logit_bias(s: &str) -> Result<Vec<LogitBiasEntry>, SampleError> {
    s.split(',')
        .map(|e| parse_logit_bias_entry(e.trim()))
        .collect()
}

fn parse_logit_bias_entry(entry: &str) -> Result<LogitBiasEntry, SampleError> {
    let bad = |reason: &'static str| SampleError::BadLogitBias {
        entry: entry.to_string(),
        reason,
    };
    let digits = entry
        .find(|c: char| !c.is_ascii_digit())
        .ok_or(bad("expected TOKEN+BIAS or TOKEN-BIAS"))?;
    if digits == 0 {
        return Err(bad("expected a token id first"));
    }
    let token: u32 = entry[..digits]
        .parse()
        .map_err(|_| bad("token id does not fit in u32"))?;
    let sign = match entry.as_bytes()[digits] {
        b'+' => 1.0f32,
        b'-' => -1.0f32,
        _ => return Err(bad("expected + or - after the token id")),
    };
    let value = &entry[digits + 1..];
    if value.starts_with(['+', '-']) {
        return Err(bad("one sign only"));
    }
    let magnitude: f32 = value.parse().map_err(|_| bad("bias is not a number"))?;
    let bias = sign * magnitude;
    if bias.is_nan() || bias == f32::INFINITY {
        return Err(bad("bias must be a number or -inf"));
    }
    Ok(LogitBiasEntry { token, bias })
}

/// Sampling parameters: llama.cpp's `common_params_sampling`, same names and
/// defaults (see [`Default`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// RNG seed for dist, XTC and mirostat; [`DEFAULT_SEED`] = random.
    pub seed: u32,
    /// Candidates top-p, min-p, typical and XTC always keep (0 = no minimum).
    pub min_keep: usize,
    /// Top-k; `<= 0` keeps all (default 40).
    pub top_k: i32,
    /// Top-p; 1.0 disables (default 0.95).
    pub top_p: f32,
    /// Min-p; 0.0 disables (default 0.05).
    pub min_p: f32,
    /// XTC chance per step; 0.0 disables (default 0.0).
    pub xtc_probability: f32,
    /// XTC threshold; above 0.5 XTC does nothing (default 0.1).
    pub xtc_threshold: f32,
    /// Locally typical p; 1.0 disables (default 1.0).
    pub typ_p: f32,
    /// Temperature; `<= 0` means greedy (default 0.8).
    pub temp: f32,
    /// Dynamic temperature range: temperatures span `temp ± range` (0 = off).
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent on the normalized entropy (default 1.0).
    pub dynatemp_exponent: f32,
    /// Window of the penalties: last N tokens; 0 disables, -1 = context size
    /// (default 64).
    pub penalty_last_n: i32,
    /// Repetition penalty; 1.0 disables (default 1.0).
    pub penalty_repeat: f32,
    /// Frequency penalty per occurrence (default 0.0).
    pub penalty_freq: f32,
    /// Presence penalty (default 0.0).
    pub penalty_present: f32,
    /// DRY multiplier; 0.0 disables (default 0.0).
    pub dry_multiplier: f32,
    /// DRY base; below 1.0 DRY does nothing (default 1.75).
    pub dry_base: f32,
    /// Repeats up to this length go unpenalized by DRY (default 2).
    pub dry_allowed_length: i32,
    /// DRY window; 0 disables, -1 = context size (default -1).
    pub dry_penalty_last_n: i32,
    /// DRY sequence breakers as token-id sequences (default empty: llama.cpp's
    /// `"\n" ":" "\"" "*"` must be tokenized by the caller, who has the vocab).
    pub dry_sequence_breakers: Vec<Vec<u32>>,
    /// 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 (default 0).
    pub mirostat: i32,
    /// Top-n-sigma; `<= 0` disables (default -1.0).
    pub top_n_sigma: f32,
    /// Mirostat target surprise (default 5.0).
    pub mirostat_tau: f32,
    /// Mirostat learning rate (default 0.1).
    pub mirostat_eta: f32,
    /// The configurable part of the chain, in order.
    pub samplers: Vec<SamplerType>,
    /// Logit biases, applied before everything else.
    pub logit_bias: Vec<LogitBiasEntry>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            seed: DEFAULT_SEED,
            min_keep: 0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            xtc_probability: 0.0,
            xtc_threshold: 0.10,
            typ_p: 1.0,
            temp: 0.80,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            penalty_last_n: 64,
            penalty_repeat: 1.0,
            penalty_freq: 0.0,
            penalty_present: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: -1,
            dry_sequence_breakers: Vec::new(),
            mirostat: 0,
            top_n_sigma: -1.0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            samplers: DEFAULT_SAMPLERS.to_vec(),
            logit_bias: Vec::new(),
        }
    }
}

fn invalid(name: &'static str, value: impl std::fmt::Display, reason: &'static str) -> SampleError {
    SampleError::InvalidParam {
        name,
        value: value.to_string(),
        reason,
    }
}

/// `value` must not be NaN and must satisfy `ok`.
fn check_f32(
    name: &'static str,
    value: f32,
    ok: bool,
    reason: &'static str,
) -> Result<(), SampleError> {
    if value.is_nan() {
        return Err(invalid(name, value, "must be a number, not NaN"));
    }
    if !ok {
        return Err(invalid(name, value, reason));
    }
    Ok(())
}

/// A float parameter's check: its name, value, what it must satisfy, and
/// what the error says when it does not.
type F32Check = (&'static str, f32, fn(f32) -> bool, &'static str);

/// [`check_f32`] on each row, in order: the first failure is the error.
fn check_f32s(rows: &[F32Check]) -> Result<(), SampleError> {
    rows.iter()
        .try_for_each(|&(name, value, ok, reason)| check_f32(name, value, ok(value), reason))
}

/// An integer parameter must be at least `min`.
fn check_min(
    name: &'static str,
    value: i32,
    min: i32,
    reason: &'static str,
) -> Result<(), SampleError> {
    if value < min {
        return Err(invalid(name, value, reason));
    }
    Ok(())
}

/// In (0, 1].
fn open_unit(x: f32) -> bool {
    x > 0.0 && x <= 1.0
}

/// In [0, 1].
fn unit(x: f32) -> bool {
    (0.0..=1.0).contains(&x)
}

/// Finite and >= 0.
fn finite_ge0(x: f32) -> bool {
    x >= 0.0 && x.is_finite()
}

impl SamplerParams {
    /// The `k` of a chain whose first effect on the logits is to keep the
    /// `k` largest: mirostat 0, no logit bias, `temp > 0`, a top-k of
    /// `k > 0`, and before it only samplers these params make no-ops
    /// (penalties, DRY, top-n-sigma). Sampling from those `k` candidates
    /// alone ([`Chain::sample_sorted`](crate::Chain::sample_sorted)) then
    /// picks what the full logits pick, with the same random draws: a
    /// device can hand back `k` candidates instead of the vocabulary.
    pub fn leading_top_k(&self) -> Option<usize> {
        if self.mirostat != 0 || !self.logit_bias.is_empty() || self.temp <= 0.0 || self.top_k <= 0
        {
            return None;
        }
        let penalties_off = self.penalty_last_n == 0
            || (self.penalty_repeat == 1.0
                && self.penalty_freq == 0.0
                && self.penalty_present == 0.0);
        let dry_off =
            self.dry_multiplier == 0.0 || self.dry_base < 1.0 || self.dry_penalty_last_n == 0;
        for &t in &self.samplers {
            match t {
                SamplerType::TopK => return Some(self.top_k as usize),
                SamplerType::Penalties if penalties_off => {}
                SamplerType::Dry if dry_off => {}
                SamplerType::TopNSigma if self.top_n_sigma <= 0.0 => {}
                _ => return None,
            }
        }
        None
    }

    /// Reject values llama.cpp would misbehave on or that make no sense.
    /// The error names the first offending parameter and its value.
    ///
    /// Where glint is stricter than llama.cpp (which accepts anything):
    /// a negative `temp` is rejected (0 means greedy); `top_p` and `typ_p`
    /// must be in (0, 1]; `min_p`, `xtc_probability`, `xtc_threshold` in
    /// [0, 1]; `penalty_repeat > 0`; windows `>= -1`; `mirostat` in {0,1,2};
    /// no NaN or infinite value anywhere; logit biases not NaN or `+inf`.
    // One check a line, in the order the first failure is reported.
    #[rustfmt::skip]
    pub fn validate(&self) -> Result<(), SampleError> {
        check_min("top_k", self.top_k, 0, "must be >= 0 (0 disables)")?;
        check_f32s(&[
            ("top_p", self.top_p, open_unit, "must be in (0, 1]"),
            ("min_p", self.min_p, unit, "must be in [0, 1]"),
            ("typ_p", self.typ_p, open_unit, "must be in (0, 1]"),
            ("xtc_probability", self.xtc_probability, unit, "must be in [0, 1]"),
            ("xtc_threshold", self.xtc_threshold, unit, "must be in [0, 1] (above 0.5 disables XTC)"),
            ("temp", self.temp, finite_ge0, "must be finite and >= 0 (0 = greedy)"),
            ("dynatemp_range", self.dynatemp_range, finite_ge0, "must be finite and >= 0"),
            ("dynatemp_exponent", self.dynatemp_exponent, finite_ge0, "must be finite and >= 0"),
        ])?;
        check_min("penalty_last_n", self.penalty_last_n, -1, "must be >= -1 (-1 = context size)")?;
        check_f32s(&[
            ("penalty_repeat", self.penalty_repeat, |x| x > 0.0 && x.is_finite(), "must be finite and > 0 (1 disables)"),
            ("penalty_freq", self.penalty_freq, f32::is_finite, "must be finite"),
            ("penalty_present", self.penalty_present, f32::is_finite, "must be finite"),
            ("dry_multiplier", self.dry_multiplier, finite_ge0, "must be finite and >= 0 (0 disables)"),
            ("dry_base", self.dry_base, f32::is_finite, "must be finite (below 1 disables)"),
        ])?;
        check_min("dry_allowed_length", self.dry_allowed_length, 0, "must be >= 0")?;
        check_min("dry_penalty_last_n", self.dry_penalty_last_n, -1, "must be >= -1 (-1 = context size)")?;
        if let Some(i) = self.dry_sequence_breakers.iter().position(|b| b.is_empty()) {
            return Err(invalid("dry_sequence_breakers", i, "breaker at this index is empty"));
        }
        if !(0..=2).contains(&self.mirostat) {
            return Err(invalid("mirostat", self.mirostat, "must be 0 (off), 1 or 2"));
        }
        check_f32s(&[
            ("top_n_sigma", self.top_n_sigma, f32::is_finite, "must be finite (<= 0 disables)"),
            ("mirostat_tau", self.mirostat_tau, finite_ge0, "must be finite and >= 0"),
            ("mirostat_eta", self.mirostat_eta, finite_ge0, "must be finite and >= 0"),
        ])?;
        for lb in &self.logit_bias {
            if lb.bias.is_nan() || lb.bias == f32::INFINITY {
                return Err(invalid(
                    "logit_bias",
                    format!("{}{:+}", lb.token, lb.bias),
                    "bias must be a number or -inf",
                ));
            }
        }
        Ok(())
    }

    /// Validate, then build the chain `common_sampler_init` builds:
    ///
    /// - `logit-bias` first, when there are biases;
    /// - mirostat 0: the samplers of [`samplers`](Self::samplers) in order
    ///   (`temperature` is `temp-ext`), then `dist(seed)`;
    /// - mirostat 1: `temp`, `mirostat(n_vocab, seed, tau, eta, m = 100)`;
    /// - mirostat 2: `temp`, `mirostat-v2(seed, tau, eta)`.
    ///
    /// With `temp <= 0` the selecting sampler (dist or mirostat) is replaced
    /// by `greedy`. llama.cpp keeps it, but its `temp <= 0` leaves a single
    /// finite logit, so it picks the same token; greedy makes that explicit
    /// and consumes no random numbers.
    ///
    /// `penalty_last_n` and `dry_penalty_last_n` of -1 become `n_ctx`, as
    /// `common_init_from_params` does. A logit-bias token `>= n_vocab` is an
    /// error (llama.cpp silently ignores it).
    pub fn build_chain(&self, n_vocab: usize, n_ctx: usize) -> Result<Chain, SampleError> {
        self.validate()?;
        if let Some(lb) = self
            .logit_bias
            .iter()
            .find(|lb| lb.token as usize >= n_vocab)
        {
            return Err(SampleError::TokenOutOfRange {
                what: "logit_bias",
                token: lb.token,
                n_vocab,
            });
        }
        let mut chain = Chain::new();
        if !self.logit_bias.is_empty() {
            chain.push(Box::new(LogitBias::new(
                self.logit_bias
                    .iter()
                    .map(|lb| (lb.token, lb.bias))
                    .collect(),
            )));
        }
        if self.mirostat == 0 {
            for &t in &self.samplers {
                chain.push(self.sampler(t, n_ctx));
            }
        } else {
            chain.push(Box::new(Temp::new(self.temp)));
        }
        chain.push(self.selector(n_vocab));
        Ok(chain)
    }

    /// The sampler of step `t` of a mirostat-0 chain. A window of -1 is
    /// `n_ctx`.
    fn sampler(&self, t: SamplerType, n_ctx: usize) -> Box<dyn Sampler> {
        let resolve = |n: i32| if n == -1 { n_ctx } else { n.max(0) as usize };
        match t {
            SamplerType::Penalties => Box::new(Penalties::new(
                resolve(self.penalty_last_n),
                self.penalty_repeat,
                self.penalty_freq,
                self.penalty_present,
            )),
            SamplerType::Dry => Box::new(Dry::new(
                n_ctx,
                self.dry_multiplier,
                self.dry_base,
                self.dry_allowed_length,
                i32::try_from(resolve(self.dry_penalty_last_n)).unwrap_or(i32::MAX),
                &self.dry_sequence_breakers,
            )),
            SamplerType::TopNSigma => Box::new(TopNSigma::new(self.top_n_sigma)),
            SamplerType::TopK => Box::new(TopK::new(self.top_k)),
            SamplerType::TypicalP => Box::new(Typical::new(self.typ_p, self.min_keep)),
            SamplerType::TopP => Box::new(TopP::new(self.top_p, self.min_keep)),
            SamplerType::MinP => Box::new(MinP::new(self.min_p, self.min_keep)),
            SamplerType::Xtc => Box::new(Xtc::new(
                self.xtc_probability,
                self.xtc_threshold,
                self.min_keep,
                self.seed,
            )),
            SamplerType::Temperature => Box::new(TempExt::new(
                self.temp,
                self.dynatemp_range,
                self.dynatemp_exponent,
            )),
        }
    }

    /// The selecting sampler that ends the chain: greedy for `temp <= 0`,
    /// else dist or the mirostat asked for.
    fn selector(&self, n_vocab: usize) -> Box<dyn Sampler> {
        if self.temp <= 0.0 {
            return Box::new(Greedy);
        }
        match self.mirostat {
            0 => Box::new(Dist::new(self.seed)),
            1 => Box::new(Mirostat::new(
                i32::try_from(n_vocab).unwrap_or(i32::MAX),
                self.seed,
                self.mirostat_tau,
                self.mirostat_eta,
                100,
            )),
            _ => Box::new(MirostatV2::new(
                self.seed,
                self.mirostat_tau,
                self.mirostat_eta,
            )),
        }
    }
}
