//! The engine: one generation loop for everything. [`Engine`] runs it on a
//! thread of its own over one [`Context`] for many requests at once
//! (continuous batching); [`generate`](crate::generate) and
//! [`chat`](crate::chat) run the same loop on the caller's context.
//!
//! A *slot* is one sequence id of the context; a request runs in one slot
//! (`n` choices in `n` slots). Every step the loop decodes one batch holding
//! one token for every slot that is generating, plus pending prompt tokens
//! of the slots that are still prefilling, up to `n_batch` in all (chunked
//! prefill: a long prompt is fed at most [`EngineParams::prefill_per_step`]
//! tokens per step, so the generating slots still get their token every
//! step). A request that arrives joins at the next step.
//!
//! ```text
//! submit ──► queue (bounded) ──► idle slot (longest common token prefix,
//!                                   │        or another slot's prefix by seq_cp)
//!                                   │ seq_rm past the prefix
//!                                   ▼
//!        step: [gen tokens of every generating slot | prompt chunks] ─► decode
//!                                   │ (context shift / self-extend first, on a
//!                                   │  private copy of shared cells)
//!                                   ▼
//!                sample, stop strings, logprobs ─► EventSink: Delta / Done
//! ```
//!
//! **Prefix reuse.** A finished slot keeps its cells. A new request takes
//! the idle slot whose cached *tokens* share the longest prefix with its
//! prompt (compared token by token, never by a hash alone), keeps that
//! prefix and prefills only the rest ([`Usage::cached_tokens`]). When
//! another slot (busy or idle) holds a longer prefix, e.g. the same system
//! prompt, that prefix is shared into the new slot with `seq_cp` (in one
//! KV stream the cells themselves are shared, nothing is copied). Idle
//! slots' cells are given up, least recently used first, when a working
//! slot needs cells: the cache itself is the LRU's memory budget.
//!
//! **Shared cells and position edits.** A cell shared by several sequences
//! moves for all of them when its position is edited, so a slot about to
//! shift (context shift, shift-mode self-extend) first gets its own copy of
//! the shared range ([`Context::seq_unshare`]): copy-on-write.
//!
//! **Cancel.** A closed sink ([`EventSink::is_closed`], or `send` returning
//! false) ends its request at the next step, during prefill too; the cells
//! decoded so far stay as a reusable prefix. When the shared cache has no
//! cell for a slot's next token, that slot shifts (if its request allows)
//! or finishes with [`FinishReason::Length`], never another one.

mod local;
mod ram;
mod sched;
mod stop;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use glint_sample::{SamplerParams, MAX_TOP_LOGPROBS};

pub use crate::generate::{KvEvent, StopReason};
use crate::{Context, ContextParams, Error, Model};
pub(crate) use local::run_local;
use sched::{Board, Job, Scheduler};

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
    /// Bytes of host memory that keep the prefixes idle slots give up when
    /// their cells are needed (0 = none): a later request starting with
    /// one loads it instead of prefilling it.
    pub cache_ram: usize,
    /// Models with recurrent layers (LFM2): checkpoints of each slot's state
    /// kept at prompt positions (llama-server's `--ctx-checkpoints`), so a
    /// new prompt sharing a prefix restores one and prefills only the rest
    /// (0 = none: such a prompt starts over).
    pub ctx_checkpoints: usize,
    /// Fewest tokens between two checkpoints of a slot (llama-server's
    /// `--checkpoint-min-step`).
    pub checkpoint_min_step: usize,
    /// Most bytes of checkpoints a slot keeps (the oldest go first; a
    /// Gemma 3 ring checkpoint is its window's K/V, ~16 MiB for the 270M).
    pub checkpoint_bytes: usize,
    /// Greedy steps chained on the device ([`DecodeStats::n_chained`]):
    /// while every busy slot is greedy and nothing waits, each step's
    /// tokens are the last step's choices on the device, and the step is
    /// submitted before they are read back. `GLINT_CHAIN=0` turns it off
    /// whatever this says (for comparisons).
    pub chain: bool,
}

