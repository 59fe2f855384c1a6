//! The generation loop itself: slots, the queue, and one step (assign
//! queued requests, build one batch, decode it, sample). [`super::Engine`]
//! runs it on its thread; [`super::run_local`] on a caller's context.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use glint_sample::{Chain, Sampler, DEFAULT_SEED};
use glint_tokenizer::{StreamDecoder, Tokenizer};

use super::ram::{RamCache, MIN_TOKENS};
use super::stop::split_stop;
use super::{
    DecodeStats, Event, EventSink, FinishReason, KvEvent, Request, SlotAction, SlotInfo,
    SlotOutcome, StopReason, TokenLogprob, Usage,
};
use crate::chat::common_prefix;
use crate::generate::plain_greedy;
use crate::state::PromptCache;
use crate::{Batch, Checkpoint, Context, Error};

/// A queued request and where its events go.
pub(crate) struct Job<'a> {
    pub(crate) req: Request,
    pub(crate) sink: Box<dyn EventSink + 'a>,
}

/// One request's sink, shared by its `n` choices (one slot each).
type SinkRef<'a> = Rc<RefCell<Box<dyn EventSink + 'a>>>;

/// Where a slot's request is.
enum Phase {
    /// No request; its cells (if any) are a reusable prefix.
    Idle,
    /// Prompt tokens `cache.len()..prompt.len()` still to decode.
    Prefill,
    /// A choice after the first, waiting for the first choice's prompt to be
    /// decoded and copied into it.
    Follow,
    /// `next` was sampled and goes in the next batch.
    Generate { next: u32 },
    /// A greedy request whose step had every busy slot generating, each
    /// with its own output row, and no request waiting (in a memory whose
    /// last token can be taken back as if never decoded: no recurrent
    /// layers, no sliding-window ring, whose window the token would move
    /// on): its next token is the greedy choice of batch row `idx` of the
    /// last decode, still on the device. While every busy slot is in this
    /// phase, their rows are the last decode's outputs and nothing waits,
    /// the next step decodes their tokens chained
    /// ([`Context::decode_greedy_seqs`]: the step started before the
    /// tokens are read back); else they are sampled as usual first. A
    /// request that ends at a chained token has it removed from the cells
    /// again.
    Chain { idx: usize },
}

/// A running choice: its sampler, detokenizer and stop-string state.
struct Active<'a> {
    req: Rc<Request>,
    /// The choice, `0..req.n`.
    index: usize,
    sink: SinkRef<'a>,
    chain: Chain,
    dec: StreamDecoder<'a>,
    greedy: bool,
    /// The chain's leading top-k (`SamplerParams::leading_top_k`), where no
    /// logprobs or grammar need the full logits: sampled from the `k`
    /// candidates the device selects (`Context::top_k`).
    top_k: Option<usize>,
    /// Text decoded but not yet sent (a possible start of a stop string).
    held: String,
    n_gen: usize,
    n_cached: usize,
    /// Slots of choices `1..n`, waiting for this one's prompt.
    followers: Vec<usize>,
    /// Where the output stands in the request's grammar.
    matcher: Option<glint_grammar::Matcher>,
    /// A lazy grammar not triggered yet: the output so far, watched for
    /// the request's `grammar_trigger`.
    lazy: Option<String>,
}

impl Active<'_> {
    fn send(&self, ev: Event) -> bool {
        self.sink.borrow_mut().send(ev)
    }
}

struct Slot<'a> {
    seq: i32,
    /// Recurrent models: the sequence's state saved after its first `n`
    /// cached tokens, oldest first (`(n, checkpoint)`); a new prompt that
    /// shares fewer tokens than the cache goes back to one of them.
    checkpoints: Vec<(usize, Checkpoint)>,
    /// Token ids in this slot's cells, in order.
    cache: Vec<u32>,
    /// Position of the next token: `cache.len()`, unless self-extend
    /// compressed the positions.
    n_past: i32,
    /// Self-extend progress.
    ga_i: i32,
    /// `cache[i]` sits at position `i`: the cells are a prefix others may
    /// reuse (false once self-extend moved them).
    aligned: bool,
    /// Some of its cells may be shared with another sequence (`seq_cp`):
    /// unshare before a position edit.
    shared: bool,
    phase: Phase,
    job: Option<Active<'a>>,
    /// Step of the last use, to give up the least recently used prefix.
    last_used: u64,
    /// Step at which the request was assigned (prefill order).
    started: u64,
}

/// What the engine shows other threads (the server's `/metrics` and
/// `/slots`). The scheduler writes it after every step and also just
/// before it sends a request's `Done`: a client that has its answer and
/// then asks sees its slot idle and the step that answered it counted.
#[derive(Clone, Default)]
pub(crate) struct Board {
    /// Requests queued, not yet in a slot.
    pub(crate) waiting: Arc<AtomicUsize>,
    /// Slots running a request.
    pub(crate) busy: Arc<AtomicUsize>,
    /// Each slot: busy or not, tokens in its cells (empty before the
    /// first publication).
    pub(crate) slots: Arc<Mutex<Vec<SlotInfo>>>,
    /// Decode counts since the start.
    pub(crate) stats: Arc<Mutex<DecodeStats>>,
}

/// The loop's state: slots over sequence ids, and the requests waiting.
pub(crate) struct Scheduler<'a> {
    tok: &'a Tokenizer,
    slots: Vec<Slot<'a>>,
    queue: VecDeque<Job<'a>>,
    step: u64,
    /// Most prompt tokens in one batch.
    prefill_cap: usize,
    /// The engine's published counts (none for a local run).
    board: Option<Board>,
    /// Prefixes given up by idle slots, in host memory.
    ram: Option<RamCache>,
    /// The first error of a failed decode or hook since it was last taken
    /// (its requests got [`Event::Failed`]).
    pub(crate) error: Option<Error>,
    /// Decode counts since the start.
    pub(crate) stats: DecodeStats,
    /// The vocabulary as a trie, for grammar masks (made on first use).
    trie: Option<Rc<glint_grammar::TokenTrie>>,
    /// Most checkpoints a slot keeps (recurrent models; 0 = none).
    n_checkpoints: usize,
    /// Fewest tokens between two checkpoints of a slot.
    checkpoint_min_step: usize,
    /// Most bytes of checkpoints a slot keeps.
    checkpoint_bytes: usize,
    /// Chain greedy steps on the device where every busy slot may
    /// ([`Phase::Chain`]; `EngineParams::chain` off or `GLINT_CHAIN=0`:
    /// never).
    chain: bool,
}

