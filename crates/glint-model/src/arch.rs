//! Architecture facts, one table row per architecture. The forward pass reads
//! these; it never branches on an architecture's name.

use glint_backend::{Glu, RopeMode};

/// How the input embeddings are scaled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EmbdScale {
    /// As stored.
    None,
    /// Times `sqrt(n_embd)` (Gemma).
    SqrtNEmbd,
}

/// Which layers use sliding-window attention when the GGUF does not say.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SwaDefault {
    /// No sliding window.
    None,
    /// Layer `il` is SWA iff `il % n < n - 1` (llama.cpp's `set_swa_pattern(n)`).
    Pattern(usize),
}

/// One architecture's facts.
#[derive(Clone, Copy, Debug)]
pub struct ArchInfo {
    /// `general.architecture`.
    pub name: &'static str,
    /// RoPE pairing.
    pub rope_mode: RopeMode,
    /// Gated FFN activation.
    pub glu: Glu,
    /// Input embedding scale.
    pub embd_scale: EmbdScale,
    /// Per-head RMSNorm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// RMSNorm after attention and after the FFN, before each residual add
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Q, K, V projections have biases (`attn_q.bias`, …).
    pub qkv_bias: bool,
    /// SWA layer pattern when `sliding_window_pattern` is absent.
    pub swa_default: SwaDefault,
    /// RoPE base of SWA layers when `rope.freq_base_swa` is absent
    /// (`None`: the global base).
    pub rope_base_swa_default: Option<f32>,
    /// The final norm's tensor (LFM2's converter names it
    /// `token_embd_norm`).
    pub output_norm: &'static str,
    /// Layers whose `head_count_kv` is 0 are short-convolution layers
    /// (`shortconv.{conv,in_proj,out_proj}`, LFM2) with a recurrent state
    /// instead of a KV cache.
    pub short_conv: bool,
}

/// Every architecture glint runs.
pub const ARCHS: &[ArchInfo] = &[
    ArchInfo {
        name: "llama",
        rope_mode: RopeMode::Norm,
        glu: Glu::SwiGlu,
        embd_scale: EmbdScale::None,
        qk_norm: false,
        post_norms: false,
        qkv_bias: false,
        swa_default: SwaDefault::None,
        rope_base_swa_default: None,
        output_norm: names::OUTPUT_NORM,
        short_conv: false,
    },
    ArchInfo {
        name: "gemma3",
        rope_mode: RopeMode::Neox,
        glu: Glu::GeGlu,
        embd_scale: EmbdScale::SqrtNEmbd,
        qk_norm: true,
        post_norms: true,
        qkv_bias: false,
        swa_default: SwaDefault::Pattern(6),
        // llama.cpp's default `rope_freq_base_train_swa` for Gemma 3.
        rope_base_swa_default: Some(10_000.0),
        output_norm: names::OUTPUT_NORM,
        short_conv: false,
    },
    ArchInfo {
        name: "qwen2",
        rope_mode: RopeMode::Neox,
        glu: Glu::SwiGlu,
        embd_scale: EmbdScale::None,
        qk_norm: false,
        post_norms: false,
        qkv_bias: true,
        swa_default: SwaDefault::None,
        rope_base_swa_default: None,
        output_norm: names::OUTPUT_NORM,
        short_conv: false,
    },
    ArchInfo {
        name: "lfm2",
        rope_mode: RopeMode::Neox,
        glu: Glu::SwiGlu,
        embd_scale: EmbdScale::None,
        qk_norm: true,
        post_norms: false,
        qkv_bias: false,
        swa_default: SwaDefault::None,
        rope_base_swa_default: None,
        output_norm: names::OUTPUT_NORM_LFM2,
        short_conv: true,
    },
];

/// The row for `name`, if glint runs it.
pub fn arch_info(name: &str) -> Option<&'static ArchInfo> {
    ARCHS.iter().find(|a| a.name == name)
}

/// Per-layer tensor names: `blk.{il}.<name>.weight` (or `.bias`).
pub mod names {
    /// Token embeddings `[n_embd, n_vocab]`.
    pub const TOKEN_EMBD: &str = "token_embd.weight";
    /// Final norm `[n_embd]`.
    pub const OUTPUT_NORM: &str = "output_norm.weight";
    /// LFM2's final norm `[n_embd]`.
    pub const OUTPUT_NORM_LFM2: &str = "token_embd_norm.weight";
    /// Output head `[n_embd, n_vocab]`; absent = tied to `token_embd`.
    pub const OUTPUT: &str = "output.weight";

    /// `blk.{il}.{suffix}`.
    pub fn blk(il: usize, suffix: &str) -> String {
        format!("blk.{il}.{suffix}")
    }
}
