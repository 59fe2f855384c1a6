//! A minimal `POST /v1/responses` (OpenAI's Responses API) over the chat
//! path: `input` (a string, or message items whose content is a string or
//! `input_text`/`output_text` parts) and `instructions` become chat
//! messages; `max_output_tokens`, `temperature`, `top_p`, `seed` and
//! `stream` apply. Whole: a `response` object with one assistant message;
//! streamed: the `response.created`, `response.output_text.delta`,
//! `response.output_text.done` and `response.completed` events.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use glint::engine::{Event, Usage};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::request::{self, Endpoint};
use crate::{body_json, collect, now, submit, Shared};

/// The chat request a responses body stands for.
fn as_chat(body: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let bad = |m: &str| ApiError::bad_request(m.to_string());
    let mut messages = Vec::new();
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(bad("`instructions` must be a string")),
    }
    match body.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                let content = match item.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .map(
                            |p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                                (
                                    Some("input_text" | "output_text" | "text"),
                                    Some(Value::String(t)),
                                ) => Ok(t.as_str()),
                                _ => Err(bad(&format!("input[{i}]: only text parts"))),
                            },
                        )
                        .collect::<Result<Vec<_>, _>>()?
                        .concat(),
                    _ => return Err(bad(&format!("input[{i}] needs a `content`"))),
                };
                messages.push(json!({"role": role, "content": content}));
            }
        }
        _ => return Err(bad("`input` must be a string or an array of message items")),
    }
    let mut chat = Map::new();
    chat.insert("messages".into(), Value::Array(messages));
    for (from, to) in [
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("seed", "seed"),
        ("stream", "stream"),
        ("timings_per_token", "timings_per_token"),
        ("return_progress", "return_progress"),
    ] {
        if let Some(v) = body.get(from) {
            chat.insert(to.into(), v.clone());
        }
    }
    Ok(chat)
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": { "cached_tokens": u.cached_tokens },
        "output_tokens": u.completion_tokens,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The `response` object: `status` completed (or incomplete at the
/// token limit), one assistant message holding `text`.
fn response_json(id: &str, model: &str, text: &str, status: &str, usage: Option<&Usage>) -> Value {
    let mut v = json!({
        "id": id,
        "object": "response",
        "created_at": now(),
        "status": status,
        "model": model,
        "output": [{
            "type": "message",
            "id": format!("msg_{id}"),
            "status": "completed",
            "role": "assistant",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }],
        }],
        "parallel_tool_calls": false,
        "tool_choice": "auto",
        "tools": [],
    });
    if let Some(u) = usage {
        v["usage"] = usage_json(u);
    }
    v
}

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let chat = as_chat(&body)?;
    let mut opts = request::options(&chat, Endpoint::Chat)?;
    st.defaults.apply(&chat, &mut opts.req);
    let messages = request::messages(&chat)?;
    let (_, ids) = l
        .chat
        .prompt(l.engine.model().tokenizer(), &messages, true)
        .map_err(|e| ApiError::bad_request(format!("the chat template failed: {e}")))?;
    let stream = opts.stream;
    let (per_token, progress) = (opts.timings_per_token, opts.return_progress);
    let rx = submit(&st, l, opts, ids)?;
    let id = format!(
        "resp_{}",
        st.next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let model = l.name.clone();
    let status = |r: Option<glint::engine::FinishReason>| match r {
        Some(glint::engine::FinishReason::Length) => "incomplete",
        _ => "completed",
    };
    if !stream {
        let c = tokio::time::timeout(st.timeout, collect(rx, 1))
            .await
            .map_err(|_| ApiError::new(StatusCode::REQUEST_TIMEOUT, "the request timed out"))??;
        let c = &c[0];
        return Ok(Json(response_json(
            &id,
            &model,
            &c.text,
            status(c.reason),
            Some(&c.usage),
        ))
        .into_response());
    }
    let timeout = st.timeout;
    let first = response_json(&id, &model, "", "in_progress", None);
    let start = vec![
        (
            "response.created",
            json!({ "type": "response.created", "response": first }),
        ),
        (
            "response.output_item.added",
            json!({ "type": "response.output_item.added", "output_index": 0,
                    "item": { "type": "message", "id": format!("msg_{id}"), "status": "in_progress",
                              "role": "assistant", "content": [] } }),
        ),
        (
            "response.content_part.added",
            json!({ "type": "response.content_part.added", "item_id": format!("msg_{id}"),
                    "output_index": 0, "content_index": 0,
                    "part": { "type": "output_text", "text": "", "annotations": [] } }),
        ),
    ];
    let state = (
        rx,
        String::new(),
        std::collections::VecDeque::from(start),
        false,
        crate::timings::Clock::new(),
    );
    let events = futures_util::stream::unfold(
        state,
        move |(mut rx, mut text, mut pending, mut done, mut clock)| {
            let (id, model) = (id.clone(), model.clone());
            async move {
                loop {
                    if let Some((name, data)) = pending.pop_front() {
                        let ev = SseEvent::default().event(name).data(data.to_string());
                        return Some((Ok::<_, Infallible>(ev), (rx, text, pending, done, clock)));
                    }
                    if done {
                        return None;
                    }
                    let item = format!("msg_{id}");
                    let ev = tokio::time::timeout(timeout, rx.recv()).await;
                    if let Ok(Some(ev)) = &ev {
                        clock.on_event(ev);
                    }
                    match ev {
                        Ok(Some(Event::Progress { .. })) => {
                            if progress {
                                let mut v = json!({ "type": "response.in_progress",
                                    "response": response_json(&id, &model, "", "in_progress", None),
                                    "prompt_progress": clock.progress() });
                                if per_token {
                                    v["timings"] = clock.json();
                                }
                                pending.push_back(("response.in_progress", v));
                            }
                        }
                        Ok(Some(Event::Delta { text: t, .. })) => {
                            if !t.is_empty() {
                                text.push_str(&t);
                                let mut v = json!({ "type": "response.output_text.delta", "item_id": item,
                                        "output_index": 0, "content_index": 0, "delta": t });
                                if per_token {
                                    v["timings"] = clock.json();
                                }
                                pending.push_back(("response.output_text.delta", v));
                            }
                        }
                        Ok(Some(Event::Done { reason, usage, .. })) => {
                            let whole = response_json(
                                &id,
                                &model,
                                &text,
                                status(Some(reason)),
                                Some(&usage),
                            );
                            pending.push_back((
                                "response.output_text.done",
                                json!({ "type": "response.output_text.done", "item_id": item,
                                    "output_index": 0, "content_index": 0, "text": text }),
                            ));
                            pending.push_back((
                                "response.output_item.done",
                                json!({ "type": "response.output_item.done", "output_index": 0,
                                    "item": whole["output"][0] }),
                            ));
                            pending.push_back((
                                "response.completed",
                                json!({ "type": "response.completed", "response": whole,
                                        "timings": clock.json() }),
                            ));
                            done = true;
                        }
                        Ok(Some(Event::Failed(m))) => {
                            pending.push_back(("error", ApiError::internal(m).body()));
                            done = true;
                        }
                        Ok(None) | Err(_) => {
                            pending.push_back((
                                "error",
                                ApiError::internal("the stream ended").body(),
                            ));
                            done = true;
                        }
                    }
                }
            }
        },
    );
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
