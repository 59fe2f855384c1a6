//! One test (or a few) per cell operation, including the corner cases the
//! contract names.

mod common;
use common::*;
use glint_kv::*;

#[test]
fn new_rejects_bad_params() {
    assert!(matches!(
        KvCells::new(KvParams::unified(0, 1)),
        Err(KvError::Params(_))
    ));
    assert!(matches!(
        KvCells::new(KvParams::unified(8, 0)),
        Err(KvError::Params(_))
    ));
    assert!(matches!(
        KvCells::new(KvParams::unified(8, MAX_SEQ + 1)),
        Err(KvError::Params(_))
    ));
    let c = KvCells::new(KvParams::per_seq(8, MAX_SEQ)).unwrap();
    assert_eq!(c.n_stream(), MAX_SEQ);
    assert_eq!(c.stream_of(200).unwrap(), 200);
}

#[test]
fn empty_cache_observables() {
    let c = unified(8, 2);
    assert_eq!(c.seq_pos_min(0).unwrap(), -1);
    assert_eq!(c.seq_pos_max(1).unwrap(), -1);
    assert_eq!((c.used(0), c.free(0), c.used_max_p1(0)), (0, 8, 0));
    assert!(!c.has_shift());
    assert_eq!(
        c.cell(0, 3),
        Some(Cell {
            pos: -1,
            shift: 0,
            seqs: SeqSet::new()
        })
    );
    assert_eq!(c.cell(0, 8), None);
    assert_eq!(c.cell(1, 0), None);
}

#[test]
fn seq_rm_half_open_and_negative_bounds() {
    let mut c = unified(8, 1);
    decode(&mut c, 0, 0, 6);
    c.seq_rm(0, 2, 4).unwrap();
    assert_eq!(positions(&c, 8), vec![0, 1, -1, -1, 4, 5, -1, -1]);
    c.seq_rm(0, 5, -1).unwrap(); // p1 < 0: to the end
    assert_eq!(positions(&c, 8), vec![0, 1, -1, -1, 4, -1, -1, -1]);
    c.seq_rm(0, -7, 1).unwrap(); // p0 < 0: from 0
    assert_eq!(positions(&c, 8), vec![-1, 1, -1, -1, 4, -1, -1, -1]);
    assert_eq!((pos_range(&c, 0), c.used(0)), ((1, 4), 2));
}

#[test]
fn seq_rm_of_a_shared_cell_keeps_it_for_the_other_sequence() {
    let mut c = unified(8, 3);
    decode(&mut c, 0, 0, 4);
    c.seq_cp(0, 1, 0, 2).unwrap(); // cells 0, 1 shared by 0 and 1
    assert_eq!(c.cell(0, 1).unwrap().seqs, [0, 1].into_iter().collect());
    c.seq_rm(0, -1, -1).unwrap();
    assert_eq!(positions(&c, 4), vec![0, 1, -1, -1]);
    assert_eq!(c.cell(0, 0).unwrap().seqs, SeqSet::single(1));
    assert_eq!(pos_range(&c, 0), (-1, -1));
    assert_eq!(pos_range(&c, 1), (0, 1));
    // the cell becomes empty when its last sequence leaves
    c.seq_rm(1, 1, 2).unwrap();
    assert_eq!(
        c.cell(0, 1).unwrap(),
        Cell {
            pos: -1,
            shift: 0,
            seqs: SeqSet::new()
        }
    );
    assert_eq!(c.used(0), 1);
}

#[test]
fn seq_rm_all_sequences() {
    let mut c = unified(8, 3);
    decode(&mut c, 0, 0, 3);
    decode(&mut c, 2, 0, 3);
    c.seq_rm(-1, 1, 2).unwrap();
    assert_eq!(positions(&c, 6), vec![0, -1, 2, 0, -1, 2]);
    assert_eq!(c.seq_n_cells(0).unwrap() + c.seq_n_cells(2).unwrap(), 4);
}

#[test]
fn seq_cp_same_stream_is_metadata_only() {
    let mut c = unified(8, 2);
    decode(&mut c, 0, 0, 5);
    let copies = c.seq_cp(0, 1, 1, 3).unwrap();
    assert!(copies.is_empty());
    assert_eq!(c.used(0), 5);
    assert_eq!(pos_range(&c, 1), (1, 2));
    // copying again adds nothing twice
    c.seq_cp(0, 1, -1, -1).unwrap();
    assert_eq!(c.seq_n_cells(1).unwrap(), 5);
    assert!(c.seq_cp(0, 0, -1, -1).unwrap().is_empty());
}

