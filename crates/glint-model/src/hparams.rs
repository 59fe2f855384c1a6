//! Hyperparameters, read through the GGUF key table with llama.cpp's defaults.

use glint_backend::{RopeMode, RopeParams};
use glint_gguf::{Array, GgufFile, Key, Value};

use crate::arch::{arch_info, ArchInfo, SwaDefault};
use crate::ModelError;

/// RoPE frequency scaling, from `{arch}.rope.scaling.*`.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum RopeScaling {
    /// No scaling.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// Context extension factor.
        factor: f32,
    },
    /// YaRN.
    Yarn {
        /// Context extension factor.
        factor: f32,
        /// Training context length.
        n_ctx_orig: usize,
        /// Magnitude factor.
        attn_factor: f32,
        /// Low correction parameter.
        beta_fast: f32,
        /// High correction parameter.
        beta_slow: f32,
        /// Extrapolation mix (llama.cpp's `yarn_ext_factor`; 1 = full YaRN).
        ext_factor: f32,
    },
}

/// Command-line overrides of the file's RoPE settings (llama.cpp's
/// `--rope-scaling`, `--rope-scale`, `--rope-freq-base`,
/// `--rope-freq-scale`, `--yarn-*`); `None` keeps the file's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RopeOverrides {
    /// `none`, `linear` or `yarn`.
    pub scaling: Option<String>,
    /// Context scale factor (`--rope-scale N`: frequencies divided by N).
    pub factor: Option<f32>,
    /// `--rope-freq-base`.
    pub freq_base: Option<f32>,
    /// `--yarn-orig-ctx`: the context the model was trained at.
    pub yarn_orig_ctx: Option<usize>,
    /// `--yarn-ext-factor`.
    pub yarn_ext_factor: Option<f32>,
    /// `--yarn-attn-factor`.
    pub yarn_attn_factor: Option<f32>,
    /// `--yarn-beta-fast`.
    pub yarn_beta_fast: Option<f32>,
    /// `--yarn-beta-slow`.
    pub yarn_beta_slow: Option<f32>,
}

/// What the forward pass needs to know about a model.
#[derive(Clone, Debug)]
pub struct HParams {
    /// The architecture's table row.
    pub arch: &'static ArchInfo,
    /// Vocabulary size (rows of the output head).
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// FFN hidden width.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Elements per head (K and V; glint requires them equal).
    pub head_dim: usize,
    /// Dimensions rotated by RoPE.
    pub n_rot: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base of global layers.
    pub rope_freq_base: f32,
    /// RoPE base of sliding-window layers.
    pub rope_freq_base_swa: f32,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Sliding window (tokens); 0 = none.
    pub n_swa: usize,
    /// Per layer: sliding-window attention?
    pub swa_layers: Vec<bool>,
    /// Attention logit soft-capping (0 = off).
    pub attn_softcap: f32,
    /// Final logit soft-capping (0 = off).
    pub final_softcap: f32,
    /// Per layer: a short-convolution layer (LFM2: `head_count_kv` 0)?
    pub conv_layers: Vec<bool>,
    /// Inputs of a short convolution (`shortconv.l_cache`); 0 = none.
    pub n_conv: usize,
}

