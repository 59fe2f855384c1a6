//! GGML block formats for glint.
//!
//! One table ([`TYPES`]) lists every type with its id, name, block size and
//! bytes per block.
#![deny(unsafe_code)]

mod types;

pub use types::{GgmlType, Support, TypeInfo, TYPES};
