//! KV-cache bookkeeping for glint: which slot of the cache holds which
//! position of which sequence, what K-shift is pending, where a batch goes,
//! what attention may see. Pure Rust and no buffers: the storage (K/V rows on
//! a device) does what the returned plans say ([`SlotPlan::rows`],
//! [`RowCopy`], [`ShiftPlan`], [`SeqStateRead::dst_rows`]).
//!
//! The behaviour is the contract in `design/kv-cache.md`. Where it differs
//! from llama.cpp it does so on purpose:
//! - `shift` is always `new_pos - old_pos`, for `seq_add` and `seq_div`
//!   (llama.cpp's `pos_div` records `old - new`);
//! - each sequence keeps a position *multiset*, so `seq_pos_min/max` stay
//!   right when slots share a position (they do after `seq_div`);
//! - every bad argument is an error that leaves the cells unchanged (no
//!   asserts on user input), and multi-step operations (self-extend, context
//!   shift, state restore, batches) are all or nothing.
//!
//! Decisions documented where they are made: [`KvCells::n_kv`] padding,
//! slot search in [`KvCells::find_slots`] (and why the `seq_pos_max + 1`
//! rule is only [`KvCells::check_continues`]), cross-stream
//! [`KvCells::seq_cp`], the state layout in [`ModelIdentity`]'s module.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod cells;
mod error;
mod extend;
mod seqset;
mod state;

pub use cells::{
    Cell, KvCells, KvParams, MaskParams, PlannedSlot, Query, RowCopy, ShiftPlan, SlotPlan,
    StreamLayout, SwaType, TokenMeta,
};
pub use error::{KvError, Result};
pub use extend::{
    context_shift, self_extend_step, ContextShift, KvOp, SelfExtendOutcome, SelfExtendPass,
    MAX_SELF_EXTEND_PASSES,
};
pub use seqset::{SeqSet, MAX_SEQ};
pub use state::{
    ModelIdentity, SeqStateRead, SeqStateWrite, MAX_ARCH_BYTES, STATE_MAGIC, STATE_VERSION,
};

/// A token position (ggml `llama_pos`); `-1` marks an empty slot.
pub type Pos = i32;
/// A sequence id (ggml `llama_seq_id`); negative means "every sequence"
/// where an operation allows it.
pub type SeqId = i32;