/// Recurrent models: the last this many prompt tokens are decoded apart
/// from the rest, and the state before them is kept as a checkpoint
/// (llama-server's rule: a new prompt often differs from an earlier one
/// only in its last tokens, a chat template's generation prompt).
pub(crate) const CHECKPOINT_TAIL: usize = 64;

impl<'a> Scheduler<'a> {
    /// Slots over `seqs`: each a sequence id and the tokens its cells
    /// already hold at positions `0..`. `ram_budget` bytes of host memory
    /// keep the prefixes idle slots give up (0 = none).
    pub(crate) fn new(
        tok: &'a Tokenizer,
        seqs: Vec<(i32, Vec<u32>)>,
        prefill_cap: usize,
        board: Option<Board>,
        ram_budget: usize,
    ) -> Self {
        let slots = seqs
            .into_iter()
            .map(|(seq, cache)| Slot {
                seq,
                checkpoints: Vec::new(),
                n_past: cache.len() as i32,
                cache,
                ga_i: 0,
                aligned: true,
                shared: false,
                phase: Phase::Idle,
                job: None,
                last_used: 0,
                started: 0,
            })
            .collect();
        Scheduler {
            tok,
            slots,
            queue: VecDeque::new(),
            step: 0,
            prefill_cap: prefill_cap.max(1),
            board,
            ram: (ram_budget > 0).then(|| RamCache::new(ram_budget)),
            error: None,
            stats: DecodeStats::default(),
            trie: None,
            n_checkpoints: 0,
            checkpoint_min_step: CHECKPOINT_TAIL,
            checkpoint_bytes: usize::MAX,
            chain: std::env::var_os("GLINT_CHAIN").is_none_or(|v| v != "0"),
        }
    }

    /// Chain greedy steps on the device where they may (`on`), unless
    /// `GLINT_CHAIN=0`.
    pub(crate) fn set_chain(&mut self, on: bool) {
        self.chain &= on;
    }

    /// Keep up to `n` checkpoints per slot, at least `min_step` tokens
    /// apart and `bytes` in all (models whose memory needs them).
    pub(crate) fn set_checkpoints(&mut self, n: usize, min_step: usize, bytes: usize) {
        self.n_checkpoints = n;
        self.checkpoint_min_step = min_step;
        self.checkpoint_bytes = bytes;
    }

    /// After a prefill step: slot `i`'s state before its prompt's last
    /// [`CHECKPOINT_TAIL`] tokens, kept as a checkpoint (when it is not too
    /// close to the previous one).
    fn maybe_checkpoint(&mut self, ctx: &mut Context, i: usize) {
        if self.n_checkpoints == 0 || !ctx.needs_checkpoints() {
            return;
        }
        let s = &self.slots[i];
        let Some(job) = s.job.as_ref() else {
            return;
        };
        let n = s.cache.len();
        if !s.aligned || n < CHECKPOINT_TAIL || n + CHECKPOINT_TAIL != job.req.prompt.len() {
            return;
        }
        if s.checkpoints
            .last()
            .is_some_and(|&(m, _)| n <= m + self.checkpoint_min_step)
        {
            return;
        }
        if let Ok(Some(cp)) = ctx.checkpoint(s.seq) {
            let s = &mut self.slots[i];
            s.checkpoints.push((n, cp));
            // The oldest go first, past the count or the byte budget.
            let bytes = |c: &[(usize, Checkpoint)]| c.iter().map(|x| x.1.n_bytes()).sum::<usize>();
            while s.checkpoints.len() > self.n_checkpoints
                || (!s.checkpoints.is_empty() && bytes(&s.checkpoints) > self.checkpoint_bytes)
            {
                s.checkpoints.remove(0);
            }
            self.stats.checkpoints_made += 1;
        }
    }

    /// Take slot `i` back to its last checkpoint at or before `n` tokens:
    /// the tokens kept, or `None` (no such checkpoint, or it failed).
    fn restore_checkpoint(&mut self, ctx: &mut Context, i: usize, n: usize) -> Option<usize> {
        let s = &mut self.slots[i];
        let k = s.checkpoints.iter().rposition(|&(m, _)| m <= n)?;
        let m = s.checkpoints[k].0;
        ctx.restore_checkpoint(s.seq, &s.checkpoints[k].1).ok()?;
        s.checkpoints.truncate(k + 1);
        s.cache.truncate(m);
        s.n_past = m as i32;
        self.stats.checkpoints_restored += 1;
        self.stats.checkpoint_tokens += m as u64;
        Some(m)
    }

    /// Queue a request (checked by the caller).
    pub(crate) fn push(&mut self, job: Job<'a>) {
        self.queue.push_back(job);
    }

    /// Work to do: a request running or waiting.
    pub(crate) fn is_busy(&self) -> bool {
        !self.queue.is_empty() || self.slots.iter().any(|s| s.job.is_some())
    }

    /// Slots running a request.
    pub(crate) fn n_busy(&self) -> usize {
        self.slots.iter().filter(|s| s.job.is_some()).count()
    }

    /// Each slot's sequence and the tokens its cells hold (empty when they
    /// are not a plain prefix).
    pub(crate) fn caches(&self) -> Vec<(i32, Vec<u32>)> {
        self.slots
            .iter()
            .map(|s| {
                (
                    s.seq,
                    if s.aligned {
                        s.cache.clone()
                    } else {
                        Vec::new()
                    },
                )
            })
            .collect()
    }

    /// Each slot: busy or not, tokens in its cells.
    pub(crate) fn slot_infos(&self) -> Vec<SlotInfo> {
        self.slots
            .iter()
            .enumerate()
            .map(|(id, s)| SlotInfo {
                id,
                is_processing: s.job.is_some(),
                n_cached: s.cache.len(),
            })
            .collect()
    }

