//! `Model`, `Context` and `Batch`: the library API another crate uses.
//!
//! A [`Model`] is a memory-mapped GGUF file with its weights on a backend. A
//! [`Context`] holds one KV cache (cells from `glint-kv`, K/V rows on the
//! backend) and decodes [`Batch`]es of tokens at explicit positions and
//! sequence ids, keeping logits only for the tokens that ask.

use std::path::Path;

use glint_backend::{Backend, GgmlType, MemoryReport, Tensor};
use glint_gguf::GgufFile;
use glint_kv::{KvCells, KvParams, MaskParams, Query, StreamLayout, SwaType, TokenMeta};
use glint_model::{forward, HParams, UBatch, Weights};

use crate::engine::{with_exec, Engine, Exec, ExecState, Loaded};
use crate::Error;

/// Which compute backend runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// The cpu backend (plain Rust + rayon).
    Cpu,
    /// The wgpu backend (WGSL on Vulkan, Metal or DX12).
    Wgpu,
    /// wgpu on a real GPU adapter, else cpu (a software adapter is for
    /// checking shaders, not for speed).
    #[default]
    Auto,
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "cpu" => Ok(BackendKind::Cpu),
            "wgpu" | "gpu" => Ok(BackendKind::Wgpu),
            "auto" => Ok(BackendKind::Auto),
            other => Err(Error::Invalid(format!(
                "backend `{other}` (cpu, wgpu, auto)"
            ))),
        }
    }
}

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct ModelParams {
    /// Backend choice.
    pub backend: BackendKind,
    /// wgpu adapter index (see `glint devices`); `None` = the default one.
    pub adapter: Option<usize>,
    /// cpu threads; `None` = all cores.
    pub n_threads: Option<usize>,
    /// cpu numerics: ggml's (default; follows llama.cpp) or plain f32 (what
    /// the WGSL kernels compute).
    pub cpu_precision: glint_cpu::Precision,
}

/// A loaded model: the mapped GGUF file, its hyperparameters and its weights
/// on a backend.
pub struct Model {
    file: GgufFile,
    hparams: HParams,
    tokenizer: glint_tokenizer::Tokenizer,
    pub(crate) engine: Engine,
}

impl Model {
    /// Map `path`, read its hyperparameters and hand its weights to the
    /// backend. An unsupported architecture or tensor type is an error
    /// naming it.
    pub fn load(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model, Error> {
        let path = path.as_ref();
        let file = GgufFile::open(path).map_err(|e| Error::Load {
            path: path.display().to_string(),
            err: Box::new(e.into()),
        })?;
        Model::from_gguf(file, params).map_err(|e| Error::Load {
            path: path.display().to_string(),
            err: Box::new(e),
        })
    }

    /// A model from an already opened GGUF file.
    pub fn from_gguf(file: GgufFile, params: &ModelParams) -> Result<Model, Error> {
        let hparams = HParams::from_gguf(&file)?;
        let tokenizer = glint_tokenizer::Tokenizer::from_gguf(&file)?;
        if tokenizer.n_vocab() != hparams.n_vocab {
            return Err(Error::Invalid(format!(
                "the tokenizer has {} tokens, the output head {}",
                tokenizer.n_vocab(),
                hparams.n_vocab
            )));
        }
        let gpu = |adapter_index| {
            glint_gpu::GpuBackend::new(glint_gpu::GpuOptions {
                adapter_index,
                ..Default::default()
            })
        };
        let backend = match params.backend {
            BackendKind::Cpu => None,
            BackendKind::Wgpu => Some(gpu(params.adapter)?),
            // A software adapter (lavapipe, WARP) is slower than the cpu
            // backend: auto takes wgpu only on a real GPU.
            BackendKind::Auto => gpu(params.adapter)
                .ok()
                .filter(|g| g.adapter_info().device_type != glint_gpu::wgpu::DeviceType::Cpu),
        };
        let engine = match backend {
            None => {
                let be =
                    glint_cpu::CpuBackend::with_precision(params.n_threads, params.cpu_precision)?;
                let w = Weights::load(&file, &hparams, &be)?;
                Engine::Cpu(Loaded { be, w })
            }
            Some(be) => {
                let w = Weights::load(&file, &hparams, &be)?;
                Engine::Gpu(Loaded { be, w })
            }
        };
        Ok(Model {
            file,
            hparams,
            tokenizer,
            engine,
        })
    }

    /// The tokenizer built from the file's metadata.
    pub fn tokenizer(&self) -> &glint_tokenizer::Tokenizer {
        &self.tokenizer
    }

    /// Hyperparameters.
    pub fn hparams(&self) -> &HParams {
        &self.hparams
    }

    /// The GGUF file (metadata, tokenizer data).
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.hparams.n_vocab
    }

