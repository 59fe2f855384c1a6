//! Synthetic models for benchmarks: a GGUF file with a real architecture's
//! hyperparameters, tensor shapes and quant-type mix, filled with random
//! weights, so speed can be measured on a 7B/8B shape without its weights.
//!
//! - One table row per preset ([`PRESETS`]); the per-tensor types follow
//!   llama.cpp's `llama_tensor_get_type` for the named file type (Q4_K_M's
//!   "more bits" layers, a Q6_K output, K-quant fallbacks for rows that are not
//!   a multiple of 256), so `smollm2-135m:q4_1` and `gemma3-270m:q4_k` have
//!   the exact type mix of the real files.
//! - Tensors are streamed into the file ([`GgufWriter::add_tensor_with`]): a
//!   4 GB model never sits in memory. Each tensor's rows are drawn from a pool
//!   of [`POOL_ROWS`] random f32 rows quantized once (quantizing 8 billion
//!   values one by one would take minutes and changes nothing the benchmark
//!   sees: every row still has its own bytes in memory). Norm weights are 1.
//! - The vocabulary is a `gpt2` one (the 256 byte-level symbols, then
//!   `<tN>` fillers) with no merges: enough for `Model::load`, not for text.
//! - Files are cached as `models_dir()/synthetic/<NAME with ':' as '.'>.gguf`
//!   (written to a `.partial` file, then renamed) and reused when their
//!   `glint.synthetic.version` matches [`SYNTHETIC_VERSION`].

use std::io::Write;
use std::path::PathBuf;

use glint::gguf::{Array, GgufFile, GgufWriter, Value};
use glint::quant::GgmlType;

use glint::Error;

/// Bumped whenever a preset or the generator changes, so cached files are
/// rewritten.
pub const SYNTHETIC_VERSION: u32 = 3;

/// Metadata key holding [`SYNTHETIC_VERSION`].
pub const KEY_VERSION: &str = "glint.synthetic.version";

/// Distinct quantized rows per tensor (rows are picked from this pool).
pub const POOL_ROWS: usize = 64;

/// Which quant type each tensor gets, as llama.cpp's quantizer decides it
/// for one file type.
#[derive(Clone, Copy, Debug)]
pub struct TypeMix {
    /// Every 2-D weight not named below.
    pub base: GgmlType,
    /// `output.weight`, and `token_embd.weight` when the output is tied.
    pub output: GgmlType,
    /// `attn_v` and `ffn_down` in llama.cpp's `use_more_bits` layers
    /// (the `_M` K-quant mixes); `None` = `base`.
    pub more_bits: Option<GgmlType>,
}

/// One synthetic model.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// `--synthetic` name, `shape:type`.
    pub name: &'static str,
    /// `general.architecture` (a row of glint-model's `ARCHS`).
    pub arch: &'static str,
    /// Hidden size.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// K/V heads.
    pub n_head_kv: usize,
    /// Head size when it is not `n_embd / n_head` (written as `key_length`).
    pub head_dim: Option<usize>,
    /// FFN width.
    pub n_ff: usize,
    /// Vocabulary.
    pub n_vocab: usize,
    /// Training context.
    pub n_ctx_train: usize,
    /// RoPE base.
    pub rope_freq_base: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Sliding window (0 = none; the architecture's default layer pattern).
    pub n_swa: usize,
    /// No `output.weight`: the head is `token_embd`.
    pub tied: bool,
    /// LFM2: the layers with attention; the others are short convolutions
    /// of `n_conv` inputs (empty: every layer has attention).
    pub attn_layers: &'static [usize],
    /// LFM2's `shortconv.l_cache`.
    pub n_conv: usize,
    /// Quant types.
    pub mix: TypeMix,
}

const Q4_0_MIX: TypeMix = TypeMix {
    base: GgmlType::Q4_0,
    output: GgmlType::Q6_K,
    more_bits: None,
};
const Q4_1_MIX: TypeMix = TypeMix {
    base: GgmlType::Q4_1,
    output: GgmlType::Q6_K,
    more_bits: None,
};
/// llama.cpp's Q4_K_M.
const Q4_K_M_MIX: TypeMix = TypeMix {
    base: GgmlType::Q4_K,
    output: GgmlType::Q6_K,
    more_bits: Some(GgmlType::Q6_K),
};

