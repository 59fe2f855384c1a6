//! [`Context`]: decodes [`Batch`]es of tokens at explicit positions and
//! sequence ids into its memory, keeping logits only for the tokens that
//! ask.

use glint_backend::{Backend, KqMask, MaskWindow};
use glint_kv::{KvCells, KvParams, MaskParams, Query, StreamLayout, SwaType, TokenMeta};
use glint_model::{forward, HParams, Mask, Memories, SwaInputs, UBatch, WindowInputs};

use crate::backend::{on_exec, with_exec, Exec, ExecState, Loaded};
use crate::memory::{Checkpoint, KvCacheParams, SeqMemory};
use crate::{Batch, ContextParams, Error, Model};

/// Logits of the last `decode`, by batch index.
#[derive(Default)]
struct Outputs {
    /// `[n_tokens]`: output row of each batch token, or -1.
    row_of: Vec<i32>,
    /// `[n_rows, n_vocab]` rows read back so far (`None` until read).
    host: Vec<Option<Vec<f32>>>,
    /// `[n_rows, n_embd]` hidden states, read with the logits when the
    /// context keeps embeddings.
    hidden: Vec<Option<Vec<f32>>>,
    /// Output rows that are still on the device, in the last micro-batch's
    /// output (`first row`, count).
    pending: Option<(usize, usize)>,
    /// `[n_rows]` argmax of the pending rows, read together the first time
    /// one is asked for: a step of several sequences reads its greedy
    /// tokens back in one transfer (4 bytes each), not one each.
    argmax: Vec<Option<u32>>,
    /// `[n_rows]` top-k candidates of the pending rows (`k`, candidates),
    /// selected on the device together the first time one is asked for.
    top_k: Vec<Option<(usize, Candidates)>>,
}

/// `(id, logit)` pairs by descending logit (ties: ascending id).
type Candidates = Vec<(u32, f32)>;

/// One memory (a KV cache) and the state to decode into it.
///
/// A context owns a handle to its [`Model`], so both can live in one struct
/// and move to another thread together.
pub struct Context {
    model: Model,
    params: ContextParams,
    exec: ExecState,
    out: Outputs,
    /// Build attention masks on the host and upload them (llama.cpp's
    /// way), not on the backend from its copy of the cells.
    host_masks: bool,
    /// The batch being decoded takes its tokens from the previous one's
    /// greedy choices on the backend ([`Context::decode_greedy`]).
    chained: bool,
}

impl Context {
    /// A context for `model`. Sizes are checked (`n_ubatch <= n_batch`,
    /// `n_seq_max` within the cache's limit, every stream at least one
    /// cell, …). `params.n_ctx` is the total over all streams.
    pub fn new(model: &Model, params: ContextParams) -> Result<Context, Error> {
        let p = &params;
        if p.n_ctx == 0 || p.n_batch == 0 || p.n_ubatch == 0 || p.n_seq_max == 0 {
            return Err(Error::Invalid(format!(
                "n_ctx {}, n_batch {}, n_ubatch {} and n_seq_max {} must all be > 0",
                p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max
            )));
        }
        let params = ContextParams {
            n_ubatch: p.n_ubatch.min(p.n_batch),
            ..params
        };
        let (layout, kv_size) = if params.kv_unified {
            (StreamLayout::Unified, params.n_ctx)
        } else {
            (StreamLayout::PerSeq, params.n_ctx / params.n_seq_max)
        };
        if kv_size == 0 {
            return Err(Error::Invalid(format!(
                "n_ctx {} shared out over {} streams leaves none a cell",
                params.n_ctx, params.n_seq_max
            )));
        }
        check_memory(model, &params, kv_size)?;
        let kvp = KvCacheParams {
            cells: KvParams {
                kv_size,
                n_seq_max: params.n_seq_max,
                layout,
                // Attention looks at whole multiples of 256 cells (as
                // llama.cpp), but never more than the stream has.
                n_pad: 256.min(kv_size),
            },
            type_k: params.type_k.ggml(),
            type_v: params.type_v.ggml(),
            window: params.self_extend_window,
            swa_full: params.swa_full,
            n_ubatch: params.n_ubatch,
        };
        let exec = model
            .backend()
            .new_exec(model.hparams(), &kvp, params.n_ubatch as usize)?;
        Ok(Context {
            model: model.clone(),
            params,
            exec,
            out: Outputs::default(),
            host_masks: std::env::var_os("GLINT_HOST_MASKS").is_some_and(|v| v != "0"),
            chained: false,
        })
    }