    /// The backend's name, e.g. `cpu (2 threads)`.
    pub fn backend_name(&self) -> String {
        self.engine.name()
    }

    /// What the backend holds now (weights, KV caches, scratch of live contexts).
    pub fn memory(&self) -> MemoryReport {
        self.engine.memory()
    }
}

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CacheType {
    /// Half precision (llama.cpp's default).
    #[default]
    F16,
    /// Single precision.
    F32,
}

impl CacheType {
    fn ggml(self) -> GgmlType {
        match self {
            CacheType::F16 => GgmlType::F16,
            CacheType::F32 => GgmlType::F32,
        }
    }
}

impl std::str::FromStr for CacheType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(CacheType::F16),
            "f32" => Ok(CacheType::F32),
            other => Err(Error::Invalid(format!("cache type `{other}` (f16, f32)"))),
        }
    }
}

/// How to size a context.
#[derive(Clone, Debug)]
pub struct ContextParams {
    /// Cache slots per sequence stream (the context size).
    pub n_ctx: u32,
    /// Most tokens one `decode` may carry.
    pub n_batch: u32,
    /// Most tokens one forward pass carries (a batch is split into these).
    pub n_ubatch: u32,
    /// Sequence ids are `0..n_seq_max`.
    pub n_seq_max: u32,
    /// K cache type.
    pub type_k: CacheType,
    /// V cache type.
    pub type_v: CacheType,
    /// One stream shared by all sequences (true), or one per sequence.
    pub kv_unified: bool,
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            type_k: CacheType::F16,
            type_v: CacheType::F16,
            kv_unified: true,
        }
    }
}

/// Tokens to decode, each at an explicit position in one or more sequences.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    tokens: Vec<i32>,
    pos: Vec<i32>,
    seq_ids: Vec<Vec<i32>>,
    logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// A batch of one sequence's tokens at positions `pos0..`, logits for the
    /// last token only.
    pub fn from_tokens(tokens: &[u32], pos0: i32, seq_id: i32) -> Batch {
        let mut b = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            b.add(t, pos0 + i as i32, &[seq_id], i + 1 == tokens.len());
        }
        b
    }

    /// Append a token.
    pub fn add(&mut self, token: u32, pos: i32, seq_ids: &[i32], logits: bool) {
        self.tokens.push(token.min(i32::MAX as u32) as i32);
        self.pos.push(pos);
        self.seq_ids.push(seq_ids.to_vec());
        self.logits.push(logits);
    }

    /// Remove every token.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.pos.clear();
        self.seq_ids.clear();
        self.logits.clear();
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// Logits of the last `decode`, by batch index.
#[derive(Default)]
struct Outputs {
    /// `[n_tokens]`: output row of each batch token, or -1.
    row_of: Vec<i32>,
    /// `[n_rows, n_vocab]` rows read back so far (`None` until read).
    host: Vec<Option<Vec<f32>>>,
    /// Output rows that are still on the device, in the last micro-batch's
    /// output (`first row`, count).
    pending: Option<(usize, usize)>,
}

/// One KV cache and the state to decode into it.
pub struct Context<'m> {
    model: &'m Model,
    params: ContextParams,
    cells: KvCells,
    exec: ExecState,
    out: Outputs,
}

