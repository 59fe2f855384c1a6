//! KV-cache bookkeeping for glint: which cell of the cache holds which
//! position of which sequence, what K-shift is pending, where a batch goes,
//! what attention may see. Pure Rust and no buffers: the storage (K/V rows on
//! a device) does what the returned plans say ([`CellPlan::rows`],
//! [`RowCopy`], [`ShiftPlan`], [`SeqStateRead::dst_rows`]).
//!
//! Words: a *cell* is one place of the cache (one K row and one V row per
//! layer), named by its stream and its index in the stream (`cell`), or by
//! its buffer row `stream * kv_size + cell`. A *position* (`pos`) is a
//! token's place in its sequence. "Slot" is not used here: the server means
//! by it a request's sequence.
//!
//! Sizes: [`KvParams::kv_size`] is cells **per stream**. A cache has
//! `n_stream` streams (1 unified, `n_seq_max` per-sequence), so
//! `n_stream * kv_size` cells in total. The context size given on the
//! command line (`-c N`) is the total across streams: unified,
//! `kv_size = N`; per-sequence, each stream gets `kv_size = N / n_seq_max`
//! (as llama.cpp's `n_ctx_seq`). Every count here ([`KvCells::used`],
//! [`KvCells::free`], [`KvCells::n_kv`], [`KvError::NoRoom`]) is per stream.
//!
//! A batch is placed in two steps, [`KvCells::find_cells`] (changes nothing)
//! and [`KvCells::apply`], which returns a [`CellLog`]: if the forward pass
//! then fails, [`KvCells::rollback`] undoes exactly that batch's cells
//! without a copy of the whole cache.
//!
//! The behaviour is the contract in `design/kv-cache.md`. Where it differs
//! from llama.cpp it does so on purpose:
//! - `shift` is always `new_pos - old_pos`, for `seq_add` and `seq_div`
//!   (llama.cpp's `pos_div` records `old - new`);
//! - each sequence keeps a position *multiset*, so `seq_pos_min/max` stay
//!   right when cells share a position (they do after `seq_div`);
//! - every bad argument is an error that leaves the cells unchanged (no
//!   asserts on user input), and multi-step operations (self-extend, context
//!   shift, state restore, batches) are all or nothing.
//!
//! Decisions documented where they are made: [`KvCells::n_kv`] padding,
//! cell search in [`KvCells::find_cells`] (and why the `seq_pos_max + 1`
//! rule is only [`KvCells::check_continues`]), cross-stream
//! [`KvCells::seq_cp`], the state layout in [`ModelIdentity`]'s module.
//!
//! Shared cells: in one stream [`KvCells::seq_cp`] shares cells (a prompt
//! prefix several sequences reuse costs its cells once). A cell has one
//! position, so `seq_add`/`seq_div` on a shared cell move it for every
//! sequence in it. Before editing the positions of one sequence that
//! shares cells (context shift, self-extend), call
//! [`KvCells::seq_unshare`] on the range that will move: copy-on-write, it
//! gives the sequence its own cells there and returns the K/V rows to copy.
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod cells;
mod error;
mod extend;
mod seqset;
mod state;

pub use cells::{
    Cell, CellLog, CellPlan, KvCells, KvParams, MaskParams, PlannedCell, Query, RowCopy, ShiftPlan,
    StreamLayout, SwaType, TokenMeta,
};
pub use error::{KvError, Result};
pub use extend::{
    context_shift, self_extend_step, ContextShift, KvOp, SelfExtendOutcome, SelfExtendPass,
    MAX_SELF_EXTEND_PASSES,
};
pub use seqset::{SeqSet, MAX_SEQ};

/// Most words of one cell as [`KvCells::cell_words`] writes it: its
/// position, then its sequence set (fewer words for fewer sequences:
/// [`KvCells::cell_words_len`]).
pub const CELL_WORDS: usize = 1 + MAX_SEQ as usize / 32;
pub use state::{
    fnv1a, fnv1a_update, seal_state, ModelIdentity, SeqStateRead, SeqStateWrite, FNV1A_OFFSET,
    MAX_ARCH_BYTES, STATE_MAGIC, STATE_VERSION,
};

/// A token position (ggml `llama_pos`); `-1` marks an empty cell.
pub type Pos = i32;
/// A sequence id (ggml `llama_seq_id`); negative means "every sequence"
/// where an operation allows it.
pub type SeqId = i32;
