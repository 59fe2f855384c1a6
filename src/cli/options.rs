//! What `generate` and `chat` share: their flags, and how the flags become
//! the library's parameters (model, context, sampler chain, prompt).

use glint::chat::{message, Chat};
use glint::sample::SamplerParams;
use glint::{CacheType, ContextParams, Model, ModelParams};
use serde_json::Value;

use super::args::{flag, Flag, Parsed};

/// `--gpu-int8`, for every command that loads a model.
pub const GPU_INT8: Flag = flag!("gpu-int8", [], None, "wgpu: integer dot products for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K..Q6_K matvecs (activations quantized as ggml's cpu does; also GLINT_INT8=1)");

/// `--gpu-tune` ([`gpu_tune`]), for every command that loads a model.
pub const GPU_TUNE: Flag = flag!("gpu-tune", [], Some("on|off|auto"), "wgpu: at load, time decode steps at 1, 2 and 4 matvec rows at once and keep the fastest (no bit changes; default auto: on a hardware GPU whose subgroups have one size, else off; GLINT_TUNE=1 or 0, where set, wins)");

pub const FLAGS: &[Flag] = &[
    flag!("model", ["-m"], Some("FILE|NAME"), "GGUF model, or a known model's name: smollm2 (the default), gemma3, qwen2; fetched on first use"),
    flag!("prompt", ["-p"], Some("TEXT"), "prompt (or give it as the last argument); repeat it for --parallel"),
    flag!("file", ["-f"], Some("FILE"), "read the prompt from a file (with --parallel: one prompt per line)"),
    flag!("n-predict", ["-n"], Some("N"), "tokens to generate (-1 = until end of generation; default -1)"),
    flag!("ctx-size", ["-c"], Some("N"), "context size (default 4096, at most the model's training context)"),
    flag!("batch-size", ["-b"], Some("N"), "logical batch size (default 2048)"),
    flag!("ubatch-size", ["-ub"], Some("N"), "physical batch size (default 512)"),
    flag!("grp-attn-n", ["-gan"], Some("N"), "self-extend group factor (default 1 = off)"),
    flag!("grp-attn-w", ["-gaw"], Some("N"), "self-extend window, a multiple of -gan (default 512)"),
    flag!("grp-attn-mode", [], Some("shift|window"), "self-extend mode: shift (default; llama.cpp's: cached positions compressed with seq_add/seq_div, K re-rotated) or window (the SelfExtend paper's: positions never move, near pairs attend normally, distant ones at grouped positions; a second K cache)"),
    flag!("swa-full", [], None, "keep the sliding-window layers' K/V for the whole context (Gemma 3), not in a ring of n_swa + n_ubatch cells (implied by --context-shift and self-extend's shift mode, which move positions)"),
    flag!("context-shift", [], None, "when the context is full, drop half of what follows --keep and go on (default: stop)"),
    flag!("keep", [], Some("N"), "prompt tokens a context shift keeps (default 0; -1 = all; BOS added on top)"),
    flag!("parallel", ["-np"], Some("N"), "sequences decoded together, one prompt each (default 1)"),
    flag!("kv-unified", ["-kvu"], None, "one KV stream shared by all sequences (the default)"),
    flag!("no-kv-unified", [], None, "one KV stream per sequence, each of ctx-size/parallel cells"),
    flag!("prompt-cache", [], Some("FILE"), "reuse the prompt prefix saved in FILE, then save this prompt's state there"),
    flag!("threads", ["-t"], Some("N"), "cpu threads (default: all cores)"),
    flag!("backend", [], Some("cpu|wgpu|auto"), "compute backend (default auto)"),
    flag!("adapter", [], Some("N"), "wgpu adapter index"),
    GPU_INT8,
    GPU_TUNE,
    flag!("cache-type-k", ["-ctk"], Some("f16|f32|q8_0|q4_0"), "K cache type (default f16)"),
    flag!("cache-type-v", ["-ctv"], Some("f16|f32|q8_0|q4_0"), "V cache type (default f16)"),
    flag!("seed", ["-s"], Some("N"), "sampling seed (default random)"),
    flag!("temp", [], Some("T"), "temperature; 0 = greedy (default 0.8)"),
    flag!("top-k", [], Some("N"), "top-k (default 40; 0 = off)"),
    flag!("top-p", [], Some("P"), "top-p (default 0.95; 1 = off)"),
    flag!("min-p", [], Some("P"), "min-p (default 0.05; 0 = off)"),
    flag!("typical", [], Some("P"), "locally typical sampling (default 1 = off)"),
    flag!("top-n-sigma", [], Some("N"), "top-n-sigma (default -1 = off)"),
    flag!("repeat-penalty", [], Some("X"), "repetition penalty (default 1 = off)"),
    flag!("repeat-last-n", [], Some("N"), "penalty window (default 64; -1 = context)"),
    flag!("presence-penalty", [], Some("X"), "presence penalty (default 0)"),
    flag!("frequency-penalty", [], Some("X"), "frequency penalty (default 0)"),
    flag!("dynatemp-range", [], Some("X"), "dynamic temperature range (default 0 = off)"),
    flag!("dynatemp-exp", [], Some("X"), "dynamic temperature exponent (default 1)"),
    flag!("mirostat", [], Some("0|1|2"), "Mirostat (default 0 = off)"),
    flag!("mirostat-lr", [], Some("ETA"), "Mirostat learning rate (default 0.1)"),
    flag!("mirostat-ent", [], Some("TAU"), "Mirostat target entropy (default 5)"),
    flag!("xtc-probability", [], Some("P"), "XTC probability (default 0 = off)"),
    flag!("xtc-threshold", [], Some("P"), "XTC threshold (default 0.1)"),
    flag!("dry-multiplier", [], Some("X"), "DRY multiplier (default 0 = off)"),
    flag!("dry-base", [], Some("X"), "DRY base (default 1.75)"),
    flag!("dry-allowed-length", [], Some("N"), "DRY allowed length (default 2)"),
    flag!("dry-penalty-last-n", [], Some("N"), "DRY window (default -1 = context)"),
    flag!("logit-bias", ["-l"], Some("TOKEN(+|-)BIAS"), "logit bias, e.g. 15043+1 (repeatable)"),
    flag!("samplers", [], Some("LIST"), "sampler order, ';'-separated (default penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)"),
    flag!("sampling-seq", [], Some("LETTERS"), "sampler order as letters (e.g. edskypmxt)"),
    flag!("echo", [], None, "print the prompt before the generated text"),
    flag!("verbose-prompt", [], None, "print the prompt's token ids (and a chat prompt's text) to stderr"),
    flag!("logprobs", [], Some("N"), "print one JSON object per token: its logprob and the N (<= 20) most likely"),
    flag!("chat", [], None, "the prompt is a user message, rendered with the model's chat template"),
    flag!("system", [], Some("TEXT"), "with --chat: a system message first"),
    flag!("messages", [], Some("FILE"), "chat: the conversation as an OpenAI-style JSON array of messages"),
    flag!("no-special", [], None, "treat special-token text in the prompt as plain text"),
    flag!("ignore-eos", [], None, "keep generating after end-of-generation tokens"),
    flag!("verbose", ["-v"], None, "print load details and memory to stderr"),
    flag!("help", ["-h"], None, "this text"),
];

