//! glint's OpenAI-compatible HTTP server.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/chat/completions` | messages rendered with the model's chat template; streamed (SSE) or whole |
//! | `POST /v1/completions` | a text (or token id) prompt; streamed or whole |
//! | `POST /v1/responses` | a minimal Responses API: `input`, `instructions`, `max_output_tokens`; whole or streamed events |
//! | `GET /v1/models` | the one model served |
//! | `POST /completion` | llama-server's native completion: prompt as text, ids or a mix; `timings`, `stop_type`, `n_probs`; streamed as `data: {content, stop}` |
//! | `POST /infill` | llama-server's fill-in-the-middle: `input_prefix`, `input_suffix`, `prompt` around the model's FIM tokens |
//! | `POST /tokenize`, `POST /detokenize` | llama-server's: text to token ids (`add_special`, `parse_special`, `with_pieces`) and back |
//! | `POST /apply-template` | llama-server's: the messages rendered by the chat template |
//! | `GET /slots`, `POST /slots/{id}?action=save\|restore\|erase` | llama-server's: slot state, and slot files under `--slot-save-path` |
//! | `GET /props` | llama-server's: slots, context per slot, the template, BOS/EOS |
//! | `GET /health` | `{"status":"ok"}`, or 503 while the model loads; never needs the API key |
//! | `GET /metrics` | Prometheus text, llama-server's `llamacpp:` names (with `--metrics`; 501 without, as llama-server) |
//!
//! The HTTP side (axum on tokio) validates, renders, tokenizes, queues and
//! streams; all model compute runs on the [`Engine`]'s thread. A request's
//! events come back over a channel; a client that goes away closes it, and
//! the engine frees the slot at its next step.

#![deny(missing_docs)]

mod embeddings;
mod error;
mod metrics;
mod native;
mod openai;
mod request;
mod responses;
mod streams;
mod timings;
mod tools;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use glint::chat::tools::{OutputParser, ReasoningFormat, ToolFormat};
use glint::chat::Chat;
use glint::engine::{Event, EventSink, TokenLogprob};
use glint::sample::LogitBiasEntry;
use glint::{ContextParams, Engine, EngineParams, Model, ModelParams};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

pub use error::{ApiError, ServerError};
use metrics::{Metrics, Tracker};
use openai::{total_usage, Choice, Meta};
use request::{Endpoint, Options, Prompt};

/// How to run the server.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to listen on (`127.0.0.1`).
    pub host: String,
    /// Port (8080; 0 = any free port, printed when bound).
    pub port: u16,
    /// The GGUF model.
    pub model_path: std::path::PathBuf,
    /// How to load it.
    pub model_params: ModelParams,
    /// The context: `n_seq_max` is the number of slots; `n_ctx` 0 = 4096 or
    /// the model's training context if smaller.
    pub ctx_params: ContextParams,
    /// Most requests waiting for a slot (more get 503).
    pub max_queue: usize,
    /// Most prompt tokens per engine step (0 = up to `n_batch`).
    pub prefill_per_step: usize,
    /// Bytes of host memory keeping prefixes that idle slots give up
    /// (0 = none).
    pub cache_ram: usize,
    /// Checkpoints of each slot's recurrent state (`--ctx-checkpoints`;
    /// see [`EngineParams::ctx_checkpoints`]).
    pub ctx_checkpoints: usize,
    /// Fewest tokens between two checkpoints (`--checkpoint-min-step`).
    pub checkpoint_min_step: usize,
    /// Bytes of checkpoints per slot (`--ctx-checkpoints-mib`).
    pub checkpoint_bytes: usize,
    /// The served model's names (`--alias`, comma-separated as
    /// llama-server's; its id is the alphabetically first; default: the
    /// file's name).
    pub alias: Option<String>,
    /// Tags shown in `/v1/models` (`--tags`).
    pub tags: Vec<String>,
    /// A Jinja chat template replacing the model's (`--chat-template-file`).
    pub chat_template: Option<String>,
    /// Defaults for requests that do not set them (`--n-predict`,
    /// `--temp`, `--seed`, `-gan`/`-gaw`).
    pub defaults: RequestDefaults,
    /// `GET /slots` (off with `--no-slots`; `POST /slots/{id}` needs only
    /// `slot_save_path`, as llama-server's).
    pub slots_endpoint: bool,
    /// Origins allowed by CORS (`--cors-origins`; empty or `*` = any).
    pub cors_origins: Vec<String>,
    /// The folder of slot files (`--slot-save-path`); `None`: slot save
    /// and restore are off.
    pub slot_save_path: Option<std::path::PathBuf>,
    /// When a slot's context is full, shift it (drop half of what follows
    /// the kept tokens) instead of ending the request with `length`.
    pub context_shift: bool,
    /// Tokens a context shift keeps by default (a request's `n_keep` wins;
    /// -1 = the whole prompt).
    pub n_keep: i64,
    /// Keys any one of which is required as `Authorization: Bearer KEY` or
    /// `X-Api-Key: KEY` (none: no key needed).
    pub api_keys: Vec<String>,
    /// Longest a request may take, and longest a stream may stay silent.
    pub timeout: Duration,
    /// Largest request body (413 beyond).
    pub max_body_bytes: usize,
    /// Serve `GET /metrics`.
    pub metrics: bool,
    /// Every chat response carries `__verbose` (its rendered prompt), as
    /// llama-server's with `--verbose`.
    pub verbose: bool,
    /// The chat templates' `enable_thinking` (`--reasoning off`: false).
    pub enable_thinking: bool,
    /// What becomes of a `<think>` block (`--reasoning-format`; a
    /// request's `reasoning_format` wins).
    pub reasoning_format: ReasoningFormat,
    /// Serve embeddings (`--embedding`), pooled this way (`--pooling`;
    /// `None`: every token's); the completion routes answer 501 then.
    pub embedding: Option<Option<glint::embed::Pooling>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 8080,
            model_path: Default::default(),
            model_params: ModelParams::default(),
            ctx_params: ContextParams {
                n_ctx: 0,
                n_seq_max: 4,
                ..Default::default()
            },
            max_queue: 64,
            prefill_per_step: EngineParams::default().prefill_per_step,
            cache_ram: EngineParams::default().cache_ram,
            ctx_checkpoints: EngineParams::default().ctx_checkpoints,
            checkpoint_min_step: EngineParams::default().checkpoint_min_step,
            checkpoint_bytes: EngineParams::default().checkpoint_bytes,
            alias: None,
            tags: Vec::new(),
            chat_template: None,
            defaults: RequestDefaults::default(),
            slots_endpoint: true,
            cors_origins: Vec::new(),
            slot_save_path: None,
            context_shift: false,
            n_keep: 0,
            api_keys: Vec::new(),
            timeout: Duration::from_secs(600),
            max_body_bytes: 8 << 20,
            verbose: false,
            embedding: None,
            enable_thinking: true,
            reasoning_format: ReasoningFormat::default(),
            metrics: false,
        }
    }
}

