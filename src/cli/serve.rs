//! `glint serve`: the OpenAI-compatible HTTP server (crates/glint-server),
//! with llama-server's flag names and defaults.

use std::time::Duration;

use glint::ContextParams;

use super::args::{self, Flag, Parsed};
use super::options::{model_params, model_path, num};

macro_rules! flag {
    ($name:literal, [$($a:literal),*], $v:expr, $help:literal) => {
        Flag { name: $name, aliases: &[$($a),*], value: $v, help: $help }
    };
}

const FLAGS: &[Flag] = &[
    flag!(
        "model",
        ["-m"],
        Some("FILE"),
        "GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched on first use)"
    ),
    flag!(
        "host",
        [],
        Some("ADDR"),
        "address to listen on (default 127.0.0.1)"
    ),
    flag!(
        "port",
        [],
        Some("N"),
        "port (default 8080; 0 = any free port)"
    ),
    flag!(
        "ctx-size",
        ["-c"],
        Some("N"),
        "context size in total (default 4096, at most the model's training context)"
    ),
    flag!(
        "parallel",
        ["-np"],
        Some("N"),
        "slots (default 4, sharing one cache of -c; given: N streams of -c/N)"
    ),
    flag!(
        "kv-unified",
        ["-kvu"],
        None,
        "with -np: one KV stream shared by all slots"
    ),
    flag!(
        "batch-size",
        ["-b"],
        Some("N"),
        "tokens per step, prompt chunks included (default 2048)"
    ),
    flag!(
        "ubatch-size",
        ["-ub"],
        Some("N"),
        "physical batch size (default 512)"
    ),
    flag!(
        "threads",
        ["-t"],
        Some("N"),
        "cpu threads (default: all cores)"
    ),
    flag!(
        "backend",
        [],
        Some("cpu|wgpu|auto"),
        "compute backend (default auto)"
    ),
    flag!("adapter", [], Some("N"), "wgpu adapter index"),
    super::options::GPU_INT8,
    super::options::GPU_TUNE,
    flag!(
        "api-key",
        [],
        Some("KEY"),
        "require `Authorization: Bearer KEY` or `X-Api-Key: KEY` (/health stays public); KEY,KEY: any of them"
    ),
    flag!(
        "api-key-file",
        [],
        Some("FILE"),
        "API keys, one per line (# comments); any of them or of --api-key is accepted"
    ),
    flag!(
        "cache-ram",
        ["-cram"],
        Some("MiB"),
        "host memory keeping the prompt prefixes idle slots give up, reloaded by requests that start with them (default 1024; 0 = off; -1 = no limit)"
    ),
    flag!(
        "slot-save-path",
        [],
        Some("DIR"),
        "folder for POST /slots/{id}?action=save|restore files (default: off)"
    ),
    flag!(
        "context-shift",
        [],
        None,
        "when a slot's context is full, drop half of what follows the kept tokens and go on (default: end with `length`)"
    ),
    flag!(
        "keep",
        [],
        Some("N"),
        "tokens a context shift keeps from the prompt's start (default 0; -1 = the whole prompt; a request's n_keep wins)"
    ),
    flag!(
        "timeout",
        ["-to"],
        Some("SECONDS"),
        "longest a request may take or a stream stay silent (default 600)"
    ),
    flag!(
        "prefill-per-step",
        [],
        Some("N"),
        "most prompt tokens per step: generating slots wait at most one chunk (default 512; 0 = -b)"
    ),
    flag!(
        "max-queue",
        [],
        Some("N"),
        "requests waiting for a slot before 503 (default 64)"
    ),
    flag!(
        "max-body",
        [],
        Some("BYTES"),
        "largest request body before 413 (default 8 MiB)"
    ),
    flag!(
        "metrics",
        [],
        None,
        "serve GET /metrics: Prometheus text with llama-server's llamacpp: names"
    ),
    flag!("alias", ["-a"], Some("NAMES"), "the model's names, comma-separated; its id in responses is the alphabetically first (default: the file's name)"),
    flag!("n-predict", ["-n"], Some("N"), "tokens a request generates when it does not say (default: until the end)"),
    flag!("temp", [], Some("T"), "temperature of requests that do not say (default 0.8)"),
    flag!("seed", ["-s"], Some("N"), "RNG seed of requests that do not say (default: random)"),
    flag!("grp-attn-n", ["-gan"], Some("N"), "self-extend group factor for every request (default 1 = off)"),
    flag!("grp-attn-w", ["-gaw"], Some("N"), "self-extend window, a multiple of -gan (default 512)"),
    flag!("grp-attn-mode", [], Some("shift|window"), "self-extend mode: shift (default; llama.cpp's: cached positions compressed with seq_add/seq_div, K re-rotated) or window (the SelfExtend paper's: positions never move, near pairs attend normally, distant ones at grouped positions; a second K cache)"),
    flag!("cache-type-k", ["-ctk"], Some("f16|f32|q8_0|q4_0"), "K cache type (default f16)"),
    flag!("cache-type-v", ["-ctv"], Some("f16|f32|q8_0|q4_0"), "V cache type (default f16)"),
    flag!("chat-template-file", [], Some("FILE"), "a Jinja chat template replacing the model's"),
    flag!("chat-template", [], Some("JINJA"), "a chat template replacing the model's: Jinja text, or a built-in name (chatml, llama3, command-r, gemma, zephyr)"),
    flag!("slots", [], None, "serve GET /slots (default)"),
    flag!("no-slots", [], None, "do not serve GET /slots (501); slot files need only --slot-save-path"),
    flag!("cors-origins", [], Some("LIST"), "comma-separated origins CORS allows (default: any)"),
    flag!("swa-full", [], None, "keep the sliding-window layers' K/V for the whole context (Gemma 3), not in a ring of n_swa + n_ubatch cells per stream (implied by --context-shift and self-extend's shift mode)"),
    flag!("no-cache-idle-slots", [], None, "do not keep idle slots' prefixes in RAM (as --cache-ram 0)"),
    flag!("checkpoint-min-step", ["-cms"], Some("N"), "fewest tokens between two checkpoints of a slot (default 64)"),
    flag!("ctx-checkpoints-mib", [], Some("MiB"), "most memory a slot's checkpoints take, the oldest dropped first (default 128)"),
    flag!("ctx-checkpoints", ["--swa-checkpoints", "-ctxcp"], Some("N"), "models whose memory cannot be cut back anywhere (LFM2's recurrent state, Gemma 3's sliding-window ring): checkpoints of each slot's state kept 64 tokens before a prompt's end, so a prompt sharing a prefix restores one instead of starting over (default 8; 0 = none)"),
    flag!("tags", [], Some("LIST"), "comma-separated tags shown in /v1/models"),
    flag!("jinja", [], None, "accepted: glint always renders chat templates with Jinja"),
    flag!("no-jinja", [], None, "accepted with a notice: glint renders the model's template with Jinja either way"),
    flag!("verbose", ["-v"], None, "every chat response carries `__verbose` with its rendered prompt"),
    flag!("cont-batching", ["-cb"], None, "accepted: continuous batching is always on"),
    flag!("n-gpu-layers", ["-ngl"], Some("N"), "accepted with a notice: glint puts the whole model on one backend (--backend)"),
    flag!("flash-attn", ["-fa"], Some("on|off|auto"), "accepted with a notice: glint's attention kernels are fused already"),
    flag!("no-ui", [], None, "accepted: glint serves no web UI"),
    flag!("backend-sampling", ["--backend_sampling"], None, "accepted with a notice: glint samples on the host, from the logits of its one backend"),
    flag!("reasoning-format", [], Some("FORMAT"), "what becomes of a <think> block: auto/deepseek (default: split into reasoning_content), deepseek-legacy (split and kept in content), none (kept in content)"),
    flag!("reasoning", [], Some("on|off|auto"), "the chat templates' enable_thinking: false with off (default auto: true)"),
    flag!("embedding", ["--embeddings"], None, "serve embeddings (POST /v1/embeddings, /embedding) instead of completions"),
    flag!("pooling", [], Some("none|mean|cls|last"), "how --embedding pools token states (default: the model's pooling_type, else none: every token's, /embedding only)"),
    flag!("reranking", ["--rerank"], None, "refused: not supported"),
    flag!("lora", [], Some("FILE"), "refused: not supported"),
    flag!("model-draft", ["-md"], Some("FILE"), "refused: speculative decoding is not supported"),
    flag!("help", ["-h"], None, "this text"),
];