impl HParams {
    /// Read from a GGUF file. An unknown architecture is an error naming it.
    pub fn from_gguf(f: &GgufFile) -> Result<HParams, ModelError> {
        let arch_name = f.architecture()?;
        let arch = arch_info(arch_name)
            .ok_or_else(|| ModelError::UnsupportedArch(arch_name.to_string()))?;
        let n_embd = f.require_arch_usize(Key::EmbeddingLength)?;
        let n_layer = f.require_arch_usize(Key::BlockCount)?;
        let n_ff = f.require_arch_usize(Key::FeedForwardLength)?;
        let n_head = f.require_arch_usize(Key::HeadCount)?;
        let (n_head_kv, conv_layers) = read_head_count_kv(f, arch, n_layer, n_head)?;
        // Sizes first: everything after allocates by them.
        for (key, v) in [
            (Key::EmbeddingLength, n_embd),
            (Key::BlockCount, n_layer),
            (Key::FeedForwardLength, n_ff),
            (Key::HeadCount, n_head),
            (Key::HeadCountKv, n_head_kv),
        ] {
            check_size(f, key, v)?;
        }
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(ModelError::Invalid(format!(
                "head_count {n_head} is not a positive multiple of head_count_kv {n_head_kv}"
            )));
        }
        let head_dim_k = f.arch_usize(Key::KeyLength)?.unwrap_or(n_embd / n_head);
        let head_dim_v = f.arch_usize(Key::ValueLength)?.unwrap_or(head_dim_k);
        if head_dim_k != head_dim_v || head_dim_k == 0 {
            return Err(ModelError::Invalid(format!(
                "key_length {head_dim_k} and value_length {head_dim_v} must be equal and non-zero"
            )));
        }
        let n_rot = f.arch_usize(Key::RopeDimensionCount)?.unwrap_or(head_dim_k);
        if n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(ModelError::Invalid(format!(
                "rope.dimension_count {n_rot} must be even and at most the head size {head_dim_k}"
            )));
        }
        let rms_eps = f.arch_f32(Key::LayerNormRmsEpsilon)?.unwrap_or(1e-5);
        let rope_freq_base = f.arch_f32(Key::RopeFreqBase)?.unwrap_or(10_000.0);
        let rope_freq_base_swa = match f.arch_f32(Key::RopeFreqBaseSwa)? {
            Some(b) => b,
            None => arch.rope_base_swa_default.unwrap_or(rope_freq_base),
        };
        let n_ctx_train = f.arch_usize(Key::ContextLength)?.unwrap_or(2048);
        let rope_scaling = read_rope_scaling(f, n_ctx_train)?;
        let n_vocab = match f.get_str_array("tokenizer.ggml.tokens")? {
            Some(t) => t.len(),
            None => f.require_arch_usize(Key::VocabSize)?,
        };
        let n_swa = f.arch_usize(Key::SlidingWindow)?.unwrap_or(0);
        // Positions are i32: a wider window is a lie (the mask kernels
        // compare positions in i32).
        if n_swa > i32::MAX as usize {
            return Err(ModelError::Invalid(format!(
                "{} = {n_swa}: a sliding window must be at most {}",
                f.arch_key(Key::SlidingWindow)?,
                i32::MAX
            )));
        }
        let swa_layers = read_swa_layers(f, arch, n_layer, n_swa)?;
        let n_conv = if conv_layers.iter().any(|&c| c) {
            let l = f.require_arch_usize(Key::ShortConvLCache)?;
            if !(2..=MAX_CONV).contains(&l) {
                return Err(ModelError::Invalid(format!(
                    "{} = {l}: a short convolution of 2..={MAX_CONV} inputs",
                    f.arch_key(Key::ShortConvLCache)?
                )));
            }
            l
        } else {
            0
        };
        let attn_softcap = f.arch_f32(Key::AttnLogitSoftcapping)?.unwrap_or(0.0);
        let final_softcap = f.arch_f32(Key::FinalLogitSoftcapping)?.unwrap_or(0.0);
        for (key, v) in [(Key::ContextLength, n_ctx_train), (Key::VocabSize, n_vocab)] {
            check_size(f, key, v)?;
        }
        for (key, v, zero_ok) in [
            (Key::LayerNormRmsEpsilon, rms_eps, false),
            (Key::RopeFreqBase, rope_freq_base, false),
            (Key::RopeFreqBaseSwa, rope_freq_base_swa, false),
            (Key::AttnLogitSoftcapping, attn_softcap, true),
            (Key::FinalLogitSoftcapping, final_softcap, true),
        ] {
            if !(v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0))) {
                let need = if zero_ok { ">= 0" } else { "> 0" };
                return Err(ModelError::Invalid(format!(
                    "{} = {v} must be finite and {need}",
                    f.arch_key(key)?
                )));
            }
        }
        if n_rot == 0 {
            return Err(ModelError::Invalid(format!(
                "{} = 0: RoPE needs at least one pair of dimensions",
                f.arch_key(Key::RopeDimensionCount)?
            )));
        }
        if n_swa == 0 && matches!(arch.swa_default, SwaDefault::Pattern(_)) {
            return Err(ModelError::Invalid(format!(
                "{} is 0 (or missing), but {} has sliding-window layers",
                f.arch_key(Key::SlidingWindow)?,
                arch.name
            )));
        }
        Ok(HParams {
            arch,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_ff,
            n_head,
            n_head_kv,
            head_dim: head_dim_k,
            n_rot,
            rms_eps,
            rope_freq_base,
            rope_freq_base_swa,
            rope_scaling,
            n_swa,
            swa_layers,
            attn_softcap,
            final_softcap,
            conv_layers,
            n_conv,
        })
    }

    /// Whether layer `il` is a short-convolution layer (no KV cache).
    pub fn is_conv(&self, il: usize) -> bool {
        self.conv_layers.get(il).copied().unwrap_or(false)
    }

    /// The layers with attention (and so K/V rows), in order.
    pub fn attn_layers(&self) -> Vec<usize> {
        (0..self.n_layer).filter(|&il| !self.is_conv(il)).collect()
    }

    /// Values of one sequence's recurrent state in one short-convolution
    /// layer: its last `n_conv - 1` inputs per channel (llama.cpp's
    /// `n_embd_r`); 0 without such layers.
    pub fn n_embd_conv(&self) -> usize {
        self.n_conv.saturating_sub(1) * self.n_embd
    }

    /// Width of one token's K (or V) row in the cache: `head_dim * n_head_kv`.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim * self.n_head_kv
    }

    /// RoPE parameters of layer `il` for tensors of `n_head` heads.
    pub fn rope(&self, il: usize, n_head: usize) -> RopeParams {
        let swa = self.swa_layers.get(il).copied().unwrap_or(false);
        let base = if swa {
            self.rope_freq_base_swa
        } else {
            self.rope_freq_base
        };
        let mut p = RopeParams::plain(self.arch.rope_mode, self.head_dim, n_head, base);
        p.n_rot = self.n_rot;
        p.n_ctx_orig = self.n_ctx_train;
        match self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => p.freq_scale = 1.0 / factor,
            RopeScaling::Yarn {
                factor,
                n_ctx_orig,
                attn_factor,
                beta_fast,
                beta_slow,
                ext_factor,
            } => {
                p.freq_scale = 1.0 / factor;
                p.ext_factor = ext_factor;
                p.attn_factor = attn_factor;
                p.beta_fast = beta_fast;
                p.beta_slow = beta_slow;
                p.n_ctx_orig = n_ctx_orig;
            }
        }
        p
    }

    /// Apply command-line RoPE overrides on top of the file's settings, as
    /// llama.cpp does: a scaling type, a factor, a base, YaRN's parameters.
    /// Each value is checked (finite, positive where it must be).
    pub fn apply_rope_overrides(&mut self, o: &RopeOverrides) -> Result<(), ModelError> {
        let bad = |what: &str, v: f32| {
            Err(ModelError::Invalid(format!(
                "--{what} {v}: must be finite and > 0"
            )))
        };
        for (what, v) in [
            ("rope-scale", o.factor),
            ("rope-freq-base", o.freq_base),
            ("yarn-attn-factor", o.yarn_attn_factor),
            ("yarn-beta-fast", o.yarn_beta_fast),
            ("yarn-beta-slow", o.yarn_beta_slow),
        ] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return bad(what, v);
            }
        }
        if let Some(e) = o.yarn_ext_factor.filter(|e| !(e.is_finite() && *e >= 0.0)) {
            return Err(ModelError::Invalid(format!(
                "--yarn-ext-factor {e}: must be finite and >= 0"
            )));
        }
        if let Some(b) = o.freq_base {
            self.rope_freq_base = b;
        }
        let (cur_kind, cur_factor) = match self.rope_scaling {
            RopeScaling::None => ("none", 1.0),
            RopeScaling::Linear { factor } => ("linear", factor),
            RopeScaling::Yarn { factor, .. } => ("yarn", factor),
        };
        let kind = o.scaling.as_deref().unwrap_or(cur_kind);
        let factor = o.factor.unwrap_or(cur_factor);
        let (n_ctx_orig, attn, fast, slow, ext) = match self.rope_scaling {
            RopeScaling::Yarn {
                n_ctx_orig,
                attn_factor,
                beta_fast,
                beta_slow,
                ext_factor,
                ..
            } => (n_ctx_orig, attn_factor, beta_fast, beta_slow, ext_factor),
            _ => (self.n_ctx_train, 1.0, 32.0, 1.0, 1.0),
        };
        self.rope_scaling = match kind {
            "none" => RopeScaling::None,
            "linear" => RopeScaling::Linear { factor },
            "yarn" => RopeScaling::Yarn {
                factor,
                n_ctx_orig: o.yarn_orig_ctx.filter(|&n| n > 0).unwrap_or(n_ctx_orig),
                attn_factor: o.yarn_attn_factor.unwrap_or(attn),
                beta_fast: o.yarn_beta_fast.unwrap_or(fast),
                beta_slow: o.yarn_beta_slow.unwrap_or(slow),
                ext_factor: o.yarn_ext_factor.unwrap_or(ext),
            },
            other => {
                return Err(ModelError::Invalid(format!(
                    "--rope-scaling `{other}` (none, linear, yarn)"
                )))
            }
        };
        Ok(())
    }

    /// The RoPE mode (for K-shift).
    pub fn rope_mode(&self) -> RopeMode {
        self.arch.rope_mode
    }
}