impl<'m> Context<'m> {
    /// A context for `model`. Sizes are checked (`n_ubatch <= n_batch`,
    /// `n_seq_max` within the cache's limit, …).
    pub fn new(model: &'m Model, params: ContextParams) -> Result<Context<'m>, Error> {
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
        let layout = if params.kv_unified {
            StreamLayout::Unified
        } else {
            StreamLayout::PerSeq
        };
        let kvp = KvParams {
            kv_size: params.n_ctx,
            n_seq_max: params.n_seq_max,
            layout,
            // Attention looks at whole multiples of 256 slots (as llama.cpp),
            // but never more than the stream has.
            n_pad: 256.min(params.n_ctx),
        };
        let cells = KvCells::new(kvp)?;
        let n_rows = (cells.n_stream() * params.n_ctx) as usize;
        let exec = model.engine.new_exec(
            &model.hparams,
            n_rows,
            params.n_ubatch as usize,
            params.n_ctx as usize,
            params.type_k.ggml(),
            params.type_v.ggml(),
        )?;
        Ok(Context {
            model,
            params,
            cells,
            exec,
            out: Outputs::default(),
        })
    }

    /// The model.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The parameters (with `n_ubatch` clamped to `n_batch`).
    pub fn params(&self) -> &ContextParams {
        &self.params
    }

    /// Cache slots per stream.
    pub fn n_ctx(&self) -> u32 {
        self.params.n_ctx
    }

    /// The KV cells (read-only view: positions, sequences, pending shifts).
    pub fn cells(&self) -> &KvCells {
        &self.cells
    }

    /// Run `batch` through the model. All or nothing: a batch that does not
    /// fit, names an unknown sequence, a token outside the vocabulary, or
    /// gives one sequence non-increasing positions is an error and changes
    /// nothing.
    pub fn decode(&mut self, batch: &Batch) -> Result<(), Error> {
        let n = batch.len();
        if n == 0 {
            return Err(Error::Batch("empty batch".into()));
        }
        if n > self.params.n_batch as usize {
            return Err(Error::Batch(format!(
                "{n} tokens in one batch, n_batch is {}",
                self.params.n_batch
            )));
        }
        let n_vocab = self.model.hparams.n_vocab;
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
        let plan = self.cells.find_slots(&metas)?;

        // From here on the cache changes; on failure it is restored.
        let snapshot = self.cells.clone();
        let result = self.decode_planned(batch, &plan);
        if result.is_err() {
            self.cells = snapshot;
            self.out = Outputs::default();
        }
        result
    }

    fn decode_planned(&mut self, batch: &Batch, plan: &glint_kv::SlotPlan) -> Result<(), Error> {
        self.apply_kshift()?;
        self.cells.apply(plan)?;
        let hp = &self.model.hparams;
        let n = batch.len();
        let slots = plan.slots();
        let rows: Vec<i32> = plan.rows().iter().map(|&r| r as i32).collect();

        // Output rows in batch order.
        let mut row_of = vec![-1i32; n];
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
            pending: None,
        };

        // Micro-batches: runs of at most n_ubatch tokens of one stream.
        let n_ubatch = self.params.n_ubatch as usize;
        let mut start = 0;
        while start < n {
            let stream = slots[start].stream;
            let mut end = start + 1;
            while end < n && end - start < n_ubatch && slots[end].stream == stream {
                end += 1;
            }
            let queries: Vec<Query> = (start..end)
                .map(|i| Query {
                    seq_id: batch.seq_ids[i][0],
                    pos: batch.pos[i],
                })
                .collect();
            let n_kv = self.cells.n_kv(stream);
            let mask = self.cells.mask(&queries, n_kv, &MaskParams::causal())?;
            let has_swa = hp.swa_layers.iter().any(|&x| x);
            let mask_swa = if has_swa {
                let p = MaskParams {
                    swa_type: SwaType::Standard,
                    n_swa: hp.n_swa as u32,
                    ..MaskParams::causal()
                };
                Some(self.cells.mask(&queries, n_kv, &p)?)
            } else {
                None
            };
            let outputs: Vec<i32> = (start..end)
                .filter(|&i| batch.logits[i])
                .map(|i| (i - start) as i32)
                .collect();
            let first_row = self.out.row_of[start..end]
                .iter()
                .copied()
                .find(|&r| r >= 0);
            let ub = UBatch {
                tokens: &batch.tokens[start..end],
                pos: &batch.pos[start..end],
                rows: &rows[start..end],
                kv_start: (stream * self.params.n_ctx) as usize,
                n_kv: n_kv as usize,
                mask: &mask,
                mask_swa: mask_swa.as_deref(),
                outputs: &outputs,
            };
            // Logits still on the device from the previous micro-batch are
            // read before its scratch is reused.
            self.read_pending()?;
            let model = self.model;
            let has_out = with_exec!(&model.engine, &mut self.exec, |l, x| run_ubatch(
                l, hp, x, &ub
            ))?;
            if has_out {
                if let Some(r) = first_row {
                    self.out.pending = Some((r as usize, outputs.len()));
                }
            }
            start = end;
        }
        Ok(())
    }

