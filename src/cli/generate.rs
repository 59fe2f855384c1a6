//! `glint generate`: llama.cpp's flag names, text streamed to stdout, timings
//! to stderr.

use std::io::Write;
use std::time::Instant;

use std::path::Path;

use glint::generate::{
    generate_parallel, generate_with, GenerateParams, GenerateStats, Hooks, KvEvent,
};
use glint::kv::KvOp;
use glint::state::PromptCache;
use glint::{Context, Model};

use super::args::{self, Parsed};
use super::logprobs_out;
use super::options::{
    chat_prompt, context_params, model_params, model_path, num, prompt_list, prompt_text,
    sampler_params, FLAGS, ROPE_FLAGS,
};
use super::output;

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
    let PromptCache {
        tokens: saved,
        state,
    } = PromptCache::load(path).map_err(|e| e.to_string())?;
    let common = saved.iter().zip(ids).take_while(|(a, b)| a == b).count();
    let n_reuse = common.min(ids.len() - 1);
    // Only the reused prefix: a cache saved by a larger context still
    // restores when that prefix fits. Even when nothing is reused, the
    // whole file is checked (seal, the model's identity) first: a cache
    // another model made is an error, never silently overwritten.
    ctx.state_seq_load_prefix(&state, 0, n_reuse as i32)
        .map_err(|e| format!("prompt cache {}: {e}", path.display()))?;
    if n_reuse == 0 {
        return Ok(0);
    }
    ctx.seq_rm(0, n_reuse as i32, -1)
        .map_err(|e| e.to_string())?;
    Ok(n_reuse)
}

/// What `generate`'s flags ask for, checked before anything is loaded.
struct Job {
    chat: bool,
    logprobs: Option<usize>,
    n_parallel: u32,
    prompts: Vec<String>,
    params: GenerateParams,
    keep: i32,
    cache_path: Option<std::path::PathBuf>,
    verbose: bool,
}

fn job(p: &Parsed) -> Result<Job, String> {
    let chat = p.has("chat") || p.has("system") || p.has("messages");
    let logprobs = p.get("logprobs").map(logprobs_out::parse_n).transpose()?;
    let n_parallel = num::<u32>(p, "parallel")?.unwrap_or(1);
    if n_parallel > 1 && (chat || logprobs.is_some()) {
        return Err("--parallel works without --chat and --logprobs".into());
    }
    let prompts = if p.has("messages") {
        vec![String::new()]
    } else if n_parallel > 1 {
        let list = prompt_list(p)?;
        if list.len() > n_parallel as usize {
            return Err(format!(
                "generate: {} prompts, --parallel {n_parallel}",
                list.len()
            ));
        }
        list
    } else {
        vec![prompt_text(p)?]
    };
    // In window mode self-extend lives in the context (its attention),
    // not in shifting positions.
    let window = super::options::self_extend_window(p)?.is_some();
    let ga_n = if window {
        1
    } else {
        num::<i32>(p, "grp-attn-n")?.unwrap_or(1)
    };
    let ga_w = num::<i32>(p, "grp-attn-w")?.unwrap_or(512);
    glint::generate::validate_self_extend(ga_n, ga_w).map_err(|e| e.to_string())?;
    let ctx_shift = p.has("context-shift");
    if ctx_shift && ga_n > 1 {
        return Err("--context-shift and --grp-attn-n > 1 cannot be combined".into());
    }
    let cache_path = p.get("prompt-cache").map(std::path::PathBuf::from);
    if cache_path.is_some() && (ga_n > 1 || n_parallel > 1) {
        return Err("--prompt-cache works without --grp-attn-n and --parallel".into());
    }
    Ok(Job {
        chat,
        logprobs,
        n_parallel,
        prompts,
        params: GenerateParams {
            n_predict: num::<i32>(p, "n-predict")?.unwrap_or(-1),
            sampling: sampler_params(p)?,
            stop_at_eog: !p.has("ignore-eos"),
            ga_n,
            ga_w,
            ctx_shift,
            ..Default::default()
        },
        keep: num::<i32>(p, "keep")?.unwrap_or(0),
        cache_path,
        verbose: p.has("verbose"),
    })
}

/// Load the model and make its context; with `--verbose`, say what was
/// loaded and what the backend holds.
fn load(p: &Parsed, verbose: bool) -> Result<(Model, Context, f64), String> {
    let path = model_path(p)?;
    let t_load = Instant::now();
    let model = Model::load(&path, &model_params(p)?).map_err(|e| e.to_string())?;
    let ctx = Context::new(&model, context_params(p, &model)?).map_err(|e| e.to_string())?;
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
        if let Some(why) = model.backend_passed_over() {
            eprintln!("glint: {why}");
        }
        if let Some(t) = model.gpu_tune_report() {
            eprint!("glint: {t}");
        }
        eprintln!(
            "glint: memory on the backend: weights {:.1} MiB, KV cache {:.1} MiB, scratch {:.1} MiB (weights mapped from the file are not counted)",
            m.weights as f64 / 1048576.0,
            m.kv_cache as f64 / 1048576.0,
            m.scratch as f64 / 1048576.0
        );
    }
    Ok((model, ctx, load_secs))
}

