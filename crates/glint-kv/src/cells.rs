//! The cells: one record per cell of every stream, and the sequence operations.

use std::collections::BTreeMap;

use crate::seqset::{SeqSet, MAX_SEQ};
use crate::{KvError, Pos, Result, SeqId, CELL_WORDS};

/// How sequences map onto the cache buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamLayout {
    /// One stream: every sequence shares the same `kv_size` cells; the mask
    /// keeps sequences apart. The default (memory-frugal, and what a single
    /// sequence wants).
    Unified,
    /// `n_stream = n_seq_max`: sequence `s` owns stream `s`, buffer rows
    /// `s * kv_size .. (s + 1) * kv_size`.
    PerSeq,
}

/// Parameters of a cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvParams {
    /// Cells **per stream**; the cache has `n_stream * kv_size` cells in all.
    /// The context size given on the command line (`-c N`) is the total
    /// across streams: unified, `kv_size = N`; per-sequence,
    /// `kv_size = N / n_seq_max`.
    pub kv_size: u32,
    /// Sequence ids are `0..n_seq_max` (at most [`MAX_SEQ`]).
    pub n_seq_max: u32,
    /// Unified or one stream per sequence.
    pub layout: StreamLayout,
    /// [`KvCells::n_kv`] is rounded up to a multiple of this (and is at least
    /// this), so the attention graph keeps its shape across batches (as
    /// llama.cpp's `max(n_pad, 256)`). 1 = no padding.
    pub n_pad: u32,
}

impl KvParams {
    /// A unified cache with llama.cpp's n_kv padding of 256.
    pub fn unified(kv_size: u32, n_seq_max: u32) -> Self {
        KvParams {
            kv_size,
            n_seq_max,
            layout: StreamLayout::Unified,
            n_pad: 256,
        }
    }

    /// One stream per sequence, n_kv padding 256.
    pub fn per_seq(kv_size: u32, n_seq_max: u32) -> Self {
        KvParams {
            kv_size,
            n_seq_max,
            layout: StreamLayout::PerSeq,
            n_pad: 256,
        }
    }
}

/// One cell as seen from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// Position the cell's K is meant to be at; `-1` = empty.
    pub pos: Pos,
    /// `pos` minus the position its K is currently rotated for (the K-shift
    /// still to apply). 0 for empty cells.
    pub shift: Pos,
    /// Sequences using the cell (empty iff `pos == -1`).
    pub seqs: SeqSet,
}

/// One token of a batch, as far as the cache cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMeta {
    /// Its position (`>= 0`).
    pub pos: Pos,
    /// The sequences it belongs to (at least one; one stream).
    pub seq_ids: Vec<SeqId>,
}

impl TokenMeta {
    /// A token of one sequence.
    pub fn new(pos: Pos, seq_id: SeqId) -> Self {
        TokenMeta {
            pos,
            seq_ids: vec![seq_id],
        }
    }
}

/// Where one token of a batch goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedCell {
    /// Stream of the token's sequences.
    pub stream: u32,
    /// Cell inside the stream.
    pub cell: u32,
    /// The token's position.
    pub pos: Pos,
    /// The token's sequences.
    pub seqs: SeqSet,
}

/// The cells found for a batch by [`KvCells::find_cells`]; nothing is
/// changed until [`KvCells::apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellPlan {
    kv_size: u32,
    n_stream: u32,
    cells: Vec<PlannedCell>,
}

impl CellPlan {
    /// One entry per batch token, in batch order.
    pub fn cells(&self) -> &[PlannedCell] {
        &self.cells
    }

    /// Buffer rows to write each token's K/V to (`stream * kv_size + cell`,
    /// llama.cpp's `k_idxs`), in batch order.
    pub fn rows(&self) -> Vec<u64> {
        self.cells
            .iter()
            .map(|p| p.stream as u64 * self.kv_size as u64 + p.cell as u64)
            .collect()
    }
}

/// What [`KvCells::apply`] changed, so that [`KvCells::rollback`] can undo
/// one batch without a copy of the whole cache (a decode that fails after
/// `apply` must leave the cells as they were).
///
/// It holds the batch's cells, with what `apply` wrote there, and each
/// touched stream's head before the batch: one entry per token plus one per
/// stream. The cells held nothing before (`apply` only fills empty cells),
/// and the per-stream and per-sequence counts (`used`, the position
/// multisets behind `seq_pos_min/max`, `n_kv`) follow from the cells, so
/// that is all an undo needs.
///
/// Keep the batch by dropping the log or calling [`CellLog::commit`].
#[must_use = "keep the batch with `.commit()`, or undo it with `KvCells::rollback`"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellLog {
    kv_size: u32,
    n_stream: u32,
    // [n_tokens], batch order: the cells apply filled, with what it wrote
    cells: Vec<PlannedCell>,
    // (stream, head before apply), each touched stream once
    heads: Vec<(u32, u32)>,
}

impl CellLog {
    /// Cells the batch took (one per token).
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// The batch was empty.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// Keeps the batch: the log is no longer needed. (The same as dropping
    /// it; spelled out where a decode succeeded.)
    pub fn commit(self) {}
}

/// One K/V row the storage must copy (all layers, K and V) after a
/// cross-stream [`KvCells::seq_cp`] or a [`KvCells::seq_unshare`], before
/// the next K-shift or decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowCopy {
    /// Buffer row to read.
    pub src_row: u64,
    /// Buffer row to write.
    pub dst_row: u64,
}

/// The K-shift to perform, from [`KvCells::take_shifts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShiftPlan {
    /// Cells per stream.
    pub kv_size: u32,
    // shifts: [n_stream * kv_size] i32, indexed by buffer row
    /// Per buffer row (`stream * kv_size + cell`): rotate that row's K by
    /// this many positions (`new - old`); 0 for empty cells.
    pub shifts: Vec<Pos>,
}

/// Sliding-window attention kinds (llama.cpp's `llama_swa_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwaType {
    /// No window.
    None,
    /// Masked when `p1 - p0 >= n_swa` (query `p1`, key `p0`).
    Standard,
    /// Masked when the key is before the query's chunk: `p0 < (p1 / n_swa) * n_swa`.
    Chunked,
    /// Masked when `|p1 - p0| > n_swa / 2`.
    Symmetric,
}

/// How to build an attention mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskParams {
    /// Mask keys at positions after the query.
    pub causal: bool,
    /// Sliding window kind.
    pub swa_type: SwaType,
    /// Window size (> 0 unless `swa_type` is `None`).
    pub n_swa: u32,
    /// ALiBi: visible keys get `-|p0 - p1|` instead of 0.
    pub alibi: bool,
}

impl MaskParams {
    /// Causal, no window, no ALiBi.
    pub fn causal() -> Self {
        MaskParams {
            causal: true,
            swa_type: SwaType::None,
            n_swa: 0,
            alibi: false,
        }
    }