#[test]
fn seq_cp_across_streams_copies_rows_and_shifts() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 3);
    decode(&mut c, 1, 10, 1); // cell 0 of stream 1 is taken
    c.seq_add(0, 2, 3, 5).unwrap(); // pending shift on cell 2
    let copies = c.seq_cp(0, 1, -1, -1).unwrap();
    // cell 0 taken: goes to the lowest free cell not wanted by another copy (3)
    assert_eq!(
        copies,
        vec![
            RowCopy {
                src_row: 0,
                dst_row: 4 + 3
            },
            RowCopy {
                src_row: 1,
                dst_row: 4 + 1
            },
            RowCopy {
                src_row: 2,
                dst_row: 4 + 2
            },
        ]
    );
    assert_eq!(
        c.cell(1, 2).unwrap(),
        Cell {
            pos: 7,
            shift: 5,
            seqs: SeqSet::single(1)
        }
    );
    assert_eq!(c.cell(1, 3).unwrap().pos, 0);
    assert_eq!(pos_range(&c, 1), (0, 10));
    assert_eq!(c.seq_n_cells(1).unwrap(), 4);
}

#[test]
fn seq_cp_across_streams_partial_range_or_no_room_is_an_error() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 3);
    let e = unchanged(&mut c, "partial", |c| c.seq_cp(0, 1, 1, -1)).unwrap_err();
    assert!(
        matches!(
            e,
            KvError::PartialCrossStreamCopy {
                pos_min: 0,
                pos_max: 2,
                ..
            }
        ),
        "{e}"
    );
    unchanged(&mut c, "partial", |c| c.seq_cp(0, 1, 0, 2)).unwrap_err();
    // a range that covers every position is the whole sequence
    assert_eq!(c.seq_cp(0, 1, 0, 3).unwrap().len(), 3);
    c.seq_rm(1, -1, -1).unwrap();
    decode(&mut c, 1, 0, 2);
    let e = unchanged(&mut c, "no room", |c| c.seq_cp(0, 1, -1, -1)).unwrap_err();
    assert_eq!(
        e,
        KvError::NoRoom {
            op: "seq_cp",
            stream: 1,
            needed: 3,
            free: 2,
            kv_size: 4
        }
    );
}

#[test]
fn seq_keep() {
    let mut c = unified(8, 3);
    decode(&mut c, 0, 0, 3);
    c.seq_cp(0, 1, 0, 2).unwrap();
    decode(&mut c, 2, 0, 2);
    c.seq_keep(1).unwrap();
    assert_eq!(positions(&c, 5), vec![0, 1, -1, -1, -1]);
    assert_eq!(c.cell(0, 0).unwrap().seqs, SeqSet::single(1));
    assert_eq!(c.seq_pos_max(0).unwrap(), -1);
    assert_eq!(c.seq_pos_max(2).unwrap(), -1);
    assert_eq!(c.seq_pos_max(1).unwrap(), 1);
    assert!(c.seq_keep(-1).is_err());
}

#[test]
fn seq_add_shifts_pos_and_shift_and_empties_below_zero() {
    let mut c = unified(8, 1);
    decode(&mut c, 0, 0, 5);
    c.seq_add(0, 2, -1, -3).unwrap();
    // 2 -> -1 and 3 -> 0 ... cell 2 drops below 0: empty, shift 0
    assert_eq!(positions(&c, 5), vec![0, 1, -1, 0, 1]);
    assert_eq!(shifts(&c, 5), vec![0, 0, 0, -3, -3]);
    assert!(c.has_shift());
    assert_eq!(c.seq_pos_max(0).unwrap(), 1);
    // cells 0 and 3 share position 0: removing one keeps the other
    c.seq_rm(0, 0, 1).unwrap();
    assert_eq!(positions(&c, 5), vec![-1, 1, -1, -1, 1]);
    assert_eq!(
        (c.seq_pos_min(0).unwrap(), c.seq_n_cells(0).unwrap()),
        (1, 2)
    );
}

