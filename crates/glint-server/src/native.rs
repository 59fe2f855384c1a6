//! llama-server's own routes, in its shapes: `POST /completion`,
//! `POST /tokenize`, `POST /detokenize`, `POST /apply-template`,
//! `GET /props`.

use std::convert::Infallible;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use glint::engine::{Event, Request, StopReason, TokenLogprob};
use glint::sample::MAX_TOP_LOGPROBS;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::openai::Choice;
use crate::request::Endpoint;
use crate::{body_json, request, Shared};

/// Most token ids `/detokenize` takes at once.
const MAX_DETOKENIZE: usize = 1 << 20;

/// A boolean field of `body`, `default` when absent or null.
fn flag(body: &serde_json::Map<String, Value>, key: &str, default: bool) -> Result<bool, ApiError> {
    Ok(request::Fields(body).bool(key)?.unwrap_or(default))
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
    let prompt = crate::chat_text(&st, l, &body)?;
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
            "params": default_params(&st)?,
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

/// llama-server's `prompt` of `/completion`: one prompt (a string, token
/// ids, or a mix of both: strings tokenized in place, special tokens
/// parsed, BOS before a leading string when the model adds one), or
/// several (an array of strings or of such arrays; as llama-server, an
/// array with a number at its top level is one mixed prompt).
fn prompts(
    body: &serde_json::Map<String, Value>,
    tok: &glint::Tokenizer,
) -> Result<Vec<Vec<u32>>, ApiError> {
    match body.get("prompt") {
        Some(Value::Array(parts)) if !parts.is_empty() && !parts.iter().any(Value::is_number) => {
            parts.iter().map(|p| mixed_prompt(p, tok)).collect()
        }
        Some(p) => Ok(vec![mixed_prompt(p, tok)?]),
        None => Err(ApiError::bad_request("`prompt` is required")),
    }
}

/// One prompt: a string, token ids, or a mix of both.
fn mixed_prompt(prompt: &Value, tok: &glint::Tokenizer) -> Result<Vec<u32>, ApiError> {
    let bad = || ApiError::bad_request("`prompt` must be a string, token ids, or a mix of both");
    let text = |s: &str, first: bool| {
        tok.encode(s, first, true)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))
    };
    match prompt {
        Value::String(s) => text(s, true),
        // llama-server's multimodal prompt object; glint reads no media.
        Value::Object(o) => {
            if o.get("multimodal_data")
                .is_some_and(|m| m.as_array().is_none_or(|a| !a.is_empty()))
            {
                return Err(ApiError::bad_request(
                    "`multimodal_data`: this model reads text only",
                ));
            }
            match o.get("prompt_string") {
                Some(Value::String(s)) => text(s, true),
                _ => Err(ApiError::bad_request(
                    "a prompt object needs `prompt_string`, a string",
                )),
            }
        }
        Value::Array(parts) if !parts.is_empty() => {
            let mut ids = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                match p {
                    Value::String(s) => ids.extend(text(s, i == 0)?),
                    v => ids.push(
                        v.as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(bad)?,
                    ),
                }
            }
            Ok(ids)
        }
        _ => Err(bad()),
    }
}

/// llama-server's `stop_type`.
fn stop_type(stop: Option<StopReason>) -> &'static str {
    match stop {
        Some(StopReason::EndOfGeneration) => "eos",
        Some(StopReason::NPredict | StopReason::ContextFull | StopReason::CacheFull) => "limit",
        Some(StopReason::StopString) => "word",
        Some(StopReason::Callback) | None => "none",
    }
}

