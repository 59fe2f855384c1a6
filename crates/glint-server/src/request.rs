//! Request bodies: JSON checked field by field into the engine's
//! [`Request`], so a wrong type or value is a 400 that names the field.

use glint::engine::Request;
use glint::sample::{LogitBiasEntry, SamplerParams, DEFAULT_SEED, MAX_TOP_LOGPROBS};
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// Which endpoint a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`: `messages`, `logprobs: bool`, `top_logprobs`.
    Chat,
    /// `/v1/completions`: `prompt`, `logprobs: int`.
    Completion,
}

/// What a body asks for besides the prompt.
#[derive(Debug)]
pub struct Options {
    /// The engine request, prompt still empty.
    pub req: Request,
    /// Server-sent events instead of one JSON response.
    pub stream: bool,
    /// A last chunk with `usage` (`stream_options.include_usage`).
    pub include_usage: bool,
    /// llama-server's `n_keep`: tokens a context shift keeps (-1 = the
    /// prompt); `None` = the server's `--keep`.
    pub n_keep: Option<i64>,
    /// llama-server's `logit_bias` by text: every token of the text (as the
    /// tokenizer splits it, no special tokens) gets the bias; resolved to
    /// token ids when the request is submitted, where the tokenizer is.
    pub bias_text: Vec<(String, f32)>,
    /// llama-server's `timings_per_token`: stream chunks carry `timings`.
    pub timings_per_token: bool,
    /// llama-server's `return_progress`: a stream reports its prompt's
    /// progress (`prompt_progress`).
    pub return_progress: bool,
}

/// The most choices (`n`) a request may ask for, whatever the slots.
const MAX_CHOICES: i64 = 64;

/// The most stop strings a request may give.
const MAX_STOP: usize = 16;

/// Parse a body as a JSON object.
pub fn parse_body(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("the body must be a JSON object")),
    }
}

/// Typed getters: a missing key or `null` is `None`; a value of the wrong
/// type is a 400 naming the field.
pub(crate) struct Fields<'a>(pub(crate) &'a Map<String, Value>);

fn wrong(key: &str, what: &str) -> ApiError {
    ApiError::bad_request(format!("`{key}` must be {what}"))
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn f32(&self, key: &str) -> Result<Option<f32>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x.abs() <= f32::MAX as f64 => Ok(Some(x as f32)),
                _ => Err(wrong(key, "a finite number")),
            },
        }
    }

    fn int(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(wrong(key, &format!("an integer in {lo}..={hi}"))),
            },
        }
    }

    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(wrong(key, "true or false")),
        }
    }
}

/// The fields both endpoints share, and their `logprobs` each its way.
pub fn options(body: &Map<String, Value>, endpoint: Endpoint) -> Result<Options, ApiError> {
    let f = Fields(body);
    if let Some(v) = f.get("model") {
        if !v.is_string() {
            return Err(wrong("model", "a string"));
        }
    }
    let mut req = Request::new(Vec::new());
    // More choices than slots: the engine refuses it (a 400 naming both).
    req.n = f.int("n", 1, MAX_CHOICES)?.unwrap_or(1) as usize;
    let n_keep = f.int("n_keep", -1, u32::MAX as i64)?;
    // llama-server's `id_slot` (-1: any); past the last slot the engine
    // refuses it (a 400 naming the range).
    req.slot = f
        .int("id_slot", -1, u32::MAX as i64)?
        .filter(|&s| s >= 0)
        .map(|s| s as usize);
    // llama-server's `n_predict: -1`: no limit (and not the server's).
    let max = ["max_completion_tokens", "max_tokens", "n_predict"]
        .iter()
        .map(|k| f.int(k, if *k == "n_predict" { -1 } else { 1 }, u32::MAX as i64))
        .collect::<Result<Vec<_>, _>>()?;
    req.max_tokens = max
        .into_iter()
        .flatten()
        .next()
        .filter(|&n| n > 0)
        .map(|n| n as usize);
    let (sampling, bias_text) = sampling(&f)?;
    req.sampling = sampling;
    req.stop = stop(&f)?;
    req.ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    req.logprobs = match endpoint {
        Endpoint::Chat => {
            let top = f.int("top_logprobs", 0, MAX_TOP_LOGPROBS as i64)?;
            match (f.bool("logprobs")?, top) {
                (Some(true), top) => Some(top.unwrap_or(0) as usize),
                (_, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "`top_logprobs` needs `logprobs`: true",
                    ))
                }
                _ => None,
            }
        }
        Endpoint::Completion => f.int("logprobs", 0, 5)?.map(|n| n as usize),
    };
    if let Some(e) = f.get("echo") {
        if e != &Value::Bool(false) {
            return Err(ApiError::bad_request("`echo` is not supported"));
        }
    }
    req.grammar = grammar(&f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => Fields(o).bool("include_usage")?.unwrap_or(false),
        Some(_) => return Err(wrong("stream_options", "an object")),
    };
    Ok(Options {
        req,
        stream,
        include_usage,
        n_keep,
        bias_text,
        timings_per_token: f.bool("timings_per_token")?.unwrap_or(false),
        return_progress: f.bool("return_progress")?.unwrap_or(false),
    })
}

