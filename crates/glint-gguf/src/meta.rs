//! Typed metadata access and the one table of architecture-templated keys.
//!
//! `get_*` return `Ok(None)` for an absent key and [`GgufError::KeyType`] for
//! a key of another type; `require_*` turn absence into
//! [`GgufError::MissingKey`]. Scalar getters are strict about the stored type
//! except [`GgufFile::get_usize`], which takes any non-negative integer that
//! fits, because converters disagree on integer widths for counts.

use crate::error::{GgufError, Result};
use crate::reader::GgufFile;
use crate::value::{Array, Value};

/// The key naming the architecture; `{arch}` in [`KEYS`] is its value.
pub const KEY_ARCHITECTURE: &str = "general.architecture";

/// Defines [`Key`] and [`KEYS`] from one list, so a key cannot exist without
/// its spelling or be spelled twice.
macro_rules! keys {
    ($($(#[$doc:meta])* $key:ident => $template:literal,)*) => {
        /// An architecture-specific hyperparameter key; the file's spelling is
        /// its row in [`KEYS`] with `{arch}` replaced by `general.architecture`.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        pub enum Key {
            $($(#[$doc])* $key,)*
        }

        /// Every [`Key`] with its template, spelled as gguf-py's
        /// `gguf/constants.py` (`Keys.LLM`, `Keys.Attention`, `Keys.Rope`) and
        /// llama.cpp's `llama-arch.cpp`.
        pub const KEYS: &[(Key, &str)] = &[$((Key::$key, $template),)*];
    };
}

keys! {
    /// Training context length (`n_ctx_train`).
    ContextLength => "{arch}.context_length",
    /// `n_embd`.
    EmbeddingLength => "{arch}.embedding_length",
    /// `n_layer`.
    BlockCount => "{arch}.block_count",
    /// `n_ff` (a number, or an array per layer).
    FeedForwardLength => "{arch}.feed_forward_length",
    /// `n_head` (a number, or an array per layer).
    HeadCount => "{arch}.attention.head_count",
    /// `n_head_kv` (a number, or an array per layer).
    HeadCountKv => "{arch}.attention.head_count_kv",
    /// `n_embd_head_k`.
    KeyLength => "{arch}.attention.key_length",
    /// `n_embd_head_v`.
    ValueLength => "{arch}.attention.value_length",
    /// RMS norm epsilon.
    LayerNormRmsEpsilon => "{arch}.attention.layer_norm_rms_epsilon",
    /// Layer norm epsilon.
    LayerNormEpsilon => "{arch}.attention.layer_norm_epsilon",
    /// `n_rot`.
    RopeDimensionCount => "{arch}.rope.dimension_count",
    /// Rope base frequency.
    RopeFreqBase => "{arch}.rope.freq_base",
    /// Rope base frequency of sliding-window layers.
    RopeFreqBaseSwa => "{arch}.rope.freq_base_swa",
    /// `none`, `linear`, `yarn`, ...
    RopeScalingType => "{arch}.rope.scaling.type",
    /// Rope scaling factor.
    RopeScalingFactor => "{arch}.rope.scaling.factor",
    /// Context length the rope was trained at before scaling.
    RopeScalingOrigCtxLen => "{arch}.rope.scaling.original_context_length",
    /// Attention factor of rope scaling.
    RopeScalingAttnFactor => "{arch}.rope.scaling.attn_factor",
    /// YaRN extrapolation mix factor.
    RopeScalingYarnExtFactor => "{arch}.rope.scaling.yarn_ext_factor",
    /// YaRN attention factor.
    RopeScalingYarnAttnFactor => "{arch}.rope.scaling.yarn_attn_factor",
    /// YaRN beta fast.
    RopeScalingYarnBetaFast => "{arch}.rope.scaling.yarn_beta_fast",
    /// YaRN beta slow.
    RopeScalingYarnBetaSlow => "{arch}.rope.scaling.yarn_beta_slow",
    /// Sliding window size (`n_swa`).
    SlidingWindow => "{arch}.attention.sliding_window",
    /// Which layers use the sliding window (a number or an array of bools).
    SlidingWindowPattern => "{arch}.attention.sliding_window_pattern",
    /// Gemma 2 attention logit soft-capping.
    AttnLogitSoftcapping => "{arch}.attn_logit_softcapping",
    /// Gemma 2 final logit soft-capping.
    FinalLogitSoftcapping => "{arch}.final_logit_softcapping",
    /// `n_vocab` when stored (otherwise the token list's length).
    VocabSize => "{arch}.vocab_size",
    /// LFM2: the short convolution's length (its state holds `l_cache - 1`
    /// inputs).
    ShortConvLCache => "{arch}.shortconv.l_cache",
    /// Number of experts.
    ExpertCount => "{arch}.expert_count",
    /// Experts used per token.
    ExpertUsedCount => "{arch}.expert_used_count",
}

impl Key {
    /// The template, e.g. `"{arch}.attention.head_count"`.
    pub fn template(self) -> &'static str {
        // The macro writes one row per variant, so the fallback is never taken.
        KEYS.iter().find(|(k, _)| *k == self).map_or("", |(_, t)| t)
    }

    /// The key for architecture `arch`.
    pub fn for_arch(self, arch: &str) -> String {
        self.template().replace("{arch}", arch)
    }
}

fn key_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::KeyType {
        key: key.into(),
        expected,
        found: found.type_desc(),
    }
}

fn missing(key: &str) -> GgufError {
    GgufError::MissingKey { key: key.into() }
}

/// `get_x` (by name), `require_x`, `arch_x` (by [`Key`]) and
/// `require_arch_x` for one stored type.
macro_rules! getters {
    ($($get:ident, $require:ident, $arch:ident, $require_arch:ident,
       $t:ty, $name:literal, $pat:pat => $out:expr;)*) => {
        impl GgufFile {
            $(
                #[doc = concat!("`key` as ", $name, "; `Ok(None)` if absent, `KeyType` if another type.")]
                pub fn $get(&self, key: &str) -> Result<Option<$t>> {
                    match self.get(key) {
                        None => Ok(None),
                        Some($pat) => Ok(Some($out)),
                        Some(v) => Err(key_type(key, $name, v)),
                    }
                }

                #[doc = concat!("`key` as ", $name, "; `MissingKey` if absent.")]
                pub fn $require(&self, key: &str) -> Result<$t> {
                    self.$get(key)?.ok_or_else(|| missing(key))
                }

                #[doc = concat!("Architecture key `key` as ", $name, "; `Ok(None)` if absent.")]
                pub fn $arch(&self, key: Key) -> Result<Option<$t>> {
                    self.$get(&self.arch_key(key)?)
                }

                #[doc = concat!("Architecture key `key` as ", $name, "; `MissingKey` if absent.")]
                pub fn $require_arch(&self, key: Key) -> Result<$t> {
                    self.$require(&self.arch_key(key)?)
                }
            )*
        }
    };
}

getters! {
    get_str, require_str, arch_str, require_arch_str,
        &str, "string", Value::String(s) => s.as_str();
    get_u32, require_u32, arch_u32, require_arch_u32,
        u32, "u32", Value::U32(v) => *v;
    get_u64, require_u64, arch_u64, require_arch_u64,
        u64, "u64", Value::U64(v) => *v;
    get_i32, require_i32, arch_i32, require_arch_i32,
        i32, "i32", Value::I32(v) => *v;
    get_f32, require_f32, arch_f32, require_arch_f32,
        f32, "f32", Value::F32(v) => *v;
    get_bool, require_bool, arch_bool, require_arch_bool,
        bool, "bool", Value::Bool(v) => *v;
    get_array, require_array, arch_array, require_arch_array,
        &Array, "array", Value::Array(a) => a;
    get_str_array, require_str_array, arch_str_array, require_arch_str_array,
        &crate::StrArray, "array of string", Value::Array(Array::String(a)) => a;
    get_f32_array, require_f32_array, arch_f32_array, require_arch_f32_array,
        &[f32], "array of f32", Value::Array(Array::F32(a)) => a.as_slice();
    get_i32_array, require_i32_array, arch_i32_array, require_arch_i32_array,
        &[i32], "array of i32", Value::Array(Array::I32(a)) => a.as_slice();
    get_u32_array, require_u32_array, arch_u32_array, require_arch_u32_array,
        &[u32], "array of u32", Value::Array(Array::U32(a)) => a.as_slice();
}

impl GgufFile {
    /// `key` as a `usize`: any integer type, if non-negative and it fits.
    pub fn get_usize(&self, key: &str) -> Result<Option<usize>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = v
            .as_integer()
            .ok_or_else(|| key_type(key, "an integer", v))?;
        usize::try_from(n)
            .map(Some)
            .map_err(|_| GgufError::ValueOutOfRange {
                key: key.into(),
                value: n.to_string(),
                target: "usize",
            })
    }

    /// `key` as a `usize`; `MissingKey` if absent.
    pub fn require_usize(&self, key: &str) -> Result<usize> {
        self.get_usize(key)?.ok_or_else(|| missing(key))
    }

    /// Architecture key `key` as a `usize`; `Ok(None)` if absent.
    pub fn arch_usize(&self, key: Key) -> Result<Option<usize>> {
        self.get_usize(&self.arch_key(key)?)
    }

    /// Architecture key `key` as a `usize`; `MissingKey` if absent.
    pub fn require_arch_usize(&self, key: Key) -> Result<usize> {
        self.require_usize(&self.arch_key(key)?)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.require_str(KEY_ARCHITECTURE)
    }

    /// The spelling of `key` in this file (its template with `{arch}`
    /// replaced by [`GgufFile::architecture`]).
    pub fn arch_key(&self, key: Key) -> Result<String> {
        Ok(key.for_arch(self.architecture()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_table_is_one_row_per_key_and_templated() {
        for (i, (k, t)) in KEYS.iter().enumerate() {
            assert_eq!(k.template(), *t);
            assert!(t.starts_with("{arch}."), "{t}");
            for (k2, t2) in KEYS.iter().skip(i + 1) {
                assert_ne!(k, k2);
                assert_ne!(t, t2);
            }
        }
        assert_eq!(
            Key::HeadCountKv.for_arch("llama"),
            "llama.attention.head_count_kv"
        );
    }
}