    /// Save, restore or erase idle slot `i`'s cells.
    pub(crate) fn slot_action(
        &mut self,
        ctx: &mut Context,
        i: usize,
        action: SlotAction,
    ) -> Result<SlotOutcome, Error> {
        self.resolve_chains(ctx);
        let s = self
            .slots
            .get(i)
            .ok_or_else(|| Error::Invalid(format!("slot {i} does not exist")))?;
        if s.job.is_some() {
            return Err(Error::Invalid(format!("slot {i} is processing a request")));
        }
        match action {
            SlotAction::Save(path) => {
                if !s.aligned || s.cache.is_empty() {
                    return Err(Error::Invalid(format!("slot {i} holds no prompt to save")));
                }
                let pc = PromptCache::capture(ctx, s.seq, &s.cache)?;
                let n_bytes = pc.to_bytes().len();
                pc.save(&path)?;
                Ok(SlotOutcome {
                    n_tokens: pc.tokens.len(),
                    n_bytes,
                })
            }
            SlotAction::Restore(path) => {
                let n_bytes = std::fs::metadata(&path)
                    .map(|m| m.len() as usize)
                    .unwrap_or(0);
                let pc = PromptCache::load(&path)?;
                let n_ctx = ctx.n_ctx_stream() as usize;
                if pc.tokens.len() >= n_ctx {
                    return Err(Error::PromptTooLong {
                        n_prompt: pc.tokens.len(),
                        n_ctx,
                    });
                }
                // The state is checked whole before the slot's cells go.
                ctx.state_seq_load(&pc.state, s.seq)?;
                let s = &mut self.slots[i];
                (s.ga_i, s.aligned, s.shared) = (0, true, false);
                s.n_past = pc.tokens.len() as i32;
                s.cache = pc.tokens;
                s.last_used = self.step;
                Ok(SlotOutcome {
                    n_tokens: s.cache.len(),
                    n_bytes,
                })
            }
            SlotAction::Erase => {
                let n_tokens = s.cache.len();
                Self::forget(ctx, &mut self.slots[i]);
                Ok(SlotOutcome {
                    n_tokens,
                    n_bytes: 0,
                })
            }
        }
    }

    /// One step: drop cancelled requests, start queued ones, decode a batch.
    pub(crate) fn step(&mut self, ctx: &mut Context) {
        self.step += 1;
        self.cancel_closed();
        self.assign(ctx);
        self.decode_step(ctx);
    }

    /// End the requests whose listener went away (no more events).
    fn cancel_closed(&mut self) {
        for s in self.slots.iter_mut() {
            if s.job.as_ref().is_some_and(|j| j.sink.borrow().is_closed()) {
                s.job = None;
                s.phase = Phase::Idle;
            }
        }
    }

    /// Drop a slot's cells (its cached prefix).
    fn forget(ctx: &mut Context, s: &mut Slot<'a>) {
        // seq_rm of a whole sequence cannot fail for a valid seq id.
        let _ = ctx.seq_rm(s.seq, -1, -1);
        s.cache.clear();
        s.checkpoints.clear();
        s.n_past = 0;
        s.ga_i = 0;
        s.aligned = true;
        s.shared = false;
    }

    /// Embed each of `inputs` in the cells of the first idle slot (its
    /// prefix given up first, as for any new request), between two steps.
    pub(crate) fn embed(
        &mut self,
        ctx: &mut Context,
        inputs: &[Vec<u32>],
        pooling: crate::embed::Pooling,
    ) -> Result<Vec<Vec<Vec<f32>>>, Error> {
        // Its decodes replace the output a chained slot's token is in.
        self.resolve_chains(ctx);
        let i = (0..self.slots.len())
            .find(|&i| self.slots[i].job.is_none())
            .ok_or_else(|| Error::Invalid("every slot is busy: no sequence to embed in".into()))?;
        self.evict(ctx, i);
        let seq = self.slots[i].seq;
        inputs
            .iter()
            .map(|t| crate::embed::embed(ctx, seq, t, pooling))
            .collect()
    }

    /// Give up idle slot `i`'s cells, keeping their state in host memory
    /// when there is a RAM cache and they are a prefix worth keeping.
    fn evict(&mut self, ctx: &mut Context, i: usize) {
        self.save(ctx, i);
        Self::forget(ctx, &mut self.slots[i]);
    }

    /// Keep slot `i`'s cells in the RAM cache (if any) before they are
    /// cut or given up.
    fn save(&mut self, ctx: &mut Context, i: usize) {
        let s = &self.slots[i];
        if let Some(ram) = self.ram.as_mut() {
            if s.aligned && s.cache.len() >= MIN_TOKENS {
                // A failed save only loses the cache entry.
                if let Ok(state) = ctx.state_seq_save(s.seq) {
                    ram.insert(s.cache.clone(), state, self.step);
                }
            }
        }
    }

    fn dequeued(&self) {
        if let Some(b) = &self.board {
            b.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Write the busy count, the slots and the decode counts to the board.
    pub(crate) fn publish(&self) {
        if let Some(b) = &self.board {
            b.busy.store(self.n_busy(), Ordering::SeqCst);
            *b.slots.lock().unwrap_or_else(|e| e.into_inner()) = self.slot_infos();
            *b.stats.lock().unwrap_or_else(|e| e.into_inner()) = self.stats;
        }
    }

    /// Give queued requests idle slots, first come first served: the first
    /// choice the one whose cached tokens share the longest prefix with its
    /// prompt (least recently used first among equals), further choices
    /// the emptiest, least recently used ones.
    fn assign(&mut self, ctx: &mut Context) {
        loop {
            let Some(front) = self.queue.front() else {
                return;
            };
            if front.sink.is_closed() {
                self.queue.pop_front();
                self.dequeued();
                continue;
            }
            let idle: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].job.is_none())
                .collect();
            if idle.len() < front.req.n.max(1) {
                return;
            }
            // A request for one slot waits for it (first come, first
            // served: the queue behind it waits too, as llama-server's).
            let wanted = front.req.slot;
            if wanted.is_some_and(|w| !idle.contains(&w)) {
                return;
            }
            let job = self.queue.pop_front().expect("a front job");
            self.dequeued();
            let prompt = &job.req.prompt;
            // Ties go to the lowest slot: `max_by_key` keeps the last maximum.
            let lead = wanted.unwrap_or_else(|| {
                *idle
                    .iter()
                    .rev()
                    .max_by_key(|&&i| {
                        let s = &self.slots[i];
                        let common = if s.aligned {
                            common_prefix(&s.cache, prompt)
                        } else {
                            0
                        };
                        (common, s.cache.is_empty(), std::cmp::Reverse(s.last_used))
                    })
                    .expect("an idle slot")
            });
            let mut rest: Vec<usize> = idle.into_iter().filter(|&i| i != lead).collect();
            rest.sort_by_key(|&i| (!self.slots[i].cache.is_empty(), self.slots[i].last_used));
            rest.truncate(job.req.n.max(1) - 1);
            self.start(ctx, lead, rest, job);
        }
    }