impl Default for EngineParams {
    fn default() -> Self {
        EngineParams {
            max_queue: 64,
            prefill_per_step: 512,
            cache_ram: 1 << 30,
            ctx_checkpoints: 8,
            checkpoint_min_step: 64,
            checkpoint_bytes: 128 << 20,
            chain: true,
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
    /// Only tokens that keep the output a valid prefix of this grammar
    /// (GBNF, or a JSON schema made into one: [`glint_grammar`]); the
    /// end-of-generation token only once the output is a whole sentence.
    pub grammar: Option<Arc<glint_grammar::Grammar>>,
    /// With `grammar`: it applies only once this text appears in the output
    /// (llama.cpp's lazy grammar, for tool calls the model may or may not
    /// make); sampling is free until then, and the grammar must match the
    /// output from the trigger's first byte on. A trigger the grammar does
    /// not take leaves the output free.
    pub grammar_trigger: Option<String>,
    /// With `logprobs`: report them over the distribution the sampler chain
    /// drew from (after penalties, truncation and temperature) instead of
    /// the raw logits (llama-server's `post_sampling_probs`).
    pub post_sampling_probs: bool,
    /// Choices (OpenAI's `n`, at least 1, at most the number of slots): the
    /// prompt is decoded once and its cells copied (`seq_cp`) into `n - 1`
    /// more slots; choice `i` samples with seed `seed + i` (a random seed
    /// stays random).
    pub n: usize,
    /// When the slot's context is full, drop half of what follows the first
    /// `n_keep` tokens and go on (llama.cpp's context shift) instead of
    /// finishing with [`FinishReason::Length`].
    pub context_shift: bool,
    /// Tokens a context shift keeps from the start of the prompt.
    pub n_keep: usize,
    /// Self-extend group factor (1 = off; llama.cpp's `--grp-attn-n`): cache
    /// positions are compressed with `seq_add`/`seq_div` as the sequence
    /// grows. Such a slot's prefix is never reused.
    pub ga_n: i32,
    /// Self-extend window (`--grp-attn-w`, a multiple of `ga_n`).
    pub ga_w: i32,
    /// Run in this slot (llama-server's `id_slot`; with `n` > 1 it holds
    /// the first choice): the request waits in the queue until that slot
    /// is idle. `None`: whichever slot suits best.
    pub slot: Option<usize>,
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
            post_sampling_probs: false,
            grammar: None,
            grammar_trigger: None,
            n: 1,
            context_shift: false,
            n_keep: 0,
            ga_n: 1,
            ga_w: 512,
            slot: None,
        }
    }

    /// What the loop refuses before it touches a cache: `n_vocab` tokens,
    /// `n_ctx` cells per slot, `n_slots` slots.
    pub(crate) fn check(&self, n_vocab: usize, n_ctx: usize, n_slots: usize) -> Result<(), Error> {
        if self.prompt.is_empty() {
            return Err(Error::Invalid("the prompt has no tokens".into()));
        }
        if self.prompt.len() >= n_ctx {
            return Err(Error::PromptTooLong {
                n_prompt: self.prompt.len(),
                n_ctx,
            });
        }
        if let Some(&t) = self.prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::Invalid(format!(
                "token {t} is outside the vocabulary ({n_vocab} tokens)"
            )));
        }
        if let Some(n) = self.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(Error::Invalid(format!(
                "{n} top logprobs asked for, at most {MAX_TOP_LOGPROBS}"
            )));
        }
        // A bias on a token past the vocabulary would fail only once a slot
        // builds the chain, after the request was accepted.
        if let Some(b) = self
            .sampling
            .logit_bias
            .iter()
            .find(|b| b.token as usize >= n_vocab)
        {
            return Err(Error::Invalid(format!(
                "`logit_bias`: token {} is outside the vocabulary ({n_vocab} tokens)",
                b.token
            )));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(Error::Invalid("an empty stop string".into()));
        }
        if let Some(s) = self.slot.filter(|&s| s >= n_slots) {
            return Err(Error::Invalid(format!(
                "slot {s} asked for; there are {n_slots} (0 to {})",
                n_slots - 1
            )));
        }
        if self.n == 0 || self.n > n_slots {
            return Err(Error::Invalid(format!(
                "{} choices asked for, from 1 to the {n_slots} slots",
                self.n
            )));
        }
        crate::generate::validate_self_extend(self.ga_n, self.ga_w)?;
        if self.ga_n > 1 && self.context_shift {
            return Err(Error::Invalid(
                "self-extend (--grp-attn-n > 1) and context shift cannot be combined".into(),
            ));
        }
        self.sampling.validate()?;
        Ok(())
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

