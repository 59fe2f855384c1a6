//! Embeddings, with `--embedding`: OpenAI's `POST /v1/embeddings` and
//! llama-server's `POST /embedding` (and `/embeddings`). The engine embeds
//! between two of its steps, in an idle slot's sequence; `--pooling` picks
//! how token states become one vector (none: every token's, native route
//! only).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use glint::embed::{normalize, Pooling};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::{body_json, Shared};

/// Most inputs one request may embed.
const MAX_INPUTS: usize = 2048;

/// 501 unless the server embeds.
fn embedding_on(st: &Shared) -> Result<Pooling, ApiError> {
    if !st.embedding {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support embeddings. Start it with `--embedding`",
        ));
    }
    Ok(st.loaded()?.pooling)
}

/// The inputs of `v` (OpenAI's `input`, llama-server's `content`): a
/// string, token ids, a mix of both, a `{prompt_string}` or `{content:
/// [text parts]}` object, or an array of those (an array with a number at
/// its top level is one mixed input).
fn inputs(v: &Value, tok: &glint::Tokenizer) -> Result<Vec<Vec<u32>>, ApiError> {
    let bad = |m: &str| ApiError::bad_request(format!("`input`: {m}"));
    match v {
        Value::Array(a) if a.is_empty() => Err(bad("empty")),
        Value::Array(a) if !a.iter().any(Value::is_number) => {
            if a.len() > MAX_INPUTS {
                return Err(bad(&format!("{} inputs, more than {MAX_INPUTS}", a.len())));
            }
            a.iter().map(|x| one(x, tok)).collect()
        }
        v => Ok(vec![one(v, tok)?]),
    }
}

/// One input's tokens (special tokens parsed, BOS as the model adds it).
fn one(v: &Value, tok: &glint::Tokenizer) -> Result<Vec<u32>, ApiError> {
    let bad = |m: &str| ApiError::bad_request(format!("`input`: {m}"));
    let text = |s: &str, first: bool| {
        tok.encode(s, first, true)
            .map_err(|e| bad(&format!("cannot tokenize: {e}")))
    };
    match v {
        Value::String(s) => text(s, true),
        Value::Array(parts) if !parts.is_empty() => {
            let mut ids = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                match p {
                    Value::String(s) => ids.extend(text(s, i == 0)?),
                    n => ids.push(
                        n.as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| bad("token ids are non-negative integers"))?,
                    ),
                }
            }
            Ok(ids)
        }
        Value::Object(o) => {
            if let Some(Value::String(s)) = o.get("prompt_string") {
                return text(s, true);
            }
            let Some(Value::Array(parts)) = o.get("content") else {
                return Err(bad(
                    "an object needs `prompt_string` or `content`: [text parts]",
                ));
            };
            let mut s = String::new();
            for p in parts {
                match (
                    p.get("type").and_then(Value::as_str),
                    p.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => s.push_str(t),
                    (Some(t), _) if t != "text" => {
                        return Err(bad(&format!(
                            "content parts of type {t:?}: this model reads text only"
                        )))
                    }
                    _ => return Err(bad("a text part needs `text`")),
                }
            }
            text(&s, true)
        }
        _ => Err(bad("a string, token ids, or an array of them")),
    }
}

/// Run the engine on `inputs`; (vectors per input, tokens in all).
async fn run(
    st: &Shared,
    inputs: Vec<Vec<u32>>,
    pooling: Pooling,
) -> Result<(Vec<Vec<Vec<f32>>>, usize), ApiError> {
    let l = st.loaded()?;
    let n_tokens = inputs.iter().map(Vec::len).sum();
    let n_ubatch = l.engine.n_ubatch();
    if let Some(t) = inputs.iter().find(|t| t.len() > n_ubatch) {
        return Err(ApiError::bad_request(format!(
            "input ({} tokens) is too large to process. increase the physical batch size (-ub, {n_ubatch})",
            t.len()
        )));
    }
    if inputs.iter().any(Vec::is_empty) {
        return Err(ApiError::bad_request("`input`: an input has no tokens"));
    }
    let st2 = st.clone();
    let out = tokio::task::spawn_blocking(move || {
        let l = st2.loaded()?;
        l.engine
            .embed(inputs, pooling)
            .map_err(|e| ApiError::internal(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok((out, n_tokens))
}

/// `POST /v1/embeddings`: `input`, `encoding_format` (`float`, `base64`);
/// vectors L2-normalized.
pub(crate) async fn openai(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let pooling = embedding_on(&st)?;
    let l = st.loaded()?;
    let body = body_json(body)?;
    if pooling == Pooling::None {
        return Err(ApiError::bad_request(
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type",
        ));
    }
    let base64 = match body.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(_) => return Err(ApiError::bad_request("`encoding_format`: float or base64")),
    };
    let input = body
        .get("input")
        .or_else(|| body.get("content"))
        .ok_or_else(|| ApiError::bad_request("`input` is required"))?;
    let inputs = inputs(input, l.engine.model().tokenizer())?;
    let (out, n_tokens) = run(&st, inputs, pooling).await?;
    let data: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, mut rows)| {
            let mut v = rows.remove(0);
            normalize(&mut v);
            let embedding = if base64 {
                json!(encode_base64(bytemuck_f32(&v)))
            } else {
                json!(v)
            };
            json!({ "object": "embedding", "index": i, "embedding": embedding })
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "model": l.name,
        "data": data,
        "usage": { "prompt_tokens": n_tokens, "total_tokens": n_tokens },
    })))
}

/// llama-server's `POST /embedding`: `content` (or `input`), `embd_normalize`
/// (2 = L2, the default; -1 = none; pooling none is never normalized);
/// `[{index, embedding: [[...], ...]}]`, one row per token with pooling
/// none, else one.
pub(crate) async fn native(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let pooling = embedding_on(&st)?;
    let l = st.loaded()?;
    let body: Map<String, Value> = body_json(body)?;
    let input = body
        .get("content")
        .or_else(|| body.get("input"))
        .ok_or_else(|| ApiError::bad_request("`content` is required"))?;
    let norm = match body.get("embd_normalize") {
        None | Some(Value::Null) => 2,
        Some(v) => match v.as_i64() {
            Some(n @ (-1 | 2)) => n,
            _ => {
                return Err(ApiError::bad_request(
                    "`embd_normalize`: 2 (L2) or -1 (none)",
                ))
            }
        },
    };
    let inputs = inputs(input, l.engine.model().tokenizer())?;
    let (out, _) = run(&st, inputs, pooling).await?;
    let data: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, mut rows)| {
            if pooling != Pooling::None && norm == 2 {
                rows.iter_mut().for_each(|r| normalize(r));
            }
            json!({ "index": i, "embedding": rows })
        })
        .collect();
    Ok(Json(Value::Array(data)))
}

fn bytemuck_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Standard base64 with padding (OpenAI's `encoding_format: base64`: the
/// little-endian f32 bytes).
fn encode_base64(bytes: Vec<u8>) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(ABC[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_examples() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode_base64(raw.as_bytes().to_vec()), enc);
        }
    }
}