/// Largest size a hyperparameter may have, per key, with the reason: each
/// is far above any real model and far below what would make a size
/// computation overflow or an allocation run away (`block_count`
/// 0xffffffff once asked for terabytes).
const SIZE_LIMITS: &[(Key, usize, &str)] = &[
    (Key::EmbeddingLength, 1 << 17, "embedding width"),
    (Key::BlockCount, 1 << 12, "layers"),
    (Key::FeedForwardLength, 1 << 20, "feed-forward width"),
    (Key::HeadCount, 1 << 12, "attention heads"),
    (Key::HeadCountKv, 1 << 12, "KV heads"),
    (Key::ContextLength, 1 << 24, "trained context"),
    (Key::VocabSize, 1 << 23, "vocabulary entries"),
];

/// `v` is within `1..=` the key's limit in [`SIZE_LIMITS`].
fn check_size(f: &GgufFile, key: Key, v: usize) -> Result<(), ModelError> {
    let (max, what) = SIZE_LIMITS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|&(_, m, w)| (m, w))
        .unwrap_or((usize::MAX, "value"));
    if v == 0 || v > max {
        return Err(ModelError::Invalid(format!(
            "{} = {v}: {what} must be 1..={max}",
            f.arch_key(key)?
        )));
    }
    Ok(())
}