    /// Build the attention masks on the host and upload them, `[n_kv,
    /// n_tokens]` f32 a micro-batch (llama.cpp's way; `GLINT_HOST_MASKS=1`
    /// at creation), instead of on the backend from its copy of the cells
    /// (the default: only the cells that changed travel). The two give
    /// the same masks; this is for A/B runs and tests. Two-window
    /// SelfExtend always builds its masks on the host.
    pub fn set_host_masks(&mut self, on: bool) {
        self.host_masks = on;
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The parameters (with `n_ubatch` clamped to `n_batch`).
    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// The context size: cells in total, over all streams (`-c`).
    pub fn n_ctx(&self) -> u32 {
        self.params.n_ctx
    }

    /// Cells in one stream: what one sequence can hold at most (`n_ctx`
    /// when all sequences share one stream, `n_ctx / n_seq_max` otherwise).
    pub fn n_ctx_stream(&self) -> u32 {
        self.cells().params().kv_size
    }

    /// The KV cells (read-only view: positions, sequences, pending shifts).
    pub fn cells(&self) -> &KvCells {
        on_exec!(&self.exec, |x| &x.mem.kv.cells)
    }

    fn cells_mut(&mut self) -> &mut KvCells {
        on_exec!(&mut self.exec, |x| &mut x.mem.kv.cells)
    }

    /// Check a batch against the context: sizes, vocabulary, sequence ids,
    /// positions increasing within each sequence.
    fn check_batch(&self, batch: &Batch) -> Result<Vec<TokenMeta>, Error> {
        let n = batch.len();
        if n == 0 {
            return Err(Error::Batch("empty batch".into()));
        }
        if n > self.params.n_batch as usize {
            return Err(Error::BatchTooLarge {
                n_tokens: n,
                n_batch: self.params.n_batch as usize,
            });
        }
        let n_vocab = self.model.n_vocab();
        let mut last_pos: std::collections::HashMap<i32, i32> = Default::default();
        let mut metas = Vec::with_capacity(n);
        for i in 0..n {
            let (tok, pos, seqs) = (batch.tokens[i], batch.pos[i], &batch.seq_ids[i]);
            if tok < 0 || tok as usize >= n_vocab {
                return Err(Error::Batch(format!(
                    "token {i}: id {tok} outside the vocabulary (0..{n_vocab})"
                )));
            }
            if seqs.is_empty() {
                return Err(Error::Batch(format!("token {i}: no sequence id")));
            }
            for &s in seqs {
                if s < 0 || s as u32 >= self.params.n_seq_max {
                    return Err(Error::Batch(format!(
                        "token {i}: sequence id {s} outside 0..{} (n_seq_max)",
                        self.params.n_seq_max
                    )));
                }
                // Micro-batches run in batch order: a token must not attend to
                // a later token of its sequence that is not computed yet.
                if let Some(&prev) = last_pos.get(&s) {
                    if pos <= prev {
                        return Err(Error::Batch(format!(
                            "token {i}: position {pos} of sequence {s} after position {prev}: \
                             positions must increase within a batch"
                        )));
                    }
                }
                last_pos.insert(s, pos);
            }
            metas.push(TokenMeta {
                pos,
                seq_ids: seqs.clone(),
            });
        }
        Ok(metas)
    }

    /// Run `batch` through the model. All or nothing: a batch that does not
    /// fit, names an unknown sequence, a token outside the vocabulary, or
    /// gives one sequence non-increasing positions is an error and changes
    /// nothing; a decode that fails later is rolled back cell by cell.
    pub fn decode(&mut self, batch: &Batch) -> Result<(), Error> {
        self.chained = false;
        self.decode_batch(batch).map(drop)
    }

    /// Greedy decoding chained on the backend: decodes into `seq`, at its
    /// next position, the most likely token after the last decode's one
    /// output row, and returns that token. What [`Context::argmax`] of
    /// that row and a [`Context::decode`] of its token alone would do, to
    /// the bit, except for the order: the step that decodes the token
    /// takes it from the device, so it is recorded and started before the
    /// token comes back (4 bytes), and the host's work on one step (and
    /// on what it does with the token) overlaps the device's on the step
    /// before. The token's own output row is pending afterwards, as after
    /// a decode, so the next call chains from it, and its read is kept in
    /// flight between calls (a `decode` drops it); a caller that stops (at
    /// an end-of-generation token, say) has decoded the token it stops at.
    /// The token is the device's argmax of the row, before a final logit
    /// soft-cap (as [`Context::argmax`] gives it before the logits are
    /// read). An error changes nothing, as a failed `decode`.
    pub fn decode_greedy(&mut self, seq: i32) -> Result<u32, Error> {
        Ok(self.decode_greedy_seqs(&[seq])?[0])
    }

    /// [`Context::decode_greedy`] for several sequences in one step: the
    /// last decode's output row `k` (its `k`-th token with logits) gives
    /// the greedy token decoded into `seqs[k]`, at that sequence's next
    /// position, and the step's output row `k` is that token's, so the
    /// next call with the same `seqs` chains on. Returns the tokens, in
    /// the order of `seqs`, read back together (`4 × seqs.len()` bytes).
    /// What [`Context::chain_fits`] refuses is an error that changes
    /// nothing, as is any failure.
    pub fn decode_greedy_seqs(&mut self, seqs: &[i32]) -> Result<Vec<u32>, Error> {
        self.chain_fits(seqs)?;
        let mut b = Batch::new();
        for &seq in seqs {
            let pos = self.seq_pos_max(seq)?.checked_add(1).ok_or_else(|| {
                Error::Invalid(format!("sequence {seq} is at the largest position"))
            })?;
            b.add(0, pos, &[seq], true);
        }
        let model = self.model.clone();
        // The read of the tokens: started when the step that chose them
        // was submitted, or now.
        let n = seqs.len();
        with_exec!(model.backend(), &mut self.exec, |l, x| start_reading(
            l, x, n
        ))?;
        self.chained = true;
        let decoded = self.decode_batch(&b);
        self.chained = false;
        let undo = match decoded {
            Ok(undo) => undo,
            Err(e) => {
                // Whatever was in flight belongs to a step that did not happen.
                on_exec!(&mut self.exec, |x| x.reading = None);
                return Err(e);
            }
        };
        let read = with_exec!(model.backend(), &mut self.exec, |l, x| chain_reading(
            l, x, n
        ));
        if let Err(e) = read {
            // The step was decoded but its tokens not read: undone, as a
            // failed decode is.
            on_exec!(&mut self.exec, |x| x.reading = None);
            return Err(self.undo_failed(undo, e, "step"));
        }
        read
    }

    /// Whether [`Context::decode_greedy_seqs`] can chain a step of `seqs`
    /// from the last decode: one output row per sequence, all from its last
    /// micro-batch (the device holds that one's greedy choices only), each
    /// sequence once and known, and the step one micro-batch (its tokens
    /// are the device's choices of the last pass, so it cannot be split):
    /// at most `n_ubatch` tokens, whose masks fit the micro-batch's scratch
    /// even where the streams they span are full. The error says which.
    pub fn chain_fits(&self, seqs: &[i32]) -> Result<(), Error> {
        let n = seqs.len();
        let rows = self.out.host.len();
        if n == 0 || rows != n {
            return Err(Error::Invalid(format!(
                "decode_greedy chains from a decode with one output row per sequence; \
                 the last had {rows} for {n}"
            )));
        }
        if let Some(s) = seqs
            .iter()
            .enumerate()
            .find(|&(k, s)| seqs[..k].contains(s))
        {
            return Err(Error::Invalid(format!(
                "decode_greedy: sequence {} given twice",
                s.1
            )));
        }
        let mut lo = u32::MAX;
        let mut hi = 0;
        for &seq in seqs {
            let stream = self.cells().stream_of(seq)?;
            (lo, hi) = (lo.min(stream), hi.max(stream));
        }
        let n_ubatch = self.params.n_ubatch as usize;
        // What `decode_planned` splits at, with every spanned stream full.
        if n > n_ubatch || (hi - lo + 1) as usize * n > n_ubatch {
            return Err(Error::Invalid(format!(
                "decode_greedy: {n} sequences over {} streams do not fit one \
                 micro-batch of {n_ubatch}",
                hi - lo + 1
            )));
        }
        // The device's output is the last micro-batch's: the batch's last
        // rows, all of them only where it has `rows`.
        let last = on_exec!(&self.exec, |x| x.pending.as_ref().map_or(0, |o| o.n_out));
        if last != n {
            return Err(Error::Invalid(format!(
                "decode_greedy chains from rows the device still holds, the last \
                 micro-batch's; the last decode's last micro-batch had {last} of its {rows} rows"
            )));
        }
        Ok(())
    }

    /// After a failed `what` (a batch, or a chained step whose token was
    /// not read): its outputs dropped and the memory put back as `undo`
    /// says; `e`, or with a rollback that fails (which would leave cells
    /// the batch took), that failure said beside it.
    fn undo_failed(&mut self, undo: crate::memory::Undo, e: Error, what: &str) -> Error {
        self.out = Outputs::default();
        let model = self.model.clone();
        let rolled = with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .rollback(&l.be, undo));
        match rolled {
            Ok(()) => e,
            Err(r) => Error::Internal(format!("{e}; and undoing the {what} failed: {r}")),
        }
    }

