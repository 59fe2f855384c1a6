//! Parameters of the ops that have more than a tensor or two.

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RopeMode {
    /// ggml `GGML_ROPE_TYPE_NORMAL`: adjacent pairs `(x[2i], x[2i+1])` (Llama).
    Norm,
    /// ggml `GGML_ROPE_TYPE_NEOX`: halves `(x[i], x[i + n_rot/2])` (GPT-NeoX, Gemma, Qwen).
    Neox,
}

/// RoPE with ggml's semantics, YaRN included.
///
/// For pair index `i` (`0 <= i < n_rot/2`) at position `p`:
/// ```text
/// theta_extrap = p * freq_base^(-2i/n_rot)
/// theta_interp = freq_scale * theta_extrap
/// if ext_factor != 0:
///     ramp  = (1 - clamp((i - corr_lo) / max(0.001, corr_hi - corr_lo), 0, 1)) * ext_factor
///     theta = theta_interp * (1 - ramp) + theta_extrap * ramp
///     mscale = attn_factor * (1 + 0.1 * ln(1 / freq_scale))
/// else:
///     theta = theta_interp;  mscale = attn_factor
/// (x0, x1) <- ((x0 cos - x1 sin) * mscale, (x0 sin + x1 cos) * mscale)
/// ```
/// with `corr_lo = max(0, floor(corr_dim(beta_fast)))`,
/// `corr_hi = min(n_rot - 1, ceil(corr_dim(beta_slow)))`,
/// `corr_dim(b) = n_rot * ln(n_ctx_orig / (b * 2 pi)) / (2 ln(freq_base))`
/// (ggml's `ggml_rope_yarn_corr_dims`). Dims `n_rot..head_dim` are copied.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct RopeParams {
    /// Pairing of dimensions.
    pub mode: RopeMode,
    /// Dimensions rotated per head (even, `<= head_dim`).
    pub n_rot: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Heads per token in the tensor being rotated.
    pub n_head: usize,
    /// Base of the frequencies (`rope.freq_base`).
    pub freq_base: f32,
    /// Position scale: 1 / linear-or-YaRN factor (`1.0` = no scaling).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (`0.0` = off).
    pub ext_factor: f32,
    /// Magnitude factor (`1.0` = none). K-shift never applies it.
    pub attn_factor: f32,
    /// YaRN low correction dim parameter (ggml default 32).
    pub beta_fast: f32,
    /// YaRN high correction dim parameter (ggml default 1).
    pub beta_slow: f32,
    /// Training context length YaRN corrects for.
    pub n_ctx_orig: usize,
}

impl RopeParams {
    /// Plain RoPE (no scaling) over all of a head's dims.
    pub fn plain(mode: RopeMode, head_dim: usize, n_head: usize, freq_base: f32) -> Self {
        RopeParams {
            mode,
            n_rot: head_dim,
            head_dim,
            n_head,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 0,
        }
    }

    /// ggml's `ggml_rope_yarn_corr_dims`: `[corr_lo, corr_hi]`.
    pub fn yarn_corr_dims(&self) -> [f32; 2] {
        let n_rot = self.n_rot as f32;
        let corr_dim = |beta: f32| -> f32 {
            n_rot * (self.n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * self.freq_base.ln())
        };
        let lo = corr_dim(self.beta_fast).floor().max(0.0);
        let hi = corr_dim(self.beta_slow).ceil().min(n_rot - 1.0);
        [lo, hi]
    }
}

/// Per-head RMSNorm of a layer's queries and keys before RoPE (QK-norm,
/// Gemma 3), as [`Backend::rope_store`](crate::Backend::rope_store) takes
/// it: `rms_norm(q, w[0]) -> out[0]`, `rms_norm(k, w[1]) -> out[1]`, rows
/// of `head_dim`.
#[derive(Debug)]
pub struct QkNorm<'a, T: ?Sized> {
    /// The Q and K norm weights, F32 `[head_dim]` each.
    pub w: [&'a T; 2],
    /// RMSNorm's epsilon.
    pub eps: f32,
    /// Scratch shaped as q and k (F32 `[head_dim, n_head, m]`,
    /// `[head_dim, n_head_kv, m]`): the normed q and k where the backend
    /// goes through them, unspecified after the call.
    pub out: [&'a T; 2],
}

// By hand: derived, they would ask `T: Copy` of the tensors behind the
// references.
impl<T: ?Sized> Clone for QkNorm<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for QkNorm<'_, T> {}

/// A post-norm's residual not yet added (Gemma 3's blocks end in one):
/// the stream a block reads is `x + rms_norm(y) * w`, where `x` is the
/// residual the caller passes beside it. The block's first matvecs add it
/// as they read their input and write the sum to `out`, the stream from
/// then on ([`Backend::norm_mul_mats`](crate::Backend::norm_mul_mats));
/// by default, [`norm_add`](crate::Backend::norm_add) first.
#[derive(Debug)]
pub struct PostAdd<'a, T: ?Sized> {
    /// The previous block's output, F32 `[n, m]`.
    pub y: &'a T,
    /// Its post-norm's weights, F32 `[n]`.
    pub w: &'a T,
    /// RMSNorm's epsilon.
    pub eps: f32,
    /// Scratch `[n, m]` for the backends that norm apart, unspecified after.
    pub tmp: &'a T,
    /// `x + rms_norm(y) * w`, F32 `[n, m]`, written (not `x`, not `y`).
    pub out: &'a T,
}

impl<T: ?Sized> Clone for PostAdd<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for PostAdd<'_, T> {}

