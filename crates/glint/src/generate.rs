//! The high-level generation loop: prompt in `n_batch` chunks, then one token
//! at a time through the sampler chain, text streamed as it completes.

use std::time::Instant;

use glint_sample::{Sampler, SamplerParams};

use crate::{Batch, Context, Error};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Tokens to generate; `< 0` = until an end-of-generation token or a
    /// full context.
    pub n_predict: i32,
    /// The sampler chain's parameters (llama.cpp's defaults).
    pub sampling: SamplerParams,
    /// Stop at end-of-generation tokens (EOS, EOT, …).
    pub stop_at_eog: bool,
    /// Self-extend group factor `ga_n` (1 = off).
    pub ga_n: i32,
    /// Self-extend window `ga_w` (a multiple of `ga_n`).
    pub ga_w: i32,
    /// When the cache is full, drop half of what follows the first `n_keep`
    /// positions and go on (llama.cpp's context shift) instead of stopping.
    pub ctx_shift: bool,
    /// Positions a context shift keeps, from the start of the prompt (BOS
    /// included when the tokenizer adds one).
    pub n_keep: i32,
    /// Prompt tokens already in sequence 0 of the cache at positions
    /// `0..n_cached` (a restored prompt cache); only the rest is decoded.
    pub n_cached: usize,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            n_predict: -1,
            sampling: SamplerParams::default(),
            stop_at_eog: true,
            ga_n: 1,
            ga_w: 512,
            ctx_shift: false,
            n_keep: 0,
            n_cached: 0,
        }
    }
}

/// Checks the self-extend parameters as llama.cpp does (and a little more).
pub fn validate_self_extend(ga_n: i32, ga_w: i32) -> Result<(), Error> {
    let bad = |m: String| Err(Error::Invalid(m));
    if ga_n < 1 {
        return bad(format!("--grp-attn-n must be >= 1, got {ga_n}"));
    }
    if ga_n == 1 {
        return Ok(());
    }
    if ga_w < ga_n {
        return bad(format!(
            "--grp-attn-w ({ga_w}) must be >= --grp-attn-n ({ga_n})"
        ));
    }
    if ga_w % ga_n != 0 {
        return bad(format!(
            "--grp-attn-w ({ga_w}) must be a multiple of --grp-attn-n ({ga_n})"
        ));
    }
    Ok(())
}

/// A position-changing cache event the loop made, for `--verbose`.
#[derive(Clone, Debug)]
pub enum KvEvent {
    /// One pass of the self-extend loop.
    SelfExtend(glint_kv::SelfExtendPass),
    /// A context shift, with `n_past` before it and `n_keep`.
    ContextShift {
        /// `n_past` before the shift.
        n_past_before: i32,
        /// Positions kept.
        n_keep: i32,
        /// What it did.
        shift: glint_kv::ContextShift,
    },
}

/// A hook run once the prompt is in the cache.
pub type AfterPrompt<'a> = &'a mut dyn FnMut(&mut Context) -> Result<(), Error>;

/// Optional hooks into [`generate_with`].
#[derive(Default)]
pub struct Hooks<'a> {
    /// Called for every cache event, in order.
    pub on_kv: Option<&'a mut dyn FnMut(&KvEvent)>,
    /// Called once the whole prompt is in the cache, before the first token
    /// is sampled (e.g. to save the prompt's state).
    pub after_prompt: Option<AfterPrompt<'a>>,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// `n_predict` tokens were generated.
    NPredict,
    /// The context is full.
    ContextFull,
    /// The callback asked to stop.
    Callback,
}

/// What a generation did, for speed reports.
#[derive(Clone, Debug)]
pub struct GenerateStats {
    /// Prompt tokens processed.
    pub n_prompt: usize,
    /// Tokens generated (the end-of-generation token included).
    pub n_gen: usize,
    /// Seconds spent on the prompt.
    pub prompt_secs: f64,
    /// Seconds spent generating.
    pub gen_secs: f64,
    /// Why it stopped.
    pub stop: StopReason,
    /// The generated token ids.
    pub tokens: Vec<u32>,
}

impl GenerateStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.n_prompt as f64 / self.prompt_secs.max(1e-9)
    }
    /// Generated tokens per second (the first token's time is the prompt's).
    pub fn gen_tps(&self) -> f64 {
        self.n_gen.saturating_sub(1) as f64 / self.gen_secs.max(1e-9)
    }
}

/// One generated token as the callback sees it.
pub struct TokenEvent<'a> {
    /// Its id; `None` for text flushed at the end (bytes held back waiting
    /// for the rest of a character).
    pub id: Option<u32>,
    /// Text that became complete with it (may be empty: half a character).
    pub text: &'a str,
    /// Logits it was sampled from (`None` on the greedy device path).
    pub logits: Option<&'a [f32]>,
}

