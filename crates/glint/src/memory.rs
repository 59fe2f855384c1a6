//! What a context remembers between decodes.
//!
//! [`SeqMemory`] is the interface the context talks to: llama.cpp's
//! sequence operations (`seq_rm`, `seq_cp`, `seq_keep`, `seq_add`,
//! `seq_div`; `seq_unshare`, copy-on-write of shared cells), positions,
//! state save/restore, and the begin/rollback pair around a decode.
//! [`KvCache`] is its first implementation: the cells (`glint-kv`: which
//! token of which sequences sits in which cell, at what position) and the
//! K/V rows on the backend, owned together so they can never disagree. A
//! per-sequence recurrent state (LFM2's short convolutions, Mamba's SSM
//! state) implements the same trait, and a hybrid memory holds both and
//! forwards each call to each.
//!
//! A failed decode is undone without copying the whole cell state: `begin`
//! returns an [`Undo`] holding what the batch changed, and `rollback`
//! restores it. A pending K-shift that was applied is *not* undone: the K
//! rows were rotated, so the positions they were rotated to stay.

use glint_backend::{Backend, GgmlType, Tensor, TensorDesc, Usage};
use glint_kv::{
    CellLog, CellPlan, KvCells, KvParams, ModelIdentity, RowCopy, TokenMeta, CELL_WORDS,
};
use glint_model::{HParams, KvStorage};

use crate::recurrent::{Recurrent, RecurrentUndo};

// The cells as the kv crate writes them are the words the kernels read.
const _: () = assert!(CELL_WORDS == glint_backend::CELL_WORDS);
use crate::Error;

/// Sizes of a KV cache.
#[derive(Clone, Debug)]
pub(crate) struct KvCacheParams {
    /// Cells per stream, streams, layout.
    pub(crate) cells: KvParams,
    /// K cache element type.
    pub(crate) type_k: GgmlType,
    /// V cache element type.
    pub(crate) type_v: GgmlType,
    /// Two-window SelfExtend: keep K rotated at grouped positions too.
    pub(crate) window: Option<crate::params::SelfExtendWindow>,
    /// Sliding-window layers in the full-size cache (`--swa-full`), not in
    /// a ring of their own.
    pub(crate) swa_full: bool,
    /// Most tokens a forward pass carries (the ring's slack).
    pub(crate) n_ubatch: u32,
}

/// What [`SeqMemory::begin`] changed, for [`SeqMemory::rollback`]: the
/// cells the batch took (`glint-kv`'s log), not a copy of the cache, and the
/// recurrent states' positions (their values are saved on the device).
pub(crate) struct Undo(CellLog, Option<RecurrentUndo>);

/// The sequence operations of a memory. Sequence ids are `0..n_seq_max`;
/// `seq < 0` means every sequence where an op allows it; `p0 < 0` means from
/// the start and `p1 < 0` to the end.
pub(crate) trait SeqMemory<B: Backend> {
    /// Drop the positions `[p0, p1)` of `seq` (< 0: of every sequence).
    fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<(), Error>;
    /// Make `dst` share the positions `[p0, p1)` of `src`.
    fn seq_cp(&mut self, be: &B, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error>;
    /// Copy-on-write: give `seq` its own copy of every cell in `[p0, p1)`
    /// it shares with another sequence, so a position edit of `seq` moves
    /// only `seq`. All or nothing; returns the number of cells copied.
    fn seq_unshare(&mut self, be: &B, seq: i32, p0: i32, p1: i32) -> Result<usize, Error>;
    /// Keep only sequence `seq`.
    fn seq_keep(&mut self, seq: i32) -> Result<(), Error>;
    /// Shift the positions `[p0, p1)` of `seq` by `d`.
    fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error>;
    /// Divide the positions `[p0, p1)` of `seq` by `d` (floor).
    fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error>;
    /// Smallest position of `seq`, or -1.
    fn seq_pos_min(&self, seq: i32) -> Result<i32, Error>;
    /// Largest position of `seq`, or -1.
    fn seq_pos_max(&self, seq: i32) -> Result<i32, Error>;
    /// Forget everything.
    fn clear(&mut self);
    /// Make room for a batch of tokens (apply pending position edits, take
    /// the cells): all or nothing.
    fn begin(&mut self, be: &B, batch: &[TokenMeta]) -> Result<(Undo, CellPlan), Error>;
    /// Undo a [`SeqMemory::begin`] whose decode failed.
    fn rollback(&mut self, be: &B, undo: Undo) -> Result<(), Error>;
    /// Sequence `seq`'s state, in [`crate::state`]'s sequence format.
    fn state_write(&mut self, be: &B, seq: i32) -> Result<Vec<u8>, Error>;
    /// Restore the positions below `end_pos` of a sequence saved by
    /// `state_write` into `dst`; all or nothing.
    fn state_read(&mut self, be: &B, bytes: &[u8], dst: i32, end_pos: i32) -> Result<(), Error>;
}

/// The KV cache: cells and their K/V rows.
pub(crate) struct KvCache<B: Backend> {
    hp: HParams,
    /// Which token sits in which cell.
    pub(crate) cells: KvCells,
    /// Per layer, K and V rows: `[n_embd_kv, n_stream * kv_size]`.
    pub(crate) storage: KvStorage<B::Tensor>,
    /// `[n_stream * kv_size]` i32: the K-shift of each cell, uploaded before
    /// the K-shift kernel runs.
    shifts: B::Tensor,
    /// Two-window SelfExtend: `storage.k2` holds K at grouped positions.
    window: Option<crate::params::SelfExtendWindow>,
    /// The words of the cells [`KvCache::sync_cells`] writes, kept so a
    /// decode step allocates nothing: `[w, changed cells]` i32.
    words: Vec<i32>,
}

impl<B: Backend> KvCache<B> {
    /// A cache of `p`'s size for the model layers `layers`.
    pub(crate) fn new(
        be: &B,
        hp: &HParams,
        p: &KvCacheParams,
        layers: Vec<usize>,
    ) -> Result<Self, Error> {
        let cells = KvCells::new(p.cells.clone())?;
        let n_rows = (cells.n_stream() * p.cells.kv_size) as usize;
        let storage = KvStorage::new(
            be,
            hp,
            layers,
            n_rows,
            [p.type_k, p.type_v],
            p.window.is_some(),
            cells.cell_words_len(),
        )?;
        let shifts = be.alloc(TensorDesc {
            ty: GgmlType::I32,
            ne: [n_rows, 1, 1, 1],
            label: "kshift".into(),
            usage: Usage::Scratch,
        })?;
        Ok(KvCache {
            hp: hp.clone(),
            cells,
            storage,
            shifts,
            window: p.window,
            words: Vec::new(),
        })
    }