#[test]
fn seq_add_zero_is_a_noop_and_shifts_compose() {
    let mut c = unified(4, 1);
    decode(&mut c, 0, 0, 4);
    unchanged(&mut c, "d = 0", |c| c.seq_add(0, -1, -1, 0)).unwrap();
    assert!(!c.has_shift());
    c.seq_add(0, 1, 3, 10).unwrap();
    assert_eq!(positions(&c, 4), vec![0, 11, 12, 3]);
    c.seq_add(0, 10, 20, -10).unwrap();
    // back where they were: no shift pending at all
    assert_eq!(positions(&c, 4), vec![0, 1, 2, 3]);
    assert_eq!(shifts(&c, 4), vec![0, 0, 0, 0]);
    assert!(!c.has_shift());
    assert_eq!(c.take_shifts(), None);
}

#[test]
fn seq_add_moves_a_shared_cell_for_every_sequence() {
    let mut c = unified(4, 2);
    decode(&mut c, 0, 0, 2);
    c.seq_cp(0, 1, -1, -1).unwrap();
    c.seq_add(0, 1, 2, 10).unwrap();
    assert_eq!(c.seq_pos_max(1).unwrap(), 11);
}

#[test]
fn seq_add_overflow_is_an_error_and_changes_nothing() {
    let mut c = unified(4, 1);
    decode(&mut c, 0, 0, 2);
    decode(&mut c, 0, i32::MAX - 1, 1);
    let e = unchanged(&mut c, "overflow", |c| c.seq_add(0, -1, -1, 2)).unwrap_err();
    assert!(
        matches!(
            e,
            KvError::PosOverflow {
                pos: 2147483646,
                ..
            }
        ),
        "{e}"
    );
    // p1 < 0 reaches i32::MAX itself
    c.seq_rm(0, 5, -1).unwrap();
    assert_eq!(c.seq_pos_max(0).unwrap(), 1);
}

#[test]
fn seq_div_floor_and_shift_new_minus_old() {
    let mut c = unified(8, 1);
    decode(&mut c, 0, 0, 7);
    c.seq_div(0, 2, 6, 3).unwrap();
    assert_eq!(positions(&c, 7), vec![0, 1, 0, 1, 1, 1, 6]);
    assert_eq!(shifts(&c, 7), vec![0, 0, -2, -2, -3, -4, 0]);
    // four cells share position 1, two share 0
    assert_eq!(c.seq_n_cells(0).unwrap(), 7);
    c.seq_rm(0, 1, 2).unwrap();
    assert_eq!(positions(&c, 7), vec![0, -1, 0, -1, -1, -1, 6]);
    assert_eq!(pos_range(&c, 0), (0, 6));
}

#[test]
fn seq_div_by_one_is_a_noop_by_zero_or_negative_an_error() {
    let mut c = unified(4, 1);
    decode(&mut c, 0, 0, 4);
    unchanged(&mut c, "n = 1", |c| c.seq_div(0, -1, -1, 1)).unwrap();
    for n in [0, -2] {
        let e = unchanged(&mut c, "divisor", |c| c.seq_div(0, -1, -1, n)).unwrap_err();
        assert_eq!(e, KvError::BadDivisor(n));
    }
}

#[test]
fn unknown_sequences_are_errors_that_change_nothing() {
    let mut c = unified(4, 2);
    decode(&mut c, 0, 0, 3);
    let before = c.clone();
    for s in [2, 7, 300, i32::MAX] {
        assert!(
            matches!(c.seq_rm(s, -1, -1), Err(KvError::UnknownSeq { seq_id, .. }) if seq_id == s)
        );
        assert!(c.seq_add(s, -1, -1, 1).is_err());
        assert!(c.seq_add(s, -1, -1, 0).is_err());
        assert!(c.seq_div(s, -1, -1, 2).is_err());
        assert!(c.seq_cp(0, s, -1, -1).is_err());
        assert!(c.seq_cp(s, 0, -1, -1).is_err());
        assert!(c.seq_keep(s).is_err());
        assert!(c.seq_pos_min(s).is_err());
        assert!(c.seq_pos_max(s).is_err());
    }
    assert!(c.seq_pos_min(-1).is_err());
    assert!(c.seq_cp(-1, 0, -1, -1).is_err());
    assert_eq!(c, before);
}

