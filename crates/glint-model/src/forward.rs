//! The forward pass, written once against [`Backend`] for every architecture
//! in the table and every quantization.

use glint_backend::{
    AttnParams, Backend, GgmlType, KqMask, PostAdd, QkNorm, TensorDesc, Usage, CELL_WORDS,
};

use crate::arch::EmbdScale;
use crate::hparams::HParams;
use crate::weights::{AttnWeights, ConvWeights, LayerWeights, Mixer, Weights};
use crate::ModelError;

/// The K and V rows of every attention layer: `[n_embd_kv, n_rows]` each,
/// F16, F32, Q8_0 or Q4_0 (a short-convolution layer has none).
/// Which row holds which token is the cache's bookkeeping (`glint-kv`); here
/// they are just storage.
pub struct KvStorage<T> {
    /// Per layer, K rows: `[n_embd_kv, n_rows]`.
    pub k: Vec<T>,
    /// Per layer, V rows: `[n_embd_kv, n_rows]`.
    pub v: Vec<T>,
    /// Per layer, K rows rotated at their grouped positions `⌊pos/G⌋`
    /// (two-window SelfExtend), `[n_embd_kv, n_rows]` of K's type; empty
    /// when the context does not extend so.
    pub k2: Vec<T>,
    /// The model layer of each entry of `k`, `v` (and `k2`).
    pub layers: Vec<usize>,
    /// Rows per layer (`n_stream * kv_size`).
    pub n_rows: usize,
    /// K cache element type.
    pub type_k: GgmlType,
    /// V cache element type.
    pub type_v: GgmlType,
    /// A copy of the cache's cells, what [`Mask::Cells`] builds masks
    /// from: `[w, n_rows]` i32, `w` words a row (its position, -1 empty,
    /// then its sequence set; [`Backend::kq_mask`]). The caller keeps it
    /// in step with its bookkeeping; it starts with every row empty.
    pub cells: T,
}

impl<T: glint_backend::Tensor> KvStorage<T> {
    /// Allocate `n_rows` rows for each of the model layers `layers` (and
    /// as many grouped K rows when `grouped`: two-window SelfExtend), and
    /// the cells' copy of `cell_words` words a row (2 to [`CELL_WORDS`]).
    pub fn new<B: Backend<Tensor = T>>(
        backend: &B,
        hp: &HParams,
        layers: Vec<usize>,
        n_rows: usize,
        [type_k, type_v]: [GgmlType; 2],
        grouped: bool,
        cell_words: usize,
    ) -> Result<Self, ModelError> {
        if !(2..=CELL_WORDS).contains(&cell_words) {
            return Err(ModelError::Invalid(format!(
                "cells of {cell_words} words (2 to {CELL_WORDS})"
            )));
        }
        for ty in [type_k, type_v] {
            if !matches!(
                ty,
                GgmlType::F16 | GgmlType::F32 | GgmlType::Q8_0 | GgmlType::Q4_0
            ) {
                return Err(ModelError::Invalid(format!(
                    "KV cache type {ty} is not supported (f16, f32, q8_0, q4_0)"
                )));
            }
            if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && !hp.head_dim.is_multiple_of(32) {
                return Err(ModelError::Invalid(format!(
                    "a {ty} KV cache needs head sizes that are multiples of 32 (blocks \
                     within a head); this model's is {}",
                    hp.head_dim
                )));
            }
        }
        let mut k = Vec::with_capacity(layers.len());
        let mut v = Vec::with_capacity(layers.len());
        let mut k2 = Vec::new();
        for &il in &layers {
            let mut lists = vec![(&mut k, type_k, "k"), (&mut v, type_v, "v")];
            if grouped {
                lists.push((&mut k2, type_k, "k_grouped"));
            }
            for (list, ty, what) in lists {
                let t = backend.alloc(TensorDesc {
                    ty,
                    ne: [hp.n_embd_kv(), n_rows, 1, 1],
                    label: format!("cache_{what}_l{il}").into(),
                    usage: Usage::KvCache,
                })?;
                // Rows never written are masked out, but NaN garbage times a
                // zero weight is still NaN: start from zeros.
                backend.write(&t, 0, &vec![0u8; t.desc().n_bytes()])?;
                list.push(t);
            }
        }
        let cells = backend.alloc(TensorDesc {
            ty: GgmlType::I32,
            ne: [cell_words, n_rows, 1, 1],
            label: "cache_cells".into(),
            // Bookkeeping beside the cache, as the K-shift's per-cell
            // shifts: the KV cache's bytes stay its K/V rows (llama.cpp's).
            usage: Usage::Scratch,
        })?;
        let empty: Vec<i32> = (0..n_rows * cell_words)
            .map(|i| if i % cell_words == 0 { -1 } else { 0 })
            .collect();
        backend.write(&cells, 0, bytemuck::cast_slice(&empty))?;
        Ok(KvStorage {
            k,
            v,
            k2,
            layers,
            n_rows,
            type_k,
            type_v,
            cells,
        })
    }
}

impl<T> KvStorage<T> {
    /// The entry of model layer `il` in `k`, `v` (and `k2`), if it has one.
    pub fn index(&self, il: usize) -> Option<usize> {
        self.layers.iter().position(|&l| l == il)
    }
}

/// The recurrent state of every short-convolution layer (LFM2): each
/// sequence's last `n_conv - 1` inputs per channel, one column (slot) per
/// sequence id.
pub struct ConvStorage<T> {
    /// Per short-convolution layer: `[n_embd_conv, n_slots]` f32.
    pub state: Vec<T>,
    /// The model layer of each entry of `state`.
    pub layers: Vec<usize>,
    /// Slots (sequences) per layer.
    pub n_slots: usize,
}

impl<T: glint_backend::Tensor> ConvStorage<T> {
    /// Zeroed states of `n_slots` sequences for every short-convolution
    /// layer of `hp` (none for a model without them).
    pub fn new<B: Backend<Tensor = T>>(
        backend: &B,
        hp: &HParams,
        n_slots: usize,
    ) -> Result<Self, ModelError> {
        let layers: Vec<usize> = (0..hp.n_layer).filter(|&il| hp.is_conv(il)).collect();
        let mut state = Vec::with_capacity(layers.len());
        for &il in &layers {
            let t = backend.alloc(TensorDesc {
                ty: GgmlType::F32,
                ne: [hp.n_embd_conv(), n_slots, 1, 1],
                label: format!("conv_state_l{il}").into(),
                usage: Usage::KvCache,
            })?;
            backend.write(&t, 0, &vec![0u8; t.desc().n_bytes()])?;
            state.push(t);
        }
        Ok(ConvStorage {
            state,
            layers,
            n_slots,
        })
    }

