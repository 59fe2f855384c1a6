//! `glint generate`: llama.cpp's flag names, text streamed to stdout, timings
//! to stderr.

use std::io::Write;
use std::time::Instant;

use glint::generate::{generate, GenerateParams};
use glint::{CacheType, Context, ContextParams, Model, ModelParams};
use glint_sample::SamplerParams;

use crate::args::{self, Flag, Parsed};
use crate::logprobs_out;

macro_rules! flag {
    ($name:literal, [$($a:literal),*], $v:expr, $help:literal) => {
        Flag { name: $name, aliases: &[$($a),*], value: $v, help: $help }
    };
}

pub const FLAGS: &[Flag] = &[
    flag!("model", ["-m"], Some("FILE"), "GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched on first use)"),
    flag!("prompt", ["-p"], Some("TEXT"), "prompt (or give it as the last argument)"),
    flag!("file", ["-f"], Some("FILE"), "read the prompt from a file"),
    flag!("n-predict", ["-n"], Some("N"), "tokens to generate (-1 = until end of generation; default -1)"),
    flag!("ctx-size", ["-c"], Some("N"), "context size (default 4096, at most the model's training context)"),
    flag!("batch-size", ["-b"], Some("N"), "logical batch size (default 2048)"),
    flag!("ubatch-size", ["-ub"], Some("N"), "physical batch size (default 512)"),
    flag!("threads", ["-t"], Some("N"), "cpu threads (default: all cores)"),
    flag!("backend", [], Some("cpu|wgpu|auto"), "compute backend (default auto)"),
    flag!("adapter", [], Some("N"), "wgpu adapter index"),
    flag!("cache-type-k", ["-ctk"], Some("f16|f32"), "K cache type (default f16)"),
    flag!("cache-type-v", ["-ctv"], Some("f16|f32"), "V cache type (default f16)"),
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

fn num<T: std::str::FromStr>(p: &Parsed, name: &str) -> Result<Option<T>, String> {
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
        let mut v = glint_sample::parse_logit_bias(lb).map_err(|e| format!("--logit-bias: {e}"))?;
        s.logit_bias.append(&mut v);
    }
    if let Some(list) = p.get("samplers") {
        s.samplers =
            glint_sample::parse_sampler_list(list).map_err(|e| format!("--samplers: {e}"))?;
    }
    if let Some(seq) = p.get("sampling-seq") {
        s.samplers =
            glint_sample::parse_sampler_seq(seq).map_err(|e| format!("--sampling-seq: {e}"))?;
    }
    s.validate().map_err(|e| e.to_string())?;
    Ok(s)
}

/// The model file: `-m`, else the default model, fetched when missing.
pub fn model_path(p: &Parsed) -> Result<std::path::PathBuf, String> {
    if let Some(m) = p.get("model") {
        return Ok(m.into());
    }
    let known = glint::models::known_model(glint::models::DEFAULT_MODEL)
        .ok_or("no default model is known")?;
    glint::models::pull(known, &mut |line| eprintln!("glint: {line}")).map_err(|e| e.to_string())
}

