//! glint: a pure-Rust LLM inference engine.
//!
//! Models are GGUF files, memory-mapped and kept quantized; the math runs as
//! WGSL compute shaders through `wgpu`, or on the cpu backend (rayon), which
//! is also the oracle every shader is tested against.
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

pub mod bench;
pub mod chat;
mod context;
mod engine;
pub mod generate;
pub mod inspect;
pub mod models;
pub mod prompt_cache;
pub mod synthetic;

pub use context::{BackendKind, Batch, CacheType, Context, ContextParams, Model, ModelParams};
pub use glint_backend::MemoryReport;
pub use glint_cpu::Precision as CpuPrecision;
pub use glint_gguf as gguf;
pub use glint_kv as kv;
pub use glint_model::HParams;
pub use glint_quant as quant;
pub use glint_sample as sample;
pub use glint_tokenizer::{StreamDecoder, Tokenizer};

/// Everything that can go wrong in the library. Each variant says what and why.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading a model file failed.
    #[error("{path}: {err}")]
    Load {
        /// The file.
        path: String,
        /// Why.
        err: Box<Error>,
    },
    /// The GGUF file is malformed or lacks something.
    #[error(transparent)]
    Gguf(#[from] glint_gguf::GgufError),
    /// The model's hyperparameters or tensors are not usable.
    #[error(transparent)]
    Model(#[from] glint_model::ModelError),
    /// A backend op failed.
    #[error(transparent)]
    Backend(#[from] glint_backend::BackendError),
    /// The tokenizer could not be built or used.
    #[error(transparent)]
    Tokenizer(#[from] glint_tokenizer::TokenizerError),
    /// A chat template failed to compile or render.
    #[error(transparent)]
    Chat(#[from] glint_chat::ChatError),
    /// A KV cache operation was refused.
    #[error(transparent)]
    Kv(#[from] glint_kv::KvError),
    /// A batch that cannot be decoded.
    #[error("bad batch: {0}")]
    Batch(String),
    /// An invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A bug in glint (please report it).
    #[error("internal error: {0}")]
    Internal(String),
}