/// The sampler chain's parameters: llama-server's defaults, then the body's;
/// and the `logit_bias` entries given as text.
fn sampling(f: &Fields) -> Result<(SamplerParams, Vec<(String, f32)>), ApiError> {
    let mut s = SamplerParams::default();
    let floats: [(&str, &mut f32); 8] = [
        ("temperature", &mut s.temp),
        ("top_p", &mut s.top_p),
        ("min_p", &mut s.min_p),
        ("typical_p", &mut s.typ_p),
        ("presence_penalty", &mut s.penalty_present),
        ("frequency_penalty", &mut s.penalty_freq),
        ("repeat_penalty", &mut s.penalty_repeat),
        ("dynatemp_range", &mut s.dynatemp_range),
    ];
    for (key, slot) in floats {
        if let Some(x) = f.f32(key)? {
            *slot = x;
        }
    }
    if let Some(k) = f.int("top_k", 0, i32::MAX as i64)? {
        s.top_k = k as i32;
    }
    if let Some(n) = f.int("repeat_last_n", -1, i32::MAX as i64)? {
        s.penalty_last_n = n as i32;
    }
    // OpenAI's seeds are any integer; -1 (llama-server) means random.
    if let Some(seed) = f.int("seed", -1, u32::MAX as i64)? {
        s.seed = if seed < 0 { DEFAULT_SEED } else { seed as u32 };
    }
    let (ids, text) = logit_bias(f)?;
    s.logit_bias = ids;
    s.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((s, text))
}

