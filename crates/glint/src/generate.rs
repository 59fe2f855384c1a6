//! High-level generation on a caller's context: prompt in `n_batch` chunks,
//! then one token at a time through the sampler chain, text streamed as it
//! completes. These run the [`engine`](crate::engine)'s loop (one loop for
//! the CLI, the library and the server), synchronously, in the caller's
//! context.

use std::cell::RefCell;
use std::time::Instant;

use glint_sample::SamplerParams;

use crate::engine::{run_local, Event, EventSink, Request, TokenLogprob, Usage};
use crate::{Context, Error};

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
    /// `Some(n)`: each token's log-probability and its `n` best
    /// alternatives, from the logits before sampling ([`TokenEvent::logprob`]).
    pub logprobs: Option<usize>,
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
            logprobs: None,
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
    /// A cache shared with other sequences had no free cell for it (the
    /// others hold them); the sequence ends, never another.
    CacheFull,
    /// The callback asked to stop (or, on a server, the client went away).
    Callback,
    /// A stop string was generated.
    StopString,
}

impl std::fmt::Display for StopReason {
    /// In words, for stats lines: `end of generation`, `n_predict reached`,
    /// `context full`, `stopped by the caller`, `stop string`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::EndOfGeneration => "end of generation",
            StopReason::NPredict => "n_predict reached",
            StopReason::ContextFull => "context full",
            StopReason::CacheFull => "no free cell in the shared cache",
            StopReason::Callback => "stopped by the caller",
            StopReason::StopString => "stop string",
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
    /// Its log-probability and best alternatives, when asked for
    /// ([`GenerateParams::logprobs`]).
    pub logprob: Option<&'a TokenLogprob>,
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

impl GenerateParams {
    /// The engine request for `prompt`.
    fn request(&self, prompt: &[u32]) -> Request {
        let mut req = Request::new(prompt.to_vec());
        req.sampling = self.sampling.clone();
        req.max_tokens = usize::try_from(self.n_predict).ok();
        req.ignore_eos = !self.stop_at_eog;
        req.logprobs = self.logprobs;
        req.context_shift = self.ctx_shift;
        req.n_keep = self.n_keep.max(0) as usize;
        req.ga_n = self.ga_n;
        req.ga_w = self.ga_w;
        req
    }
}

/// What one request of a local run saw.
#[derive(Default)]
pub(crate) struct Outcome {
    /// Generated token ids.
    pub(crate) tokens: Vec<u32>,
    /// Generated text (stop strings and what follows left out).
    pub(crate) text: String,
    /// Why it ended (`None`: it did not end, an error stopped the run).
    pub(crate) stop: Option<StopReason>,
    /// Its counts, once done.
    pub(crate) usage: Usage,
    /// When the prompt was in the cache, and when it ended.
    pub(crate) prompt_end: Option<Instant>,
    pub(crate) end: Option<Instant>,
}

/// The callbacks and results every request of a local run shares.
pub(crate) struct Shared<'c> {
    /// Request index and token.
    pub(crate) on_token: &'c mut dyn FnMut(usize, &TokenEvent) -> bool,
    pub(crate) on_kv: Option<&'c mut dyn FnMut(&KvEvent)>,
    pub(crate) after_prompt: Option<AfterPrompt<'c>>,
    pub(crate) out: Vec<Outcome>,
}

impl<'c> Shared<'c> {
    pub(crate) fn new(n: usize, on_token: &'c mut dyn FnMut(usize, &TokenEvent) -> bool) -> Self {
        Shared {
            on_token,
            on_kv: None,
            after_prompt: None,
            out: (0..n).map(|_| Outcome::default()).collect(),
        }
    }
}

/// Request `job`'s events, turned into [`TokenEvent`]s and an [`Outcome`].
pub(crate) struct LocalSink<'s, 'c> {
    pub(crate) job: usize,
    pub(crate) shared: &'s RefCell<Shared<'c>>,
}

impl EventSink for LocalSink<'_, '_> {
    fn send(&mut self, ev: Event) -> bool {
        let mut sh = self.shared.borrow_mut();
        let sh = &mut *sh;
        let o = &mut sh.out[self.job];
        match ev {
            Event::Delta {
                token,
                text,
                logprob,
                ..
            } => {
                o.tokens.extend(token);
                o.text.push_str(&text);
                let ev = TokenEvent {
                    id: token,
                    text: &text,
                    logprob: logprob.as_ref(),
                };
                let go_on = (sh.on_token)(self.job, &ev);
                if !go_on {
                    o.stop = Some(StopReason::Callback);
                    o.end = Some(Instant::now());
                }
                go_on
            }
            Event::Done { stop, usage, .. } => {
                o.stop = Some(stop);
                o.usage = usage;
                o.end = Some(Instant::now());
                true
            }
            // The run returns the error itself.
            Event::Failed(_) => true,
            Event::Progress { .. } => true,
        }
    }