pub fn model_params(p: &Parsed) -> Result<ModelParams, String> {
    Ok(ModelParams {
        backend: p
            .get("backend")
            .unwrap_or("auto")
            .parse()
            .map_err(|e: glint::Error| e.to_string())?,
        adapter: num(p, "adapter")?,
        n_threads: num(p, "threads")?,
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
    let cache = |flag: &str| -> Result<CacheType, String> {
        p.get(flag)
            .unwrap_or("f16")
            .parse()
            .map_err(|e: glint::Error| format!("--{flag}: {e}"))
    };
    Ok(ContextParams {
        n_ctx,
        n_batch: num(p, "batch-size")?.unwrap_or(d.n_batch),
        n_ubatch: num(p, "ubatch-size")?.unwrap_or(d.n_ubatch),
        type_k: cache("cache-type-k")?,
        type_v: cache("cache-type-v")?,
        ..d
    })
}

pub fn prompt_text(p: &Parsed) -> Result<String, String> {
    match (p.get("prompt"), p.get("file"), p.positional.as_slice()) {
        (Some(t), None, []) => Ok(t.to_string()),
        (None, Some(f), []) => std::fs::read_to_string(f).map_err(|e| format!("--file {f}: {e}")),
        (None, None, [t]) => Ok(t.clone()),
        (None, None, []) => {
            Err("generate: no prompt (give -p TEXT, -f FILE or the prompt as an argument)".into())
        }
        _ => Err("generate: give the prompt once (-p, -f or an argument)".into()),
    }
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let p = args::parse(rest, FLAGS)?;
    if p.has("help") {
        println!("{}", args::help("glint generate [options] [PROMPT]", FLAGS));
        return Ok(());
    }
    let chat = p.has("chat") || p.has("system") || p.has("messages");
    let prompt = if p.has("messages") {
        String::new()
    } else {
        prompt_text(&p)?
    };
    let logprobs = p.get("logprobs").map(logprobs_out::parse_n).transpose()?;
    let sampling = sampler_params(&p)?;
    let n_predict = num::<i32>(&p, "n-predict")?.unwrap_or(-1);
    let verbose = p.has("verbose");

    let path = model_path(&p)?;
    let t_load = Instant::now();
    let model = Model::load(&path, &model_params(&p)?).map_err(|e| e.to_string())?;
    let mut ctx = Context::new(&model, context_params(&p, &model)?).map_err(|e| e.to_string())?;
    let load_secs = t_load.elapsed().as_secs_f64();
    if verbose {
        let hp = model.hparams();
        let m = model.memory();
        eprintln!(
            "glint: {} ({}, {} layers, n_embd {}, vocab {}) on {}",
            path.display(),
            hp.arch.name,
            hp.n_layer,
            hp.n_embd,
            hp.n_vocab,
            model.backend_name()
        );
        eprintln!(
            "glint: memory on the backend: weights {:.1} MiB, KV cache {:.1} MiB, scratch {:.1} MiB (weights mapped from the file are not counted)",
            m.weights as f64 / 1048576.0,
            m.kv_cache as f64 / 1048576.0,
            m.scratch as f64 / 1048576.0
        );
    }
    let tok = model.tokenizer();
    let (prompt, ids) = if chat {
        crate::cli_chat::chat_prompt(&p, &model, prompt)?
    } else {
        let ids = tok
            .encode(&prompt, true, !p.has("no-special"))
            .map_err(|e| e.to_string())?;
        (prompt, ids)
    };
    if p.has("verbose-prompt") {
        if chat {
            eprintln!("glint: chat prompt:\n{prompt}");
        }
        eprintln!("glint: prompt: {} tokens", ids.len());
        for &id in &ids {
            eprintln!("{id:6} -> {:?}", tok.token_text(id).unwrap_or(""));
        }
    }
    let mut out = std::io::stdout().lock();
    if p.has("echo") && logprobs.is_none() {
        let _ = write!(out, "{prompt}");
        let _ = out.flush();
    }
    let params = GenerateParams {
        n_predict,
        sampling,
        stop_at_eog: !p.has("ignore-eos"),
    };
    let mut io_err = None;
    let mut lp_err = None;
    let stats = generate(&mut ctx, &ids, &params, logprobs.is_some(), &mut |ev| {
        let written = match (logprobs, ev.id, ev.logits) {
            (Some(n), Some(id), Some(logits)) => match logprobs_out::line(tok, logits, id, n) {
                Ok(v) => writeln!(out, "{v}"),
                Err(e) => {
                    lp_err = Some(e);
                    return false;
                }
            },
            (Some(_), _, _) => Ok(()),
            (None, _, _) => out.write_all(ev.text.as_bytes()),
        };
        if let Err(e) = written.and_then(|()| out.flush()) {
            io_err = Some(e);
            return false;
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = lp_err {
        return Err(format!("--logprobs: {e}"));
    }
    if logprobs.is_none() {
        let _ = writeln!(out).and_then(|()| out.flush());
    }
    if let Some(e) = io_err {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(format!("writing the output: {e}"));
        }
    }
    eprintln!(
        "glint: load {:.2} s | prompt {} tokens, {:.1} tokens/s | generation {} tokens, {:.1} tokens/s | {:?} | {}",
        load_secs,
        stats.n_prompt,
        stats.prompt_tps(),
        stats.n_gen,
        stats.gen_tps(),
        stats.stop,
        model.backend_name()
    );
    if stats.stop == glint::generate::StopReason::ContextFull {
        eprintln!(
            "glint: the context is full ({} tokens): stopped",
            ctx.n_ctx()
        );
    }
    Ok(())
}
