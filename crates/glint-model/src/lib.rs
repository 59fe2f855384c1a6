//! Models for glint: hyperparameters and per-architecture tables read from
//! GGUF, weights handed to a backend straight from the mmap, and the forward
//! pass written once against [`glint_backend::Backend`].
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod arch;
pub mod forward;
pub mod hparams;
pub mod weights;

use glint_backend::{BackendError, GgmlType};
use glint_gguf::GgufError;

pub use arch::{arch_info, ArchInfo, ARCHS};
pub use forward::{
    forward, ConvStorage, KvStorage, Mask, Memories, Output, Scratch, SwaInputs, UBatch,
    WindowInputs, OUTPUTS_AT_FIRST, TOPK_CAP, TOPK_MAX_K,
};
pub use hparams::{HParams, RopeOverrides, RopeScaling};
pub use weights::{AttnWeights, ConvWeights, LayerWeights, Mixer, Weights};

/// Errors of loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF file could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A backend op failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// `general.architecture` names an architecture glint does not run.
    #[error("architecture `{0}` is not supported (glint runs: llama, gemma3, qwen2, lfm2)")]
    UnsupportedArch(String),
    /// A tensor the architecture needs is missing.
    #[error("tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor's type has no kernels.
    #[error("tensor `{name}` has type {ty}, which glint cannot compute with")]
    TensorType {
        /// Tensor name.
        name: String,
        /// Its type.
        ty: GgmlType,
    },
    /// A tensor's shape disagrees with the hyperparameters.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?} from the hyperparameters")]
    TensorShape {
        /// Tensor name.
        name: String,
        /// What the hyperparameters imply.
        expected: Vec<usize>,
        /// What the file holds.
        found: Vec<usize>,
    },
    /// Inconsistent hyperparameters.
    #[error("invalid hyperparameters: {0}")]
    Invalid(String),
    /// A batch the model cannot run.
    #[error("bad batch: {0}")]
    Batch(String),
}