/// `completion_probabilities` entries: `{id, token, logprob, bytes,
/// top_logprobs: [{id, token, logprob, bytes}]}`; with `post_sampling_probs`
/// (`post`), probabilities of the distribution the sampler drew from:
/// `{id, token, prob, bytes, top_probs: [...]}`.
fn probs(lps: &[TokenLogprob], post: bool) -> Value {
    let (key, top_key) = if post {
        ("prob", "top_probs")
    } else {
        ("logprob", "top_logprobs")
    };
    let one = |id: u32, text: &str, lp: f32| {
        let x = if post { lp.exp() } else { lp };
        json!({ "id": id, "token": text, key: x, "bytes": text.as_bytes() })
    };
    Value::Array(
        lps.iter()
            .map(|t| {
                let mut v = one(t.token, &t.text, t.logprob);
                v[top_key] = t.top.iter().map(|(i, s, l)| one(*i, s, *l)).collect();
                v
            })
            .collect(),
    )
}

/// `/props`' `default_generation_settings.params`: what a request that
/// sets nothing runs with.
fn default_params(st: &Shared) -> Result<Value, ApiError> {
    let (_, _, mut v) = completion_options(st, &Default::default())?;
    v["n_keep"] = json!(st.n_keep);
    v["context_shift"] = json!(st.context_shift);
    Ok(v)
}

/// llama-server's `generation_settings`: the sampling parameters a request
/// ran with, after the server's defaults (`logit_bias` as `[{token, bias}]`
/// with -inf as null, the end-of-generation tokens' included under
/// `ignore_eos`).
pub(crate) fn generation_settings(req: &Request, stream: bool) -> Value {
    let s = &req.sampling;
    let n_predict = req.max_tokens.map_or(-1, |n| n as i64);
    let bias: Vec<Value> = s
        .logit_bias
        .iter()
        .map(|e| json!({ "token": e.token, "bias": if e.bias.is_finite() { json!(e.bias) } else { Value::Null } }))
        .collect();
    json!({
        "n_predict": n_predict,
        "max_tokens": n_predict,
        "seed": s.seed,
        "temperature": s.temp,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": s.top_n_sigma,
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "typical_p": s.typ_p,
        "repeat_last_n": s.penalty_last_n,
        "repeat_penalty": s.penalty_repeat,
        "presence_penalty": s.penalty_present,
        "frequency_penalty": s.penalty_freq,
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": s.dry_penalty_last_n,
        "mirostat": s.mirostat,
        "mirostat_tau": s.mirostat_tau,
        "mirostat_eta": s.mirostat_eta,
        // llama-server's adaptive-p sampler, which glint does not have:
        // its "off" values.
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
        "stop": req.stop,
        "n_keep": req.n_keep,
        "ignore_eos": req.ignore_eos,
        "stream": stream,
        "n_probs": req.logprobs.unwrap_or(0),
        "post_sampling_probs": req.post_sampling_probs,
        "min_keep": s.min_keep,
        "logit_bias": bias,
        "samplers": s.samplers.iter().map(|t| t.name()).collect::<Vec<_>>(),
    })
}

/// The last object of a `/completion`: what was generated, why it stopped,
/// the counts and the timings (`prompt_n` tokens decoded, `cache_n` found
/// in the cache).
fn completion_end(
    c: &Choice,
    t0: Instant,
    return_tokens: bool,
    model: &str,
    stream: bool,
    settings: &Value,
) -> Value {
    let done = c.done_at.unwrap_or_else(Instant::now);
    let first = c.first_at.unwrap_or(done);
    let prompt_ms = (first - t0).as_secs_f64() * 1e3;
    let predicted_ms = (done - first).as_secs_f64() * 1e3;
    let u = c.usage;
    let prompt_n = u.prompt_tokens - u.cached_tokens;
    let mut v = json!({
        "index": 0,
        "content": if stream { "" } else { c.text.as_str() },
        "tokens": if return_tokens && !stream { c.tokens.clone() } else { Vec::new() },
        "id_slot": u.slot,
        "stop": true,
        "model": model,
        "tokens_predicted": u.completion_tokens,
        "tokens_evaluated": u.prompt_tokens,
        "tokens_cached": u.prompt_tokens + u.completion_tokens.saturating_sub(1),
        // The context ran out before the request's end.
        "truncated": matches!(c.stop, Some(StopReason::ContextFull | StopReason::CacheFull)),
        "stop_type": stop_type(c.stop),
        "stopping_word": "",
        "has_new_line": c.text.contains('\n'),
        "generation_settings": settings,
        "timings": crate::timings::timings(prompt_n, u.cached_tokens, prompt_ms, u.completion_tokens, predicted_ms),
    });
    if !c.logprobs.is_empty() && !stream {
        let post = settings["post_sampling_probs"] == true;
        v["completion_probabilities"] = probs(&c.logprobs, post);
    }
    v
}