    /// Brings the backend's copy of the cells (`storage.cells`, what masks
    /// are built from) up to date: the cells changed since the last call,
    /// one write of their range a stream that has any (a decode step of
    /// one sequence: one cell, 8 bytes up to 32 sequences). On an error
    /// every cell counts as changed, so the next call writes them all.
    pub(crate) fn sync_cells(&mut self, be: &B) -> Result<(), Error> {
        let kv_size = self.cells.params().kv_size as usize;
        for st in 0..self.cells.n_stream() {
            let r = self.cells.take_changed(st);
            if r.is_empty() {
                continue;
            }
            let w = self.cells.cell_words_len();
            self.words.resize(r.len() * w, 0);
            self.cells.cell_words(st, r.clone(), &mut self.words);
            let at = (st as usize * kv_size + r.start) * w * 4;
            if let Err(e) = be.write(&self.storage.cells, at, bytemuck::cast_slice(&self.words)) {
                self.cells.mark_all_changed();
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// What a saved sequence must agree on with this cache.
    fn identity(&self) -> ModelIdentity {
        let hp = &self.hp;
        let (tk, tv) = (self.storage.type_k, self.storage.type_v);
        let n = hp.n_embd_kv() as u64;
        ModelIdentity {
            arch: hp.arch.name.to_string(),
            n_layer: self.storage.layers.len() as u32,
            n_embd_k_gqa: hp.n_embd_kv() as u32,
            n_embd_v_gqa: hp.n_embd_kv() as u32,
            type_k: tk.id(),
            type_v: tv.id(),
            k_row_bytes: tk.bytes_for(n).unwrap_or(0),
            v_row_bytes: tv.bytes_for(n).unwrap_or(0),
        }
    }

    /// Rotate cached K by the pending shifts (K-shift), if any.
    pub(crate) fn apply_kshift(&mut self, be: &B) -> Result<(), Error> {
        let Some(plan) = self.cells.take_shifts() else {
            return Ok(());
        };
        be.write(&self.shifts, 0, bytemuck::cast_slice(&plan.shifts))?;
        for (k, &il) in self.storage.k.iter().zip(&self.storage.layers) {
            be.kshift(k, &self.shifts, &self.hp.rope(il, self.hp.n_head_kv))?;
        }
        Ok(())
    }

    /// Copy whole K/V rows (every layer) from `src` rows to `dst` rows: read
    /// as f32 with `get_rows`, written back with `set_rows` (exact for f16
    /// and f32).
    fn copy_rows(&self, be: &B, pairs: &[(i32, i32)]) -> Result<(), Error> {
        let n = pairs.len();
        let alloc = |ty: GgmlType, ne: [usize; 4], label: &str| {
            be.alloc(TensorDesc {
                ty,
                ne,
                label: label.into(),
                usage: Usage::Scratch,
            })
        };
        // src_idx, dst_idx: [n] i32 rows; tmp: [n_embd_kv, n] f32
        let src_idx = alloc(GgmlType::I32, [n, 1, 1, 1], "copy_src")?;
        let dst_idx = alloc(GgmlType::I32, [n, 1, 1, 1], "copy_dst")?;
        let tmp = alloc(GgmlType::F32, [self.hp.n_embd_kv(), n, 1, 1], "copy_rows")?;
        let src: Vec<i32> = pairs.iter().map(|p| p.0).collect();
        let dst: Vec<i32> = pairs.iter().map(|p| p.1).collect();
        be.write(&src_idx, 0, bytemuck::cast_slice(&src))?;
        be.write(&dst_idx, 0, bytemuck::cast_slice(&dst))?;
        let s = &self.storage;
        for t in s.k.iter().chain(s.v.iter()).chain(s.k2.iter()) {
            be.get_rows(t, &src_idx, &tmp)?;
            be.set_rows(&tmp, &dst_idx, t)?;
        }
        be.sync()?;
        Ok(())
    }

    /// Call `f(tensor, byte offset in it, byte range in the state's
    /// storage)` for each run of consecutive `rows`, K of every layer first,
    /// then V: the sequence state's storage layout. Returns the bytes
    /// covered.
    fn for_each_run(
        &self,
        rows: &[u64],
        mut f: impl FnMut(&B::Tensor, usize, std::ops::Range<usize>) -> Result<(), Error>,
    ) -> Result<usize, Error> {
        let runs = row_runs(rows);
        let mut at = 0;
        for t in self.storage.k.iter().chain(self.storage.v.iter()) {
            let rb = t.desc().row_bytes();
            for &(first, n) in &runs {
                let len = n * rb;
                f(t, first as usize * rb, at..at + len)?;
                at += len;
            }
        }
        Ok(at)
    }

    /// Copy the K rows (every layer), then the V rows, of `rows` into `out`.
    /// Consecutive rows are read at once.
    fn read_rows(&self, be: &B, rows: &[u64], out: &mut [u8]) -> Result<(), Error> {
        let n = out.len();
        let at = self.for_each_run(rows, |t, offset, range| {
            let dst = out.get_mut(range.clone()).ok_or_else(|| {
                Error::Internal(format!("state storage: {n} bytes, row needs {}", range.end))
            })?;
            Ok(be.read(t, offset, dst)?)
        })?;
        if at != n {
            return Err(Error::Internal(format!(
                "state storage: {at} bytes read, {n} expected"
            )));
        }
        Ok(())
    }

    /// The rows of the `kept` cells out of a state's storage of `n_saved`
    /// cells (K rows of every layer, then V rows, each in cell order).
    fn kept_rows(&self, storage: &[u8], n_saved: usize, kept: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut base = 0;
        for t in self.storage.k.iter().chain(self.storage.v.iter()) {
            let rb = t.desc().row_bytes();
            for &k in kept {
                out.extend_from_slice(&storage[base + k * rb..base + (k + 1) * rb]);
            }
            base += n_saved * rb;
        }
        out
    }

    /// Write `data` (K rows of every layer, then V rows, in `rows` order)
    /// into the cache rows `rows`.
    fn write_rows(&self, be: &B, rows: &[u64], data: &[u8]) -> Result<(), Error> {
        self.for_each_run(rows, |t, offset, range| {
            let src = data.get(range.clone()).ok_or_else(|| {
                Error::Internal(format!(
                    "state storage ends at {}, row needs {}",
                    data.len(),
                    range.end
                ))
            })?;
            Ok(be.write(t, offset, src)?)
        })?;
        be.sync()?;
        Ok(())
    }
}

impl<B: Backend> SeqMemory<B> for KvCache<B> {
    fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<(), Error> {
        Ok(self.cells.seq_rm(seq, p0, p1)?)
    }

    fn seq_cp(&mut self, be: &B, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let copies = self.cells.seq_cp(src, dst, p0, p1)?;
        if copies.is_empty() {
            return Ok(());
        }
        self.copy_rows(be, &row_pairs(&copies))
    }

    fn seq_unshare(&mut self, be: &B, seq: i32, p0: i32, p1: i32) -> Result<usize, Error> {
        // The cells change only once the rows are copied: a failed copy
        // must not leave cells naming rows that were never written (the
        // copies write only rows of empty cells, so it leaves nothing
        // visible). The clone is of the cell metadata, a small cost next
        // to the row copies.
        let mut next = self.cells.clone();
        let copies = next.seq_unshare(seq, p0, p1)?;
        if copies.is_empty() {
            return Ok(0);
        }
        self.copy_rows(be, &row_pairs(&copies))?;
        self.cells = next;
        Ok(copies.len())
    }

    fn seq_keep(&mut self, seq: i32) -> Result<(), Error> {
        Ok(self.cells.seq_keep(seq)?)
    }

    fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        Ok(self.cells.seq_add(seq, p0, p1, d)?)
    }

    fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        Ok(self.cells.seq_div(seq, p0, p1, d)?)
    }

    fn seq_pos_min(&self, seq: i32) -> Result<i32, Error> {
        Ok(self.cells.seq_pos_min(seq)?)
    }

    fn seq_pos_max(&self, seq: i32) -> Result<i32, Error> {
        Ok(self.cells.seq_pos_max(seq)?)
    }

    fn clear(&mut self) {
        self.cells.clear();
    }

    fn begin(&mut self, be: &B, batch: &[TokenMeta]) -> Result<(Undo, CellPlan), Error> {
        let plan = self.cells.find_cells(batch)?;
        // Applied shifts stay applied (see the module docs): the undo point
        // is after the K-shift.
        self.apply_kshift(be)?;
        let log = self.cells.apply(&plan)?;
        Ok((Undo(log, None), plan))
    }

    fn rollback(&mut self, _be: &B, undo: Undo) -> Result<(), Error> {
        Ok(self.cells.rollback(undo.0)?)
    }

    fn state_write(&mut self, be: &B, seq: i32) -> Result<Vec<u8>, Error> {
        let w = self.cells.state_write(seq, &self.identity())?;
        let mut out = w.bytes;
        let storage = usize::try_from(w.storage_bytes)
            .map_err(|_| Error::State(format!("{} bytes of state", w.storage_bytes)))?;
        let start = out.len();
        out.resize(start + storage, 0);
        self.read_rows(be, &w.src_rows, &mut out[start..])?;
        glint_kv::seal_state(&mut out);
        Ok(out)
    }

    fn state_read(&mut self, be: &B, bytes: &[u8], dst: i32, end_pos: i32) -> Result<(), Error> {
        let id = self.identity();
        let mut next = self.cells.clone();
        let r = next.state_read_prefix(bytes, dst, &id, end_pos)?;
        let storage = &bytes[r.storage.clone()];
        if r.kept.len() == r.n_saved {
            self.write_rows(be, &r.dst_rows, storage)?;
        } else {
            let kept = self.kept_rows(storage, r.n_saved, &r.kept);
            self.write_rows(be, &r.dst_rows, &kept)?;
        }
        self.cells = next;
        self.rebuild_grouped(be, &r.dst_rows)?;
        Ok(())
    }
}

impl<B: Backend> KvCache<B> {
    /// Two-window SelfExtend: the grouped K of `rows` made anew from their
    /// K (copied, then rotated by `⌊pos/G⌋ − pos`: a pure rotation), after
    /// a state restore wrote K alone. Nothing without a window.
    fn rebuild_grouped(&self, be: &B, rows: &[u64]) -> Result<(), Error> {
        let Some(w) = self.window else {
            return Ok(());
        };
        if rows.is_empty() {
            return Ok(());
        }
        let kv_size = self.cells.params().kv_size as u64;
        let mut shifts = vec![0i32; self.storage.n_rows];
        let mut idx = Vec::with_capacity(rows.len());
        for &r in rows {
            let cell = self
                .cells
                .cell((r / kv_size) as u32, (r % kv_size) as u32)
                .ok_or_else(|| Error::Internal(format!("row {r} has no cell")))?;
            shifts[r as usize] = w.key_pos(cell.pos) - cell.pos;
            idx.push(r as i32);
        }
        let alloc = |ty: GgmlType, ne: [usize; 4], label: &str| {
            be.alloc(TensorDesc {
                ty,
                ne,
                label: label.into(),
                usage: Usage::Scratch,
            })
        };
        // idx: [n] i32 rows; tmp: [n_embd_kv, n] f32
        let n = idx.len();
        let idx_t = alloc(GgmlType::I32, [n, 1, 1, 1], "grouped_rows")?;
        let tmp = alloc(GgmlType::F32, [self.hp.n_embd_kv(), n, 1, 1], "grouped_tmp")?;
        be.write(&idx_t, 0, bytemuck::cast_slice(&idx))?;
        be.write(&self.shifts, 0, bytemuck::cast_slice(&shifts))?;
        for ((k, k2), &il) in self
            .storage
            .k
            .iter()
            .zip(&self.storage.k2)
            .zip(&self.storage.layers)
        {
            be.get_rows(k, &idx_t, &tmp)?;
            be.set_rows(&tmp, &idx_t, k2)?;
            be.kshift(k2, &self.shifts, &self.hp.rope(il, self.hp.n_head_kv))?;
        }
        be.sync()?;
        Ok(())
    }
}

/// `(src_row, dst_row)` of each copy, as the i32 row indices `copy_rows`
/// uploads (the same cast the decode makes for its K/V rows).
fn row_pairs(copies: &[RowCopy]) -> Vec<(i32, i32)> {
    copies
        .iter()
        .map(|c| (c.src_row as i32, c.dst_row as i32))
        .collect()
}

/// Runs of consecutive rows, in order: `(first row, count)`.
fn row_runs(rows: &[u64]) -> Vec<(u64, usize)> {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for &r in rows {
        match runs.last_mut() {
            Some((first, n)) if *first + *n as u64 == r => *n += 1,
            _ => runs.push((r, 1)),
        }
    }
    runs
}

/// A context's memory: the KV cache of the attention layers and, for a
/// hybrid model (LFM2), the recurrent states of its short-convolution
/// layers beside it. Each sequence op goes to both, the recurrent part
/// asked first whether it can be done (see [`crate::recurrent`]), so a
/// refused op changes nothing.
pub(crate) struct Memory<B: Backend> {
    /// The attention layers' cells and K/V rows (the full-attention ones
    /// only when `swa` is there).
    pub(crate) kv: KvCache<B>,
    /// The sliding-window layers' own cache: a ring of `n_swa` cells for
    /// each sequence sharing a stream plus `n_ubatch` (padded to 256),
    /// whose cells older than the window are dropped before each
    /// micro-batch (llama.cpp's iSWA cache; `None` with
    /// `--swa-full`, without such layers, or when it would not be smaller).
    pub(crate) swa: Option<Ring<B>>,
    /// The short-convolution layers' states (inactive without them).
    pub(crate) rec: Recurrent<B>,
}

/// The sliding-window layers' cache and what a decode did to it.
pub(crate) struct Ring<B: Backend> {
    pub(crate) cache: KvCache<B>,
    /// The window (`n_swa`).
    n_swa: i32,
    /// This decode's cell logs, one per micro-batch, for a rollback.
    logs: Vec<CellLog>,
    /// Sequences in this decode's micro-batches so far.
    touched: Vec<i32>,
    /// Each sequence of this decode's batch and its first position there.
    decode_first: Vec<(i32, i32)>,
    /// Sequences of this decode whose old cells it dropped (a rollback
    /// cannot bring them back).
    pruned: Vec<i32>,
}

/// Cells per stream of the sliding-window ring (llama.cpp's iSWA size:
/// the window of every sequence sharing a stream plus one micro-batch,
/// padded to 256), or `None` when it would not be smaller than the full
/// cache.
fn ring_size(hp: &HParams, p: &KvCacheParams) -> Option<u32> {
    if p.swa_full || hp.n_swa == 0 || !hp.swa_layers.iter().any(|&x| x) {
        return None;
    }
    let seqs = match p.cells.layout {
        glint_kv::StreamLayout::Unified => p.cells.n_seq_max,
        _ => 1,
    };
    let want = (hp.n_swa as u64) * seqs as u64 + p.n_ubatch as u64;
    let padded = want.div_ceil(256) * 256;
    (padded < p.cells.kv_size as u64).then_some(padded as u32)
}

/// Each sequence of `tokens` and its first (smallest) position there.
fn first_positions(tokens: &[TokenMeta]) -> Vec<(i32, i32)> {
    let mut first: Vec<(i32, i32)> = Vec::new();
    for t in tokens {
        for &s in &t.seq_ids {
            match first.iter_mut().find(|(q, _)| *q == s) {
                Some(e) => e.1 = e.1.min(t.pos),
                None => first.push((s, t.pos)),
            }
        }
    }
    first
}

impl<B: Backend> Memory<B> {
    pub(crate) fn new(be: &B, hp: &HParams, p: &KvCacheParams) -> Result<Self, Error> {
        let attn = hp.attn_layers();
        let is_swa = |il: &usize| hp.swa_layers.get(*il).copied().unwrap_or(false);
        let swa = match ring_size(hp, p) {
            Some(size) => {
                let rp = KvCacheParams {
                    cells: KvParams {
                        kv_size: size,
                        n_pad: 256.min(size),
                        ..p.cells.clone()
                    },
                    // The grouped K of two-window SelfExtend is for
                    // full-attention layers only.
                    window: None,
                    ..p.clone()
                };
                let layers = attn.iter().copied().filter(is_swa).collect();
                Some(Ring {
                    cache: KvCache::new(be, hp, &rp, layers)?,
                    n_swa: hp.n_swa as i32,
                    logs: Vec::new(),
                    touched: Vec::new(),
                    decode_first: Vec::new(),
                    pruned: Vec::new(),
                })
            }
            None => None,
        };
        let main_layers = match swa {
            Some(_) => attn.iter().copied().filter(|il| !is_swa(il)).collect(),
            None => attn,
        };
        Ok(Memory {
            kv: KvCache::new(be, hp, p, main_layers)?,
            swa,
            rec: Recurrent::new(be, hp, p.cells.n_seq_max as usize)?,
        })
    }