    /// Decode `batch`; what it changed in the memory, for undoing it.
    fn decode_batch(&mut self, batch: &Batch) -> Result<crate::memory::Undo, Error> {
        // A read of the previous output's token, if one was started, is of
        // an output this batch replaces (a chained batch took it first).
        if !self.chained {
            on_exec!(&mut self.exec, |x| x.reading = None);
        }
        let metas = self.check_batch(batch)?;
        let model = self.model.clone();
        let (undo, plan) = with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .begin(&l.be, &metas))?;
        if let Err(e) = self.decode_planned(batch, &plan) {
            return Err(self.undo_failed(undo, e, "batch"));
        }
        Ok(undo)
    }

    /// Output rows in batch order: each token's row, or -1.
    fn start_outputs(&mut self, batch: &Batch) {
        let mut row_of = vec![-1i32; batch.len()];
        let mut n_rows = 0;
        for (i, r) in row_of.iter_mut().enumerate() {
            if batch.logits[i] {
                *r = n_rows;
                n_rows += 1;
            }
        }
        self.out = Outputs {
            row_of,
            host: vec![None; n_rows as usize],
            hidden: vec![None; n_rows as usize],
            pending: None,
            argmax: vec![None; n_rows as usize],
            top_k: vec![None; n_rows as usize],
        };
    }

    fn decode_planned(&mut self, batch: &Batch, plan: &glint_kv::CellPlan) -> Result<(), Error> {
        let n = batch.len();
        let cells = plan.cells();
        let rows: Vec<i32> = plan.rows().iter().map(|&r| r as i32).collect();
        self.start_outputs(batch);

        // Micro-batches of at most n_ubatch tokens, whatever their streams:
        // the weights are read once for the tokens of every stream (one
        // decode token per slot is the server's usual batch), and each token
        // attends to its own stream only (see `kv_span`).
        // A micro-batch spanning streams attends to a wider window, and its
        // masks must fit the scratch sized for n_ubatch x kv_size: it ends
        // where the next token would not fit.
        let n_ubatch = self.params.n_ubatch as usize;
        let kv_size = self.cells().params().kv_size as usize;
        let mask_cap = n_ubatch * kv_size;
        let streams: Vec<u32> = cells.iter().map(|c| c.stream).collect();
        let mut start = 0;
        while start < n {
            let (mut lo, mut hi) = (streams[start], streams[start]);
            let mut end = start + 1;
            while end < n && end - start < n_ubatch {
                let (l, h) = (lo.min(streams[end]), hi.max(streams[end]));
                let span = (h - l) as usize * kv_size + self.cells().n_kv(h) as usize;
                if span * (end + 1 - start) > mask_cap {
                    break;
                }
                (lo, hi) = (l, h);
                end += 1;
            }
            if self.chained && end < n {
                // `chain_fits` keeps a chained step whole.
                return Err(Error::Internal(format!(
                    "a chained step of {n} tokens split at {end}"
                )));
            }
            self.run_ubatch(batch, &rows, &streams, start..end)?;
            start = end;
        }
        Ok(())
    }

    /// The cache span a micro-batch attends to: (first row, rows, mask,
    /// sliding-window mask), the masks `[n_kv, n_tokens]` f32, 0 or -inf.
    /// Tokens of one stream attend to its first `n_kv` cells. Tokens of
    /// several streams attend to the rows from the first stream's start to
    /// the last one's `n_kv`, each masked to the cells of its own stream:
    /// the kernels need no notion of streams, and masked cells cost a
    /// comparison (the cpu kernels skip them).
    fn kv_span(&self, queries: &[Query], streams: &[u32]) -> Result<KvSpan, Error> {
        let hp = self.model.hparams();
        // With a ring, the sliding-window layers' mask is over the ring's
        // cells (see `ring_span`).
        let has_swa = hp.swa_layers.iter().any(|&x| x) && self.ring_cells().is_none();
        span(
            self.cells(),
            queries,
            streams,
            [Some(MaskParams::causal()), has_swa.then(|| self.swa_mask())],
            self.masks_on_host(),
        )
    }

    /// Whether this context's masks are built on the host (see
    /// [`Context::set_host_masks`]).
    fn masks_on_host(&self) -> bool {
        self.host_masks || self.params.self_extend_window.is_some()
    }

    /// The sliding-window layers' mask: causal within the model's window.
    fn swa_mask(&self) -> MaskParams {
        MaskParams {
            swa_type: SwaType::Standard,
            n_swa: self.model.hparams().n_swa as u32,
            ..MaskParams::causal()
        }
    }

    /// The sliding-window ring's cells, if the memory has a ring.
    fn ring_cells(&self) -> Option<&KvCells> {
        on_exec!(&self.exec, |x| x.mem.swa.as_ref().map(|r| &r.cache.cells))
    }

    /// The ring's span for a micro-batch: its first row, rows, and the
    /// sliding-window mask over them.
    fn ring_span(&self, queries: &[Query], streams: &[u32]) -> Result<Option<KvSpan>, Error> {
        let Some(cells) = self.ring_cells() else {
            return Ok(None);
        };
        span(
            cells,
            queries,
            streams,
            [Some(self.swa_mask()), None],
            self.masks_on_host(),
        )
        .map(Some)
    }
}