/// True when greedy decoding can take the device argmax: nothing in the chain
/// would change which token is largest.
pub(crate) fn plain_greedy(s: &SamplerParams) -> bool {
    s.temp <= 0.0
        && s.mirostat == 0
        && s.logit_bias.is_empty()
        && (s.penalty_last_n == 0
            || (s.penalty_repeat == 1.0 && s.penalty_freq == 0.0 && s.penalty_present == 0.0))
        && s.dry_multiplier == 0.0
}

/// Decode `prompt` into sequence 0 of an empty `ctx` and generate after it,
/// calling `on_token` for each token (return `false` to stop). `want_logits`
/// makes the loop read the logits even when greedy decoding would not need
/// them (for logprobs).
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    want_logits: bool,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<GenerateStats, Error> {
    generate_with(
        ctx,
        prompt,
        params,
        want_logits,
        &mut Hooks::default(),
        on_token,
    )
}

/// The cache bookkeeping of the loop (llama.cpp's completion tool): `n_past`
/// is where the next token goes, `ga_i` the self-extend progress.
struct Positions {
    n_past: i32,
    ga_i: i32,
}

impl Positions {
    /// Run before every decode of `n_new` tokens: the self-extend loop, or a
    /// context shift when the cache is full. Returns false when there is no
    /// room for the tokens (no shift allowed, or it freed nothing).
    fn make_room(
        &mut self,
        ctx: &mut Context,
        n_new: usize,
        params: &GenerateParams,
        hooks: &mut Hooks,
    ) -> Result<bool, Error> {
        if params.ga_n > 1 {
            let out = ctx.self_extend(0, self.n_past, self.ga_i, params.ga_n, params.ga_w)?;
            self.n_past = out.n_past;
            self.ga_i = out.ga_i;
            if let Some(f) = hooks.on_kv.as_mut() {
                for pass in out.passes {
                    f(&KvEvent::SelfExtend(pass));
                }
            }
        } else if params.ctx_shift && self.n_past as usize + n_new >= ctx.n_ctx_stream() as usize {
            // llama.cpp's condition: it shifts with one slot still free.
            let n_keep = params.n_keep.clamp(0, self.n_past);
            let n_past_before = self.n_past;
            let shift = ctx.context_shift(0, n_keep, self.n_past)?;
            self.n_past = shift.n_past;
            if let Some(f) = hooks.on_kv.as_mut() {
                f(&KvEvent::ContextShift {
                    n_past_before,
                    n_keep,
                    shift,
                });
            }
        }
        let stream = ctx.cells().stream_of(0)?;
        Ok(ctx.cells().free(stream) as usize >= n_new)
    }
}