/// `glint serve [options]`.
pub fn run(rest: &[String]) -> Result<(), String> {
    // Whole families of llama-server flags glint does not have.
    let families = ["--spec-", "--models-", "--mcp-", "--mmproj", "--tools"];
    if let Some(a) = rest
        .iter()
        .find(|a| families.iter().any(|f| a.starts_with(f)))
    {
        return Err(format!("serve: {a} is not supported by glint"));
    }
    let p = args::parse(rest, FLAGS)?;
    notices(&p)?;
    if p.has("help") {
        return super::output::println(&args::help("glint serve [-m MODEL] [options]", FLAGS));
    }
    if let Some(extra) = p.positional.first() {
        return Err(format!("serve: unexpected argument `{extra}`"));
    }
    let cfg = config(&p)?;
    glint_server::run(cfg).map_err(|e| format!("serve: {e}"))
}

/// `-ctk`/`-ctv`: f16 (default) or f32.
fn cache_type(p: &Parsed, flag: &str) -> Result<glint::CacheType, String> {
    p.get(flag)
        .unwrap_or("f16")
        .parse()
        .map_err(|e: glint::Error| format!("--{flag}: {e}"))
}

/// llama-server flags that do not apply to glint: a one-line notice each;
/// those that ask for what glint lacks: an error.
fn notices(p: &Parsed) -> Result<(), String> {
    let refused = [
        ("reranking", "reranking is not supported"),
        ("lora", "LoRA adapters are not supported"),
        ("model-draft", "speculative decoding is not supported"),
    ];
    if let Some((flag, why)) = refused.iter().find(|(f, _)| p.has(f)) {
        return Err(format!("serve: --{flag}: {why}"));
    }
    let notes = [
        (
            "n-gpu-layers",
            "the whole model runs on one backend; choose it with --backend",
        ),
        ("flash-attn", "glint's attention kernels are fused already"),
        ("cont-batching", "continuous batching is always on"),
        ("no-ui", "glint serves no web UI"),
        (
            "backend-sampling",
            "glint samples on the host; a request's backend_sampling changes nothing",
        ),
        // llama.cpp's test suite passes --no-jinja to every server that
        // does not ask for --jinja: its built-in (non-Jinja) formatters
        // give the same prompts as the model's template for the templates
        // glint knows, and glint has only the template.
        (
            "no-jinja",
            "glint renders the model's chat template with Jinja either way",
        ),
    ];
    for (flag, note) in notes.iter().filter(|(f, _)| p.has(f)) {
        eprintln!("glint serve: --{flag} accepted: {note}");
    }
    Ok(())
}

