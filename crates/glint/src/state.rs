//! Saved state: one owner for every format glint writes to keep a context's
//! memory beyond the process.
//!
//! - **Sequence state** ([`Context::state_seq_save`] / `state_seq_load`): a
//!   sequence's cells and their K/V rows, in `glint-kv`'s versioned layout
//!   (magic `GLINTKV\0`, the model's identity, a checksum of the header and
//!   a seal over everything, K/V rows included; the byte table is in
//!   glint-kv's `state` module). It is the payload of every file below.
//! - **Prompt cache** ([`PromptCache`], `--prompt-cache`): the prompt's
//!   token ids followed by the sequence state after it.
//!
//! ```text
//! magic     8 bytes  "GLINTPC\0"
//! version   u32      2
//! n_tokens  u32      <= MAX_TOKENS
//! checksum  u64      FNV-1a 64 of magic, version, n_tokens, tokens and state
//! tokens    n_tokens x u32
//! state     the rest: a sequence state blob (sealed; its model identity is
//!           checked when restored)
//! ```
//!
//! Version 1 had no checksum over the tokens and is refused.
//!
//! Files are written atomically: to a temporary file in the same folder,
//! flushed to disk, then renamed over the old one, so a failed save (a full
//! disk, a kill) leaves the previous file as it was.

use std::io::Write;
use std::path::Path;

use crate::{Context, Error};

/// Leading bytes of a prompt cache file.
pub const MAGIC: [u8; 8] = *b"GLINTPC\0";
/// Format version written and read.
pub const VERSION: u32 = 2;
/// Cap on the token count (a longer one means a corrupt file; no context is
/// this large).
pub const MAX_TOKENS: u32 = 1 << 24;

/// Bytes before the token ids.
const HEADER: usize = 24;

/// The file's checksum: FNV-1a over every byte, the checksum field read as
/// zeros.
fn checksum(b: &[u8]) -> u64 {
    let h = glint_kv::fnv1a_update(glint_kv::FNV1A_OFFSET, &b[..16]);
    let h = glint_kv::fnv1a_update(h, &[0; 8]);
    glint_kv::fnv1a_update(h, &b[HEADER..])
}

/// A prompt and the saved state of the sequence that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptCache {
    /// The prompt's token ids.
    pub tokens: Vec<u32>,
    /// The sequence state after them ([`Context::state_seq_save`]).
    pub state: Vec<u8>,
}

impl PromptCache {
    /// Sequence `seq` of `ctx`, which holds `tokens`.
    pub fn capture(ctx: &mut Context, seq: i32, tokens: &[u32]) -> Result<PromptCache, Error> {
        Ok(PromptCache {
            tokens: tokens.to_vec(),
            state: ctx.state_seq_save(seq)?,
        })
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER + 4 * self.tokens.len() + self.state.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        for &t in &self.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        b.extend_from_slice(&self.state);
        let sum = checksum(&b);
        b[16..24].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parse a file's bytes (the state blob is checked when restored).
    pub fn from_bytes(b: &[u8]) -> Result<PromptCache, Error> {
        if b.len() < HEADER || b[..8] != MAGIC {
            return Err(Error::State(
                "not a glint prompt cache (wrong magic)".into(),
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let version = u32_at(8);
        if version != VERSION {
            return Err(Error::State(format!(
                "prompt cache version {version}, this build reads {VERSION}"
            )));
        }
        let n = u32_at(12);
        let end = HEADER + 4 * n as usize;
        if n > MAX_TOKENS || b.len() < end {
            return Err(Error::State(format!(
                "{n} tokens in a prompt cache of {} bytes",
                b.len()
            )));
        }
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&b[16..24]);
        if checksum(b) != u64::from_le_bytes(sum) {
            return Err(Error::State(
                "checksum mismatch: the prompt cache is corrupt".into(),
            ));
        }
        Ok(PromptCache {
            tokens: (HEADER..end).step_by(4).map(u32_at).collect(),
            state: b[end..].to_vec(),
        })
    }

    /// Write to `path`, atomically.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        write_atomic(path, &self.to_bytes())
    }

    /// Read `path`: a regular file of at most [`MAX_STATE_FILE_BYTES`].
    pub fn load(path: &Path) -> Result<PromptCache, Error> {
        let io = |err| Error::Io {
            path: path.display().to_string(),
            err,
        };
        let md = std::fs::metadata(path).map_err(io)?;
        if !md.is_file() {
            return Err(Error::State(format!(
                "{}: not a regular file",
                path.display()
            )));
        }
        if md.len() > MAX_STATE_FILE_BYTES {
            return Err(Error::State(format!(
                "{}: {} bytes, more than the {MAX_STATE_FILE_BYTES} a state file may have",
                path.display(),
                md.len()
            )));
        }
        let b = std::fs::read(path).map_err(io)?;
        PromptCache::from_bytes(&b).map_err(|e| match e {
            Error::State(m) => Error::State(format!("{}: {m}", path.display())),
            e => e,
        })
    }
}

/// Largest state file read (64 GiB: a 70B model's full 32k context in f16
/// is about 10 GiB).
pub const MAX_STATE_FILE_BYTES: u64 = 64 << 30;

/// Write `bytes` to `path` through a temporary file in the same folder,
/// synced, then renamed over `path`: `path` is either the old file or the
/// new one, never half of one. An existing `path` must be a regular file
/// (renaming over `/dev/full` as root would replace the device).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let io = |err| Error::Io {
        path: path.display().to_string(),
        err,
    };
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.is_file() {
            return Err(Error::State(format!(
                "{}: exists and is not a regular file: not overwritten",
                path.display()
            )));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}