    /// Rotate cached K by the pending shifts (K-shift), if any.
    fn apply_kshift(&mut self) -> Result<(), Error> {
        let Some(plan) = self.cells.take_shifts() else {
            return Ok(());
        };
        let hp = &self.model.hparams;
        let model = self.model;
        with_exec!(&model.engine, &mut self.exec, |l, x| kshift(
            l,
            hp,
            x,
            &plan.shifts
        ))
    }

    fn read_pending(&mut self) -> Result<(), Error> {
        let Some((first, count)) = self.out.pending.take() else {
            return Ok(());
        };
        let n_vocab = self.model.hparams.n_vocab;
        let model = self.model;
        let all = with_exec!(&model.engine, &mut self.exec, |l, x| read_logits(
            l, x, count, n_vocab
        ))?;
        let cap = self.model.hparams.final_softcap;
        for (k, row) in all.chunks_exact(n_vocab).enumerate() {
            let mut row = row.to_vec();
            if cap > 0.0 {
                for v in &mut row {
                    *v = cap * (*v / cap).tanh();
                }
            }
            self.out.host[first + k] = Some(row);
        }
        Ok(())
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
        match self.out.pending {
            Some((first, count)) if r >= first && r < first + count => {
                let model = self.model;
                with_exec!(&model.engine, &mut self.exec, |l, x| read_argmax(
                    l,
                    x,
                    r - first
                ))
            }
            _ => Err(Error::Internal(format!(
                "logits row {r} is neither read nor pending"
            ))),
        }
    }

    /// Drop sequence `seq` (< 0: all) from positions `[p0, p1)`.
    pub fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<(), Error> {
        Ok(self.cells.seq_rm(seq, p0, p1)?)
    }

    /// Add `dst` to every slot of `src` in `[p0, p1)`.
    pub fn seq_cp(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let copies = self.cells.seq_cp(src, dst, p0, p1)?;
        if copies.is_empty() {
            return Ok(());
        }
        let pairs: Vec<(i32, i32)> = copies
            .iter()
            .map(|c| (c.src_row as i32, c.dst_row as i32))
            .collect();
        let hp = &self.model.hparams;
        let model = self.model;
        with_exec!(&model.engine, &mut self.exec, |l, x| copy_rows(
            l, hp, x, &pairs
        ))
    }

    /// Keep only sequence `seq`.
    pub fn seq_keep(&mut self, seq: i32) -> Result<(), Error> {
        Ok(self.cells.seq_keep(seq)?)
    }