    /// The prefix to start `prompt` from in slot `lead`: its own cached
    /// prefix, or a longer one of another slot in the same KV stream,
    /// shared into it with `seq_cp`. Returns the tokens kept.
    fn take_prefix(
        &mut self,
        ctx: &mut Context,
        lead: usize,
        prompt: &[u32],
        fresh: bool,
    ) -> usize {
        // At least the last prompt token is decoded: its logits are needed.
        let limit = prompt.len() - 1;
        let s = &self.slots[lead];
        let own = if fresh || !s.aligned {
            0
        } else {
            common_prefix(&s.cache, prompt).min(limit)
        };
        let stream = ctx.cells().stream_of(s.seq).ok();
        let donor = (0..self.slots.len())
            .filter(|&j| j != lead && self.slots[j].aligned && !fresh)
            .filter(|&j| ctx.cells().stream_of(self.slots[j].seq).ok() == stream)
            .map(|j| (j, common_prefix(&self.slots[j].cache, prompt).min(limit)))
            .filter(|&(_, c)| c > own)
            .max_by_key(|&(_, c)| c);
        let best_here = donor.map_or(own, |d| d.1);
        let saved = self.ram.as_ref().and_then(|r| r.best(prompt, limit));
        if let Some((e, c)) = saved.filter(|&(_, c)| c > best_here) {
            let state = self
                .ram
                .as_mut()
                .expect("a RAM cache")
                .take(e, self.step)
                .to_vec();
            self.evict(ctx, lead);
            let s = &mut self.slots[lead];
            if ctx.state_seq_load_prefix(&state, s.seq, c as i32).is_ok() {
                s.cache = prompt[..c].to_vec();
                s.n_past = c as i32;
                return c;
            }
            return 0;
        }
        if let Some((j, c)) = donor {
            let (src, dst) = (self.slots[j].seq, self.slots[lead].seq);
            Self::forget(ctx, &mut self.slots[lead]);
            if ctx.seq_cp(src, dst, 0, c as i32).is_ok() {
                let s = &mut self.slots[lead];
                s.cache = prompt[..c].to_vec();
                s.n_past = c as i32;
                s.shared = true;
                self.slots[j].shared = true;
                return c;
            }
            return 0;
        }
        if own < self.slots[lead].cache.len() {
            // Tokens past the common prefix are cut: keep them in RAM.
            self.save(ctx, lead);
        }
        let s = &mut self.slots[lead];
        if !s.aligned || ctx.seq_rm(s.seq, own as i32, -1).is_err() {
            // A recurrent state cannot be cut back: go back to a checkpoint.
            if s.aligned {
                if let Some(k) = self.restore_checkpoint(ctx, lead, own) {
                    return k;
                }
            }
            // Moved positions, or a tail that cannot be cut: start cold.
            let s = &mut self.slots[lead];
            Self::forget(ctx, s);
            return 0;
        }
        s.cache.truncate(own);
        s.n_past = own as i32;
        own
    }

    /// Put `job` in slot `lead` (first choice) and `followers` (the others).
    fn start(&mut self, ctx: &mut Context, lead: usize, followers: Vec<usize>, job: Job<'a>) {
        let Job { req, sink } = job;
        let sink: SinkRef<'a> = Rc::new(RefCell::new(sink));
        let fresh = req.ga_n > 1;
        let keep = self.take_prefix(ctx, lead, &req.prompt, fresh);
        let n_ctx = ctx.n_ctx_stream() as usize;
        let req = Rc::new(req);
        let mut chains = Vec::with_capacity(followers.len() + 1);
        for i in 0..=followers.len() {
            let mut sp = req.sampling.clone();
            if sp.seed != DEFAULT_SEED {
                sp.seed = sp.seed.wrapping_add(i as u32);
            }
            match sp.build_chain(self.tok.n_vocab(), n_ctx) {
                Ok(mut c) => {
                    for &t in &req.prompt {
                        c.accept(t);
                    }
                    chains.push(c);
                }
                Err(e) => {
                    sink.borrow_mut().send(Event::Failed(e.to_string()));
                    return;
                }
            }
        }
        let plain = req.logprobs.is_none() && req.grammar.is_none();
        let greedy = plain_greedy(&req.sampling) && plain;
        let top_k = req.sampling.leading_top_k().filter(|_| plain);
        if req.grammar.is_some() && self.trie.is_none() {
            self.trie = Some(token_trie(self.tok));
        }
        for (k, chain) in chains.into_iter().enumerate() {
            let i = if k == 0 { lead } else { followers[k - 1] };
            if k > 0 {
                self.evict(ctx, i);
            }
            let s = &mut self.slots[i];
            s.job = Some(Active {
                req: req.clone(),
                index: k,
                sink: sink.clone(),
                chain,
                dec: self.tok.stream_decoder(true),
                greedy,
                top_k,
                held: String::new(),
                n_gen: 0,
                n_cached: keep,
                followers: if k == 0 {
                    followers.clone()
                } else {
                    Vec::new()
                },
                matcher: match req.grammar_trigger {
                    Some(_) => None,
                    None => req.grammar.clone().map(glint_grammar::Matcher::new),
                },
                lazy: req
                    .grammar_trigger
                    .as_ref()
                    .filter(|_| req.grammar.is_some())
                    .map(|_| String::new()),
            });
            s.phase = if k == 0 {
                Phase::Prefill
            } else {
                Phase::Follow
            };
            s.aligned = !fresh;
            s.started = self.step;
            s.last_used = self.step;
        }
        self.progress(lead);
    }

    /// Tell slot `i`'s request how far its prompt is.
    fn progress(&self, i: usize) {
        let s = &self.slots[i];
        if let Some(job) = &s.job {
            job.send(Event::Progress {
                total: job.req.prompt.len(),
                cached: job.n_cached,
                processed: s.cache.len().min(job.req.prompt.len()),
            });
        }
    }

    /// Cells free in the stream of `seq`, after giving up idle slots'
    /// prefixes in that stream when fewer than `want` are free.
    fn free_cells(&mut self, ctx: &mut Context, seq: i32, want: u32) -> u32 {
        let Ok(stream) = ctx.cells().stream_of(seq) else {
            return 0;
        };
        let mut free = ctx.cells().free(stream);
        while free < want {
            let victim = (0..self.slots.len())
                .filter(|&i| {
                    let s = &self.slots[i];
                    s.job.is_none()
                        && !s.cache.is_empty()
                        && ctx.cells().stream_of(s.seq).ok() == Some(stream)
                })
                .min_by_key(|&i| self.slots[i].last_used);
            let Some(v) = victim else { break };
            self.evict(ctx, v);
            free = ctx.cells().free(stream);
        }
        free
    }

