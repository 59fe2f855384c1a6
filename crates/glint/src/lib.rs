//! glint: a pure-Rust LLM inference engine.
//!
//! Models are GGUF files, memory-mapped and kept quantized; the math runs as
//! WGSL compute shaders through `wgpu`, or on the cpu backend (rayon), which
//! is also the oracle every shader is tested against.
//!
//! The pieces, each in one home:
//!
//! | type | what it is |
//! |---|---|
//! | [`Model`] | a mapped GGUF file, its hyperparameters, tokenizer and weights on a backend; a cheap, `Send + Sync` handle (clone it to share) |
//! | [`Context`] | decodes [`Batch`]es into its memory; owns the model handle, so `struct App { model, ctx }` works |
//! | `memory` | what a context remembers between decodes: the KV cache (cells + K/V rows), rolled back cell by cell when a decode fails |
//! | [`state`] | the one versioned, checksummed format for saved state (sequence state, prompt caches) |
//! | [`generate`], [`chat`] | the generation loop over the sampler chain, chat templates and conversations |
//! | [`Error`] | every failure, typed; sizes travel with the errors that are about sizes |
//!
//! Sizes: [`ContextParams::n_ctx`] is the context size in cells **in total**
//! (llama.cpp's `-c`). With one stream shared by all sequences (the default)
//! each sequence may use all of it; with one stream per sequence
//! (`kv_unified: false`) each stream has `n_ctx / n_seq_max` cells
//! ([`Context::n_ctx_stream`]).
//!
//! Backends are cargo features, `cpu` and `wgpu`, both on by default.
//!
//! ```no_run
//! use glint::{Batch, Context, ContextParams, Model, ModelParams};
//! let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf", &ModelParams::default())?;
//! let mut ctx = Context::new(&model, ContextParams::default())?;
//! ctx.decode(&Batch::from_tokens(&[504, 3575, 282, 4649, 314], 0, 0))?;
//! let next = ctx.argmax(4)?;
//! # Ok::<(), glint::Error>(())
//! ```
#![deny(missing_docs)]

#[cfg(not(any(feature = "cpu", feature = "wgpu")))]
compile_error!("glint needs at least one backend: enable the `cpu` or the `wgpu` feature");

mod backend;
mod batch;
pub mod chat;
mod context;
pub mod embed;
pub mod engine;
mod error;
pub mod generate;
mod measure;
mod memory;
mod model;
mod params;
pub mod perplexity;
mod recurrent;
pub mod state;

pub use batch::Batch;
pub use context::Context;
pub use engine::{Engine, EngineParams};
pub use error::Error;
pub use glint_backend::MemoryReport;
#[cfg(feature = "cpu")]
pub use glint_cpu::Precision as CpuPrecision;
pub use glint_gguf as gguf;
#[cfg(feature = "wgpu")]
pub use glint_gpu::{GpuCounters, KernelTime};
pub use glint_grammar as grammar;
pub use glint_kv as kv;
pub use glint_model::{HParams, RopeOverrides, RopeScaling};
pub use glint_quant as quant;
pub use glint_sample as sample;
pub use glint_tokenizer::{StreamDecoder, Tokenizer};
pub use measure::{cpu_read_bandwidth, devices, DeviceInfo};
pub use memory::Checkpoint;
pub use model::Model;
pub use params::{BackendKind, CacheType, ContextParams, ModelParams, SelfExtendWindow};