    /// Whether a new prompt's shared prefix may need a checkpoint (the
    /// memory cannot always be cut back to a position).
    pub(crate) fn needs_checkpoints(&self) -> bool {
        self.rec.is_active() || self.swa.is_some()
    }

    /// Refuse an op that moves cached positions when a ring drops cells by
    /// position.
    fn positions_fixed(&self, what: &str) -> Result<(), Error> {
        match self.swa {
            Some(_) => Err(Error::Window(format!(
                "{what} moves cached positions, but the sliding-window cache (a ring) has \
                 dropped the cells that would come back into the window; run with --swa-full"
            ))),
            None => Ok(()),
        }
    }

    /// Whether the ring still holds what a sequence cut at `p0` needs (the
    /// `n_swa - 1` positions before it), for `seq_rm(seq, p0, p1)`.
    fn ring_can_cut(&self, seq: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let Some(r) = &self.swa else {
            return Ok(());
        };
        let seqs: Vec<i32> = if seq < 0 {
            (0..self.kv.cells.params().n_seq_max as i32).collect()
        } else {
            vec![seq]
        };
        for s in seqs {
            let last = self.kv.seq_pos_max(s)?;
            let p1 = if p1 < 0 { i32::MAX } else { p1 };
            // Nothing removed, the whole sequence, or a middle range the
            // window is computed over anyway: nothing old comes back.
            if p0 <= 0 || p0 > last || p1 <= last {
                continue;
            }
            let need = (p0 - r.n_swa + 1).max(0);
            let have = r.cache.seq_pos_min(s)?;
            if have > need {
                return Err(Error::Window(format!(
                    "sequence {s} cut at position {p0} would need positions {need}.. in the \
                     sliding-window cache, which holds {have}..={last} only (older cells are \
                     dropped as the window moves on); run with --swa-full to keep them"
                )));
            }
        }
        Ok(())
    }

