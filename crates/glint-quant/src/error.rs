//! The crate's one error type. Every variant names the type and the lengths
//! involved, so a caller can report a bad tensor without more context.

use crate::GgmlType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The type is in the table but glint has no code for this operation on
    /// it (a SizeOnly type, or a quantizer that was never ported).
    #[error("{op} is not supported for {ty}")]
    Unsupported { ty: GgmlType, op: &'static str },

    /// An element count that is not a whole number of blocks.
    #[error("{ty}: {n_elements} elements is not a whole number of {block_size}-element blocks")]
    PartialBlock {
        ty: GgmlType,
        n_elements: usize,
        block_size: usize,
    },

    /// A byte buffer whose length does not match the element count.
    #[error("{ty}: {n_elements} elements take {expected} bytes, got {got}")]
    ByteLength {
        ty: GgmlType,
        n_elements: usize,
        expected: usize,
        got: usize,
    },

    /// A byte buffer that is not a whole number of blocks.
    #[error("{ty}: {n_bytes} bytes is not a whole number of {type_size}-byte blocks")]
    PartialBlockBytes {
        ty: GgmlType,
        n_bytes: usize,
        type_size: usize,
    },
}
