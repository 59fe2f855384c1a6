//! Weights, handed to the backend straight from the mmap: the cpu backend
//! computes from the file's pages, the wgpu backend uploads them once. No
//! second host copy is ever made.

use glint_backend::{Backend, GgmlType, SharedBytes, TensorDesc, Usage};
use glint_gguf::GgufFile;
use glint_quant::Support;

use crate::arch::names;
use crate::hparams::HParams;
use crate::ModelError;

/// One layer's tensors. Shapes are ggml order (`[in, out]`).
pub struct LayerWeights<T> {
    /// `attn_norm` `[n_embd]`: the norm before the mixer (attention or
    /// short convolution; LFM2 calls it `operator_norm`).
    pub attn_norm: T,
    /// What mixes tokens: attention, or a short convolution (LFM2).
    pub mixer: Mixer<T>,
    /// `post_attention_norm` `[n_embd]` (Gemma 3).
    pub post_attn_norm: Option<T>,
    /// `ffn_norm` `[n_embd]`.
    pub ffn_norm: T,
    /// `ffn_gate` `[n_embd, n_ff]`.
    pub ffn_gate: T,
    /// `ffn_up` `[n_embd, n_ff]`.
    pub ffn_up: T,
    /// `ffn_down` `[n_ff, n_embd]`.
    pub ffn_down: T,
    /// `post_ffw_norm` `[n_embd]` (Gemma 3).
    pub post_ffw_norm: Option<T>,
}

/// A layer's token mixer.
pub enum Mixer<T> {
    /// Self-attention over the KV cache.
    Attention(AttnWeights<T>),
    /// LFM2's gated short convolution over a recurrent state.
    ShortConv(ConvWeights<T>),
}

/// An attention layer's tensors.
pub struct AttnWeights<T> {
    /// `attn_q` `[n_embd, n_head * head_dim]`.
    pub wq: T,
    /// `attn_k` `[n_embd, n_head_kv * head_dim]`.
    pub wk: T,
    /// `attn_v` `[n_embd, n_head_kv * head_dim]`.
    pub wv: T,
    /// `attn_output` `[n_head * head_dim, n_embd]`.
    pub wo: T,
    /// Q/K/V biases `[n_head * head_dim]`, `[n_embd_kv]`, `[n_embd_kv]` (Qwen 2).
    pub qkv_bias: Option<[T; 3]>,
    /// Per-head Q and K norms `[head_dim]` (Gemma 3, LFM2).
    pub qk_norm: Option<[T; 2]>,
}

/// A short-convolution layer's tensors (LFM2).
pub struct ConvWeights<T> {
    /// `shortconv.in_proj` `[n_embd, 3 * n_embd]` as its three blocks of
    /// rows, `[n_embd, n_embd]` each: the gates `b` and `c` and the input
    /// `x` (views of the file's bytes, used together like Q/K/V).
    pub in_proj: [T; 3],
    /// `shortconv.conv` `[n_conv, n_embd]` F32: each channel's taps.
    pub conv: T,
    /// `shortconv.out_proj` `[n_embd, n_embd]`.
    pub out_proj: T,
}

/// All of a model's tensors on a backend.
pub struct Weights<T> {
    /// `token_embd` `[n_embd, n_vocab]`.
    pub tok_embd: T,
    /// `output_norm` `[n_embd]`.
    pub output_norm: T,
    /// `output` `[n_embd, n_vocab]`; `None` = tied to `tok_embd`.
    pub output: Option<T>,
    /// Per layer.
    pub layers: Vec<LayerWeights<T>>,
}

struct Loader<'a, B: Backend> {
    f: &'a GgufFile,
    backend: &'a B,
}

