//! Token sampling for glint, with llama.cpp's samplers and semantics.
//!
//! A step of generation turns the model's logits into one token. As in
//! llama.cpp, this is a [`Chain`] of [`Sampler`]s over a
//! [`TokenDataArray`]: each sampler filters, rescales or reorders the
//! candidates, and the last one selects (`dist`, `greedy`, `mirostat`).
//! After a token is emitted the chain `accept`s it so history-keeping
//! samplers (penalties, DRY) see it.
//!
//! [`SamplerParams`] mirrors `common_params_sampling` (names, defaults, the
//! default order `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`)
//! and builds the chain `common_sampler_init` builds.
//!
//! Why follow llama.cpp so closely: users come with llama.cpp settings and
//! expect them to mean the same thing. The random draws use llama.cpp's
//! generator (`std::mt19937`) and libstdc++'s conversions (see [`rng`]), so
//! seeds reproduce llama.cpp-on-GCC's draws; the samplers keep its
//! arithmetic and candidate order. Ties in sorting are broken by ascending
//! token id, where llama.cpp's order is unspecified.
//!
//! Where glint differs from llama.cpp, and why:
//!
//! - `temp <= 0` builds a chain ending in `greedy` instead of `dist` or
//!   mirostat (llama.cpp's temperature masks all but one token, so the pick
//!   is the same; greedy states it and draws no random numbers).
//! - [`SamplerParams::validate`] rejects what llama.cpp silently accepts:
//!   negative `temp`, out-of-range probabilities, NaN, unknown sampler names,
//!   logit-bias tokens outside the vocabulary.
//! - DRY sequence breakers are token-id sequences supplied by the caller;
//!   llama.cpp matches breaker strings against token text, which needs the
//!   vocabulary this crate does not have.
//! - Sorting ties are broken by ascending id; top-p sorts fully instead of
//!   llama.cpp's bucket heuristic (same result, slower on huge vocabularies);
//!   `logit-bias` clears `sorted` when it changes logits.
//! - `infill`, `adaptive_p`/power-law and grammar samplers are not here.
//!
//! ```
//! use glint_sample::{SamplerParams, Sampler};
//! let params = SamplerParams { seed: 42, ..SamplerParams::default() };
//! let mut chain = params.build_chain(4, 4096).unwrap();
//! let token = chain.sample(&[0.1, 2.0, -1.0, 0.5]).unwrap();
//! assert!(token < 4);
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod chain;
mod history;
mod logprobs;
mod mirostat;
mod params;
pub mod rng;
mod samplers;
mod token;

pub use chain::{Chain, Sampler, SamplerClone};
pub use history::{Dry, LogitBias, Penalties, DRY_MAX_BREAKER_TAIL};
pub use logprobs::{logprobs, post_sampling_logprobs, TokenLogprobs, MAX_TOP_LOGPROBS};
pub use mirostat::{Mirostat, MirostatV2};
pub use params::{
    parse_logit_bias, parse_sampler_list, parse_sampler_seq, LogitBiasEntry, SamplerParams,
    SamplerType, DEFAULT_SAMPLERS,
};
pub use rng::DEFAULT_SEED;
pub use samplers::{Dist, Greedy, MinP, Temp, TempExt, TopK, TopNSigma, TopP, Typical, Xtc};
pub use token::{TokenData, TokenDataArray};

/// Errors of glint-sample. Each names the parameter or input at fault and
/// the value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SampleError {
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameter {name} = {value}: {reason}")]
    InvalidParam {
        /// The parameter, by its llama.cpp name (`top_p`, `temp`, ...).
        name: &'static str,
        /// The offending value, printed.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
    /// No logits were given.
    #[error("empty logits: nothing to sample from")]
    EmptyLogits,
    /// A logit is NaN or `+inf` (`-inf` is a legal mask).
    #[error("logit of token {token} is {value}: logits must be finite or -inf")]
    BadLogit {
        /// The token id (index into the logits).
        token: u32,
        /// Its logit.
        value: f32,
    },
    /// Every logit is `-inf`.
    #[error("every logit is -inf: no token has nonzero probability")]
    AllMasked,
    /// A token id does not exist in the vocabulary.
    #[error("{what}: token {token} out of range for n_vocab {n_vocab}")]
    TokenOutOfRange {
        /// Where the token came from.
        what: &'static str,
        /// The token id.
        token: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// The chain ran but no sampler selected a token.
    #[error("no token selected by chain `{chain}`: it needs a selecting sampler last (dist, greedy, mirostat)")]
    NoSelection {
        /// The chain, described as `logits -> a -> b`.
        chain: String,
    },
    /// A sampler name or letter is not known.
    #[error("unknown sampler {name:?}")]
    UnknownSampler {
        /// The name or letter as given.
        name: String,
    },
    /// A `--logit-bias` entry does not parse.
    #[error("bad logit bias {entry:?}: {reason}")]
    BadLogitBias {
        /// The entry as given.
        entry: String,
        /// What is wrong.
        reason: &'static str,
    },
}
