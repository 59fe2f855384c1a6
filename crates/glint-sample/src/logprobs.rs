//! Log-probabilities of the raw model distribution, for an OpenAI-style
//! `logprobs` / `top_logprobs` response.

use crate::SampleError;

/// Most alternatives [`logprobs`] returns (OpenAI's `top_logprobs` cap).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The log-probability of a token and of the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The token asked about (usually the sampled one).
    pub token: u32,
    /// Its natural-log probability, `<= 0`.
    pub logprob: f32,
    /// The `n_top` most likely tokens, most likely first; ties by ascending id.
    pub top: Vec<(u32, f32)>,
}

/// `log_softmax(logits)[token]` and the `n_top` best entries, computed in f64
/// from the raw logits: the model's distribution before any sampler (this is
/// what llama.cpp's server reports as well). Since it does not depend on
/// sampler state, it may be called before or after the chain accepts.
///
/// Errors: empty logits, a NaN or `+inf` logit, all logits `-inf`, `token`
/// outside the logits, `n_top > MAX_TOP_LOGPROBS`.
pub fn logprobs(logits: &[f32], token: u32, n_top: usize) -> Result<TokenLogprobs, SampleError> {
    crate::chain::check_logits(logits)?;
    if n_top > MAX_TOP_LOGPROBS {
        return Err(SampleError::InvalidParam {
            name: "n_top",
            value: n_top.to_string(),
            reason: "at most 20 alternatives (MAX_TOP_LOGPROBS)",
        });
    }
    let Some(&token_logit) = logits.get(token as usize) else {
        return Err(SampleError::TokenOutOfRange {
            what: "logprobs token",
            token,
            n_vocab: logits.len(),
        });
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return Err(SampleError::AllMasked);
    }
    let max = f64::from(max);
    let sum: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    let log_z = max + sum.ln();
    let lp = |l: f32| (f64::from(l) - log_z) as f32;

    // Keep the n_top best (logit desc, id asc) by insertion: n_top <= 20.
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n_top + 1);
    if n_top > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() == n_top && l <= top[n_top - 1].1 {
                continue; // ties keep the lower id, already in
            }
            let pos = top.partition_point(|&(_, tl)| tl >= l);
            top.insert(pos, (i as u32, l));
            top.truncate(n_top);
        }
    }
    Ok(TokenLogprobs {
        token,
        logprob: lp(token_logit),
        top: top.into_iter().map(|(id, l)| (id, lp(l))).collect(),
    })
}