/// Longest short convolution glint takes (LFM2's is 3).
const MAX_CONV: usize = 64;

/// `head_count_kv`: absent (= `head_count`), one number, or one per layer
/// (LFM2), where 0 marks a short-convolution layer. The attention layers
/// must agree on one count. Returns it and the per-layer conv flags.
fn read_head_count_kv(
    f: &GgufFile,
    arch: &ArchInfo,
    n_layer: usize,
    n_head: usize,
) -> Result<(usize, Vec<bool>), ModelError> {
    let key = f.arch_key(Key::HeadCountKv)?;
    let per_layer: Vec<u64> = match f.get(&key) {
        None => return Ok((n_head, vec![false; n_layer])),
        Some(Value::Array(a)) => {
            let v: Option<Vec<u64>> = match a {
                Array::U8(v) => Some(v.iter().map(|&x| x as u64).collect()),
                Array::U16(v) => Some(v.iter().map(|&x| x as u64).collect()),
                Array::U32(v) => Some(v.iter().map(|&x| x as u64).collect()),
                Array::I32(v) => v.iter().map(|&x| u64::try_from(x).ok()).collect(),
                _ => None,
            };
            v.ok_or_else(|| ModelError::Invalid(format!("{key} is not an array of counts")))?
        }
        Some(_) => return Ok((f.require_usize(&key)?, vec![false; n_layer])),
    };
    if per_layer.len() != n_layer {
        return Err(ModelError::Invalid(format!(
            "{key} has {} entries for {n_layer} layers",
            per_layer.len()
        )));
    }
    let conv: Vec<bool> = per_layer.iter().map(|&n| n == 0).collect();
    if conv.iter().any(|&c| c) && !arch.short_conv {
        return Err(ModelError::Invalid(format!(
            "{key} is 0 for some layers, but {} has no layers without attention",
            arch.name
        )));
    }
    let mut counts = per_layer.iter().filter(|&&n| n > 0);
    let Some(&first) = counts.next() else {
        return Err(ModelError::Invalid(format!(
            "{key}: no layer has attention"
        )));
    };
    if let Some(&other) = counts.find(|&&n| n != first) {
        return Err(ModelError::Invalid(format!(
            "{key}: attention layers with {first} and {other} KV heads (glint needs one count)"
        )));
    }
    let n = usize::try_from(first).map_err(|_| ModelError::Invalid(format!("{key} = {first}")))?;
    Ok((n, conv))
}

