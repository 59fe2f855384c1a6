//! Resumable streams, as llama-server keeps them: a streamed chat or
//! completion sent with `X-Conversation-Id: ID` runs to its end whether or
//! not its client stays, its SSE chunks kept in a session under `ID`;
//! `GET /v1/stream?conv_id=ID&from=N` replays them from chunk `N` and follows
//! the live ones, `DELETE /v1/stream?conv_id=ID` stops the generation and
//! forgets the session (204; 404 when there is none).
//!
//! Bounds: a session holds at most `MAX_BYTES` of chunks (past that the
//! generation is stopped with an error chunk), a finished one is forgotten
//! `TTL` after it ended, and at most `MAX_SESSIONS` exist (a new one evicts
//! the oldest finished one, else is refused).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use tokio::sync::Notify;

use crate::error::ApiError;
use crate::Shared;

/// Most bytes of chunks one session keeps.
const MAX_BYTES: usize = 4 << 20;
/// How long a finished session stays.
const TTL: Duration = Duration::from_secs(300);
/// Most sessions at once.
const MAX_SESSIONS: usize = 256;

/// One conversation's stream.
pub(crate) struct Session {
    buf: Mutex<Buf>,
    /// Woken on every new chunk, at the end, and on cancel.
    changed: Notify,
}

#[derive(Default)]
struct Buf {
    /// SSE `data:` payloads, in order (`[DONE]` last when it ends well).
    chunks: Vec<String>,
    bytes: usize,
    /// When the generation ended (chunks complete).
    ended: Option<Instant>,
    cancelled: bool,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, Buf> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cancel(&self) {
        self.lock().cancelled = true;
        self.changed.notify_waiters();
    }
}

/// Every live session, by conversation id.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new session for `id`, cancelling and replacing any earlier one.
    fn create(&self, id: &str) -> Result<Arc<Session>, ApiError> {
        let mut map = self.lock();
        map.retain(|_, s| s.lock().ended.is_none_or(|t| t.elapsed() < TTL));
        if let Some(old) = map.remove(id) {
            old.cancel();
        }
        if map.len() >= MAX_SESSIONS {
            let oldest = map
                .iter()
                .filter_map(|(k, s)| s.lock().ended.map(|t| (t, k.clone())))
                .min();
            match oldest {
                Some((_, k)) => {
                    map.remove(&k);
                }
                None => {
                    return Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("{MAX_SESSIONS} resumable streams are running"),
                    ))
                }
            }
        }
        let s = Arc::new(Session {
            buf: Mutex::default(),
            changed: Notify::new(),
        });
        map.insert(id.to_string(), s.clone());
        Ok(s)
    }

    fn get(&self, id: &str) -> Option<Arc<Session>> {
        let map = self.lock();
        map.get(id)
            .filter(|s| s.lock().ended.is_none_or(|t| t.elapsed() < TTL))
            .cloned()
    }
}

/// Run `chunks` (a stream's SSE payloads) to the end under conversation
/// `id`, on a task of its own; the answer follows the session from its
/// first chunk, like any later `GET /v1/stream`.
pub(crate) fn detach(
    st: &Shared,
    id: &str,
    chunks: impl Stream<Item = String> + Send + 'static,
) -> Result<Response, ApiError> {
    let session = st.streams.create(id)?;
    let s = session.clone();
    tokio::spawn(async move {
        let mut chunks = std::pin::pin!(chunks);
        loop {
            let cancelled = s.changed.notified();
            if s.lock().cancelled {
                break; // dropping `chunks` cancels the request in the engine
            }
            let next = tokio::select! {
                c = chunks.next() => c,
                _ = cancelled => continue,
            };
            let Some(c) = next else { break };
            let mut b = s.lock();
            if b.bytes + c.len() > MAX_BYTES {
                let e = ApiError::internal(format!(
                    "the stream passed {MAX_BYTES} bytes, the most a resumable stream keeps"
                ));
                b.chunks.push(e.body().to_string());
                break;
            }
            b.bytes += c.len();
            b.chunks.push(c);
            drop(b);
            s.changed.notify_waiters();
        }
        s.lock().ended = Some(Instant::now());
        s.changed.notify_waiters();
    });
    Ok(follow(session, 0))
}

/// SSE of `session`'s chunks from `from` on, live ones as they come.
fn follow(session: Arc<Session>, from: usize) -> Response {
    let events = futures_util::stream::unfold((session, from), |(s, at)| async move {
        loop {
            let changed = s.changed.notified();
            {
                let b = s.lock();
                if let Some(c) = b.chunks.get(at) {
                    let ev = SseEvent::default().data(c.clone());
                    return Some((Ok::<_, Infallible>(ev), (s.clone(), at + 1)));
                }
                if b.ended.is_some() || b.cancelled {
                    return None;
                }
            }
            changed.await;
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `?conv_id=ID&from=N`: the id, and the first chunk wanted (default 0).
type StreamQuery = HashMap<String, String>;

fn conv_id(q: &StreamQuery) -> Result<&str, ApiError> {
    q.get("conv_id")
        .map(String::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| ApiError::bad_request("`conv_id` is required"))
}

/// `GET /v1/stream?conv_id=ID&from=N`.
pub(crate) async fn get(
    State(st): State<Shared>,
    Query(q): Query<StreamQuery>,
) -> Result<Response, ApiError> {
    let from = match q.get("from") {
        None => 0,
        Some(n) => n
            .parse()
            .map_err(|_| ApiError::bad_request("`from` must be a chunk number"))?,
    };
    let s = st
        .streams
        .get(conv_id(&q)?)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such stream"))?;
    Ok(follow(s, from))
}

/// `DELETE /v1/stream?conv_id=ID`: stop it and forget it.
pub(crate) async fn delete(
    State(st): State<Shared>,
    Query(q): Query<StreamQuery>,
) -> Result<StatusCode, ApiError> {
    let s = st
        .streams
        .lock()
        .remove(conv_id(&q)?)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such stream"))?;
    s.cancel();
    Ok(StatusCode::NO_CONTENT)
}