    /// The entry of model layer `il` in `state`, if it has one.
    pub fn index(&self, il: usize) -> Option<usize> {
        self.layers.iter().position(|&l| l == il)
    }
}

/// An attention mask `[n_kv, T]`, row-major by token: 0 or -inf (ALiBi's
/// biases in between).
#[derive(Clone, Copy, Debug)]
pub enum Mask<'a> {
    /// Its values, built by the caller and uploaded.
    Values(&'a [f32]),
    /// Built on the backend ([`Backend::kq_mask`]) from the copy of the
    /// cells of the cache it covers ([`KvStorage::cells`]) and the batch's
    /// positions and sequences ([`UBatch::seqs`]): nothing uploaded but
    /// the sequences. `first_row` is the span's start (`kv_start`),
    /// whatever the caller put there.
    Cells(KqMask),
}

impl Mask<'_> {
    /// Whether the caller's values (if any) have `n` entries.
    fn holds(&self, n: usize) -> bool {
        match self {
            Mask::Values(v) => v.len() == n,
            Mask::Cells(_) => true,
        }
    }
}

/// One micro-batch, as the context prepares it.
pub struct UBatch<'a> {
    /// Token ids `[T]` (placeholders with `device_tokens`).
    pub tokens: &'a [i32],
    /// The tokens are the greedy choices of the previous forward pass's
    /// first `T` output rows ([`Output::argmax`], still on the backend),
    /// not `tokens`: nothing is uploaded, and the host need not have read
    /// them (decoding chained on the device). The caller sees that the
    /// previous pass had `T` output rows at least.
    pub device_tokens: bool,
    /// Positions `[T]` (what RoPE rotates by).
    pub pos: &'a [i32],
    /// Cache rows receiving each token's K and V `[T]`.
    pub rows: &'a [i32],
    /// Each token's recurrent state slot `[T]` (its sequence; empty when
    /// the model has no short-convolution layers).
    pub slots: &'a [i32],
    /// Each token's sequence `[T]` (the first of its sequences), what a
    /// [`Mask::Cells`] tests the cells' sets against (may be empty when
    /// no mask is built so).
    pub seqs: &'a [i32],
    /// First cache row attention considers (the stream's start).
    pub kv_start: usize,
    /// Cache rows attention considers.
    pub n_kv: usize,
    /// Mask of full-attention layers `[n_kv, T]`.
    pub mask: Mask<'a>,
    /// Mask of sliding-window layers `[n_kv, T]` (needed iff the model has them).
    pub mask_swa: Option<Mask<'a>>,
    /// Tokens (indices into `0..T`) whose logits are wanted, in output order.
    pub outputs: &'a [i32],
    /// Two-window SelfExtend's inputs (the cache must hold grouped K rows).
    pub window: Option<WindowInputs<'a>>,
    /// The sliding-window layers' own cache (a ring of `n_swa + n_ubatch`
    /// cells): where the batch's K/V go in it and what it attends to. With
    /// it, `mask_swa` is `None` and those layers read [`Memories::swa`].
    pub swa: Option<SwaInputs<'a>>,
}

/// The sliding-window layers' part of a micro-batch when they have a
/// cache of their own.
pub struct SwaInputs<'a> {
    /// Rows of that cache receiving each token's K and V `[T]`.
    pub rows: &'a [i32],
    /// First row attention considers.
    pub kv_start: usize,
    /// Rows attention considers.
    pub n_kv: usize,
    /// The sliding-window mask over them `[n_kv, T]` (built from the
    /// ring's own cells with [`Mask::Cells`]).
    pub mask: Mask<'a>,
}

/// Everything a forward pass reads and writes besides weights and scratch.
pub struct Memories<'a, T> {
    /// K/V rows of the attention layers (all of them, or the full-attention
    /// ones when `swa` is given).
    pub kv: &'a KvStorage<T>,
    /// K/V rows of the sliding-window layers, a cache of their own (a
    /// ring); `None`: they are in `kv`.
    pub swa: Option<&'a KvStorage<T>>,
    /// The short-convolution layers' recurrent states.
    pub conv: &'a ConvStorage<T>,
}

/// What two-window SelfExtend adds to a micro-batch (group size G,
/// neighbour window W): full-attention layers score a (query, key) pair at
/// the grouped positions where `mask` hides it and `mask_far` does not.
pub struct WindowInputs<'a> {
    /// Grouped query positions `[T]`: `⌊pos/G⌋ + W − W/G`.
    pub pos_q: &'a [i32],
    /// Grouped key positions of the batch's own tokens `[T]`: `⌊pos/G⌋`.
    pub pos_k: &'a [i32],
    /// The distant pairs `[n_kv, T]`: 0 where `pos_i − pos_j ≥ W` (and the
    /// pair is visible), else -inf; `mask` then holds only the near ones.
    pub mask_far: &'a [f32],
}