impl<B: Backend> Loader<'_, B> {
    fn get(&self, name: &str, ne: &[usize]) -> Result<B::Tensor, ModelError> {
        self.opt(name, ne)?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    fn opt(&self, name: &str, ne: &[usize]) -> Result<Option<B::Tensor>, ModelError> {
        match self.part(name, ne)? {
            Some((desc, bytes)) => Ok(Some(self.backend.weight(desc, bytes)?)),
            None => Ok(None),
        }
    }

    /// Weights used together (Q/K/V, gate/up), through
    /// [`Backend::weights`] (one buffer on wgpu, for the fused matvecs).
    fn group<const N: usize>(
        &self,
        named: [(&str, &[usize]); N],
    ) -> Result<[B::Tensor; N], ModelError> {
        let mut parts = Vec::with_capacity(N);
        for (name, ne) in named {
            let part = self
                .part(name, ne)?
                .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
            parts.push(part);
        }
        let ts = self.backend.weights(parts)?;
        let n = ts.len();
        ts.try_into().map_err(|_| {
            ModelError::Backend(glint_backend::BackendError::Device(format!(
                "weights: {n} tensors back for {N}"
            )))
        })
    }

    /// A `[k, 3 * n]` weight as three `[k, n]` weights of its row blocks,
    /// in order, through [`Backend::weights`] (one buffer on wgpu).
    fn thirds(&self, name: &str, k: usize) -> Result<[B::Tensor; 3], ModelError> {
        let (desc, _) = self
            .part(name, &[k, 3 * k])?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let t = self
            .f
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let range = t.byte_range();
        let block = k * desc.row_bytes();
        let mut parts = Vec::with_capacity(3);
        for i in 0..3 {
            let start = range.start + i * block;
            let d = TensorDesc {
                ne: [k, k, 1, 1],
                label: format!("{name}[{i}]").into(),
                ..desc.clone()
            };
            parts.push((d, SharedBytes::new(self.f.storage(), start..start + block)?));
        }
        let ts = self.backend.weights(parts)?;
        ts.try_into().map_err(|_| {
            ModelError::Backend(glint_backend::BackendError::Device(format!(
                "weights: {name}'s thirds did not come back as 3 tensors"
            )))
        })
    }

    /// A tensor's description and bytes, its type and shape checked.
    fn part(
        &self,
        name: &str,
        ne: &[usize],
    ) -> Result<Option<(TensorDesc, SharedBytes)>, ModelError> {
        let Some(t) = self.f.tensor(name) else {
            return Ok(None);
        };
        if t.ty.support() != Support::Compute {
            return Err(ModelError::TensorType {
                name: name.to_string(),
                ty: t.ty,
            });
        }
        let found: Vec<usize> = t.dims().iter().map(|&d| d as usize).collect();
        if found != ne {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: ne.to_vec(),
                found,
            });
        }
        let mut shape = [1usize; 4];
        shape[..ne.len()].copy_from_slice(ne);
        let desc = TensorDesc {
            ty: t.ty,
            ne: shape,
            label: name.into(),
            usage: Usage::Weights,
        };
        let bytes = SharedBytes::new(self.f.storage(), t.byte_range())?;
        Ok(Some((desc, bytes)))
    }
}

impl<B: Backend> Loader<'_, B> {
    /// Layer `il`'s attention tensors.
    fn attention(&self, hp: &HParams, il: usize) -> Result<AttnWeights<B::Tensor>, ModelError> {
        let b = |s: &str| names::blk(il, s);
        let (n_embd, hd) = (hp.n_embd, hp.head_dim);
        let n_q = hp.n_head * hd;
        let n_kv = hp.n_embd_kv();
        let qkv_bias = if hp.arch.qkv_bias {
            Some([
                self.get(&b("attn_q.bias"), &[n_q])?,
                self.get(&b("attn_k.bias"), &[n_kv])?,
                self.get(&b("attn_v.bias"), &[n_kv])?,
            ])
        } else {
            None
        };
        let qk_norm = if hp.arch.qk_norm {
            Some([
                self.get(&b("attn_q_norm.weight"), &[hd])?,
                self.get(&b("attn_k_norm.weight"), &[hd])?,
            ])
        } else {
            None
        };
        let [wq, wk, wv] = self.group([
            (&b("attn_q.weight"), &[n_embd, n_q]),
            (&b("attn_k.weight"), &[n_embd, n_kv]),
            (&b("attn_v.weight"), &[n_embd, n_kv]),
        ])?;
        Ok(AttnWeights {
            wq,
            wk,
            wv,
            wo: self.get(&b("attn_output.weight"), &[n_q, n_embd])?,
            qkv_bias,
            qk_norm,
        })
    }
}