    /// Whether a key at `p0` is outside the window of a query at `p1`
    /// (llama.cpp's `is_masked_swa`).
    pub fn is_masked_swa(&self, p0: Pos, p1: Pos) -> bool {
        let (p0, p1, n) = (p0 as i64, p1 as i64, self.n_swa as i64);
        match self.swa_type {
            SwaType::None => false,
            SwaType::Standard => p1 - p0 >= n,
            SwaType::Chunked => p0 < (p1 / n) * n,
            SwaType::Symmetric => {
                let d = p1 - p0;
                d < -(n / 2) || d > n / 2
            }
        }
    }
}

/// A query token of a mask: its sequence and position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// Sequence of the query token.
    pub seq_id: SeqId,
    /// Position of the query token.
    pub pos: Pos,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Stream {
    // all three: [kv_size]
    pos: Vec<Pos>,
    shift: Vec<Pos>,
    seqs: Vec<SeqSet>,
    /// Non-empty cells.
    used: u32,
    /// Cells with a non-zero shift.
    n_shifted: u32,
    /// Where the next cell search starts.
    head: u32,
    /// Cells whose position or sequence set changed since the last
    /// [`KvCells::take_changed`].
    changed: Changed,
}

/// The cells of a stream changed since a copy of them was last brought up
/// to date ([`KvCells::take_changed`]): one range from the lowest to the
/// highest. Not part of the cells' value: any two compare equal, and a
/// clone (a snapshot, restored later in place of the cells a copy
/// followed) has every cell changed.
#[derive(Debug)]
struct Changed(std::ops::Range<u32>);

impl Changed {
    const ALL: Changed = Changed(0..u32::MAX);

    fn add(&mut self, i: usize) {
        let i = i as u32;
        if self.0.is_empty() {
            self.0 = i..i + 1;
        } else {
            self.0 = self.0.start.min(i)..self.0.end.max(i + 1);
        }
    }
}

impl Clone for Changed {
    fn clone(&self) -> Self {
        Changed::ALL
    }
}

impl PartialEq for Changed {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Changed {}

impl Stream {
    fn new(kv_size: u32) -> Self {
        let n = kv_size as usize;
        Stream {
            pos: vec![-1; n],
            shift: vec![0; n],
            seqs: vec![SeqSet::new(); n],
            used: 0,
            n_shifted: 0,
            head: 0,
            changed: Changed::ALL,
        }
    }

    fn set_shift(&mut self, i: usize, v: Pos) {
        match (self.shift[i] != 0, v != 0) {
            (false, true) => self.n_shifted += 1,
            (true, false) => self.n_shifted -= 1,
            _ => {}
        }
        self.shift[i] = v;
    }
}

/// Position multiset of one sequence: position -> number of its cells there.
type PosCounts = BTreeMap<Pos, u32>;

fn ms_inc(m: &mut PosCounts, p: Pos) {
    *m.entry(p).or_insert(0) += 1;
}

fn ms_dec(m: &mut PosCounts, p: Pos) {
    match m.get_mut(&p) {
        Some(c) if *c > 1 => *c -= 1,
        Some(_) => {
            m.remove(&p);
        }
        None => debug_assert!(false, "position {p} missing from a sequence's multiset"),
    }
}

/// `[p0, p1)` with `p0 < 0` → 0 and `p1 < 0` → past every position.
fn norm_range(p0: Pos, p1: Pos) -> (i64, i64) {
    let p0 = if p0 < 0 { 0 } else { p0 as i64 };
    let p1 = if p1 < 0 { i64::MAX } else { p1 as i64 };
    (p0, p1)
}

fn in_range(pos: Pos, r: (i64, i64)) -> bool {
    pos >= 0 && (pos as i64) >= r.0 && (pos as i64) < r.1
}

/// The cell metadata of a KV cache: positions, pending shifts and sequence
/// sets per cell, per-sequence position multisets. Knows nothing of buffers;
/// every operation that needs the storage to act returns what to do.
///
/// Invariants (checked by `debug_check` in tests):
/// - a cell is empty (`pos == -1`, no sequence, shift 0) or holds `pos >= 0`
///   and at least one sequence of its stream;
/// - each sequence's multiset counts exactly its cells per position;
/// - `used`, `n_shifted` count what they say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCells {
    params: KvParams,
    streams: Vec<Stream>,
    // [n_seq_max]
    seq_pos: Vec<PosCounts>,
}

impl KvCells {
    /// An empty cache. Errors: `kv_size == 0`, `n_seq_max` not in
    /// `1..=MAX_SEQ`, `n_pad == 0`, or more rows than `u32` cells can name.
    pub fn new(params: KvParams) -> Result<Self> {
        if params.kv_size == 0 {
            return Err(KvError::Params("kv_size must be > 0".into()));
        }
        if params.n_seq_max == 0 || params.n_seq_max > MAX_SEQ {
            return Err(KvError::Params(format!(
                "n_seq_max must be in 1..={MAX_SEQ}, got {}",
                params.n_seq_max
            )));
        }
        if params.n_pad == 0 {
            return Err(KvError::Params("n_pad must be >= 1".into()));
        }
        let n_stream = match params.layout {
            StreamLayout::Unified => 1,
            StreamLayout::PerSeq => params.n_seq_max,
        };
        let streams = (0..n_stream).map(|_| Stream::new(params.kv_size)).collect();
        let seq_pos = vec![PosCounts::new(); params.n_seq_max as usize];
        Ok(KvCells {
            params,
            streams,
            seq_pos,
        })
    }

    /// The parameters the cache was made with.
    pub fn params(&self) -> &KvParams {
        &self.params
    }

    /// Number of streams (1 unified, `n_seq_max` per-sequence).
    pub fn n_stream(&self) -> u32 {
        self.streams.len() as u32
    }

    /// The stream that holds `seq_id`.
    pub fn stream_of(&self, seq_id: SeqId) -> Result<u32> {
        let s = self.check_seq("stream_of", seq_id)?;
        Ok(self.stream_idx(s) as u32)
    }

    /// Cell `cell` of `stream`, or `None` outside the cache.
    pub fn cell(&self, stream: u32, cell: u32) -> Option<Cell> {
        let st = self.streams.get(stream as usize)?;
        let i = cell as usize;
        Some(Cell {
            pos: *st.pos.get(i)?,
            shift: st.shift[i],
            seqs: st.seqs[i],
        })
    }

    /// Non-empty cells of a stream (0 for a stream that does not exist).
    pub fn used(&self, stream: u32) -> u32 {
        self.streams.get(stream as usize).map_or(0, |s| s.used)
    }

    /// Empty cells of a stream (0 for a stream that does not exist).
    pub fn free(&self, stream: u32) -> u32 {
        self.streams
            .get(stream as usize)
            .map_or(0, |s| self.params.kv_size - s.used)
    }

    /// Some cell has a non-zero pending shift: a K-shift is due.
    pub fn has_shift(&self) -> bool {
        self.streams.iter().any(|s| s.n_shifted > 0)
    }

    /// One past the highest non-empty cell of a stream (0 if empty).
    pub fn used_max_p1(&self, stream: u32) -> u32 {
        let Some(st) = self.streams.get(stream as usize) else {
            return 0;
        };
        st.pos
            .iter()
            .rposition(|&p| p >= 0)
            .map_or(0, |i| i as u32 + 1)
    }