/// Every synthetic model `--synthetic` knows.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "llama2-7b:q4_0",
        arch: "llama",
        n_embd: 4096,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 32,
        head_dim: None,
        n_ff: 11008,
        n_vocab: 32000,
        n_ctx_train: 4096,
        rope_freq_base: 10_000.0,
        rms_eps: 1e-5,
        n_swa: 0,
        tied: false,
        attn_layers: &[],
        n_conv: 0,
        mix: Q4_0_MIX,
    },
    // llama2-7b's step at width 256: its 32 layers and every kernel a
    // 7B decode step dispatches, with a 50th of the weights. What the host
    // does per token of a 7B (recording, encoding, submitting), with the
    // device's part small enough that the software driver does not evict
    // the host's data from the caches between steps (`glint bench` prints
    // the host's time per step).
    Preset {
        name: "llama2-7b-narrow:q4_0",
        arch: "llama",
        n_embd: 256,
        n_layer: 32,
        n_head: 2,
        n_head_kv: 2,
        head_dim: None,
        n_ff: 704,
        n_vocab: 4096,
        n_ctx_train: 4096,
        rope_freq_base: 10_000.0,
        rms_eps: 1e-5,
        n_swa: 0,
        tied: false,
        attn_layers: &[],
        n_conv: 0,
        mix: Q4_0_MIX,
    },
    Preset {
        name: "llama3-8b:q4_k",
        arch: "llama",
        n_embd: 4096,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        head_dim: None,
        n_ff: 14336,
        n_vocab: 128256,
        n_ctx_train: 8192,
        rope_freq_base: 500_000.0,
        rms_eps: 1e-5,
        n_swa: 0,
        tied: false,
        attn_layers: &[],
        n_conv: 0,
        mix: Q4_K_M_MIX,
    },
    Preset {
        name: "smollm2-135m:q4_1",
        arch: "llama",
        n_embd: 576,
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        head_dim: None,
        n_ff: 1536,
        n_vocab: 49152,
        n_ctx_train: 8192,
        rope_freq_base: 100_000.0,
        rms_eps: 1e-5,
        n_swa: 0,
        tied: true,
        attn_layers: &[],
        n_conv: 0,
        mix: Q4_1_MIX,
    },
    Preset {
        name: "gemma3-270m:q4_k",
        arch: "gemma3",
        n_embd: 640,
        n_layer: 18,
        n_head: 4,
        n_head_kv: 1,
        head_dim: Some(256),
        n_ff: 2048,
        n_vocab: 262144,
        n_ctx_train: 32768,
        rope_freq_base: 1_000_000.0,
        rms_eps: 1e-6,
        n_swa: 512,
        tied: true,
        attn_layers: &[],
        n_conv: 0,
        mix: Q4_K_M_MIX,
    },
    // LiquidAI's LFM2-350M: 10 short-convolution layers and 6 attention
    // layers (its config's `full_attn_idxs`), llama.cpp's Q4_0 mix.
    Preset {
        name: "lfm2-350m:q4_0",
        arch: "lfm2",
        n_embd: 1024,
        n_layer: 16,
        n_head: 16,
        n_head_kv: 8,
        head_dim: None,
        n_ff: 4608,
        n_vocab: 65536,
        n_ctx_train: 128_000,
        rope_freq_base: 1_000_000.0,
        rms_eps: 1e-5,
        n_swa: 0,
        tied: true,
        attn_layers: &[2, 5, 8, 10, 12, 14],
        n_conv: 3,
        mix: Q4_0_MIX,
    },
];

/// The preset named `name`, or an error listing the known ones.
pub fn preset(name: &str) -> Result<&'static Preset, Error> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        Error::Invalid(format!(
            "no synthetic model `{name}` (known: {})",
            names.join(", ")
        ))
    })
}