/// llama.cpp's RoPE overrides, for contexts beyond the trained one.
#[rustfmt::skip]
pub const ROPE_FLAGS: &[Flag] = &[
    flag!("rope-scaling", [], Some("none|linear|yarn"), "RoPE frequency scaling (default: the model's)"),
    flag!("rope-scale", [], Some("N"), "RoPE context scale factor: frequencies divided by N"),
    flag!("rope-freq-base", [], Some("X"), "RoPE base frequency (default: the model's)"),
    flag!("rope-freq-scale", [], Some("X"), "RoPE frequency scale (1/N of --rope-scale)"),
    flag!("yarn-orig-ctx", [], Some("N"), "YaRN: the trained context (default: the model's)"),
    flag!("yarn-ext-factor", [], Some("X"), "YaRN: extrapolation mix (default 1)"),
    flag!("yarn-attn-factor", [], Some("X"), "YaRN: magnitude factor (default 1)"),
    flag!("yarn-beta-fast", [], Some("X"), "YaRN: low correction dim (default 32)"),
    flag!("yarn-beta-slow", [], Some("X"), "YaRN: high correction dim (default 1)"),
];

/// The RoPE overrides the flags give.
pub fn rope_overrides(p: &Parsed) -> Result<glint::RopeOverrides, String> {
    let scale: Option<f32> = num(p, "rope-scale")?;
    let freq_scale: Option<f32> = num(p, "rope-freq-scale")?;
    let factor = match (scale, freq_scale) {
        (Some(_), Some(_)) => return Err("give --rope-scale or --rope-freq-scale, not both".into()),
        (s, None) => s,
        (None, Some(f)) => Some(1.0 / f),
    };
    Ok(glint::RopeOverrides {
        scaling: p.get("rope-scaling").map(str::to_string),
        factor,
        freq_base: num(p, "rope-freq-base")?,
        yarn_orig_ctx: num(p, "yarn-orig-ctx")?,
        yarn_ext_factor: num(p, "yarn-ext-factor")?,
        yarn_attn_factor: num(p, "yarn-attn-factor")?,
        yarn_beta_fast: num(p, "yarn-beta-fast")?,
        yarn_beta_slow: num(p, "yarn-beta-slow")?,
    })
}

