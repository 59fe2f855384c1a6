//! The library's one error enum.

/// Everything that can go wrong in the library. Each variant says what and
/// why; the ones about sizes carry the numbers, so a caller (the server, the
/// CLI) can report them as they are.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The sampler chain's parameters or inputs are not usable.
    #[error(transparent)]
    Sample(#[from] glint_sample::SampleError),
    /// A prompt that does not fit the context (or the part of it one
    /// sequence may use).
    #[error("the prompt has {n_prompt} tokens, the context {n_ctx}")]
    PromptTooLong {
        /// Tokens in the prompt.
        n_prompt: usize,
        /// Cells the sequence may use.
        n_ctx: usize,
    },
    /// A batch with more tokens than the context was made for.
    #[error("{n_tokens} tokens in one batch, n_batch is {n_batch}")]
    BatchTooLarge {
        /// Tokens in the batch.
        n_tokens: usize,
        /// The context's `n_batch`.
        n_batch: usize,
    },
    /// A batch that cannot be decoded (empty, a token outside the
    /// vocabulary, an unknown sequence, positions out of order).
    #[error("bad batch: {0}")]
    Batch(String),
    /// What a request would allocate is more than the process may take
    /// (checked before allocating).
    #[error("{what} needs {needed} bytes, and this process may take {available} more")]
    OutOfMemory {
        /// What would be allocated.
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the process may still take.
        available: u64,
    },
    /// The engine's queue is full: too many requests wait for a slot.
    #[error("the engine is busy: {capacity} requests are already waiting for a slot")]
    Overloaded {
        /// The queue's capacity (`EngineParams::max_queue`).
        capacity: usize,
    },
    /// The engine thread has stopped.
    #[error("the engine has stopped")]
    Stopped,
    /// A backend this build of glint was compiled without (a cargo feature).
    #[error("the {0} backend is not compiled into this build of glint (cargo feature `{0}`)")]
    BackendUnavailable(&'static str),
    /// An invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A sequence operation a recurrent state (LFM2's short convolutions)
    /// cannot do: it holds a sequence as one state, not per position.
    #[error("recurrent memory: {0}")]
    Recurrent(String),
    /// A sequence operation the sliding-window ring cache cannot do: it
    /// keeps only the window's cells of each sequence.
    #[error("sliding-window cache: {0}")]
    Window(String),
    /// Saved state (a sequence's state, a prompt cache) that cannot be used.
    #[error("saved state: {0}")]
    State(String),
    /// Reading or writing a file failed.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        err: std::io::Error,
    },
    /// The load-time matvec tune (`ModelParams::gpu_tune`) failed: its
    /// scratch context or one of its decode steps.
    #[error("the matvec tune at load (--gpu-tune off or GLINT_TUNE=0 skips it): {0}")]
    Tune(Box<Error>),
    /// A bug in glint (please report it).
    #[error("internal error: {0}")]
    Internal(String),
}