/// The span of `cells` a micro-batch attends to: (first row, rows, and a
/// mask `[n_kv, n_tokens]` for each of `params`). Tokens of one stream
/// attend to its first `n_kv` cells. Tokens of several streams attend to
/// the rows from the first stream's start to the last one's `n_kv`, each
/// masked to the cells of its own stream: the kernels need no notion of
/// streams, and masked cells cost a comparison (the cpu kernels skip them).
/// Unless `on_host`, the masks are for the backend to build from its copy
/// of the cells ([`SpanMask::Cells`]): a cell of another stream never
/// holds a query's sequence, and the cells past a stream's `n_kv` are
/// empty, so that gives the masks built here.
fn span(
    cells: &KvCells,
    queries: &[Query],
    streams: &[u32],
    params: [Option<MaskParams>; 2],
    on_host: bool,
) -> Result<KvSpan, Error> {
    let kv_size = cells.params().kv_size as usize;
    let (lo, hi) = (
        *streams.iter().min().unwrap_or(&0),
        *streams.iter().max().unwrap_or(&0),
    );
    if !on_host {
        let span = (hi - lo) as usize * kv_size + cells.n_kv(hi) as usize;
        let build = |p: MaskParams| -> Result<SpanMask, Error> {
            let mut visible = 0;
            if lo == hi {
                visible = cells.mask_visible(queries, cells.n_kv(lo), &p)?;
            }
            for st in (lo < hi).then_some(lo..=hi).into_iter().flatten() {
                let qs: Vec<Query> = (0..queries.len())
                    .filter(|&t| streams[t] == st)
                    .map(|t| queries[t])
                    .collect();
                if !qs.is_empty() {
                    visible += cells.mask_visible(&qs, cells.n_kv(st), &p)?;
                }
            }
            Ok(SpanMask::Cells(KqMask {
                first_row: lo as usize * kv_size,
                causal: p.causal,
                window: match p.swa_type {
                    SwaType::None => MaskWindow::None,
                    SwaType::Standard => MaskWindow::Standard(p.n_swa),
                    SwaType::Chunked => MaskWindow::Chunked(p.n_swa),
                    SwaType::Symmetric => MaskWindow::Symmetric(p.n_swa),
                },
                alibi: p.alibi,
                visible: Some(visible),
            }))
        };
        let [mask, swa] = params.map(|p| p.map(build).transpose());
        return Ok(KvSpan {
            kv_start: lo as usize * kv_size,
            n_kv: span,
            mask: mask?.unwrap_or(SpanMask::Values(Vec::new())),
            mask_swa: swa?,
        });
    }
    if lo == hi {
        let n_kv = cells.n_kv(lo);
        let [mask, swa] = params.map(|p| p.map(|p| cells.mask(queries, n_kv, &p)).transpose());
        return Ok(KvSpan {
            kv_start: lo as usize * kv_size,
            n_kv: n_kv as usize,
            mask: SpanMask::Values(mask?.unwrap_or_default()),
            mask_swa: swa?.map(SpanMask::Values),
        });
    }
    let span = (hi - lo) as usize * kv_size + cells.n_kv(hi) as usize;
    let n_t = queries.len();
    let mut masks = params.map(|p| p.map(|_| vec![f32::NEG_INFINITY; span * n_t]));
    for st in lo..=hi {
        let idx: Vec<usize> = (0..n_t).filter(|&t| streams[t] == st).collect();
        if idx.is_empty() {
            continue;
        }
        let qs: Vec<Query> = idx.iter().map(|&t| queries[t]).collect();
        let n_kv = cells.n_kv(st) as usize;
        let base = (st - lo) as usize * kv_size;
        for (m, p) in masks.iter_mut().zip(&params) {
            let (Some(m), Some(p)) = (m.as_mut(), p) else {
                continue;
            };
            // sub: [n_kv, qs.len()], placed in the columns of its tokens.
            let sub = cells.mask(&qs, n_kv as u32, p)?;
            for (k, &t) in idx.iter().enumerate() {
                m[t * span + base..t * span + base + n_kv]
                    .copy_from_slice(&sub[k * n_kv..(k + 1) * n_kv]);
            }
        }
    }
    let [mask, swa] = masks;
    Ok(KvSpan {
        kv_start: lo as usize * kv_size,
        n_kv: span,
        mask: SpanMask::Values(mask.unwrap_or_default()),
        mask_swa: swa.map(SpanMask::Values),
    })
}

impl Context {
    /// One micro-batch: the tokens `range` of `batch` (`streams[i]`: token
    /// `i`'s stream).
    fn run_ubatch(
        &mut self,
        batch: &Batch,
        rows: &[i32],
        streams: &[u32],
        range: std::ops::Range<usize>,
    ) -> Result<(), Error> {
        let (start, end) = (range.start, range.end);
        // A handle (an Arc), so the hyperparameters are borrowed, not cloned
        // on every micro-batch, while `self` is borrowed mutably below.
        let model = self.model.clone();
        let hp = model.hparams();
        let queries: Vec<Query> = range
            .clone()
            .map(|i| Query {
                seq_id: batch.seq_ids[i][0],
                pos: batch.pos[i],
            })
            .collect();
        let mut span = self.kv_span(&queries, &streams[range.clone()])?;
        // The sliding-window ring: old cells dropped, cells for this
        // micro-batch taken, its own span.
        let ring_rows = if self.ring_cells().is_some() {
            let metas: Vec<TokenMeta> = range
                .clone()
                .map(|i| TokenMeta {
                    pos: batch.pos[i],
                    seq_ids: batch.seq_ids[i].clone(),
                })
                .collect();
            with_exec!(model.backend(), &mut self.exec, |l, x| x
                .mem
                .ring_begin(&l.be, &metas))?
        } else {
            None
        };
        let ring = match &ring_rows {
            Some(_) => self.ring_span(&queries, &streams[range.clone()])?,
            None => None,
        };
        let window = self
            .params
            .self_extend_window
            .map(|w| self.window_inputs(w, &queries, &mut span));
        let outputs: Vec<i32> = range
            .clone()
            .filter(|&i| batch.logits[i])
            .map(|i| (i - start) as i32)
            .collect();
        let first_row = self.out.row_of[range.clone()]
            .iter()
            .copied()
            .find(|&r| r >= 0);
        // A token's recurrent state slot is its sequence (one each, checked
        // when the batch began).
        let slots: Vec<i32> = if hp.n_conv > 0 {
            range.clone().map(|i| batch.seq_ids[i][0]).collect()
        } else {
            Vec::new()
        };
        let seqs: Vec<i32> = queries.iter().map(|q| q.seq_id).collect();
        let ub = UBatch {
            tokens: &batch.tokens[start..end],
            device_tokens: self.chained,
            pos: &batch.pos[start..end],
            rows: &rows[start..end],
            slots: &slots,
            seqs: &seqs,
            kv_start: span.kv_start,
            n_kv: span.n_kv,
            mask: span.mask.as_mask(),
            mask_swa: span.mask_swa.as_ref().map(SpanMask::as_mask),
            outputs: &outputs,
            window: window.as_ref().map(|(far, pos_q, pos_k)| WindowInputs {
                pos_q,
                pos_k,
                mask_far: far,
            }),
            swa: match (&ring_rows, &ring) {
                (Some(rows), Some(r)) => Some(SwaInputs {
                    rows,
                    kv_start: r.kv_start,
                    n_kv: r.n_kv,
                    mask: r.mask.as_mask(),
                }),
                _ => None,
            },
        };
        // Logits still on the device from the previous micro-batch are
        // read before its scratch is reused.
        self.read_pending()?;
        let has_out = with_exec!(model.backend(), &mut self.exec, |l, x| forward_ubatch(
            l, hp, x, &ub
        ))?;
        if has_out {
            if let Some(r) = first_row {
                self.out.pending = Some((r as usize, outputs.len()));
            }
        }
        Ok(())
    }

