//! The compute-backend interface of glint.
//!
//! The forward pass is written once against [`Backend`]; `glint-cpu` (plain
//! Rust + rayon, the oracle) and `glint-gpu` (WGSL through wgpu) implement it.
//! The interface is deliberately small: tensors are flat device buffers with
//! a ggml-style shape (`ne[0]` is the contiguous dimension), and every op
//! names its input and output shapes in its doc comment.
//!
//! Ordering: ops run in call order. A backend may queue them (the wgpu one
//! records into a command encoder); [`Backend::read`] and [`Backend::sync`]
//! wait for everything queued before them.
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::ops::Range;
use std::sync::Arc;

pub use glint_quant::GgmlType;

pub mod check;
mod params;
pub use params::{
    AttnParams, Glu, KqMask, MaskWindow, PostAdd, QkNorm, RopeMode, RopeParams, Unary, CELL_WORDS,
};

/// Errors of a backend op. Each names the op and what did not fit.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Shapes of an op's tensors do not agree.
    #[error("{op}: shape mismatch: {detail}")]
    Shape {
        /// The op (e.g. `mul_mat`).
        op: &'static str,
        /// What did not fit, with the values.
        detail: String,
    },
    /// The op does not support this element type in this position.
    #[error("{op}: unsupported type {ty} for {what}")]
    Type {
        /// The op.
        op: &'static str,
        /// The offending type.
        ty: GgmlType,
        /// Which operand.
        what: &'static str,
    },
    /// A byte range outside a tensor.
    #[error("{op}: bytes {start}..{end} outside tensor `{label}` of {size} bytes")]
    Range {
        /// The op (`read`, `write`).
        op: &'static str,
        /// Tensor label.
        label: String,
        /// First byte asked for.
        start: usize,
        /// One past the last byte asked for.
        end: usize,
        /// Tensor size in bytes.
        size: usize,
    },
    /// The device could not allocate or is lost; validation errors land here too.
    #[error("device: {0}")]
    Device(String),
}

/// Result of backend calls.
pub type Result<T> = std::result::Result<T, BackendError>;

/// What a tensor's memory is for, so a backend can report what it holds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Usage {
    /// Model weights (uploaded once).
    Weights,
    /// The KV cache.
    KvCache,
    /// Activations and other per-batch scratch.
    Scratch,
}

/// Shape and type of a tensor: `ne[0]` is the contiguous (row) dimension,
/// as in ggml; unused trailing dims are 1. Rows are `ne[0]` elements of
/// `ty`, stored back to back (no padding), so a row of a quantized type is
/// `ty.bytes_for(ne[0])` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// Element type.
    pub ty: GgmlType,
    /// Extents, innermost first.
    pub ne: [usize; 4],
    /// A name for errors and memory reports (e.g. `blk.0.attn_q.weight`).
    pub label: std::sync::Arc<str>,
    /// What the memory is for.
    pub usage: Usage,
}

impl TensorDesc {
    /// Number of elements.
    pub fn n_elements(&self) -> usize {
        self.ne.iter().product()
    }
    /// Number of rows (`ne[1] * ne[2] * ne[3]`).
    pub fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.bytes_for(self.ne[0] as u64).unwrap_or(0) as usize
    }
    /// Bytes of the whole tensor.
    pub fn n_bytes(&self) -> usize {
        self.row_bytes() * self.n_rows()
    }
}

/// A backend's handle to a tensor living on it.
pub trait Tensor: Send + Sync {
    /// Shape, type, label, usage.
    fn desc(&self) -> &TensorDesc;
}

/// Bytes owned elsewhere (usually the model file's mmap), shared without
/// copying: the cpu backend computes straight from them, the wgpu backend
/// uploads from them once.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl SharedBytes {
    /// A window `range` of `owner`'s bytes. Errors if it is out of bounds.
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Result<Self> {
        let len = (*owner).as_ref().len();
        if range.start > range.end || range.end > len {
            return Err(BackendError::Range {
                op: "shared_bytes",
                label: String::new(),
                start: range.start,
                end: range.end,
                size: len,
            });
        }
        Ok(SharedBytes { owner, range })
    }
    /// Owned bytes (tests, synthetic data).
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        SharedBytes {
            owner: Arc::new(v),
            range: 0..len,
        }
    }
    /// The first `len` bytes (all of them if `len` is larger).
    pub fn prefix(&self, len: usize) -> Self {
        let end = self.range.start + len.min(self.range.len());
        SharedBytes {
            owner: Arc::clone(&self.owner),
            range: self.range.start..end,
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.range.clone()]
    }
}