    /// Shift positions `[p0, p1)` of `seq` by `d` (K is re-rotated before the
    /// next decode).
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        Ok(self.cells.seq_add(seq, p0, p1, d)?)
    }

    /// Divide positions `[p0, p1)` of `seq` by `n` (floor).
    pub fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, n: i32) -> Result<(), Error> {
        Ok(self.cells.seq_div(seq, p0, p1, n)?)
    }

    /// Smallest position of `seq`, or -1.
    pub fn seq_pos_min(&self, seq: i32) -> Result<i32, Error> {
        Ok(self.cells.seq_pos_min(seq)?)
    }

    /// Largest position of `seq`, or -1.
    pub fn seq_pos_max(&self, seq: i32) -> Result<i32, Error> {
        Ok(self.cells.seq_pos_max(seq)?)
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
        Ok(glint_kv::self_extend_step(
            &mut self.cells,
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
        Ok(glint_kv::context_shift(
            &mut self.cells,
            seq,
            n_keep,
            n_past,
        )?)
    }

    /// Positions of every non-empty slot, all streams, in slot order.
    pub fn cell_positions(&self) -> Vec<i32> {
        let kv_size = self.params.n_ctx;
        (0..self.cells.n_stream())
            .flat_map(|st| (0..kv_size).map(move |slot| (st, slot)))
            .filter_map(|(st, slot)| self.cells.cell(st, slot).map(|c| c.pos))
            .filter(|&p| p >= 0)
            .collect()
    }

    /// What a saved sequence must agree on with this context.
    fn identity(&self) -> glint_kv::ModelIdentity {
        let hp = &self.model.hparams;
        let (tk, tv) = (self.params.type_k.ggml(), self.params.type_v.ggml());
        let n = hp.n_embd_kv() as u64;
        glint_kv::ModelIdentity {
            arch: hp.arch.name.to_string(),
            n_layer: hp.n_layer as u32,
            n_embd_k_gqa: hp.n_embd_kv() as u32,
            n_embd_v_gqa: hp.n_embd_kv() as u32,
            type_k: tk.id(),
            type_v: tv.id(),
            k_row_bytes: tk.bytes_for(n).unwrap_or(0),
            v_row_bytes: tv.bytes_for(n).unwrap_or(0),
        }
    }

    /// Save sequence `seq`: its slots (positions, pending shifts) and their
    /// K/V rows of every layer, in `glint_kv`'s state format (magic,
    /// version, model identity, checksum). Restore with
    /// [`Context::state_seq_load`], in this or another context or process.
    pub fn state_seq_save(&mut self, seq: i32) -> Result<Vec<u8>, Error> {
        let id = self.identity();
        let w = self.cells.state_write(seq, &id)?;
        let mut out = w.bytes;
        let storage = usize::try_from(w.storage_bytes)
            .map_err(|_| Error::Invalid(format!("{} bytes of state", w.storage_bytes)))?;
        let start = out.len();
        out.resize(start + storage, 0);
        let rows = w.src_rows;
        let model = self.model;
        with_exec!(&model.engine, &mut self.exec, |l, x| read_kv_rows(
            l,
            x,
            &rows,
            &mut out[start..]
        ))?;
        Ok(out)
    }

    /// Restore a sequence saved by [`Context::state_seq_save`] into
    /// `dst_seq` (whose current slots are dropped). The whole blob is
    /// checked first (magic, version, model identity, lengths, checksum,
    /// room): any failure is an error and the cache is as it was.
    pub fn state_seq_load(&mut self, bytes: &[u8], dst_seq: i32) -> Result<(), Error> {
        let id = self.identity();
        let mut next = self.cells.clone();
        let r = next.state_read(bytes, dst_seq, &id)?;
        let model = self.model;
        with_exec!(&model.engine, &mut self.exec, |l, x| write_kv_rows(
            l,
            x,
            &r.dst_rows,
            &bytes[r.storage.clone()]
        ))?;
        self.cells = next;
        Ok(())
    }

    /// Empty the cache.
    pub fn clear(&mut self) {
        self.cells.clear();
        self.out = Outputs::default();
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

fn run_ubatch<B: Backend>(
    l: &Loaded<B>,
    hp: &HParams,
    x: &mut Exec<B>,
    ub: &UBatch,
) -> Result<bool, Error> {
    x.scratch.reserve_outputs(&l.be, hp, ub.outputs.len())?;
    let (kv, scratch) = (&x.kv, &x.scratch);
    let out = l.be.enter(|| forward(&l.be, hp, &l.w, kv, scratch, ub))?;
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

fn read_argmax<B: Backend>(l: &Loaded<B>, x: &mut Exec<B>, r: usize) -> Result<u32, Error> {
    let out = x
        .pending
        .as_ref()
        .ok_or_else(|| Error::Internal("no pending logits on the device".into()))?;
    let mut buf = [0u8; 4];
    l.be.read(&out.argmax, r * 4, &mut buf)?;
    Ok(i32::from_le_bytes(buf).max(0) as u32)
}

fn kshift<B: Backend>(
    l: &Loaded<B>,
    hp: &HParams,
    x: &mut Exec<B>,
    shifts: &[i32],
) -> Result<(), Error> {
    l.be.write(&x.shifts, 0, bytemuck::cast_slice(shifts))?;
    for (il, k) in x.kv.k.iter().enumerate() {
        l.be.kshift(k, &x.shifts, &hp.rope(il, hp.n_head_kv))?;
    }
    Ok(())
}

/// Copy whole K/V rows (every layer) from `src` rows to `dst` rows: read as
/// f32 with `get_rows`, written back with `set_rows` (exact for f16 and f32).
fn copy_rows<B: Backend>(
    l: &Loaded<B>,
    hp: &HParams,
    x: &mut Exec<B>,
    pairs: &[(i32, i32)],
) -> Result<(), Error> {
    let be = &l.be;
    let n = pairs.len();
    let alloc = |ty: GgmlType, ne: [usize; 4], label: &str| {
        be.alloc(glint_backend::TensorDesc {
            ty,
            ne,
            label: label.into(),
            usage: glint_backend::Usage::Scratch,
        })
    };
    let src_idx = alloc(GgmlType::I32, [n, 1, 1, 1], "copy_src")?;
    let dst_idx = alloc(GgmlType::I32, [n, 1, 1, 1], "copy_dst")?;
    let tmp = alloc(GgmlType::F32, [hp.n_embd_kv(), n, 1, 1], "copy_rows")?;
    let src: Vec<i32> = pairs.iter().map(|p| p.0).collect();
    let dst: Vec<i32> = pairs.iter().map(|p| p.1).collect();
    be.write(&src_idx, 0, bytemuck::cast_slice(&src))?;
    be.write(&dst_idx, 0, bytemuck::cast_slice(&dst))?;
    for t in x.kv.k.iter().chain(x.kv.v.iter()) {
        be.get_rows(t, &src_idx, &tmp)?;
        be.set_rows(&tmp, &dst_idx, t)?;
    }
    be.sync()?;
    Ok(())
}

/// Runs of consecutive rows, in order: `(first row, count)`.
fn row_runs(rows: &[u64]) -> Vec<(u64, usize)> {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for &r in rows {
        match runs.last_mut() {
            Some((first, n)) if *first + *n as u64 == r => *n += 1,
            _ => runs.push((r, 1)),
        }
    }
    runs
}

/// Copy the K rows (every layer), then the V rows, of `rows` into `out`
/// (`state_seq_save`'s storage layout). Consecutive rows are read at once.
fn read_kv_rows<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    rows: &[u64],
    out: &mut [u8],
) -> Result<(), Error> {
    let runs = row_runs(rows);
    let mut at = 0;
    for t in x.kv.k.iter().chain(x.kv.v.iter()) {
        let rb = t.desc().row_bytes();
        for &(first, n) in &runs {
            let len = n * rb;
            l.be.read(t, first as usize * rb, &mut out[at..at + len])?;
            at += len;
        }
    }
    if at != out.len() {
        return Err(Error::Internal(format!(
            "state storage: {at} bytes read, {} expected",
            out.len()
        )));
    }
    Ok(())
}

/// Write `data` (K rows of every layer, then V rows, in `rows` order) into
/// the cache rows `rows`.
fn write_kv_rows<B: Backend>(
    l: &Loaded<B>,
    x: &mut Exec<B>,
    rows: &[u64],
    data: &[u8],
) -> Result<(), Error> {
    let runs = row_runs(rows);
    let mut at = 0;
    for t in x.kv.k.iter().chain(x.kv.v.iter()) {
        let rb = t.desc().row_bytes();
        for &(first, n) in &runs {
            let len = n * rb;
            let src = data.get(at..at + len).ok_or_else(|| {
                Error::Internal(format!(
                    "state storage ends at {}, row needs {}",
                    data.len(),
                    at + len
                ))
            })?;
            l.be.write(t, first as usize * rb, src)?;
            at += len;
        }
    }
    l.be.sync()?;
    Ok(())
}