/// Each prompt's token ids; a chat prompt is rendered by the template first
/// and its text replaces the raw one.
fn tokenize(p: &Parsed, model: &Model, job: &mut Job) -> Result<Vec<Vec<u32>>, String> {
    let tok = model.tokenizer();
    let mut all_ids = Vec::with_capacity(job.prompts.len());
    for prompt in job.prompts.iter_mut() {
        let ids = if job.chat {
            let (text, ids) = chat_prompt(p, model, std::mem::take(prompt))?;
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
    Ok(all_ids)
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let flags: Vec<args::Flag> = FLAGS.iter().chain(ROPE_FLAGS).copied().collect();
    let p = args::parse(rest, &flags)?;
    if p.has("help") {
        return output::println(&args::help("glint generate [options] [PROMPT]", &flags));
    }
    let mut job = job(&p)?;
    let (model, mut ctx, load_secs) = load(&p, job.verbose)?;
    let all_ids = tokenize(&p, &model, &mut job)?;
    if job.n_parallel > 1 {
        return run_parallel(&mut ctx, &job.prompts, &all_ids, &job.params, &p, load_secs);
    }
    let ids = &all_ids[0];
    let tok = model.tokenizer();
    // As llama.cpp: --keep counts prompt tokens, the BOS comes on top.
    let add_bos = tok.add_bos() && tok.bos().is_some_and(|b| ids.first() == Some(&b));
    job.params.n_keep = if job.keep < 0 || job.keep as usize > ids.len() {
        ids.len() as i32
    } else {
        job.keep + add_bos as i32
    };
    if let Some(cp) = &job.cache_path {
        job.params.n_cached = restore_prompt_cache(&mut ctx, cp, ids)?;
        eprintln!(
            "glint: prompt cache {}: reused {} of {} prompt tokens",
            cp.display(),
            job.params.n_cached,
            ids.len()
        );
    }
    let stats = run_single(&p, &job, &mut ctx, ids)?;
    if job.verbose {
        let m = model.memory();
        eprintln!(
            "glint: memory after the run: KV cache {:.1} MiB, scratch {:.1} MiB, the threads' own scratch {:.1} KiB",
            m.kv_cache as f64 / 1048576.0,
            m.scratch as f64 / 1048576.0,
            m.thread_scratch as f64 / 1024.0
        );
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
        "glint: load {:.2} s | prompt {} tokens, {:.1} tokens/s | generation {} tokens, {:.1} tokens/s | {} | {}",
        load_secs,
        stats.n_prompt,
        stats.prompt_tps(),
        stats.n_gen,
        stats.gen_tps(),
        stats.stop,
        model.backend_name()
    );
    if stats.stop == glint::generate::StopReason::ContextFull {
        let hint = if job.params.ctx_shift {
            "a context shift freed no room: lower --keep"
        } else {
            "--context-shift would go on"
        };
        eprintln!(
            "glint: the context is full ({} tokens): stopped ({hint})",
            ctx.n_ctx()
        );
    }
    Ok(())
}

/// One sequence: text (or `--logprobs` lines) streamed to stdout, the
/// prompt cache saved once the prompt is in.
fn run_single(
    p: &Parsed,
    job: &Job,
    ctx: &mut Context,
    ids: &[u32],
) -> Result<GenerateStats, String> {
    let logprobs = job.logprobs;
    let mut out = std::io::stdout().lock();
    if p.has("echo") && logprobs.is_none() {
        let _ = write!(out, "{}", job.prompts[0]);
        let _ = out.flush();
    }
    let mut on_kv = |ev: &KvEvent| {
        for line in kv_event_lines(ev) {
            eprintln!("{line}");
        }
    };
    let mut save = |ctx: &mut Context| -> Result<(), glint::Error> {
        match &job.cache_path {
            Some(cp) => PromptCache::capture(ctx, 0, ids)?.save(cp),
            None => Ok(()),
        }
    };
    let mut hooks = Hooks {
        on_kv: if job.verbose { Some(&mut on_kv) } else { None },
        after_prompt: Some(&mut save),
    };
    let mut io_err = None;
    let mut params = job.params.clone();
    params.logprobs = logprobs;
    let stats = generate_with(ctx, ids, &params, &mut hooks, &mut |ev| {
        let written = match (logprobs, ev.logprob) {
            (Some(_), Some(lp)) => writeln!(out, "{}", logprobs_out::line(lp)),
            (Some(_), None) => Ok(()),
            (None, _) => out.write_all(ev.text.as_bytes()),
        };
        if let Err(e) = written.and_then(|()| out.flush()) {
            io_err = Some(e);
            return false;
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if logprobs.is_none() {
        let _ = writeln!(out).and_then(|()| out.flush());
    }
    if let Some(e) = io_err {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(format!("writing the output: {e}"));
        }
    }
    Ok(stats)
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
        match s.stop {
            glint::generate::StopReason::ContextFull => {
                eprintln!("glint: [{i}] the context is full: stopped")
            }
            glint::generate::StopReason::CacheFull => eprintln!(
                "glint: [{i}] the shared cache had no free cell: stopped (a larger -c, or --no-kv-unified)"
            ),
            _ => {}
        }
    }
    Ok(())
}
