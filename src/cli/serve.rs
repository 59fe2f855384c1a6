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
    flag!("help", ["-h"], None, "this text"),
];

/// `glint serve [options]`.
pub fn run(rest: &[String]) -> Result<(), String> {
    let p = args::parse(rest, FLAGS)?;
    if p.has("help") {
        return super::output::println(&args::help("glint serve [-m MODEL] [options]", FLAGS));
    }
    if let Some(extra) = p.positional.first() {
        return Err(format!("serve: unexpected argument `{extra}`"));
    }
    let cfg = config(&p)?;
    glint_server::run(cfg).map_err(|e| format!("serve: {e}"))
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
        ..dc
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
        cache_ram: match num::<i64>(p, "cache-ram")? {
            None => d.cache_ram,
            Some(n) if n < 0 => usize::MAX,
            Some(n) => (n as usize).saturating_mul(1 << 20),
        },
        slot_save_path: p.get("slot-save-path").map(std::path::PathBuf::from),
        context_shift: p.has("context-shift"),
        n_keep: num::<i64>(p, "keep")?.unwrap_or(d.n_keep),
    })
}
