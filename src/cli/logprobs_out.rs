//! `generate --logprobs N`: one JSON object per generated token, with the
//! log-probability of the token and of the `N` most likely ones, from the
//! raw logits (before any sampler changed them), as the engine reports them.

use glint::engine::TokenLogprob;
use glint::sample::MAX_TOP_LOGPROBS;
use serde_json::{json, Value};

/// `--logprobs N`, checked: `0..=20` (OpenAI's `top_logprobs` cap).
pub fn parse_n(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MAX_TOP_LOGPROBS => Ok(n),
        _ => Err(format!(
            "--logprobs: `{s}` is not a number of alternatives from 0 to {MAX_TOP_LOGPROBS}"
        )),
    }
}

/// `{"token", "text", "logprob", "top": [{"token", "text", "logprob"}, ...]}`
/// (texts with special tokens written out, `<|im_end|>`; half a character
/// becomes U+FFFD).
pub fn line(lp: &TokenLogprob) -> Value {
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|(id, text, logprob)| json!({ "token": id, "text": text, "logprob": logprob }))
        .collect();
    json!({
        "token": lp.token,
        "text": lp.text,
        "logprob": lp.logprob,
        "top": top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_capped_at_twenty() {
        assert_eq!(parse_n("0"), Ok(0));
        assert_eq!(parse_n("20"), Ok(20));
        for bad in ["21", "-1", "x", ""] {
            assert!(parse_n(bad).unwrap_err().contains("--logprobs"), "{bad}");
        }
    }
}
