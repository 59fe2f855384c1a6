//! Helpers shared by the integration tests.
#![allow(dead_code)]

use glint_kv::{KvCells, KvParams, Pos, Result, SeqId, TokenMeta};

/// A unified cache without n_kv padding.
pub fn unified(kv_size: u32, n_seq_max: u32) -> KvCells {
    KvCells::new(KvParams {
        n_pad: 1,
        ..KvParams::unified(kv_size, n_seq_max)
    })
    .unwrap()
}

/// A per-sequence cache without n_kv padding.
pub fn per_seq(kv_size: u32, n_seq_max: u32) -> KvCells {
    KvCells::new(KvParams {
        n_pad: 1,
        ..KvParams::per_seq(kv_size, n_seq_max)
    })
    .unwrap()
}

/// Runs `op` and checks that `cells` are exactly as they were: the
/// crate's rule for every error, and what a no-op must do. `what` names the
/// case.
pub fn unchanged<T>(
    cells: &mut KvCells,
    what: &str,
    op: impl FnOnce(&mut KvCells) -> Result<T>,
) -> Result<T> {
    let before = cells.clone();
    let r = op(cells);
    assert_eq!(*cells, before, "{what}: changed the cells");
    r
}

/// Places `n` tokens of `seq` at positions `p0..p0 + n` (find_cells + apply).
pub fn decode(cells: &mut KvCells, seq: SeqId, p0: Pos, n: Pos) {
    let batch: Vec<TokenMeta> = (p0..p0 + n).map(|p| TokenMeta::new(p, seq)).collect();
    let plan = cells.find_cells(&batch).unwrap();
    cells.apply(&plan).unwrap().commit();
}

/// `(seq_pos_min, seq_pos_max)` of `seq`; `(-1, -1)` when it has no cell.
pub fn pos_range(cells: &KvCells, seq: SeqId) -> (Pos, Pos) {
    (
        cells.seq_pos_min(seq).unwrap(),
        cells.seq_pos_max(seq).unwrap(),
    )
}

/// Positions of stream 0's first `n` cells.
pub fn positions(cells: &KvCells, n: u32) -> Vec<Pos> {
    (0..n).map(|i| cells.cell(0, i).unwrap().pos).collect()
}

/// Shifts of stream 0's first `n` cells.
pub fn shifts(cells: &KvCells, n: u32) -> Vec<Pos> {
    (0..n).map(|i| cells.cell(0, i).unwrap().shift).collect()
}

/// Positions of every cell of `seq` in its stream, in cell order.
pub fn seq_positions_in_order(cells: &KvCells, seq: SeqId) -> Vec<Pos> {
    let st = cells.stream_of(seq).unwrap();
    (0..cells.params().kv_size)
        .filter_map(|i| cells.cell(st, i))
        .filter(|c| c.seqs.contains(seq))
        .map(|c| c.pos)
        .collect()
}
