//! `generate --logprobs N`: one JSON object per generated token, with the
//! log-probability of the token and of the `N` most likely ones, from the
//! raw logits (before any sampler changed them).

use glint::sample::MAX_TOP_LOGPROBS;
use glint::Tokenizer;
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

/// The token's text with special tokens written out (`<|im_end|>`); bytes
/// that are not UTF-8 on their own (half a character) become U+FFFD.
fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, true)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// `{"token", "text", "logprob", "top": [{"token", "text", "logprob"}, ...]}`
/// for `token` sampled from `logits`.
pub fn line(tok: &Tokenizer, logits: &[f32], token: u32, n_top: usize) -> Result<Value, String> {
    let lp = glint::sample::logprobs(logits, token, n_top).map_err(|e| e.to_string())?;
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(id, logprob)| json!({ "token": id, "text": piece(tok, id), "logprob": logprob }))
        .collect();
    Ok(json!({
        "token": token,
        "text": piece(tok, token),
        "logprob": lp.logprob,
        "top": top,
    }))
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
