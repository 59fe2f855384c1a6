//! `seq_unshare`: copy-on-write of shared cells before a position edit of one
//! of the sequences sharing them.

mod common;
use common::*;
use glint_kv::*;

fn set(ids: &[SeqId]) -> SeqSet {
    ids.iter().copied().collect()
}

fn cells_of(c: &KvCells, range: std::ops::Range<u32>) -> Vec<Cell> {
    range.map(|i| c.cell(0, i).unwrap()).collect()
}

/// Seq 0 at positions 0..6 (cells 0..6) shared with seq 1, the shared
/// cells 4, 5 moved by +2 (positions 6, 7, shift 2 pending), and a
/// neighbour, seq 2, at positions 0, 1 (cells 6, 7). 16 cells.
fn shared_prefix() -> KvCells {
    let mut c = unified(16, 3);
    decode(&mut c, 0, 0, 6);
    c.seq_cp(0, 1, -1, -1).unwrap();
    c.seq_add(0, 4, -1, 2).unwrap(); // moves the shared cells for 0 and 1
    decode(&mut c, 2, 0, 2);
    assert_eq!(
        positions(&c, 10),
        vec![0, 1, 2, 3, 6, 7, 0, 1, -1, -1],
        "setup"
    );
    c
}

#[test]
fn unshare_copies_the_shared_range_and_keeps_every_position() {
    let mut c = shared_prefix();
    let before = c.clone();
    let copies = c.seq_unshare(1, 2, -1).unwrap();

    // cells 2..6 (positions 2, 3, 6, 7) go to the lowest empty cells, 8..12
    let pairs: Vec<(u64, u64)> = copies.iter().map(|r| (r.src_row, r.dst_row)).collect();
    assert_eq!(pairs, vec![(2, 8), (3, 9), (4, 10), (5, 11)]);
    // the copies carry position and pending shift, and hold seq 1 only
    let want_new: Vec<Cell> = [(2, 0), (3, 0), (6, 2), (7, 2)]
        .iter()
        .map(|&(pos, shift)| Cell {
            pos,
            shift,
            seqs: SeqSet::single(1),
        })
        .collect();
    assert_eq!(cells_of(&c, 8..12), want_new);
    // the old cells keep seq 0 only, position and shift unchanged
    for i in 2..6 {
        let (old, now) = (before.cell(0, i).unwrap(), c.cell(0, i).unwrap());
        assert_eq!((now.pos, now.shift), (old.pos, old.shift), "cell {i}");
        assert_eq!(now.seqs, SeqSet::single(0), "cell {i}");
    }
    // outside the range (positions 0, 1) the cells are still shared
    assert_eq!(cells_of(&c, 0..2), cells_of(&before, 0..2));
    assert_eq!(c.cell(0, 1).unwrap().seqs, set(&[0, 1]));
    // the neighbour's cells are untouched
    assert_eq!(cells_of(&c, 6..8), cells_of(&before, 6..8));
    // no cell in the range holds both sequences
    for i in 0..16 {
        let cell = c.cell(0, i).unwrap();
        if cell.pos >= 2 {
            assert!(
                !(cell.seqs.contains(0) && cell.seqs.contains(1)),
                "cell {i}: {cell:?}"
            );
        }
    }
    // every sequence keeps its positions and cell count
    for s in 0..3 {
        assert_eq!(pos_range(&c, s), pos_range(&before, s), "seq {s}");
        assert_eq!(c.seq_n_cells(s), before.seq_n_cells(s), "seq {s}");
        let (mut a, mut b) = (
            seq_positions_in_order(&c, s),
            seq_positions_in_order(&before, s),
        );
        a.sort();
        b.sort();
        assert_eq!(a, b, "seq {s} positions");
    }
    assert_eq!(c.used(0), before.used(0) + 4);
    assert_eq!(c.free(0), before.free(0) - 4);
    assert_eq!(c.used_max_p1(0), 12);

    // the pending shift is due on both the old and the new rows
    let plan = c.clone().take_shifts().unwrap();
    let shifted: Vec<usize> = (0..16).filter(|&r| plan.shifts[r] != 0).collect();
    assert_eq!(shifted, vec![4, 5, 10, 11]);

    // a second unshare finds nothing shared in the range
    assert!(unchanged(&mut c, "again", |c| c.seq_unshare(1, 2, -1))
        .unwrap()
        .is_empty());
}