/// What a request gets for the fields it leaves out (llama-server's
/// `--n-predict`, `--temp`, `--seed`, `--grp-attn-n/-w`).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestDefaults {
    /// Most tokens to generate (`None`: until the end or a full context).
    pub n_predict: Option<usize>,
    /// Sampling temperature (`None`: the sampler chain's default, 0.8).
    pub temp: Option<f32>,
    /// RNG seed (`None`: random).
    pub seed: Option<u32>,
    /// Self-extend group factor and window (1 = off).
    pub ga_n: i32,
    /// Self-extend window.
    pub ga_w: i32,
}

impl Default for RequestDefaults {
    fn default() -> Self {
        RequestDefaults {
            n_predict: None,
            temp: None,
            seed: None,
            ga_n: 1,
            ga_w: 512,
        }
    }
}

impl RequestDefaults {
    /// Fill in what `body` leaves out.
    pub(crate) fn apply(&self, body: &Map<String, Value>, req: &mut glint::engine::Request) {
        let unset = |keys: &[&str]| keys.iter().all(|k| body.get(*k).is_none_or(Value::is_null));
        if unset(&["max_tokens", "max_completion_tokens", "n_predict"]) {
            req.max_tokens = req.max_tokens.or(self.n_predict);
        }
        if let Some(t) = self.temp.filter(|_| unset(&["temperature"])) {
            req.sampling.temp = t;
        }
        if let Some(s) = self.seed.filter(|_| unset(&["seed"])) {
            req.sampling.seed = s;
        }
        (req.ga_n, req.ga_w) = (self.ga_n, self.ga_w);
    }
}

/// The model once loaded: the engine and the chat template.
pub(crate) struct Loaded {
    engine: Engine,
    chat: Chat,
    /// The model's id in responses: the first of `aliases`, or the file's
    /// name.
    name: String,
    aliases: Vec<String>,
    tags: Vec<String>,
    /// How the template's model writes tool calls.
    tool_format: ToolFormat,
    /// How embeddings are pooled (`--pooling`, else the model's own).
    pooling: glint::embed::Pooling,
}

/// What every handler shares.
struct AppState {
    loaded: OnceLock<Loaded>,
    api_keys: Vec<String>,
    timeout: Duration,
    next_id: AtomicU64,
    /// With `--metrics`: what `/metrics` shows.
    metrics: Option<Arc<Metrics>>,
    /// Unix seconds at start (llama-server's `Process-Start-Time-Unix`).
    started: u64,
    /// `--context-shift` and `--keep`.
    context_shift: bool,
    n_keep: i64,
    /// The model file, for `/props`.
    model_path: String,
    /// Where `/slots/{id}?action=save|restore` files live.
    slot_save_path: Option<std::path::PathBuf>,
    /// `/slots` served.
    slots_endpoint: bool,
    /// Defaults of the fields a request leaves out.
    defaults: RequestDefaults,
    verbose: bool,
    /// The templates' `enable_thinking` (false with `--reasoning off`).
    enable_thinking: bool,
    reasoning_format: ReasoningFormat,
    /// Resumable streams (`X-Conversation-Id`).
    streams: streams::Sessions,
    /// Serving embeddings (`--embedding`).
    embedding: bool,
}

impl AppState {
    fn loaded(&self) -> Result<&Loaded, ApiError> {
        self.loaded
            .get()
            .ok_or_else(|| ApiError::unavailable("Loading model"))
    }
}

type Shared = Arc<AppState>;