    fn read_pending(&mut self) -> Result<(), Error> {
        let Some((first, count)) = self.out.pending.take() else {
            return Ok(());
        };
        let n_vocab = self.model.n_vocab();
        let model = self.model.clone();
        let all = with_exec!(model.backend(), &mut self.exec, |l, x| read_logits(
            l, x, count, n_vocab
        ))?;
        let cap = self.model.hparams().final_softcap;
        for (k, row) in all.chunks_exact(n_vocab).enumerate() {
            let mut row = row.to_vec();
            if cap > 0.0 {
                for v in &mut row {
                    *v = cap * (*v / cap).tanh();
                }
            }
            self.out.host[first + k] = Some(row);
        }
        if self.params.embeddings {
            let n_embd = model.hparams().n_embd;
            let all = with_exec!(model.backend(), &mut self.exec, |l, x| read_hidden(
                l, x, count, n_embd
            ))?;
            for (k, row) in all.chunks_exact(n_embd).enumerate() {
                self.out.hidden[first + k] = Some(row.to_vec());
            }
        }
        Ok(())
    }

    /// The hidden state `[n_embd]` of batch token `i` of the last `decode`
    /// after the output norm (the model's embedding of that token): the
    /// context must keep embeddings ([`ContextParams::embeddings`]) and the
    /// token must have asked for logits.
    pub fn embeddings(&mut self, i: usize) -> Result<&[f32], Error> {
        if !self.params.embeddings {
            return Err(Error::Invalid(
                "this context keeps no embeddings (ContextParams::embeddings)".into(),
            ));
        }
        let r = self.out_row(i)?;
        if self.out.hidden[r].is_none() {
            self.read_pending()?;
        }
        self.out.hidden[r]
            .as_deref()
            .ok_or_else(|| Error::Internal(format!("hidden row {r} was never computed")))
    }

    fn out_row(&self, i: usize) -> Result<usize, Error> {
        match self.out.row_of.get(i) {
            Some(&r) if r >= 0 => Ok(r as usize),
            _ => Err(Error::Invalid(format!(
                "no logits for batch token {i}: the last batch had {} tokens and it did not ask",
                self.out.row_of.len()
            ))),
        }
    }

    /// Logits `[n_vocab]` of batch token `i` of the last `decode` (which must
    /// have asked for them).
    pub fn logits(&mut self, i: usize) -> Result<&[f32], Error> {
        let r = self.out_row(i)?;
        if self.out.host[r].is_none() {
            self.read_pending()?;
        }
        self.out.host[r]
            .as_deref()
            .ok_or_else(|| Error::Internal(format!("logits row {r} was never computed")))
    }

    /// The most likely next token after batch token `i` (first index on ties).
    /// Reads 4 bytes from the device when the logits have not been read.
    pub fn argmax(&mut self, i: usize) -> Result<u32, Error> {
        let r = self.out_row(i)?;
        if let Some(row) = &self.out.host[r] {
            return Ok(argmax(row));
        }
        if let Some(t) = self.out.argmax[r] {
            return Ok(t);
        }
        match self.out.pending {
            Some((first, count)) if r >= first && r < first + count => {
                let model = self.model.clone();
                let all = with_exec!(model.backend(), &mut self.exec, |l, x| read_argmax(
                    l, x, count
                ))?;
                for (k, t) in all.into_iter().enumerate() {
                    self.out.argmax[first + k] = Some(t);
                }
                Ok(self.out.argmax[r].unwrap_or(0))
            }
            _ => Err(Error::Internal(format!(
                "logits row {r} is neither read nor pending"
            ))),
        }
    }

