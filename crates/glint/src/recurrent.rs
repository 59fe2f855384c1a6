//! The recurrent part of a hybrid memory (LFM2's short-convolution
//! layers): one state per sequence, no cells.
//!
//! A recurrent state summarizes every token a sequence has seen; it cannot
//! forget a middle position, nor the last few. So the sequence operations
//! have these semantics (llama.cpp's recurrent memory has the same):
//!
//! | op | on the recurrent state |
//! |---|---|
//! | `seq_rm` of the whole sequence, or of positions past its end | reset / nothing |
//! | any other `seq_rm` | refused ([`Error::Recurrent`]) |
//! | `seq_cp` of the whole sequence | the state copied |
//! | `seq_cp` of part of it | refused |
//! | `seq_keep` | the other sequences reset |
//! | `seq_add`, `seq_div` | the tracked positions move; the state is position-free |
//! | a batch | each sequence's tokens must continue it: positions `last + 1, last + 2, …` |
//!
//! The states live on the backend ([`ConvStorage`]: per layer `[n_embd_conv,
//! n_seq_max]`, column = sequence id). A decode saves the columns it is
//! about to move into a backup on the device (no read back), so a failed
//! decode is undone like the KV cells are.

use glint_backend::{Backend, GgmlType, TensorDesc, Usage};
use glint_kv::TokenMeta;
use glint_model::{ConvStorage, HParams};

use crate::Error;

/// The span of positions a sequence's state has seen, `-1` when empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    first: i32,
    last: i32,
}

const EMPTY: Span = Span {
    first: -1,
    last: -1,
};

/// Per-sequence recurrent states.
pub(crate) struct Recurrent<B: Backend> {
    /// The states on the backend (no layers: a model without them).
    pub(crate) storage: ConvStorage<B::Tensor>,
    /// Per layer, the columns a decode moves, saved before it:
    /// `[n_embd_conv, n_seq_max]` f32.
    backup: Vec<B::Tensor>,
    /// Per sequence id.
    spans: Vec<Span>,
    /// Sequences whose state must be zeroed before their next token.
    stale: Vec<bool>,
    /// The last decode's saved slots `[n]` i32 and room to copy them
    /// `[n_embd_conv, n]` f32, for a rollback: views of `room`.
    saved: Option<(B::Tensor, B::Tensor)>,
    /// Where those live, made once (none without recurrent layers): slot
    /// ids `[n_seq_max]` i32 and copy room `[n_embd_conv, n_seq_max]` f32,
    /// so a decode allocates nothing.
    room: Option<(B::Tensor, B::Tensor)>,
    n_embd_conv: usize,
}

/// What [`Recurrent::begin`] changed: the spans before (the columns it
/// saved stay with the memory until the next decode).
pub(crate) struct RecurrentUndo {
    spans: Vec<(usize, Span)>,
}

impl<B: Backend> Recurrent<B> {
    pub(crate) fn new(be: &B, hp: &HParams, n_seq_max: usize) -> Result<Self, Error> {
        let storage = ConvStorage::new(be, hp, n_seq_max)?;
        let mut backup = Vec::with_capacity(storage.state.len());
        for (i, _) in storage.state.iter().enumerate() {
            backup.push(be.alloc(TensorDesc {
                ty: GgmlType::F32,
                ne: [hp.n_embd_conv(), n_seq_max, 1, 1],
                label: format!("conv_state_backup_{i}").into(),
                usage: Usage::KvCache,
            })?);
        }
        let room = if storage.state.is_empty() {
            None
        } else {
            let slots = be.alloc(TensorDesc {
                ty: GgmlType::I32,
                ne: [n_seq_max, 1, 1, 1],
                label: "conv_backup_slots".into(),
                usage: Usage::Scratch,
            })?;
            let tmp = be.alloc(TensorDesc {
                ty: GgmlType::F32,
                ne: [hp.n_embd_conv(), n_seq_max, 1, 1],
                label: "conv_backup_tmp".into(),
                usage: Usage::Scratch,
            })?;
            Some((slots, tmp))
        };
        Ok(Recurrent {
            storage,
            backup,
            spans: vec![EMPTY; n_seq_max],
            stale: vec![false; n_seq_max],
            saved: None,
            room,
            n_embd_conv: hp.n_embd_conv(),
        })
    }

    /// Whether the model has recurrent layers at all.
    pub(crate) fn is_active(&self) -> bool {
        !self.storage.state.is_empty()
    }

    fn seqs(&self, seq: i32) -> Result<std::ops::Range<usize>, Error> {
        let n = self.spans.len();
        match seq {
            s if s < 0 => Ok(0..n),
            s if (s as usize) < n => Ok(s as usize..s as usize + 1),
            s => Err(Error::Invalid(format!(
                "sequence id {s} outside 0..{n} (n_seq_max)"
            ))),
        }
    }