#[test]
fn seq_add_and_div_on_every_sequence() {
    let mut c = unified(8, 2);
    decode(&mut c, 0, 0, 3);
    decode(&mut c, 1, 4, 2);
    c.seq_add(-1, 1, -1, 1).unwrap();
    assert_eq!(positions(&c, 5), vec![0, 2, 3, 5, 6]);
    c.seq_div(-1, -1, -1, 2).unwrap();
    assert_eq!(positions(&c, 5), vec![0, 1, 1, 2, 3]);
    assert_eq!(shifts(&c, 5), vec![0, 0, -1, -2, -2]);
}

#[test]
fn clear_and_take_shifts() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 3);
    decode(&mut c, 1, 0, 2);
    c.seq_add(1, -1, -1, 3).unwrap();
    c.seq_div(0, -1, -1, 2).unwrap();
    let plan = c.take_shifts().unwrap();
    assert_eq!(plan.kv_size, 4);
    assert_eq!(plan.shifts, vec![0, -1, -1, 0, 3, 3, 0, 0]);
    assert!(!c.has_shift());
    assert_eq!(c.take_shifts(), None);
    assert_eq!(positions(&c, 3), vec![0, 0, 1]); // positions stay
    c.clear();
    assert_eq!(
        (c.used(0), c.used(1), c.seq_pos_max(0).unwrap()),
        (0, 0, -1)
    );
}

#[test]
fn find_cells_contiguous_from_head_then_any() {
    let mut c = unified(8, 2);
    decode(&mut c, 0, 0, 6);
    c.seq_rm(0, 1, 2).unwrap();
    c.seq_rm(0, 3, 4).unwrap();
    // head moved back to cell 1; contiguous 2-run exists at 6..8
    let b: Vec<TokenMeta> = (6..8).map(|p| TokenMeta::new(p, 0)).collect();
    let plan = c.find_cells(&b).unwrap();
    assert_eq!(
        plan.cells().iter().map(|p| p.cell).collect::<Vec<_>>(),
        vec![6, 7]
    );
    // three tokens: no run of 3 -> the first empty cells from the head
    let b: Vec<TokenMeta> = (6..9).map(|p| TokenMeta::new(p, 1)).collect();
    let plan = c.find_cells(&b).unwrap();
    assert_eq!(
        plan.cells().iter().map(|p| p.cell).collect::<Vec<_>>(),
        vec![1, 3, 6]
    );
    assert_eq!(plan.rows(), vec![1, 3, 6]);
    c.apply(&plan).unwrap().commit();
    assert_eq!(positions(&c, 8), vec![0, 6, 2, 7, 4, 5, 8, -1]);
    // the plan is now stale: its cells are taken
    let e = unchanged(&mut c, "stale plan", |c| c.apply(&plan)).unwrap_err();
    assert!(matches!(e, KvError::StalePlan(_)), "{e}");
}

#[test]
fn find_cells_no_room_is_all_or_nothing() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 3);
    let b: Vec<TokenMeta> = vec![
        TokenMeta::new(0, 1),
        TokenMeta::new(3, 0),
        TokenMeta::new(4, 0),
    ];
    let e = unchanged(&mut c, "no room", |c| c.find_cells(&b)).unwrap_err();
    assert_eq!(
        e,
        KvError::NoRoom {
            op: "find_cells",
            stream: 0,
            needed: 2,
            free: 1,
            kv_size: 4
        }
    );
    assert!(e.to_string().contains("2 cells needed, 1 free"), "{e}");
}

#[test]
fn find_cells_rejects_bad_tokens() {
    let c = per_seq(4, 2);
    let bad = [
        TokenMeta {
            pos: -1,
            seq_ids: vec![0],
        },
        TokenMeta {
            pos: 0,
            seq_ids: vec![],
        },
        TokenMeta {
            pos: 0,
            seq_ids: vec![2],
        },
        TokenMeta {
            pos: 0,
            seq_ids: vec![0, 1],
        }, // two streams
    ];
    for t in bad {
        assert!(matches!(
            c.find_cells(&[TokenMeta::new(0, 0), t]),
            Err(KvError::BadBatch { index: 1, .. })
        ));
    }
    // unified: one token may belong to several sequences (one shared cell)
    let mut u = unified(4, 2);
    let plan = u
        .find_cells(&[TokenMeta {
            pos: 0,
            seq_ids: vec![0, 1],
        }])
        .unwrap();
    u.apply(&plan).unwrap().commit();
    assert_eq!(u.cell(0, 0).unwrap().seqs, [0, 1].into_iter().collect());
    assert_eq!(u.seq_pos_max(1).unwrap(), 0);
}