    /// Before a micro-batch: the ring drops what no token of it (or later)
    /// can see, then takes cells for it. Returns its rows, or `None`
    /// without a ring.
    ///
    /// Every sequence of the ring is trimmed, not only the micro-batch's. A
    /// sequence of the micro-batch whose first token there is at `q` keeps
    /// positions from `q - n_swa + 1` (what that token sees); any other
    /// keeps the `n_swa` positions before its next token (what that token
    /// sees, and one more, so that cutting its last token off and decoding
    /// it again still finds its window). Its next token is the one after
    /// its last cell, or its first in a later micro-batch of this decode
    /// where that is not after it (a batch need not continue a sequence).
    /// The ring's size, `n_swa` a sequence plus one micro-batch (llama.cpp's
    /// iSWA size, whose cache frees a cell once it is outside its
    /// sequence's window), counts on that:
    /// trimmed only when in a micro-batch, a sequence left as its prompt
    /// ended held `n_swa - 1 + n_ubatch` cells, and with several sequences
    /// filled one after another the ring ran out of room.
    pub(crate) fn ring_begin(
        &mut self,
        be: &B,
        ubatch: &[TokenMeta],
    ) -> Result<Option<Vec<i32>>, Error> {
        let Some(r) = self.swa.as_mut() else {
            return Ok(None);
        };
        let first = first_positions(ubatch);
        for &(s, _) in &first {
            if !r.touched.contains(&s) {
                r.touched.push(s);
            }
        }
        for s in 0..r.cache.cells.params().n_seq_max as i32 {
            let min = r.cache.seq_pos_min(s)?;
            if min < 0 {
                continue;
            }
            let cut = match first.iter().find(|(q, _)| *q == s) {
                Some(&(_, p)) => p - r.n_swa + 1,
                None => {
                    // Its next token: after its last cell, or, where a
                    // later micro-batch of this decode holds it first at a
                    // position not after that (a batch need not continue a
                    // sequence), there.
                    let after = r.cache.seq_pos_max(s)? + 1;
                    let next = match r.decode_first.iter().find(|(q, _)| *q == s) {
                        Some(&(_, p)) if !r.touched.contains(&s) => p.min(after),
                        _ => after,
                    };
                    next - r.n_swa
                }
            };
            if cut > 0 && min < cut {
                r.cache.seq_rm(s, 0, cut)?;
                // A sequence this decode has not touched keeps what its
                // next token needs; one it has may lose cells a rollback
                // would need.
                if r.touched.contains(&s) && !r.pruned.contains(&s) {
                    r.pruned.push(s);
                }
            }
        }
        let (Undo(log, _), plan) = r.cache.begin(be, ubatch)?;
        r.logs.push(log);
        Ok(Some(plan.rows().iter().map(|&x| x as i32).collect()))
    }

