//! Self-extend (grouped attention) and context shift, as pure functions over
//! the cells that report every call they make.

use crate::{KvCells, KvError, Pos, Result, SeqId};

/// One position-changing call on the cells, with its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// `seq_rm(seq, p0, p1)`.
    SeqRm {
        /// Sequence.
        seq: SeqId,
        /// Range start.
        p0: Pos,
        /// Range end (exclusive).
        p1: Pos,
    },
    /// `seq_add(seq, p0, p1, d)`.
    SeqAdd {
        /// Sequence.
        seq: SeqId,
        /// Range start.
        p0: Pos,
        /// Range end (exclusive).
        p1: Pos,
        /// Added to each position.
        d: Pos,
    },
    /// `seq_div(seq, p0, p1, n)`.
    SeqDiv {
        /// Sequence.
        seq: SeqId,
        /// Range start.
        p0: Pos,
        /// Range end (exclusive).
        p1: Pos,
        /// Divisor.
        n: i32,
    },
}

impl KvCells {
    /// Runs one [`KvOp`].
    ///
    /// Preconditions: those of the operation it names (else error, nothing
    /// changed).
    pub fn apply_op(&mut self, op: &KvOp) -> Result<()> {
        match *op {
            KvOp::SeqRm { seq, p0, p1 } => self.seq_rm(seq, p0, p1),
            KvOp::SeqAdd { seq, p0, p1, d } => self.seq_add(seq, p0, p1, d),
            KvOp::SeqDiv { seq, p0, p1, n } => self.seq_div(seq, p0, p1, n),
        }
    }

    /// Runs `ops` in order, all or nothing: on an error the cells are
    /// restored to what they were.
    ///
    /// Preconditions: each operation's, in the state the earlier ones leave
    /// (else error, nothing changed).
    pub fn apply_ops(&mut self, ops: &[KvOp]) -> Result<()> {
        let backup = self.clone();
        for op in ops {
            if let Err(e) = self.apply_op(op) {
                *self = backup;
                return Err(e);
            }
        }
        Ok(())
    }
}

/// One pass of the self-extend loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfExtendPass {
    /// `n_past` when the pass started.
    pub n_past_before: Pos,
    /// `ga_i` when the pass started.
    pub ga_i_before: Pos,
    /// `(ga_n * ga_i) / ga_w`.
    pub ib: Pos,
    /// `(ga_w / ga_n) * (ga_n - 1)`.
    pub bd: Pos,
    /// `(ga_w / ga_n) - ib * bd - ga_w`.
    pub dd: Pos,
    /// The three calls: `seq_add`, `seq_div`, `seq_add`.
    pub calls: [KvOp; 3],
    /// `n_past` after the pass.
    pub n_past_after: Pos,
    /// `ga_i` after the pass.
    pub ga_i_after: Pos,
    /// `seq_pos_min` of the sequence after the pass.
    pub seq_pos_min: Pos,
    /// `seq_pos_max` of the sequence after the pass.
    pub seq_pos_max: Pos,
}

/// What [`self_extend_step`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfExtendOutcome {
    /// The passes, in order (empty if the loop did not run).
    pub passes: Vec<SelfExtendPass>,
    /// `n_past` to decode the next tokens at.
    pub n_past: Pos,
    /// `ga_i` to keep for the next call.
    pub ga_i: Pos,
}

/// Most passes one [`self_extend_step`] call may make: a guard against
/// hostile `n_past` values (each pass scans the cache; a real run makes one
/// pass per `ga_w` new tokens).
pub const MAX_SELF_EXTEND_PASSES: usize = 1 << 16;