    /// How many cells of `stream` attention must look at: `used_max_p1`
    /// rounded up to a multiple of `n_pad`, at least `n_pad`, at most
    /// `kv_size` (llama.cpp's `get_n_kv`). Cells past the used ones are
    /// empty and masked, so padding changes no result.
    pub fn n_kv(&self, stream: u32) -> u32 {
        let n_pad = self.params.n_pad as u64;
        let used = self.used_max_p1(stream) as u64;
        let padded = used.div_ceil(n_pad) * n_pad;
        padded.max(n_pad).min(self.params.kv_size as u64) as u32
    }

    /// Smallest position of `seq_id`, or -1 if it has none.
    ///
    /// Precondition: `0 <= seq_id < n_seq_max` (else error).
    pub fn seq_pos_min(&self, seq_id: SeqId) -> Result<Pos> {
        let s = self.check_seq("seq_pos_min", seq_id)?;
        Ok(self.seq_pos[s].keys().next().copied().unwrap_or(-1))
    }

    /// Largest position of `seq_id`, or -1 if it has none.
    ///
    /// Precondition: `0 <= seq_id < n_seq_max` (else error).
    pub fn seq_pos_max(&self, seq_id: SeqId) -> Result<Pos> {
        let s = self.check_seq("seq_pos_max", seq_id)?;
        Ok(self.seq_pos[s].keys().next_back().copied().unwrap_or(-1))
    }

    /// Number of cells holding `seq_id`.
    ///
    /// Precondition: `0 <= seq_id < n_seq_max` (else error).
    pub fn seq_n_cells(&self, seq_id: SeqId) -> Result<u32> {
        let s = self.check_seq("seq_n_cells", seq_id)?;
        Ok(self.seq_pos[s].values().sum())
    }

    // ---- sequence operations -------------------------------------------------
    //
    // Each operation states its preconditions next to it (as llama.cpp's
    // llama-kv-cells.h): a broken one is an error and nothing changes, so a
    // caller driving several memories (these cells and, later, a
    // per-sequence recurrent state) can check every memory before changing
    // any. What the storage must do afterwards is said too: `RowCopy`s after
    // `seq_cp` and `seq_unshare`, a K-shift (`take_shifts`) after `seq_add`/`seq_div`.

    /// Everything empty; heads back to cell 0; no shift pending.
    ///
    /// Precondition: none.
    pub fn clear(&mut self) {
        for st in &mut self.streams {
            *st = Stream::new(self.params.kv_size);
        }
        for m in &mut self.seq_pos {
            m.clear();
        }
    }

    /// Drops `seq_id` (`< 0`: every sequence) from every cell with a position
    /// in `[p0, p1)`; a cell left with no sequence becomes empty.
    ///
    /// Preconditions: `seq_id < n_seq_max` (negative: every sequence); any
    /// `p0`, `p1` (else error, nothing changed). The storage has nothing to do.
    pub fn seq_rm(&mut self, seq_id: SeqId, p0: Pos, p1: Pos) -> Result<()> {
        let seq = self.check_seq_or_all("seq_rm", seq_id)?;
        let r = norm_range(p0, p1);
        for st in self.streams_for(seq) {
            for i in 0..self.params.kv_size as usize {
                let pos = self.streams[st].pos[i];
                if !in_range(pos, r) {
                    continue;
                }
                match seq {
                    None => self.empty_cell(st, i),
                    Some(s) if self.streams[st].seqs[i].contains(s as SeqId) => {
                        self.cell_rm_seq(st, i, s)
                    }
                    Some(_) => {}
                }
            }
        }
        self.debug_check();
        Ok(())
    }