    /// A decode is over: forget the ring's logs.
    pub(crate) fn commit(&mut self) {
        if let Some(r) = self.swa.as_mut() {
            r.logs.clear();
            r.touched.clear();
            r.decode_first.clear();
            r.pruned.clear();
        }
    }
}

/// A sequence's recurrent state saved at a position (llama-server's
/// context checkpoint): with the KV cells, which can be cut at any
/// position, it lets a sequence go back to that position. Only the
/// recurrent states are kept (the KV rows stay in the cache).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    first: i32,
    pos: i32,
    /// Each recurrent layer's state column, in layer order.
    data: Vec<u8>,
    /// The sequence's cells in the sliding-window ring (a saved-sequence
    /// blob of that cache), or empty.
    ring: Vec<u8>,
}

impl Checkpoint {
    /// The last position the state has seen.
    pub fn pos(&self) -> i32 {
        self.pos
    }

    /// Bytes it holds.
    pub fn n_bytes(&self) -> usize {
        self.data.len() + self.ring.len()
    }
}

impl<B: Backend> Memory<B> {
    /// Sequence `seq`'s recurrent state now; `None` when the model has no
    /// recurrent layers or the sequence is empty.
    pub(crate) fn checkpoint(&mut self, be: &B, seq: i32) -> Result<Option<Checkpoint>, Error> {
        if !self.needs_checkpoints() {
            return Ok(None);
        }
        if seq < 0 || seq as u32 >= self.kv.cells.params().n_seq_max {
            return Err(Error::Invalid(format!(
                "checkpoint of sequence {seq}: no such sequence"
            )));
        }
        let pos = self.kv.seq_pos_max(seq)?;
        if pos < 0 {
            return Ok(None);
        }
        let (first, data) = if self.rec.is_active() {
            let (first, _, data) = self.rec.save(be, seq as usize)?;
            (first, data)
        } else {
            (-1, Vec::new())
        };
        let ring = match self.swa.as_mut() {
            Some(r) => r.cache.state_write(be, seq)?,
            None => Vec::new(),
        };
        Ok(Some(Checkpoint {
            first,
            pos,
            data,
            ring,
        }))
    }