    /// The `k` largest logits after batch token `i`, `(id, logit)` by
    /// descending logit (ties: ascending id): what a sampler's top-k keeps
    /// ([`glint_sample::Chain::sample_sorted`] samples from them). Where the
    /// logits have not been read, the device selects the candidates of
    /// every pending row ([`Backend::top_k`]) and only those come back
    /// (about 2 KiB a row, not the vocabulary's 4 bytes a token). `None`
    /// where that cannot be exact, so the caller reads the logits: `k` of 0
    /// or over [`glint_model::TOPK_MAX_K`], more ties with the `k`-th than
    /// a row has room for, a NaN or `+inf` among them (the full logits'
    /// check names it), or a final logit soft-cap (it can tie logits the
    /// selection told apart).
    pub fn top_k(&mut self, i: usize, k: usize) -> Result<Option<&[(u32, f32)]>, Error> {
        let r = self.out_row(i)?;
        if k == 0 || self.model.hparams().final_softcap > 0.0 {
            return Ok(None);
        }
        if let Some(row) = &self.out.host[r] {
            // A NaN of either sign or +inf anywhere: the logits' check.
            if row.iter().any(|v| v.is_nan() || *v == f32::INFINITY) {
                return Ok(None);
            }
            let mut c: Vec<(u32, f32)> = row
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u32, v))
                .collect();
            let k = k.min(c.len());
            c.select_nth_unstable_by(k - 1, cmp_desc);
            c.truncate(k);
            self.out.top_k[r] = sorted_top_k(k, c).map(|c| (k, c));
        } else if k > glint_model::TOPK_MAX_K {
            return Ok(None);
        } else if !matches!(&self.out.top_k[r], Some((kk, _)) if *kk == k) {
            let Some((first, count)) = self.out.pending.filter(|&(f, c)| r >= f && r < f + c)
            else {
                return Err(Error::Internal(format!(
                    "logits row {r} is neither read nor pending"
                )));
            };
            let model = self.model.clone();
            let all = with_exec!(model.backend(), &mut self.exec, |l, x| read_top_k(
                l, x, count, k
            ))?;
            let stride = 1 + 2 * glint_model::TOPK_CAP;
            for (j, row) in all.chunks_exact(stride).enumerate() {
                let n = row[0] as usize;
                self.out.top_k[first + j] = if n > glint_model::TOPK_CAP {
                    None
                } else {
                    let c = (0..n)
                        .map(|s| (row[1 + 2 * s] as u32, f32::from_bits(row[2 + 2 * s] as u32)))
                        .collect();
                    sorted_top_k(k, c).map(|c| (k, c))
                };
            }
        }
        Ok(match &self.out.top_k[r] {
            Some((kk, c)) if *kk == k => Some(c),
            _ => None,
        })
    }

    /// Drop sequence `seq` (< 0: all) from positions `[p0, p1)`.
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<(), Error> {
        on_exec!(&mut self.exec, |x| x.mem.seq_rm(seq, p0, p1))
    }

    /// Add `dst` to every cell of `src` in `[p0, p1)` (across streams the
    /// K/V rows are copied).
    pub fn seq_cp(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .seq_cp(&l.be, src, dst, p0, p1))
    }

    /// Copy-on-write before a position edit: give `seq` its own copy (the
    /// K/V rows of every layer) of each cell with a position in `[p0, p1)`
    /// that it shares with another sequence; returns how many cells were
    /// copied (0 when nothing there is shared).
    ///
    /// Why: in the unified cache [`Context::seq_cp`] shares cells instead of
    /// copying them (a prompt prefix several sequences reuse costs its cells
    /// once), and a cell has one position. [`Context::seq_add`],
    /// [`Context::seq_div`], [`Context::context_shift`] and
    /// [`Context::self_extend`] of one sequence would move a shared cell for
    /// every sequence in it. So before editing the positions of a sequence
    /// that may share cells, unshare the range that will move:
    ///
    /// | edit of `seq` | unshare first |
    /// |---|---|
    /// | `context_shift(seq, n_keep, n_past)` | `[n_keep + n_discard, -1)` |
    /// | `self_extend(seq, n_past, ga_i, ..)` | `[ga_i, -1)` |
    /// | `seq_add` / `seq_div` over `[p0, p1)` | `[p0, p1)` |
    ///
    /// (`n_discard = (n_past - n_keep) / 2`; `[n_keep, -1)` works too, at
    /// the cost of copying cells the shift then drops. Every self-extend
    /// call moves positions from `ga_i` on only.)
    ///
    /// Positions that are only removed (`seq_rm`) need no copy: removal
    /// drops one sequence from a cell and leaves the others. The per-stream
    /// layout never shares cells across sequences, so there this is a no-op.
    ///
    /// All or nothing: not enough empty cells for the copies is an error
    /// naming how many are needed and free, and the cache is unchanged.
    /// `p0 < 0` means from 0, `p1 < 0` to the end; `seq` must be a
    /// sequence id (not "all").
    pub fn seq_unshare(&mut self, seq: i32, p0: i32, p1: i32) -> Result<usize, Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .seq_unshare(&l.be, seq, p0, p1))
    }

    /// Keep only sequence `seq`.
    pub fn seq_keep(&mut self, seq: i32) -> Result<(), Error> {
        on_exec!(&mut self.exec, |x| x.mem.seq_keep(seq))
    }

    /// Shift positions `[p0, p1)` of `seq` by `d` (K is re-rotated before the
    /// next decode).
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        self.positions_move("seq_add")?;
        on_exec!(&mut self.exec, |x| x.mem.seq_add(seq, p0, p1, d))
    }

    /// Divide positions `[p0, p1)` of `seq` by `n` (floor).
    pub fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, n: i32) -> Result<(), Error> {
        self.positions_move("seq_div")?;
        on_exec!(&mut self.exec, |x| x.mem.seq_div(seq, p0, p1, n))
    }

    /// Smallest position of `seq`, or -1.
    pub fn seq_pos_min(&self, seq: i32) -> Result<i32, Error> {
        on_exec!(&self.exec, |x| x.mem.seq_pos_min(seq))
    }

    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: i32) -> Result<i32, Error> {
        on_exec!(&self.exec, |x| x.mem.seq_pos_max(seq))
    }

    /// One self-extend step for `seq` before a decode (see
    /// [`glint_kv::self_extend_step`]): the same `seq_add`/`seq_div` calls
    /// as the seq ops, all or nothing; K is re-rotated at the next decode.
    pub fn self_extend(
        &mut self,
        seq: i32,
        n_past: i32,
        ga_i: i32,
        ga_n: i32,
        ga_w: i32,
    ) -> Result<glint_kv::SelfExtendOutcome, Error> {
        self.positions_move("self-extend's shift mode")?;
        Ok(glint_kv::self_extend_step(
            self.cells_mut(),
            seq,
            n_past,
            ga_i,
            ga_n,
            ga_w,
        )?)
    }

    /// Context shift of `seq` (see [`glint_kv::context_shift`]): keep the
    /// first `n_keep` positions, drop half of the rest, slide the remainder
    /// down; all or nothing, K re-rotated at the next decode.
    pub fn context_shift(
        &mut self,
        seq: i32,
        n_keep: i32,
        n_past: i32,
    ) -> Result<glint_kv::ContextShift, Error> {
        self.positions_move("a context shift")?;
        Ok(glint_kv::context_shift(
            self.cells_mut(),
            seq,
            n_keep,
            n_past,
        )?)
    }

    /// Refuse `what`, which moves cached positions, in a context with a
    /// two-window SelfExtend (its grouped K would no longer match).
    fn positions_move(&self, what: &str) -> Result<(), Error> {
        if self.ring_cells().is_some() {
            return Err(Error::Window(format!(
                "{what} moves cached positions, but the sliding-window cache (a ring) has dropped \
                 the cells that would come back into the window; run with --swa-full"
            )));
        }
        if self.has_recurrent() && what != "seq_add" && what != "seq_div" {
            return Err(Error::Recurrent(format!(
                "{what} is not supported for a model with recurrent layers (their state holds \
                 every position seen; it cannot drop or regroup them)"
            )));
        }
        match self.params.self_extend_window {
            Some(_) => Err(Error::Invalid(format!(
                "{what} moves cached positions, which the two-window SelfExtend (window mode) keeps fixed"
            ))),
            None => Ok(()),
        }
    }

    /// Two-window SelfExtend's inputs for `queries` over `span`: the span's
    /// mask split into near pairs (kept in `span.mask`) and distant ones
    /// (returned), and the grouped query and key positions.
    fn window_inputs(
        &self,
        w: crate::params::SelfExtendWindow,
        queries: &[Query],
        span: &mut KvSpan,
    ) -> (Vec<f32>, Vec<i32>, Vec<i32>) {
        let cells = self.cells();
        let kv_size = cells.params().kv_size as usize;
        // pos: [n_kv], each row's cell position (None: empty).
        let pos: Vec<Option<i32>> = (span.kv_start..span.kv_start + span.n_kv)
            .map(|r| {
                cells
                    .cell((r / kv_size) as u32, (r % kv_size) as u32)
                    .map(|c| c.pos)
                    .filter(|&p| p >= 0)
            })
            .collect();
        let mask = span.mask.values_mut();
        let mut far = vec![f32::NEG_INFINITY; mask.len()];
        for (t, q) in queries.iter().enumerate() {
            let row = t * span.n_kv..(t + 1) * span.n_kv;
            for ((m, f), p) in mask[row.clone()].iter_mut().zip(&mut far[row]).zip(&pos) {
                if let Some(p) = *p {
                    if *m != f32::NEG_INFINITY && !w.near(q.pos, p) {
                        (*f, *m) = (*m, f32::NEG_INFINITY);
                    }
                }
            }
        }
        let pos_q = queries.iter().map(|q| w.query_pos(q.pos)).collect();
        let pos_k = queries.iter().map(|q| w.key_pos(q.pos)).collect();
        (far, pos_q, pos_k)
    }

    /// Positions of every non-empty cell, all streams, in cell order.
    pub fn cell_positions(&self) -> Vec<i32> {
        let cells = self.cells();
        let kv_size = cells.params().kv_size;
        (0..cells.n_stream())
            .flat_map(|st| (0..kv_size).map(move |c| (st, c)))
            .filter_map(|(st, c)| cells.cell(st, c).map(|c| c.pos))
            .filter(|&p| p >= 0)
            .collect()
    }

    /// Save sequence `seq`: its cells (positions, pending shifts) and their
    /// K/V rows of every layer, in the sequence state format (magic,
    /// version, model identity, checksum; see [`crate::state`]). Restore
    /// with [`Context::state_seq_load`], in this or another context or
    /// process.
    pub fn state_seq_save(&mut self, seq: i32) -> Result<Vec<u8>, Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .state_write(&l.be, seq))
    }

    /// Restore a sequence saved by [`Context::state_seq_save`] into
    /// `dst_seq` (whose current cells are dropped). The whole blob is
    /// checked first (magic, version, model identity, lengths, checksum,
    /// room): any failure is an error and the cache is as it was.
    pub fn state_seq_load(&mut self, bytes: &[u8], dst_seq: i32) -> Result<(), Error> {
        self.state_seq_load_prefix(bytes, dst_seq, i32::MAX)
    }

    /// [`Context::state_seq_load`] of the saved positions below `end_pos`
    /// only (the whole blob is still checked): a prompt cache saved by a
    /// larger context restores the prefix a new prompt reuses, without
    /// needing room for the rest.
    pub fn state_seq_load_prefix(
        &mut self,
        bytes: &[u8],
        dst_seq: i32,
        end_pos: i32,
    ) -> Result<(), Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .state_read(&l.be, bytes, dst_seq, end_pos))
    }

    /// Whether the model has recurrent layers (LFM2's short convolutions),
    /// whose state cannot be cut back to an earlier position: prefix reuse
    /// then goes through [`Context::checkpoint`]s.
    pub fn has_recurrent(&self) -> bool {
        on_exec!(&self.exec, |x| x.mem.rec.is_active())
    }

    /// Whether prefix reuse may need [`Context::checkpoint`]s: the memory
    /// has recurrent layers, or a sliding-window ring, and so cannot always
    /// be cut back to an earlier position.
    pub fn needs_checkpoints(&self) -> bool {
        on_exec!(&self.exec, |x| x.mem.needs_checkpoints())
    }

    /// Save sequence `seq`'s recurrent state at its current last position
    /// (llama-server's context checkpoint; `None` without recurrent layers
    /// or for an empty sequence). Small: each recurrent layer's state, not
    /// the K/V rows.
    pub fn checkpoint(&mut self, seq: i32) -> Result<Option<Checkpoint>, Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .checkpoint(&l.be, seq))
    }

    /// Take sequence `seq` back to checkpoint `cp` (one of this sequence's,
    /// on tokens it still holds): cells past its position dropped, the
    /// recurrent state restored. A next token then decodes at `cp.pos() + 1`.
    pub fn restore_checkpoint(&mut self, seq: i32, cp: &Checkpoint) -> Result<(), Error> {
        let model = self.model.clone();
        with_exec!(model.backend(), &mut self.exec, |l, x| x
            .mem
            .restore(&l.be, seq, cp))
    }

    /// Empty the cache.
    pub fn clear(&mut self) {
        on_exec!(&mut self.exec, |x| SeqMemory::clear(&mut x.mem));
        self.out = Outputs::default();
    }
}

