//! Per-sequence state: the cell part of a saved sequence, and its checks.
//!
//! Layout (little-endian), version 2:
//!
//! ```text
//! magic          8 bytes  "GLINTKV\0"
//! version        u32      2
//! arch_len       u32      <= MAX_ARCH_BYTES
//! arch           arch_len bytes, UTF-8 (general.architecture)
//! n_layer        u32
//! n_embd_k_gqa   u32
//! n_embd_v_gqa   u32
//! type_k         u32      ggml type id of the K cache
//! type_v         u32      ggml type id of the V cache
//! k_row_bytes    u64      bytes of one K row of one layer
//! v_row_bytes    u64      bytes of one V row of one layer
//! kv_size        u32      cells per stream of the saving cache (informational:
//!                         restoring into another size is fine if it fits)
//! cell_count     u32
//! cells          cell_count x (pos i32, shift i32), in the saver's cell order
//! storage_bytes  u64      = cell_count * n_layer * (k_row_bytes + v_row_bytes)
//! checksum       u64      FNV-1a 64 of every byte above
//! storage        storage_bytes bytes, appended by the context:
//!                for il in 0..n_layer: the K rows of the cells, in cell order;
//!                then for il in 0..n_layer: the V rows, in cell order
//! seal           u64      FNV-1a 64 of every byte above (header, cells and
//!                         storage), appended by [`seal_state`]
//! ```
//!
//! The blob must end exactly after `seal`. The seal is checked before
//! anything else, so a flipped bit anywhere (a K/V row included) is an
//! error, never a restored sequence that answers another prompt's question;
//! the header's own checksum still names a corrupt header as such.
//! Version 1 had no seal and is refused.

use crate::{CellPlan, KvCells, KvError, Pos, Result, SeqId, TokenMeta};

/// Leading bytes of a saved sequence.
pub const STATE_MAGIC: [u8; 8] = *b"GLINTKV\0";
/// Format version written and read.
pub const STATE_VERSION: u32 = 2;
/// Cap on the architecture string (GGUF names are short; a longer one means
/// a corrupt blob).
pub const MAX_ARCH_BYTES: u32 = 256;

/// What a saved sequence must agree on with the cache it is restored into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelIdentity {
    /// `general.architecture`.
    pub arch: String,
    /// Layers with a KV cache.
    pub n_layer: u32,
    /// K row width in elements.
    pub n_embd_k_gqa: u32,
    /// V row width in elements.
    pub n_embd_v_gqa: u32,
    /// ggml type id of the K cache.
    pub type_k: u32,
    /// ggml type id of the V cache.
    pub type_v: u32,
    /// Bytes of one K row of one layer.
    pub k_row_bytes: u64,
    /// Bytes of one V row of one layer.
    pub v_row_bytes: u64,
}

impl ModelIdentity {
    fn storage_bytes(&self, cell_count: u64) -> Option<u64> {
        let row = self.k_row_bytes.checked_add(self.v_row_bytes)?;
        cell_count
            .checked_mul(self.n_layer as u64)?
            .checked_mul(row)
    }
}

/// A saved sequence's cell part, from [`KvCells::state_write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqStateWrite {
    /// Header and cells; the context appends `storage_bytes` of K/V rows.
    pub bytes: Vec<u8>,
    /// Buffer rows of the saved cells, in the order their K/V rows must be
    /// appended (per layer).
    pub src_rows: Vec<u64>,
    /// Bytes the context must append.
    pub storage_bytes: u64,
}

/// A restored sequence, from [`KvCells::state_read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqStateRead {
    /// Buffer rows the restored cells got, in the blob's cell order: write
    /// the blob's K/V rows there.
    pub dst_rows: Vec<u64>,
    /// Where the K/V rows are inside the blob.
    pub storage: std::ops::Range<usize>,
    /// Cells in the blob.
    pub n_saved: usize,
    /// The blob's cells that were restored (indices in its cell order), one
    /// per `dst_rows` entry; all of them unless a prefix was asked for.
    pub kept: Vec<usize>,
}