    /// Take sequence `seq` back to `cp`: its cells past `cp.pos()` dropped,
    /// its recurrent state the saved one. The cells up to `cp.pos()` must
    /// still be there (the caller's checkpoint of this sequence, taken on
    /// the tokens it still holds).
    pub(crate) fn restore(&mut self, be: &B, seq: i32, cp: &Checkpoint) -> Result<(), Error> {
        if seq < 0 || seq as u32 >= self.kv.cells.params().n_seq_max {
            return Err(Error::Invalid(format!(
                "restore into sequence {seq}: no such sequence"
            )));
        }
        let (n_layers, n_embd_conv) = self.rec.shape();
        if cp.ring.is_empty() != self.swa.is_none() {
            return Err(Error::State(
                "a checkpoint of another memory layout (sliding-window ring or not)".into(),
            ));
        }
        if cp.data.len() != n_layers * n_embd_conv * 4 {
            return Err(Error::State(format!(
                "a checkpoint of {} bytes, this model's recurrent state is {}",
                cp.data.len(),
                n_layers * n_embd_conv * 4
            )));
        }
        let max = self.kv.seq_pos_max(seq)?;
        if max < cp.pos {
            return Err(Error::State(format!(
                "a checkpoint at position {} of sequence {seq}, whose cells end at {max}",
                cp.pos
            )));
        }
        if let Some(r) = self.swa.as_mut() {
            // Checked before anything changes: a blob this ring cannot take
            // is an error with the caches as they were.
            let mut probe = r.cache.cells.clone();
            probe.seq_rm(seq, -1, -1)?;
            let id = r.cache.identity();
            probe.state_read_prefix(&cp.ring, seq, &id, i32::MAX)?;
        }
        self.kv.seq_rm(seq, cp.pos + 1, -1)?;
        if let Some(r) = self.swa.as_mut() {
            r.cache.seq_rm(seq, -1, -1)?;
            r.cache.state_read(be, &cp.ring, seq, i32::MAX)?;
        }
        if self.rec.is_active() {
            self.rec
                .load(be, seq as usize, cp.first, cp.pos, &cp.data)?;
        }
        Ok(())
    }
}

/// Leading bytes of a saved sequence of a memory with more than one KV
/// cache part: a recurrent state and/or a sliding-window ring beside the
/// main KV cache (whose own blob is inside).
///
/// ```text
/// magic        8 bytes  "GLINTRS\0"
/// version      u32      1
/// n_layers     u32      recurrent layers (0 without)
/// n_embd_conv  u32      values of one layer's state
/// first, last  i32 x 2  the positions the recurrent state has seen
/// kv_len       u64      bytes of the main cache's blob
/// ring_len     u64      bytes of the ring's blob (0 without a ring)
/// kv, ring     the two KV blobs (each sealed, model identity inside)
/// data         n_layers x n_embd_conv f32: the recurrent state
/// seal         u64      FNV-1a of everything before
/// ```
const HYBRID_MAGIC: [u8; 8] = *b"GLINTRS\0";
/// Its version.
const HYBRID_VERSION: u32 = 1;
/// Bytes before the KV blob.
const HYBRID_HEADER: usize = 44;

impl<B: Backend> SeqMemory<B> for Memory<B> {
    fn seq_rm(&mut self, seq: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let reset = if self.rec.is_active() {
            self.rec.plan_rm(seq, p0, p1)?
        } else {
            Vec::new()
        };
        self.ring_can_cut(seq, p0, p1)?;
        self.kv.seq_rm(seq, p0, p1)?;
        if let Some(r) = self.swa.as_mut() {
            r.cache.seq_rm(seq, p0, p1)?;
        }
        self.rec.reset(&reset);
        Ok(())
    }

