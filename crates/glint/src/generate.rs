//! The high-level generation loop: prompt in `n_batch` chunks, then one token
//! at a time through the sampler chain, text streamed as it completes.

use std::time::Instant;

use glint_sample::{Chain, Sampler, SamplerParams};

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

impl std::fmt::Display for StopReason {
    /// In words, for stats lines: `end of generation`, `n_predict reached`,
    /// `context full`, `stopped by the caller`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::EndOfGeneration => "end of generation",
            StopReason::NPredict => "n_predict reached",
            StopReason::ContextFull => "context full",
            StopReason::Callback => "stopped by the caller",
        })
    }
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

/// One sequence's side of a generation loop: its sampler chain, its
/// streaming detokenizer and the tokens it generated. Every loop here
/// (single sequence, parallel sequences, a chat turn) picks and emits its
/// tokens through this, so they stop for the same reasons in the same order.
pub(crate) struct SeqSampler<'c, 't> {
    chain: &'c mut Chain,
    dec: glint_tokenizer::StreamDecoder<'t>,
    tok: &'t glint_tokenizer::Tokenizer,
    /// Take the device argmax (4 bytes) instead of reading the logits.
    greedy: bool,
    /// The generated token ids.
    pub(crate) tokens: Vec<u32>,
    /// The generated text so far.
    pub(crate) text: String,
}

impl<'c, 't> SeqSampler<'c, 't> {
    pub(crate) fn new(
        chain: &'c mut Chain,
        tok: &'t glint_tokenizer::Tokenizer,
        greedy: bool,
    ) -> Self {
        SeqSampler {
            chain,
            dec: tok.stream_decoder(true),
            tok,
            greedy,
            tokens: Vec::new(),
            text: String::new(),
        }
    }

    /// Sample the token after batch token `idx` of the last decode; the
    /// logits come along unless the greedy device path was taken.
    pub(crate) fn pick(
        &mut self,
        ctx: &mut Context,
        idx: usize,
    ) -> Result<(u32, Option<Vec<f32>>), Error> {
        if self.greedy {
            let id = ctx.argmax(idx)?;
            self.chain.accept(id);
            Ok((id, None))
        } else {
            let l = ctx.logits(idx)?.to_vec();
            Ok((self.chain.sample(&l)?, Some(l)))
        }
    }

    /// Record `id`, hand its text to `on_token`, and say whether the
    /// sequence stops here: at an end-of-generation token (when
    /// `stop_at_eog`), when the callback says so, or after `n_predict`
    /// tokens (`< 0`: no limit).
    pub(crate) fn emit(
        &mut self,
        id: u32,
        logits: Option<&[f32]>,
        stop_at_eog: bool,
        n_predict: i32,
        on_token: &mut dyn FnMut(&TokenEvent) -> bool,
    ) -> Result<Option<StopReason>, Error> {
        self.tokens.push(id);
        let eog = stop_at_eog && self.tok.is_eog(id);
        let piece = if eog {
            String::new()
        } else {
            self.dec.push(id)?
        };
        self.text.push_str(&piece);
        let go_on = on_token(&TokenEvent {
            id: Some(id),
            text: &piece,
            logits,
        });
        Ok(if eog {
            Some(StopReason::EndOfGeneration)
        } else if !go_on {
            Some(StopReason::Callback)
        } else if self.reached(n_predict) {
            Some(StopReason::NPredict)
        } else {
            None
        })
    }

    /// True once `n_predict` tokens (`>= 0`) were generated.
    pub(crate) fn reached(&self, n_predict: i32) -> bool {
        n_predict >= 0 && self.tokens.len() >= n_predict as usize
    }

    /// Hand the text held back for the rest of a character to `on_token`.
    pub(crate) fn finish(&mut self, on_token: &mut dyn FnMut(&TokenEvent) -> bool) {
        let rest = self.dec.flush();
        if !rest.is_empty() {
            self.text.push_str(&rest);
            on_token(&TokenEvent {
                id: None,
                text: &rest,
                logits: None,
            });
        }
    }
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
            // llama.cpp's condition: it shifts with one cell still free.
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
    check_single(ctx, prompt, params)?;
    let n_ctx = ctx.n_ctx_stream() as usize;
    let mut chain = params.sampling.build_chain(model.n_vocab(), n_ctx)?;
    let greedy = plain_greedy(&params.sampling) && !want_logits;

    let t0 = Instant::now();
    let mut at = Positions {
        n_past: params.n_cached as i32,
        ga_i: 0,
    };
    let mut last_idx = prefill(ctx, &prompt[params.n_cached..], &mut at, params, hooks)?;
    for &t in prompt {
        chain.accept(t);
    }
    if let Some(f) = hooks.after_prompt.as_mut() {
        f(ctx)?;
    }
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut seq = SeqSampler::new(&mut chain, tok, greedy);
    let stop = loop {
        if seq.reached(params.n_predict) {
            break StopReason::NPredict;
        }
        let (id, logits) = seq.pick(ctx, last_idx)?;
        let n_predict = params.n_predict;
        if let Some(r) = seq.emit(
            id,
            logits.as_deref(),
            params.stop_at_eog,
            n_predict,
            on_token,
        )? {
            break r;
        }
        if !at.make_room(ctx, 1, params, hooks)? {
            break StopReason::ContextFull;
        }
        ctx.decode(&Batch::from_tokens(&[id], at.n_past, 0))?;
        at.n_past += 1;
        last_idx = 0;
    };
    seq.finish(on_token);
    Ok(GenerateStats {
        n_prompt: prompt.len() - params.n_cached,
        n_gen: seq.tokens.len(),
        prompt_secs,
        gen_secs: t1.elapsed().as_secs_f64(),
        stop,
        tokens: std::mem::take(&mut seq.tokens),
    })
}