    /// Adds `dst` to every cell of `src` with a position in `[p0, p1)`.
    ///
    /// Same stream: metadata only, returns no copies. Different streams
    /// (per-sequence layout): the range must cover all of `src` (a partial
    /// range is an error); `src`'s cells are placed in `dst`'s stream (same
    /// cell index when free, else the lowest free cells) with the same
    /// position and pending shift, and the returned row copies tell the
    /// storage which K/V rows to copy. Not enough free cells in `dst`'s
    /// stream: error, nothing changed. `dst`'s own cells stay, as in the
    /// unified layout, so both layouts give `dst` the same positions.
    ///
    /// Preconditions: `0 <= src, dst < n_seq_max`; across streams, `[p0, p1)`
    /// covers every position of `src` and `dst`'s stream has a free cell per
    /// cell of `src` (else error, nothing changed). The storage must copy the
    /// returned rows before the next K-shift or decode.
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) -> Result<Vec<RowCopy>> {
        let s = self.check_seq("seq_cp", src)?;
        let d = self.check_seq("seq_cp", dst)?;
        if s == d {
            return Ok(Vec::new());
        }
        let r = norm_range(p0, p1);
        let (ss, ds) = (self.stream_idx(s), self.stream_idx(d));
        let kv_size = self.params.kv_size as usize;
        if ss == ds {
            for i in 0..kv_size {
                let (pos, seqs) = (self.streams[ss].pos[i], self.streams[ss].seqs[i]);
                if in_range(pos, r) && seqs.contains(src) && !seqs.contains(dst) {
                    self.streams[ss].seqs[i].insert(dst);
                    self.streams[ss].changed.add(i);
                    ms_inc(&mut self.seq_pos[d], pos);
                }
            }
            self.debug_check();
            return Ok(Vec::new());
        }
        let (Some(&pos_min), Some(&pos_max)) = (
            self.seq_pos[s].keys().next(),
            self.seq_pos[s].keys().next_back(),
        ) else {
            return Ok(Vec::new()); // nothing to copy
        };
        if !(r.0 <= pos_min as i64 && r.1 > pos_max as i64) {
            return Err(KvError::PartialCrossStreamCopy {
                src,
                dst,
                src_stream: ss as u32,
                dst_stream: ds as u32,
                p0: r.0 as Pos,
                p1: r.1.min(i32::MAX as i64) as Pos,
                pos_min,
                pos_max,
            });
        }
        let src_cells: Vec<usize> = (0..kv_size)
            .filter(|&i| self.streams[ss].seqs[i].contains(src))
            .collect();
        let free = (kv_size as u32 - self.streams[ds].used) as usize;
        if src_cells.len() > free {
            return Err(KvError::NoRoom {
                op: "seq_cp",
                stream: ds as u32,
                needed: src_cells.len(),
                free,
                kv_size: self.params.kv_size,
            });
        }
        // same index where free; the rest into the lowest free cells left
        let mut taken = vec![false; kv_size];
        let mut dst_cell = vec![usize::MAX; src_cells.len()];
        for (k, &i) in src_cells.iter().enumerate() {
            if self.streams[ds].pos[i] < 0 {
                dst_cell[k] = i;
                taken[i] = true;
            }
        }
        let mut free_iter = (0..kv_size).filter(|&j| self.streams[ds].pos[j] < 0);
        for d in dst_cell.iter_mut().filter(|d| **d == usize::MAX) {
            // the count check above guarantees enough free cells
            let j = free_iter
                .by_ref()
                .find(|&j| !taken[j])
                .unwrap_or(usize::MAX);
            debug_assert!(j != usize::MAX);
            *d = j;
            if let Some(t) = taken.get_mut(j) {
                *t = true;
            }
        }
        let mut copies = Vec::with_capacity(src_cells.len());
        for (k, &i) in src_cells.iter().enumerate() {
            let j = dst_cell[k];
            let (pos, shift) = (self.streams[ss].pos[i], self.streams[ss].shift[i]);
            self.fill_cell(ds, j, pos, SeqSet::single(dst), shift);
            copies.push(RowCopy {
                src_row: (ss * kv_size + i) as u64,
                dst_row: (ds * kv_size + j) as u64,
            });
        }
        self.debug_check();
        Ok(copies)
    }

    /// Copy-on-write: gives `seq_id` a cell of its own for every cell of its
    /// stream with a position in `[p0, p1)` that it shares with another
    /// sequence. The new cell (the lowest empty cells of the stream, in cell
    /// order) gets the old one's position and pending shift (its K row is
    /// copied as it is, still rotated for `pos - shift`) and holds only
    /// `seq_id`; the old cell keeps the other sequences. Cells `seq_id` holds
    /// alone, and every position outside the range, are left as they are.
    ///
    /// Why: one cell has one position, so [`KvCells::seq_add`] and
    /// [`KvCells::seq_div`] on a shared cell move it for every sequence in
    /// it (a context shift of one sequence would shift a prompt prefix
    /// another sequence reuses). Unshare the range that is about to move
    /// first; positions that only get removed (`seq_rm`) need no copy.
    ///
    /// Every sequence keeps its positions (`seq_pos_min/max`,
    /// `seq_n_cells`); `used` grows by the number of copies; stream heads
    /// stay where they are ([`KvCells::find_cells`] skips used cells). Batch logs
    /// ([`CellLog`]) are not affected: only empty cells are taken.
    ///
    /// Preconditions: `0 <= seq_id < n_seq_max`; the stream has an empty
    /// cell per shared cell in range (else error naming both counts,
    /// nothing changed). The storage must copy the returned rows (every
    /// layer, K and V) before the next K-shift or decode.
    pub fn seq_unshare(&mut self, seq_id: SeqId, p0: Pos, p1: Pos) -> Result<Vec<RowCopy>> {
        let s = self.check_seq("seq_unshare", seq_id)?;
        let r = norm_range(p0, p1);
        let st = self.stream_idx(s);
        let kv_size = self.params.kv_size as usize;
        let stream = &self.streams[st];
        let shared: Vec<usize> = (0..kv_size)
            .filter(|&i| {
                let seqs = stream.seqs[i];
                in_range(stream.pos[i], r) && seqs.contains(seq_id) && seqs.len() > 1
            })
            .collect();
        if shared.is_empty() {
            return Ok(Vec::new());
        }
        let free = kv_size - stream.used as usize;
        if shared.len() > free {
            return Err(KvError::NoRoom {
                op: "seq_unshare",
                stream: st as u32,
                needed: shared.len(),
                free,
                kv_size: self.params.kv_size,
            });
        }
        let empty: Vec<usize> = (0..kv_size)
            .filter(|&j| stream.pos[j] < 0)
            .take(shared.len())
            .collect();
        let mut copies = Vec::with_capacity(shared.len());
        for (&i, &j) in shared.iter().zip(&empty) {
            let (pos, shift) = (self.streams[st].pos[i], self.streams[st].shift[i]);
            // the old cell keeps its other sequences, so it stays non-empty
            self.cell_rm_seq(st, i, s);
            self.fill_cell(st, j, pos, SeqSet::single(seq_id), shift);
            copies.push(RowCopy {
                src_row: (st * kv_size + i) as u64,
                dst_row: (st * kv_size + j) as u64,
            });
        }
        self.debug_check();
        Ok(copies)
    }

    /// Every cell not holding `seq_id` becomes empty; cells holding it hold
    /// only it.
    ///
    /// Precondition: `0 <= seq_id < n_seq_max` (else error, nothing changed).
    /// The storage has nothing to do.
    pub fn seq_keep(&mut self, seq_id: SeqId) -> Result<()> {
        let s = self.check_seq("seq_keep", seq_id)?;
        for st in 0..self.streams.len() {
            for i in 0..self.params.kv_size as usize {
                let seqs = self.streams[st].seqs[i];
                if seqs.is_empty() {
                    continue;
                }
                if !seqs.contains(seq_id) {
                    self.empty_cell(st, i);
                    continue;
                }
                let pos = self.streams[st].pos[i];
                for q in seqs.iter().filter(|&q| q != seq_id) {
                    ms_dec(&mut self.seq_pos[q as usize], pos);
                }
                self.streams[st].seqs[i] = SeqSet::single(seq_id);
                self.streams[st].changed.add(i);
                debug_assert!(self.seq_pos[s].contains_key(&pos));
            }
        }
        self.debug_check();
        Ok(())
    }

    /// `pos += d` (and `shift += d`) for every cell of `seq_id` (`< 0`: every
    /// non-empty cell) with a position in `[p0, p1)`; a cell whose position
    /// drops below 0 becomes empty. `d == 0` is a no-op. A shared cell moves
    /// for all its sequences (one cell, one position).
    ///
    /// Preconditions: `seq_id < n_seq_max` (negative: every sequence); no
    /// position goes past `i32::MAX` (else error, nothing changed). The
    /// storage must apply the K-shift ([`KvCells::take_shifts`]) before the
    /// next decode.
    pub fn seq_add(&mut self, seq_id: SeqId, p0: Pos, p1: Pos, d: Pos) -> Result<()> {
        let seq = self.check_seq_or_all("seq_add", seq_id)?;
        if d == 0 {
            return Ok(());
        }
        let r = norm_range(p0, p1);
        let hits = self.cells_in(seq, r);
        for &(st, i) in &hits {
            let pos = self.streams[st].pos[i];
            if pos as i64 + d as i64 > i32::MAX as i64 {
                return Err(KvError::PosOverflow {
                    op: "seq_add",
                    pos,
                    detail: format!("+ {d}"),
                });
            }
        }
        for (st, i) in hits {
            let new = self.streams[st].pos[i] as i64 + d as i64;
            self.move_cell(st, i, new);
        }
        self.debug_check();
        Ok(())
    }

    /// `pos = pos / n` (floor; positions are `>= 0`) for every cell of
    /// `seq_id` (`< 0`: every non-empty cell) with a position in `[p0, p1)`;
    /// `shift += new - old`. `n == 1` is a no-op, `n <= 0` an error.
    ///
    /// Preconditions: `seq_id < n_seq_max` (negative: every sequence),
    /// `n >= 1` (else error, nothing changed). The storage must apply the
    /// K-shift ([`KvCells::take_shifts`]) before the next decode.
    pub fn seq_div(&mut self, seq_id: SeqId, p0: Pos, p1: Pos, n: i32) -> Result<()> {
        let seq = self.check_seq_or_all("seq_div", seq_id)?;
        if n <= 0 {
            return Err(KvError::BadDivisor(n));
        }
        if n == 1 {
            return Ok(());
        }
        let r = norm_range(p0, p1);
        for (st, i) in self.cells_in(seq, r) {
            let pos = self.streams[st].pos[i];
            debug_assert!(pos >= 0);
            self.move_cell(st, i, (pos / n) as i64);
        }
        self.debug_check();
        Ok(())
    }

    /// The pending K-shift, or `None` if there is none; resets every shift
    /// to 0. Call it when the storage rotates K (before the next forward
    /// pass), after applying any [`RowCopy`]s.
    ///
    /// Precondition: none; but the storage must then rotate K as the plan
    /// says, since the cells now take it as done (a [`KvCells::rollback`]
    /// does not give the shifts back).
    pub fn take_shifts(&mut self) -> Option<ShiftPlan> {
        if !self.has_shift() {
            return None;
        }
        let mut shifts = Vec::with_capacity(self.streams.len() * self.params.kv_size as usize);
        for st in &mut self.streams {
            shifts.extend_from_slice(&st.shift);
            st.shift.iter_mut().for_each(|s| *s = 0);
            st.n_shifted = 0;
        }
        Some(ShiftPlan {
            kv_size: self.params.kv_size,
            shifts,
        })
    }

    // ---- batches ---------------------------------------------------------------

    /// Finds one empty cell per token, in its sequences' stream; changes
    /// nothing. Per stream: a contiguous run of empty cells, searched from the
    /// stream's head (which restarts at 0 when there are more than
    /// `2 * n_tokens` unused cells before it, as llama.cpp does) and wrapping
    /// around; without such a run, the first empty cells from the head on.
    ///
    /// Errors (nothing changed): a token with no sequence, an unknown
    /// sequence, a negative position, sequences of different streams in one
    /// token, or more tokens than empty cells in a stream (the error says
    /// how many were needed and free).
    ///
    /// Positions are not required to continue `seq_pos_max + 1` (llama.cpp's
    /// batch rule): the cells stay right for any positions (multiset, mask by
    /// position). [`KvCells::check_continues`] enforces the rule for callers
    /// that want it.
    pub fn find_cells(&self, batch: &[TokenMeta]) -> Result<CellPlan> {
        let kv_size = self.params.kv_size as usize;
        let mut per_stream: Vec<Vec<usize>> = vec![Vec::new(); self.streams.len()];
        let mut metas = Vec::with_capacity(batch.len());
        for (index, t) in batch.iter().enumerate() {
            let (stream, seqs) = self.check_token(index, t)?;
            per_stream[stream].push(index);
            metas.push((stream, seqs));
        }
        let mut cells = vec![None; batch.len()];
        for (st, tokens) in per_stream.iter().enumerate() {
            let n = tokens.len();
            if n == 0 {
                continue;
            }
            let stream = &self.streams[st];
            let free = kv_size - stream.used as usize;
            if n > free {
                return Err(KvError::NoRoom {
                    op: "find_cells",
                    stream: st as u32,
                    needed: n,
                    free,
                    kv_size: self.params.kv_size,
                });
            }
            let mut head = stream.head as usize;
            if head > stream.used as usize + 2 * n {
                head = 0;
            }
            let order = (head..kv_size).chain(0..head.min(kv_size));
            let run = first_run(&stream.pos, head..kv_size, n)
                .or_else(|| first_run(&stream.pos, 0..head.min(kv_size), n));
            let chosen: Vec<usize> = match run {
                Some(start) => (start..start + n).collect(),
                None => order.filter(|&i| stream.pos[i] < 0).take(n).collect(),
            };
            debug_assert_eq!(chosen.len(), n);
            for (&tok, &cell) in tokens.iter().zip(&chosen) {
                cells[tok] = Some(cell);
            }
        }
        let cells = batch
            .iter()
            .zip(metas)
            .zip(cells)
            .map(|((t, (stream, seqs)), cell)| PlannedCell {
                stream: stream as u32,
                cell: cell.unwrap_or(0) as u32,
                pos: t.pos,
                seqs,
            })
            .collect();
        Ok(CellPlan {
            kv_size: self.params.kv_size,
            n_stream: self.n_stream(),
            cells,
        })
    }

    /// Commits a plan from [`KvCells::find_cells`]: the cells get their
    /// positions and sequences (shift 0: K is computed at that position), and
    /// each stream's head moves past its last new cell. Returns the log that
    /// [`KvCells::rollback`] takes to undo the batch.
    ///
    /// Precondition: the planned cells are still empty and distinct, in this
    /// cache's shape (else error, nothing changed). The storage must write
    /// the batch's K/V rows at [`CellPlan::rows`].
    pub fn apply(&mut self, plan: &CellPlan) -> Result<CellLog> {
        if let Some(e) = self.other_shape("plan", plan.kv_size, plan.n_stream) {
            return Err(KvError::StalePlan(e));
        }
        let mut seen = std::collections::HashSet::new();
        for (k, p) in plan.cells.iter().enumerate() {
            let bad = |what: String| Err(KvError::StalePlan(format!("token {k}: {what}")));
            if p.pos < 0 || p.seqs.is_empty() {
                return bad(format!("position {} / sequences {:?}", p.pos, p.seqs));
            }
            for q in p.seqs.iter() {
                if q as u32 >= self.params.n_seq_max
                    || self.stream_idx(q as usize) != p.stream as usize
                {
                    return bad(format!("sequence {q} not in stream {}", p.stream));
                }
            }
            if self.cell(p.stream, p.cell).map(|c| c.pos) != Some(-1) {
                return bad(format!(
                    "cell {} of stream {} is not empty",
                    p.cell, p.stream
                ));
            }
            if !seen.insert((p.stream, p.cell)) {
                return bad(format!(
                    "cell {} of stream {} planned twice",
                    p.cell, p.stream
                ));
            }
        }
        let mut log = CellLog {
            kv_size: plan.kv_size,
            n_stream: plan.n_stream,
            cells: plan.cells.clone(),
            heads: Vec::new(),
        };
        for p in &plan.cells {
            let st = p.stream as usize;
            if !log.heads.iter().any(|&(s, _)| s == p.stream) {
                log.heads.push((p.stream, self.streams[st].head));
            }
            self.fill_cell(st, p.cell as usize, p.pos, p.seqs, 0);
            self.streams[st].head = p.cell + 1;
        }
        self.debug_check();
        Ok(log)
    }

    /// Undoes the batch that `log` records (from [`KvCells::apply`] on this
    /// cache): its cells are emptied and its streams' heads move back, so
    /// every cell, `used`, `free`, `n_kv`, `seq_pos_min/max`, `seq_n_cells`
    /// and `has_shift` are as before `apply`.
    ///
    /// Pending K-shifts taken by [`KvCells::take_shifts`] since `apply` are
    /// *not* given back: once the storage has run the K-shift, restoring
    /// them would rotate K twice. (So a decode may take the shifts, apply
    /// its batch, fail, and roll back: the cells then say "no shift
    /// pending", as the rotated K rows do.)
    ///
    /// Precondition: every cell of the log still holds what `apply` wrote
    /// (position, sequences, no pending shift), that is no sequence
    /// operation has touched the batch's cells since; a log of a cache of
    /// another shape is refused too (else error, nothing changed). Sequence
    /// operations since `apply` on other cells stay.
    pub fn rollback(&mut self, log: CellLog) -> Result<()> {
        self.undo(log, false)
    }

    /// [`KvCells::rollback`] for a cache whose cells the batch's own decode
    /// may have trimmed since `apply`: a sliding-window ring drops the
    /// cells a sequence has moved past before each micro-batch, which can
    /// be cells an earlier micro-batch of the same decode wrote. A cell of
    /// the log that has since lost sequences to `seq_rm` (the same
    /// position, no pending shift, its sequences a subset of those written,
    /// maybe none) is accepted and emptied. Roll logs back newest first:
    /// a trimmed cell a later micro-batch took again is then empty when the
    /// earlier log comes to it. Any other change is refused as by
    /// `rollback` (error, nothing changed).
    pub fn rollback_trimmed(&mut self, log: CellLog) -> Result<()> {
        self.undo(log, true)
    }

    fn undo(&mut self, log: CellLog, trimmed: bool) -> Result<()> {
        if let Some(e) = self.other_shape("log", log.kv_size, log.n_stream) {
            return Err(KvError::StaleLog(e));
        }
        for (k, p) in log.cells.iter().enumerate() {
            let wrote = Cell {
                pos: p.pos,
                shift: 0,
                seqs: p.seqs,
            };
            let now = self.cell(p.stream, p.cell);
            let ok = match now {
                Some(c) if c == wrote => true,
                // Emptied since (an empty cell is `pos -1`).
                Some(c) if trimmed && c.pos == -1 => true,
                Some(c) if trimmed => {
                    c.pos == p.pos && c.shift == 0 && c.seqs.iter().all(|q| p.seqs.contains(q))
                }
                _ => false,
            };
            if !ok {
                return Err(KvError::StaleLog(format!(
                    "token {k}: cell {} of stream {} holds {now:?}, the batch wrote {wrote:?}",
                    p.cell, p.stream
                )));
            }
        }
        for p in &log.cells {
            self.empty_cell(p.stream as usize, p.cell as usize);
        }
        for &(st, head) in &log.heads {
            self.streams[st as usize].head = head;
        }
        self.debug_check();
        Ok(())
    }

    /// llama.cpp's batch rule, for callers that want it: for each sequence
    /// with cells, the batch's positions of it must start at
    /// `seq_pos_max + 1` and have no gaps. Not enforced by
    /// [`KvCells::find_cells`].
    ///
    /// Preconditions: every token valid as for [`KvCells::find_cells`]
    /// (else error). Changes nothing.
    pub fn check_continues(&self, batch: &[TokenMeta]) -> Result<()> {
        let mut by_seq: BTreeMap<SeqId, (Pos, Pos, usize, usize)> = BTreeMap::new();
        for (index, t) in batch.iter().enumerate() {
            self.check_token(index, t)?;
            for &q in &t.seq_ids {
                let e = by_seq.entry(q).or_insert((t.pos, t.pos, 0, index));
                e.0 = e.0.min(t.pos);
                e.1 = e.1.max(t.pos);
                e.2 += 1;
            }
        }
        for (q, (lo, hi, n, index)) in by_seq {
            let last = self.seq_pos_max(q)?;
            if last >= 0 && lo as i64 != last as i64 + 1 {
                return Err(KvError::BadBatch {
                    index,
                    detail: format!("sequence {q} ends at {last}, batch starts at {lo}"),
                });
            }
            if (hi as i64 - lo as i64 + 1) > n as i64 {
                return Err(KvError::BadBatch {
                    index,
                    detail: format!("sequence {q}: positions {lo}..={hi} have gaps ({n} tokens)"),
                });
            }
        }
        Ok(())
    }

    // ---- masks -----------------------------------------------------------------

    /// The attention mask for `queries` over cells `0..n_kv` of their stream:
    /// `mask[t * n_kv + j]` (ggml `[n_kv, n_tokens]`, n_kv contiguous) is
    /// `-inf` when cell `j` is empty, does not hold the query's sequence,
    /// holds a later position (causal), or is outside the sliding window;
    /// else 0 (ALiBi: `-|pos - p1|`).
    ///
    /// Preconditions: all queries' sequences in one stream, positions >= 0,
    /// `n_kv <= kv_size`, `n_swa > 0` with a window.
    pub fn mask(&self, queries: &[Query], n_kv: u32, params: &MaskParams) -> Result<Vec<f32>> {
        let stream = self.mask_stream(queries, n_kv, params)?;
        let n_kv = n_kv as usize;
        let mut out = vec![f32::NEG_INFINITY; queries.len() * n_kv];
        let Some(st) = stream else { return Ok(out) };
        let stream = &self.streams[st];
        for (t, q) in queries.iter().enumerate() {
            let row = &mut out[t * n_kv..(t + 1) * n_kv];
            for (j, m) in row.iter_mut().enumerate() {
                let p0 = stream.pos[j];
                if p0 < 0 || !stream.seqs[j].contains(q.seq_id) {
                    continue;
                }
                if params.causal && p0 > q.pos {
                    continue;
                }
                if params.is_masked_swa(p0, q.pos) {
                    continue;
                }
                *m = if params.alibi {
                    -((p0 as i64 - q.pos as i64).abs() as f32)
                } else {
                    0.0
                };
            }
        }
        Ok(out)
    }

    /// The stream of a mask's queries (`None` for no query) after the
    /// checks [`KvCells::mask`] documents: `n_kv` within `kv_size`, a
    /// window of size > 0, every query's sequence known and in one
    /// stream, positions >= 0.
    fn mask_stream(
        &self,
        queries: &[Query],
        n_kv: u32,
        params: &MaskParams,
    ) -> Result<Option<usize>> {
        if n_kv > self.params.kv_size {
            return Err(KvError::BadQuery {
                index: 0,
                detail: format!("n_kv {n_kv} > kv_size {}", self.params.kv_size),
            });
        }
        if params.swa_type != SwaType::None && params.n_swa == 0 {
            return Err(KvError::BadQuery {
                index: 0,
                detail: "sliding window of size 0".into(),
            });
        }
        let mut stream = None;
        for (index, q) in queries.iter().enumerate() {
            let s = self
                .check_seq("mask", q.seq_id)
                .map_err(|e| KvError::BadQuery {
                    index,
                    detail: e.to_string(),
                })?;
            let st = self.stream_idx(s);
            if *stream.get_or_insert(st) != st {
                return Err(KvError::BadQuery {
                    index,
                    detail: format!(
                        "sequence {} is in stream {st}, not {}",
                        q.seq_id,
                        stream.unwrap_or(0)
                    ),
                });
            }
            if q.pos < 0 {
                return Err(KvError::BadQuery {
                    index,
                    detail: format!("position {}", q.pos),
                });
            }
        }
        Ok(stream)
    }

    /// How many (query, cell) pairs [`KvCells::mask`] with the same
    /// arguments would let through (its entries above -inf), counted
    /// without building it: a pass over the cells a query for a few
    /// queries; for more, per sequence of the queries the positions of its
    /// cells sorted once, then a range per query. Errors as `mask`.
    pub fn mask_visible(&self, queries: &[Query], n_kv: u32, params: &MaskParams) -> Result<u64> {
        let Some(st) = self.mask_stream(queries, n_kv, params)? else {
            return Ok(0);
        };
        let stream = &self.streams[st];
        let n_kv = n_kv as usize;
        if queries.len() <= 4 {
            // A decode step: a pass over the cells a query, no sorting.
            let mut total = 0u64;
            for q in queries {
                total += (0..n_kv)
                    .filter(|&j| {
                        let p0 = stream.pos[j];
                        p0 >= 0
                            && stream.seqs[j].contains(q.seq_id)
                            && !(params.causal && p0 > q.pos)
                            && !params.is_masked_swa(p0, q.pos)
                    })
                    .count() as u64;
            }
            return Ok(total);
        }
        let mut seqs: Vec<SeqId> = queries.iter().map(|q| q.seq_id).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let mut total = 0u64;
        let mut held = Vec::new();
        for s in seqs {
            held.clear();
            held.extend(
                (0..n_kv)
                    .filter(|&j| stream.pos[j] >= 0 && stream.seqs[j].contains(s))
                    .map(|j| stream.pos[j] as i64),
            );
            held.sort_unstable();
            for q in queries.iter().filter(|q| q.seq_id == s) {
                let p1 = q.pos as i64;
                let n = params.n_swa as i64;
                let (mut lo, mut hi) = (i64::MIN, i64::MAX);
                if params.causal {
                    hi = p1;
                }
                match params.swa_type {
                    SwaType::None => {}
                    SwaType::Standard => lo = p1 - n + 1,
                    SwaType::Chunked => lo = (p1 / n) * n,
                    SwaType::Symmetric => {
                        lo = p1 - n / 2;
                        hi = hi.min(p1 + n / 2);
                    }
                }
                let a = held.partition_point(|&p| p < lo);
                let b = held.partition_point(|&p| p <= hi);
                total += b.saturating_sub(a) as u64;
            }
        }
        Ok(total)
    }

    /// The cells of stream `stream` whose position or sequence set changed
    /// since the last call (all of them in a new cache or a clone), as
    /// one range from the lowest to the highest (empty: none); the next
    /// call starts afresh. For a copy of the cells kept elsewhere (a
    /// device's, [`KvCells::cell_words`]): bringing these up to date
    /// brings it up to date. Empty for a stream that does not exist.
    pub fn take_changed(&mut self, stream: u32) -> std::ops::Range<usize> {
        let Some(st) = self.streams.get_mut(stream as usize) else {
            return 0..0;
        };
        let r = std::mem::replace(&mut st.changed, Changed(0..0)).0;
        let end = (r.end as usize).min(st.pos.len());
        (r.start as usize).min(end)..end
    }

    /// Marks every cell changed (for a copy that missed an update).
    pub fn mark_all_changed(&mut self) {
        for st in &mut self.streams {
            st.changed = Changed::ALL;
        }
    }

    /// Words a cell takes in [`KvCells::cell_words`]: its position, then
    /// a word for every 32 sequences of `n_seq_max` (2 for up to 32, at
    /// most [`CELL_WORDS`]).
    pub fn cell_words_len(&self) -> usize {
        1 + self.params.n_seq_max.div_ceil(32) as usize
    }

    /// Writes stream `stream`'s cells `cells` as a device copy holds them:
    /// per cell, its position (-1 empty), then its sequence set as the
    /// first [`KvCells::cell_words_len`] - 1 of [`SeqSet::words32`] (the
    /// others are 0: no sequence id reaches them).
    ///
    /// Preconditions: the stream exists, `cells` within its `kv_size`,
    /// `out` that many cells of `cell_words_len` words (else panics).
    pub fn cell_words(&self, stream: u32, cells: std::ops::Range<usize>, out: &mut [i32]) {
        let st = &self.streams[stream as usize];
        let w = self.cell_words_len();
        debug_assert!(w <= CELL_WORDS);
        assert_eq!(
            out.len(),
            cells.len() * w,
            "cell_words: {} words",
            out.len()
        );
        for (o, j) in out.chunks_exact_mut(w).zip(cells) {
            o[0] = st.pos[j];
            for (d, s) in o[1..].iter_mut().zip(st.seqs[j].words32()) {
                *d = s as i32;
            }
        }
    }

    // ---- internals ---------------------------------------------------------------

    pub(crate) fn check_seq(&self, op: &'static str, seq_id: SeqId) -> Result<usize> {
        if seq_id < 0 || seq_id as u32 >= self.params.n_seq_max {
            return Err(KvError::UnknownSeq {
                op,
                seq_id,
                n_seq_max: self.params.n_seq_max,
            });
        }
        Ok(seq_id as usize)
    }

    /// What differs when a plan or log (`what`) made for a cache of
    /// `kv_size x n_stream` meets this one; `None` if the shapes agree.
    fn other_shape(&self, what: &str, kv_size: u32, n_stream: u32) -> Option<String> {
        let here = (self.params.kv_size, self.n_stream());
        (here != (kv_size, n_stream)).then(|| {
            format!(
                "{what} for kv_size {kv_size} x {n_stream} streams, cache is {} x {}",
                here.0, here.1
            )
        })
    }

    fn check_seq_or_all(&self, op: &'static str, seq_id: SeqId) -> Result<Option<usize>> {
        if seq_id < 0 {
            return Ok(None);
        }
        self.check_seq(op, seq_id).map(Some)
    }

    pub(crate) fn stream_idx(&self, seq: usize) -> usize {
        match self.params.layout {
            StreamLayout::Unified => 0,
            StreamLayout::PerSeq => seq,
        }
    }

    fn streams_for(&self, seq: Option<usize>) -> std::ops::Range<usize> {
        match seq {
            Some(s) => {
                let st = self.stream_idx(s);
                st..st + 1
            }
            None => 0..self.streams.len(),
        }
    }

    /// Non-empty cells of `seq` (None: any) with a position in `r`.
    fn cells_in(&self, seq: Option<usize>, r: (i64, i64)) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for st in self.streams_for(seq) {
            let stream = &self.streams[st];
            for i in 0..self.params.kv_size as usize {
                let hit = in_range(stream.pos[i], r)
                    && seq.is_none_or(|s| stream.seqs[i].contains(s as SeqId));
                if hit {
                    out.push((st, i));
                }
            }
        }
        out
    }

    fn check_token(&self, index: usize, t: &TokenMeta) -> Result<(usize, SeqSet)> {
        let bad = |detail: String| Err(KvError::BadBatch { index, detail });
        if t.pos < 0 {
            return bad(format!("negative position {}", t.pos));
        }
        if t.seq_ids.is_empty() {
            return bad("no sequence id".into());
        }
        let mut stream = None;
        let mut seqs = SeqSet::new();
        for &q in &t.seq_ids {
            let s = match self.check_seq("find_cells", q) {
                Ok(s) => s,
                Err(e) => return bad(e.to_string()),
            };
            let st = self.stream_idx(s);
            if *stream.get_or_insert(st) != st {
                return bad(format!(
                    "sequences {:?} live in different streams (per-sequence layout)",
                    t.seq_ids
                ));
            }
            seqs.insert(q);
        }
        Ok((stream.unwrap_or(0), seqs))
    }

    /// Fills an empty cell. Precondition: cell empty, `pos >= 0`, `seqs`
    /// non-empty and in this stream.
    fn fill_cell(&mut self, st: usize, i: usize, pos: Pos, seqs: SeqSet, shift: Pos) {
        let stream = &mut self.streams[st];
        debug_assert!(stream.pos[i] < 0 && pos >= 0 && !seqs.is_empty());
        stream.pos[i] = pos;
        stream.seqs[i] = seqs;
        stream.changed.add(i);
        stream.set_shift(i, shift);
        stream.used += 1;
        for q in seqs.iter() {
            ms_inc(&mut self.seq_pos[q as usize], pos);
        }
    }

    /// Empties a cell (no-op if empty); the head may move back to it.
    fn empty_cell(&mut self, st: usize, i: usize) {
        let stream = &mut self.streams[st];
        let pos = stream.pos[i];
        if pos < 0 {
            return;
        }
        for q in stream.seqs[i].iter() {
            ms_dec(&mut self.seq_pos[q as usize], pos);
        }
        stream.seqs[i] = SeqSet::new();
        stream.pos[i] = -1;
        stream.changed.add(i);
        stream.set_shift(i, 0);
        stream.used -= 1;
        stream.head = stream.head.min(i as u32);
    }

    /// Removes one sequence from a cell. Precondition: the cell holds `s`.
    fn cell_rm_seq(&mut self, st: usize, i: usize, s: usize) {
        debug_assert!(self.streams[st].seqs[i].contains(s as SeqId));
        if self.streams[st].seqs[i].len() == 1 {
            self.empty_cell(st, i);
            return;
        }
        let pos = self.streams[st].pos[i];
        self.streams[st].seqs[i].remove(s as SeqId);
        self.streams[st].changed.add(i);
        ms_dec(&mut self.seq_pos[s], pos);
    }

    /// Moves a non-empty cell to `new` (`< 0`: empties it).
    /// Precondition: `new <= i32::MAX`.
    fn move_cell(&mut self, st: usize, i: usize, new: i64) {
        debug_assert!(new <= i32::MAX as i64);
        if new < 0 {
            self.empty_cell(st, i);
            return;
        }
        let stream = &mut self.streams[st];
        let old = stream.pos[i];
        debug_assert!(old >= 0);
        let new = new as Pos;
        if new == old {
            return;
        }
        for q in stream.seqs[i].iter() {
            ms_dec(&mut self.seq_pos[q as usize], old);
            ms_inc(&mut self.seq_pos[q as usize], new);
        }
        // shift == pos - (position K is rotated for), both in 0..=i32::MAX
        let shift = stream.shift[i] as i64 + new as i64 - old as i64;
        debug_assert!(shift >= i32::MIN as i64 && shift <= i32::MAX as i64);
        stream.pos[i] = new;
        stream.changed.add(i);
        stream.set_shift(i, shift as Pos);
    }

    /// Sets the pending shift of a non-empty cell (state restore).
    pub(crate) fn restore_shift(&mut self, st: usize, i: usize, shift: Pos) {
        debug_assert!(self.streams[st].pos[i] >= 0);
        self.streams[st].set_shift(i, shift);
    }

    /// Recomputes every counter and multiset and compares (debug builds).
    pub(crate) fn debug_check(&self) {
        #[cfg(debug_assertions)]
        {
            let mut ms = vec![PosCounts::new(); self.seq_pos.len()];
            for (st, stream) in self.streams.iter().enumerate() {
                let mut used = 0;
                let mut shifted = 0;
                for i in 0..stream.pos.len() {
                    let (p, seqs) = (stream.pos[i], stream.seqs[i]);
                    assert_eq!(
                        p < 0,
                        seqs.is_empty(),
                        "cell {st}/{i}: pos {p} seqs {seqs:?}"
                    );
                    if p < 0 {
                        assert_eq!((p, stream.shift[i]), (-1, 0), "empty cell {st}/{i}");
                        continue;
                    }
                    used += 1;
                    shifted += (stream.shift[i] != 0) as u32;
                    for q in seqs.iter() {
                        assert_eq!(self.stream_idx(q as usize), st, "seq {q} in stream {st}");
                        ms_inc(&mut ms[q as usize], p);
                    }
                }
                assert_eq!(used, stream.used, "stream {st} used");
                assert_eq!(shifted, stream.n_shifted, "stream {st} n_shifted");
            }
            assert_eq!(ms, self.seq_pos, "per-sequence position multisets");
        }
    }
}

