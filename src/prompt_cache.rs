//! The `--prompt-cache` file: the prompt's token ids and the saved state of
//! sequence 0 after it ([`Context::state_seq_save`]).
//!
//! ```text
//! magic     8 bytes  "GLINTPC\0"
//! version   u32      1
//! n_tokens  u32      <= MAX_TOKENS
//! tokens    n_tokens x u32
//! state     the rest: a sequence state blob (checked when restored)
//! ```

use std::path::Path;

use crate::{Context, Error};

/// Leading bytes of a prompt cache file.
pub const MAGIC: [u8; 8] = *b"GLINTPC\0";
/// Format version written and read.
pub const VERSION: u32 = 1;
/// Cap on the token count (a longer one means a corrupt file; no context is
/// this large).
pub const MAX_TOKENS: u32 = 1 << 24;

/// Write `tokens` and sequence `seq`'s state to `path`.
pub fn save(path: &Path, ctx: &mut Context, seq: i32, tokens: &[u32]) -> Result<(), Error> {
    let state = ctx.state_seq_save(seq)?;
    let mut b = Vec::with_capacity(16 + 4 * tokens.len() + state.len());
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    for &t in tokens {
        b.extend_from_slice(&t.to_le_bytes());
    }
    b.extend_from_slice(&state);
    std::fs::write(path, b)
        .map_err(|e| Error::Invalid(format!("prompt cache {}: {e}", path.display())))
}

/// Read a prompt cache file: (tokens, state blob).
pub fn load(path: &Path) -> Result<(Vec<u32>, Vec<u8>), Error> {
    let bad = |m: String| Error::Invalid(format!("prompt cache {}: {m}", path.display()));
    let b = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    if b.len() < 16 || b[..8] != MAGIC {
        return Err(bad("not a glint prompt cache (wrong magic)".into()));
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let version = u32_at(8);
    if version != VERSION {
        return Err(bad(format!(
            "version {version}, this build reads {VERSION}"
        )));
    }
    let n = u32_at(12);
    let end = 16 + 4 * n as usize;
    if n > MAX_TOKENS || b.len() < end {
        return Err(bad(format!("{n} tokens in a file of {} bytes", b.len())));
    }
    let tokens = (16..end).step_by(4).map(u32_at).collect();
    Ok((tokens, b[end..].to_vec()))
}
