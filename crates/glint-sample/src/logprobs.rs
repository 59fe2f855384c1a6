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
/// The sampled token's log-probability and the `n_top` best, over the
/// distribution the chain drew from (llama-server's `post_sampling_probs`):
/// a softmax of the candidates' final logits (`cur_p` as
/// [`crate::Chain::apply_logits`] leaves it: after penalties, truncation and
/// temperature), masked candidates left out. Alternatives of probability 0
/// are not listed, so fewer than `n_top` may come back.
///
/// Errors: `n_top > MAX_TOP_LOGPROBS`, every candidate masked, `token` not
/// among the candidates.
pub fn post_sampling_logprobs(
    cur_p: &crate::TokenDataArray,
    token: u32,
    n_top: usize,
) -> Result<TokenLogprobs, SampleError> {
    if n_top > MAX_TOP_LOGPROBS {
        return Err(SampleError::InvalidParam {
            name: "n_top",
            value: n_top.to_string(),
            reason: "at most 20 alternatives (MAX_TOP_LOGPROBS)",
        });
    }
    let live: Vec<(u32, f32)> = cur_p
        .data
        .iter()
        .filter(|d| d.logit > f32::NEG_INFINITY)
        .map(|d| (d.id, d.logit))
        .collect();
    let max = live.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return Err(SampleError::AllMasked);
    }
    let max = f64::from(max);
    let sum: f64 = live.iter().map(|&(_, l)| (f64::from(l) - max).exp()).sum();
    let log_z = max + sum.ln();
    let lp = |l: f32| (f64::from(l) - log_z) as f32;
    let Some(&(_, token_logit)) = live.iter().find(|x| x.0 == token) else {
        return Err(SampleError::TokenOutOfRange {
            what: "post-sampling token",
            token,
            n_vocab: live.len(),
        });
    };
    let mut top: Vec<(u32, f32)> = live
        .iter()
        .map(|&(id, l)| (id, lp(l)))
        .filter(|&(_, l)| l.exp() > 0.0)
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(n_top);
    Ok(TokenLogprobs {
        token,
        logprob: lp(token_logit),
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TokenData, TokenDataArray};

    #[test]
    fn post_sampling_probs_renormalise_over_the_unmasked_candidates() {
        let data = [(3, 2.0f32), (5, f32::NEG_INFINITY), (7, 1.0), (9, 2.0)]
            .iter()
            .map(|&(id, logit)| TokenData { id, logit, p: 0.0 })
            .collect();
        let cur = TokenDataArray {
            data,
            selected: Some(0),
            sorted: false,
        };
        let l = post_sampling_logprobs(&cur, 7, 5).unwrap();
        let z = 2.0 * 2f64.exp() + 1f64.exp();
        assert!((f64::from(l.logprob) - (1.0 - z.ln())).abs() < 1e-6);
        // Three live candidates, best first, ties by id; the masked one is
        // not listed.
        assert_eq!(l.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![3, 9, 7]);
        let total: f64 = l.top.iter().map(|t| f64::from(t.1).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert!(post_sampling_logprobs(&cur, 5, 2).is_err());
        assert_eq!(post_sampling_logprobs(&cur, 3, 1).unwrap().top.len(), 1);
    }
}
