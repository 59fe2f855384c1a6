//! The engine: one [`Context`] on its own thread serving many requests at
//! once with continuous batching.
//!
//! A *slot* is one sequence id of the context; a request runs in one slot.
//! Every step the engine decodes one batch holding one token for every slot
//! that is generating, plus pending prompt tokens of the slots that are
//! still prefilling, up to `n_batch` in all (chunked prefill: a long prompt
//! is fed a chunk per step, so the generating slots still get their token
//! every step). A request that arrives joins at the next step.
//!
//! ```text
//! submit ──► queue (bounded) ──► idle slot (longest common token prefix)
//!                                   │ seq_rm past the prefix
//!                                   ▼
//!        step: [gen tokens of every generating slot | prompt chunks] ─► decode
//!                                   │ sample, stop strings, logprobs
//!                                   ▼
//!                         EventSink::send(Event::Delta / Event::Done)
//! ```
//!
//! Prefix reuse: a finished slot keeps its cells. A new request takes the
//! idle slot whose cached *tokens* share the longest prefix with its prompt
//! (compared token by token, never by a hash alone), keeps that prefix and
//! prefills only the rest ([`Usage::cached_tokens`]). Idle slots' cells are
//! given up when a working slot needs cells.
//!
//! A closed sink ([`EventSink::is_closed`], or `send` returning false) cancels
//! its request: the slot is freed (`seq_rm`) at the next step, during
//! prefill too. When the shared cache has no cell for a slot's next token,
//! that slot finishes with [`FinishReason::Length`], never another one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use glint_sample::{Chain, Sampler, SamplerParams, MAX_TOP_LOGPROBS};
use glint_tokenizer::{StreamDecoder, Tokenizer};

use crate::chat::common_prefix;
use crate::generate::plain_greedy;
use crate::{Batch, Context, ContextParams, Error, Model};

/// How to run an [`Engine`] (the context is sized by [`ContextParams`]:
/// its `n_seq_max` is the number of slots).
#[derive(Clone, Debug)]
pub struct EngineParams {
    /// Most requests waiting for a slot; one more is refused with
    /// [`Error::Overloaded`].
    pub max_queue: usize,
    /// Most prompt tokens one step carries (0 = up to `n_batch`): a long
    /// prompt then takes several steps, and the slots that are generating
    /// wait at most one such chunk for their next token.
    pub prefill_per_step: usize,
}

impl Default for EngineParams {
    fn default() -> Self {
        EngineParams {
            max_queue: 64,
            prefill_per_step: 512,
        }
    }
}

/// One request: a tokenized prompt and how to continue it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids (not empty, shorter than a slot's context).
    pub prompt: Vec<u32>,
    /// The sampler chain's parameters.
    pub sampling: SamplerParams,
    /// Most tokens to generate; `None` = until end of generation or a full
    /// context.
    pub max_tokens: Option<usize>,
    /// Strings that end the generation; the text from the first match on is
    /// not emitted. Matched on the text, across token boundaries.
    pub stop: Vec<String>,
    /// Go on past end-of-generation tokens.
    pub ignore_eos: bool,
    /// `Some(n)`: report each token's log-probability and the `n` (at most
    /// [`MAX_TOP_LOGPROBS`]) most likely alternatives, from the logits
    /// before sampling.
    pub logprobs: Option<usize>,
}

impl Request {
    /// A request for `prompt` with default sampling and no limits.
    pub fn new(prompt: Vec<u32>) -> Request {
        Request {
            prompt,
            sampling: SamplerParams::default(),
            max_tokens: None,
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
        }
    }
}

/// A token's log-probability and its best alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The sampled token.
    pub token: u32,
    /// Its text (lossy: a piece may be part of a character).
    pub text: String,
    /// Its natural-log probability.
    pub logprob: f32,
    /// The most likely tokens: id, text, log-probability; best first.
    pub top: Vec<(u32, String, f32)>,
}

/// Why a request finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, or no room left in the context.
    Length,
}

impl FinishReason {
    /// OpenAI's name: `stop` or `length`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// Token counts of a finished request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens found in the slot's cache (not decoded again).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
}