    /// The sequences `seq_rm(seq, p0, p1)` resets, or why it cannot be done.
    pub(crate) fn plan_rm(&self, seq: i32, p0: i32, p1: i32) -> Result<Vec<usize>, Error> {
        let (p0, p1) = (p0.max(0), if p1 < 0 { i32::MAX } else { p1 });
        let mut reset = Vec::new();
        if p0 >= p1 {
            return Ok(reset);
        }
        for s in self.seqs(seq)? {
            let sp = self.spans[s];
            if sp.last < 0 || p0 > sp.last {
                continue; // nothing there, or only past its end
            }
            if p0 <= sp.first && p1 > sp.last {
                reset.push(s);
                continue;
            }
            return Err(Error::Recurrent(format!(
                "sequence {s} holds positions {}..={} as one recurrent state (short-convolution \
                 layers): removing positions {p0}..{} would need the state at position {}, which \
                 is not kept; only the whole sequence, or positions past its end, can be removed",
                sp.first,
                sp.last,
                range_end(p1),
                p0 - 1
            )));
        }
        Ok(reset)
    }

    /// Forget the states of `seqs` (zeroed before their next token).
    pub(crate) fn reset(&mut self, seqs: &[usize]) {
        for &s in seqs {
            self.spans[s] = EMPTY;
            self.stale[s] = true;
        }
    }