/// The output's grammar: llama-server's `grammar` (GBNF) or `json_schema`,
/// or OpenAI's `response_format` (`json_object`, with an optional
/// `schema`; `json_schema` with `json_schema.schema`; `text`: none).
fn grammar(f: &Fields) -> Result<Option<std::sync::Arc<glint::grammar::Grammar>>, ApiError> {
    use glint::grammar::{json_schema, Grammar};
    let from_schema = |field: &str, s: &Value| {
        json_schema(s).map_err(|e| ApiError::bad_request(format!("`{field}`: {e}")))
    };
    let mut text = None;
    if let Some(g) = f.get("grammar").filter(|v| !v.is_null()) {
        let g = g.as_str().ok_or_else(|| wrong("grammar", "a GBNF text"))?;
        if !g.trim().is_empty() {
            text = Some(g.to_string());
        }
    }
    if let Some(s) = f.get("json_schema").filter(|v| !v.is_null()) {
        text = Some(from_schema("json_schema", s)?);
    }
    match f.get("response_format") {
        None | Some(Value::Null) => {}
        Some(Value::Object(rf)) => match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                let any = serde_json::json!({"type": "object"});
                text = Some(from_schema(
                    "response_format.schema",
                    rf.get("schema").unwrap_or(&any),
                )?);
            }
            Some("json_schema") => {
                let s = rf
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .ok_or_else(|| {
                        ApiError::bad_request("`response_format.json_schema.schema` is required")
                    })?;
                text = Some(from_schema("response_format.json_schema.schema", s)?);
            }
            _ => {
                return Err(wrong(
                    "response_format",
                    "{\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                ))
            }
        },
        Some(_) => return Err(wrong("response_format", "an object")),
    }
    let Some(text) = text else {
        return Ok(None);
    };
    Grammar::parse(&text)
        .map(|g| Some(std::sync::Arc::new(g)))
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// A bias entry's target: a token id, or a text whose tokens all get it.
enum BiasTarget {
    Id(u32),
    Text(String),
}

/// `{"token id": bias}` (OpenAI) or `[[id, bias], ...]` (llama-server); in
/// both, llama-server also takes a text for the id (`{"hello": -5}`,
/// `[["hello", -5]]`), and `false` for the bias (never this token).
type Biases = (Vec<LogitBiasEntry>, Vec<(String, f32)>);

fn logit_bias(f: &Fields) -> Result<Biases, ApiError> {
    let bad = || {
        wrong(
            "logit_bias",
            "an object of token id (or text) -> number or false",
        )
    };
    let pairs: Vec<(Value, &Value)> = match f.get("logit_bias") {
        None | Some(Value::Null) => return Ok(Default::default()),
        Some(Value::Object(o)) => o.iter().map(|(k, v)| (json!(k), v)).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([t, b]) => Ok((t.clone(), b)),
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    let (mut ids, mut text) = (Vec::new(), Vec::new());
    for (t, b) in pairs {
        let target = match &t {
            // A key that reads as an integer is a token id (and must be
            // one); any other string is a text.
            Value::String(s) => match s.trim().parse::<i64>() {
                Ok(n) => u32::try_from(n).ok().map(BiasTarget::Id),
                Err(_) => Some(BiasTarget::Text(s.clone())),
            },
            v => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(BiasTarget::Id),
        };
        let bias = match b {
            Value::Bool(false) => Some(f32::NEG_INFINITY),
            v => v.as_f64().filter(|x| x.is_finite()).map(|x| x as f32),
        };
        match (target, bias) {
            (Some(BiasTarget::Id(token)), Some(bias)) => ids.push(LogitBiasEntry { token, bias }),
            (Some(BiasTarget::Text(s)), Some(bias)) => text.push((s, bias)),
            _ => return Err(bad()),
        }
    }
    Ok((ids, text))
}

/// `stop`: a string or an array of strings.
fn stop(f: &Fields) -> Result<Vec<String>, ApiError> {
    let bad = || wrong("stop", "a non-empty string or an array of them");
    let list = match f.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if list.iter().any(String::is_empty) {
        return Err(bad());
    }
    if list.len() > MAX_STOP {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_STOP} stop strings"
        )));
    }
    Ok(list)
}

/// `messages` with string content (an array of text parts is joined);
/// their other fields as given.
pub fn messages(body: &Map<String, Value>) -> Result<Vec<Value>, ApiError> {
    let bad = |m: &str| ApiError::bad_request(m.to_string());
    let list = match body.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(bad("`messages` is empty")),
        Some(_) => return Err(bad("`messages` must be an array")),
        None => return Err(bad("`messages` is required")),
    };
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            if m.get("role").and_then(Value::as_str).is_none() {
                return Err(bad(&format!("messages[{i}] needs a string `role`")));
            }
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => text_parts(parts)
                    .ok_or_else(|| bad(&format!("messages[{i}].content: only text parts")))?,
                Some(_) => {
                    return Err(bad(&format!(
                        "messages[{i}].content must be a string or an array of text parts"
                    )))
                }
            };
            // The rest (`tool_calls`, `tool_call_id`, `name`,
            // `reasoning_content`) goes to the template as given.
            let mut out = m.as_object().cloned().unwrap_or_default();
            out.insert("content".into(), json!(content));
            Ok(Value::Object(out))
        })
        .collect()
}

/// `[{"type": "text", "text": ...}, ...]` joined, or `None` for other parts.
fn text_parts(parts: &[Value]) -> Option<String> {
    parts
        .iter()
        .map(
            |p| match (p.get("type")?.as_str()?, p.get("text")?.as_str()) {
                ("text", Some(t)) => Some(t),
                _ => None,
            },
        )
        .collect::<Option<Vec<&str>>>()
        // As llama-server joins a message's text parts.
        .map(|v| v.join("\n\n"))
}