/// What the engine tells a request, in order: deltas, then one `Done` or
/// one `Failed`.
#[derive(Clone, Debug)]
pub enum Event {
    /// One generated token: the text it completed (may be empty: half a
    /// character, or text held back as the possible start of a stop
    /// string) and its log-probabilities when asked for.
    Delta {
        /// Text to append.
        text: String,
        /// The token's log-probabilities.
        logprob: Option<TokenLogprob>,
    },
    /// The request is complete.
    Done {
        /// Why it finished.
        reason: FinishReason,
        /// Token counts.
        usage: Usage,
    },
    /// The engine failed while running the request.
    Failed(String),
}

/// Where a request's events go.
pub trait EventSink: Send {
    /// Deliver an event; false = nobody listens any more (cancel).
    fn send(&mut self, ev: Event) -> bool;
    /// True once nobody listens (checked every step, also during prefill).
    fn is_closed(&self) -> bool;
}

/// The receiving end of [`Engine::submit_channel`]: dropping it cancels the
/// request.
pub struct Events {
    rx: mpsc::Receiver<Event>,
    closed: Arc<AtomicBool>,
}

impl Events {
    /// The next event; `None` once the engine is gone.
    pub fn recv(&self) -> Option<Event> {
        self.rx.recv().ok()
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

struct ChannelSink {
    tx: mpsc::Sender<Event>,
    closed: Arc<AtomicBool>,
}

impl EventSink for ChannelSink {
    fn send(&mut self, ev: Event) -> bool {
        self.tx.send(ev).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

enum Msg {
    Job(Box<Job>),
    Shutdown,
}

struct Job {
    req: Request,
    sink: Box<dyn EventSink>,
}

/// A [`Model`] and one [`Context`] on a thread of their own, serving
/// requests with continuous batching (see the module docs).
pub struct Engine {
    model: Model,
    tx: mpsc::Sender<Msg>,
    waiting: Arc<AtomicUsize>,
    busy: Arc<AtomicUsize>,
    max_queue: usize,
    n_slots: usize,
    n_ctx_slot: usize,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Make the context (`ctx_params.n_seq_max` slots) and start the
    /// engine thread.
    pub fn start(
        model: &Model,
        ctx_params: ContextParams,
        params: EngineParams,
    ) -> Result<Engine, Error> {
        let ctx = Context::new(model, ctx_params)?;
        let n_slots = ctx.params().n_seq_max as usize;
        let n_ctx_slot = ctx.n_ctx_stream() as usize;
        let (tx, rx) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(AtomicUsize::new(0));
        let (w, b) = (waiting.clone(), busy.clone());
        let n_batch = ctx.params().n_batch as usize;
        let prefill_cap = match params.prefill_per_step {
            0 => n_batch,
            n => n.min(n_batch),
        };
        let thread = std::thread::Builder::new()
            .name("glint-engine".into())
            .spawn(move || run(ctx, rx, w, b, prefill_cap))
            .map_err(|e| Error::Internal(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine {
            model: model.clone(),
            tx,
            waiting,
            busy,
            max_queue: params.max_queue,
            n_slots,
            n_ctx_slot,
            thread: Some(thread),
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Number of slots (requests decoded together).
    pub fn n_slots(&self) -> usize {
        self.n_slots
    }

    /// Cells one slot may use at most (the whole cache when it is shared).
    pub fn n_ctx_slot(&self) -> usize {
        self.n_ctx_slot
    }

    /// Requests waiting for a slot now.
    pub fn n_waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Slots running a request now (as of the last step).
    pub fn n_processing(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Check `req` and queue it; its events go to `sink`.
    pub fn submit(&self, req: Request, sink: Box<dyn EventSink>) -> Result<(), Error> {
        self.check(&req)?;
        // Count first, then check: two racing submits cannot both pass.
        let before = self.waiting.fetch_add(1, Ordering::SeqCst);
        if before >= self.max_queue {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Overloaded {
                capacity: self.max_queue,
            });
        }
        self.tx
            .send(Msg::Job(Box::new(Job { req, sink })))
            .map_err(|_| {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                Error::Stopped
            })
    }

    /// [`submit`](Self::submit) with a channel: read the events from the
    /// returned [`Events`]; drop it to cancel.
    pub fn submit_channel(&self, req: Request) -> Result<Events, Error> {
        let (tx, rx) = mpsc::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let sink = ChannelSink {
            tx,
            closed: closed.clone(),
        };
        self.submit(req, Box::new(sink))?;
        Ok(Events { rx, closed })
    }

    /// What the engine thread would refuse, refused here, before queueing.
    fn check(&self, req: &Request) -> Result<(), Error> {
        if req.prompt.is_empty() {
            return Err(Error::Invalid("the prompt has no tokens".into()));
        }
        if req.prompt.len() >= self.n_ctx_slot {
            return Err(Error::PromptTooLong {
                n_prompt: req.prompt.len(),
                n_ctx: self.n_ctx_slot,
            });
        }
        let n_vocab = self.model.n_vocab();
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::Invalid(format!(
                "token {t} is outside the vocabulary ({n_vocab} tokens)"
            )));
        }
        if let Some(n) = req.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(Error::Invalid(format!(
                "{n} top logprobs asked for, at most {MAX_TOP_LOGPROBS}"
            )));
        }
        if req.stop.iter().any(String::is_empty) {
            return Err(Error::Invalid("an empty stop string".into()));
        }
        req.sampling.validate()?;
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a slot's request is.
enum Phase {
    /// No request; its cells (if any) are a reusable prefix.
    Idle,
    /// Prompt tokens `cache.len()..prompt.len()` still to decode.
    Prefill,
    /// `next` was sampled and goes in the next batch.
    Generate { next: u32 },
}

/// A running request: its sampler, detokenizer and stop-string state.
struct Active<'t> {
    req: Request,
    sink: Box<dyn EventSink>,
    chain: Chain,
    dec: StreamDecoder<'t>,
    greedy: bool,
    /// Text decoded but not yet sent (a possible start of a stop string).
    held: String,
    n_gen: usize,
    n_cached: usize,
}

struct Slot<'t> {
    seq: i32,
    /// Token ids in this slot's cells, positions `0..cache.len()`.
    cache: Vec<u32>,
    phase: Phase,
    job: Option<Active<'t>>,
    /// Step of the last use, to give up the least recently used prefix.
    last_used: u64,
    /// Step at which the request was assigned (prefill order).
    started: u64,
}

/// The engine thread: wait for work, then step until every slot is idle.
fn run(
    mut ctx: Context,
    rx: mpsc::Receiver<Msg>,
    waiting: Arc<AtomicUsize>,
    busy: Arc<AtomicUsize>,
    prefill_cap: usize,
) {
    let model = ctx.model().clone();
    let tok = model.tokenizer();
    let n_slots = ctx.params().n_seq_max as usize;
    let mut slots: Vec<Slot> = (0..n_slots)
        .map(|s| Slot {
            seq: s as i32,
            cache: Vec::new(),
            phase: Phase::Idle,
            job: None,
            last_used: 0,
            started: 0,
        })
        .collect();
    let mut queue: VecDeque<Job> = VecDeque::new();
    let mut step: u64 = 0;
    loop {
        let working = slots.iter().any(|s| s.job.is_some()) || !queue.is_empty();
        // Block only when there is nothing to do.
        let first = if working {
            rx.try_recv().ok()
        } else {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            }
        };
        let mut next = first;
        while let Some(m) = next {
            match m {
                Msg::Job(j) => queue.push_back(*j),
                Msg::Shutdown => return,
            }
            next = rx.try_recv().ok();
        }
        step += 1;
        let mut e = Step {
            ctx: &mut ctx,
            tok,
            step,
            prefill_cap,
        };
        e.cancel_closed(&mut slots);
        e.assign(&mut slots, &mut queue, &waiting);
        e.decode_step(&mut slots);
        let n_busy = slots.iter().filter(|s| s.job.is_some()).count();
        busy.store(n_busy, Ordering::Relaxed);
    }
}

/// One step's view of the engine's state.
struct Step<'a, 't> {
    ctx: &'a mut Context,
    tok: &'t Tokenizer,
    step: u64,
    /// Most prompt tokens in one batch.
    prefill_cap: usize,
}

impl<'t> Step<'_, 't> {
    /// Free the slots whose listener went away.
    fn cancel_closed(&mut self, slots: &mut [Slot<'t>]) {
        for s in slots.iter_mut() {
            if s.job.as_ref().is_some_and(|j| j.sink.is_closed()) {
                self.free(s);
            }
        }
    }

    /// End a slot's request and drop its cells.
    fn free(&mut self, s: &mut Slot<'t>) {
        s.job = None;
        s.phase = Phase::Idle;
        self.forget(s);
    }

    /// Drop a slot's cells (its cached prefix).
    fn forget(&mut self, s: &mut Slot<'t>) {
        // seq_rm of a whole sequence cannot fail for a valid seq id.
        let _ = self.ctx.seq_rm(s.seq, -1, -1);
        s.cache.clear();
    }

    /// Give queued requests the idle slots, each the one whose cached tokens
    /// share the longest prefix with its prompt (least recently used first
    /// among equals).
    fn assign(&mut self, slots: &mut [Slot<'t>], queue: &mut VecDeque<Job>, waiting: &AtomicUsize) {
        while slots.iter().any(|s| s.job.is_none()) {
            let Some(job) = queue.pop_front() else { return };
            waiting.fetch_sub(1, Ordering::SeqCst);
            if job.sink.is_closed() {
                continue;
            }
            // An empty slot before a cached prefix nothing shares: keep
            // prefixes as long as there is a choice.
            let i = (0..slots.len())
                .filter(|&i| slots[i].job.is_none())
                .max_by_key(|&i| {
                    let s = &slots[i];
                    let common = common_prefix(&s.cache, &job.req.prompt);
                    (common, s.cache.is_empty(), std::cmp::Reverse(s.last_used))
                })
                .expect("an idle slot exists");
            self.start(&mut slots[i], job);
        }
    }

    /// Put `job` in slot `s`: keep the common prefix, drop the rest.
    fn start(&mut self, s: &mut Slot<'t>, job: Job) {
        let Job { req, mut sink } = job;
        // At least the last prompt token is decoded: its logits are needed.
        let keep = common_prefix(&s.cache, &req.prompt).min(req.prompt.len() - 1);
        if self.ctx.seq_rm(s.seq, keep as i32, -1).is_err() {
            // A sequence whose tail cannot be cut (never expected): start cold.
            self.forget(s);
        }
        s.cache.truncate(keep);
        let n_ctx = self.ctx.n_ctx_stream() as usize;
        let chain = match req.sampling.build_chain(self.tok.n_vocab(), n_ctx) {
            Ok(mut c) => {
                for &t in &req.prompt {
                    c.accept(t);
                }
                c
            }
            Err(e) => {
                sink.send(Event::Failed(e.to_string()));
                return;
            }
        };
        let greedy = plain_greedy(&req.sampling) && req.logprobs.is_none();
        s.job = Some(Active {
            n_cached: s.cache.len(),
            req,
            sink,
            chain,
            dec: self.tok.stream_decoder(true),
            greedy,
            held: String::new(),
            n_gen: 0,
        });
        s.phase = Phase::Prefill;
        s.started = self.step;
        s.last_used = self.step;
    }

    /// Cells free in the stream of `seq`, after giving up idle slots'
    /// prefixes in that stream when fewer than `want` are free.
    fn free_cells(&mut self, slots: &mut [Slot<'t>], seq: i32, want: u32) -> u32 {
        let Ok(stream) = self.ctx.cells().stream_of(seq) else {
            return 0;
        };
        let mut free = self.ctx.cells().free(stream);
        while free < want {
            let victim = slots
                .iter_mut()
                .filter(|s| {
                    s.job.is_none()
                        && !s.cache.is_empty()
                        && self.ctx.cells().stream_of(s.seq).ok() == Some(stream)
                })
                .min_by_key(|s| s.last_used);
            let Some(v) = victim else { break };
            self.forget(v);
            free = self.ctx.cells().free(stream);
        }
        free
    }

    /// Build one batch (a token per generating slot, then prompt chunks up to
    /// `n_batch`), decode it, and sample where logits came out.
    fn decode_step(&mut self, slots: &mut [Slot<'t>]) {
        let n_batch = self.ctx.params().n_batch as usize;
        let n_ctx = self.ctx.n_ctx_stream() as usize;
        let mut batch = Batch::new();
        // (slot index, batch index of its logits) for each slot to sample.
        let mut outs: Vec<(usize, usize)> = Vec::new();
        // Slots with tokens in the batch.
        let mut fed: Vec<usize> = Vec::new();
        // Cells this batch takes from each stream so far.
        let mut taken: std::collections::HashMap<u32, u32> = Default::default();
        let mut take = |e: &mut Self, slots: &mut [Slot<'t>], i: usize, n: u32| -> u32 {
            let seq = slots[i].seq;
            let stream = e.ctx.cells().stream_of(seq).unwrap_or(0);
            let used = *taken.get(&stream).unwrap_or(&0);
            let free = e.free_cells(slots, seq, used + n).saturating_sub(used);
            let got = free.min(n);
            *taken.entry(stream).or_default() += got;
            got
        };

        for i in 0..slots.len() {
            let Phase::Generate { next } = slots[i].phase else {
                continue;
            };
            let pos = slots[i].cache.len();
            if pos + 1 > n_ctx || take(self, slots, i, 1) == 0 {
                self.finish(&mut slots[i], FinishReason::Length);
                continue;
            }
            outs.push((i, batch.len()));
            fed.push(i);
            batch.add(next, pos as i32, &[slots[i].seq], true);
            slots[i].cache.push(next);
            slots[i].last_used = self.step;
        }

        // Prompt chunks, oldest request first.
        let n_gen = batch.len();
        let mut prefilling: Vec<usize> = (0..slots.len())
            .filter(|&i| matches!(slots[i].phase, Phase::Prefill))
            .collect();
        prefilling.sort_by_key(|&i| slots[i].started);
        for &i in &prefilling {
            let room = n_batch
                .min(n_gen + self.prefill_cap)
                .saturating_sub(batch.len());
            if room == 0 {
                break;
            }
            let Some(job) = slots[i].job.as_ref() else {
                continue;
            };
            let done = slots[i].cache.len();
            let todo = (job.req.prompt.len() - done).min(room);
            let got = take(self, slots, i, todo as u32) as usize;
            if got == 0 {
                continue;
            }
            fed.push(i);
            let job = slots[i].job.as_ref().expect("a prefilling slot has a job");
            for k in 0..got {
                let last = done + k + 1 == job.req.prompt.len();
                let t = job.req.prompt[done + k];
                if last {
                    outs.push((i, batch.len()));
                }
                batch.add(t, (done + k) as i32, &[slots[i].seq], last);
            }
            let new: Vec<u32> = job.req.prompt[done..done + got].to_vec();
            slots[i].cache.extend_from_slice(&new);
            slots[i].last_used = self.step;
        }

        if batch.is_empty() {
            // Prompts that cannot get a cell, with nothing generating to free
            // one: the newest gives up, so the others can go on.
            if let Some(&i) = prefilling.iter().max_by_key(|&&i| slots[i].started) {
                self.finish(&mut slots[i], FinishReason::Length);
                self.forget(&mut slots[i]);
            }
            return;
        }

        if let Err(e) = self.ctx.decode(&batch) {
            // The cells of a failed decode are rolled back; every request in
            // the batch fails (its cache no longer matches).
            let msg = e.to_string();
            for i in fed {
                if let Some(j) = slots[i].job.as_mut() {
                    j.sink.send(Event::Failed(msg.clone()));
                }
                self.free(&mut slots[i]);
            }
            return;
        }

        for (i, idx) in outs {
            self.sample(&mut slots[i], idx);
        }
    }

    /// Sample slot `s`'s next token from batch row `idx` and act on it.
    fn sample(&mut self, s: &mut Slot<'t>, idx: usize) {
        let Some(job) = s.job.as_mut() else { return };
        let picked = pick(self.ctx, job, idx);
        let (id, logprob) = match picked {
            Ok(p) => p,
            Err(e) => {
                job.sink.send(Event::Failed(e.to_string()));
                self.free(s);
                return;
            }
        };
        job.n_gen += 1;
        let logprob = logprob.map(|(lp, top)| TokenLogprob {
            token: id,
            text: piece(self.tok, id),
            logprob: lp,
            top: top
                .into_iter()
                .map(|(t, l)| (t, piece(self.tok, t), l))
                .collect(),
        });
        let eog = self.tok.is_eog(id) && !job.req.ignore_eos;
        let text = if eog {
            String::new()
        } else {
            job.dec.push(id).unwrap_or_default()
        };
        job.held.push_str(&text);
        let (out, stopped) = split_stop(&mut job.held, &job.req.stop);
        if !job.sink.send(Event::Delta { text: out, logprob }) {
            self.free(s);
            return;
        }
        if stopped {
            // What follows a stop string is dropped, bytes held back too.
            job.dec.flush();
            self.finish(s, FinishReason::Stop);
        } else if eog {
            self.finish(s, FinishReason::Stop);
        } else if job.req.max_tokens.is_some_and(|m| job.n_gen >= m) {
            self.finish(s, FinishReason::Length);
        } else {
            s.phase = Phase::Generate { next: id };
        }
    }

    /// Send the held text and `Done`; the slot becomes idle and keeps its
    /// cells as a reusable prefix.
    fn finish(&mut self, s: &mut Slot<'t>, reason: FinishReason) {
        if let Some(mut job) = s.job.take() {
            let mut rest = std::mem::take(&mut job.held);
            rest.push_str(&job.dec.flush());
            if !rest.is_empty() {
                job.sink.send(Event::Delta {
                    text: rest,
                    logprob: None,
                });
            }
            job.sink.send(Event::Done {
                reason,
                usage: Usage {
                    prompt_tokens: job.req.prompt.len(),
                    cached_tokens: job.n_cached,
                    completion_tokens: job.n_gen,
                },
            });
        }
        s.phase = Phase::Idle;
    }
}

type Logprob = (f32, Vec<(u32, f32)>);

/// The next token from batch row `idx`, with its logprobs when asked for.
fn pick(ctx: &mut Context, job: &mut Active, idx: usize) -> Result<(u32, Option<Logprob>), Error> {
    if job.greedy {
        // Nothing in the chain changes the largest logit: 4 bytes back.
        let id = ctx.argmax(idx)?;
        job.chain.accept(id);
        return Ok((id, None));
    }
    let logits = ctx.logits(idx)?.to_vec();
    let id = job.chain.sample(&logits)?;
    let lp = match job.req.logprobs {
        Some(n) => {
            let l = glint_sample::logprobs(&logits, id, n)?;
            Some((l.logprob, l.top))
        }
        None => None,
    };
    Ok((id, lp))
}

/// A token's text as logprobs show it (special tokens included).
fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, true)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Split the text that may be sent off `held`: everything before the first
/// stop string (then `true`: stop here), else everything but the longest
/// tail that could be the start of a stop string.
fn split_stop(held: &mut String, stop: &[String]) -> (String, bool) {
    let first = stop.iter().filter_map(|s| held.find(s.as_str())).min();
    if let Some(at) = first {
        let out = held[..at].to_string();
        held.clear();
        return (out, true);
    }
    let hold = stop
        .iter()
        .map(|s| partial_suffix(held, s))
        .max()
        .unwrap_or(0);
    // `hold` bytes equal a stop string's first bytes, which start at a
    // character boundary, so `held.len() - hold` is one as well.
    let rest = held.split_off(held.len() - hold);
    (std::mem::replace(held, rest), false)
}

/// Length of the longest tail of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    let (t, s) = (text.as_bytes(), stop.as_bytes());
    (1..s.len().min(t.len() + 1))
        .rev()
        .find(|&k| t[t.len() - k..] == s[..k])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_stop(pieces: &[&str], stop: &[&str]) -> (String, bool) {
        let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
        let mut held = String::new();
        let mut out = String::new();
        for p in pieces {
            held.push_str(p);
            let (o, stopped) = split_stop(&mut held, &stop);
            out.push_str(&o);
            if stopped {
                return (out, true);
            }
        }
        out.push_str(&held);
        (out, false)
    }

    #[test]
    fn stop_strings_match_across_pieces_and_are_not_emitted() {
        assert_eq!(
            run_stop(&["Hel", "lo, W", "orld"], &["o, Wo"]),
            ("Hell".into(), true)
        );
        assert_eq!(run_stop(&["ab", "c"], &["x"]), ("abc".into(), false));
        // The earliest match wins, whichever stop string it is.
        assert_eq!(
            run_stop(&["one two three"], &["three", "two"]),
            ("one ".into(), true)
        );
    }

    #[test]
    fn a_possible_stop_start_is_held_back_then_released() {
        let stop = vec!["END".to_string()];
        let mut held = "the E".to_string();
        assert_eq!(split_stop(&mut held, &stop), ("the ".into(), false));
        assert_eq!(held, "E");
        held.push('X');
        assert_eq!(split_stop(&mut held, &stop), ("EX".into(), false));
        assert_eq!(held, "");
    }

    #[test]
    fn partial_suffix_respects_character_boundaries() {
        assert_eq!(partial_suffix("aé", "éclair"), "é".len());
        assert_eq!(partial_suffix("abc", "abc"), 0);
        assert_eq!(partial_suffix("xab", "abc"), 2);
        assert_eq!(partial_suffix("", "abc"), 0);
    }
}