/// Why a request finished, in OpenAI's two words.
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

impl From<StopReason> for FinishReason {
    fn from(r: StopReason) -> FinishReason {
        match r {
            StopReason::EndOfGeneration | StopReason::StopString | StopReason::Callback => {
                FinishReason::Stop
            }
            StopReason::NPredict | StopReason::ContextFull | StopReason::CacheFull => {
                FinishReason::Length
            }
        }
    }
}

/// Token counts of a finished request (one choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens found in the cache (not decoded again).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// The slot that ran it (llama-server's `id_slot`).
    pub slot: usize,
}

/// What the engine tells a request, in order: `Progress` of its prompt, then
/// per choice deltas and one `Done`; or one `Failed` for the whole request.
#[derive(Clone, Debug)]
pub enum Event {
    /// Prompt processing went on (sent when the request starts, before any
    /// prompt token is decoded, then after each batch with some of it):
    /// `processed` of `total` prompt tokens are in the cache, `cached` of
    /// them found there.
    Progress {
        /// Prompt tokens.
        total: usize,
        /// Of those, reused from a cache.
        cached: usize,
        /// Of those, in the cache now (cached ones included).
        processed: usize,
    },
    /// One generated token of choice `index`: the text it completed (may be
    /// empty: half a character, or text held back as the possible start of
    /// a stop string), or (`token: None`) held text released at the end.
    Delta {
        /// The choice, `0..n`.
        index: usize,
        /// The token; `None` for held-back text flushed at the end.
        token: Option<u32>,
        /// Text to append.
        text: String,
        /// The token's log-probabilities.
        logprob: Option<TokenLogprob>,
    },
    /// Choice `index` is complete.
    Done {
        /// The choice, `0..n`.
        index: usize,
        /// Why it finished, OpenAI's way.
        reason: FinishReason,
        /// Why it finished, in detail.
        stop: StopReason,
        /// Token counts.
        usage: Usage,
    },
    /// The engine failed while running the request.
    Failed(String),
}

/// Where a request's events go.
pub trait EventSink {
    /// Deliver an event; false = nobody listens any more (cancel).
    fn send(&mut self, ev: Event) -> bool;
    /// True once nobody listens (checked every step, also during prefill).
    fn is_closed(&self) -> bool;
    /// A position-changing cache event of this request (a context shift, a
    /// self-extend pass), before the decode it makes room for.
    fn on_kv(&mut self, _ev: &KvEvent) {}
    /// The whole prompt is in `seq` of the cache, before the first token is
    /// sampled (e.g. to save the prompt's state). An error fails the request.
    fn prompt_done(&mut self, _ctx: &mut Context, _seq: i32) -> Result<(), Error> {
        Ok(())
    }
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

/// Embeddings asked of the engine: the inputs' vectors, in order.
type Embedded = Result<Vec<Vec<Vec<f32>>>, Error>;

enum Msg {
    Job(Box<Request>, Box<dyn EventSink + Send>),
    Slot(usize, SlotAction, mpsc::Sender<Result<SlotOutcome, Error>>),
    Embed(Vec<Vec<u32>>, crate::embed::Pooling, mpsc::Sender<Embedded>),
    Shutdown,
}

/// What to do with an idle slot's cells (llama-server's `/slots` actions).
#[derive(Clone, Debug)]
pub enum SlotAction {
    /// Save its prompt and state to a file ([`crate::state::PromptCache`]:
    /// checksummed, written to a temporary file and renamed).
    Save(std::path::PathBuf),
    /// Replace its cells with a saved file's (checked whole first).
    Restore(std::path::PathBuf),
    /// Drop its cells.
    Erase,
}

/// What a [`SlotAction`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotOutcome {
    /// Tokens saved, restored or erased.
    pub n_tokens: usize,
    /// Bytes written or read.
    pub n_bytes: usize,
}