/// The flags every command that loads a model takes for the device.
#[rustfmt::skip]
pub const DEVICE_FLAGS: &[Flag] = &[
    flag!("threads", ["-t"], Some("N"), "cpu threads (default: all cores)"),
    flag!("backend", [], Some("cpu|wgpu|auto"), "compute backend (default auto)"),
    flag!("adapter", [], Some("N"), "wgpu adapter index"),
    GPU_INT8,
    GPU_TUNE,
    flag!("help", ["-h"], None, "this text"),
];

/// A command's own flags followed by [`ROPE_FLAGS`] and [`DEVICE_FLAGS`].
pub fn with_device_flags(own: &[Flag]) -> Vec<Flag> {
    own.iter()
        .chain(ROPE_FLAGS)
        .chain(DEVICE_FLAGS)
        .copied()
        .collect()
}

pub fn num<T: std::str::FromStr>(p: &Parsed, name: &str) -> Result<Option<T>, String> {
    p.parse::<T>(name)
}

/// Sampler parameters from the flags, on top of llama.cpp's defaults.
pub fn sampler_params(p: &Parsed) -> Result<SamplerParams, String> {
    let mut s = SamplerParams::default();
    if let Some(v) = num(p, "seed")? {
        s.seed = v;
    }
    macro_rules! set {
        ($($flag:literal => $field:ident),* $(,)?) => {
            $(if let Some(v) = num(p, $flag)? { s.$field = v; })*
        };
    }
    set!(
        "temp" => temp, "top-k" => top_k, "top-p" => top_p, "min-p" => min_p,
        "typical" => typ_p, "top-n-sigma" => top_n_sigma, "repeat-penalty" => penalty_repeat,
        "repeat-last-n" => penalty_last_n, "presence-penalty" => penalty_present,
        "frequency-penalty" => penalty_freq, "dynatemp-range" => dynatemp_range,
        "dynatemp-exp" => dynatemp_exponent, "mirostat" => mirostat,
        "mirostat-lr" => mirostat_eta, "mirostat-ent" => mirostat_tau,
        "xtc-probability" => xtc_probability, "xtc-threshold" => xtc_threshold,
        "dry-multiplier" => dry_multiplier, "dry-base" => dry_base,
        "dry-allowed-length" => dry_allowed_length, "dry-penalty-last-n" => dry_penalty_last_n,
    );
    for lb in p.all("logit-bias") {
        let mut v =
            glint::sample::parse_logit_bias(lb).map_err(|e| format!("--logit-bias: {e}"))?;
        s.logit_bias.append(&mut v);
    }
    if let Some(list) = p.get("samplers") {
        s.samplers =
            glint::sample::parse_sampler_list(list).map_err(|e| format!("--samplers: {e}"))?;
    }
    if let Some(seq) = p.get("sampling-seq") {
        s.samplers =
            glint::sample::parse_sampler_seq(seq).map_err(|e| format!("--sampling-seq: {e}"))?;
    }
    s.validate().map_err(|e| e.to_string())?;
    Ok(s)
}