    /// Before slot `i` decodes `n_new` tokens: its self-extend step, or a
    /// context shift when they would fill its context (or, `force`, when
    /// the shared cache has no cell for it). Shared cells are copied first
    /// (copy-on-write), so no other sequence moves. Returns whether a
    /// context shift was made.
    fn make_room(
        &mut self,
        ctx: &mut Context,
        i: usize,
        n_new: usize,
        force: bool,
    ) -> Result<bool, Error> {
        let n_ctx = ctx.n_ctx_stream() as usize;
        let s = &mut self.slots[i];
        let Some(job) = s.job.as_ref() else {
            return Ok(false);
        };
        let (req, sink) = (job.req.clone(), job.sink.clone());
        if req.ga_n > 1 {
            // Self-extend moves positions from `ga_i` on.
            let ga_i = s.ga_i;
            self.unshare(ctx, i, ga_i)?;
            let s = &mut self.slots[i];
            let out = ctx.self_extend(s.seq, s.n_past, s.ga_i, req.ga_n, req.ga_w)?;
            s.n_past = out.n_past;
            s.ga_i = out.ga_i;
            let mut sink = sink.borrow_mut();
            for pass in out.passes {
                sink.on_kv(&KvEvent::SelfExtend(pass));
            }
            return Ok(false);
        }
        if !req.context_shift || !(force || s.n_past as usize + n_new >= n_ctx) {
            return Ok(false);
        }
        let n_keep = (req.n_keep as i32).clamp(0, s.n_past);
        let n_discard = (s.n_past - n_keep) / 2;
        if n_discard == 0 {
            return Ok(false);
        }
        let (seq, n_past_before) = (s.seq, s.n_past);
        let shift = if s.shared {
            // Copy-on-write: the shift moves positions from `n_keep +
            // n_discard` on; those shared with another sequence get their
            // own cells first. Dropping positions needs no copy, so it
            // comes first and the copies can use the cells it frees.
            let moved = n_keep + n_discard;
            ctx.seq_rm(seq, n_keep, moved)?;
            if let Err(e) = self.unshare(ctx, i, moved) {
                // Half a shift is no state to go on from.
                Self::forget(ctx, &mut self.slots[i]);
                return Err(e);
            }
            ctx.seq_add(seq, moved, n_past_before, -n_discard)?;
            glint_kv::ContextShift {
                n_discard,
                calls: [
                    glint_kv::KvOp::SeqRm {
                        seq,
                        p0: n_keep,
                        p1: moved,
                    },
                    glint_kv::KvOp::SeqAdd {
                        seq,
                        p0: moved,
                        p1: n_past_before,
                        d: -n_discard,
                    },
                ],
                n_past: n_past_before - n_discard,
            }
        } else {
            ctx.context_shift(seq, n_keep, n_past_before)?
        };
        let s = &mut self.slots[i];
        let (k, d) = (n_keep as usize, shift.n_discard as usize);
        s.cache.drain(k..(k + d).min(s.cache.len()));
        s.n_past = shift.n_past;
        sink.borrow_mut().on_kv(&KvEvent::ContextShift {
            n_past_before,
            n_keep,
            shift,
        });
        Ok(true)
    }

    /// Copy-on-write: give slot `i` its own cells for positions `p0..`
    /// where they are shared with another sequence, before they move.
    /// Idle slots' prefixes make room for the copies if needed.
    fn unshare(&mut self, ctx: &mut Context, i: usize, p0: i32) -> Result<(), Error> {
        if !self.slots[i].shared {
            return Ok(());
        }
        let seq = self.slots[i].seq;
        if ctx.seq_unshare(seq, p0, -1).is_err() {
            self.free_cells(ctx, seq, u32::MAX);
            ctx.seq_unshare(seq, p0, -1)?;
        }
        if p0 <= 0 {
            self.slots[i].shared = false;
        }
        Ok(())
    }

    /// Fail slot `i`'s request with `e` (kept for the local runner).
    fn fail(&mut self, ctx: &mut Context, i: usize, e: Error) {
        if let Some(j) = self.slots[i].job.take() {
            j.send(Event::Failed(e.to_string()));
        }
        self.slots[i].phase = Phase::Idle;
        Self::forget(ctx, &mut self.slots[i]);
        self.error.get_or_insert(e);
    }

