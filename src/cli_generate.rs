//! `glint generate`: llama.cpp's flag names, text streamed to stdout, timings
//! to stderr.

use std::io::Write;
use std::time::Instant;

use std::path::Path;

use glint::generate::{generate_parallel, generate_with, GenerateParams, Hooks, KvEvent};
use glint::kv::KvOp;
use glint::prompt_cache;
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
    flag!("prompt", ["-p"], Some("TEXT"), "prompt (or give it as the last argument); repeat it for --parallel"),
    flag!("file", ["-f"], Some("FILE"), "read the prompt from a file (with --parallel: one prompt per line)"),
    flag!("n-predict", ["-n"], Some("N"), "tokens to generate (-1 = until end of generation; default -1)"),
    flag!("ctx-size", ["-c"], Some("N"), "context size (default 4096, at most the model's training context)"),
    flag!("batch-size", ["-b"], Some("N"), "logical batch size (default 2048)"),
    flag!("ubatch-size", ["-ub"], Some("N"), "physical batch size (default 512)"),
    flag!("grp-attn-n", ["-gan"], Some("N"), "self-extend group factor (default 1 = off)"),
    flag!("grp-attn-w", ["-gaw"], Some("N"), "self-extend window, a multiple of -gan (default 512)"),
    flag!("context-shift", [], None, "when the context is full, drop half of what follows --keep and go on (default: stop)"),
    flag!("keep", [], Some("N"), "prompt tokens a context shift keeps (default 0; -1 = all; BOS added on top)"),
    flag!("parallel", ["-np"], Some("N"), "sequences decoded together, one prompt each (default 1)"),
    flag!("kv-unified", ["-kvu"], None, "one KV stream shared by all sequences (the default)"),
    flag!("no-kv-unified", [], None, "one KV stream per sequence, each of ctx-size/parallel slots"),
    flag!("prompt-cache", [], Some("FILE"), "reuse the prompt prefix saved in FILE, then save this prompt's state there"),
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
    let n_seq = num::<u32>(p, "parallel")?.unwrap_or(1);
    if n_seq == 0 {
        return Err("--parallel must be >= 1".into());
    }
    if p.has("kv-unified") && p.has("no-kv-unified") {
        return Err("give --kv-unified or --no-kv-unified, not both".into());
    }
    let kv_unified = !p.has("no-kv-unified");
    // As llama.cpp: separate streams share the context size out.
    let n_ctx = if kv_unified { n_ctx } else { n_ctx / n_seq };
    Ok(ContextParams {
        n_ctx,
        n_seq_max: n_seq,
        kv_unified,
        n_batch: num(p, "batch-size")?.unwrap_or(d.n_batch),
        n_ubatch: num(p, "ubatch-size")?.unwrap_or(d.n_ubatch),
        type_k: cache("cache-type-k")?,
        type_v: cache("cache-type-v")?,
    })
}

/// The prompts of `--parallel`: one per line of `-f`, or each `-p`.
pub fn prompt_list(p: &Parsed) -> Result<Vec<String>, String> {
    let list: Vec<String> = match (p.all("prompt"), p.get("file"), p.positional.as_slice()) {
        (ps, None, []) if !ps.is_empty() => ps.to_vec(),
        ([], Some(f), []) => std::fs::read_to_string(f)
            .map_err(|e| format!("--file {f}: {e}"))?
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
        (None, Some(f), []) => std::fs::read_to_string(f).map_err(|e| format!("--file {f}: {e}")),
        (None, None, [t]) => Ok(t.clone()),
        (None, None, []) => {
            Err("generate: no prompt (give -p TEXT, -f FILE or the prompt as an argument)".into())
        }
        _ => Err("generate: give the prompt once (-p, -f or an argument)".into()),
    }
}