/// The model file: `-m` (a path, or the name of a known model: `-m qwen2`),
/// else the default model; a known model is fetched on first use.
pub fn model_path(p: &Parsed) -> Result<std::path::PathBuf, String> {
    resolve_model(p.get("model"))
}

/// `m` as a path, or a known model's name (when no such file exists),
/// fetched on first use; `None` is the default model.
pub fn resolve_model(m: Option<&str>) -> Result<std::path::PathBuf, String> {
    let name = match m {
        Some(m) if std::path::Path::new(m).exists() => return Ok(m.into()),
        Some(m) => match crate::models::known_model(m) {
            Some(_) => m,
            None => return Ok(m.into()),
        },
        None => crate::models::DEFAULT_MODEL,
    };
    let known = crate::models::known_model(name).ok_or("no default model is known")?;
    crate::models::pull(known, &mut |line| eprintln!("glint: {line}")).map_err(|e| e.to_string())
}

/// Most cpu threads glint starts, as a multiple of the cores: more only
/// adds switching (and `-t 100000` would spend minutes starting threads).
pub const MAX_THREADS_PER_CORE: usize = 4;

/// `-t N`, checked: 0 is an error; above [`MAX_THREADS_PER_CORE`] times the
/// cores it is clamped, with a one-line notice.
pub fn threads(p: &Parsed) -> Result<Option<usize>, String> {
    let Some(t) = num::<usize>(p, "threads")? else {
        return Ok(None);
    };
    Ok(Some(clamp_threads(t)?))
}