    /// Build one batch (a token per generating slot, then prompt chunks up to
    /// `n_batch`), decode it, and sample where logits came out.
    fn decode_step(&mut self, ctx: &mut Context) {
        if let Some(slots) = self.chained_slots(ctx) {
            if self.chain_step(ctx, &slots) {
                return;
            }
        }
        self.resolve_chains(ctx);
        let n_batch = ctx.params().n_batch as usize;
        let n_ctx = ctx.n_ctx_stream() as usize;
        let mut batch = Batch::new();
        // (slot, batch index of its logits, prompt just completed).
        let mut outs: Vec<(usize, usize, bool)> = Vec::new();
        // Slots with tokens in the batch.
        let mut fed: Vec<usize> = Vec::new();
        // Cells this batch takes from each stream so far.
        let mut taken: HashMap<u32, u32> = HashMap::new();

        for i in 0..self.slots.len() {
            let Phase::Generate { next } = self.slots[i].phase else {
                continue;
            };
            if let Err(e) = self.make_room(ctx, i, 1, false) {
                self.fail(ctx, i, e);
                continue;
            }
            let mut got = self.take(ctx, &mut taken, i, 1);
            if got == 0 && matches!(self.make_room(ctx, i, 1, true), Ok(true)) {
                got = self.take(ctx, &mut taken, i, 1);
            }
            let s = &mut self.slots[i];
            if s.n_past as usize + 1 > n_ctx {
                self.finish(i, StopReason::ContextFull);
                continue;
            }
            if got == 0 {
                self.finish(i, StopReason::CacheFull);
                continue;
            }
            outs.push((i, batch.len(), false));
            fed.push(i);
            batch.add(next, s.n_past, &[s.seq], true);
            s.cache.push(next);
            s.n_past += 1;
            s.last_used = self.step;
        }

        // Prompt chunks, oldest request first.
        let n_gen = batch.len();
        let mut prefilling: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.slots[i].phase, Phase::Prefill))
            .collect();
        prefilling.sort_by_key(|&i| self.slots[i].started);
        for &i in &prefilling {
            let room = n_batch
                .min(n_gen + self.prefill_cap)
                .saturating_sub(batch.len());
            if room == 0 {
                break;
            }
            let Some(job) = self.slots[i].job.as_ref() else {
                continue;
            };
            let req = job.req.clone();
            let done = self.slots[i].cache.len();
            let mut todo = (req.prompt.len() - done).min(room);
            // Recurrent models: the prompt's last CHECKPOINT_TAIL tokens
            // in a step of their own, so a checkpoint lands before them.
            let rest = req.prompt.len() - done;
            if self.n_checkpoints > 0
                && ctx.needs_checkpoints()
                && rest > CHECKPOINT_TAIL
                && rest - todo < CHECKPOINT_TAIL
            {
                todo = rest - CHECKPOINT_TAIL;
            }
            if let Err(e) = self.make_room(ctx, i, todo, false) {
                self.fail(ctx, i, e);
                continue;
            }
            let got = self.take(ctx, &mut taken, i, todo as u32) as usize;
            if got == 0 {
                continue;
            }
            fed.push(i);
            let s = &mut self.slots[i];
            for k in 0..got {
                let last = done + k + 1 == req.prompt.len();
                if last {
                    outs.push((i, batch.len(), true));
                }
                batch.add(req.prompt[done + k], s.n_past + k as i32, &[s.seq], last);
            }
            s.cache.extend_from_slice(&req.prompt[done..done + got]);
            s.n_past += got as i32;
            s.last_used = self.step;
        }

        if batch.is_empty() {
            // Prompts that cannot get a cell, with nothing generating to free
            // one: the newest gives up, so the others can go on.
            if let Some(&i) = prefilling.iter().max_by_key(|&&i| self.slots[i].started) {
                self.finish(i, StopReason::CacheFull);
                Self::forget(ctx, &mut self.slots[i]);
            }
            return;
        }

        if let Err(e) = ctx.decode(&batch) {
            self.batch_failed(ctx, &fed, e);
            return;
        }
        self.stats.n_decode += 1;
        self.stats.n_tokens_max = self.stats.n_tokens_max.max(batch.len());
        self.stats.busy_slots += fed.len() as u64;
        for &i in &prefilling {
            if fed.contains(&i) {
                self.progress(i);
                self.maybe_checkpoint(ctx, i);
            }
        }

        // Every busy slot with an output of its own (one each, no prompt
        // half done, no choice waiting for a prompt) and nothing queued:
        // their greedy steps may chain.
        let may_chain = self.queue.is_empty() && outs.len() == self.n_busy();
        for (i, idx, first) in outs {
            if first {
                self.prompt_done(ctx, i, idx, may_chain);
            } else {
                self.sample(ctx, i, idx, may_chain);
            }
        }
    }

    /// A decode of slots `fed` failed: its cells are rolled back, and every
    /// request in it fails (its cache no longer matches).
    fn batch_failed(&mut self, ctx: &mut Context, fed: &[usize], e: Error) {
        let msg = e.to_string();
        for &i in fed {
            if let Some(j) = self.slots[i].job.take() {
                j.send(Event::Failed(msg.clone()));
            }
            self.slots[i].phase = Phase::Idle;
            Self::forget(ctx, &mut self.slots[i]);
        }
        self.error.get_or_insert(e);
    }

    /// The slots whose chained step this step is, in the order of their
    /// rows in the last decode: every busy slot, each in [`Phase::Chain`]
    /// with its own row, one for each output row (what
    /// [`Context::chain_fits`] checks), with no request waiting.
    fn chained_slots(&self, ctx: &Context) -> Option<Vec<usize>> {
        if !self.queue.is_empty() {
            return None;
        }
        let mut rows = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            match (&s.job, &s.phase) {
                (None, _) => {}
                (Some(_), Phase::Chain { idx }) => rows.push((*idx, i)),
                (Some(_), _) => return None,
            }
        }
        rows.sort_unstable();
        if rows.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let seqs: Vec<i32> = rows.iter().map(|&(_, i)| self.slots[i].seq).collect();
        ctx.chain_fits(&seqs).ok()?;
        Some(rows.into_iter().map(|(_, i)| i).collect())
    }

    /// Sample every chained slot's token as usual (before anything else
    /// decodes: its output is the last decode's).
    fn resolve_chains(&mut self, ctx: &mut Context) {
        for i in 0..self.slots.len() {
            if let Phase::Chain { idx } = self.slots[i].phase {
                self.sample(ctx, i, idx, false);
            }
        }
    }

    /// The next step of `slots` (see [`Self::chained_slots`]), chained on
    /// the device: their tokens (the greedy choices of the last decode)
    /// decoded without being read first, then handed to their requests.
    /// Where the step needs what the plain path does (no free cell, the
    /// context's end, a position that moved), nothing is decoded and
    /// `false` says so: the caller samples the tokens as usual and takes
    /// the plain path (what `make_room` did for the slots before, a
    /// context shift say, is what that path does first anyway). A slot
    /// whose room cannot be made fails, as on that path.
    fn chain_step(&mut self, ctx: &mut Context, slots: &[usize]) -> bool {
        let n_ctx = ctx.n_ctx_stream() as usize;
        let mut taken = HashMap::new();
        for &i in slots {
            if let Err(e) = self.make_room(ctx, i, 1, false) {
                self.fail(ctx, i, e);
                return false;
            }
            let got = self.take(ctx, &mut taken, i, 1);
            let s = &self.slots[i];
            let next = ctx.seq_pos_max(s.seq).ok().map(|p| p + 1);
            if got == 0 || s.n_past as usize + 1 > n_ctx || next != Some(s.n_past) {
                return false;
            }
        }
        let seqs: Vec<i32> = slots.iter().map(|&i| self.slots[i].seq).collect();
        let ids = match ctx.decode_greedy_seqs(&seqs) {
            Ok(ids) => ids,
            Err(e) => {
                self.batch_failed(ctx, slots, e);
                return true;
            }
        };
        self.stats.n_decode += 1;
        self.stats.n_chained += 1;
        self.stats.n_tokens_max = self.stats.n_tokens_max.max(slots.len());
        self.stats.busy_slots += slots.len() as u64;
        for (k, (&i, id)) in slots.iter().zip(ids).enumerate() {
            let s = &mut self.slots[i];
            s.cache.push(id);
            s.n_past += 1;
            s.last_used = self.step;
            if let Some(job) = s.job.as_mut() {
                // What `pick` does with a greedy token.
                job.chain.accept(id);
            }
            self.emitted(ctx, i, Some(Ok((id, None))), Some(k));
        }
        true
    }

    /// Cells for `n` more tokens of slot `i` in this batch (fewer when its
    /// stream has fewer free).
    fn take(&mut self, ctx: &mut Context, taken: &mut HashMap<u32, u32>, i: usize, n: u32) -> u32 {
        let seq = self.slots[i].seq;
        let stream = ctx.cells().stream_of(seq).unwrap_or(0);
        let used = *taken.get(&stream).unwrap_or(&0);
        let free = self.free_cells(ctx, seq, used + n).saturating_sub(used);
        let got = free.min(n);
        *taken.entry(stream).or_default() += got;
        got
    }

    /// Slot `i`'s prompt is decoded (logits at batch row `idx`): run the
    /// request's hook, copy the prompt into its other choices' slots, and
    /// sample the first token of every choice.
    fn prompt_done(&mut self, ctx: &mut Context, i: usize, idx: usize, may_chain: bool) {
        let Some(job) = self.slots[i].job.as_ref() else {
            return;
        };
        let seq = self.slots[i].seq;
        let followers = job.followers.clone();
        let hooked = job.sink.clone().borrow_mut().prompt_done(ctx, seq);
        if let Err(e) = hooked {
            for &f in &followers {
                self.slots[f].job = None;
                self.slots[f].phase = Phase::Idle;
            }
            self.fail(ctx, i, e);
            return;
        }
        for &f in &followers {
            let copied = ctx.seq_cp(seq, self.slots[f].seq, -1, -1);
            if copied.is_err() {
                // No room for a copy (one stream per slot, never expected):
                // that choice ends empty, the others go on.
                self.finish(f, StopReason::CacheFull);
                continue;
            }
            let (cache, n_past, ga_i) = {
                let s = &self.slots[i];
                (s.cache.clone(), s.n_past, s.ga_i)
            };
            let same_stream =
                ctx.cells().stream_of(seq).ok() == ctx.cells().stream_of(self.slots[f].seq).ok();
            let fs = &mut self.slots[f];
            fs.cache = cache;
            fs.n_past = n_past;
            fs.ga_i = ga_i;
            fs.shared = same_stream;
            fs.phase = Phase::Prefill; // sampled right below
            self.slots[i].shared |= same_stream;
        }
        self.sample(ctx, i, idx, may_chain && followers.is_empty());
        for f in followers {
            if matches!(self.slots[f].phase, Phase::Prefill) {
                self.sample(ctx, f, idx, false);
            }
        }
    }

    /// Sample slot `i`'s next token from batch row `idx` and act on it;
    /// with `may_chain` (see [`Phase::Chain`]), a greedy request's token is
    /// left on the device for the next step to decode chained.
    fn sample(&mut self, ctx: &mut Context, i: usize, idx: usize, may_chain: bool) {
        let Some(job) = self.slots[i].job.as_mut() else {
            return;
        };
        if job.req.max_tokens == Some(0) {
            self.emitted(ctx, i, None, None);
            return;
        }
        if may_chain && self.chain && job.greedy && !ctx.needs_checkpoints() {
            self.slots[i].phase = Phase::Chain { idx };
            return;
        }
        let picked = pick(ctx, job, idx, self.trie.as_deref(), self.tok);
        self.emitted(ctx, i, Some(picked), None);
    }

    /// Act on slot `i`'s token (`None`: it may have none): hand it to the
    /// request and go on, or end. `chained`: the token is decoded already
    /// and its output pending at that row (the next is [`Phase::Chain`]).
    fn emitted(
        &mut self,
        ctx: &mut Context,
        i: usize,
        picked: Option<Result<(u32, Option<Logprob>), Error>>,
        chained: Option<usize>,
    ) {
        let tok = self.tok;
        let Some(job) = self.slots[i].job.as_mut() else {
            return;
        };
        let then = match picked {
            None => Then::Finish(StopReason::NPredict),
            Some(Err(e)) => Then::Fail(e),
            Some(Ok((id, logprob))) => {
                watch_trigger(tok, job, id);
                emit(tok, job, id, logprob)
            }
        };
        if chained.is_some() && !matches!(then, Then::Next(_)) {
            // The token was decoded before it was read: a request that
            // ends at it leaves the cells as the plain path does, without
            // it (llama-server's: the last token is never decoded).
            let s = &mut self.slots[i];
            if ctx.seq_rm(s.seq, s.n_past - 1, -1).is_ok() {
                s.cache.pop();
                s.n_past -= 1;
            }
        }
        match then {
            Then::Finish(r) => self.finish(i, r),
            Then::Fail(e) => self.fail(ctx, i, e),
            Then::Cancel => {
                // Nobody listens: the request ends here, its cells stay.
                self.slots[i].job = None;
                self.slots[i].phase = Phase::Idle;
            }
            Then::Next(next) => {
                self.slots[i].phase = match chained {
                    Some(idx) => Phase::Chain { idx },
                    None => Phase::Generate { next },
                }
            }
        }
    }

    /// Send the held text and `Done`; the slot becomes idle and keeps its
    /// cells as a reusable prefix.
    fn finish(&mut self, i: usize, stop: StopReason) {
        let s = &mut self.slots[i];
        if let Some(mut job) = s.job.take() {
            let mut rest = std::mem::take(&mut job.held);
            rest.push_str(&job.dec.flush());
            if !rest.is_empty() {
                job.send(Event::Delta {
                    index: job.index,
                    token: None,
                    text: rest,
                    logprob: None,
                });
            }
            // The slot is idle (its job taken) before the client can learn
            // that it is done.
            self.publish();
            job.send(Event::Done {
                index: job.index,
                reason: FinishReason::from(stop),
                stop,
                usage: Usage {
                    prompt_tokens: job.req.prompt.len(),
                    cached_tokens: job.n_cached,
                    completion_tokens: job.n_gen,
                    slot: i,
                },
            });
            // Choices still waiting for this one's prompt end with it.
            for f in job.followers {
                if matches!(self.slots[f].phase, Phase::Follow) {
                    self.finish(f, stop);
                }
            }
        }
        self.slots[i].phase = Phase::Idle;
    }
}