/// `--api-key` (a comma-separated list, as llama-server's) and the keys of
/// `--api-key-file`.
fn api_keys(p: &Parsed) -> Result<Vec<String>, String> {
    let mut keys: Vec<String> = p
        .get("api-key")
        .into_iter()
        .flat_map(|k| k.split(','))
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(f) = p.get("api-key-file") {
        keys.extend(
            glint_server::read_api_key_file(f.as_ref()).map_err(|e| format!("serve: {e}"))?,
        );
    }
    Ok(keys)
}

fn config(p: &Parsed) -> Result<glint_server::Config, String> {
    let d = glint_server::Config::default();
    let n_seq = num::<u32>(p, "parallel")?;
    if n_seq == Some(0) {
        return Err("--parallel must be >= 1".into());
    }
    let dc = ContextParams::default();
    // As llama-server: without -np, 4 slots share one cache of -c; with an
    // explicit -np N, N streams of -c/N each unless --kv-unified.
    let ctx_params = ContextParams {
        n_ctx: num(p, "ctx-size")?.unwrap_or(0),
        n_seq_max: n_seq.unwrap_or(4),
        kv_unified: n_seq.is_none() || p.has("kv-unified"),
        n_batch: num(p, "batch-size")?.unwrap_or(dc.n_batch),
        n_ubatch: num(p, "ubatch-size")?.unwrap_or(dc.n_ubatch),
        type_k: cache_type(p, "cache-type-k")?,
        type_v: cache_type(p, "cache-type-v")?,
        embeddings: p.has("embedding"),
        self_extend_window: super::options::self_extend_window(p)?,
        swa_full: super::options::swa_full(p)?,
    };
    let window = ctx_params.self_extend_window.is_some();
    if window && p.has("context-shift") {
        return Err(
            "serve: --grp-attn-mode window keeps positions fixed: no --context-shift".into(),
        );
    }
    let defaults =
        glint_server::RequestDefaults {
            n_predict: num::<i64>(p, "n-predict")?.and_then(|n| usize::try_from(n).ok()),
            temp: num(p, "temp")?,
            // -1 is llama-server's "random"; anything else must be a u32 seed.
            seed: match num::<i64>(p, "seed")? {
                None | Some(-1) => None,
                Some(s) => Some(u32::try_from(s).map_err(|_| {
                    format!("--seed {s}: a seed is -1 (random) or 0..={}", u32::MAX)
                })?),
            },
            // Window mode is the context's; the shift mode is per request.
            ga_n: if window {
                1
            } else {
                num(p, "grp-attn-n")?.unwrap_or(1)
            },
            ga_w: num(p, "grp-attn-w")?.unwrap_or(512),
        };
    glint::generate::validate_self_extend(defaults.ga_n, defaults.ga_w)
        .map_err(|e| format!("serve: {e}"))?;
    if defaults.ga_n > 1 && p.has("context-shift") {
        return Err(
            "serve: self-extend (--grp-attn-n > 1) and --context-shift cannot be combined".into(),
        );
    }
    let chat_template = match (p.get("chat-template-file"), p.get("chat-template")) {
        (Some(f), _) => Some(super::options::read_text_file("chat-template-file", f)?),
        // A built-in name (llama.cpp's `--chat-template llama3`), else Jinja.
        (None, Some(t)) => Some(glint::chat::builtin(t).unwrap_or(t).to_string()),
        (None, None) => None,
    };
    Ok(glint_server::Config {
        host: p.get("host").unwrap_or(&d.host).to_string(),
        port: num(p, "port")?.unwrap_or(d.port),
        model_path: model_path(p)?,
        model_params: model_params(p)?,
        ctx_params,
        max_queue: num(p, "max-queue")?.unwrap_or(d.max_queue),
        prefill_per_step: num(p, "prefill-per-step")?.unwrap_or(d.prefill_per_step),
        api_keys: api_keys(p)?,
        timeout: num::<u64>(p, "timeout")?.map_or(d.timeout, Duration::from_secs),
        max_body_bytes: num(p, "max-body")?.unwrap_or(d.max_body_bytes),
        metrics: p.has("metrics"),
        verbose: p.has("verbose"),
        enable_thinking: match p.get("reasoning") {
            None | Some("on") | Some("auto") => true,
            Some("off") => false,
            Some(other) => return Err(format!("serve: --reasoning {other}: on, off or auto")),
        },
        reasoning_format: match p.get("reasoning-format") {
            None => glint::chat::tools::ReasoningFormat::default(),
            Some(f) => glint::chat::tools::ReasoningFormat::parse(f).ok_or_else(|| {
                format!("serve: --reasoning-format {f}: none, auto, deepseek or deepseek-legacy")
            })?,
        },
        embedding: match (p.has("embedding"), p.get("pooling")) {
            (false, None) => None,
            (false, Some(_)) => return Err("serve: --pooling needs --embedding".into()),
            // Without --pooling: the model's own (llama-server's default).
            (true, None) => Some(None),
            (true, Some(pooling)) => Some(Some(
                pooling
                    .parse()
                    .map_err(|e: glint::Error| format!("--pooling: {e}"))?,
            )),
        },
        ctx_checkpoints: num(p, "ctx-checkpoints")?.unwrap_or(d.ctx_checkpoints),
        checkpoint_min_step: num(p, "checkpoint-min-step")?.unwrap_or(d.checkpoint_min_step),
        checkpoint_bytes: num::<usize>(p, "ctx-checkpoints-mib")?
            .map_or(d.checkpoint_bytes, |m| m.saturating_mul(1 << 20)),
        cache_ram: match num::<i64>(p, "cache-ram")? {
            _ if p.has("no-cache-idle-slots") => 0,
            None => d.cache_ram,
            Some(n) if n < 0 => usize::MAX,
            Some(n) => (n as usize).saturating_mul(1 << 20),
        },
        slot_save_path: p.get("slot-save-path").map(std::path::PathBuf::from),
        alias: p.get("alias").map(str::to_string),
        tags: p
            .get("tags")
            .map(|t| {
                t.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        chat_template,
        defaults,
        slots_endpoint: !p.has("no-slots"),
        cors_origins: p
            .get("cors-origins")
            .map(|o| o.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default(),
        context_shift: p.has("context-shift"),
        n_keep: num::<i64>(p, "keep")?.unwrap_or(d.n_keep),
    })
}