/// Self-extend (grouped attention) for sequence `seq`, run before a decode:
///
/// ```text
/// while n_past >= ga_i + ga_w:
///     ib = (ga_n * ga_i) / ga_w
///     bd = (ga_w / ga_n) * (ga_n - 1)
///     dd = (ga_w / ga_n) - ib*bd - ga_w
///     seq_add(seq, ga_i,                n_past,              ib*bd)
///     seq_div(seq, ga_i + ib*bd,        ga_i + ib*bd + ga_w, ga_n)
///     seq_add(seq, ga_i + ib*bd + ga_w, n_past + ib*bd,      dd)
///     n_past -= bd
///     ga_i   += ga_w / ga_n
/// ```
///
/// Preconditions (errors, nothing changed): `ga_n >= 1`, `ga_w >= 1`,
/// `ga_w % ga_n == 0`, `n_past >= 0`, `0 <= ga_i`, a known `seq`, every
/// intermediate value within `i32`, at most [`MAX_SELF_EXTEND_PASSES`]
/// passes. `ga_n == 1` makes passes that change nothing (as llama.cpp, which
/// skips the loop then, the caller may skip the call).
pub fn self_extend_step(
    cells: &mut KvCells,
    seq: SeqId,
    n_past: Pos,
    ga_i: Pos,
    ga_n: i32,
    ga_w: i32,
) -> Result<SelfExtendOutcome> {
    let bad = |detail: String| {
        Err(KvError::BadShiftParams {
            op: "self_extend",
            detail,
        })
    };
    if ga_n < 1 {
        return bad(format!("ga_n must be >= 1, got {ga_n}"));
    }
    if ga_w < 1 {
        return bad(format!("ga_w must be >= 1, got {ga_w}"));
    }
    if ga_w % ga_n != 0 {
        return bad(format!("ga_w ({ga_w}) must be a multiple of ga_n ({ga_n})"));
    }
    if n_past < 0 || ga_i < 0 {
        return bad(format!("n_past ({n_past}) and ga_i ({ga_i}) must be >= 0"));
    }
    cells.check_seq("self_extend", seq)?;
    // plan every pass in i64 first: no partial work on bad arguments
    let fits = |v: i64| v >= i32::MIN as i64 && v <= i32::MAX as i64;
    let (gn, gw) = (ga_n as i64, ga_w as i64);
    let (mut np, mut gi) = (n_past as i64, ga_i as i64);
    let mut plan = Vec::new();
    while np >= gi + gw {
        if plan.len() >= MAX_SELF_EXTEND_PASSES {
            return bad(format!(
                "more than {MAX_SELF_EXTEND_PASSES} passes (n_past {n_past}, ga_i {ga_i}, ga_w {ga_w})"
            ));
        }
        let ib = (gn * gi) / gw;
        let bd = (gw / gn) * (gn - 1);
        let ibbd = ib * bd;
        let dd = (gw / gn) - ibbd - gw;
        let vals = [ib, bd, ibbd, dd, gi + ibbd, gi + ibbd + gw, np + ibbd];
        if !vals.iter().all(|&v| fits(v)) {
            return bad(format!("values overflow i32 at n_past {np}, ga_i {gi}"));
        }
        let calls = [
            KvOp::SeqAdd {
                seq,
                p0: gi as Pos,
                p1: np as Pos,
                d: ibbd as Pos,
            },
            KvOp::SeqDiv {
                seq,
                p0: (gi + ibbd) as Pos,
                p1: (gi + ibbd + gw) as Pos,
                n: ga_n,
            },
            KvOp::SeqAdd {
                seq,
                p0: (gi + ibbd + gw) as Pos,
                p1: (np + ibbd) as Pos,
                d: dd as Pos,
            },
        ];
        plan.push((np as Pos, gi as Pos, ib as Pos, bd as Pos, dd as Pos, calls));
        np -= bd;
        gi += gw / gn;
    }
    let backup = cells.clone();
    let mut passes = Vec::with_capacity(plan.len());
    for (n_past_before, ga_i_before, ib, bd, dd, calls) in plan {
        if let Err(e) = cells.apply_ops(&calls) {
            *cells = backup;
            return Err(e);
        }
        passes.push(SelfExtendPass {
            n_past_before,
            ga_i_before,
            ib,
            bd,
            dd,
            calls,
            n_past_after: n_past_before - bd,
            ga_i_after: ga_i_before + ga_w / ga_n,
            seq_pos_min: cells.seq_pos_min(seq)?,
            seq_pos_max: cells.seq_pos_max(seq)?,
        });
    }
    Ok(SelfExtendOutcome {
        passes,
        n_past: np as Pos,
        ga_i: gi as Pos,
    })
}

/// What [`context_shift`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextShift {
    /// `(n_past - n_keep) / 2`.
    pub n_discard: Pos,
    /// `seq_rm(seq, n_keep, n_keep + n_discard)`,
    /// `seq_add(seq, n_keep + n_discard, n_past, -n_discard)`.
    pub calls: [KvOp; 2],
    /// `n_past - n_discard`.
    pub n_past: Pos,
}

/// Context shift for a full cache (llama.cpp's completion tool): keep the
/// first `n_keep` positions of `seq`, drop the next
/// `n_discard = (n_past - n_keep) / 2`, slide the rest down by `n_discard`.
///
/// Preconditions (errors, nothing changed): a known `seq`,
/// `0 <= n_keep <= n_past`.
pub fn context_shift(
    cells: &mut KvCells,
    seq: SeqId,
    n_keep: Pos,
    n_past: Pos,
) -> Result<ContextShift> {
    cells.check_seq("context_shift", seq)?;
    if n_keep < 0 || n_keep > n_past {
        return Err(KvError::BadShiftParams {
            op: "context_shift",
            detail: format!("need 0 <= n_keep ({n_keep}) <= n_past ({n_past})"),
        });
    }
    let n_discard = (n_past - n_keep) / 2;
    let calls = [
        KvOp::SeqRm {
            seq,
            p0: n_keep,
            p1: n_keep + n_discard,
        },
        KvOp::SeqAdd {
            seq,
            p0: n_keep + n_discard,
            p1: n_past,
            d: -n_discard,
        },
    ];
    cells.apply_ops(&calls)?;
    Ok(ContextShift {
        n_discard,
        calls,
        n_past: n_past - n_discard,
    })
}