/// A slot as of the engine's last step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotInfo {
    /// Its index (`0..n_slots`).
    pub id: usize,
    /// Running a request.
    pub is_processing: bool,
    /// Tokens in its cells (a reusable prefix when idle).
    pub n_cached: usize,
}

/// A [`Model`] and one [`Context`] on a thread of their own, serving
/// requests with continuous batching (see the module docs).
pub struct Engine {
    model: Model,
    tx: mpsc::Sender<Msg>,
    /// What the engine thread last published.
    board: Board,
    max_queue: usize,
    n_slots: usize,
    n_ctx_slot: usize,
    n_ubatch: usize,
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
        let n_ubatch = ctx.params().n_ubatch as usize;
        let (tx, rx) = mpsc::channel();
        let board = Board::default();
        let published = board.clone();
        let n_batch = ctx.params().n_batch as usize;
        let prefill_cap = match params.prefill_per_step {
            0 => n_batch,
            n => n.min(n_batch),
        };
        let thread = std::thread::Builder::new()
            .name("glint-engine".into())
            .spawn(move || {
                run(
                    ctx,
                    rx,
                    published,
                    prefill_cap,
                    (params.cache_ram, params.ctx_checkpoints),
                    (params.checkpoint_min_step, params.checkpoint_bytes),
                    params.chain,
                )
            })
            .map_err(|e| Error::Internal(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine {
            model: model.clone(),
            tx,
            board,
            max_queue: params.max_queue,
            n_slots,
            n_ctx_slot,
            n_ubatch,
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

    /// Most tokens one forward pass carries (`-ub`): the longest input
    /// [`Engine::embed`] takes.
    pub fn n_ubatch(&self) -> usize {
        self.n_ubatch
    }

    /// Requests waiting for a slot now.
    pub fn n_waiting(&self) -> usize {
        self.board.waiting.load(Ordering::Relaxed)
    }

    /// Slots running a request now (as of the last step, or the last
    /// request finished: a request is idle here before its `Done` is sent).
    pub fn n_processing(&self) -> usize {
        self.board.busy.load(Ordering::Relaxed)
    }

    /// Decode counts as of the last step or finished request.
    pub fn decode_stats(&self) -> DecodeStats {
        *self.board.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slots as of the last step or finished request.
    pub fn slots(&self) -> Vec<SlotInfo> {
        let s = self
            .board
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if s.is_empty() {
            // Before the first step: every slot idle and empty.
            return (0..self.n_slots)
                .map(|id| SlotInfo {
                    id,
                    ..Default::default()
                })
                .collect();
        }
        s
    }

    /// Embeddings of `inputs` (token ids each), between two steps on the
    /// engine's context, which must keep embeddings
    /// ([`crate::ContextParams::embeddings`]); one vector per input, or one
    /// per token with [`crate::embed::Pooling::None`]; not normalized.
    /// Blocks until done.
    pub fn embed(&self, inputs: Vec<Vec<u32>>, pooling: crate::embed::Pooling) -> Embedded {
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Msg::Embed(inputs, pooling, tx))
            .map_err(|_| Error::Internal("the engine has stopped".into()))?;
        rx.recv()
            .map_err(|_| Error::Internal("the engine has stopped".into()))?
    }

    /// Save, restore or erase idle slot `id`'s cells, between two steps
    /// (blocks until done). A slot running a request is refused.
    pub fn slot_action(&self, id: usize, action: SlotAction) -> Result<SlotOutcome, Error> {
        if id >= self.n_slots {
            return Err(Error::Invalid(format!(
                "slot {id} does not exist ({} slots)",
                self.n_slots
            )));
        }
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Msg::Slot(id, action, tx))
            .map_err(|_| Error::Stopped)?;
        rx.recv().map_err(|_| Error::Stopped)?
    }

    /// Check `req` and queue it; its events go to `sink`.
    pub fn submit(&self, req: Request, sink: Box<dyn EventSink + Send>) -> Result<(), Error> {
        req.check(self.model.n_vocab(), self.n_ctx_slot, self.n_slots)?;
        // Count first, then check: two racing submits cannot both pass.
        let before = self.board.waiting.fetch_add(1, Ordering::SeqCst);
        if before >= self.max_queue {
            self.board.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::Overloaded {
                capacity: self.max_queue,
            });
        }
        self.tx.send(Msg::Job(Box::new(req), sink)).map_err(|_| {
            self.board.waiting.fetch_sub(1, Ordering::SeqCst);
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
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts of the engine's decode steps since it started (llama-server's
/// `n_decode_total`, `n_tokens_max` and `n_busy_slots_per_decode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Batches decoded.
    pub n_decode: u64,
    /// Most tokens in one batch.
    pub n_tokens_max: usize,
    /// Over all batches, the slots with tokens in each, summed.
    pub busy_slots: u64,
    /// Checkpoints of recurrent states made.
    pub checkpoints_made: u64,
    /// Prompts that went back to a checkpoint instead of starting over.
    pub checkpoints_restored: u64,
    /// Prompt tokens those restores kept (not prefilled again).
    pub checkpoint_tokens: u64,
    /// Of `n_decode`, steps of greedy requests chained on the device (each
    /// started before its tokens were read back): every busy slot's token
    /// in one step.
    pub n_chained: u64,
}

/// The engine thread: wait for work, then step until every slot is idle.
fn run(
    mut ctx: Context,
    rx: mpsc::Receiver<Msg>,
    board: Board,
    prefill_cap: usize,
    (cache_ram, ctx_checkpoints): (usize, usize),
    (checkpoint_min_step, checkpoint_bytes): (usize, usize),
    chain: bool,
) {
    let model = ctx.model().clone();
    let n_slots = ctx.params().n_seq_max as i32;
    let seqs = (0..n_slots).map(|s| (s, Vec::new())).collect();
    let mut sched = Scheduler::new(model.tokenizer(), seqs, prefill_cap, Some(board), cache_ram);
    sched.set_checkpoints(ctx_checkpoints, checkpoint_min_step, checkpoint_bytes);
    sched.set_chain(chain);
    loop {
        // Block only when there is nothing to do.
        let first = if sched.is_busy() {
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
                Msg::Job(req, sink) => sched.push(Job { req: *req, sink }),
                Msg::Slot(id, action, reply) => {
                    let done = sched.slot_action(&mut ctx, id, action);
                    // The board (GET /slots) shows what the action did
                    // before its caller hears back, not after the next step.
                    sched.publish();
                    let _ = reply.send(done);
                }
                Msg::Embed(inputs, pooling, reply) => {
                    let _ = reply.send(sched.embed(&mut ctx, &inputs, pooling));
                }
                Msg::Shutdown => return,
            }
            next = rx.try_recv().ok();
        }
        sched.step(&mut ctx);
        // A failed decode was reported to its requests; the engine goes on.
        sched.error = None;
        sched.publish();
    }
}