type Logprob = (f32, Vec<(u32, f32)>);

/// What a slot does after its token.
enum Then {
    Finish(StopReason),
    Fail(Error),
    Cancel,
    Next(u32),
}

/// Hand `id` to the request; what the slot does next.
fn emit(tok: &Tokenizer, job: &mut Active, id: u32, logprob: Option<Logprob>) -> Then {
    job.n_gen += 1;
    let logprob = logprob.map(|(lp, top)| TokenLogprob {
        token: id,
        text: piece(tok, id),
        logprob: lp,
        top: top
            .into_iter()
            .map(|(t, l)| (t, piece(tok, t), l))
            .collect(),
    });
    let eog = tok.is_eog(id) && !job.req.ignore_eos;
    let text = if eog {
        String::new()
    } else {
        job.dec.push(id).unwrap_or_default()
    };
    job.held.push_str(&text);
    let (out, stopped) = split_stop(&mut job.held, &job.req.stop);
    let delta = Event::Delta {
        index: job.index,
        token: Some(id),
        text: out,
        logprob,
    };
    if !job.send(delta) {
        Then::Cancel
    } else if stopped {
        // What follows a stop string is dropped, bytes held back too.
        job.dec.flush();
        Then::Finish(StopReason::StopString)
    } else if eog {
        Then::Finish(StopReason::EndOfGeneration)
    } else if job.req.max_tokens.is_some_and(|m| job.n_gen >= m) {
        Then::Finish(StopReason::NPredict)
    } else {
        Then::Next(id)
    }
}