/// The keys of an API key file (llama-server's `--api-key-file`): one per
/// line, surrounding whitespace dropped (a file written on Windows ends its
/// lines in `\r`), blank lines and lines starting with `#` skipped. A file
/// that cannot be read or lists no key is an error naming it: a server
/// meant to be guarded must not start open.
pub fn read_api_key_file(path: &std::path::Path) -> Result<Vec<String>, ServerError> {
    let bad = |reason: String| ServerError::ApiKeyFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if keys.is_empty() {
        return Err(bad("no key in it (one per line)".into()));
    }
    Ok(keys)
}

/// Bind, load the model in the background (`/health` says 503 meanwhile)
/// and serve until Ctrl-C. Prints `listening on http://ADDR` to stderr once
/// bound.
pub fn run(cfg: Config) -> Result<(), ServerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| ServerError::Io {
            what: "starting the async runtime".into(),
            err,
        })?;
    rt.block_on(serve(cfg))
}

async fn serve(cfg: Config) -> Result<(), ServerError> {
    let listeners = bind_all(&cfg.host, cfg.port).await?;
    let state = Arc::new(AppState {
        loaded: OnceLock::new(),
        api_keys: cfg.api_keys.clone(),
        timeout: cfg.timeout,
        next_id: AtomicU64::new(1),
        metrics: cfg.metrics.then(Default::default),
        started: now(),
        context_shift: cfg.context_shift,
        n_keep: cfg.n_keep,
        model_path: cfg.model_path.display().to_string(),
        slot_save_path: cfg.slot_save_path.clone(),
        slots_endpoint: cfg.slots_endpoint,
        defaults: cfg.defaults.clone(),
        verbose: cfg.verbose,
        enable_thinking: cfg.enable_thinking,
        reasoning_format: cfg.reasoning_format,
        streams: Default::default(),
        embedding: cfg.embedding.is_some(),
    });
    let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<ServerError>();
    let st = state.clone();
    let load_cfg = cfg.clone();
    tokio::task::spawn_blocking(move || match load(&load_cfg) {
        Ok(l) => {
            eprintln!(
                "glint serve: model {} loaded, {} slots of {} cells",
                l.name,
                l.engine.n_slots(),
                l.engine.n_ctx_slot()
            );
            let _ = st.loaded.set(l);
        }
        Err(e) => {
            let _ = fail_tx.send(e);
        }
    });

    let app = router(state.clone(), cfg.max_body_bytes, &cfg.cors_origins);
    let failed = Arc::new(std::sync::Mutex::new(None));
    let f = failed.clone();
    let shutdown = async move {
        // A load that succeeded drops its sender: that is no reason to stop.
        let load_failed = async {
            match fail_rx.await {
                Ok(e) => e,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            e = load_failed => *f.lock().unwrap() = Some(e),
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let accepting =
        futures_util::future::join_all(listeners.into_iter().map(|l| accept_loop(l, app.clone())));
    tokio::select! {
        _ = accepting => {}
        _ = shutdown => {}
    }
    let e = failed.lock().unwrap().take();
    match e {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Listeners on every address of `host` (llama-server's comma-separated
/// list, e.g. `127.0.0.1,::1`), all on `port`; with port 0 the first
/// address picks a free port and the others take the same one.
async fn bind_all(host: &str, port: u16) -> Result<Vec<tokio::net::TcpListener>, ServerError> {
    let mut out: Vec<tokio::net::TcpListener> = Vec::new();
    let mut port = port;
    for h in host.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let h = h.trim_start_matches('[').trim_end_matches(']');
        let what = || format!("binding {h} port {port}");
        let l = tokio::net::TcpListener::bind((h, port))
            .await
            .map_err(|err| ServerError::Io { what: what(), err })?;
        let bound: SocketAddr = l
            .local_addr()
            .map_err(|err| ServerError::Io { what: what(), err })?;
        port = bound.port();
        eprintln!("glint serve: listening on http://{bound}");
        out.push(l);
    }
    if out.is_empty() {
        return Err(ServerError::Io {
            what: format!("--host {host:?}"),
            err: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address"),
        });
    }
    Ok(out)
}

/// Serve `app` on every connection `listener` accepts, each on its own task.
async fn accept_loop(listener: tokio::net::TcpListener, app: Router) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            // Out of file descriptors and the like: a pause, then on.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // TCP_NODELAY, as llama-server's httplib build: a stream is many
        // small writes, one a token, and Nagle's algorithm would hold each
        // behind the client's delayed ACK of the one before.
        let _ = tcp.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                // Header names as llama-server writes them.
                .title_case_headers(true)
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc);
            // A client that hangs up or speaks broken HTTP ends only its
            // own connection.
            let _ = conn.await;
        });
    }
}

/// `--alias a,b,c`: the names, sorted and without repeats (llama-server
/// keeps them in a `std::set`, and the model's id is the first).
fn aliases(alias: Option<&str>) -> Vec<String> {
    let set: std::collections::BTreeSet<String> = alias
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    set.into_iter().collect()
}