    fn seq_cp(&mut self, be: &B, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error> {
        if self.rec.is_active() {
            self.rec.check_cp(src, dst, p0, p1)?;
        }
        // A copy of a prefix continues at its end: the ring must hold the
        // window before it, as for a cut there.
        if p1 >= 0 {
            self.ring_can_cut(src, p1, -1)?;
        }
        if let Some(r) = self.swa.as_mut() {
            // The ring first: it has fewer cells, so it is likelier to fail,
            // and a failed copy there leaves the main cache as it was.
            r.cache.seq_cp(be, src, dst, p0, p1)?;
        }
        self.kv.seq_cp(be, src, dst, p0, p1)?;
        if self.rec.is_active() {
            self.rec.copy(be, src as usize, dst as usize)?;
        }
        Ok(())
    }

    fn seq_unshare(&mut self, be: &B, seq: i32, p0: i32, p1: i32) -> Result<usize, Error> {
        let n = self.kv.seq_unshare(be, seq, p0, p1)?;
        match self.swa.as_mut() {
            Some(r) => Ok(n + r.cache.seq_unshare(be, seq, p0, p1)?),
            None => Ok(n),
        }
    }

    fn seq_keep(&mut self, seq: i32) -> Result<(), Error> {
        self.kv.seq_keep(seq)?;
        if let Some(r) = self.swa.as_mut() {
            r.cache.seq_keep(seq)?;
        }
        self.rec.keep(seq)
    }

    fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        self.positions_fixed("seq_add")?;
        self.kv.seq_add(seq, p0, p1, d)?;
        self.rec.shift(seq, p0, p1, |p| p.saturating_add(d))
    }

    fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, d: i32) -> Result<(), Error> {
        self.positions_fixed("seq_div")?;
        self.kv.seq_div(seq, p0, p1, d)?;
        self.rec.shift(seq, p0, p1, |p| p.div_euclid(d.max(1)))
    }

    fn seq_pos_min(&self, seq: i32) -> Result<i32, Error> {
        self.kv.seq_pos_min(seq)
    }

    fn seq_pos_max(&self, seq: i32) -> Result<i32, Error> {
        self.kv.seq_pos_max(seq)
    }

    fn clear(&mut self) {
        self.kv.clear();
        if let Some(r) = self.swa.as_mut() {
            r.cache.clear();
        }
        self.rec.clear();
    }

    fn begin(&mut self, be: &B, batch: &[TokenMeta]) -> Result<(Undo, CellPlan), Error> {
        self.commit();
        if let Some(r) = self.swa.as_mut() {
            r.decode_first = first_positions(batch);
        }
        if !self.rec.is_active() {
            return self.kv.begin(be, batch);
        }
        let rec = self.rec.begin(be, batch)?;
        match self.kv.begin(be, batch) {
            Ok((Undo(log, _), plan)) => Ok((Undo(log, Some(rec)), plan)),
            Err(e) => {
                self.rec.rollback(be, rec)?;
                Err(e)
            }
        }
    }

    fn rollback(&mut self, be: &B, undo: Undo) -> Result<(), Error> {
        let Undo(log, rec) = undo;
        self.kv.rollback(be, Undo(log, None))?;
        if let Some(r) = self.swa.as_mut() {
            // Newest first; a later micro-batch's window may have trimmed
            // cells an earlier one wrote (`rollback_trimmed`).
            while let Some(l) = r.logs.pop() {
                r.cache.cells.rollback_trimmed(l)?;
            }
            // Cells dropped as the window moved on cannot come back: those
            // sequences are dropped whole, in every cache, rather than
            // left with a hole in their window.
            let pruned = std::mem::take(&mut r.pruned);
            for s in pruned {
                self.kv.seq_rm(s, -1, -1)?;
                if let Some(r) = self.swa.as_mut() {
                    r.cache.seq_rm(s, -1, -1)?;
                }
            }
        }
        match rec {
            Some(r) => self.rec.rollback(be, r),
            None => Ok(()),
        }
    }