/// [`generate`] with hooks, self-extend, context shift and a restored
/// prompt prefix (see [`GenerateParams`]). Before each decode (prompt chunks
/// and generated tokens alike) the self-extend loop runs, or a context shift
/// when the cache is full; tokens go at positions `n_past..`.
pub fn generate_with(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    want_logits: bool,
    hooks: &mut Hooks,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<GenerateStats, Error> {
    let model = ctx.model().clone();
    let tok = model.tokenizer();
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt has no tokens".into()));
    }
    let n_ctx = ctx.n_ctx_stream() as usize;
    if prompt.len() >= n_ctx {
        return Err(Error::PromptTooLong {
            n_prompt: prompt.len(),
            n_ctx,
        });
    }
    validate_self_extend(params.ga_n, params.ga_w)?;
    if params.ga_n > 1 && params.ctx_shift {
        return Err(Error::Invalid(
            "self-extend (--grp-attn-n > 1) and --context-shift cannot be combined".into(),
        ));
    }
    if params.n_cached >= prompt.len() || (params.n_cached > 0 && params.ga_n > 1) {
        return Err(Error::Invalid(format!(
            "{} cached prompt tokens of {} (at most all but the last, and none with self-extend)",
            params.n_cached,
            prompt.len()
        )));
    }
    params.sampling.validate()?;
    let mut chain = params.sampling.build_chain(model.n_vocab(), n_ctx)?;
    let greedy = plain_greedy(&params.sampling) && !want_logits;
    // The cache must hold exactly the restored prefix of sequence 0: any
    // other cell would be attended to as if it were part of this prompt.
    let held = ctx.seq_pos_max(0)? + 1;
    if held != params.n_cached as i32 {
        return Err(Error::Invalid(format!(
            "sequence 0 holds positions 0..{held} but {} prompt tokens are said to be cached \
             (clear the context, or seq_rm the rest, first)",
            params.n_cached
        )));
    }

    // Prompt, in n_batch chunks; logits for its last token only.
    let t0 = Instant::now();
    let n_batch = ctx.params().n_batch as usize;
    let mut at = Positions {
        n_past: params.n_cached as i32,
        ga_i: 0,
    };
    let todo = &prompt[params.n_cached..];
    let mut done = 0;
    for chunk in todo.chunks(n_batch) {
        if !at.make_room(ctx, chunk.len(), params, hooks)? {
            return Err(Error::Internal("no room for the prompt".into()));
        }
        done += chunk.len();
        let last = done == todo.len();
        let mut b = Batch::new();
        for (i, &t) in chunk.iter().enumerate() {
            b.add(t, at.n_past + i as i32, &[0], last && i + 1 == chunk.len());
        }
        ctx.decode(&b)?;
        at.n_past += chunk.len() as i32;
    }
    for &t in prompt {
        chain.accept(t);
    }
    let mut last_idx = (todo.len() - 1) % n_batch;
    if let Some(f) = hooks.after_prompt.as_mut() {
        f(ctx)?;
    }
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut dec = tok.stream_decoder(true);
    let mut tokens = Vec::new();
    let stop = loop {
        if params.n_predict >= 0 && tokens.len() >= params.n_predict as usize {
            break StopReason::NPredict;
        }
        let (id, logits) = if greedy {
            (ctx.argmax(last_idx)?, None)
        } else {
            let l = ctx.logits(last_idx)?.to_vec();
            let id = chain.sample(&l)?;
            (id, Some(l))
        };
        if greedy {
            chain.accept(id);
        }
        tokens.push(id);
        let eog = params.stop_at_eog && tok.is_eog(id);
        let text = if eog { String::new() } else { dec.push(id)? };
        let go_on = on_token(&TokenEvent {
            id: Some(id),
            text: &text,
            logits: logits.as_deref(),
        });
        if eog {
            break StopReason::EndOfGeneration;
        }
        if !go_on {
            break StopReason::Callback;
        }
        if params.n_predict >= 0 && tokens.len() >= params.n_predict as usize {
            break StopReason::NPredict;
        }
        if !at.make_room(ctx, 1, params, hooks)? {
            break StopReason::ContextFull;
        }
        ctx.decode(&Batch::from_tokens(&[id], at.n_past, 0))?;
        at.n_past += 1;
        last_idx = 0;
    };
    let rest = dec.flush();
    if !rest.is_empty() {
        on_token(&TokenEvent {
            id: None,
            text: &rest,
            logits: None,
        });
    }
    Ok(GenerateStats {
        n_prompt: prompt.len() - params.n_cached,
        n_gen: tokens.len(),
        prompt_secs,
        gen_secs: t1.elapsed().as_secs_f64(),
        stop,
        tokens,
    })
}