/// Load the model, its chat template, and start the engine.
fn load(cfg: &Config) -> Result<Loaded, ServerError> {
    let model = Model::load(&cfg.model_path, &cfg.model_params)?;
    if let Some(why) = model.backend_passed_over() {
        eprintln!("glint serve: {why}");
    }
    if let Some(t) = model.gpu_tune_report() {
        eprint!("glint serve: {t}");
    }
    let chat = match &cfg.chat_template {
        Some(source) => Chat::from_source(source, model.tokenizer())?,
        None => Chat::for_model(&model)?,
    };
    let mut ctx = cfg.ctx_params.clone();
    ctx.embeddings |= cfg.embedding.is_some();
    if ctx.n_ctx == 0 {
        ctx.n_ctx = 4096.min(model.hparams().n_ctx_train as u32);
    }
    let engine = Engine::start(
        &model,
        ctx,
        EngineParams {
            max_queue: cfg.max_queue,
            prefill_per_step: cfg.prefill_per_step,
            cache_ram: cfg.cache_ram,
            ctx_checkpoints: cfg.ctx_checkpoints,
            checkpoint_min_step: cfg.checkpoint_min_step,
            checkpoint_bytes: cfg.checkpoint_bytes,
            ..EngineParams::default()
        },
    )?;
    let aliases = aliases(cfg.alias.as_deref());
    let name = aliases.first().cloned().unwrap_or_else(|| {
        cfg.model_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "glint".into())
    });
    let tool_format = ToolFormat::detect(chat.source());
    let pooling = match cfg.embedding {
        Some(Some(p)) => p,
        _ => glint::embed::Pooling::of_model(&model).unwrap_or(glint::embed::Pooling::None),
    };
    Ok(Loaded {
        engine,
        tool_format,
        pooling,
        chat,
        name,
        aliases,
        tags: cfg.tags.clone(),
    })
}

fn router(state: Shared, max_body: usize, cors_origins: &[String]) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/chat/completions/input_tokens", post(chat_input_tokens))
        .route("/v1/completions", post(completions))
        // llama-server's /completions (no /v1) is its native route.
        .route("/completions", post(native::completion))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/metrics", get(metrics_text))
        .route("/completion", post(native::completion))
        .route("/infill", post(native::infill))
        .route("/v1/responses", post(responses::responses))
        .route("/responses", post(responses::responses))
        .route("/tokenize", post(native::tokenize))
        .route("/detokenize", post(native::detokenize))
        .route("/apply-template", post(native::apply_template))
        .route("/props", get(native::props))
        .route("/slots", get(native::slots))
        .route("/slots/{id}", post(native::slot_action))
        .route("/v1/stream", get(streams::get).delete(streams::delete))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/embeddings", post(embeddings::native))
        .route("/embedding", post(embeddings::native))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .merge(api)
        // The fallbacks read the body (up to the limit) before answering:
        // hyper closes a keep-alive connection whose request body is left
        // unread, and a client's next request on it would fail.
        .fallback(|_: Result<Bytes, BytesRejection>| async {
            ApiError::new(StatusCode::NOT_FOUND, "no such route")
        })
        .method_not_allowed_fallback(|_: Result<Bytes, BytesRejection>| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(
            Arc::new(cors_origins.to_vec()),
            cors,
        ))
        .with_state(state)
}

/// CORS as llama-server answers it. `Access-Control-Allow-Origin` echoes the
/// request's `Origin` when `--cors-origins` allows it: any origin (no list,
/// or `*`), any loopback origin (`localhost`: `localhost`, `127.0.0.1`,
/// `[::1]`, any scheme and port), or one named in the list. A preflight
/// (`OPTIONS`, on any path) is answered here with 200, before routing and
/// the API key (browsers send no credentials with it).
async fn cors(State(origins): State<Arc<Vec<String>>>, req: HttpRequest, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| header::HeaderValue::to_str(o).ok())
        .filter(|o| origin_allowed(&origins, o))
        .and_then(|o| header::HeaderValue::from_str(o).ok());
    let preflight = req.method() == axum::http::Method::OPTIONS;
    let mut res = if preflight {
        StatusCode::OK.into_response()
    } else {
        next.run(req).await
    };
    let h = res.headers_mut();
    if let Some(o) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
    }
    if preflight {
        let v = header::HeaderValue::from_static;
        h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, v("true"));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            v("GET, POST, DELETE, OPTIONS"),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v("*"));
    }
    res
}

/// Whether `--cors-origins` (`origins`) lets `origin` read responses.
fn origin_allowed(origins: &[String], origin: &str) -> bool {
    if origins.is_empty() {
        return true;
    }
    origins.iter().any(|o| match o.as_str() {
        "*" => true,
        "localhost" => {
            let rest = origin.split_once("://").map_or(origin, |(_, r)| r);
            let host = match rest.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or(""),
                None => rest.split([':', '/']).next().unwrap_or(""),
            };
            matches!(host, "localhost" | "127.0.0.1" | "::1")
        }
        o => o == origin,
    })
}

/// `Authorization: Bearer KEY` or `X-Api-Key: KEY` with any of the keys,
/// when keys are set.
async fn auth(State(st): State<Shared>, req: HttpRequest, next: Next) -> Response {
    if !st.api_keys.is_empty() {
        let h = req.headers();
        let header = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
        let known = |k: Option<&str>| k.is_some_and(|k| st.api_keys.iter().any(|key| key == k));
        if !known(bearer) && !known(header("x-api-key")) {
            return ApiError::new(StatusCode::UNAUTHORIZED, "Invalid API Key").into_response();
        }
    }
    next.run(req).await
}

