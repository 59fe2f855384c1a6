//! Read and write GGUF, the file format of llama.cpp models.
//!
//! # Reading
//!
//! [`GgufFile::open`] memory-maps the file and decodes the header, the
//! metadata and the tensor table. Tensor bytes are *not* read: a model is
//! mostly weights, often larger than free RAM, and the backends either
//! upload straight from the map or keep slices of it. [`GgufFile::tensor_data`]
//! borrows from the map; [`GgufFile::storage`] hands out the map itself as an
//! `Arc` so a backend can hold tensor bytes past the `GgufFile`'s lifetime
//! without a copy.
//!
//! # Why every number is checked
//!
//! A GGUF file is hostile input: a model downloaded from anywhere. Every
//! count and length in it is checked against the bytes left in the file
//! *before* anything is allocated (an array claiming 2^60 elements of at
//! least 4 bytes each is refused because the file does not have 2^62 bytes
//! left), then against a cap with its reason written beside it (see the
//! `MAX_*` constants). Tensor infos are checked for known types, whole
//! blocks, alignment, bounds and overlap, with overflow-checked arithmetic,
//! so that once a file has opened, slicing any tensor's range is in bounds.
//! Errors ([`GgufError`]) name the key or tensor and the values found.
//!
//! The only `unsafe` is the `mmap` call, in the `storage` module.
//!
//! # Writing
//!
//! [`GgufWriter`] writes GGUF v3 for fixtures and synthetic benchmark
//! models; tensors may be given as bytes or as a closure that streams them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod meta;
mod reader;
mod storage;
mod value;
mod writer;

#[cfg(test)]
mod tests;

pub use error::{GgufError, Result};
pub use glint_quant::GgmlType;
pub use meta::{Key, KEYS, KEY_ARCHITECTURE};
pub use reader::{
    GgufFile, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, KEY_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS,
    MAX_KEY_LEN, MAX_KV, MAX_STRING_LEN, MAX_TENSORS, MAX_TENSOR_NAME_LEN,
};
pub use value::{Array, StrArray, Value, ValueType};
pub use writer::{GgufWriter, TensorWriteFn};