/// See [`threads`].
pub fn clamp_threads(t: usize) -> Result<usize, String> {
    if t == 0 {
        return Err("--threads must be >= 1".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max = cores * MAX_THREADS_PER_CORE;
    if t > max {
        eprintln!("glint: --threads {t} is more than {MAX_THREADS_PER_CORE} per core on {cores} cores: using {max}");
        return Ok(max);
    }
    Ok(t)
}

/// `--gpu-tune`: `on` is `Some(true)`, `off` `Some(false)`, `auto` (or no
/// flag) `None`.
pub fn gpu_tune(p: &Parsed) -> Result<Option<bool>, String> {
    match p.get("gpu-tune") {
        None | Some("auto") => Ok(None),
        Some("on") => Ok(Some(true)),
        Some("off") => Ok(Some(false)),
        Some(other) => Err(format!("--gpu-tune {other}: on, off or auto")),
    }
}

pub fn model_params(p: &Parsed) -> Result<ModelParams, String> {
    Ok(ModelParams {
        backend: p
            .get("backend")
            .unwrap_or("auto")
            .parse()
            .map_err(|e: glint::Error| e.to_string())?,
        adapter: num(p, "adapter")?,
        gpu_int8: p.has("gpu-int8"),
        gpu_tune: gpu_tune(p)?,
        n_threads: threads(p)?,
        rope: rope_overrides(p)?,
        ..Default::default()
    })
}

pub fn context_params(p: &Parsed, model: &Model) -> Result<ContextParams, String> {
    let d = ContextParams::default();
    let n_ctx_train = model.hparams().n_ctx_train as u32;
    let n_ctx = match num::<u32>(p, "ctx-size")? {
        Some(0) | None => d.n_ctx.min(n_ctx_train),
        Some(n) => n,
    };
    // Said only when no extension was asked for (self-extend, or any RoPE
    // scaling flag): with one, going past the trained context is the point.
    let extended = p
        .get("grp-attn-n")
        .and_then(|g| g.parse::<i64>().ok())
        .is_some_and(|g| g > 1)
        || ["rope-scaling", "rope-scale", "rope-freq-scale"]
            .iter()
            .any(|f| p.get(f).is_some());
    if n_ctx > n_ctx_train && n_ctx_train > 0 && !extended {
        eprintln!(
            "glint: warning: -c {n_ctx} is above the model's trained context ({n_ctx_train}): \
             quality drops past it without self-extend (-gan/-gaw) or RoPE scaling \
             (--rope-scaling yarn --rope-scale N)"
        );
    }
    // As llama.cpp: a batch larger than the context is clamped to it.
    let clamp = |flag: &str, v: u32| -> u32 {
        if v > n_ctx {
            eprintln!("glint: --{flag} {v} is above -c {n_ctx}: using {n_ctx}");
            n_ctx
        } else {
            v
        }
    };
    let cache = |flag: &str| -> Result<CacheType, String> {
        p.get(flag)
            .unwrap_or("f16")
            .parse()
            .map_err(|e: glint::Error| format!("--{flag}: {e}"))
    };
    let n_seq = num::<u32>(p, "parallel")?.unwrap_or(1);
    if n_seq == 0 {
        return Err("--parallel must be >= 1".into());
    }
    if p.has("kv-unified") && p.has("no-kv-unified") {
        return Err("give --kv-unified or --no-kv-unified, not both".into());
    }
    let kv_unified = !p.has("no-kv-unified");
    // n_ctx is the total: separate streams share it out (as llama.cpp).
    Ok(ContextParams {
        n_ctx,
        n_seq_max: n_seq,
        kv_unified,
        embeddings: false,
        n_batch: match num(p, "batch-size")? {
            Some(b) => clamp("batch-size", b),
            None => d.n_batch,
        },
        n_ubatch: match num(p, "ubatch-size")? {
            Some(b) => clamp("ubatch-size", b),
            None => d.n_ubatch,
        },
        type_k: cache("cache-type-k")?,
        type_v: cache("cache-type-v")?,
        self_extend_window: self_extend_window(p)?,
        swa_full: swa_full(p)?,
    })
}

/// `--swa-full`, or a flag that moves cached positions (a context shift,
/// self-extend's shift mode): the sliding-window ring cannot take those.
pub fn swa_full(p: &Parsed) -> Result<bool, String> {
    let shift_mode = !matches!(p.get("grp-attn-mode"), Some("window"))
        && num::<u32>(p, "grp-attn-n")?.unwrap_or(1) > 1;
    Ok(p.has("swa-full") || p.has("context-shift") || shift_mode)
}

/// `--grp-attn-mode window`: the two-window SelfExtend's sizes from
/// `-gan`/`-gaw` (`None` in shift mode, the default, or with `-gan 1`).
pub fn self_extend_window(p: &Parsed) -> Result<Option<glint::SelfExtendWindow>, String> {
    match p.get("grp-attn-mode") {
        // The shift mode's flags are checked where it runs.
        None | Some("shift") => Ok(None),
        Some("window") => {
            let n = num::<u32>(p, "grp-attn-n")?.unwrap_or(1);
            let w = num::<u32>(p, "grp-attn-w")?.unwrap_or(512);
            if n <= 1 {
                return Ok(None);
            }
            glint::SelfExtendWindow::new(n, w)
                .map(Some)
                .map_err(|e| format!("--grp-attn-mode window: {e}"))
        }
        Some(other) => Err(format!("--grp-attn-mode {other}: shift or window")),
    }
}

/// The prompts of `--parallel`: one per line of `-f`, or each `-p`.
pub fn prompt_list(p: &Parsed) -> Result<Vec<String>, String> {
    let list: Vec<String> = match (p.all("prompt"), p.get("file"), p.positional.as_slice()) {
        (ps, None, []) if !ps.is_empty() => ps.to_vec(),
        ([], Some(f), []) => read_text_file("file", f)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect(),
        ([], None, [t]) => vec![t.clone()],
        ([], None, []) => {
            return Err(
                "generate: no prompt (give -p TEXT, -f FILE or the prompt as an argument)".into(),
            )
        }
        _ => return Err("generate: give the prompts with -p (repeated) or -f, not both".into()),
    };
    if list.is_empty() {
        return Err("generate: the prompt file has no non-empty line".into());
    }
    Ok(list)
}

pub fn prompt_text(p: &Parsed) -> Result<String, String> {
    if p.all("prompt").len() > 1 {
        return Err("generate: several -p prompts need --parallel N".into());
    }
    match (p.get("prompt"), p.get("file"), p.positional.as_slice()) {
        (Some(t), None, []) => Ok(t.to_string()),
        (None, Some(f), []) => read_text_file("file", f),
        (None, None, [t]) => Ok(t.clone()),
        (None, None, []) => {
            Err("generate: no prompt (give -p TEXT, -f FILE or the prompt as an argument)".into())
        }
        _ => Err("generate: give the prompt once (-p, -f or an argument)".into()),
    }
}

/// The chat prompt of `generate --chat`: `--messages FILE`, else `prompt` as
/// one user message after an optional `--system`. Returns the rendered text
/// and its ids.
pub fn chat_prompt(
    p: &Parsed,
    model: &Model,
    prompt: String,
) -> Result<(String, Vec<u32>), String> {
    let messages: Vec<Value> = match p.get("messages") {
        Some(file) => {
            if p.has("system") {
                return Err("--system with --messages: put the system message in the file".into());
            }
            if p.has("prompt") || p.has("file") || !p.positional.is_empty() {
                return Err("--messages: the file is the whole prompt (no -p/-f/argument)".into());
            }
            let text = read_text_file("messages", file)?;
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Array(m)) if !m.is_empty() => m,
                Ok(_) => {
                    return Err(format!(
                        "--messages {file}: not a non-empty JSON array of messages"
                    ))
                }
                Err(e) => return Err(format!("--messages {file}: {e}")),
            }
        }
        None => {
            let mut m = Vec::new();
            if let Some(s) = p.get("system") {
                m.push(message("system", s));
            }
            m.push(message("user", &prompt));
            m
        }
    };
    let chat = Chat::for_model(model).map_err(|e| e.to_string())?;
    if p.has("verbose") {
        eprintln!("glint: chat template: {}", chat.origin());
    }
    chat.prompt(model.tokenizer(), &messages, true)
        .map_err(|e| e.to_string())
}

/// Largest prompt or messages file read (64 MiB: far more text than any
/// context holds; `-f /dev/zero` would otherwise read forever).
pub const MAX_TEXT_FILE_BYTES: u64 = 64 << 20;

/// Read `path` (given with `--flag`) as UTF-8 text: a regular file of at
/// most [`MAX_TEXT_FILE_BYTES`].
pub fn read_text_file(flag: &str, path: &str) -> Result<String, String> {
    use std::io::Read;
    let bad = |m: String| format!("--{flag} {path}: {m}");
    let f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let md = f.metadata().map_err(|e| bad(e.to_string()))?;
    if !md.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if md.len() > MAX_TEXT_FILE_BYTES {
        return Err(bad(format!(
            "{} bytes, more than the {MAX_TEXT_FILE_BYTES} a prompt file may have",
            md.len()
        )));
    }
    let mut b = Vec::with_capacity(md.len() as usize);
    f.take(MAX_TEXT_FILE_BYTES + 1)
        .read_to_end(&mut b)
        .map_err(|e| bad(e.to_string()))?;
    String::from_utf8(b).map_err(|e| bad(format!("not UTF-8 text ({e})")))
}