#[test]
fn batch_positions_need_not_continue_seq_pos_max_but_can_be_checked() {
    let mut c = unified(8, 1);
    decode(&mut c, 0, 0, 3);
    let gap = [TokenMeta::new(7, 0)];
    assert!(c.check_continues(&gap).is_err());
    assert!(c
        .check_continues(&[TokenMeta::new(3, 0), TokenMeta::new(5, 0)])
        .is_err());
    assert!(c
        .check_continues(&[TokenMeta::new(3, 0), TokenMeta::new(4, 0)])
        .is_ok());
    let plan = c.find_cells(&gap).unwrap(); // allowed by the cells
    c.apply(&plan).unwrap().commit();
    assert_eq!(c.seq_pos_max(0).unwrap(), 7);
}

#[test]
fn mask_empty_other_sequence_causal_swa_alibi() {
    let mut c = unified(8, 2);
    decode(&mut c, 0, 0, 4); // cells 0..4: seq 0 at 0..3
    decode(&mut c, 1, 0, 2); // cells 4, 5: seq 1 at 0, 1
    let q = [Query { seq_id: 0, pos: 2 }, Query { seq_id: 1, pos: 1 }];
    let m = c.mask(&q, 8, &MaskParams::causal()).unwrap();
    let i = f32::NEG_INFINITY;
    assert_eq!(&m[..8], &[0., 0., 0., i, i, i, i, i]);
    assert_eq!(&m[8..], &[i, i, i, i, 0., 0., i, i]);
    let swa = MaskParams {
        swa_type: SwaType::Standard,
        n_swa: 2,
        ..MaskParams::causal()
    };
    let m = c.mask(&q[..1], 8, &swa).unwrap();
    // p1 - p0 >= 2 masked: key 0 out, keys 1, 2 in
    assert_eq!(&m[..8], &[i, 0., 0., i, i, i, i, i]);
    let alibi = MaskParams {
        alibi: true,
        causal: false,
        ..MaskParams::causal()
    };
    let m = c.mask(&q[..1], 4, &alibi).unwrap();
    assert_eq!(m, vec![-2., -1., 0., -1.]);
    assert!(c.mask(&q, 9, &MaskParams::causal()).is_err());
    assert!(c
        .mask(&[Query { seq_id: 2, pos: 0 }], 4, &MaskParams::causal())
        .is_err());
    let zero = MaskParams {
        swa_type: SwaType::Chunked,
        n_swa: 0,
        ..MaskParams::causal()
    };
    assert!(c.mask(&q, 4, &zero).is_err());
}

#[test]
fn swa_rules_match_llama_cpp_is_masked_swa() {
    let p = |t, n| MaskParams {
        swa_type: t,
        n_swa: n,
        ..MaskParams::causal()
    };
    // standard: masked when p1 - p0 >= n_swa
    assert!(!p(SwaType::Standard, 4).is_masked_swa(7, 10));
    assert!(p(SwaType::Standard, 4).is_masked_swa(6, 10));
    // chunked: masked before the query's chunk start (p1 / n) * n
    assert!(p(SwaType::Chunked, 4).is_masked_swa(7, 9));
    assert!(!p(SwaType::Chunked, 4).is_masked_swa(8, 9));
    // symmetric: masked when |p1 - p0| > n / 2
    assert!(!p(SwaType::Symmetric, 4).is_masked_swa(12, 10));
    assert!(p(SwaType::Symmetric, 4).is_masked_swa(13, 10));
    assert!(p(SwaType::Symmetric, 4).is_masked_swa(7, 10));
    assert!(!p(SwaType::None, 1).is_masked_swa(0, 1000));
}