/// llama-server's native completion: `prompt` (string, ids or mixed),
/// `n_predict`, `n_probs`, `return_tokens`, `stream` (`data: {content,
/// tokens, stop}` objects, the last one with `stop: true` and the
/// timings; no `[DONE]`), `n_keep`, and the sampling fields of
/// `/v1/completions`.
pub(crate) async fn completion(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let mut prompts = prompts(&body, l.engine.model().tokenizer())?;
    if prompts.len() == 1 {
        return run_completion(st, body, prompts.remove(0)).await;
    }
    // Several prompts: one request each, side by side in the slots; the
    // answer is their objects in order.
    if flag(&body, "stream", false)? {
        return Err(ApiError::bad_request("streaming takes one prompt"));
    }
    let runs = prompts.into_iter().map(|p| whole(&st, &body, p));
    let mut out = Vec::new();
    for (i, r) in futures_util::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        let mut v = r?;
        v["index"] = json!(i);
        out.push(v);
    }
    Ok(Json(Value::Array(out)).into_response())
}

/// One prompt of `/completion`, not streamed: its last object.
async fn whole(
    st: &Shared,
    body: &serde_json::Map<String, Value>,
    prompt: Vec<u32>,
) -> Result<Value, ApiError> {
    let (opts, return_tokens, settings) = completion_options(st, body)?;
    let l = st.loaded()?;
    let t0 = Instant::now();
    let rx = crate::submit(st, l, opts, prompt)?;
    let c = tokio::time::timeout(st.timeout, crate::collect(rx, 1))
        .await
        .map_err(|_| ApiError::new(StatusCode::REQUEST_TIMEOUT, "the request timed out"))??;
    // llama-server's answer when the shared cache ran out of cells (its
    // words, which its clients match): a 500, for this request alone.
    if c[0].stop == Some(StopReason::CacheFull) {
        return Err(ApiError::internal("Context size has been exceeded."));
    }
    Ok(completion_end(
        &c[0],
        t0,
        return_tokens,
        &l.name,
        false,
        &settings,
    ))
}

/// A `/completion` body's options (biases resolved), `return_tokens`, and
/// its `generation_settings`.
fn completion_options(
    st: &Shared,
    body: &serde_json::Map<String, Value>,
) -> Result<(request::Options, bool, Value), ApiError> {
    let l = st.loaded()?;
    let mut opts = request::options(body, Endpoint::Completion)?;
    st.defaults.apply(body, &mut opts.req);
    match body.get("n_probs") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64() {
            Some(0) => {}
            Some(n) if n as usize <= MAX_TOP_LOGPROBS => opts.req.logprobs = Some(n as usize),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "`n_probs` must be an integer in 0..={MAX_TOP_LOGPROBS}"
                )))
            }
        },
    }
    opts.req.post_sampling_probs = flag(body, "post_sampling_probs", false)?;
    crate::resolve_bias(l.engine.model().tokenizer(), &mut opts)?;
    let return_tokens = flag(body, "return_tokens", false)?;
    let settings = generation_settings(&opts.req, opts.stream);
    Ok((opts, return_tokens, settings))
}