/// Append the seal (a checksum of everything before it) to a blob whose
/// storage is complete: the last step of saving a sequence.
pub fn seal_state(blob: &mut Vec<u8>) {
    let sum = fnv1a(blob);
    blob.extend_from_slice(&sum.to_le_bytes());
}

/// The blob without its seal, once the seal matches.
fn unseal(bytes: &[u8]) -> Result<&[u8]> {
    let n = bytes.len();
    if n < 8 {
        return Err(KvError::State(format!(
            "truncated: {n} bytes, not even a seal"
        )));
    }
    let (body, seal) = bytes.split_at(n - 8);
    let mut a = [0u8; 8];
    a.copy_from_slice(seal);
    if fnv1a(body) != u64::from_le_bytes(a) {
        return Err(KvError::State(
            "checksum mismatch: the saved state is corrupt or truncated".into(),
        ));
    }
    Ok(body)
}

/// FNV-1a 64: the checksum of every glint state format.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_update(FNV1A_OFFSET, bytes)
}

/// FNV-1a's starting value, for [`fnv1a_update`].
pub const FNV1A_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Fold `bytes` into the running FNV-1a 64 hash `h` (start from
/// [`FNV1A_OFFSET`]): a checksum over pieces equals [`fnv1a`] of them
/// joined.
pub fn fnv1a_update(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| {
                KvError::State(format!(
                    "truncated: {what} needs {n} bytes at offset {}, blob has {}",
                    self.at,
                    self.b.len()
                ))
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(self.u32(what)? as i32)
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

impl KvCells {
    /// Saves the cell part of `seq_id`: every cell holding it, in cell order,
    /// with position and pending shift, under `id`'s header.
    ///
    /// Precondition: a known `seq_id`; `id`'s sizes multiply within `u64`.
    pub fn state_write(&self, seq_id: SeqId, id: &ModelIdentity) -> Result<SeqStateWrite> {
        let s = self.check_seq("state_write", seq_id)?;
        if id.arch.len() > MAX_ARCH_BYTES as usize {
            return Err(KvError::State(format!(
                "architecture name of {} bytes",
                id.arch.len()
            )));
        }
        let st = self.stream_idx(s) as u32;
        let kv_size = self.params().kv_size;
        let mut cells = Vec::new();
        for cell in 0..kv_size {
            if let Some(c) = self.cell(st, cell).filter(|c| c.seqs.contains(seq_id)) {
                cells.push((cell, c.pos, c.shift));
            }
        }
        let storage_bytes = id
            .storage_bytes(cells.len() as u64)
            .ok_or_else(|| KvError::State("storage size overflows u64".into()))?;
        let mut b = Vec::with_capacity(80 + id.arch.len() + 8 * cells.len());
        b.extend_from_slice(&STATE_MAGIC);
        b.extend_from_slice(&STATE_VERSION.to_le_bytes());
        b.extend_from_slice(&(id.arch.len() as u32).to_le_bytes());
        b.extend_from_slice(id.arch.as_bytes());
        for v in [
            id.n_layer,
            id.n_embd_k_gqa,
            id.n_embd_v_gqa,
            id.type_k,
            id.type_v,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&id.k_row_bytes.to_le_bytes());
        b.extend_from_slice(&id.v_row_bytes.to_le_bytes());
        b.extend_from_slice(&kv_size.to_le_bytes());
        b.extend_from_slice(&(cells.len() as u32).to_le_bytes());
        for &(_, pos, shift) in &cells {
            b.extend_from_slice(&pos.to_le_bytes());
            b.extend_from_slice(&shift.to_le_bytes());
        }
        b.extend_from_slice(&storage_bytes.to_le_bytes());
        let sum = fnv1a(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        let src_rows = cells
            .iter()
            .map(|&(cell, _, _)| st as u64 * kv_size as u64 + cell as u64)
            .collect();
        Ok(SeqStateWrite {
            bytes: b,
            src_rows,
            storage_bytes,
        })
    }

    /// Restores a saved sequence into `dst_seq`: its current cells are
    /// dropped, the saved cells placed (contiguous if possible) with their
    /// positions and pending shifts.
    ///
    /// Everything is checked before anything changes: magic, version,
    /// identity (every field of `id`), lengths (the blob must end exactly
    /// after the storage), checksum, positions (`>= 0`, shift leaving the
    /// rotated-for position `>= 0`), room in `dst_seq`'s stream. Any failure
    /// is an error and the cache is as it was.
    ///
    /// Preconditions: `0 <= dst_seq < n_seq_max` and the checks above (else
    /// error, nothing changed). The storage must write the blob's K/V rows
    /// (`storage`) at `dst_rows`, and apply the restored pending shifts with
    /// the next K-shift.
    pub fn state_read(
        &mut self,
        bytes: &[u8],
        dst_seq: SeqId,
        id: &ModelIdentity,
    ) -> Result<SeqStateRead> {
        self.state_read_prefix(bytes, dst_seq, id, Pos::MAX)
    }

    /// [`KvCells::state_read`] of the saved cells at positions below
    /// `end_pos` only: a prompt cache saved by a larger context restores
    /// the prefix that is reused, without needing room for the rest. The
    /// whole blob is checked all the same. `kept` in the result names the
    /// saved cells restored, whose K/V rows the storage must write.
    pub fn state_read_prefix(
        &mut self,
        bytes: &[u8],
        dst_seq: SeqId,
        id: &ModelIdentity,
        end_pos: Pos,
    ) -> Result<SeqStateRead> {
        self.check_seq("state_read", dst_seq)?;
        let saved = SavedSeq::parse(bytes, id)?;
        let kept: Vec<usize> = (0..saved.cells.len())
            .filter(|&k| saved.cells[k].0 < end_pos)
            .collect();
        let cells: Vec<(Pos, Pos)> = kept.iter().map(|&k| saved.cells[k]).collect();
        let plan = self.place_saved(dst_seq, &cells)?;
        Ok(SeqStateRead {
            dst_rows: plan.rows(),
            storage: saved.storage,
            n_saved: saved.cells.len(),
            kept,
        })
    }

    /// Replaces `dst_seq`'s cells by `cells` (position, shift), all or
    /// nothing: placed on a copy, kept only if everything fits.
    fn place_saved(&mut self, dst_seq: SeqId, cells: &[(Pos, Pos)]) -> Result<CellPlan> {
        let mut next = self.clone();
        next.seq_rm(dst_seq, -1, -1)?;
        let batch: Vec<TokenMeta> = cells
            .iter()
            .map(|&(pos, _)| TokenMeta::new(pos, dst_seq))
            .collect();
        let plan = next.find_cells(&batch).map_err(|e| match e {
            KvError::NoRoom {
                stream,
                needed,
                free,
                kv_size,
                ..
            } => KvError::NoRoom {
                op: "state_read",
                stream,
                needed,
                free,
                kv_size,
            },
            e => e,
        })?;
        next.apply(&plan)?.commit();
        for (p, &(_, shift)) in plan.cells().iter().zip(cells) {
            next.restore_shift(p.stream as usize, p.cell as usize, shift);
        }
        next.debug_check();
        *self = next;
        Ok(plan)
    }
}

/// A blob that passed every check: its cells and where its K/V rows are.
struct SavedSeq {
    /// (pos, shift) per saved cell, in the blob's order.
    cells: Vec<(Pos, Pos)>,
    /// The K/V rows inside the blob.
    storage: std::ops::Range<usize>,
}

impl SavedSeq {
    /// Reads and checks a blob against `id`, in the order the checks have
    /// always run (so a blob wrong in two ways names the same fault): the
    /// header as far as the checksum (truncation, magic, version, arch),
    /// the checksum, the identity, the lengths, then the cells.
    fn parse(sealed: &[u8], id: &ModelIdentity) -> Result<SavedSeq> {
        let bytes = unseal(sealed)?;
        let mut r = Reader { b: bytes, at: 0 };
        let saved = read_identity(&mut r)?;
        let _src_kv_size = r.u32("kv_size")?;
        let cell_count = r.u32("cell_count")? as usize;
        let cells_bytes = r.take(
            cell_count
                .checked_mul(8)
                .ok_or_else(|| KvError::State("cell count overflows".into()))?,
            "cells",
        )?;
        let storage_bytes = r.u64("storage_bytes")?;
        let summed = r.at;
        let sum = r.u64("checksum")?;
        if fnv1a(&bytes[..summed]) != sum {
            return Err(KvError::State(
                "checksum mismatch: header or cells corrupt".into(),
            ));
        }
        check_same_model(&saved, id)?;
        let expect = id.storage_bytes(cell_count as u64);
        if expect != Some(storage_bytes) {
            return Err(KvError::State(format!(
                "storage_bytes {storage_bytes} does not match {cell_count} cells x {} layers x ({} + {}) bytes",
                id.n_layer, id.k_row_bytes, id.v_row_bytes
            )));
        }
        let start = r.at;
        let have = (bytes.len() - start) as u64;
        if have != storage_bytes {
            return Err(KvError::State(format!(
                "{} K/V bytes after the header, {storage_bytes} expected",
                have
            )));
        }
        Ok(SavedSeq {
            cells: read_cells(cells_bytes, cell_count)?,
            storage: start..bytes.len(),
        })
    }
}

/// Magic, version and the saver's [`ModelIdentity`].
fn read_identity(r: &mut Reader) -> Result<ModelIdentity> {
    if r.take(8, "magic")? != STATE_MAGIC {
        return Err(KvError::State(
            "wrong magic: not a glint sequence state".into(),
        ));
    }
    let version = r.u32("version")?;
    if version != STATE_VERSION {
        return Err(KvError::State(format!(
            "version {version}, this build reads {STATE_VERSION}"
        )));
    }
    let arch_len = r.u32("arch_len")?;
    if arch_len > MAX_ARCH_BYTES {
        return Err(KvError::State(format!(
            "architecture name of {arch_len} bytes > {MAX_ARCH_BYTES}"
        )));
    }
    let arch = r.take(arch_len as usize, "arch")?;
    let arch = std::str::from_utf8(arch)
        .map_err(|_| KvError::State("architecture name is not UTF-8".into()))?
        .to_string();
    Ok(ModelIdentity {
        arch,
        n_layer: r.u32("n_layer")?,
        n_embd_k_gqa: r.u32("n_embd_k_gqa")?,
        n_embd_v_gqa: r.u32("n_embd_v_gqa")?,
        type_k: r.u32("type_k")?,
        type_v: r.u32("type_v")?,
        k_row_bytes: r.u64("k_row_bytes")?,
        v_row_bytes: r.u64("v_row_bytes")?,
    })
}

/// Every field of the saver's identity equals ours; the error names the
/// first that differs, with both values.
fn check_same_model(saved: &ModelIdentity, id: &ModelIdentity) -> Result<()> {
    let mismatch = |what: &str, a: String, b: String| {
        Err(KvError::State(format!(
            "saved by a different model: {what} {a} in the blob, {b} here"
        )))
    };
    macro_rules! same {
        ($f:ident) => {
            if saved.$f != id.$f {
                return mismatch(
                    stringify!($f),
                    format!("{:?}", saved.$f),
                    format!("{:?}", id.$f),
                );
            }
        };
    }
    same!(arch);
    same!(n_layer);
    same!(n_embd_k_gqa);
    same!(n_embd_v_gqa);
    same!(type_k);
    same!(type_v);
    same!(k_row_bytes);
    same!(v_row_bytes);
    Ok(())
}

/// The `cell_count` (pos, shift) pairs; each position `>= 0` and its
/// rotated-for position `pos - shift` within `0..=i32::MAX`.
fn read_cells(bytes: &[u8], cell_count: usize) -> Result<Vec<(Pos, Pos)>> {
    let mut cells = Vec::with_capacity(cell_count);
    let mut cr = Reader { b: bytes, at: 0 };
    for k in 0..cell_count {
        let pos: Pos = cr.i32("pos")?;
        let shift: Pos = cr.i32("shift")?;
        if pos < 0
            || (pos as i64 - shift as i64) < 0
            || (pos as i64 - shift as i64) > i32::MAX as i64
        {
            return Err(KvError::State(format!(
                "cell {k}: position {pos} with shift {shift}"
            )));
        }
        cells.push((pos, shift));
    }
    Ok(cells)
}