    fn is_closed(&self) -> bool {
        false
    }

    fn on_kv(&mut self, ev: &KvEvent) {
        if let Some(f) = self.shared.borrow_mut().on_kv.as_mut() {
            f(ev);
        }
    }

    fn prompt_done(&mut self, ctx: &mut Context, _seq: i32) -> Result<(), Error> {
        let mut sh = self.shared.borrow_mut();
        sh.out[self.job].prompt_end = Some(Instant::now());
        match sh.after_prompt.as_mut() {
            Some(f) => f(ctx),
            None => Ok(()),
        }
    }
}

impl Outcome {
    /// Stats of a request of `n_prompt` new prompt tokens started at `t0`.
    pub(crate) fn stats(self, n_prompt: usize, t0: Instant) -> GenerateStats {
        let end = self.end.unwrap_or_else(Instant::now);
        let prompt_end = self.prompt_end.unwrap_or(end);
        GenerateStats {
            n_prompt,
            n_gen: self.tokens.len(),
            prompt_secs: (prompt_end - t0).as_secs_f64(),
            gen_secs: (end - prompt_end).as_secs_f64(),
            stop: self.stop.unwrap_or(StopReason::ContextFull),
            tokens: self.tokens,
        }
    }
}

/// Decode `prompt` into sequence 0 of an empty `ctx` and generate after it,
/// calling `on_token` for each token (return `false` to stop).
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<GenerateStats, Error> {
    generate_with(ctx, prompt, params, &mut Hooks::default(), on_token)
}

/// [`generate`] with hooks, self-extend, context shift and a restored
/// prompt prefix (see [`GenerateParams`]). Before each decode (prompt chunks
/// and generated tokens alike) the self-extend loop runs, or a context shift
/// when the cache is full; tokens go at positions `n_past..`.
pub fn generate_with(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    hooks: &mut Hooks,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<GenerateStats, Error> {
    check_single(ctx, prompt, params)?;
    let model = ctx.model().clone();
    let t0 = Instant::now();
    let mut cb = |_: usize, ev: &TokenEvent| on_token(ev);
    let mut shared = Shared::new(1, &mut cb);
    shared.on_kv = hooks
        .on_kv
        .as_deref_mut()
        .map(|f| f as &mut dyn FnMut(&KvEvent));
    shared.after_prompt = hooks
        .after_prompt
        .as_deref_mut()
        .map(|f| f as &mut dyn FnMut(&mut Context) -> Result<(), Error>);
    let shared = RefCell::new(shared);
    let sink = LocalSink {
        job: 0,
        shared: &shared,
    };
    let seqs = vec![(0, prompt[..params.n_cached].to_vec())];
    let jobs: Vec<(Request, Box<dyn EventSink + '_>)> =
        vec![(params.request(prompt), Box::new(sink))];
    run_local(ctx, model.tokenizer(), seqs, jobs)?;
    let out = shared.borrow_mut().out.pop().unwrap_or_default();
    Ok(out.stats(prompt.len() - params.n_cached, t0))
}

/// What [`generate_with`] refuses before it touches the cache.
fn check_single(ctx: &Context, prompt: &[u32], params: &GenerateParams) -> Result<(), Error> {
    let n_ctx = ctx.n_ctx_stream() as usize;
    params
        .request(prompt)
        .check(ctx.model().n_vocab(), n_ctx, 1)?;
    if params.n_cached >= prompt.len() || (params.n_cached > 0 && params.ga_n > 1) {
        return Err(Error::Invalid(format!(
            "{} cached prompt tokens of {} (at most all but the last, and none with self-extend)",
            params.n_cached,
            prompt.len()
        )));
    }
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
    check_parallel(ctx, prompts, params)?;
    let model = ctx.model().clone();
    let t0 = Instant::now();
    let shared = RefCell::new(Shared::new(prompts.len(), on_token));
    let seqs = (0..prompts.len() as i32).map(|s| (s, Vec::new())).collect();
    let jobs: Vec<(Request, Box<dyn EventSink + '_>)> = prompts
        .iter()
        .enumerate()
        .map(|(job, p)| {
            let sink = LocalSink {
                job,
                shared: &shared,
            };
            (params.request(p), Box::new(sink) as Box<dyn EventSink>)
        })
        .collect();
    run_local(ctx, model.tokenizer(), seqs, jobs)?;
    let outs = std::mem::take(&mut shared.borrow_mut().out);
    Ok(outs
        .into_iter()
        .zip(prompts)
        .map(|(o, p)| o.stats(p.len(), t0))
        .collect())
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
        params.request(p).check(ctx.model().n_vocab(), n_ctx, 1)?;
    }
    Ok(())
}