    /// Check that `seq_cp(src, dst, p0, p1)` copies `src`'s whole state.
    pub(crate) fn check_cp(&self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<(), Error> {
        let s = self.seqs(src)?;
        self.seqs(dst)?;
        if src < 0 || dst < 0 {
            return Err(Error::Invalid(format!(
                "seq_cp {src} -> {dst}: both must be sequence ids"
            )));
        }
        let sp = self.spans[s.start];
        let (p0, p1) = (p0.max(0), if p1 < 0 { i32::MAX } else { p1 });
        if sp.last >= 0 && !(p0 <= sp.first && p1 > sp.last) {
            return Err(Error::Recurrent(format!(
                "sequence {src} holds positions {}..={} as one recurrent state: copying only \
                 positions {p0}..{} of it cannot be done (copy the whole sequence)",
                sp.first,
                sp.last,
                range_end(p1),
            )));
        }
        Ok(())
    }

    /// Copy `src`'s state to `dst` (after [`Recurrent::check_cp`]).
    pub(crate) fn copy(&mut self, be: &B, src: usize, dst: usize) -> Result<(), Error> {
        if src == dst {
            return Ok(());
        }
        let sp = self.spans[src];
        if sp.last < 0 {
            self.reset(&[dst]);
            return Ok(());
        }
        let col = self.n_embd_conv * 4;
        let mut buf = vec![0u8; col];
        for t in &self.storage.state {
            be.read(t, src * col, &mut buf)?;
            be.write(t, dst * col, &buf)?;
        }
        self.spans[dst] = sp;
        self.stale[dst] = false;
        Ok(())
    }

    /// Keep only `seq`.
    pub(crate) fn keep(&mut self, seq: i32) -> Result<(), Error> {
        let keep = self.seqs(seq)?;
        let others: Vec<usize> = (0..self.spans.len())
            .filter(|s| !keep.contains(s))
            .collect();
        self.reset(&others);
        Ok(())
    }

    /// Move the tracked positions of `seq` in `[p0, p1)` by `f`.
    pub(crate) fn shift(
        &mut self,
        seq: i32,
        p0: i32,
        p1: i32,
        f: impl Fn(i32) -> i32,
    ) -> Result<(), Error> {
        let (p0, p1) = (p0.max(0), if p1 < 0 { i32::MAX } else { p1 });
        for s in self.seqs(seq)? {
            let sp = &mut self.spans[s];
            if sp.last < 0 {
                continue;
            }
            for p in [&mut sp.first, &mut sp.last] {
                if (p0..p1).contains(p) {
                    *p = f(*p);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn clear(&mut self) {
        let all: Vec<usize> = (0..self.spans.len()).collect();
        self.reset(&all);
    }

    /// Check a batch against the states (one sequence a token, positions
    /// continuing each state), zero the states of sequences starting anew,
    /// save the columns the batch will move, and track the new positions.
    /// All or nothing up to the device calls.
    pub(crate) fn begin(&mut self, be: &B, batch: &[TokenMeta]) -> Result<RecurrentUndo, Error> {
        let mut next: Vec<(usize, Span)> = Vec::new();
        for (i, t) in batch.iter().enumerate() {
            let [s] = t.seq_ids[..] else {
                return Err(Error::Batch(format!(
                    "token {i} belongs to {} sequences: a model with recurrent layers (short \
                     convolutions) keeps one state per sequence, so each token must name exactly one",
                    t.seq_ids.len()
                )));
            };
            let s = s as usize;
            let cur = match next.iter().find(|(q, _)| *q == s) {
                Some(&(_, sp)) => sp,
                None => self.spans[s],
            };
            if cur.last >= 0 && t.pos != cur.last + 1 {
                return Err(Error::Batch(format!(
                    "token {i}: position {} of sequence {s}, whose recurrent state is at position \
                     {}: a recurrent state only moves on by the next position ({})",
                    t.pos,
                    cur.last,
                    cur.last + 1
                )));
            }
            let sp = Span {
                first: if cur.last < 0 { t.pos } else { cur.first },
                last: t.pos,
            };
            match next.iter_mut().find(|(q, _)| *q == s) {
                Some(e) => e.1 = sp,
                None => next.push((s, sp)),
            }
        }
        // Zero the states of sequences that start anew.
        let col = self.n_embd_conv * 4;
        let zeros = vec![0u8; col];
        for &(s, _) in &next {
            if self.spans[s].last < 0 && self.stale[s] {
                for t in &self.storage.state {
                    be.write(t, s * col, &zeros)?;
                }
                self.stale[s] = false;
            }
        }
        // Save the columns the batch moves (on the device).
        let slots: Vec<i32> = next.iter().map(|&(s, _)| s as i32).collect();
        let (slot_room, tmp_room) = self
            .room
            .as_ref()
            .ok_or_else(|| Error::Internal("recurrent begin without recurrent layers".into()))?;
        be.write(slot_room, 0, bytemuck::cast_slice(&slots))?;
        let idx = be.view(slot_room, [slots.len(), 1, 1, 1])?;
        let tmp = be.view(tmp_room, [self.n_embd_conv, slots.len(), 1, 1])?;
        for (t, b) in self.storage.state.iter().zip(&self.backup) {
            be.get_rows(t, &idx, &tmp)?;
            be.set_rows(&tmp, &idx, b)?;
        }
        self.saved = Some((idx, tmp));
        let before = next.iter().map(|&(s, _)| (s, self.spans[s])).collect();
        for (s, sp) in next {
            self.spans[s] = sp;
        }
        Ok(RecurrentUndo { spans: before })
    }

    /// Undo a [`Recurrent::begin`] whose decode failed: the spans and the
    /// saved columns back.
    pub(crate) fn rollback(&mut self, be: &B, undo: RecurrentUndo) -> Result<(), Error> {
        for (s, sp) in undo.spans {
            self.spans[s] = sp;
        }
        if let Some((idx, tmp)) = self.saved.take() {
            for (t, b) in self.storage.state.iter().zip(&self.backup) {
                be.get_rows(b, &idx, &tmp)?;
                be.set_rows(&tmp, &idx, t)?;
            }
            be.sync()?;
        }
        Ok(())
    }

    /// Sequence `seq`'s span and states (every layer's column, in layer
    /// order), for a saved state.
    pub(crate) fn save(&self, be: &B, seq: usize) -> Result<(i32, i32, Vec<u8>), Error> {
        let sp = self.spans[seq];
        let col = self.n_embd_conv * 4;
        let mut out = vec![0u8; col * self.storage.state.len()];
        if sp.last >= 0 {
            for (t, o) in self.storage.state.iter().zip(out.chunks_mut(col)) {
                be.read(t, seq * col, o)?;
            }
        }
        Ok((sp.first, sp.last, out))
    }

    /// Restore a span and states made by [`Recurrent::save`] into `seq`.
    pub(crate) fn load(
        &mut self,
        be: &B,
        seq: usize,
        first: i32,
        last: i32,
        data: &[u8],
    ) -> Result<(), Error> {
        let col = self.n_embd_conv * 4;
        if data.len() != col * self.storage.state.len() {
            return Err(Error::State(format!(
                "recurrent state of {} bytes, this model's is {}",
                data.len(),
                col * self.storage.state.len()
            )));
        }
        for (t, d) in self.storage.state.iter().zip(data.chunks(col)) {
            be.write(t, seq * col, d)?;
        }
        be.sync()?;
        self.spans[seq] = if last < 0 {
            EMPTY
        } else {
            Span { first, last }
        };
        self.stale[seq] = last < 0;
        Ok(())
    }

    /// Layers and values per layer of one sequence's state.
    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.storage.state.len(), self.n_embd_conv)
    }
}

/// The end of a position range in a message: a number, or `end` (`p1` was
/// open, normalized to `i32::MAX`).
fn range_end(p1: i32) -> String {
    if p1 == i32::MAX {
        "end".to_string()
    } else {
        p1.to_string()
    }
}