/// Per-batch scratch buffers, allocated once for the largest micro-batch and
/// viewed at each batch's size (the masks at `n_kv * T <= n_kv_max *
/// n_tokens_max`).
pub struct Scratch<T> {
    n_tokens_max: usize,
    n_kv_max: usize,
    /// Sized for two-window SelfExtend.
    window: bool,
    ids: T,      // [T] i32
    pos: T,      // [T] i32
    rows: T,     // [T] i32
    outs: T,     // [T] i32
    rows_swa: T, // [T] i32, rows of the sliding-window cache
    slots: T,    // [T] i32, recurrent state slot of each token
    seqs: T,     // [T] i32, sequence of each token (masks built from cells)
    conv_b: T,   // [n_embd, T] f32 (short-conv layers; else [1]), gate b
    conv_c: T,   // [n_embd, T] f32, gate c
    conv_x: T,   // [n_embd, T] f32, input x, then b * x
    conv_y: T,   // [n_embd, T] f32, the convolution's output
    mask: T,     // [n_kv_max * T] f32
    mask_swa: T, // [n_kv_max * T] f32
    pos_q2: T,   // [T] i32, grouped query positions (two-window SelfExtend)
    pos_k2: T,   // [T] i32, grouped key positions
    mask_far: T, // [n_kv_max * T] f32 with SelfExtend's window, else [1]
    qr2: T,      // [head_dim, n_head, T] f32, roped at the grouped positions
    kr2: T,      // [head_dim, n_head_kv, T] f32, the same
    x: T,        // [n_embd, T] f32, the residual stream
    x2: T,       // [n_embd, T] f32, its next value
    h: T,        // [n_embd, T] f32, normed input of a block
    q: T,        // [n_head * head_dim, T] f32
    k: T,        // [n_embd_kv, T] f32
    v: T,        // [n_embd_kv, T] f32
    qb: T,       // [n_head * head_dim, T] f32 (bias or QK-norm output; else [1])
    kb: T,       // [n_embd_kv, T] f32 (the same)
    vb: T,       // [n_embd_kv, T] f32 (bias output; else [1])
    qr: T,       // [head_dim, n_head, T] f32, roped
    kr: T,       // [head_dim, n_head_kv, T] f32, roped
    attn: T,     // [n_head * head_dim, T] f32
    o: T,        // [n_embd, T] f32
    o2: T,       // [n_embd, T] f32, PostAdd::tmp (post-norm models; else [1])
    gate: T,     // [n_ff, T] f32
    up: T,       // [n_ff, T] f32
    act: T,      // [n_ff, T] f32
    xo: T,       // [n_embd, n_out_cap] f32, rows that want logits: grown with logits
    xn: T,       // [n_embd, n_out_cap] f32, normed
    logits: T,   // [n_vocab, n_out_cap] f32: grown on demand ([`Scratch::reserve_outputs`])
    argmax: T,   // [T] i32
    topk: T,     // [1 + 2 TOPK_CAP, n_out_cap] i32: Backend::top_k's candidates
    /// Rows `logits` holds now.
    n_out_cap: usize,
}

/// Logits rows a scratch holds before a micro-batch asks for more: one per
/// sequence of a parallel decode is the common case. A prompt that wants
/// every position's logits grows the buffer (a 262144-token vocabulary
/// makes it 1 MiB a row).
pub const OUTPUTS_AT_FIRST: usize = 8;

/// Candidates a row of [`Output::topk`] holds: room for a top-k of up to
/// [`TOPK_MAX_K`] and as many ties with its last.
pub const TOPK_CAP: usize = 256;

/// The largest `k` a sampler may ask the device for ([`Output::topk`]).
pub const TOPK_MAX_K: usize = 128;

impl<T: glint_backend::Tensor> Scratch<T> {
    /// Buffers for micro-batches of up to `n_tokens_max` tokens attending to
    /// up to `n_kv_max` cache rows; logits for [`OUTPUTS_AT_FIRST`] rows,
    /// grown by [`Scratch::reserve_outputs`] up to `n_tokens_max`.
    pub fn new<B: Backend<Tensor = T>>(
        backend: &B,
        hp: &HParams,
        n_tokens_max: usize,
        n_kv_max: usize,
        window: bool,
    ) -> Result<Self, ModelError> {
        let t = n_tokens_max.max(1);
        // Only a SelfExtend window needs these at full size.
        let wt = if window { t } else { 1 };
        let a = |ty: GgmlType, n: usize, label: &str| {
            backend.alloc(TensorDesc {
                ty,
                ne: [n, 1, 1, 1],
                label: label.into(),
                usage: Usage::Scratch,
            })
        };
        let f = GgmlType::F32;
        let i = GgmlType::I32;
        let (n_embd, n_q, n_kv, n_ff) =
            (hp.n_embd, hp.n_head * hp.head_dim, hp.n_embd_kv(), hp.n_ff);
        // Buffers only some architectures write: [1] elsewhere.
        let arch = hp.arch;
        let only = |yes: bool, n: usize| if yes { n } else { 1 };
        let biased_or_normed = arch.qkv_bias || arch.qk_norm;
        let n_out = t.min(OUTPUTS_AT_FIRST);
        Ok(Scratch {
            n_tokens_max: t,
            n_kv_max,
            window,
            ids: a(i, t, "inp_tokens")?,
            pos: a(i, t, "inp_pos")?,
            rows: a(i, t, "inp_rows")?,
            outs: a(i, t, "inp_out_ids")?,
            rows_swa: a(i, t, "inp_rows_swa")?,
            slots: a(i, t, "inp_slots")?,
            seqs: a(i, t, "inp_seqs")?,
            conv_b: a(f, if hp.n_conv > 0 { n_embd * t } else { 1 }, "conv_b")?,
            conv_c: a(f, if hp.n_conv > 0 { n_embd * t } else { 1 }, "conv_c")?,
            conv_x: a(f, if hp.n_conv > 0 { n_embd * t } else { 1 }, "conv_x")?,
            conv_y: a(f, if hp.n_conv > 0 { n_embd * t } else { 1 }, "conv_y")?,
            mask: a(f, n_kv_max * t, "kq_mask")?,
            mask_swa: a(
                f,
                if hp.n_swa > 0 { n_kv_max * t } else { 1 },
                "kq_mask_swa",
            )?,
            pos_q2: a(i, wt, "inp_pos_q_grouped")?,
            pos_k2: a(i, wt, "inp_pos_k_grouped")?,
            mask_far: a(f, if window { n_kv_max * t } else { 1 }, "kq_mask_far")?,
            qr2: a(f, n_q * wt, "q_rope_grouped")?,
            kr2: a(f, n_kv * wt, "k_rope_grouped")?,
            x: a(f, n_embd * t, "x")?,
            x2: a(f, n_embd * t, "x2")?,
            h: a(f, n_embd * t, "h")?,
            q: a(f, n_q * t, "q")?,
            k: a(f, n_kv * t, "k")?,
            v: a(f, n_kv * t, "v")?,
            qb: a(f, only(biased_or_normed, n_q * t), "qb")?,
            kb: a(f, only(biased_or_normed, n_kv * t), "kb")?,
            vb: a(f, only(arch.qkv_bias, n_kv * t), "vb")?,
            qr: a(f, n_q * t, "q_rope")?,
            kr: a(f, n_kv * t, "k_rope")?,
            attn: a(f, n_q * t, "attn_out")?,
            o: a(f, n_embd * t, "o")?,
            o2: a(f, only(arch.post_norms, n_embd * t), "o2")?,
            gate: a(f, n_ff * t, "ffn_gate")?,
            up: a(f, n_ff * t, "ffn_up")?,
            act: a(f, n_ff * t, "ffn_act")?,
            xo: a(f, n_embd * n_out, "x_out")?,
            xn: a(f, n_embd * n_out, "x_out_norm")?,
            logits: a(f, hp.n_vocab * n_out, "logits")?,
            argmax: a(i, t, "argmax")?,
            topk: a(i, (1 + 2 * TOPK_CAP) * n_out, "top_k")?,
            n_out_cap: n_out,
        })
    }

