//! llama-server's own utility routes, in its shapes: `POST /tokenize`,
//! `POST /detokenize`, `POST /apply-template`, `GET /props`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::{body_json, request, Shared};

/// Most token ids `/detokenize` takes at once.
const MAX_DETOKENIZE: usize = 1 << 20;

fn flag(body: &serde_json::Map<String, Value>, key: &str, default: bool) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad_request(format!(
            "`{key}` must be true or false"
        ))),
    }
}

/// `{"content", "add_special": false, "parse_special": true, "with_pieces":
/// false}` → `{"tokens": [id, ...]}`, or with pieces `{"tokens": [{"id",
/// "piece"}]}` where a piece that is not UTF-8 on its own (part of a
/// character) is its byte values.
pub(crate) async fn tokenize(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let content = match body.get("content") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(ApiError::bad_request("`content` must be a string")),
        None => return Err(ApiError::bad_request("`content` is required")),
    };
    let add_special = flag(&body, "add_special", false)?;
    let parse_special = flag(&body, "parse_special", true)?;
    let with_pieces = flag(&body, "with_pieces", false)?;
    let tok = l.engine.model().tokenizer();
    let ids = tok
        .encode(content, add_special, parse_special)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize `content`: {e}")))?;
    if !with_pieces {
        return Ok(Json(json!({ "tokens": ids })));
    }
    let tokens: Vec<Value> = ids
        .iter()
        .map(|&id| {
            let bytes = tok.token_to_piece(id, true).unwrap_or_default();
            let piece = match std::str::from_utf8(&bytes) {
                Ok(s) => json!(s),
                Err(_) => json!(bytes.to_vec()),
            };
            json!({ "id": id, "piece": piece })
        })
        .collect();
    Ok(Json(json!({ "tokens": tokens })))
}

/// `{"tokens": [id, ...]}` → `{"content"}` (special tokens written out, as
/// llama-server does).
pub(crate) async fn detokenize(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let bad = || ApiError::bad_request("`tokens` must be an array of token ids");
    let list = match body.get("tokens") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_DETOKENIZE => a.clone(),
        Some(_) => return Err(bad()),
    };
    let tok = l.engine.model().tokenizer();
    let n_vocab = tok.n_vocab();
    let mut bytes = Vec::new();
    for v in &list {
        let id = v.as_u64().ok_or_else(bad)?;
        if id >= n_vocab as u64 {
            return Err(ApiError::bad_request(format!(
                "token {id} is outside the vocabulary ({n_vocab} tokens)"
            )));
        }
        bytes.extend_from_slice(&tok.token_to_piece(id as u32, true).unwrap_or_default());
    }
    Ok(Json(json!({ "content": String::from_utf8_lossy(&bytes) })))
}

/// `{"messages": [...]}` → `{"prompt"}`: the chat template applied, with
/// the generation prompt, as `/v1/chat/completions` would decode it.
pub(crate) async fn apply_template(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let messages = request::messages(&body)?;
    let prompt = l
        .chat
        .render(&messages, true)
        .map_err(|e| ApiError::bad_request(format!("the chat template failed: {e}")))?;
    Ok(Json(json!({ "prompt": prompt })))
}

/// The server's settings, in llama-server's `/props` shape (the fields
/// glint has).
pub(crate) async fn props(State(st): State<Shared>) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let model = l.engine.model();
    let tok = model.tokenizer();
    let piece = |id: Option<u32>| {
        id.and_then(|i| tok.token_to_piece(i, true).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    Ok(Json(json!({
        "default_generation_settings": {
            "n_ctx": l.engine.n_ctx_slot(),
            "params": {
                "n_predict": -1,
                "n_keep": st.n_keep,
                "context_shift": st.context_shift,
            },
        },
        "total_slots": l.engine.n_slots(),
        "model_alias": l.name,
        "model_path": st.model_path,
        "chat_template": l.chat.source(),
        "bos_token": piece(tok.bos()),
        "eos_token": piece(tok.eos()),
        "modalities": { "vision": false, "audio": false },
        "build_info": concat!("glint ", env!("CARGO_PKG_VERSION")),
    })))
}