/// llama-server's `/infill`: `input_prefix`, `input_suffix` and an optional
/// `prompt` (what the middle starts with), put together with the model's
/// fill-in-the-middle tokens (`<|fim_prefix|>` prefix `<|fim_suffix|>`
/// suffix `<|fim_middle|>` prompt, BOS first when the model adds one);
/// then as `/completion`.
pub(crate) async fn infill(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let tok = l.engine.model().tokenizer();
    let Some([pre, suf, mid]) = tok.fim() else {
        return Err(ApiError::bad_request(
            "the model has no fill-in-the-middle tokens (prefix, suffix, middle)",
        ));
    };
    let text = |key: &str| -> Result<Vec<u32>, ApiError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) => tok
                .encode(s, false, false)
                .map_err(|e| ApiError::bad_request(format!("cannot tokenize `{key}`: {e}"))),
            Some(_) => Err(ApiError::bad_request(format!("`{key}` must be a string"))),
        }
    };
    let mut ids: Vec<u32> = tok.bos().filter(|_| tok.add_bos()).into_iter().collect();
    ids.push(pre);
    ids.extend(text("input_prefix")?);
    ids.push(suf);
    ids.extend(text("input_suffix")?);
    ids.push(mid);
    ids.extend(text("prompt")?);
    run_completion(st, body, ids).await
}