/// llama.cpp's `use_more_bits(i_layer, n_layer)`: the first and last eighth
/// of the layers and every third one between.
fn use_more_bits(il: usize, n_layer: usize) -> bool {
    let (lo, hi) = (n_layer / 8, 7 * n_layer / 8);
    // `il - lo` cannot underflow: `il < lo` short-circuits.
    il < lo || il >= hi || (il - lo) % 3 == 2
}

/// A K-quant needs rows that are whole 256-blocks; llama.cpp falls back to
/// these when they are not.
fn fallback(ty: GgmlType, row: usize) -> GgmlType {
    if row.is_multiple_of(ty.block_size()) {
        return ty;
    }
    match ty {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        _ => GgmlType::F16,
    }
}

/// One tensor of a preset: name, dims (innermost first), type, and the value
/// every element has when it is a norm (`Some(1.0)`) or `None` for random.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    /// GGUF name.
    pub name: String,
    /// `ne`, innermost first.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Norm weights: every element is this value.
    pub constant: Option<f32>,
}

impl Preset {
    /// Head size.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_head)
    }

    /// Whether layer `il` is a short convolution (LFM2).
    pub fn is_conv(&self, il: usize) -> bool {
        !self.attn_layers.is_empty() && !self.attn_layers.contains(&il)
    }

    /// The file's tensors, in llama.cpp's order (embeddings, layers, head).
    pub fn tensors(&self) -> Vec<TensorPlan> {
        let gemma = self.arch == "gemma3";
        let qk_norm = gemma || self.arch == "lfm2";
        let (e, hd) = (self.n_embd as u64, self.head_dim() as u64);
        let (nq, nkv, ff) = (
            hd * self.n_head as u64,
            hd * self.n_head_kv as u64,
            self.n_ff as u64,
        );
        let m = &self.mix;
        let mat = |name: String, dims: &[u64], ty: GgmlType| TensorPlan {
            ty: fallback(ty, dims[0] as usize),
            name,
            dims: dims.to_vec(),
            constant: None,
        };
        let norm = |name: String, n: u64| TensorPlan {
            name,
            dims: vec![n],
            ty: GgmlType::F32,
            constant: Some(1.0),
        };
        let embd_ty = if self.tied { m.output } else { m.base };
        let mut t = vec![mat(
            "token_embd.weight".into(),
            &[e, self.n_vocab as u64],
            embd_ty,
        )];
        for il in 0..self.n_layer {
            let b = |s: &str| format!("blk.{il}.{s}");
            let more = match (m.more_bits, use_more_bits(il, self.n_layer)) {
                (Some(ty), true) => ty,
                _ => m.base,
            };
            t.push(norm(b("attn_norm.weight"), e));
            if self.is_conv(il) {
                t.push(TensorPlan {
                    name: b("shortconv.conv.weight"),
                    dims: vec![self.n_conv as u64, e],
                    ty: GgmlType::F32,
                    constant: None,
                });
                t.push(mat(b("shortconv.in_proj.weight"), &[e, 3 * e], m.base));
                t.push(mat(b("shortconv.out_proj.weight"), &[e, e], m.base));
            } else {
                t.push(mat(b("attn_q.weight"), &[e, nq], m.base));
                t.push(mat(b("attn_k.weight"), &[e, nkv], m.base));
                t.push(mat(b("attn_v.weight"), &[e, nkv], more));
                t.push(mat(b("attn_output.weight"), &[nq, e], m.base));
            }
            if qk_norm && !self.is_conv(il) {
                t.push(norm(b("attn_q_norm.weight"), hd));
                t.push(norm(b("attn_k_norm.weight"), hd));
            }
            if gemma {
                t.push(norm(b("post_attention_norm.weight"), e));
                t.push(norm(b("post_ffw_norm.weight"), e));
            }
            t.push(norm(b("ffn_norm.weight"), e));
            t.push(mat(b("ffn_gate.weight"), &[e, ff], m.base));
            t.push(mat(b("ffn_up.weight"), &[e, ff], m.base));
            t.push(mat(b("ffn_down.weight"), &[ff, e], more));
        }
        let out_norm = if self.arch == "lfm2" {
            "token_embd_norm.weight"
        } else {
            "output_norm.weight"
        };
        t.push(norm(out_norm.into(), e));
        if !self.tied {
            t.push(mat(
                "output.weight".into(),
                &[e, self.n_vocab as u64],
                m.output,
            ));
        }
        t
    }

    /// Bytes of tensor data the file holds.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|t| t.ty.bytes_for(t.dims.iter().product()).unwrap_or(0))
            .sum()
    }

    /// Where the cached file lives.
    pub fn path(&self) -> PathBuf {
        crate::models::models_dir()
            .join("synthetic")
            .join(format!("{}.gguf", self.name.replace(':', ".")))
    }

    /// A writer holding the whole file (metadata, then streamed tensors).
    pub fn writer(&self) -> Result<GgufWriter, Error> {
        let mut w = GgufWriter::new();
        let a = self.arch;
        let u32v = |v: usize| Value::U32(v as u32);
        w.add_kv("general.architecture", Value::String(a.into()))?;
        w.add_kv(
            "general.name",
            Value::String(format!("synthetic {}", self.name)),
        )?;
        w.add_kv(KEY_VERSION, Value::U32(SYNTHETIC_VERSION))?;
        w.add_kv(format!("{a}.context_length"), u32v(self.n_ctx_train))?;
        w.add_kv(format!("{a}.embedding_length"), u32v(self.n_embd))?;
        w.add_kv(format!("{a}.block_count"), u32v(self.n_layer))?;
        w.add_kv(format!("{a}.feed_forward_length"), u32v(self.n_ff))?;
        w.add_kv(format!("{a}.attention.head_count"), u32v(self.n_head))?;
        if self.attn_layers.is_empty() {
            w.add_kv(format!("{a}.attention.head_count_kv"), u32v(self.n_head_kv))?;
        } else {
            let per_layer = (0..self.n_layer)
                .map(|il| {
                    if self.is_conv(il) {
                        0
                    } else {
                        self.n_head_kv as i32
                    }
                })
                .collect();
            w.add_kv(
                format!("{a}.attention.head_count_kv"),
                Value::Array(Array::I32(per_layer)),
            )?;
            w.add_kv(format!("{a}.shortconv.l_cache"), u32v(self.n_conv))?;
        }
        if let Some(hd) = self.head_dim {
            w.add_kv(format!("{a}.attention.key_length"), u32v(hd))?;
            w.add_kv(format!("{a}.attention.value_length"), u32v(hd))?;
        }
        w.add_kv(
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(self.rms_eps),
        )?;
        w.add_kv(
            format!("{a}.rope.freq_base"),
            Value::F32(self.rope_freq_base),
        )?;
        if self.n_swa > 0 {
            w.add_kv(format!("{a}.attention.sliding_window"), u32v(self.n_swa))?;
        }
        w.add_kv("tokenizer.ggml.model", Value::String("gpt2".into()))?;
        w.add_kv("tokenizer.ggml.pre", Value::String("default".into()))?;
        w.add_kv(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(vocab(self.n_vocab).into())),
        )?;
        w.add_kv(
            "tokenizer.ggml.merges",
            Value::Array(Array::String(glint::gguf::StrArray::new())),
        )?;
        w.add_kv("tokenizer.ggml.bos_token_id", Value::U32(0))?;
        w.add_kv("tokenizer.ggml.eos_token_id", Value::U32(0))?;
        w.add_kv("tokenizer.ggml.add_bos_token", Value::Bool(false))?;
        for (i, t) in self.tensors().into_iter().enumerate() {
            let seed = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
            let dims = t.dims.clone();
            let ty = t.ty;
            w.add_tensor_with(t.name.clone(), &dims, ty, move |out| {
                write_tensor(out, &t, seed)
            })?;
        }
        Ok(w)
    }
}