    /// Make room for `n_out` logits rows (at most `n_tokens_max`): new,
    /// larger buffers when needed (twice the old, or `n_out`; the rows of
    /// the output head's input grow with them). An [`Output`] of an
    /// earlier pass keeps the old buffers alive until it is dropped.
    pub fn reserve_outputs<B: Backend<Tensor = T>>(
        &mut self,
        backend: &B,
        hp: &HParams,
        n_out: usize,
    ) -> Result<(), ModelError> {
        if n_out <= self.n_out_cap {
            return Ok(());
        }
        if n_out > self.n_tokens_max {
            return Err(ModelError::Batch(format!(
                "{n_out} logits rows wanted, but a micro-batch has at most {} tokens",
                self.n_tokens_max
            )));
        }
        let cap = n_out.max(2 * self.n_out_cap).min(self.n_tokens_max);
        let rows = |label: &'static str| {
            backend.alloc(TensorDesc {
                ty: GgmlType::F32,
                ne: [hp.n_embd * cap, 1, 1, 1],
                label: label.into(),
                usage: Usage::Scratch,
            })
        };
        self.xo = rows("x_out")?;
        self.xn = rows("x_out_norm")?;
        self.logits = backend.alloc(TensorDesc {
            ty: GgmlType::F32,
            ne: [hp.n_vocab * cap, 1, 1, 1],
            label: "logits".into(),
            usage: Usage::Scratch,
        })?;
        self.topk = backend.alloc(TensorDesc {
            ty: GgmlType::I32,
            ne: [(1 + 2 * TOPK_CAP) * cap, 1, 1, 1],
            label: "top_k".into(),
            usage: Usage::Scratch,
        })?;
        self.n_out_cap = cap;
        Ok(())
    }
}

/// Where a forward pass left its results on the backend.
pub struct Output<T> {
    /// Logits `[n_vocab, n_out]`.
    pub logits: T,
    /// Argmax of each logits row `[n_out]` i32 (on device: greedy decode
    /// reads back 4 bytes per row).
    pub argmax: T,
    /// The output rows' hidden states after the output norm, what the head
    /// multiplies (`[n_embd, n_out]`): the model's embeddings.
    pub hidden: T,
    /// Room for [`Backend::top_k`] of the logits, `[1 + 2 TOPK_CAP, n_out]`
    /// i32 (run when a sampler asks: sampling reads back its candidates,
    /// not the vocabulary).
    pub topk: T,
    /// Rows.
    pub n_out: usize,
}

fn view<B: Backend>(b: &B, t: &B::Tensor, ne: &[usize]) -> Result<B::Tensor, ModelError> {
    let mut shape = [1usize; 4];
    shape[..ne.len()].copy_from_slice(ne);
    Ok(b.view(t, shape)?)
}

/// Run one micro-batch through the model: K and V of its tokens land in
/// `kv` at `ub.rows`, the short-convolution layers' states in `conv` move
/// on by the tokens of their slots; logits of `ub.outputs` are left in the
/// scratch (`None` when no token wants them: the output head is skipped).
pub fn forward<B: Backend>(
    b: &B,
    hp: &HParams,
    w: &Weights<B::Tensor>,
    mem: &Memories<B::Tensor>,
    s: &Scratch<B::Tensor>,
    ub: &UBatch,
) -> Result<Option<Output<B::Tensor>>, ModelError> {
    let (kv, conv) = (mem.kv, mem.conv);
    check_ubatch(hp, mem, s, ub)?;
    let t = ub.tokens.len();
    let n_embd = hp.n_embd;
    let inp = Inputs::write(b, hp, mem, s, ub)?;

    // x: [n_embd, T], the residual stream; x2 receives each new value.
    let mut x = view(b, &s.x, &[n_embd, t])?;
    let mut x2 = view(b, &s.x2, &[n_embd, t])?;
    b.get_rows(&w.tok_embd, &inp.ids, &x)?;
    if hp.arch.embd_scale == EmbdScale::SqrtNEmbd {
        b.scale(&x, (n_embd as f32).sqrt(), &x2)?;
        std::mem::swap(&mut x, &mut x2);
    }

    let layer = Layer {
        b,
        hp,
        kv,
        swa: mem.swa,
        conv,
        s,
        ub,
        inp,
        bufs: Buffers::view(b, hp, s, t)?,
    };
    // Each block writes x + block(x) to x2, or leaves block(x) pending
    // with its post-norm (`post`) for the next block's first matvecs to add
    // (writing x2 then); where x2 took the stream's next value, the swap
    // makes it the stream.
    let mut post = None;
    for (il, lw) in w.layers.iter().enumerate() {
        let flow = match &lw.mixer {
            Mixer::Attention(a) => layer.attention(il, lw, a, &x, post, &x2)?,
            Mixer::ShortConv(c) => layer.short_conv(il, lw, c, &x, post, &x2)?,
        };
        if flow.wrote {
            std::mem::swap(&mut x, &mut x2);
        }
        let flow = layer.ffn(lw, &x, flow.post, &x2)?;
        if flow.wrote {
            std::mem::swap(&mut x, &mut x2);
        }
        post = flow.post;
    }
    if let Some(add) = layer.post_add(post, &x2) {
        b.norm_add(add.y, (add.w, add.eps), &x, add.tmp, add.out)?;
        std::mem::swap(&mut x, &mut x2);
    }

    if ub.outputs.is_empty() {
        return Ok(None);
    }
    output_head(b, hp, w, s, ub, x).map(Some)
}

/// Whether any layer uses sliding-window attention (and so needs `mask_swa`).
fn has_swa(hp: &HParams) -> bool {
    hp.swa_layers.iter().any(|&x| x)
}