/// `/completion` and `/infill` once the prompt is tokens.
async fn run_completion(
    st: Shared,
    body: serde_json::Map<String, Value>,
    prompt: Vec<u32>,
) -> Result<Response, ApiError> {
    if !flag(&body, "stream", false)? {
        return Ok(Json(whole(&st, &body, prompt).await?).into_response());
    }
    let l = st.loaded()?;
    let (opts, return_tokens, settings) = completion_options(&st, &body)?;
    let (per_token, progress) = (opts.timings_per_token, opts.return_progress);
    let t0 = Instant::now();
    let rx = crate::submit(&st, l, opts, prompt)?;
    let model = l.name.clone();
    let timeout = st.timeout;
    let state = (rx, Choice::default(), false, crate::timings::Clock::new());
    let events = futures_util::stream::unfold(state, move |(mut rx, mut c, done, mut clock)| {
        let model = model.clone();
        let settings = settings.clone();
        async move {
            if done {
                return None;
            }
            let (mut data, done) = loop {
                let ev = tokio::time::timeout(timeout, rx.recv()).await;
                if let Ok(Some(ev)) = &ev {
                    clock.on_event(ev);
                }
                break match ev {
                    Ok(Some(Event::Progress { .. })) => {
                        if !progress {
                            continue;
                        }
                        let v = json!({
                            "index": 0, "content": "", "tokens": [], "stop": false,
                            "prompt_progress": clock.progress(),
                            "timings": clock.json(),
                        });
                        (v, false)
                    }
                    Ok(Some(Event::Delta {
                        token,
                        text,
                        logprob,
                        ..
                    })) => {
                        c.first_at.get_or_insert_with(Instant::now);
                        c.text.push_str(&text);
                        let mut v = json!({
                            "index": 0,
                            "content": text,
                            "tokens": if return_tokens { token.into_iter().collect() } else { Vec::new() },
                            "stop": false,
                        });
                        if let Some(lp) = logprob {
                            let post = settings["post_sampling_probs"] == true;
                            v["completion_probabilities"] = probs(std::slice::from_ref(&lp), post);
                        }
                        (v, false)
                    }
                    Ok(Some(Event::Done { stop, usage, .. })) => {
                        c.stop = Some(stop);
                        c.usage = usage;
                        c.done_at = Some(Instant::now());
                        (
                            completion_end(&c, t0, return_tokens, &model, true, &settings),
                            true,
                        )
                    }
                    Ok(Some(Event::Failed(m))) => (ApiError::internal(m).body(), true),
                    Ok(None) => (ApiError::internal("the engine stopped").body(), true),
                    Err(_) => (
                        ApiError::new(StatusCode::REQUEST_TIMEOUT, "the stream timed out").body(),
                        true,
                    ),
                };
            };
            if per_token && !done {
                data["timings"] = clock.json();
            }
            let ev = SseEvent::default().data(data.to_string());
            Some((Ok::<_, Infallible>(ev), (rx, c, done, clock)))
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /slots`: each slot's id, context, whether it is busy, and the
/// tokens its cells hold.
pub(crate) async fn slots(State(st): State<Shared>) -> Result<Json<Value>, ApiError> {
    slots_on(&st)?;
    let l = st.loaded()?;
    let n_ctx = l.engine.n_ctx_slot();
    let list: Vec<Value> = l
        .engine
        .slots()
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "n_ctx": n_ctx,
                "is_processing": s.is_processing,
                "n_cached_tokens": s.n_cached,
            })
        })
        .collect();
    Ok(Json(Value::Array(list)))
}

/// `--no-slots` turns the slot routes off (501, as llama-server).
fn slots_on(st: &Shared) -> Result<(), ApiError> {
    if st.slots_endpoint {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "This server does not support slots endpoint. Start it without `--no-slots`",
    ))
}

/// A slot file's name: a plain name inside `--slot-save-path`, no
/// directories, no `..`, no leading dot, printable, at most 255 bytes.
fn slot_file(dir: &std::path::Path, name: &str) -> Result<std::path::PathBuf, ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\', ':'])
        && !name.chars().any(char::is_control);
    if !ok {
        return Err(ApiError::bad_request(format!(
            "`filename` {name:?} is not a plain file name"
        )));
    }
    Ok(dir.join(name))
}

/// `POST /slots/{id}?action=save|restore|erase` (`{"filename"}` for save
/// and restore, inside `--slot-save-path`): llama-server's slot files, in
/// glint's checksummed prompt-cache format, written atomically.
pub(crate) async fn slot_action(
    State(st): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    // As llama-server: --no-slots hides GET /slots only; slot files are
    // governed by --slot-save-path alone.
    st.loaded()?;
    let id: usize = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("slot id {id:?} is not a number")))?;
    let action = q.get("action").map(String::as_str).unwrap_or("");
    let file = || -> Result<(String, std::path::PathBuf), ApiError> {
        let Some(dir) = &st.slot_save_path else {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "This server does not support slot save/restore. Start it with `--slot-save-path`",
            ));
        };
        let body = body_json(body)?;
        let name = match body.get("filename") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(ApiError::bad_request("`filename` (a string) is required")),
        };
        let path = slot_file(dir, &name)?;
        Ok((name, path))
    };
    let (act, name) = match action {
        "save" => {
            let (name, path) = file()?;
            (glint::engine::SlotAction::Save(path), Some(name))
        }
        "restore" => {
            let (name, path) = file()?;
            (glint::engine::SlotAction::Restore(path), Some(name))
        }
        "erase" => (glint::engine::SlotAction::Erase, None),
        a => {
            return Err(ApiError::bad_request(format!(
                "`action` {a:?}: save, restore or erase"
            )))
        }
    };
    let t0 = Instant::now();
    let st2 = st.clone();
    let done = tokio::task::spawn_blocking(move || {
        st2.loaded()
            .map(|l| l.engine.slot_action(id, act))
            .map_err(|e| e.message)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the slot action failed: {e}")))?
    .map_err(ApiError::unavailable)??;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(Json(match action {
        "save" => json!({
            "id_slot": id, "filename": name, "n_saved": done.n_tokens,
            "n_written": done.n_bytes, "timings": { "save_ms": ms },
        }),
        "restore" => json!({
            "id_slot": id, "filename": name, "n_restored": done.n_tokens,
            "n_read": done.n_bytes, "timings": { "restore_ms": ms },
        }),
        _ => json!({ "id_slot": id, "n_erased": done.n_tokens }),
    }))
}