/// One cache event as `--verbose` prints it: a summary line, then each call.
fn kv_event_lines(ev: &KvEvent) -> Vec<String> {
    let (head, calls): (String, Vec<KvOp>) = match ev {
        KvEvent::SelfExtend(p) => (
            format!(
                "kv: self-extend n_past {} ga_i {} ib {} bd {} dd {} -> n_past {} ga_i {}",
                p.n_past_before, p.ga_i_before, p.ib, p.bd, p.dd, p.n_past_after, p.ga_i_after
            ),
            p.calls.to_vec(),
        ),
        KvEvent::ContextShift {
            n_past_before,
            n_keep,
            shift,
        } => (
            format!(
                "kv: context-shift n_past {n_past_before} n_keep {n_keep} n_discard {} -> n_past {}",
                shift.n_discard, shift.n_past
            ),
            shift.calls.to_vec(),
        ),
    };
    let mut lines = vec![head];
    for c in calls {
        lines.push(match c {
            KvOp::SeqRm { seq, p0, p1 } => format!("kv: seq_rm({seq}, {p0}, {p1})"),
            KvOp::SeqAdd { seq, p0, p1, d } => format!("kv: seq_add({seq}, {p0}, {p1}, {d})"),
            KvOp::SeqDiv { seq, p0, p1, n } => format!("kv: seq_div({seq}, {p0}, {p1}, {n})"),
        });
    }
    lines
}