/// Refuse a micro-batch the scratch, the cache or the vocabulary cannot
/// take, before anything is written.
fn check_ubatch<T>(
    hp: &HParams,
    mem: &Memories<T>,
    s: &Scratch<T>,
    ub: &UBatch,
) -> Result<(), ModelError> {
    let (kv, conv) = (mem.kv, mem.conv);
    let t = ub.tokens.len();
    let n_out = ub.outputs.len();
    let bad = |m: String| Err(ModelError::Batch(m));
    if t == 0 || t > s.n_tokens_max {
        return bad(format!(
            "micro-batch of {t} tokens (1..={} allowed)",
            s.n_tokens_max
        ));
    }
    if ub.pos.len() != t || ub.rows.len() != t {
        return bad(format!(
            "{t} tokens but {} positions, {} rows",
            ub.pos.len(),
            ub.rows.len()
        ));
    }
    // The masks are views of [n_kv_max * n_tokens_max] scratch: a window
    // wider than one stream (tokens of several streams) fits with fewer
    // tokens.
    if ub.n_kv == 0
        || ub.n_kv * t > s.n_kv_max * s.n_tokens_max
        || ub.kv_start + ub.n_kv > kv.n_rows
    {
        return bad(format!(
            "attention window {}..{} of {t} tokens outside the cache's {} rows (at most {} x {} \
             mask values)",
            ub.kv_start,
            ub.kv_start + ub.n_kv,
            kv.n_rows,
            s.n_kv_max,
            s.n_tokens_max
        ));
    }
    if let Some(w) = &ub.window {
        if kv.k2.is_empty() || !s.window {
            return bad("a SelfExtend window needs a cache and scratch made for it".into());
        }
        if matches!(ub.mask, Mask::Cells(_)) {
            return bad(
                "a SelfExtend window needs the mask's values (split into near and far pairs)"
                    .into(),
            );
        }
        if w.pos_q.len() != t || w.pos_k.len() != t || w.mask_far.len() != ub.n_kv * t {
            return bad(format!(
                "SelfExtend window: {} query and {} key positions, {} far-mask values for {t} \
                 tokens and {} rows",
                w.pos_q.len(),
                w.pos_k.len(),
                w.mask_far.len(),
                ub.n_kv
            ));
        }
    }
    if !ub.mask.holds(ub.n_kv * t) {
        return bad(format!(
            "mask has {:?}, expected {} x {t} values",
            ub.mask, ub.n_kv
        ));
    }
    let cells_masks = [
        Some(&ub.mask),
        ub.mask_swa.as_ref(),
        ub.swa.as_ref().map(|w| &w.mask),
    ];
    if cells_masks
        .iter()
        .any(|m| matches!(m, Some(Mask::Cells(_))))
        && ub.seqs.len() != t
    {
        return bad(format!(
            "a mask built from cells needs each token's sequence: {} for {t} tokens",
            ub.seqs.len()
        ));
    }
    match (&ub.swa, mem.swa) {
        (Some(w), Some(ring)) => {
            if w.rows.len() != t
                || !w.mask.holds(w.n_kv * t)
                || w.n_kv == 0
                || w.n_kv * t > s.n_kv_max * s.n_tokens_max
                || w.kv_start + w.n_kv > ring.n_rows
            {
                return bad(format!(
                    "sliding-window cache: {} rows, a mask {:?} and a window {}..{} for {t} \
                     tokens and its {} rows",
                    w.rows.len(),
                    w.mask,
                    w.kv_start,
                    w.kv_start + w.n_kv,
                    ring.n_rows
                ));
            }
            if let Some(&r) = w.rows.iter().find(|&&r| r < 0 || r as usize >= ring.n_rows) {
                return bad(format!(
                    "sliding-window cache row {r} outside 0..{}",
                    ring.n_rows
                ));
            }
        }
        (None, None) => {
            if has_swa(hp) && !ub.mask_swa.is_some_and(|m| m.holds(ub.n_kv * t)) {
                return bad(
                    "the model has sliding-window layers: a mask_swa of n_kv x T is needed".into(),
                );
            }
        }
        _ => {
            return bad(
                "a sliding-window cache and the micro-batch's inputs for it go together".into(),
            )
        }
    }
    if let Some(&tok) = ub
        .tokens
        .iter()
        .find(|&&x| !ub.device_tokens && (x < 0 || x as usize >= hp.n_vocab))
    {
        return bad(format!(
            "token id {tok} outside the vocabulary (0..{})",
            hp.n_vocab
        ));
    }
    if let Some(&r) = ub.rows.iter().find(|&&r| r < 0 || r as usize >= kv.n_rows) {
        return bad(format!("cache row {r} outside 0..{}", kv.n_rows));
    }
    if !conv.state.is_empty() {
        if ub.slots.len() != t {
            return bad(format!(
                "{t} tokens but {} recurrent state slots",
                ub.slots.len()
            ));
        }
        if let Some(&sl) = ub
            .slots
            .iter()
            .find(|&&x| x < 0 || x as usize >= conv.n_slots)
        {
            return bad(format!(
                "recurrent state slot {sl} outside 0..{}",
                conv.n_slots
            ));
        }
    }
    if n_out > t || ub.outputs.iter().any(|&o| o < 0 || o as usize >= t) {
        return bad(format!(
            "outputs must be at most {t} indices into the micro-batch"
        ));
    }
    if n_out > s.n_out_cap {
        return bad(format!(
            "{n_out} logits rows wanted but the scratch holds {} (call Scratch::reserve_outputs first)",
            s.n_out_cap
        ));
    }
    Ok(())
}

/// The micro-batch's inputs, written to the backend.
struct Inputs<T> {
    ids: T,              // [T] i32
    pos: T,              // [T] i32
    rows: T,             // [T] i32
    slots: Option<T>,    // [T] i32, iff the model has short-conv layers
    mask: T,             // [n_kv, T] f32
    mask_swa: Option<T>, // [n_kv, T] f32 (or [n_kv_swa, T] over the ring), iff the model has sliding-window layers
    rows_swa: Option<T>, // [T] i32, rows of the sliding-window cache (with one)
    /// Two-window SelfExtend: grouped query and key positions `[T]` i32,
    /// the distant pairs' mask `[n_kv, T]` f32.
    window: Option<[T; 3]>,
}

