//! Tool calls and reasoning in chat answers: the request's `tools`,
//! `tool_choice`, `parallel_tool_calls` and `reasoning_format` made into
//! an output parser (and, when a call is required, a grammar that forces
//! one), and the parsed answer in OpenAI's shapes, whole or as deltas.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use glint::chat::tools::{
    call_grammar, call_json, lazy_call_grammar, prompt_opens_thinking, tools_from_json, Delta,
    OutputParser, ReasoningFormat, StreamParser, ToolChoice,
};
use glint::grammar::Grammar;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::request::Fields;
use crate::Loaded;

/// A grammar for the answer: forced from the start, or lazy (from the
/// first occurrence of its trigger text on).
pub(crate) enum CallGrammar {
    /// `tool_choice` required or a named function.
    Forced(Arc<Grammar>),
    /// `tool_choice` auto: a call, once the model opens one.
    Lazy(Arc<Grammar>, String),
}

/// How a chat request's answer is taken apart, and the grammar of its
/// calls.
pub(crate) fn chat_output(
    l: &Loaded,
    server_reasoning: ReasoningFormat,
    body: &Map<String, Value>,
    prompt: &str,
) -> Result<(OutputParser, Option<CallGrammar>), ApiError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(t) => tools_from_json(t).map_err(ApiError::bad_request)?,
    };
    let choice = ToolChoice::from_json(body.get("tool_choice")).map_err(ApiError::bad_request)?;
    let parallel = Fields(body).bool("parallel_tool_calls")?.unwrap_or(false);
    let reasoning = match body.get("reasoning_format") {
        None | Some(Value::Null) => server_reasoning,
        Some(Value::String(s)) => ReasoningFormat::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "reasoning_format {s:?}: none, auto, deepseek or deepseek-legacy"
            ))
        })?,
        Some(_) => return Err(ApiError::bad_request("`reasoning_format` must be a string")),
    };
    let calls = (!tools.is_empty() && choice != ToolChoice::None).then_some(l.tool_format);
    let compile = |text: &str| {
        Grammar::parse(text)
            .map(Arc::new)
            .map_err(|e| ApiError::bad_request(format!("the tools' grammar: {e}")))
    };
    let grammar = if tools.is_empty() {
        if matches!(choice, ToolChoice::Required | ToolChoice::Function(_)) {
            return Err(ApiError::bad_request(
                "tool_choice asks for a call but the request has no `tools`",
            ));
        }
        None
    } else if choice == ToolChoice::Auto {
        match lazy_call_grammar(l.tool_format, &tools, parallel).map_err(ApiError::bad_request)? {
            Some((g, trigger)) => Some(CallGrammar::Lazy(compile(&g)?, trigger)),
            None => None,
        }
    } else {
        match call_grammar(l.tool_format, &tools, &choice, parallel)
            .map_err(ApiError::bad_request)?
        {
            Some(g) => Some(CallGrammar::Forced(compile(&g)?)),
            None => None,
        }
    };
    let parser = OutputParser {
        calls,
        format: l.tool_format,
        reasoning,
        thinking_open: reasoning != ReasoningFormat::None && prompt_opens_thinking(prompt),
    };
    Ok((parser, grammar))
}

/// A fresh call id: `call_` and 24 letters and digits, unique within the
/// process and unlikely to repeat across runs.
pub(crate) fn call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    // Two keyed hashes (RandomState draws its keys from the OS) of the
    // counter: 128 bits, 21 letters' worth; the last three are the
    // counter's, so ids of one process never repeat.
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n ^ salt);
        h.finish() as u128
    };
    let mut x = (half(0) << 64) | half(u64::MAX);
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::from("call_");
    for _ in 0..21 {
        id.push(ABC[(x % 62) as usize] as char);
        x /= 62;
    }
    let mut c = n;
    for _ in 0..3 {
        id.push(ABC[(c % 62) as usize] as char);
        c /= 62;
    }
    id
}

/// A whole answer as an OpenAI `message`; and whether it holds calls.
pub(crate) fn message(parser: &OutputParser, text: &str) -> (Value, bool) {
    let p = parser.parse(text, false);
    let mut m = json!({ "role": "assistant", "content": p.content });
    if !p.reasoning.is_empty() {
        m["reasoning_content"] = json!(p.reasoning);
    }
    let has_calls = !p.calls.is_empty();
    if has_calls {
        let calls: Vec<Value> = p.calls.iter().map(|c| call_json(c, &call_id())).collect();
        m["tool_calls"] = json!(calls);
        if p.content.is_empty() {
            m["content"] = Value::Null;
        }
    }
    (m, has_calls)
}

/// One choice's stream taken apart: its text in, `delta` objects out.
pub(crate) struct ChatStream {
    parser: StreamParser,
    /// Calls sent so far.
    pub(crate) calls: usize,
}

impl ChatStream {
    pub(crate) fn new(parser: OutputParser) -> ChatStream {
        ChatStream {
            parser: StreamParser::new(parser),
            calls: 0,
        }
    }

    /// The deltas `text` makes certain (`finish`: the answer is whole).
    pub(crate) fn deltas(&mut self, text: &str, finish: bool) -> Vec<Value> {
        let ds = if finish {
            let mut d = self.parser.push(text);
            d.extend(self.parser.finish());
            d
        } else {
            self.parser.push(text)
        };
        ds.into_iter()
            .filter_map(|d| match d {
                Delta::Content(c) if !c.is_empty() => Some(json!({ "content": c })),
                Delta::Reasoning(r) if !r.is_empty() => Some(json!({ "reasoning_content": r })),
                Delta::Call(index, c) => {
                    self.calls = self.calls.max(index + 1);
                    let mut call = call_json(&c, &call_id());
                    call["index"] = json!(index);
                    Some(json!({ "tool_calls": [call] }))
                }
                _ => None,
            })
            .collect()
    }
}