/// Restore the longest common prefix of `ids` and the tokens saved in
/// `path` into sequence 0; returns how many prompt tokens were reused (at
/// most all but the last, whose logits are needed).
fn restore_prompt_cache(ctx: &mut Context, path: &Path, ids: &[u32]) -> Result<usize, String> {
    if !path.exists() {
        return Ok(0);
    }
    let (saved, state) = prompt_cache::load(path).map_err(|e| e.to_string())?;
    let common = saved.iter().zip(ids).take_while(|(a, b)| a == b).count();
    let n_reuse = common.min(ids.len() - 1);
    if n_reuse == 0 {
        return Ok(0);
    }
    ctx.state_seq_load(&state, 0)
        .map_err(|e| format!("prompt cache {}: {e}", path.display()))?;
    ctx.seq_rm(0, n_reuse as i32, -1)
        .map_err(|e| e.to_string())?;
    Ok(n_reuse)
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let p = args::parse(rest, FLAGS)?;
    if p.has("help") {
        println!("{}", args::help("glint generate [options] [PROMPT]", FLAGS));
        return Ok(());
    }
    let chat = p.has("chat") || p.has("system") || p.has("messages");
    let logprobs = p.get("logprobs").map(logprobs_out::parse_n).transpose()?;
    let n_parallel = num::<u32>(&p, "parallel")?.unwrap_or(1);
    if n_parallel > 1 && (chat || logprobs.is_some()) {
        return Err("--parallel works without --chat and --logprobs".into());
    }
    let prompts = if p.has("messages") {
        vec![String::new()]
    } else if n_parallel > 1 {
        let list = prompt_list(&p)?;
        if list.len() > n_parallel as usize {
            return Err(format!(
                "generate: {} prompts, --parallel {n_parallel}",
                list.len()
            ));
        }
        list
    } else {
        vec![prompt_text(&p)?]
    };
    let sampling = sampler_params(&p)?;
    let n_predict = num::<i32>(&p, "n-predict")?.unwrap_or(-1);
    let verbose = p.has("verbose");
    let ga_n = num::<i32>(&p, "grp-attn-n")?.unwrap_or(1);
    let ga_w = num::<i32>(&p, "grp-attn-w")?.unwrap_or(512);
    glint::generate::validate_self_extend(ga_n, ga_w).map_err(|e| e.to_string())?;
    let ctx_shift = p.has("context-shift");
    if ctx_shift && ga_n > 1 {
        return Err("--context-shift and --grp-attn-n > 1 cannot be combined".into());
    }
    let keep = num::<i32>(&p, "keep")?.unwrap_or(0);
    let cache_path = p.get("prompt-cache").map(std::path::PathBuf::from);
    if cache_path.is_some() && (ga_n > 1 || n_parallel > 1) {
        return Err("--prompt-cache works without --grp-attn-n and --parallel".into());
    }

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
    let mut all_ids = Vec::with_capacity(prompts.len());
    let mut prompts = prompts;
    for prompt in prompts.iter_mut() {
        let ids = if chat {
            // The chat template renders the prompt; its text replaces the raw one.
            let (text, ids) = crate::cli_chat::chat_prompt(&p, &model, std::mem::take(prompt))?;
            if p.has("verbose-prompt") {
                eprintln!("glint: chat prompt:\n{text}");
            }
            *prompt = text;
            ids
        } else {
            tok.encode(prompt, true, !p.has("no-special"))
                .map_err(|e| e.to_string())?
        };
        if p.has("verbose-prompt") {
            eprintln!("glint: prompt: {} tokens", ids.len());
            for &id in &ids {
                eprintln!("{id:6} -> {:?}", tok.token_text(id).unwrap_or(""));
            }
        }
        all_ids.push(ids);
    }
    let mut params = GenerateParams {
        n_predict,
        sampling,
        stop_at_eog: !p.has("ignore-eos"),
        ga_n,
        ga_w,
        ctx_shift,
        ..Default::default()
    };
    if n_parallel > 1 {
        return run_parallel(&mut ctx, &prompts, &all_ids, &params, &p, load_secs);
    }
    let (prompt, ids) = (&prompts[0], &all_ids[0]);
    // As llama.cpp: --keep counts prompt tokens, the BOS comes on top.
    let add_bos = tok.add_bos() && tok.bos().is_some_and(|b| ids.first() == Some(&b));
    params.n_keep = if keep < 0 || keep as usize > ids.len() {
        ids.len() as i32
    } else {
        keep + add_bos as i32
    };
    if let Some(cp) = &cache_path {
        params.n_cached = restore_prompt_cache(&mut ctx, cp, ids)?;
        eprintln!(
            "glint: prompt cache {}: reused {} of {} prompt tokens",
            cp.display(),
            params.n_cached,
            ids.len()
        );
    }
    let mut out = std::io::stdout().lock();
    if p.has("echo") && logprobs.is_none() {
        let _ = write!(out, "{prompt}");
        let _ = out.flush();
    }
    let mut on_kv = |ev: &KvEvent| {
        for line in kv_event_lines(ev) {
            eprintln!("{line}");
        }
    };
    let mut save = |ctx: &mut Context| -> Result<(), glint::Error> {
        match &cache_path {
            Some(cp) => prompt_cache::save(cp, ctx, 0, ids),
            None => Ok(()),
        }
    };
    let mut hooks = Hooks {
        on_kv: if verbose { Some(&mut on_kv) } else { None },
        after_prompt: Some(&mut save),
    };
    let mut io_err = None;
    let mut lp_err = None;
    let want_logits = logprobs.is_some();
    let stats = generate_with(&mut ctx, ids, &params, want_logits, &mut hooks, &mut |ev| {
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
    if verbose {
        let mut pos = ctx.cell_positions();
        pos.sort_unstable();
        let list: Vec<String> = pos.iter().map(|p| p.to_string()).collect();
        eprintln!(
            "kv: cells {} (positions, sorted): {}",
            pos.len(),
            list.join(" ")
        );
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
            "glint: the context is full ({} tokens): stopped (--context-shift would go on)",
            ctx.n_ctx()
        );
    }
    Ok(())
}

/// `--parallel N`: every prompt its own sequence, decoded together; each
/// sequence's text printed as a `[i] text` block at the end.
fn run_parallel(
    ctx: &mut Context,
    prompts: &[String],
    ids: &[Vec<u32>],
    params: &GenerateParams,
    p: &Parsed,
    load_secs: f64,
) -> Result<(), String> {
    let mut texts = vec![String::new(); ids.len()];
    let stats = generate_parallel(ctx, ids, params, &mut |s, ev| {
        texts[s].push_str(ev.text);
        true
    })
    .map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    for (i, t) in texts.iter().enumerate() {
        let echo = if p.has("echo") {
            prompts[i].as_str()
        } else {
            ""
        };
        let _ = writeln!(out, "[{i}] {echo}{t}");
    }
    let _ = out.flush();
    let n_gen: usize = stats.iter().map(|s| s.n_gen).sum();
    let n_prompt: usize = stats.iter().map(|s| s.n_prompt).sum();
    let (ps, gs) = stats
        .first()
        .map(|s| (s.prompt_secs, s.gen_secs))
        .unwrap_or_default();
    eprintln!(
        "glint: load {:.2} s | {} sequences | prompt {} tokens, {:.1} tokens/s | generation {} tokens, {:.1} tokens/s | {}",
        load_secs,
        ids.len(),
        n_prompt,
        n_prompt as f64 / ps.max(1e-9),
        n_gen,
        n_gen as f64 / gs.max(1e-9),
        ctx.model().backend_name()
    );
    for (i, s) in stats.iter().enumerate() {
        if s.stop == glint::generate::StopReason::ContextFull {
            eprintln!("glint: [{i}] the context is full: stopped");
        }
    }
    Ok(())
}