impl<T> Weights<T> {
    /// Load every tensor the architecture needs, checking types and shapes.
    pub fn load<B: Backend<Tensor = T>>(
        f: &GgufFile,
        hp: &HParams,
        backend: &B,
    ) -> Result<Weights<T>, ModelError> {
        let l = Loader { f, backend };
        let n_embd = hp.n_embd;
        let tok_embd = l.get(names::TOKEN_EMBD, &[n_embd, hp.n_vocab])?;
        let output_norm = l.get(hp.arch.output_norm, &[n_embd])?;
        let output = l.opt(names::OUTPUT, &[n_embd, hp.n_vocab])?;
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let b = |s: &str| names::blk(il, s);
            let (post_attn_norm, post_ffw_norm) = if hp.arch.post_norms {
                (
                    Some(l.get(&b("post_attention_norm.weight"), &[n_embd])?),
                    Some(l.get(&b("post_ffw_norm.weight"), &[n_embd])?),
                )
            } else {
                (None, None)
            };
            let mixer = if hp.is_conv(il) {
                let name = b("shortconv.conv.weight");
                // The kernels read the taps as f32 (converters keep them so).
                if let Some(t) = f.tensor(&name).filter(|t| t.ty != GgmlType::F32) {
                    return Err(ModelError::TensorType { name, ty: t.ty });
                }
                let conv = l.get(&name, &[hp.n_conv, n_embd])?;
                Mixer::ShortConv(ConvWeights {
                    in_proj: l.thirds(&b("shortconv.in_proj.weight"), n_embd)?,
                    conv,
                    out_proj: l.get(&b("shortconv.out_proj.weight"), &[n_embd, n_embd])?,
                })
            } else {
                Mixer::Attention(l.attention(hp, il)?)
            };
            let [ffn_gate, ffn_up] = l.group([
                (&b("ffn_gate.weight"), &[n_embd, hp.n_ff]),
                (&b("ffn_up.weight"), &[n_embd, hp.n_ff]),
            ])?;
            layers.push(LayerWeights {
                attn_norm: l.get(&b("attn_norm.weight"), &[n_embd])?,
                mixer,
                post_attn_norm,
                ffn_norm: l.get(&b("ffn_norm.weight"), &[n_embd])?,
                ffn_gate,
                ffn_up,
                ffn_down: l.get(&b("ffn_down.weight"), &[hp.n_ff, n_embd])?,
                post_ffw_norm,
            });
        }
        Ok(Weights {
            tok_embd,
            output_norm,
            output,
            layers,
        })
    }

    /// The weights a decode step multiplies (each `[k, n]`), in the order
    /// it takes them: each layer's mixer projections (Q, K, V, output; or
    /// the convolution's three input blocks and its output), gate, up and
    /// down, then the output projection (the token embeddings where they
    /// are tied). What a matvec tune times a pass over.
    pub fn matvec_weights(&self) -> Vec<&T> {
        let mut out = Vec::with_capacity(self.layers.len() * 7 + 1);
        for l in &self.layers {
            match &l.mixer {
                Mixer::Attention(a) => out.extend([&a.wq, &a.wk, &a.wv, &a.wo]),
                Mixer::ShortConv(c) => {
                    out.extend(c.in_proj.iter());
                    out.push(&c.out_proj);
                }
            }
            out.extend([&l.ffn_gate, &l.ffn_up, &l.ffn_down]);
        }
        out.push(self.output.as_ref().unwrap_or(&self.tok_embd));
        out
    }
}