/// Refuse a context whose KV cache (cells and K/V rows) would not fit in
/// what the process may still take, before allocating any of it: `-c
/// 4294967295` is an error with the numbers, not an abort.
fn check_memory(model: &Model, params: &ContextParams, kv_size: u32) -> Result<(), Error> {
    let hp = model.hparams();
    let n_stream = if params.kv_unified {
        1
    } else {
        params.n_seq_max as u64
    };
    let n_rows = n_stream * kv_size as u64;
    let n = hp.n_embd_kv() as u64;
    let row = |t: crate::CacheType| t.ggml().bytes_for(n).unwrap_or(u64::MAX);
    // Per cell: a K and a V row in every layer, and the cell's own entry
    // (position, shift, sequence set: under 64 bytes).
    let per_row = (hp.n_layer as u64)
        .saturating_mul(row(params.type_k).saturating_add(row(params.type_v)))
        .saturating_add(64);
    let needed = n_rows.saturating_mul(per_row);
    if !model.backend().uses_host_memory() {
        // Device memory: the backend refuses a buffer it cannot make.
        return Ok(());
    }
    match crate::measure::memory_limit() {
        Some(available) if needed > available => Err(Error::OutOfMemory {
            what: format!(
                "a KV cache of {n_rows} cells ({} layers, {n} values per row)",
                hp.n_layer
            ),
            needed,
            available,
        }),
        _ => Ok(()),
    }
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn forward_ubatch<B: Backend>(
    l: &Loaded<B>,
    hp: &HParams,
    x: &mut Exec<B>,
    ub: &UBatch,
) -> Result<bool, Error> {
    x.scratch.reserve_outputs(&l.be, hp, ub.outputs.len())?;
    // The backend's copies of the cells, which masks are built from.
    x.mem.kv.sync_cells(&l.be)?;
    if let Some(r) = x.mem.swa.as_mut() {
        r.cache.sync_cells(&l.be)?;
    }
    let mem = Memories {
        kv: &x.mem.kv.storage,
        swa: x.mem.swa.as_ref().map(|r| &r.cache.storage),
        conv: &x.mem.rec.storage,
    };
    let scratch = &x.scratch;
    let out = l.be.enter(|| forward(&l.be, hp, &l.w, &mem, scratch, ub))?;
    let has = out.is_some();
    x.pending = out;
    Ok(has)
}

fn read_logits<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    count: usize,
    n_vocab: usize,
) -> Result<Vec<f32>, Error> {
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("no pending logits on the device".into()))?;
    let mut buf = vec![0u8; count * n_vocab * 4];
    l.be.read(&out.logits, 0, &mut buf)?;
    Ok(bytemuck::cast_slice::<u8, f32>(&buf).to_vec())
}