/// Prometheus text, as llama-server's `/metrics`.
async fn metrics_text(State(st): State<Shared>) -> Result<Response, ApiError> {
    let Some(m) = &st.metrics else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support metrics endpoint. Start it with `--metrics`",
        ));
    };
    let l = st.loaded()?;
    let text = m.render(
        l.engine.n_processing(),
        l.engine.n_waiting(),
        l.engine.decode_stats(),
    );
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4".to_string(),
            ),
            (
                header::HeaderName::from_static("process-start-time-unix"),
                st.started.to_string(),
            ),
        ],
        text,
    )
        .into_response())
}

async fn health(State(st): State<Shared>) -> Response {
    match st.loaded() {
        Ok(l) => {
            let busy = l.engine.n_processing();
            Json(json!({
                "status": "ok",
                "slots_idle": l.engine.n_slots() - busy,
                "slots_processing": busy,
                "requests_waiting": l.engine.n_waiting(),
            }))
            .into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn models(State(st): State<Shared>) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let hp = l.engine.model().hparams();
    Ok(Json(json!({
        "object": "list",
        "data": [{
            "id": l.name,
            "object": "model",
            "created": now(),
            "owned_by": "glint",
            "aliases": l.aliases,
            "tags": l.tags,
            "meta": {
                "n_ctx_train": hp.n_ctx_train,
                "n_vocab": l.engine.model().n_vocab(),
                "n_ctx_slot": l.engine.n_ctx_slot(),
                "n_slots": l.engine.n_slots(),
            },
        }],
    })))
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The body as a JSON object: a body over the limit is 413, anything else
/// unreadable or not JSON is 400.
fn body_json(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|r| {
        let status = match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, r.body_text())
    })?;
    request::parse_body(&bytes)
}

async fn chat_completions(
    State(st): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let mut opts = request::options(&body, Endpoint::Chat)?;
    st.defaults.apply(&body, &mut opts.req);
    let (text, ids) = chat_prompt(&st, l, &body)?;
    let (parser, calls) = tools::chat_output(l, st.reasoning_format, &body, &text)?;
    match calls {
        Some(tools::CallGrammar::Forced(g)) => {
            if opts.req.grammar.is_some() {
                return Err(ApiError::bad_request(
                    "a call is forced by tool_choice: it cannot be combined with `grammar`, `json_schema` or `response_format`",
                ));
            }
            opts.req.grammar = Some(g);
        }
        // The request's own grammar, if any, wins over a lazy one.
        Some(tools::CallGrammar::Lazy(g, trigger)) if opts.req.grammar.is_none() => {
            opts.req.grammar = Some(g);
            opts.req.grammar_trigger = Some(trigger);
        }
        _ => {}
    }
    // llama-server's `__verbose` (request `verbose`, or the server's
    // --verbose): the rendered prompt, for checking a template, and how
    // the answer is constrained and parsed (its generation_settings' names).
    let verbose = st.verbose || request::Fields(&body).bool("verbose")?.unwrap_or(false);
    let verbose = verbose.then(|| {
        json!({
            "prompt": text,
            "chat_format": l.tool_format.name(),
            "grammar_lazy": opts.req.grammar_trigger.is_some(),
            "grammar_triggers": opts.req.grammar_trigger.iter().collect::<Vec<_>>(),
            "has_grammar": opts.req.grammar.is_some(),
        })
    });
    respond(
        &st,
        l,
        Endpoint::Chat,
        opts,
        ids,
        (verbose, Some(parser)),
        conversation(&headers),
    )
    .await
}

/// A chat body's prompt, as text and tokens. A conversation that ends
/// with an assistant message continues it (llama-server's prefill, vLLM's
/// `continue_final_message`): the turns before it are rendered with the
/// generation prompt and its text follows, unclosed.
fn chat_prompt(
    st: &Shared,
    l: &Loaded,
    body: &Map<String, Value>,
) -> Result<(String, Vec<u32>), ApiError> {
    let text = chat_text(st, l, body)?;
    let failed = |e: glint::Error| ApiError::bad_request(format!("the chat template failed: {e}"));
    let ids = l
        .chat
        .tokenize(l.engine.model().tokenizer(), &text)
        .map_err(failed)?;
    Ok((text, ids))
}

/// A chat body rendered by the template (see [`chat_prompt`]): with the
/// body's `tools`, `chat_template_kwargs`, the server's `enable_thinking`
/// (`--reasoning off` makes it false) and the date variables llama.cpp
/// gives templates (`date_string`, `datetime`).
pub(crate) fn chat_text(
    st: &Shared,
    l: &Loaded,
    body: &Map<String, Value>,
) -> Result<String, ApiError> {
    let mut messages = request::messages(body)?;
    glint::chat::tools::arguments_as_objects(&mut messages);
    let f = request::Fields(body);
    let add_generation_prompt = f.bool("add_generation_prompt")?;
    let continue_final = f.bool("continue_final_message")?;
    if add_generation_prompt == Some(true) && continue_final == Some(true) {
        return Err(ApiError::bad_request(
            "`add_generation_prompt` and `continue_final_message` cannot both be true",
        ));
    }
    let is_assistant = |m: &Value| m["role"] == "assistant";
    let trailing = messages
        .iter()
        .rev()
        .take_while(|m| is_assistant(m))
        .count();
    if trailing >= 2 {
        return Err(ApiError::bad_request(
            "cannot have 2 or more assistant messages at the end of the list",
        ));
    }
    let prefill = match (trailing, add_generation_prompt) {
        (1, Some(true)) | (0, _) => None,
        _ => messages
            .pop()
            .map(|m| m["content"].as_str().unwrap_or("").to_string()),
    };
    let tools = match body.get("tools") {
        None | Some(Value::Null) => None,
        Some(t @ Value::Array(_)) => Some(t),
        Some(_) => return Err(ApiError::bad_request("`tools` must be an array")),
    };
    let mut extra = Map::new();
    let today = |fmt: &str| {
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        civil_date(now, fmt)
    };
    extra.insert("date_string".into(), json!(today("%d %b %Y")));
    extra.insert("datetime".into(), json!(today("%b %d %Y")));
    extra.insert("enable_thinking".into(), json!(st.enable_thinking));
    // FireFunction v2's template prints the tools from `functions`.
    let functions = tools
        .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
        .map(|t| serde_json::to_string_pretty(t).unwrap_or_default())
        .unwrap_or_default();
    extra.insert("functions".into(), json!(functions));
    match body.get("chat_template_kwargs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(kw)) => extra.extend(kw.clone()),
        Some(_) => {
            return Err(ApiError::bad_request(
                "`chat_template_kwargs` must be an object",
            ))
        }
    }
    let failed = |e: glint::Error| ApiError::bad_request(format!("the chat template failed: {e}"));
    let add = prefill.is_some() || add_generation_prompt.unwrap_or(true);
    let mut text = l
        .chat
        .render_with(&messages, add, tools, &extra)
        .map_err(failed)?;
    text.push_str(prefill.as_deref().unwrap_or(""));
    Ok(text)
}

/// The UTC date of unix time `secs` as `%d`, `%b`, `%Y` put it (the only
/// directives the date variables use).
fn civil_date(secs: i64, fmt: &str) -> String {
    // Howard Hinnant's days-to-civil.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    fmt.replace("%d", &format!("{d:02}"))
        .replace("%b", MONTHS[(m - 1) as usize])
        .replace("%Y", &y.to_string())
}

/// llama-server's `POST /chat/completions/input_tokens`: how many tokens a
/// chat body's prompt takes, without running it.
async fn chat_input_tokens(
    State(st): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let (_, ids) = chat_prompt(&st, l, &body)?;
    Ok(Json(json!({ "input_tokens": ids.len() })))
}

async fn completions(
    State(st): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = st.loaded()?;
    let body = body_json(body)?;
    let mut opts = request::options(&body, Endpoint::Completion)?;
    st.defaults.apply(&body, &mut opts.req);
    let ids = match request::prompt(&body)? {
        Prompt::Tokens(ids) => ids,
        Prompt::Text(text) => l
            .engine
            .model()
            .tokenizer()
            .encode(&text, true, true)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))?,
    };
    respond(
        &st,
        l,
        Endpoint::Completion,
        opts,
        ids,
        (None, None),
        conversation(&headers),
    )
    .await
}