/// Generate after several prompts at once: prompt `i` goes to sequence `i`
/// (the context needs `n_seq_max >= prompts.len()`), all sequences are
/// decoded together, one batch per step, each with its own sampler chain
/// (same parameters and seed as alone). `on_token(i, event)` gets sequence
/// `i`'s tokens; returning `false` stops that sequence. Self-extend, context
/// shift and cached prompts are single-sequence features and refused here.
pub fn generate_parallel(
    ctx: &mut Context,
    prompts: &[Vec<u32>],
    params: &GenerateParams,
    on_token: &mut dyn FnMut(usize, &TokenEvent) -> bool,
) -> Result<Vec<GenerateStats>, Error> {
    let model = ctx.model().clone();
    let tok = model.tokenizer();
    let n_seq = prompts.len();
    if n_seq == 0 || n_seq > ctx.params().n_seq_max as usize {
        return Err(Error::Invalid(format!(
            "{n_seq} prompts for a context of {} sequences",
            ctx.params().n_seq_max
        )));
    }
    if params.ga_n > 1 || params.ctx_shift || params.n_cached > 0 {
        return Err(Error::Invalid(
            "self-extend, context shift and prompt caches work on one sequence, not with --parallel"
                .into(),
        ));
    }
    let n_ctx = ctx.n_ctx_stream() as usize;
    for (i, p) in prompts.iter().enumerate() {
        if ctx.seq_pos_max(i as i32)? >= 0 {
            return Err(Error::Invalid(format!(
                "sequence {i} is not empty: clear the context first"
            )));
        }
        if p.is_empty() || p.len() >= n_ctx {
            return Err(Error::Invalid(format!(
                "prompt {i} has {} tokens, a sequence holds 1..{n_ctx} (raise -c/--ctx-size)",
                p.len()
            )));
        }
    }
    params.sampling.validate()?;
    let greedy = plain_greedy(&params.sampling);
    let mut chains = Vec::with_capacity(n_seq);
    for p in prompts {
        let mut c = params.sampling.build_chain(model.n_vocab(), n_ctx)?;
        for &t in p {
            c.accept(t);
        }
        chains.push(c);
    }
    let mut sample = |ctx: &mut Context, seq: usize, idx: usize| -> Result<u32, Error> {
        let id = if greedy {
            ctx.argmax(idx)?
        } else {
            let l = ctx.logits(idx)?.to_vec();
            chains[seq].sample(&l)?
        };
        if greedy {
            chains[seq].accept(id);
        }
        Ok(id)
    };

    // Every prompt token in order (sequence 0's, then 1's, …), packed into
    // n_batch chunks; each sequence's first token is sampled right after the
    // chunk holding its last prompt token.
    let t0 = Instant::now();
    let n_batch = ctx.params().n_batch as usize;
    let all: Vec<(usize, i32, u32)> = prompts
        .iter()
        .enumerate()
        .flat_map(|(s, p)| p.iter().enumerate().map(move |(i, &t)| (s, i as i32, t)))
        .collect();
    let mut next = vec![0u32; n_seq];
    for chunk in all.chunks(n_batch) {
        let mut b = Batch::new();
        let mut lasts = Vec::new();
        for (k, &(s, pos, t)) in chunk.iter().enumerate() {
            let last = pos as usize + 1 == prompts[s].len();
            b.add(t, pos, &[s as i32], last);
            if last {
                lasts.push((s, k));
            }
        }
        ctx.decode(&b)?;
        for (s, k) in lasts {
            next[s] = sample(ctx, s, k)?;
        }
    }
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut decs: Vec<_> = (0..n_seq).map(|_| tok.stream_decoder(true)).collect();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); n_seq];
    let mut stop: Vec<Option<StopReason>> = vec![None; n_seq];
    let mut n_past: Vec<i32> = prompts.iter().map(|p| p.len() as i32).collect();
    loop {
        // Emit each live sequence's pending token; decide whether it goes on.
        let mut b = Batch::new();
        let mut in_batch = Vec::new();
        for s in 0..n_seq {
            if stop[s].is_some() {
                continue;
            }
            if params.n_predict >= 0 && tokens[s].len() >= params.n_predict as usize {
                stop[s] = Some(StopReason::NPredict);
                continue;
            }
            let id = next[s];
            tokens[s].push(id);
            let eog = params.stop_at_eog && tok.is_eog(id);
            let text = if eog {
                String::new()
            } else {
                decs[s].push(id)?
            };
            let go_on = on_token(
                s,
                &TokenEvent {
                    id: Some(id),
                    text: &text,
                    logits: None,
                },
            );
            stop[s] = if eog {
                Some(StopReason::EndOfGeneration)
            } else if !go_on {
                Some(StopReason::Callback)
            } else if params.n_predict >= 0 && tokens[s].len() >= params.n_predict as usize {
                Some(StopReason::NPredict)
            } else if n_past[s] as usize >= n_ctx {
                Some(StopReason::ContextFull)
            } else {
                None
            };
            if stop[s].is_none() {
                in_batch.push(s);
            }
        }
        // A unified cache shared by all: the sequences that find no slot stop.
        let mut free: std::collections::HashMap<u32, u32> = Default::default();
        in_batch.retain(|&s| {
            let Ok(st) = ctx.cells().stream_of(s as i32) else {
                return false;
            };
            let f = free.entry(st).or_insert_with(|| ctx.cells().free(st));
            if *f == 0 {
                stop[s] = Some(StopReason::ContextFull);
                return false;
            }
            *f -= 1;
            true
        });
        if in_batch.is_empty() {
            break;
        }
        for &s in &in_batch {
            b.add(next[s], n_past[s], &[s as i32], true);
            n_past[s] += 1;
        }
        ctx.decode(&b)?;
        for (k, &s) in in_batch.iter().enumerate() {
            next[s] = sample(ctx, s, k)?;
        }
    }
    let gen_secs = t1.elapsed().as_secs_f64();
    let mut stats = Vec::with_capacity(n_seq);
    for s in 0..n_seq {
        let rest = decs[s].flush();
        if !rest.is_empty() {
            on_token(
                s,
                &TokenEvent {
                    id: None,
                    text: &rest,
                    logits: None,
                },
            );
        }
        stats.push(GenerateStats {
            n_prompt: prompts[s].len(),
            n_gen: tokens[s].len(),
            prompt_secs,
            gen_secs,
            stop: stop[s].unwrap_or(StopReason::NPredict),
            tokens: std::mem::take(&mut tokens[s]),
        });
    }
    Ok(stats)
}