/// Device memory held, by usage.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// Bytes of model weights held by the backend (for the cpu backend:
    /// weights computed from the mmap are not counted; they are the file's pages).
    pub weights: usize,
    /// Bytes of KV cache.
    pub kv_cache: usize,
    /// Bytes of scratch (activations, masks, ids).
    pub scratch: usize,
    /// Bytes the backend's threads keep for themselves between ops (the cpu
    /// backend: each thread's quantized activations and prepared tile
    /// columns, grown to the largest op it ran; counted over the process,
    /// since the threads are the process's). 0 where there are none.
    pub thread_scratch: usize,
}

/// A compute backend. Element types: activations are F32; integer inputs
/// (token ids, positions, slot indices, shifts) are I32; weights may be any
/// type whose `support()` is `Compute`; KV caches are F32 or F16.
///
/// Every op checks its shapes and types and returns
/// [`BackendError::Shape`]/[`BackendError::Type`] instead of computing garbage.
/// An op's output is never one of its inputs (a GPU cannot bind one buffer
/// as both); only [`Backend::kshift`] works in place, by design.
pub trait Backend: Send + Sync {
    /// The backend's tensor handle.
    type Tensor: Tensor;

    /// A short name, e.g. `cpu (2 threads)` or `wgpu: llvmpipe (Vulkan)`.
    fn name(&self) -> String;

    /// A new tensor. Its contents are unspecified until written.
    fn alloc(&self, desc: TensorDesc) -> Result<Self::Tensor>;

    /// A weight tensor from bytes that stay owned by `bytes`' owner. The cpu
    /// backend keeps the reference (no copy); the wgpu backend uploads once.
    fn weight(&self, desc: TensorDesc, bytes: SharedBytes) -> Result<Self::Tensor>;

    /// Weights used together (a layer's Q, K and V; its gate and up), as
    /// [`weight`](Backend::weight) of each (the default). The wgpu backend
    /// uploads them into one buffer, each at an aligned offset, so that
    /// [`mul_mats`](Backend::mul_mats) and
    /// [`mul_mats_glu`](Backend::mul_mats_glu) can run them in one
    /// dispatch (parts of mixed types: one a run of one type); the memory
    /// is the same.
    fn weights(&self, parts: Vec<(TensorDesc, SharedBytes)>) -> Result<Vec<Self::Tensor>> {
        parts.into_iter().map(|(d, b)| self.weight(d, b)).collect()
    }

    /// A tensor sharing `t`'s memory from its first byte, with shape `ne`
    /// (same type): a reshape, or a prefix when `ne` has fewer elements.
    /// Errors if `ne` needs more bytes than `t` has. Used to run one set of
    /// scratch buffers at every batch size, and to see `[n_head * head_dim, m]`
    /// as `[head_dim, n_head, m]`.
    fn view(&self, t: &Self::Tensor, ne: [usize; 4]) -> Result<Self::Tensor>;

    /// Write `data` at byte `offset` of `t`.
    fn write(&self, t: &Self::Tensor, offset: usize, data: &[u8]) -> Result<()>;

    /// Read `out.len()` bytes at byte `offset` of `t`, after all queued ops.
    fn read(&self, t: &Self::Tensor, offset: usize, out: &mut [u8]) -> Result<()>;

    /// Wait for all queued work.
    fn sync(&self) -> Result<()>;

    /// A read in flight ([`Backend::read_start`]).
    type Reading: Send;

    /// Start reading `len` bytes at byte `offset` of `t` as they will be
    /// after all queued ops, and start those ops: more may be queued (and
    /// started by another read) before [`Backend::read_finish`] collects
    /// the bytes, which then waits only for the ops queued before this
    /// call. Several reads may be in flight; one dropped unfinished gives
    /// its room back.
    fn read_start(&self, t: &Self::Tensor, offset: usize, len: usize) -> Result<Self::Reading>;