/// Events of one request, from the engine thread to the handler (and its
/// timeline to the metrics, when kept).
struct Sink {
    tx: mpsc::UnboundedSender<Event>,
    tracker: Option<std::cell::RefCell<Tracker>>,
}

impl EventSink for Sink {
    fn send(&mut self, ev: Event) -> bool {
        if let Some(t) = &self.tracker {
            t.borrow_mut().on_event(&ev);
        }
        self.tx.send(ev).is_ok()
    }
    fn is_closed(&self) -> bool {
        if let Some(t) = &self.tracker {
            t.borrow_mut().on_poll();
        }
        self.tx.is_closed()
    }
}

/// Queue the request on the engine and answer with its events.
async fn respond(
    st: &Shared,
    l: &Loaded,
    endpoint: Endpoint,
    opts: Options,
    prompt: Vec<u32>,
    (verbose, parser): (Option<Value>, Option<OutputParser>),
    conversation: Option<String>,
) -> Result<Response, ApiError> {
    let (stream, include_usage) = (opts.stream, opts.include_usage);
    let (timings_per_token, return_progress) = (opts.timings_per_token, opts.return_progress);
    let want_logprobs = opts.req.logprobs.is_some();
    let n_choices = opts.req.n.max(1);
    let rx = submit(st, l, opts, prompt)?;
    let n = st.next_id.fetch_add(1, Ordering::Relaxed);
    let meta = Meta {
        id: match endpoint {
            Endpoint::Chat => format!("chatcmpl-{n}"),
            Endpoint::Completion => format!("cmpl-{n}"),
        },
        created: now(),
        model: l.name.clone(),
        endpoint,
    };
    if stream {
        let mut s = Streaming::new(
            meta,
            rx,
            n_choices,
            include_usage,
            want_logprobs,
            st.timeout,
        );
        s.timings = timings_per_token;
        s.progress = return_progress;
        if let Some(p) = &parser {
            s.chat = (0..n_choices)
                .map(|_| Some(tools::ChatStream::new(p.clone())))
                .collect();
        }
        match conversation {
            Some(id) => streams::detach(st, &id, chunks(s)),
            None => Ok(sse(s).into_response()),
        }
    } else {
        let whole = tokio::time::timeout(st.timeout, collect(rx, n_choices))
            .await
            .map_err(|_| ApiError::new(StatusCode::REQUEST_TIMEOUT, "the request timed out"))??;
        let mut v = meta.complete(&whole, want_logprobs, parser.as_ref());
        if let Some(verbose) = verbose {
            v["__verbose"] = verbose;
        }
        Ok(Json(v).into_response())
    }
}

