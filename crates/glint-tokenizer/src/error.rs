//! The crate's one error type.

use glint_gguf::GgufError;

/// Everything that can go wrong building a tokenizer or using one.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Reading a metadata key failed (absent where required, or of the wrong type).
    #[error("tokenizer metadata: {0}")]
    Gguf(#[from] GgufError),

    /// `tokenizer.ggml.model` names a tokenizer glint does not implement.
    #[error("unknown tokenizer model `{model}` in tokenizer.ggml.model (supported: gpt2, llama)")]
    UnknownModel {
        /// The value found.
        model: String,
    },

    /// `tokenizer.ggml.pre` names a pre-tokenizer glint does not implement.
    #[error("unknown pre-tokenizer `{pre}` in tokenizer.ggml.pre (supported: {supported})")]
    UnknownPreTokenizer {
        /// The value found.
        pre: String,
        /// The names glint knows, comma-separated.
        supported: String,
    },

    /// A per-token array is shorter than the token list.
    #[error("{key} has {found} entries but tokenizer.ggml.tokens has {n_vocab}")]
    ArrayTooShort {
        /// The array's key.
        key: &'static str,
        /// Its length.
        found: usize,
        /// The number of tokens.
        n_vocab: usize,
    },

    /// The token list is empty.
    #[error("tokenizer.ggml.tokens is empty")]
    EmptyVocab,

    /// Two tokens have the same text (llama.cpp refuses these files too).
    #[error("duplicate token text {text:?}: ids {first} and {second}")]
    DuplicateToken {
        /// The text.
        text: String,
        /// The first id holding it.
        first: u32,
        /// The second id holding it.
        second: u32,
    },

    /// A special token id the file names lies outside the vocabulary.
    #[error("{key} = {id}, outside the vocabulary of {n_vocab} tokens")]
    SpecialIdOutOfRange {
        /// The metadata key.
        key: &'static str,
        /// The id it holds.
        id: u64,
        /// Tokens in the vocabulary.
        n_vocab: usize,
    },

    /// The file says to add a special token that it does not define.
    #[error("{add_key} is true but {id_key} is not set (or out of range)")]
    MissingSpecialToken {
        /// The `add_*_token` key.
        add_key: &'static str,
        /// The `*_token_id` key.
        id_key: &'static str,
    },

    /// The `tokenizers` crate refused the vocabulary or the input.
    #[error("{what}: {message}")]
    Backend {
        /// What was being done.
        what: &'static str,
        /// The underlying error's message.
        message: String,
    },

    /// A token id is not in the vocabulary.
    #[error("token id {id} is out of range (n_vocab {n_vocab})")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
}

/// `Result` with [`TokenizerError`].
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