impl<T: glint_backend::Tensor> Inputs<T> {
    fn write<B: Backend<Tensor = T>>(
        b: &B,
        hp: &HParams,
        mem: &Memories<T>,
        s: &Scratch<T>,
        ub: &UBatch,
    ) -> Result<Self, ModelError> {
        let t = ub.tokens.len();
        let pos = view(b, &s.pos, &[t])?;
        let rows = view(b, &s.rows, &[t])?;
        let mask = view(b, &s.mask, &[ub.n_kv, t])?;
        // The previous pass's greedy tokens are read by the gather before
        // this pass's head writes its own.
        let ids = if ub.device_tokens {
            view(b, &s.argmax, &[t])?
        } else {
            let ids = view(b, &s.ids, &[t])?;
            b.write(&ids, 0, bytemuck::cast_slice(ub.tokens))?;
            ids
        };
        b.write(&pos, 0, bytemuck::cast_slice(ub.pos))?;
        b.write(&rows, 0, bytemuck::cast_slice(ub.rows))?;
        let from_cells = [
            Some(&ub.mask),
            ub.mask_swa.as_ref(),
            ub.swa.as_ref().map(|w| &w.mask),
        ]
        .iter()
        .any(|m| matches!(m, Some(Mask::Cells(_))));
        let seqs = view(b, &s.seqs, &[t])?;
        if from_cells {
            b.write(&seqs, 0, bytemuck::cast_slice(ub.seqs))?;
        }
        // A mask into `out` over `n_kv` rows from `start` of `cells`.
        let fill = |m: &Mask, out: &T, cells: &T, start: usize| -> Result<(), ModelError> {
            match m {
                Mask::Values(v) => b.write(out, 0, bytemuck::cast_slice(v))?,
                Mask::Cells(p) => {
                    let p = KqMask {
                        first_row: start,
                        ..*p
                    };
                    b.kq_mask(cells, &pos, &seqs, &p, out)?
                }
            }
            Ok(())
        };
        fill(&ub.mask, &mask, &mem.kv.cells, ub.kv_start)?;
        let slots = if hp.n_conv > 0 {
            let v = view(b, &s.slots, &[t])?;
            b.write(&v, 0, bytemuck::cast_slice(ub.slots))?;
            Some(v)
        } else {
            None
        };
        let (mask_swa, rows_swa) = match (&ub.swa, ub.mask_swa) {
            (Some(w), _) => {
                let v = view(b, &s.mask_swa, &[w.n_kv, t])?;
                // check_ubatch: a ring in the batch has a ring in `mem`.
                let ring = mem.swa.ok_or_else(|| {
                    ModelError::Batch("sliding-window inputs without their cache".into())
                })?;
                fill(&w.mask, &v, &ring.cells, w.kv_start)?;
                let r = view(b, &s.rows_swa, &[t])?;
                b.write(&r, 0, bytemuck::cast_slice(w.rows))?;
                (Some(v), Some(r))
            }
            (None, Some(m)) if has_swa(hp) => {
                let v = view(b, &s.mask_swa, &[ub.n_kv, t])?;
                fill(&m, &v, &mem.kv.cells, ub.kv_start)?;
                (Some(v), None)
            }
            _ => (None, None),
        };
        let window = match &ub.window {
            Some(w) => {
                let pq = view(b, &s.pos_q2, &[t])?;
                let pk = view(b, &s.pos_k2, &[t])?;
                let mf = view(b, &s.mask_far, &[ub.n_kv, t])?;
                b.write(&pq, 0, bytemuck::cast_slice(w.pos_q))?;
                b.write(&pk, 0, bytemuck::cast_slice(w.pos_k))?;
                b.write(&mf, 0, bytemuck::cast_slice(w.mask_far))?;
                Some([pq, pk, mf])
            }
            None => None,
        };
        Ok(Inputs {
            ids,
            pos,
            rows,
            slots,
            mask,
            mask_swa,
            rows_swa,
            window,
        })
    }
}

/// Views of the scratch at the micro-batch's size that every layer reuses.
struct Buffers<T> {
    h: T,          // [n_embd, T], normed input of a block
    q: T,          // [n_q, T]
    k: T,          // [n_embd_kv, T]
    v: T,          // [n_embd_kv, T]
    qr: T,         // [head_dim, n_head, T], roped
    kr: T,         // [head_dim, n_head_kv, T], roped
    attn: T,       // [n_q, T]
    o: T,          // [n_embd, T], a block's output
    o2: Option<T>, // [n_embd, T], scratch of a pending post-norm's add (PostAdd::tmp): post-norm models
    gate: T,       // [n_ff, T]
    up: T,         // [n_ff, T]
    act: T,        // [n_ff, T]
}

impl<T: glint_backend::Tensor> Buffers<T> {
    fn view<B: Backend<Tensor = T>>(
        b: &B,
        hp: &HParams,
        s: &Scratch<T>,
        t: usize,
    ) -> Result<Self, ModelError> {
        let (n_embd, hd, nh, nkv) = (hp.n_embd, hp.head_dim, hp.n_head, hp.n_head_kv);
        let (n_q, n_ekv) = (nh * hd, hp.n_embd_kv());
        Ok(Buffers {
            h: view(b, &s.h, &[n_embd, t])?,
            q: view(b, &s.q, &[n_q, t])?,
            k: view(b, &s.k, &[n_ekv, t])?,
            v: view(b, &s.v, &[n_ekv, t])?,
            qr: view(b, &s.qr, &[hd, nh, t])?,
            kr: view(b, &s.kr, &[hd, nkv, t])?,
            attn: view(b, &s.attn, &[n_q, t])?,
            o: view(b, &s.o, &[n_embd, t])?,
            o2: match hp.arch.post_norms {
                true => Some(view(b, &s.o2, &[n_embd, t])?),
                false => None,
            },
            gate: view(b, &s.gate, &[hp.n_ff, t])?,
            up: view(b, &s.up, &[hp.n_ff, t])?,
            act: view(b, &s.act, &[hp.n_ff, t])?,
        })
    }
}

/// What each layer of one pass reads besides its weights.
struct Layer<'a, B: Backend> {
    b: &'a B,
    hp: &'a HParams,
    kv: &'a KvStorage<B::Tensor>,
    swa: Option<&'a KvStorage<B::Tensor>>,
    conv: &'a ConvStorage<B::Tensor>,
    s: &'a Scratch<B::Tensor>,
    ub: &'a UBatch<'a>,
    inp: Inputs<B::Tensor>,
    bufs: Buffers<B::Tensor>,
}

/// What a block left: whether it wrote the stream's next value into x2
/// (the caller swaps), and the post-norm of its output (left in `o`) when
/// it left that to the next block to add.
struct Flow<'w, T> {
    wrote: bool,
    post: Option<&'w T>,
}

