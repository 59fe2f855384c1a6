//! glint: a pure-Rust LLM inference engine.
//!
//! Models are GGUF files, memory-mapped and kept quantized; the math runs as
//! WGSL compute shaders through `wgpu`, or on the cpu backend (rayon), which
//! is also the oracle every shader is tested against.
#![deny(missing_docs)]

pub mod inspect;
pub mod models;

pub use glint_gguf as gguf;
pub use glint_quant as quant;
