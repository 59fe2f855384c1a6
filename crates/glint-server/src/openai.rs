//! Responses in OpenAI's shapes: a whole completion, or the chunks of a
//! stream, for chat (`chat.completion[.chunk]`) and text
//! (`text_completion`) alike.

use glint::engine::{FinishReason, StopReason, TokenLogprob, Usage};
use serde_json::{json, Value};

use crate::request::Endpoint;

/// One choice of a whole response.
#[derive(Clone, Debug, Default)]
pub struct Choice {
    /// Its text.
    pub text: String,
    /// Its tokens' log-probabilities (when asked for).
    pub logprobs: Vec<TokenLogprob>,
    /// Why it finished.
    pub reason: Option<FinishReason>,
    /// Its counts.
    pub usage: Usage,
    /// Its token ids.
    pub tokens: Vec<u32>,
    /// Why it finished, in detail.
    pub stop: Option<StopReason>,
    /// When its first token and its end came.
    pub first_at: Option<std::time::Instant>,
    pub done_at: Option<std::time::Instant>,
}

/// The usage of a request of several choices: the prompt once, the
/// completions summed.
pub fn total_usage(choices: &[Choice]) -> Usage {
    let first = choices.first().map(|c| c.usage).unwrap_or_default();
    Usage {
        completion_tokens: choices.iter().map(|c| c.usage.completion_tokens).sum(),
        ..first
    }
}

/// What every response of one request repeats.
#[derive(Clone, Debug)]
pub struct Meta {
    /// `chatcmpl-N` or `cmpl-N`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model's name.
    pub model: String,
    /// Which endpoint.
    pub endpoint: Endpoint,
}

impl Meta {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    pub(crate) fn wrap(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "glint",
            "choices": choices,
        })
    }

    /// A whole (non-streamed) response: one entry per choice, `usage`
    /// summed over them (the prompt counted once).
    /// A chat's answers are taken apart by `parser` (tool calls,
    /// reasoning) when given.
    pub fn complete(
        &self,
        choices: &[Choice],
        want_logprobs: bool,
        parser: Option<&glint::chat::tools::OutputParser>,
    ) -> Value {
        let list: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let lp = want_logprobs.then(|| self.logprobs(&c.logprobs, 0));
                let mut reason = c.reason.map(FinishReason::as_str);
                match self.endpoint {
                    Endpoint::Chat => {
                        let message = match parser {
                            Some(p) => {
                                let (m, calls) = crate::tools::message(p, &c.text);
                                if calls {
                                    reason = Some("tool_calls");
                                }
                                m
                            }
                            None => json!({ "role": "assistant", "content": c.text }),
                        };
                        json!({
                            "index": index,
                            "message": message,
                            "logprobs": lp,
                            "finish_reason": reason,
                        })
                    }
                    Endpoint::Completion => json!({
                        "index": index,
                        "text": c.text,
                        "logprobs": lp,
                        "finish_reason": reason,
                    }),
                }
            })
            .collect();
        let mut v = self.wrap(false, json!(list));
        v["usage"] = usage_json(&total_usage(choices));
        v
    }

    /// The first chunk of a chat stream's choice `index`: the role, no
    /// text yet.
    pub fn role_chunk(&self, index: usize) -> Value {
        self.wrap(
            true,
            json!([{
                "index": index,
                "delta": { "role": "assistant", "content": null },
                "logprobs": null,
                "finish_reason": null,
            }]),
        )
    }

    /// A chunk carrying `text` (and the logprobs of its tokens);
    /// `offset` is where the text starts in the whole completion.
    pub fn delta_chunk(
        &self,
        index: usize,
        text: &str,
        logprobs: Option<&[TokenLogprob]>,
        offset: usize,
    ) -> Value {
        let lp = logprobs.map(|l| self.logprobs(l, offset));
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": index,
                "delta": { "content": text },
                "logprobs": lp,
                "finish_reason": null,
            }),
            Endpoint::Completion => json!({
                "index": index,
                "text": text,
                "logprobs": lp,
                "finish_reason": null,
            }),
        };
        self.wrap(true, json!([choice]))
    }

    /// A chat chunk carrying `delta` (content, reasoning or a call) and
    /// the logprobs of the tokens that made it.
    pub fn delta_value(
        &self,
        index: usize,
        delta: Value,
        logprobs: Option<&[TokenLogprob]>,
    ) -> Value {
        let lp = logprobs.map(|l| self.logprobs(l, 0));
        self.wrap(
            true,
            json!([{
                "index": index,
                "delta": delta,
                "logprobs": lp,
                "finish_reason": null,
            }]),
        )
    }

    /// The chunk that says why choice `index` ends (`reason` as OpenAI
    /// writes it: `stop`, `length`, `tool_calls`).
    pub fn finish_chunk(&self, index: usize, reason: &str) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": index,
                "delta": {},
                "logprobs": null,
                "finish_reason": reason,
            }),
            Endpoint::Completion => json!({
                "index": index,
                "text": "",
                "logprobs": null,
                "finish_reason": reason,
            }),
        };
        self.wrap(true, json!([choice]))
    }

    /// The `stream_options.include_usage` chunk: no choices, the usage.
    pub fn usage_chunk(&self, usage: &Usage) -> Value {
        let mut v = self.wrap(true, json!([]));
        v["usage"] = usage_json(usage);
        v
    }

    /// Chat: `{"content": [{token, logprob, bytes, top_logprobs}]}`;
    /// completions: `{tokens, token_logprobs, top_logprobs, text_offset}`.
    fn logprobs(&self, l: &[TokenLogprob], offset: usize) -> Value {
        match self.endpoint {
            Endpoint::Chat => {
                let content: Vec<Value> = l
                    .iter()
                    .map(|t| {
                        let top: Vec<Value> = t
                            .top
                            .iter()
                            .map(|(_, s, lp)| json!({"token": s, "logprob": lp, "bytes": s.as_bytes()}))
                            .collect();
                        json!({
                            "token": t.text,
                            "logprob": t.logprob,
                            "bytes": t.text.as_bytes(),
                            "top_logprobs": top,
                        })
                    })
                    .collect();
                json!({ "content": content })
            }
            Endpoint::Completion => {
                let mut at = offset;
                let mut offsets = Vec::with_capacity(l.len());
                for t in l {
                    offsets.push(at);
                    at += t.text.len();
                }
                let top: Vec<Value> = l
                    .iter()
                    .map(|t| {
                        let m: serde_json::Map<String, Value> = t
                            .top
                            .iter()
                            .map(|(_, s, lp)| (s.clone(), json!(lp)))
                            .collect();
                        Value::Object(m)
                    })
                    .collect();
                json!({
                    "tokens": l.iter().map(|t| &t.text).collect::<Vec<_>>(),
                    "token_logprobs": l.iter().map(|t| t.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }
}

/// `usage` with `prompt_tokens_details.cached_tokens`.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": { "cached_tokens": u.cached_tokens },
    })
}