    /// The bytes of a read begun by [`Backend::read_start`] (`out.len()`
    /// must be the `len` it was started with).
    fn read_finish(&self, r: Self::Reading, out: &mut [u8]) -> Result<()>;

    /// Run `f`, which issues a run of ops (a forward pass), where they are
    /// cheapest to issue from. The cpu backend runs it on one of its own
    /// workers, so each op's parallel loop starts right there instead of
    /// handing off to the pool and waking the caller when it is done.
    /// Default: on the calling thread.
    fn enter<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R
    where
        Self: Sized,
    {
        f()
    }

    /// What the backend holds now.
    fn memory(&self) -> MemoryReport;

    /// `out[n, m] = w[k, n] · x[k, m]`: for each of the `m` activation
    /// columns, the dot product of every weight row with it.
    /// `w`: any Compute type, `[k, n]`; `x`: F32 `[k, m]`; `out`: F32 `[n, m]`.
    /// Small `m` (decode) takes a matvec path, large `m` a tiled matmul.
    fn mul_mat(&self, w: &Self::Tensor, x: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// Several weights over one input: `outs[i] = ws[i] · x`, as
    /// [`mul_mat`](Backend::mul_mat) of each (a layer's Q, K and V, or its
    /// gate and up). A backend may run them as one job: the cpu quantizes a
    /// decode step's `x` once and wakes its pool once. Same shapes as
    /// `mul_mat`, pair by pair; `ws` and `outs` of one length.
    fn mul_mats(
        &self,
        ws: &[&Self::Tensor],
        x: &Self::Tensor,
        outs: &[&Self::Tensor],
    ) -> Result<()> {
        if ws.len() != outs.len() {
            return Err(BackendError::Shape {
                op: "mul_mats",
                detail: format!("{} weights for {} outputs", ws.len(), outs.len()),
            });
        }
        for (w, out) in ws.iter().zip(outs) {
            self.mul_mat(w, x, out)?;
        }
        Ok(())
    }

    /// A gated FFN's first half: `out = act(wg · x) * (wu · x)`, as
    /// [`mul_mats`](Backend::mul_mats) into `gate` and `up` then
    /// [`glu`](Backend::glu) (the default). wgpu runs a decode step's as one
    /// dispatch when the two weights were packed by
    /// [`weights`](Backend::weights) (the same bits). `gate`, `up`, `out`:
    /// F32 `[n_ff, m]`; `gate` and `up` are unspecified after the call.
    #[allow(clippy::too_many_arguments)]
    fn mul_mats_glu(
        &self,
        op: Glu,
        wg: &Self::Tensor,
        wu: &Self::Tensor,
        x: &Self::Tensor,
        gate: &Self::Tensor,
        up: &Self::Tensor,
        out: &Self::Tensor,
    ) -> Result<()> {
        self.mul_mats(&[wg, wu], x, &[gate, up])?;
        self.glu(op, gate, up, out)
    }

    /// A block's input projections of its normed input: `rms_norm(x) *
    /// norm.0` (eps `norm.1`) into `h`, then [`mul_mats`](Backend::mul_mats)
    /// of `ws` over `h` (the default). wgpu folds the norm into a decode
    /// step's matvecs: each workgroup sums the squares of the x it reads
    /// anyway, and no norm kernel runs. `x`, `h`: F32 `[k, m]`; `norm.0`:
    /// F32 `[k]`; `h`'s contents are unspecified after the call.
    ///
    /// With `add`, the input is `x + rms_norm(add.y) * add.w` (the previous
    /// block's post-norm, not yet added), written to `add.out`: by default
    /// [`norm_add`](Backend::norm_add) first; wgpu adds it in the first
    /// matvec's dispatch, each workgroup summing `add.y`'s squares first.
    fn norm_mul_mats(
        &self,
        x: &Self::Tensor,
        add: Option<PostAdd<'_, Self::Tensor>>,
        norm: (&Self::Tensor, f32),
        h: &Self::Tensor,
        ws: &[&Self::Tensor],
        outs: &[&Self::Tensor],
    ) -> Result<()> {
        let x = self.post_add(x, add)?;
        self.rms_norm(x, Some(norm.0), norm.1, h)?;
        self.mul_mats(ws, h, outs)
    }

    /// `x` itself, or with `add`, `add.out = x + rms_norm(add.y) * add.w`
    /// ([`norm_add`](Backend::norm_add)) and `add.out`: the stream a block
    /// reads when the previous one's post-norm is pending.
    fn post_add<'a>(
        &self,
        x: &'a Self::Tensor,
        add: Option<PostAdd<'a, Self::Tensor>>,
    ) -> Result<&'a Self::Tensor> {
        match add {
            Some(a) => {
                self.norm_add(a.y, (a.w, a.eps), x, a.tmp, a.out)?;
                Ok(a.out)
            }
            None => Ok(x),
        }
    }

    /// [`mul_mats_glu`](Backend::mul_mats_glu) of `rms_norm(x) * norm.0`,
    /// as [`norm_mul_mats`](Backend::norm_mul_mats) is `mul_mats` of it:
    /// a gated FFN's first half from its block input. `gate`, `up`, `h`:
    /// unspecified after the call; `add` as there.
    #[allow(clippy::too_many_arguments)]
    fn norm_mul_mats_glu(
        &self,
        op: Glu,
        x: &Self::Tensor,
        add: Option<PostAdd<'_, Self::Tensor>>,
        norm: (&Self::Tensor, f32),
        h: &Self::Tensor,
        [wg, wu]: [&Self::Tensor; 2],
        [gate, up]: [&Self::Tensor; 2],
        out: &Self::Tensor,
    ) -> Result<()> {
        let x = self.post_add(x, add)?;
        self.rms_norm(x, Some(norm.0), norm.1, h)?;
        self.mul_mats_glu(op, wg, wu, h, gate, up, out)
    }

    /// A layer's queries rotated into `qr`, its keys rotated and stored with
    /// its values in the cache: [`rope`](Backend::rope)`(q) -> qr`,
    /// `rope(k) -> kr`, then [`set_rows`](Backend::set_rows) of `kr` (as
    /// `[head_dim * n_head_kv, m]`) and of `v` at `rows` (the default). wgpu
    /// runs it as one dispatch for F32 and F16 caches (the same bits).
    /// `pq`, `pk`: the rope params of Q and K (they differ in `n_head`);
    /// `kr`: scratch `[head_dim, n_head_kv, m]`, unspecified after the call.
    /// With `norm` (QK-norm) q and k are RMS-normed per head first, into
    /// `norm.out` (the default; wgpu normalizes in the same dispatch with
    /// rms_norm's reduction: the same bits where the driver gives both
    /// kernels one subgroup size).
    #[allow(clippy::too_many_arguments)]
    fn rope_store(
        &self,
        [q, k, v]: [&Self::Tensor; 3],
        norm: Option<QkNorm<'_, Self::Tensor>>,
        pos: &Self::Tensor,
        [pq, pk]: [&RopeParams; 2],
        [qr, kr]: [&Self::Tensor; 2],
        rows: &Self::Tensor,
        [kc, vc]: [&Self::Tensor; 2],
    ) -> Result<()> {
        let (q, k) = match norm {
            Some(QkNorm {
                w: [qn, kn],
                eps,
                out: [qd, kd],
            }) => {
                self.rms_norm(q, Some(qn), eps, qd)?;
                self.rms_norm(k, Some(kn), eps, kd)?;
                (qd, kd)
            }
            None => (q, k),
        };
        self.rope(q, pos, pq, qr)?;
        self.rope(k, pos, pk, kr)?;
        let n = pk.head_dim * pk.n_head;
        let m = kr.desc().n_elements() / n.max(1);
        self.set_rows(&self.view(kr, [n, m, 1, 1])?, rows, kc)?;
        self.set_rows(v, rows, vc)
    }

    /// `out = w · x + res`: a block's output projection and the residual
    /// it is added to, as [`mul_mat`](Backend::mul_mat) into `tmp` then
    /// [`add`](Backend::add)`(res, tmp, out)` (the default). A backend may
    /// fuse them: wgpu adds `res` in the matvec's epilogue (one dispatch;
    /// the same f32 sum, so the same bits). `res`, `tmp`, `out`: F32 `[n,
    /// m]`; `tmp`'s contents are unspecified after the call.
    fn mul_mat_add(
        &self,
        w: &Self::Tensor,
        x: &Self::Tensor,
        res: &Self::Tensor,
        tmp: &Self::Tensor,
        out: &Self::Tensor,
    ) -> Result<()> {
        self.mul_mat(w, x, tmp)?;
        self.add(res, tmp, out)
    }

    /// A post-norm's residual: `out = res + rms_norm(x) * norm.0` (eps
    /// `norm.1`), as [`rms_norm`](Backend::rms_norm) into `tmp` then
    /// [`add`](Backend::add)`(res, tmp, out)` (the default). wgpu adds
    /// `res` in the norm's own pass (the same operations, so the same
    /// bits). `x`, `res`, `tmp`, `out`: F32 `[n, m]`; `norm.0`: F32 `[n]`;
    /// `tmp`'s contents are unspecified after the call.
    fn norm_add(
        &self,
        x: &Self::Tensor,
        norm: (&Self::Tensor, f32),
        res: &Self::Tensor,
        tmp: &Self::Tensor,
        out: &Self::Tensor,
    ) -> Result<()> {
        self.rms_norm(x, Some(norm.0), norm.1, tmp)?;
        self.add(res, tmp, out)
    }

    /// Gather rows: `out[:, i] = dequantize(table[:, ids[i]])`.
    /// `table`: any Compute type `[k, n_rows]`; `ids`: I32 `[m]`; `out`: F32 `[k, m]`.
    /// An id outside `0..n_rows` yields a row of zeros (ids are checked by the caller).
    fn get_rows(&self, table: &Self::Tensor, ids: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// RMSNorm over each row, times `w` if given:
    /// `out[:, j] = x[:, j] / sqrt(mean(x[:, j]^2) + eps) * w`.
    /// `x`, `out`: F32 `[n, m]`; `w`: F32 `[n]`.
    fn rms_norm(
        &self,
        x: &Self::Tensor,
        w: Option<&Self::Tensor>,
        eps: f32,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// `out = a + b`. `a`, `out`: F32 `[n, m]`; `b`: F32 `[n, m]` or `[n]`
    /// (broadcast over columns).
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// `out = a * b` elementwise, `b` as in [`Backend::add`].
    fn mul(&self, a: &Self::Tensor, b: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// `out = x * s`. F32, same shapes.
    fn scale(&self, x: &Self::Tensor, s: f32, out: &Self::Tensor) -> Result<()>;

    /// `out = op(x)`. F32, same shapes.
    fn unary(&self, op: Unary, x: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// Gated activation: `out = act(gate) * up`. F32 `[n, m]` all three.
    fn glu(
        &self,
        op: Glu,
        gate: &Self::Tensor,
        up: &Self::Tensor,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// Softmax over each row (`ne[0]`), in f32. F32, same shapes.
    fn softmax(&self, x: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// Index of the largest value of each row (first one on ties).
    /// `x`: F32 `[n, m]`; `out`: I32 `[m]`.
    fn argmax(&self, x: &Self::Tensor, out: &Self::Tensor) -> Result<()>;

    /// The top `k` candidates of each row of logits, for sampling on the
    /// device: with `t` the `k`-th largest key of the row
    /// ([`check::top_k_key`]: `total_cmp`'s order, NaN above all),
    /// `out[0, j]` is how many elements of row `j` have a key `>= t` (`k`,
    /// or more where others tie with the `k`-th), then up to `cap` pairs
    /// `(index, logit bits)` of those elements, in no particular order (the
    /// caller sorts them; past `count`, and past `cap` when `count > cap`,
    /// the slots are unspecified). `x`: F32 `[n, m]`; `out`: I32
    /// `[1 + 2 cap, m]`, `1 <= k <= cap`.
    fn top_k(&self, x: &Self::Tensor, k: usize, out: &Self::Tensor) -> Result<()>;

    /// The attention mask of `m` queries over `n_kv` cells, built from a
    /// copy of the cache's cells on the backend (the mask is not uploaded):
    /// `out[j, t] = p.value(cells[p.first_row + j], pos[t], seqs[t])`
    /// ([`KqMask::value`]: 0 or -inf, ALiBi's bias). `cells`: I32 `[w,
    /// n_rows]`, `w` words a cell, 2 to [`CELL_WORDS`]; `pos`, `seqs`: I32 `[m]`
    /// (each query's position and sequence); `out`: F32 `[n_kv, m]`.
    fn kq_mask(
        &self,
        cells: &Self::Tensor,
        pos: &Self::Tensor,
        seqs: &Self::Tensor,
        p: &KqMask,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// RoPE at explicit per-token positions.
    /// `x`, `out`: F32 `[head_dim, n_head, m]`; `pos`: I32 `[m]`.
    /// Only the first `p.n_rot` dims of each head rotate; the rest are copied.
    fn rope(
        &self,
        x: &Self::Tensor,
        pos: &Self::Tensor,
        p: &RopeParams,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// Write rows into a cache: `dst[:, idx[i]] = src[:, i]` (converted to
    /// `dst`'s type). `src`: F32 `[n, m]`; `idx`: I32 `[m]`;
    /// `dst`: F32 or F16 `[n, n_rows]`. Rows of `idx` outside `dst` are an error
    /// the caller prevents (the kernel skips them).
    fn set_rows(&self, src: &Self::Tensor, idx: &Self::Tensor, dst: &Self::Tensor) -> Result<()>;

    /// Attention of a batch of queries over cache rows
    /// `p.kv_start .. p.kv_start + p.n_kv`:
    /// `out[:, h, i] = softmax(scale * q[:, h, i] · k[:, h_kv, j] (+ softcap) + mask[j, i]) · v[:, h_kv, j]`
    /// with `h_kv = h / (n_head / n_head_kv)` (GQA/MQA).
    /// `q`: F32 `[head_dim, n_head, m]`;
    /// `k`, `v`: F32 or F16 `[head_dim * n_head_kv, n_rows]`;
    /// `mask`: F32 `[n_kv, m]` (0 or -inf; other finite values are added as biases);
    /// `out`: F32 `[head_dim * n_head, m]`. Softmax in f32; a row whose mask
    /// is all -inf yields zeros.
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        mask: &Self::Tensor,
        p: &AttnParams,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// Two-window SelfExtend attention (Jin et al. 2024): as
    /// [`Backend::attention`], but a (query, key) pair that `mask` hides
    /// and `mask_far` lets through is scored `q2[:, h, i] · k2[:, h_kv, j]
    /// + mask_far[j, i]` (queries and keys rotated at their grouped
    /// positions), and one softmax runs over the merged logits. `q2`, `k2`,
    /// `mask_far`: shaped and typed as `q`, `k`, `mask`.
    #[allow(clippy::too_many_arguments)]
    fn attention_window(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        mask: &Self::Tensor,
        far: [&Self::Tensor; 3],
        p: &AttnParams,
        out: &Self::Tensor,
    ) -> Result<()>;

    /// K-shift: rotate cached K rows in place by a per-row position delta,
    /// `k[:, j] = rope(k[:, j], shift[j])` as a *pure rotation* (the YaRN
    /// magnitude factor `attn_factor`/mscale is not applied). Rows with
    /// shift 0 are untouched.
    /// `k`: F32 or F16 `[head_dim * n_head_kv, n_rows]` (`p.n_head` must be
    /// `n_head_kv`); `shift`: I32 `[n_rows]`.
    fn kshift(&self, k: &Self::Tensor, shift: &Self::Tensor, p: &RopeParams) -> Result<()>;

    /// Short causal convolution over time with a per-sequence state
    /// (llama.cpp's `ggml_ssm_conv` as LFM2's short-conv layers use it),
    /// the tokens taken in order. With `d = l - 1` and `s = slots[i]`, token
    /// `i` of channel `c` sees the window `w = [state[c*d .. c*d + d, s],
    /// x[c, i]]`:
    /// `out[c, i] = Σ_{k < l} w[k] * kernel[k, c]` (summed in `k` order),
    /// then `state[c*d .. c*d + d, s] = w[1..]`: the state ends holding each
    /// sequence's last `d` inputs. `x`, `out`: F32 `[n, m]`; `kernel`: F32
    /// `[l, n]`; `state`: F32 `[d * n, n_slots]`, updated in place;
    /// `slots`: I32 `[m]`. A slot outside `0..n_slots` (the caller checks
    /// them) yields zeros and touches no state.
    fn short_conv(
        &self,
        x: &Self::Tensor,
        kernel: &Self::Tensor,
        state: &Self::Tensor,
        slots: &Self::Tensor,
        out: &Self::Tensor,
    ) -> Result<()>;
}