/// Attention over cache rows `kv_start .. kv_start + n_kv`.
///
/// Logit of query `i`, head `h`, cache row `j`:
/// `x = q·k; if softcap > 0 { x = softcap * tanh(x / softcap) }; x = x * scale + mask[j, i]`
/// (ggml's order: soft-capping, then `soft_max_ext`'s scale and mask).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct AttnParams {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (`n_head % n_head_kv == 0`).
    pub n_head_kv: usize,
    /// Elements per head, for K and V alike.
    pub head_dim: usize,
    /// Multiplier of the logits (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft-capping (`0.0` = off).
    pub softcap: f32,
    /// First cache row considered (stream start, in multi-stream layouts).
    pub kv_start: usize,
    /// Number of cache rows considered; the mask has this many rows.
    pub n_kv: usize,
}

impl AttnParams {
    /// `n_head` query heads over `n_head_kv` K/V heads of `head_dim`
    /// elements, attending to the first `n_kv` cache rows, logits scaled by
    /// `1/sqrt(head_dim)`, no soft-cap; other values by struct update.
    pub fn new(n_head: usize, n_head_kv: usize, head_dim: usize, n_kv: usize) -> AttnParams {
        AttnParams {
            n_head,
            n_head_kv,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: 0.0,
            kv_start: 0,
            n_kv,
        }
    }
}

/// Elementwise activations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Unary {
    /// `x * sigmoid(x)`.
    Silu,
    /// ggml's tanh approximation:
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu,
}

/// Gated activations: `act(gate) * up`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Glu {
    /// `silu(gate) * up` (Llama).
    SwiGlu,
    /// `gelu(gate) * up` (Gemma).
    GeGlu,
}

/// Most words of one cell in a device copy of a cache's cells
/// ([`Backend::kq_mask`](crate::Backend::kq_mask)): its position (`-1`:
/// empty), then its sequence set, bit `s % 32` of word `1 + s / 32` for
/// sequence `s`, ids `0..256` (llama.cpp's `LLAMA_MAX_SEQ`). A copy for a
/// cache of fewer sequences keeps fewer words a cell (2 for up to 32).
pub const CELL_WORDS: usize = 1 + 256 / 32;

/// Sliding-window kinds of a built mask (llama.cpp's `llama_swa_type`),
/// each with its window `n > 0`; `p0` is the key's position, `p1` the
/// query's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MaskWindow {
    /// No window.
    None,
    /// Hidden when `p1 - p0 >= n`.
    Standard(u32),
    /// Hidden when the key is before the query's chunk: `p0 < (p1 / n) * n`.
    Chunked(u32),
    /// Hidden when `|p1 - p0| > n / 2`.
    Symmetric(u32),
}

impl MaskWindow {
    /// The kind's code and window as the kernels take them (0 none, 1
    /// standard, 2 chunked, 3 symmetric).
    pub fn code(self) -> (u32, u32) {
        match self {
            MaskWindow::None => (0, 0),
            MaskWindow::Standard(n) => (1, n),
            MaskWindow::Chunked(n) => (2, n),
            MaskWindow::Symmetric(n) => (3, n),
        }
    }

    /// Whether a key at `p0` is outside the window of a query at `p1` (a
    /// window of 0, which `kq_mask` refuses, hides nothing).
    pub fn hides(self, p0: i32, p1: i32) -> bool {
        let (p0, p1) = (p0 as i64, p1 as i64);
        if self.code().1 == 0 {
            return false;
        }
        match self {
            MaskWindow::None => false,
            MaskWindow::Standard(n) => p1 - p0 >= n as i64,
            MaskWindow::Chunked(n) => p0 < (p1 / n as i64) * n as i64,
            MaskWindow::Symmetric(n) => {
                let (d, h) = (p1 - p0, n as i64 / 2);
                d < -h || d > h
            }
        }
    }
}

/// How [`Backend::kq_mask`](crate::Backend::kq_mask) builds a mask.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct KqMask {
    /// The row of the cells' copy that is the mask's cell 0 (the span's
    /// first cache row).
    pub first_row: usize,
    /// Hide keys at positions after the query.
    pub causal: bool,
    /// The sliding window.
    pub window: MaskWindow,
    /// ALiBi: a visible key gets `-|p0 - p1|` instead of 0.
    pub alibi: bool,
    /// How many (cell, query) pairs the mask lets through, as the caller
    /// counted them, if it did: no kernel reads it (a backend's work
    /// counters and kernel choices may).
    pub visible: Option<u64>,
}

impl KqMask {
    /// The mask's value for a query at position `pos` of sequence `seq`
    /// and the cell `cell` (its words, 2 to [`CELL_WORDS`]): `-inf` when
    /// the cell is empty, does not hold `seq` (ids outside `0..32 (words -
    /// 1)` are held by no cell), holds a later position (causal) or is outside the window;
    /// else 0, or `-|p0 - pos|` with ALiBi. A query at a negative position
    /// sees no cell. The kernels' plain twin.
    pub fn value(&self, cell: &[i32], pos: i32, seq: i32) -> f32 {
        let Some(&p0) = cell.first() else {
            return f32::NEG_INFINITY;
        };
        let held = (0..32 * (cell.len() as i32 - 1)).contains(&seq)
            && (cell[1 + seq as usize / 32] as u32) >> (seq % 32) & 1 == 1;
        if p0 < 0 || pos < 0 || !held || (self.causal && p0 > pos) || self.window.hides(p0, pos) {
            return f32::NEG_INFINITY;
        }
        if self.alibi {
            -((p0 as i64 - pos as i64).abs() as f32)
        } else {
            0.0
        }
    }
}