/// The first cell `i` of `starts` that begins a run of `n` empty cells
/// (`pos[i..i + n]` all negative, inside `pos`), if any. A run that fails
/// at an occupied cell `j` rules out every start up to `j` as well, so the
/// search goes on from `j + 1` and reads each cell at most once: a decode
/// step, whose run starts at the head, reads `n` cells, not the stream.
fn first_run(pos: &[i32], starts: std::ops::Range<usize>, n: usize) -> Option<usize> {
    let mut i = starts.start;
    while i < starts.end {
        let mut j = i;
        while j < i + n && j < pos.len() && pos[j] < 0 {
            j += 1;
        }
        if j == i + n {
            return Some(i);
        }
        if j >= pos.len() {
            // Empty to the end but short of `n`: no later start fits.
            return None;
        }
        i = j + 1;
    }
    None
}

#[cfg(test)]
mod first_run_tests {
    use super::first_run;

    /// The whole-stream scan `find_cells` made before: `run[i]`, the empty
    /// cells in a row from `i`, for every cell, then the first start of
    /// `starts` with `run[i] >= n`.
    fn by_runs(pos: &[i32], starts: std::ops::Range<usize>, n: usize) -> Option<usize> {
        let mut run = vec![0usize; pos.len() + 1];
        for i in (0..pos.len()).rev() {
            run[i] = if pos[i] < 0 { run[i + 1] + 1 } else { 0 };
        }
        starts.into_iter().find(|&i| run[i] >= n)
    }

    #[test]
    fn agrees_with_the_whole_stream_scan() {
        let mut r = glint_testkit::Rng(0x5eed_f125);
        for _ in 0..20_000 {
            let len = 1 + r.below(40);
            let full = r.below(101) as u64;
            let pos: Vec<i32> = (0..len)
                .map(|_| {
                    if r.chance(full) {
                        r.below(100) as i32
                    } else {
                        -1
                    }
                })
                .collect();
            let n = 1 + r.below(8);
            let a = r.below(len + 1);
            let b = a + r.below(len + 1 - a);
            assert_eq!(
                first_run(&pos, a..b, n),
                by_runs(&pos, a..b, n),
                "{pos:?} starts {a}..{b} n {n}"
            );
        }
    }
}