impl<B: Backend> Layer<'_, B> {
    /// A pending post-norm `post` of the output in `o`, as the next block's
    /// first matvecs add it to the stream, writing x2.
    fn post_add<'t>(
        &'t self,
        post: Option<&'t B::Tensor>,
        x2: &'t B::Tensor,
    ) -> Option<PostAdd<'t, B::Tensor>> {
        // o2 is there whenever a post-norm is: post-norm weights load only
        // for the architectures the scratch makes o2 for.
        post.zip(self.bufs.o2.as_ref()).map(|(w, tmp)| PostAdd {
            y: &self.bufs.o,
            w,
            eps: self.hp.rms_eps,
            tmp,
            out: x2,
        })
    }

    /// Attention block of layer `il`: the stream plus `attn(norm(stream))` (see
    /// [`Layer::residual`]; with `post`, the stream is x plus the previous
    /// block's pending output). Stores the batch's K and V in the cache on
    /// the way.
    #[allow(clippy::too_many_arguments)]
    fn attention<'w>(
        &self,
        il: usize,
        lw: &'w LayerWeights<B::Tensor>,
        aw: &AttnWeights<B::Tensor>,
        x: &B::Tensor,
        post: Option<&B::Tensor>,
        x2: &B::Tensor,
    ) -> Result<Flow<'w, B::Tensor>, ModelError> {
        let (b, hp, s, f) = (self.b, self.hp, self.s, &self.bufs);
        let swa = hp.swa_layers.get(il).copied().unwrap_or(false);
        // The layer's cache: the sliding-window one (a ring) for a SWA
        // layer when there is one, else the main one; its rows, span, mask.
        let (kv, rows, kv_start, n_kv) = match (self.swa, &self.ub.swa, &self.inp.rows_swa) {
            (Some(ring), Some(w), Some(r)) if swa => (ring, r, w.kv_start, w.n_kv),
            _ => (self.kv, &self.inp.rows, self.ub.kv_start, self.ub.n_kv),
        };
        let ki = kv.index(il).ok_or_else(|| {
            ModelError::Batch(format!("layer {il} has attention but no K/V rows"))
        })?;
        let t = self.ub.tokens.len();
        let (hd, nh, nkv) = (hp.head_dim, hp.n_head, hp.n_head_kv);
        let (n_q, n_ekv) = (nh * hd, hp.n_embd_kv());
        let norm = (&lw.attn_norm, hp.rms_eps);
        let add = self.post_add(post, x2);
        let added = add.is_some();
        b.norm_mul_mats(
            x,
            add,
            norm,
            &f.h,
            &[&aw.wq, &aw.wk, &aw.wv],
            &[&f.q, &f.k, &f.v],
        )?;
        // (q, k, v) after optional biases: [n_q, T], [n_ekv, T], [n_ekv, T].
        let (mut qc, mut kc, mut vc) = (
            view(b, &f.q, &[n_q, t])?,
            view(b, &f.k, &[n_ekv, t])?,
            view(b, &f.v, &[n_ekv, t])?,
        );
        if let Some([bq, bk, bv]) = &aw.qkv_bias {
            let qb = view(b, &s.qb, &[n_q, t])?;
            let kb = view(b, &s.kb, &[n_ekv, t])?;
            let vb = view(b, &s.vb, &[n_ekv, t])?;
            b.add(&f.q, bq, &qb)?;
            b.add(&f.k, bk, &kb)?;
            b.add(&f.v, bv, &vb)?;
            (qc, kc, vc) = (qb, kb, vb);
        }
        // Per head: [head_dim, n_head, T].
        let mut qh = view(b, &qc, &[hd, nh, t])?;
        let mut kh = view(b, &kc, &[hd, nkv, t])?;
        let inp = &self.inp;
        // Two-window SelfExtend on this layer (full attention): the normed
        // q and k are rotated a second time below.
        let window_here = inp.window.is_some() && kv.k2.get(ki).is_some() && !swa;
        // QK-norm (Gemma 3), into the buffers qc/kc are not (they may be
        // q/k themselves): by rope_store (wgpu: in its dispatch), or first
        // where the window rotates the normed heads again.
        let mut norm = None;
        if let Some([qn, kn]) = &aw.qk_norm {
            let (q_dst, k_dst) = if aw.qkv_bias.is_some() {
                (&s.q, &s.k)
            } else {
                (&s.qb, &s.kb)
            };
            let qd = view(b, q_dst, &[hd, nh, t])?;
            let kd = view(b, k_dst, &[hd, nkv, t])?;
            if window_here {
                b.rms_norm(&qh, Some(qn), hp.rms_eps, &qd)?;
                b.rms_norm(&kh, Some(kn), hp.rms_eps, &kd)?;
                (qh, kh) = (qd, kd);
            } else {
                norm = Some(([qn, kn], [qd, kd]));
            }
        }
        b.rope_store(
            [&qh, &kh, &vc],
            norm.as_ref().map(|([qn, kn], [qd, kd])| QkNorm {
                w: [*qn, *kn],
                eps: hp.rms_eps,
                out: [qd, kd],
            }),
            &inp.pos,
            [&hp.rope(il, nh), &hp.rope(il, nkv)],
            [&f.qr, &f.kr],
            rows,
            [&kv.k[ki], &kv.v[ki]],
        )?;
        // Two-window SelfExtend (full-attention layers): the batch's keys
        // also at their grouped positions, its queries at theirs.
        let window = match (&inp.window, kv.k2.get(ki)) {
            (Some([pq, pk, mf]), Some(k2)) if !swa => {
                let qr2 = view(b, &s.qr2, &[hd, nh, t])?;
                let kr2 = view(b, &s.kr2, &[hd, nkv, t])?;
                b.rope(&qh, pq, &hp.rope(il, nh), &qr2)?;
                b.rope(&kh, pk, &hp.rope(il, nkv), &kr2)?;
                b.set_rows(&view(b, &kr2, &[n_ekv, t])?, &inp.rows, k2)?;
                Some((qr2, k2, mf))
            }
            _ => None,
        };
        let layer_mask = match (&inp.mask_swa, swa) {
            (Some(m), true) => m,
            _ => &inp.mask,
        };
        let p = AttnParams {
            softcap: hp.attn_softcap,
            kv_start,
            ..AttnParams::new(nh, nkv, hd, n_kv)
        };
        match window {
            Some((qr2, k2, mf)) => b.attention_window(
                &f.qr,
                &kv.k[ki],
                &kv.v[ki],
                layer_mask,
                [&qr2, k2, mf],
                &p,
                &f.attn,
            )?,
            None => b.attention(&f.qr, &kv.k[ki], &kv.v[ki], layer_mask, &p, &f.attn)?,
        }
        let post_norm = lw.post_attn_norm.as_ref();
        self.residual(&aw.wo, &f.attn, post_norm, added, x, x2)
    }

    /// Short-convolution block of layer `il` (LFM2):
    /// the stream plus `out_proj(c * conv(b * x_in))` with `[b, c, x_in] =
    /// in_proj(norm(x))`; the convolution reads and moves on each token's
    /// sequence state.
    #[allow(clippy::too_many_arguments)]
    fn short_conv<'w>(
        &self,
        il: usize,
        lw: &'w LayerWeights<B::Tensor>,
        cw: &ConvWeights<B::Tensor>,
        x: &B::Tensor,
        post: Option<&B::Tensor>,
        x2: &B::Tensor,
    ) -> Result<Flow<'w, B::Tensor>, ModelError> {
        let (b, hp, s, f) = (self.b, self.hp, self.s, &self.bufs);
        let t = self.ub.tokens.len();
        let ci = self.conv.index(il).ok_or_else(|| {
            ModelError::Batch(format!(
                "layer {il} is a short convolution but has no state"
            ))
        })?;
        let slots = self.inp.slots.as_ref().ok_or_else(|| {
            ModelError::Batch("a short-convolution layer needs the tokens' state slots".into())
        })?;
        let n = hp.n_embd;
        // gb, gc, xin, y: [n_embd, T] each.
        let (gb, gc, xin, y) = (
            view(b, &s.conv_b, &[n, t])?,
            view(b, &s.conv_c, &[n, t])?,
            view(b, &s.conv_x, &[n, t])?,
            view(b, &s.conv_y, &[n, t])?,
        );
        let [wb, wc, wx] = &cw.in_proj;
        let norm = (&lw.attn_norm, hp.rms_eps);
        let add = self.post_add(post, x2);
        let added = add.is_some();
        b.norm_mul_mats(x, add, norm, &f.h, &[wb, wc, wx], &[&gb, &gc, &xin])?;
        // bx = b * x_in (into y), conv(bx) into x_in, c * conv into b.
        b.mul(&gb, &xin, &y)?;
        b.short_conv(&y, &cw.conv, &self.conv.state[ci], slots, &xin)?;
        b.mul(&gc, &xin, &gb)?;
        let post_norm = lw.post_attn_norm.as_ref();
        self.residual(&cw.out_proj, &gb, post_norm, added, x, x2)
    }

    /// FFN block: the stream plus `down(glu(gate(h), up(h)))` with `h =
    /// norm(stream)` ([`Layer::residual`] says where it goes).
    fn ffn<'w>(
        &self,
        lw: &'w LayerWeights<B::Tensor>,
        x: &B::Tensor,
        post: Option<&B::Tensor>,
        x2: &B::Tensor,
    ) -> Result<Flow<'w, B::Tensor>, ModelError> {
        let (b, hp, f) = (self.b, self.hp, &self.bufs);
        let add = self.post_add(post, x2);
        let added = add.is_some();
        b.norm_mul_mats_glu(
            hp.arch.glu,
            x,
            add,
            (&lw.ffn_norm, hp.rms_eps),
            &f.h,
            [&lw.ffn_gate, &lw.ffn_up],
            [&f.gate, &f.up],
            &f.act,
        )?;
        let post_norm = lw.post_ffw_norm.as_ref();
        self.residual(&lw.ffn_down, &f.act, post_norm, added, x, x2)
    }

    /// A block's output `o = w · a` (its output projection) and the
    /// residual: the stream is x, or x2 where the block's first matvecs
    /// wrote it (`added`). Without a post-norm, one `mul_mat_add` (fused on
    /// wgpu) writes stream + o into the other buffer. With one (Gemma 3), o
    /// is left pending: the next block's first matvecs add
    /// `rms_norm(o) * post_norm` as they read their input (one dispatch
    /// fewer a block on wgpu), or `forward` after the last block.
    fn residual<'w>(
        &self,
        w: &B::Tensor,
        a: &B::Tensor,
        post_norm: Option<&'w B::Tensor>,
        added: bool,
        x: &B::Tensor,
        x2: &B::Tensor,
    ) -> Result<Flow<'w, B::Tensor>, ModelError> {
        let (b, f) = (self.b, &self.bufs);
        let (res, out) = if added { (x2, x) } else { (x, x2) };
        match post_norm {
            Some(n) => {
                b.mul_mat(w, a, &f.o)?;
                Ok(Flow {
                    wrote: added,
                    post: Some(n),
                })
            }
            None => {
                b.mul_mat_add(w, a, res, &f.o, out)?;
                Ok(Flow {
                    wrote: !added,
                    post: None,
                })
            }
        }
    }
}