/// Queue `prompt` with `opts` (the server's context shift and `--keep`
/// filled in); its events come on the returned channel.
pub(crate) fn submit(
    st: &Shared,
    l: &Loaded,
    mut opts: Options,
    prompt: Vec<u32>,
) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    if st.embedding {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support completions. Start it without `--embedding`",
        ));
    }
    resolve_bias(l.engine.model().tokenizer(), &mut opts)?;
    let Options {
        mut req, n_keep, ..
    } = opts;
    req.context_shift = st.context_shift;
    req.n_keep = match n_keep.unwrap_or(st.n_keep) {
        n if n < 0 => prompt.len(),
        n => n as usize,
    };
    req.prompt = prompt;
    let (tx, rx) = mpsc::unbounded_channel();
    let tracker = st
        .metrics
        .as_ref()
        .map(|m| std::cell::RefCell::new(Tracker::new(m.clone())));
    l.engine.submit(req, Box::new(Sink { tx, tracker }))?;
    Ok(rx)
}

/// The request's final logit biases, as llama-server makes them: each
/// text entry's tokens, and with `ignore_eos` every end-of-generation token
/// at -inf (never sampled, rather than sampled and ignored). Idempotent.
pub(crate) fn resolve_bias(tok: &glint::Tokenizer, opts: &mut Options) -> Result<(), ApiError> {
    let bias = &mut opts.req.sampling.logit_bias;
    for (text, b) in std::mem::take(&mut opts.bias_text) {
        let ids = tok.encode(&text, false, false).map_err(|e| {
            ApiError::bad_request(format!("logit_bias: cannot tokenize {text:?}: {e}"))
        })?;
        bias.extend(
            ids.into_iter()
                .map(|token| LogitBiasEntry { token, bias: b }),
        );
    }
    if opts.req.ignore_eos {
        for &token in tok.eog_ids() {
            if !bias
                .iter()
                .any(|e| e.token == token && e.bias == f32::NEG_INFINITY)
            {
                bias.push(LogitBiasEntry {
                    token,
                    bias: f32::NEG_INFINITY,
                });
            }
        }
    }
    Ok(())
}