fn read_rope_scaling(f: &GgufFile, n_ctx_train: usize) -> Result<RopeScaling, ModelError> {
    let kind = f.arch_str(Key::RopeScalingType)?.unwrap_or("none");
    let factor = f.arch_f32(Key::RopeScalingFactor)?.unwrap_or(1.0);
    let scaling = match kind {
        "none" => RopeScaling::None,
        _ if factor == 1.0 => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "yarn" => RopeScaling::Yarn {
            factor,
            n_ctx_orig: f
                .arch_usize(Key::RopeScalingOrigCtxLen)?
                .unwrap_or(n_ctx_train),
            attn_factor: f.arch_f32(Key::RopeScalingAttnFactor)?.unwrap_or(1.0),
            beta_fast: f.arch_f32(Key::RopeScalingYarnBetaFast)?.unwrap_or(32.0),
            beta_slow: f.arch_f32(Key::RopeScalingYarnBetaSlow)?.unwrap_or(1.0),
            ext_factor: 1.0,
        },
        other => {
            return Err(ModelError::Invalid(format!(
                "rope.scaling.type `{other}` is not supported (none, linear, yarn)"
            )))
        }
    };
    if !(factor.is_finite() && factor > 0.0) {
        return Err(ModelError::Invalid(format!(
            "rope.scaling.factor {factor} must be > 0"
        )));
    }
    Ok(scaling)
}

fn read_swa_layers(
    f: &GgufFile,
    arch: &ArchInfo,
    n_layer: usize,
    n_swa: usize,
) -> Result<Vec<bool>, ModelError> {
    if n_swa == 0 {
        return Ok(vec![false; n_layer]);
    }
    let key = f.arch_key(Key::SlidingWindowPattern)?;
    let pattern = match f.get(&key) {
        // Newer converters store one bool per layer.
        Some(Value::Array(Array::Bool(v))) => {
            if v.len() != n_layer {
                return Err(ModelError::Invalid(format!(
                    "{key} has {} entries for {n_layer} layers",
                    v.len()
                )));
            }
            return Ok(v.clone());
        }
        Some(v) => match v.as_integer() {
            Some(n) if n > 0 => n as usize,
            _ => {
                return Err(ModelError::Invalid(format!(
                    "{key} = {v} is not a positive integer"
                )))
            }
        },
        None => match arch.swa_default {
            SwaDefault::Pattern(n) => n,
            SwaDefault::None => return Ok(vec![true; n_layer]),
        },
    };
    Ok((0..n_layer).map(|il| il % pattern < pattern - 1).collect())
}