/// Output head: logits `[n_vocab, n_out]` and their argmax `[n_out]` of the
/// rows of `x` (`[n_embd, T]`) that `ub.outputs` names.
fn output_head<B: Backend>(
    b: &B,
    hp: &HParams,
    w: &Weights<B::Tensor>,
    s: &Scratch<B::Tensor>,
    ub: &UBatch,
    x: B::Tensor,
) -> Result<Output<B::Tensor>, ModelError> {
    let (t, n_out, n_embd) = (ub.tokens.len(), ub.outputs.len(), hp.n_embd);
    // Only the rows that want logits go through the head.
    let identity = n_out == t && ub.outputs.iter().enumerate().all(|(i, &o)| o as usize == i);
    let xo = if identity {
        x
    } else {
        let outs = view(b, &s.outs, &[n_out])?;
        b.write(&outs, 0, bytemuck::cast_slice(ub.outputs))?;
        let xo = view(b, &s.xo, &[n_embd, n_out])?;
        b.get_rows(&x, &outs, &xo)?;
        xo
    };
    let xn = view(b, &s.xn, &[n_embd, n_out])?;
    b.rms_norm(&xo, Some(&w.output_norm), hp.rms_eps, &xn)?;
    let logits = view(b, &s.logits, &[hp.n_vocab, n_out])?;
    b.mul_mat(w.output.as_ref().unwrap_or(&w.tok_embd), &xn, &logits)?;
    let argmax = view(b, &s.argmax, &[n_out])?;
    b.argmax(&logits, &argmax)?;
    let topk = view(b, &s.topk, &[1 + 2 * TOPK_CAP, n_out])?;
    Ok(Output {
        logits,
        argmax,
        hidden: xn,
        topk,
        n_out,
    })
}