#[test]
fn after_unshare_a_position_edit_moves_one_sequence_only() {
    // without: the shared cells move for both sequences
    let mut c = shared_prefix();
    c.seq_add(1, 2, -1, -1).unwrap();
    assert_eq!(seq_positions_in_order(&c, 0), vec![0, 1, 1, 2, 5, 6]);

    // with: seq 0 keeps its positions, seq 1's copies move
    let mut c = shared_prefix();
    c.seq_unshare(1, 2, -1).unwrap();
    c.seq_add(1, 2, -1, -1).unwrap();
    assert_eq!(seq_positions_in_order(&c, 0), vec![0, 1, 2, 3, 6, 7]);
    assert_eq!(seq_positions_in_order(&c, 1), vec![0, 1, 1, 2, 5, 6]);
    // the moved copies' shifts compose with the one they carried
    assert_eq!(shifts(&c, 12)[8..], [-1, -1, 1, 1]);
    assert_eq!(shifts(&c, 12)[2..6], [0, 0, 2, 2]);
}

#[test]
fn unshare_without_room_is_an_error_that_changes_nothing() {
    let mut c = unified(6, 2);
    decode(&mut c, 0, 0, 4);
    c.seq_cp(0, 1, -1, -1).unwrap();
    let e = unchanged(&mut c, "no room", |c| c.seq_unshare(1, -1, -1)).unwrap_err();
    assert_eq!(
        e,
        KvError::NoRoom {
            op: "seq_unshare",
            stream: 0,
            needed: 4,
            free: 2,
            kv_size: 6,
        }
    );
    assert!(e.to_string().contains("4 cells needed, 2 free"), "{e}");
    // a range that fits
    assert_eq!(c.seq_unshare(1, 2, 4).unwrap().len(), 2);
    assert_eq!(c.free(0), 0);
}

#[test]
fn unshare_of_unknown_sequences_is_an_error() {
    let mut c = shared_prefix();
    for s in [-1, 3, 1000] {
        let e = unchanged(&mut c, "unknown", |c| c.seq_unshare(s, -1, -1)).unwrap_err();
        assert!(
            matches!(e, KvError::UnknownSeq { op: "seq_unshare", seq_id, .. } if seq_id == s),
            "{e}"
        );
    }
}

#[test]
fn unshare_leaves_the_other_sequences_of_a_cell_together() {
    // one batch token in three sequences: cell 0 holds {0, 1, 2}
    let mut c = unified(4, 3);
    let plan = c
        .find_cells(&[TokenMeta {
            pos: 5,
            seq_ids: vec![0, 1, 2],
        }])
        .unwrap();
    c.apply(&plan).unwrap().commit();
    let copies = c.seq_unshare(1, -1, -1).unwrap();
    assert_eq!(
        copies,
        vec![RowCopy {
            src_row: 0,
            dst_row: 1
        }]
    );
    assert_eq!(c.cell(0, 0).unwrap().seqs, set(&[0, 2]));
    assert_eq!(c.cell(0, 1).unwrap().seqs, SeqSet::single(1));
    for s in 0..3 {
        assert_eq!(pos_range(&c, s), (5, 5), "seq {s}");
    }
    // a sequence alone in its cells has nothing to unshare
    let mut alone = unified(4, 2);
    decode(&mut alone, 0, 0, 3);
    assert!(unchanged(&mut alone, "alone", |c| c.seq_unshare(0, -1, -1))
        .unwrap()
        .is_empty());
}

#[test]
fn per_sequence_streams_have_nothing_to_unshare() {
    // across streams seq_cp already copied the rows: nothing is shared
    let mut c = per_seq(8, 2);
    decode(&mut c, 0, 0, 3);
    assert_eq!(c.seq_cp(0, 1, -1, -1).unwrap().len(), 3);
    for s in 0..2 {
        assert!(unchanged(&mut c, "per-seq", |c| c.seq_unshare(s, -1, -1))
            .unwrap()
            .is_empty());
    }
}

#[test]
fn a_batch_log_survives_an_unshare_of_other_cells() {
    let mut c = unified(16, 3);
    decode(&mut c, 0, 0, 4);
    c.seq_cp(0, 1, -1, -1).unwrap();
    let before_batch = c.clone();
    let plan = c
        .find_cells(&[TokenMeta::new(0, 2), TokenMeta::new(1, 2)])
        .unwrap();
    let log = c.apply(&plan).unwrap();
    let copies = c.seq_unshare(1, -1, -1).unwrap();
    assert_eq!(copies.len(), 4);
    let after_unshare = c.clone();
    c.rollback(log).unwrap();
    // the batch is gone, the unshare stays
    assert_eq!(pos_range(&c, 2), (-1, -1));
    assert_eq!(c.used(0), before_batch.used(0) + 4);
    for r in &copies {
        let j = r.dst_row as u32;
        assert_eq!(c.cell(0, j), after_unshare.cell(0, j), "copy in cell {j}");
    }

    // a batch whose own (shared) cells were unshared is refused, unchanged
    let mut c = unified(8, 2);
    let plan = c
        .find_cells(&[TokenMeta {
            pos: 0,
            seq_ids: vec![0, 1],
        }])
        .unwrap();
    let log = c.apply(&plan).unwrap();
    c.seq_unshare(1, -1, -1).unwrap();
    let e = unchanged(&mut c, "stale", |c| c.rollback(log)).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
}
