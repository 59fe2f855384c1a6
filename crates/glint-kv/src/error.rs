//! The one error type of the crate.

use crate::{Pos, SeqId};

/// What went wrong. Every error leaves the cache exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// Bad creation parameters (`kv_size == 0`, too many sequences, ...).
    #[error("invalid cache parameters: {0}")]
    Params(String),
    /// A sequence id outside `0..n_seq_max` (or negative where "all" is not allowed).
    #[error("{op}: unknown sequence id {seq_id} (n_seq_max = {n_seq_max})")]
    UnknownSeq {
        /// The operation.
        op: &'static str,
        /// The offending id.
        seq_id: SeqId,
        /// Sequences the cache was created for.
        n_seq_max: u32,
    },
    /// `seq_div` by `n <= 0`.
    #[error("seq_div: divisor must be >= 1, got {0}")]
    BadDivisor(i32),
    /// A position change would leave the `i32` range.
    #[error("{op}: position {pos} {detail} overflows i32")]
    PosOverflow {
        /// The operation.
        op: &'static str,
        /// The position before the change.
        pos: Pos,
        /// The change that overflows.
        detail: String,
    },
    /// `seq_cp` between different streams must copy the whole sequence.
    #[error(
        "seq_cp: copy from seq {src} (stream {src_stream}) to seq {dst} (stream {dst_stream}) \
         must cover the whole sequence (positions {pos_min}..={pos_max}), got [{p0}, {p1})"
    )]
    PartialCrossStreamCopy {
        /// Source sequence.
        src: SeqId,
        /// Destination sequence.
        dst: SeqId,
        /// Stream of `src`.
        src_stream: u32,
        /// Stream of `dst`.
        dst_stream: u32,
        /// Requested range start (after normalisation).
        p0: Pos,
        /// Requested range end (after normalisation, `i32::MAX` = to the end).
        p1: Pos,
        /// Smallest position of `src`.
        pos_min: Pos,
        /// Largest position of `src`.
        pos_max: Pos,
    },
    /// Not enough empty cells.
    #[error(
        "{op}: no room in stream {stream}: {needed} cells needed, {free} free (kv_size {kv_size})"
    )]
    NoRoom {
        /// The operation (`find_cells`, `seq_cp`, `seq_unshare`, `state_read`).
        op: &'static str,
        /// The stream that is full.
        stream: u32,
        /// Cells the operation needs in that stream.
        needed: usize,
        /// Empty cells in that stream.
        free: usize,
        /// Cells per stream.
        kv_size: u32,
    },
    /// A batch that cannot be placed for a reason other than room.
    #[error("batch: token {index}: {detail}")]
    BadBatch {
        /// Index of the token in the batch.
        index: usize,
        /// What is wrong, with the values.
        detail: String,
    },
    /// A cell plan that no longer fits the cells (made for another state or cache).
    #[error("apply: stale cell plan: {0}")]
    StalePlan(String),
    /// A cell log that no longer fits the cells: the batch's cells were
    /// changed since `apply`, or the log is of another cache.
    #[error("rollback: stale cell log: {0}")]
    StaleLog(String),
    /// A query token of a mask request that cannot be served.
    #[error("mask: query {index}: {detail}")]
    BadQuery {
        /// Index of the query.
        index: usize,
        /// What is wrong, with the values.
        detail: String,
    },
    /// Self-extend or context-shift parameters that make no sense.
    #[error("{op}: {detail}")]
    BadShiftParams {
        /// `self_extend` or `context_shift`.
        op: &'static str,
        /// What is wrong, with the values.
        detail: String,
    },
    /// A saved sequence state that cannot be restored.
    #[error("state: {0}")]
    State(String),
}

/// Result with [`KvError`].
pub type Result<T> = std::result::Result<T, KvError>;