/// Every event of a request of `n` choices, until each is `Done`.
pub(crate) async fn collect(
    mut rx: mpsc::UnboundedReceiver<Event>,
    n: usize,
) -> Result<Vec<Choice>, ApiError> {
    let mut choices = vec![Choice::default(); n];
    let mut done = 0;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Delta {
                index,
                token,
                text,
                logprob,
            } => {
                let c = &mut choices[index.min(n - 1)];
                c.text.push_str(&text);
                c.logprobs.extend(logprob);
                c.tokens.extend(token);
                c.first_at.get_or_insert_with(std::time::Instant::now);
            }
            Event::Done {
                index,
                reason,
                stop,
                usage,
            } => {
                let c = &mut choices[index.min(n - 1)];
                c.reason = Some(reason);
                c.stop = Some(stop);
                c.usage = usage;
                c.done_at = Some(std::time::Instant::now());
                done += 1;
                if done == n {
                    return Ok(choices);
                }
            }
            Event::Failed(m) => return Err(ApiError::internal(m)),
            Event::Progress { .. } => {}
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

/// Where a stream is.
struct Streaming {
    rx: mpsc::UnboundedReceiver<Event>,
    meta: Meta,
    /// Chunks ready to go, in order.
    pending: std::collections::VecDeque<String>,
    done: bool,
    include_usage: bool,
    want_logprobs: bool,
    /// Per choice: bytes of text sent so far (completions' `text_offset`).
    offset: Vec<usize>,
    /// Per choice: its counts once done.
    finished: Vec<Option<Choice>>,
    timeout: Duration,
    clock: timings::Clock,
    /// Chunks carry `timings` (`timings_per_token`).
    timings: bool,
    /// `prompt_progress` chunks (`return_progress`).
    progress: bool,
    /// Per choice of a chat: its answer taken apart as it comes (tool
    /// calls, reasoning); empty: text goes out as it is.
    chat: Vec<Option<tools::ChatStream>>,
    /// Per choice: logprobs of tokens whose text is held back.
    held_logprobs: Vec<Vec<TokenLogprob>>,
}

impl Streaming {
    fn new(
        meta: Meta,
        rx: mpsc::UnboundedReceiver<Event>,
        n: usize,
        include_usage: bool,
        want_logprobs: bool,
        timeout: Duration,
    ) -> Streaming {
        let mut pending = std::collections::VecDeque::new();
        if meta.endpoint == Endpoint::Chat {
            for index in 0..n {
                pending.push_back(meta.role_chunk(index).to_string());
            }
        }
        Streaming {
            rx,
            meta,
            pending,
            done: false,
            include_usage,
            want_logprobs,
            offset: vec![0; n],
            finished: vec![None; n],
            timeout,
            clock: timings::Clock::new(),
            timings: false,
            progress: false,
            chat: Vec::new(),
            held_logprobs: vec![Vec::new(); n],
        }
    }

    /// Turn one engine event into chunks.
    fn on_event(&mut self, ev: Option<Event>) {
        if let Some(ev) = &ev {
            self.clock.on_event(ev);
        }
        let timings = self.timings.then(|| self.clock.json());
        let push = |p: &mut std::collections::VecDeque<String>, mut v: Value| {
            if let Some(t) = &timings {
                v["timings"] = t.clone();
            }
            p.push_back(v.to_string())
        };
        let last = self.offset.len() - 1;
        match ev {
            Some(Event::Progress { .. }) => {
                if self.progress {
                    let mut v = self.meta.wrap(true, json!([]));
                    v["prompt_progress"] = self.clock.progress();
                    push(&mut self.pending, v);
                }
            }
            Some(Event::Delta {
                index,
                text,
                logprob,
                ..
            }) => {
                if text.is_empty() && logprob.is_none() {
                    return;
                }
                let index = index.min(last);
                if let Some(Some(cs)) = self.chat.get_mut(index) {
                    self.held_logprobs[index].extend(logprob);
                    for delta in cs.deltas(&text, false) {
                        let lps = std::mem::take(&mut self.held_logprobs[index]);
                        let lp = self.want_logprobs.then_some(lps.as_slice());
                        push(&mut self.pending, self.meta.delta_value(index, delta, lp));
                    }
                    return;
                }
                let lps: Vec<TokenLogprob> = logprob.into_iter().collect();
                let lp = self.want_logprobs.then_some(lps.as_slice());
                let chunk = self.meta.delta_chunk(index, &text, lp, self.offset[index]);
                push(&mut self.pending, chunk);
                self.offset[index] += text.len();
            }
            Some(Event::Done {
                index,
                reason,
                usage,
                ..
            }) => {
                let index = index.min(last);
                let mut reason = reason.as_str();
                if let Some(Some(cs)) = self.chat.get_mut(index) {
                    for delta in cs.deltas("", true) {
                        let lps = std::mem::take(&mut self.held_logprobs[index]);
                        let lp = self.want_logprobs.then_some(lps.as_slice());
                        push(&mut self.pending, self.meta.delta_value(index, delta, lp));
                    }
                    if cs.calls > 0 {
                        reason = "tool_calls";
                    }
                }
                push(&mut self.pending, self.meta.finish_chunk(index, reason));
                self.finished[index] = Some(Choice {
                    usage,
                    ..Default::default()
                });
                if self.finished.iter().all(Option::is_some) {
                    if self.include_usage {
                        let all: Vec<Choice> = self.finished.iter().flatten().cloned().collect();
                        push(&mut self.pending, self.meta.usage_chunk(&total_usage(&all)));
                    }
                    self.pending.push_back("[DONE]".into());
                    self.done = true;
                }
            }
            Some(Event::Failed(m)) => {
                push(&mut self.pending, ApiError::internal(m).body());
                self.done = true;
            }
            None => {
                let e = ApiError::new(StatusCode::REQUEST_TIMEOUT, "the stream timed out");
                push(&mut self.pending, e.body());
                self.done = true;
            }
        }
    }
}

/// The SSE response: `data: {chunk}` events, a role chunk first for chat,
/// `data: [DONE]` last. Dropping it (the client left) drops the receiver,
/// which cancels the request in the engine.
fn sse(st: Streaming) -> impl IntoResponse {
    let events = futures_util::StreamExt::map(chunks(st), |data| {
        Ok::<_, Infallible>(SseEvent::default().data(data))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// A stream's SSE payloads, in order.
fn chunks(st: Streaming) -> impl futures_util::Stream<Item = String> + Send + 'static {
    futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((data, st));
            }
            if st.done {
                return None;
            }
            let ev = match tokio::time::timeout(st.timeout, st.rx.recv()).await {
                Ok(Some(ev)) => Some(ev),
                Ok(None) => Some(Event::Failed("the engine stopped".into())),
                Err(_) => None,
            };
            st.on_event(ev);
        }
    })
}

/// `X-Conversation-Id`: the stream is resumable under this id.
fn conversation(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-conversation-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|id| !id.is_empty() && id.len() <= 256)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cors_origins_allow_any_loopback_or_listed_origins() {
        let list = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(origin_allowed(&[], "http://evil.com"));
        assert!(origin_allowed(&list(&["*"]), "http://evil.com"));
        let local = list(&["localhost"]);
        for o in [
            "http://localhost",
            "http://127.0.0.1:3000",
            "http://[::1]:3000",
            "https://localhost:8080",
        ] {
            assert!(origin_allowed(&local, o), "{o}");
        }
        for o in [
            "http://localhost.evil.com",
            "http://notlocalhost",
            "http://[::2]",
            "http://evil.com",
        ] {
            assert!(!origin_allowed(&local, o), "{o}");
        }
        let named = list(&["http://a.example"]);
        assert!(origin_allowed(&named, "http://a.example"));
        assert!(!origin_allowed(&named, "http://b.example"));
    }

    #[test]
    fn an_api_key_file_lists_keys_and_refuses_to_be_empty() {
        let dir = std::env::temp_dir().join(format!("glint-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("keys");
        std::fs::write(&file, "# ours\nalpha\r\n\n  beta  \n").unwrap();
        assert_eq!(read_api_key_file(&file).unwrap(), ["alpha", "beta"]);
        std::fs::write(&file, "\n# only a comment\n\n").unwrap();
        let e = read_api_key_file(&file).unwrap_err().to_string();
        assert!(e.contains("keys") && e.contains("no key"), "{e}");
        let missing = dir.join("missing");
        let e = read_api_key_file(&missing).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