/// The 256 byte-level symbols of GPT-2's `bytes_to_unicode`, then `<tN>`.
fn vocab(n_vocab: usize) -> Vec<String> {
    let mut v = Vec::with_capacity(n_vocab);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            extra += 1;
            255 + extra
        };
        v.push(char::from_u32(c).unwrap_or('?').to_string());
    }
    v.truncate(n_vocab);
    for i in v.len()..n_vocab {
        v.push(format!("<t{i}>"));
    }
    v
}

/// The workspace's one seeded generator (splitmix64): reproducible, fast,
/// good enough for weights nobody reads.
use glint_testkit::Rng;

/// Streams one tensor: norms as constants, weights as rows from a pool of
/// quantized random rows (uniform, std 0.02 like an initialised model).
fn write_tensor(out: &mut dyn Write, t: &TensorPlan, seed: u64) -> std::io::Result<()> {
    let n_per_row = t.dims[0] as usize;
    let n_rows: u64 = t.dims[1..].iter().product();
    let row_bytes = t.ty.bytes_for(n_per_row as u64).unwrap_or(0) as usize;
    let mut rng = Rng(seed | 1);
    let mut src = vec![0f32; n_per_row];
    let n_pool = if t.constant.is_some() {
        1
    } else {
        POOL_ROWS.min(n_rows as usize).max(1)
    };
    let mut pool = vec![0u8; n_pool * row_bytes];
    for row in pool.chunks_exact_mut(row_bytes) {
        match t.constant {
            Some(c) => src.fill(c),
            None => src.iter_mut().for_each(|x| *x = rng.f32() * 0.0346),
        }
        glint::quant::quantize_row(t.ty, &src, row).map_err(std::io::Error::other)?;
    }
    for _ in 0..n_rows {
        let k = (rng.next_u64() % n_pool as u64) as usize;
        out.write_all(&pool[k * row_bytes..(k + 1) * row_bytes])?;
    }
    Ok(())
}