#[test]
fn mask_per_seq_stream_and_mixed_streams() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 2);
    decode(&mut c, 1, 0, 3);
    let m = c
        .mask(&[Query { seq_id: 1, pos: 5 }], 4, &MaskParams::causal())
        .unwrap();
    assert_eq!(m, vec![0., 0., 0., f32::NEG_INFINITY]);
    let mixed = [Query { seq_id: 0, pos: 1 }, Query { seq_id: 1, pos: 1 }];
    assert!(matches!(
        c.mask(&mixed, 4, &MaskParams::causal()),
        Err(KvError::BadQuery { index: 1, .. })
    ));
}

#[test]
fn n_kv_padding() {
    let mut c = KvCells::new(KvParams::unified(1000, 1)).unwrap();
    assert_eq!(c.n_kv(0), 256); // at least n_pad
    decode(&mut c, 0, 0, 300);
    assert_eq!((c.used_max_p1(0), c.n_kv(0)), (300, 512));
    decode(&mut c, 0, 300, 600);
    assert_eq!(c.n_kv(0), 1000); // at most kv_size
    let mut c = unified(10, 1); // n_pad 1
    decode(&mut c, 0, 0, 3);
    c.seq_rm(0, 0, 1).unwrap();
    assert_eq!(c.n_kv(0), 3);
}

#[test]
fn context_shift_validates_and_is_all_or_nothing() {
    let mut c = unified(8, 1);
    decode(&mut c, 0, 0, 8);
    let before = c.clone();
    assert!(context_shift(&mut c, 0, 9, 8).is_err());
    assert!(context_shift(&mut c, 0, -1, 8).is_err());
    assert!(context_shift(&mut c, 3, 0, 8).is_err());
    assert_eq!(c, before);
    let cs = context_shift(&mut c, 0, 2, 8).unwrap();
    assert_eq!(cs.n_discard, 3);
    assert_eq!(cs.n_past, 5);
    assert_eq!(positions(&c, 8), vec![0, 1, -1, -1, -1, 2, 3, 4]);
    assert_eq!(shifts(&c, 8), vec![0, 0, 0, 0, 0, -3, -3, -3]);
}

#[test]
fn apply_ops_restores_on_error() {
    let mut c = unified(4, 1);
    decode(&mut c, 0, 0, 4);
    let before = c.clone();
    let ops = [
        KvOp::SeqAdd {
            seq: 0,
            p0: 0,
            p1: 2,
            d: 5,
        },
        KvOp::SeqDiv {
            seq: 0,
            p0: 0,
            p1: 9,
            n: 0,
        },
    ];
    assert_eq!(c.apply_ops(&ops), Err(KvError::BadDivisor(0)));
    assert_eq!(c, before);
}

#[test]
fn rollback_undoes_a_batch_exactly() {
    let mut c = unified(8, 2);
    decode(&mut c, 0, 0, 4);
    c.seq_rm(0, 1, 2).unwrap(); // head back to cell 1
    c.seq_add(0, 2, -1, 3).unwrap(); // pending shifts on cells 2, 3
    let before = c.clone();
    let b = [TokenMeta::new(9, 0), TokenMeta::new(0, 1)];
    let plan = c.find_cells(&b).unwrap();
    let log = c.apply(&plan).unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!((c.used(0), c.seq_pos_max(1).unwrap()), (5, 0));
    c.rollback(log).unwrap();
    assert_eq!(c, before);
    assert_eq!(positions(&c, 8), vec![0, -1, 5, 6, -1, -1, -1, -1]);
    assert_eq!(shifts(&c, 4), vec![0, 0, 3, 3]);
    assert_eq!((c.used(0), c.n_kv(0), c.seq_pos_max(0).unwrap()), (3, 4, 6));
    assert_eq!(c.seq_pos_max(1).unwrap(), -1);
    // the head moved back too: the same batch finds the same cells
    assert_eq!(c.find_cells(&b).unwrap(), plan);
}

#[test]
fn rollback_after_the_k_shift_keeps_the_shift_taken() {
    let mut c = per_seq(4, 2);
    decode(&mut c, 0, 0, 2);
    c.seq_add(0, -1, -1, 2).unwrap();
    let mut shifted = c.clone();
    let plan = c.find_cells(&[TokenMeta::new(4, 0)]).unwrap();
    let log = c.apply(&plan).unwrap();
    // the decode runs the K-shift, then fails: K is rotated by now
    let want = vec![2, 2, 0, 0, 0, 0, 0, 0];
    assert_eq!(c.take_shifts().unwrap().shifts, want);
    c.rollback(log).unwrap();
    assert_eq!(positions(&c, 4), vec![2, 3, -1, -1]);
    assert_eq!(c.take_shifts(), None);
    // as before the batch, with the shift taken
    assert_eq!(shifted.take_shifts().unwrap().shifts, want);
    assert_eq!(c, shifted);
}