/// What [`generate_with`] refuses before it touches the cache.
fn check_single(ctx: &Context, prompt: &[u32], params: &GenerateParams) -> Result<(), Error> {
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
    Ok(())
}

/// Decode `todo` into sequence 0 at `at.n_past..`, in `n_batch` chunks, each
/// after the self-extend loop or a context shift; logits for the last token
/// only. Returns that token's index in the last batch.
fn prefill(
    ctx: &mut Context,
    todo: &[u32],
    at: &mut Positions,
    params: &GenerateParams,
    hooks: &mut Hooks,
) -> Result<usize, Error> {
    let n_batch = ctx.params().n_batch as usize;
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
    Ok((todo.len() - 1) % n_batch)
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
    check_parallel(ctx, prompts, params)?;
    let n_seq = prompts.len();
    let n_ctx = ctx.n_ctx_stream() as usize;
    let greedy = plain_greedy(&params.sampling);
    let mut chains = Vec::with_capacity(n_seq);
    for p in prompts {
        let mut c = params.sampling.build_chain(model.n_vocab(), n_ctx)?;
        for &t in p {
            c.accept(t);
        }
        chains.push(c);
    }
    let mut seqs: Vec<SeqSampler> = chains
        .iter_mut()
        .map(|c| SeqSampler::new(c, tok, greedy))
        .collect();

    let t0 = Instant::now();
    let mut next = prefill_parallel(ctx, prompts, &mut seqs)?;
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut stop: Vec<Option<StopReason>> = vec![None; n_seq];
    let mut n_past: Vec<i32> = prompts.iter().map(|p| p.len() as i32).collect();
    loop {
        // Emit each live sequence's pending token; decide whether it goes on.
        let mut in_batch = Vec::new();
        for s in 0..n_seq {
            if stop[s].is_some() {
                continue;
            }
            if seqs[s].reached(params.n_predict) {
                stop[s] = Some(StopReason::NPredict);
                continue;
            }
            let mut cb = |ev: &TokenEvent| on_token(s, ev);
            stop[s] = seqs[s].emit(next[s], None, params.stop_at_eog, params.n_predict, &mut cb)?;
            if stop[s].is_none() && n_past[s] as usize >= n_ctx {
                stop[s] = Some(StopReason::ContextFull);
            }
            if stop[s].is_none() {
                in_batch.push(s);
            }
        }
        // A unified cache shared by all: the sequences that find no cell stop.
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
        let mut b = Batch::new();
        for &s in &in_batch {
            b.add(next[s], n_past[s], &[s as i32], true);
            n_past[s] += 1;
        }
        ctx.decode(&b)?;
        for (k, &s) in in_batch.iter().enumerate() {
            next[s] = seqs[s].pick(ctx, k)?.0;
        }
    }
    let gen_secs = t1.elapsed().as_secs_f64();
    let mut stats = Vec::with_capacity(n_seq);
    for (s, seq) in seqs.iter_mut().enumerate() {
        seq.finish(&mut |ev| on_token(s, ev));
        stats.push(GenerateStats {
            n_prompt: prompts[s].len(),
            n_gen: seq.tokens.len(),
            prompt_secs,
            gen_secs,
            stop: stop[s].unwrap_or(StopReason::NPredict),
            tokens: std::mem::take(&mut seq.tokens),
        });
    }
    Ok(stats)
}

/// What [`generate_parallel`] refuses before it touches the cache.
fn check_parallel(
    ctx: &Context,
    prompts: &[Vec<u32>],
    params: &GenerateParams,
) -> Result<(), Error> {
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
            return Err(Error::PromptTooLong {
                n_prompt: p.len(),
                n_ctx,
            });
        }
    }
    params.sampling.validate()?;
    Ok(())
}

/// Every prompt token in order (sequence 0's, then 1's, …), packed into
/// `n_batch` chunks; each sequence's first token is sampled right after the
/// chunk holding its last prompt token. Returns those first tokens.
fn prefill_parallel(
    ctx: &mut Context,
    prompts: &[Vec<u32>],
    seqs: &mut [SeqSampler],
) -> Result<Vec<u32>, Error> {
    let n_batch = ctx.params().n_batch as usize;
    let all: Vec<(usize, i32, u32)> = prompts
        .iter()
        .enumerate()
        .flat_map(|(s, p)| p.iter().enumerate().map(move |(i, &t)| (s, i as i32, t)))
        .collect();
    let mut next = vec![0u32; prompts.len()];
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
            next[s] = seqs[s].pick(ctx, k)?.0;
        }
    }
    Ok(next)
}