/// A completion's `prompt`: a string, an array of one string, or token ids.
pub enum Prompt {
    /// Text to tokenize.
    Text(String),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

/// The `prompt` of a completion request.
pub fn prompt(body: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad =
        || ApiError::bad_request("`prompt` must be a string, an array of one string, or token ids");
    match body.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            ids if !ids.is_empty() => ids
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(bad)
                })
                .collect::<Result<_, _>>()
                .map(Prompt::Tokens),
            _ => Err(bad()),
        },
        None => Err(ApiError::bad_request("`prompt` is required")),
        Some(_) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Map<String, Value> {
        parse_body(s.as_bytes()).unwrap()
    }

    #[test]
    fn fields_become_the_engine_request() {
        let b = body(
            r#"{"max_tokens": 7, "temperature": 0, "stop": "\n", "seed": 42,
                "logit_bias": {"15": -100}, "logprobs": true, "top_logprobs": 3,
                "stream": true, "stream_options": {"include_usage": true}}"#,
        );
        let o = options(&b, Endpoint::Chat).unwrap();
        assert_eq!(o.req.max_tokens, Some(7));
        assert_eq!(o.req.sampling.temp, 0.0);
        assert_eq!(o.req.sampling.seed, 42);
        assert_eq!(o.req.stop, vec!["\n".to_string()]);
        assert_eq!(o.req.logprobs, Some(3));
        assert_eq!(o.req.sampling.logit_bias[0].token, 15);
        assert_eq!(o.req.sampling.logit_bias[0].bias, -100.0);
        assert!(o.stream && o.include_usage);
        // llama-server's forms: pairs, texts for ids, `false` for never.
        let b = body(r#"{"logit_bias": [[7, false], ["hello", -5]]}"#);
        let o = options(&b, Endpoint::Completion).unwrap();
        assert_eq!(o.req.sampling.logit_bias[0].token, 7);
        assert_eq!(o.req.sampling.logit_bias[0].bias, f32::NEG_INFINITY);
        assert_eq!(o.bias_text, vec![("hello".to_string(), -5.0)]);
        // n_predict -1: no limit; below that, an error.
        let o = options(&body(r#"{"n_predict": -1}"#), Endpoint::Completion).unwrap();
        assert_eq!(o.req.max_tokens, None);
        assert!(options(&body(r#"{"n_predict": -2}"#), Endpoint::Completion).is_err());
    }

    #[test]
    fn wrong_types_and_values_are_rejected_naming_the_field() {
        for (b, field) in [
            (r#"{"max_tokens": -1}"#, "max_tokens"),
            (r#"{"max_tokens": "5"}"#, "max_tokens"),
            (r#"{"max_tokens": 1e30}"#, "max_tokens"),
            (r#"{"temperature": "hot"}"#, "temperature"),
            (r#"{"stop": 5}"#, "stop"),
            (r#"{"stream": 1}"#, "stream"),
            (r#"{"logit_bias": {"x": "high"}}"#, "logit_bias"),
            (r#"{"logit_bias": {"-1": 1}}"#, "logit_bias"),
            (r#"{"logit_bias": [[1, 2, 3]]}"#, "logit_bias"),
            (r#"{"top_p": 0}"#, "top_p"),
        ] {
            let e = options(&body(b), Endpoint::Chat).unwrap_err();
            assert_eq!(e.status, 400, "{b}");
            assert!(e.message.contains(field), "{b}: {}", e.message);
        }
        assert_eq!(parse_body(b"{").unwrap_err().status, 400);
        assert_eq!(parse_body(b"[1]").unwrap_err().status, 400);
        assert_eq!(parse_body(b"\xff\xfe").unwrap_err().status, 400);
    }

    #[test]
    fn messages_and_prompts() {
        let b = body(
            r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                {"type": "text", "text": "b"}]}]}"#,
        );
        assert_eq!(messages(&b).unwrap()[0]["content"], "a\n\nb");
        assert!(messages(&body(r#"{"messages": []}"#)).is_err());
        assert!(messages(&body(r#"{"messages": [{"content": "x"}]}"#)).is_err());
        assert!(matches!(
            prompt(&body(r#"{"prompt": [1, 2]}"#)).unwrap(),
            Prompt::Tokens(t) if t == [1, 2]
        ));
        assert!(prompt(&body(r#"{"prompt": [-1]}"#)).is_err());
    }
}