#[test]
fn rollback_refuses_a_stale_log_and_changes_nothing() {
    let mut c = unified(4, 2);
    decode(&mut c, 0, 0, 1);
    let log = c
        .apply(&c.find_cells(&[TokenMeta::new(1, 0)]).unwrap())
        .unwrap();
    c.seq_add(0, 1, 2, 1).unwrap(); // the batch's cell moved
    let e = unchanged(&mut c, "moved", |c| c.rollback(log)).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
    // a log of a cache of another shape
    let mut other = unified(8, 2);
    let log = other
        .apply(&other.find_cells(&[TokenMeta::new(0, 1)]).unwrap())
        .unwrap();
    let e = unchanged(&mut c, "other shape", |c| c.rollback(log)).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
}

#[test]
fn rollback_trimmed_takes_back_cells_the_decode_trimmed_since() {
    // A ring's decode of two micro-batches: the first writes positions 0..4
    // of sequence 0, position 0 shared with sequence 1; before the second,
    // the window moves on (positions 0 and 1 of sequence 0 dropped: the
    // shared cell keeps sequence 1 only, the other is emptied), and the
    // second takes cells of its own, one of them the emptied cell.
    let mut c = unified(7, 2);
    decode(&mut c, 1, 7, 1); // another sequence's cell, untouched throughout
    let before = c.clone();
    let b1 = [
        TokenMeta {
            pos: 0,
            seq_ids: vec![0, 1],
        },
        TokenMeta::new(1, 0),
        TokenMeta::new(2, 0),
        TokenMeta::new(3, 0),
    ];
    let log1 = c.apply(&c.find_cells(&b1).unwrap()).unwrap();
    c.seq_rm(0, 0, 2).unwrap();
    // Three cells of the four free (2, 5, 6): the emptied one among them.
    let b2 = [
        TokenMeta::new(4, 0),
        TokenMeta::new(5, 0),
        TokenMeta::new(6, 0),
    ];
    let plan2 = c.find_cells(&b2).unwrap();
    let log2 = c.apply(&plan2).unwrap();
    assert!(
        plan2.cells().iter().any(|p| p.cell == 2),
        "the second micro-batch takes the emptied cell again: {plan2:?}"
    );
    // The plain rollback refuses the first log once the second is undone.
    let mut plain = c.clone();
    plain.rollback(log2.clone()).unwrap();
    let e = unchanged(&mut plain, "trimmed", |c| c.rollback(log1.clone())).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
    // Newest first, trimmed: everything the decode took is given back.
    c.rollback_trimmed(log2).unwrap();
    c.rollback_trimmed(log1).unwrap();
    assert_eq!(c, before);
    assert_eq!(c.used(0), 1);
    assert_eq!(
        (c.seq_pos_max(0).unwrap(), c.seq_pos_max(1).unwrap()),
        (-1, 7)
    );
}

#[test]
fn rollback_trimmed_still_refuses_what_a_trim_cannot_do() {
    let mut c = unified(4, 2);
    decode(&mut c, 0, 0, 1);
    let batch = [TokenMeta::new(1, 0), TokenMeta::new(2, 0)];
    let log = c.apply(&c.find_cells(&batch).unwrap()).unwrap();
    // Moved, not trimmed: a K-shift is pending on the batch's cells.
    c.seq_add(0, 1, 3, 1).unwrap();
    let e = unchanged(&mut c, "moved", |c| c.rollback_trimmed(log)).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
    // A cell that gained a sequence is not a trim either.
    let mut c = unified(4, 2);
    let log = c
        .apply(&c.find_cells(&[TokenMeta::new(0, 0)]).unwrap())
        .unwrap();
    c.seq_cp(0, 1, -1, -1).unwrap();
    let e = unchanged(&mut c, "grown", |c| c.rollback_trimmed(log)).unwrap_err();
    assert!(matches!(e, KvError::StaleLog(_)), "{e}");
}
