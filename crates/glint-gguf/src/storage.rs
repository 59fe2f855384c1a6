//! The bytes behind a [`crate::GgufFile`]: a read-only memory map of the file,
//! or an owned buffer (tests, files built in memory). This is the only module
//! allowed `unsafe`, for the one call that maps the file.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

use crate::error::{GgufError, Result};

/// Where a GGUF file's bytes live.
pub(crate) enum Storage {
    /// The file mapped read-only: tensor bytes are never copied.
    Mmap(memmap2::Mmap),
    /// Bytes already in memory.
    Owned(Vec<u8>),
}

impl Storage {
    /// Maps `path` read-only.
    pub(crate) fn map(path: &Path) -> Result<Storage> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: `Mmap::map` is unsafe because the mapping aliases the file:
        // if another process truncates or writes the file while it is
        // mapped, reads through the map see the change (or fault on a
        // truncated page). We map read-only and never hand out `&mut`, and
        // model files are not edited while loaded — the same contract
        // llama.cpp and candle rely on. Every offset we read through the map
        // was bounds-checked against the length at map time.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Storage::Mmap(map))
    }
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        match self {
            Storage::Mmap(m) => m,
            Storage::Owned(v) => v,
        }
    }
}