/// The next token from batch row `idx`, with its logprobs when asked for.
fn pick(
    ctx: &mut Context,
    job: &mut Active,
    idx: usize,
    trie: Option<&glint_grammar::TokenTrie>,
    tok: &Tokenizer,
) -> Result<(u32, Option<Logprob>), Error> {
    if let (Some(m), Some(trie)) = (job.matcher.as_mut(), trie) {
        // Grammar, as llama.cpp's sampler does it: draw from the chain as
        // usual and keep the token when the grammar takes it (nearly always
        // once the output is under way: one check, no mask); else mask
        // every token that cannot go on (a walk of the vocabulary's trie),
        // the end of generation allowed only where the output is complete,
        // and draw again.
        let fits = |m: &glint_grammar::Matcher, id: u32| -> Result<bool, Error> {
            if tok.is_eog(id) {
                return Ok(m.is_accepting());
            }
            let piece = tok
                .token_to_piece(id, false)
                .map_err(|e| Error::Internal(format!("token {id}: {e}")))?;
            Ok(!piece.is_empty()
                && std::str::from_utf8(&piece).is_ok_and(|t| m.clone().advance_str(t)))
        };
        let raw = ctx.logits(idx)?;
        let first = job.chain.apply_logits(raw)?.selected_token();
        let id = match first {
            Some(id) if fits(m, id)? => id,
            _ => {
                let allowed = m.allowed(trie);
                let (accepting, done) = (m.is_accepting(), m.is_done());
                let masked: Vec<f32> = raw
                    .iter()
                    .enumerate()
                    .map(|(t, &l)| {
                        let ok = if tok.is_eog(t as u32) {
                            accepting
                        } else {
                            !done && allowed[t]
                        };
                        if ok {
                            l
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                    .collect();
                job.chain
                    .apply_logits(&masked)?
                    .selected_token()
                    .ok_or_else(|| Error::Internal("the sampler chain selected nothing".into()))?
            }
        };
        job.chain.accept(id);
        if !tok.is_eog(id) {
            let piece = tok
                .token_to_piece(id, false)
                .map_err(|e| Error::Internal(format!("token {id}: {e}")))?;
            let text = String::from_utf8_lossy(&piece).into_owned();
            if !m.advance_str(&text) {
                return Err(Error::Internal(format!(
                    "the grammar refused token {id} {text:?} it allowed"
                )));
            }
        }
        let lp = match job.req.logprobs {
            Some(n) => {
                let l = glint_sample::logprobs(ctx.logits(idx)?, id, n)?;
                Some((l.logprob, l.top))
            }
            None => None,
        };
        return Ok((id, lp));
    }
    if job.greedy {
        // Nothing in the chain changes the largest logit: 4 bytes back.
        let id = ctx.argmax(idx)?;
        job.chain.accept(id);
        return Ok((id, None));
    }
    if let Some(k) = job.top_k {
        // The k candidates back, not the vocabulary (None: the logits).
        if let Some(cands) = ctx.top_k(idx, k)? {
            let id = job.chain.sample_sorted(cands)?;
            return Ok((id, None));
        }
    }
    let logits = ctx.logits(idx)?;
    if let (Some(n), true) = (job.req.logprobs, job.req.post_sampling_probs) {
        let cur = job.chain.apply_logits(logits)?;
        let id = cur
            .selected_token()
            .ok_or_else(|| Error::Internal("the sampler chain selected nothing".into()))?;
        job.chain.accept(id);
        let l = glint_sample::post_sampling_logprobs(&cur, id, n)?;
        return Ok((id, Some((l.logprob, l.top))));
    }
    let id = job.chain.sample(logits)?;
    let lp = match job.req.logprobs {
        Some(n) => {
            let l = glint_sample::logprobs(logits, id, n)?;
            Some((l.logprob, l.top))
        }
        None => None,
    };
    Ok((id, lp))
}

/// A lazy grammar's watch: `id` joins the output; once the trigger is in
/// it, the grammar takes over from the trigger on (or, refusing that text,
/// is dropped and the output stays free).
fn watch_trigger(tok: &Tokenizer, job: &mut Active, id: u32) {
    let Some(text) = job.lazy.as_mut() else {
        return;
    };
    if tok.is_eog(id) {
        return;
    }
    if let Ok(p) = tok.token_to_piece(id, false) {
        text.push_str(&String::from_utf8_lossy(&p));
    }
    let (Some(trigger), Some(g)) = (job.req.grammar_trigger.as_deref(), job.req.grammar.clone())
    else {
        return;
    };
    if let Some(at) = text.find(trigger) {
        let mut m = glint_grammar::Matcher::new(g);
        if m.advance_str(&text[at..]) {
            job.matcher = Some(m);
        }
        job.lazy = None;
    } else {
        // Only the end that may begin the trigger is kept.
        let mut keep = text.len().saturating_sub(trigger.len());
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        text.drain(..keep);
    }
}

/// The vocabulary's texts as a trie (control tokens have none).
fn token_trie(tok: &Tokenizer) -> Rc<glint_grammar::TokenTrie> {
    let texts: Vec<Option<Vec<u8>>> = (0..tok.n_vocab() as u32)
        .map(|t| {
            tok.token_to_piece(t, false)
                .ok()
                .map(|b| b.into_owned())
                .filter(|b| !b.is_empty())
        })
        .collect();
    Rc::new(glint_grammar::TokenTrie::new(&texts))
}

/// A token's text as logprobs show it (special tokens included).
fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, true)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}
