//! glint: a pure-Rust LLM inference engine.
#![deny(missing_docs)]

pub use glint_gguf as gguf;
pub use glint_quant as quant;