    fn state_write(&mut self, be: &B, seq: i32) -> Result<Vec<u8>, Error> {
        let kv = self.kv.state_write(be, seq)?;
        if !self.needs_checkpoints() {
            return Ok(kv);
        }
        if seq < 0 {
            return Err(Error::Invalid(format!(
                "state of sequence {seq}: name one sequence"
            )));
        }
        let (first, last, data) = if self.rec.is_active() {
            self.rec.save(be, seq as usize)?
        } else {
            (-1, -1, Vec::new())
        };
        let ring = match self.swa.as_mut() {
            Some(r) => r.cache.state_write(be, seq)?,
            None => Vec::new(),
        };
        let (n_layers, n_embd_conv) = self.rec.shape();
        let mut out = Vec::with_capacity(HYBRID_HEADER + kv.len() + ring.len() + data.len() + 8);
        out.extend_from_slice(&HYBRID_MAGIC);
        out.extend_from_slice(&HYBRID_VERSION.to_le_bytes());
        out.extend_from_slice(&(n_layers as u32).to_le_bytes());
        out.extend_from_slice(&(n_embd_conv as u32).to_le_bytes());
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&last.to_le_bytes());
        out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
        out.extend_from_slice(&(ring.len() as u64).to_le_bytes());
        out.extend_from_slice(&kv);
        out.extend_from_slice(&ring);
        out.extend_from_slice(&data);
        glint_kv::seal_state(&mut out);
        Ok(out)
    }

    fn state_read(&mut self, be: &B, bytes: &[u8], dst: i32, end_pos: i32) -> Result<(), Error> {
        if !self.needs_checkpoints() {
            return self.kv.state_read(be, bytes, dst, end_pos);
        }
        let h = parse_hybrid(bytes, self.rec.shape())?;
        if self.rec.is_active() && h.last >= 0 && h.last >= end_pos {
            return Err(Error::Recurrent(format!(
                "the saved sequence's recurrent state is at position {}: it cannot be cut back to \
                 the positions below {end_pos} (only the whole sequence restores)",
                h.last
            )));
        }
        if dst < 0 || dst as u32 >= self.kv.cells.params().n_seq_max {
            return Err(Error::Invalid(format!(
                "restore into sequence {dst}: no such sequence"
            )));
        }
        if h.ring.is_empty() != self.swa.is_none() {
            return Err(Error::State(
                "saved with another memory layout (a sliding-window ring or not): restore it \
                 with the same --swa-full setting"
                    .into(),
            ));
        }
        // The ring's part checked first: its cells must cover the window
        // before the restored end.
        if let Some(r) = &self.swa {
            let mut probe = r.cache.cells.clone();
            probe.seq_rm(dst, -1, -1)?;
            let got = probe.state_read_prefix(h.ring, dst, &r.cache.identity(), end_pos)?;
            let (min, max) = (probe.seq_pos_min(dst)?, probe.seq_pos_max(dst)?);
            let need = (max + 1 - r.n_swa + 1).max(0);
            if !got.kept.is_empty() && min > need {
                return Err(Error::Window(format!(
                    "the saved sequence's sliding-window cells start at position {min}: a \
                     restore ending at {max} needs them from {need} (save with --swa-full to \
                     restore any prefix)"
                )));
            }
        }
        self.kv.state_read(be, h.kv, dst, end_pos)?;
        if let Some(r) = self.swa.as_mut() {
            r.cache.seq_rm(dst, -1, -1)?;
            if let Err(e) = r.cache.state_read(be, h.ring, dst, end_pos) {
                let _ = self.kv.seq_rm(dst, -1, -1);
                return Err(e);
            }
        }
        if self.rec.is_active() {
            self.rec.load(be, dst as usize, h.first, h.last, h.data)?;
        }
        Ok(())
    }
}

/// A hybrid saved sequence's parts.
struct Hybrid<'a> {
    first: i32,
    last: i32,
    kv: &'a [u8],
    ring: &'a [u8],
    data: &'a [u8],
}

/// Check a hybrid blob (magic, version, seal, this model's state shape,
/// lengths) and split it.
fn parse_hybrid(
    bytes: &[u8],
    (n_layers, n_embd_conv): (usize, usize),
) -> Result<Hybrid<'_>, Error> {
    let bad = |m: String| Error::State(m);
    if bytes.len() < HYBRID_HEADER + 8 || bytes[..8] != HYBRID_MAGIC {
        return Err(bad(
            "not a saved sequence of a model with recurrent layers (magic GLINTRS)".into(),
        ));
    }
    let (body, seal) = bytes.split_at(bytes.len() - 8);
    if glint_kv::fnv1a(body).to_le_bytes() != seal {
        return Err(bad(
            "checksum mismatch: the saved state is corrupt or truncated".into(),
        ));
    }
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
    let version = u32_at(8);
    if version != HYBRID_VERSION {
        return Err(bad(format!(
            "version {version}, this glint reads {HYBRID_VERSION}"
        )));
    }
    let (nl, ne) = (u32_at(12) as usize, u32_at(16) as usize);
    if (nl, ne) != (n_layers, n_embd_conv) {
        return Err(bad(format!(
            "saved by a model with {nl} recurrent layers of {ne} values, this one has \
             {n_layers} of {n_embd_conv}"
        )));
    }
    let (first, last) = (u32_at(20) as i32, u32_at(24) as i32);
    let kv_len = u64::from_le_bytes(body[28..36].try_into().expect("8 bytes"));
    let ring_len = u64::from_le_bytes(body[36..44].try_into().expect("8 bytes"));
    let data_len = n_layers * n_embd_conv * 4;
    let want = (HYBRID_HEADER as u64)
        .checked_add(kv_len)
        .and_then(|x| x.checked_add(ring_len))
        .and_then(|x| x.checked_add(data_len as u64));
    if want != Some(body.len() as u64) {
        return Err(bad(format!(
            "{} bytes, but the header says {HYBRID_HEADER} + {kv_len} + {ring_len} + {data_len}",
            body.len()
        )));
    }
    let kv_end = HYBRID_HEADER + kv_len as usize;
    let ring_end = kv_end + ring_len as usize;
    Ok(Hybrid {
        first,
        last,
        kv: &body[HYBRID_HEADER..kv_end],
        ring: &body[kv_end..ring_end],
        data: &body[ring_end..],
    })
}