fn read_hidden<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    count: usize,
    n_embd: usize,
) -> Result<Vec<f32>, Error> {
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("no pending outputs on the device".into()))?;
    let mut buf = vec![0u8; count * n_embd * 4];
    l.be.read(&out.hidden, 0, &mut buf)?;
    Ok(bytemuck::cast_slice::<u8, f32>(&buf).to_vec())
}

/// Descending logit, then ascending id (the samplers' order).
fn cmp_desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Candidates `c` (at least the `k` best, any order) sorted and cut to
/// `k`; `None` where a NaN or `+inf` is among them, before the cut (a
/// negative NaN sorts last in `total_cmp`, but the device ranks every
/// NaN first and so returns it).
fn sorted_top_k(k: usize, mut c: Candidates) -> Option<Candidates> {
    if c.iter().any(|(_, v)| v.is_nan() || *v == f32::INFINITY) {
        return None;
    }
    c.sort_unstable_by(cmp_desc);
    c.truncate(k);
    (c.len() == k).then_some(c)
}

/// Backend::top_k of the first `count` pending output rows, run and read
/// in one go: `[count, 1 + 2 TOPK_CAP]` i32.
fn read_top_k<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    count: usize,
    k: usize,
) -> Result<Vec<i32>, Error> {
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("no pending logits on the device".into()))?;
    l.be.top_k(&out.logits, k, &out.topk)?;
    let mut buf = vec![0u8; count * (1 + 2 * glint_model::TOPK_CAP) * 4];
    l.be.read(&out.topk, 0, &mut buf)?;
    Ok(bytemuck::cast_slice::<u8, i32>(&buf).to_vec())
}

/// `decode_greedy_seqs`'s read of the pending output's first `n` greedy
/// tokens: kept from the step that made them, or started now.
fn start_reading<B: Backend>(l: &Loaded<B>, x: &mut Exec<B>, n: usize) -> Result<(), Error> {
    if x.reading.is_none() {
        let out = x.pending.as_ref().ok_or_else(|| {
            Error::Invalid("decode_greedy: the last decode's output was not kept".into())
        })?;
        x.reading = Some(l.be.read_start(&out.argmax, 0, 4 * n)?);
    }
    Ok(())
}

/// After a chained step of `n` tokens was recorded: start it with the
/// read of its `n` greedy tokens (kept for the next call), then finish
/// the read of the tokens it decoded, and return those.
fn chain_reading<B: Backend>(l: &Loaded<B>, x: &mut Exec<B>, n: usize) -> Result<Vec<u32>, Error> {
    let prev = x
        .reading
        .take()
        .ok_or_else(|| Error::Internal("decode_greedy: no read in flight".into()))?;
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("decode_greedy: the step left no output".into()))?;
    x.reading = Some(l.be.read_start(&out.argmax, 0, 4 * n)?);
    let mut t = vec![0u8; 4 * n];
    l.be.read_finish(prev, &mut t)?;
    Ok(t.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).max(0) as u32)
        .collect())
}

/// The argmax of the first `count` pending output rows, in one read.
fn read_argmax<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    count: usize,
) -> Result<Vec<u32>, Error> {
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("no pending logits on the device".into()))?;
    let mut buf = vec![0u8; count * 4];
    l.be.read(&out.argmax, 0, &mut buf)?;
    Ok(buf
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).max(0) as u32)
        .collect())
}

/// What a micro-batch attends to (see [`Context::kv_span`]).
struct KvSpan {
    /// First K/V row.
    kv_start: usize,
    /// Rows from there.
    n_kv: usize,
    /// mask, mask_swa: [n_kv, n_tokens] f32, 0 or -inf
    mask: SpanMask,
    mask_swa: Option<SpanMask>,
}

/// A mask of a [`KvSpan`].
enum SpanMask {
    /// Built here: `[n_kv, n_tokens]` f32.
    Values(Vec<f32>),
    /// For the backend to build from its copy of the cells.
    Cells(KqMask),
}

impl SpanMask {
    fn as_mask(&self) -> Mask<'_> {
        match self {
            SpanMask::Values(v) => Mask::Values(v),
            SpanMask::Cells(p) => Mask::Cells(*p),
        }
    }

    /// The values built here (empty for a mask the backend builds).
    fn values_mut(&mut self) -> &mut [f32] {
        match self {
            SpanMask::Values(v) => v,
            SpanMask::Cells(_) => &mut [],
        }
    }
}