/// The cached file for `name`, written first if it is missing or stale.
/// `log` gets a line when a file is written (it can take a minute).
pub fn ensure(name: &str, log: &mut dyn FnMut(&str)) -> Result<PathBuf, Error> {
    let p = preset(name)?;
    let path = p.path();
    if let Ok(f) = GgufFile::open(&path) {
        if matches!(f.get(KEY_VERSION), Some(Value::U32(v)) if *v == SYNTHETIC_VERSION) {
            return Ok(path);
        }
    }
    let io = |e: std::io::Error| Error::Invalid(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    log(&format!(
        "writing synthetic model {} ({:.2} GiB) to {}",
        p.name,
        p.tensor_bytes() as f64 / (1u64 << 30) as f64,
        path.display()
    ));
    let partial = path.with_extension("gguf.partial");
    // A failed write (a full disk, say) must not leave a multi-GB partial
    // file behind.
    let written = p
        .writer()
        .and_then(|mut w| Ok(w.write_to_path(&partial)?))
        .and_then(|_| std::fs::rename(&partial, &path).map_err(io));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_layers_match_the_real_gemma_file() {
        // From the real gemma-3-270m Q4_K_M: attn_v Q8_0 / ffn_down Q6_K in these.
        let want = [0, 1, 4, 7, 10, 13, 15, 16, 17];
        let got: Vec<usize> = (0..18).filter(|&il| use_more_bits(il, 18)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn fallbacks_for_rows_not_a_multiple_of_256() {
        assert_eq!(fallback(GgmlType::Q4_K, 640), GgmlType::Q5_0);
        assert_eq!(fallback(GgmlType::Q6_K, 576), GgmlType::Q8_0);
        assert_eq!(fallback(GgmlType::Q4_K, 1024), GgmlType::Q4_K);
        assert_eq!(fallback(GgmlType::Q4_1, 576), GgmlType::Q4_1);
    }

    #[test]
    fn vocab_is_unique_and_sized() {
        let v = vocab(1000);
        assert_eq!(v.len(), 1000);
        let set: std::collections::HashSet<_> = v.iter().collect();
        assert_eq!(set.len(), 1000);
        assert_eq!(v[b'a' as usize], "a");
        assert_eq!(v[b' ' as usize], "Ġ");
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let e = preset("llama9:q1").unwrap_err().to_string();
        assert!(
            e.contains("llama2-7b:q4_0") && e.contains("gemma3-270m:q4_k"),
            "{e}"
        );
    }
}
