//! The contract's test vectors and the concrete traces of the seed notes
//! (`seeds/000_*`: self-extend, seq_add/seq_div, K-shift under gdb;
//! `seeds/001_*`: streams, k_idxs, masks; `seeds/002_*`: per-sequence state).
//! Each test names the trace it pins. Where a trace printed a cell mid-loop
//! (gdb inside `llama_kv_cache_seq_add`), only the finished values are used.

mod common;
use common::*;
use glint_kv::*;

fn add(p0: i32, p1: i32, d: i32) -> KvOp {
    KvOp::SeqAdd { seq: 0, p0, p1, d }
}
fn div(p0: i32, p1: i32, n: i32) -> KvOp {
    KvOp::SeqDiv { seq: 0, p0, p1, n }
}
fn cell(c: &KvCells, i: u32) -> (i32, i32) {
    let c = c.cell(0, i).unwrap();
    (c.pos, c.shift)
}
/// `(pos, shift)` of stream 0's cells `range`.
fn cells(c: &KvCells, range: std::ops::Range<u32>) -> Vec<(i32, i32)> {
    range.map(|i| cell(c, i)).collect()
}
/// The seeds' prompt: `n` tokens of sequence 0 at positions `0..n`, in a
/// unified cache of 8192 cells.
fn prompt(n: i32) -> KvCells {
    let mut c = unified(8192, 1);
    decode(&mut c, 0, 0, n);
    c
}
/// The seeds' long runs: `prompt(2048)`, then self-extend at n_past 2048,
/// ga_i 0.
fn extend_2048(ga_n: i32, ga_w: i32) -> (KvCells, SelfExtendOutcome) {
    let mut c = prompt(2048);
    let out = self_extend_step(&mut c, 0, 2048, 0, ga_n, ga_w).unwrap();
    (c, out)
}

/// Contract + seed 000: ga_n 2, ga_w 4, five tokens; then, after the K-shift,
/// three more tokens and the second pass.
#[test]
fn seed000_ga_n2_ga_w4_two_passes() {
    let mut c = prompt(5);
    assert_eq!(positions(&c, 6), vec![0, 1, 2, 3, 4, -1]);
    let out = self_extend_step(&mut c, 0, 5, 0, 2, 4).unwrap();
    assert_eq!(out.passes.len(), 1);
    let p = &out.passes[0];
    assert_eq!((p.ib, p.bd, p.dd), (0, 2, -2));
    assert_eq!(p.calls, [add(0, 5, 0), div(0, 4, 2), add(4, 5, -2)]);
    assert_eq!((out.n_past, out.ga_i), (3, 2));
    assert_eq!(positions(&c, 5), vec![0, 0, 1, 1, 2]);
    assert_eq!(shifts(&c, 5), vec![0, -1, -1, -2, -2]);
    // after the div alone (trace "$24..$28"): cell 4 still at 4, delta 0
    let mut mid = prompt(5);
    mid.apply_ops(&p.calls[..2]).unwrap();
    assert_eq!(positions(&mid, 5), vec![0, 0, 1, 1, 4]);
    assert_eq!(shifts(&mid, 5), vec![0, -1, -1, -2, 0]);

    // the decode applies the K-shift: deltas back to 0 ("$64..$72")
    let plan = c.take_shifts().unwrap();
    assert_eq!(&plan.shifts[..5], &[0, -1, -1, -2, -2]);
    decode(&mut c, 0, 3, 3);
    assert_eq!(positions(&c, 9), vec![0, 0, 1, 1, 2, 3, 4, 5, -1]);
    assert_eq!(shifts(&c, 8), vec![0; 8]);
    let mut before_pass = c.clone();
    let out = self_extend_step(&mut c, 0, 6, 2, 2, 4).unwrap();
    let p = &out.passes[0];
    assert_eq!(out.passes.len(), 1);
    assert_eq!((p.ib, p.bd, p.dd), (1, 2, -4));
    assert_eq!(p.calls, [add(2, 6, 2), div(4, 8, 2), add(8, 8, -4)]);
    assert_eq!((out.n_past, out.ga_i), (4, 4));
    // "$117..$124"
    assert_eq!(positions(&c, 8), vec![0, 0, 1, 1, 2, 2, 3, 3]);
    assert_eq!(shifts(&c, 8), vec![0, 0, 0, 0, 0, -1, -1, -2]);
    // after the first add alone ("$88..$91": cells 4..7 at 4..7, delta 2)
    // and after the div ("$103..$110")
    before_pass.apply_op(&p.calls[0]).unwrap();
    assert_eq!(positions(&before_pass, 8), vec![0, 0, 1, 1, 4, 5, 6, 7]);
    assert_eq!(shifts(&before_pass, 8), vec![0, 0, 0, 0, 2, 2, 2, 2]);
    before_pass.apply_op(&p.calls[1]).unwrap();
    assert_eq!(cell(&before_pass, 4), (2, 0));
    assert_eq!(before_pass, c); // the last add (range 8..8) changes nothing
}

/// Contract: ga_n 4, ga_w 256, 2048 tokens — first pass (seed 000, n_past
/// 2048 -> 1856) and the end of the loop.
#[test]
fn contract_ga_n4_ga_w256_2048_tokens() {
    let (c, out) = extend_2048(4, 256);
    let mut first = prompt(2048);
    let p0 = &out.passes[0];
    assert_eq!(
        p0.calls,
        [add(0, 2048, 0), div(0, 256, 4), add(256, 2048, -192)]
    );
    assert_eq!((p0.n_past_after, p0.ga_i_after), (1856, 64));
    first.apply_ops(&p0.calls).unwrap();
    assert_eq!(cell(&first, 255), (63, -192));
    assert_eq!(cell(&first, 256), (64, -192));
    assert_eq!(cell(&first, 2047), (1855, -192));
    // second pass starts with seq_add(0, 64, 1856, 192) (seed: the gdb break)
    assert_eq!(out.passes[1].calls[0], add(64, 1856, 192));
    assert_eq!((out.n_past, out.ga_i), (512, 512));
    assert_eq!(cell(&c, 2047), (511, -1536));
    let last = out.passes.last().unwrap();
    assert_eq!((last.n_past_after, last.ga_i_after), (512, 512));
    // n_past and positions agree: every cell of the 2048 holds < 512
    assert_eq!(c.seq_pos_max(0).unwrap(), 511);
    for pass in &out.passes {
        assert!(pass.n_past_before >= pass.ga_i_before + 256);
    }
    assert!(out.n_past < out.ga_i + 256);
}

/// Seed 000: ga_n 2, ga_w 2048 at n_past 2048.
#[test]
fn seed000_ga_n2_ga_w2048() {
    let (c, out) = extend_2048(2, 2048);
    assert_eq!(out.passes.len(), 1);
    assert_eq!(
        out.passes[0].calls,
        [add(0, 2048, 0), div(0, 2048, 2), add(2048, 2048, -1024)]
    );
    assert_eq!(
        cells(&c, 0..6),
        [(0, 0), (0, -1), (1, -1), (1, -2), (2, -2), (2, -3)]
    );
    assert_eq!(
        cells(&c, 2044..2048),
        [(1022, -1022), (1022, -1023), (1023, -1023), (1023, -1024)]
    );
    assert_eq!((out.n_past, out.ga_i), (1024, 1024));
}

/// Seed 000: ga_n 4, ga_w 2048 at n_past 2048.
#[test]
fn seed000_ga_n4_ga_w2048() {
    let (c, out) = extend_2048(4, 2048);
    assert_eq!(
        out.passes[0].calls,
        [add(0, 2048, 0), div(0, 2048, 4), add(2048, 2048, -1536)]
    );
    assert_eq!(positions(&c, 8), vec![0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(shifts(&c, 8), vec![0, -1, -2, -3, -3, -4, -5, -6]);
    assert_eq!((out.n_past, out.ga_i), (512, 512));
}

/// Seed 000: ga_n 2, ga_w 1024 at n_past 2048 — two passes.
#[test]
fn seed000_ga_n2_ga_w1024_two_passes() {
    let (c, out) = extend_2048(2, 1024);
    let mut mid = prompt(2048);
    assert_eq!(out.passes.len(), 2);
    assert_eq!(
        out.passes[0].calls,
        [add(0, 2048, 0), div(0, 1024, 2), add(1024, 2048, -512)]
    );
    assert_eq!(
        (out.passes[0].n_past_after, out.passes[0].ga_i_after),
        (1536, 512)
    );
    assert_eq!(
        out.passes[1].calls,
        [
            add(512, 1536, 512),
            div(1024, 2048, 2),
            add(2048, 2048, -1024)
        ]
    );
    // after the first div (trace "$4..$14")
    mid.apply_ops(&out.passes[0].calls[..2]).unwrap();
    assert_eq!(
        cells(&mid, 0..6),
        [(0, 0), (0, -1), (1, -1), (1, -2), (2, -2), (2, -3)]
    );
    assert_eq!(
        cells(&mid, 1022..1026),
        [(511, -511), (511, -512), (1024, 0), (1025, 0)]
    );
    // after the second pass ("$21..$26")
    assert_eq!(
        cells(&c, 1024..1027),
        [(512, -512), (512, -513), (513, -513)]
    );
    assert_eq!(
        cells(&c, 1027..1030),
        [(513, -514), (514, -514), (514, -515)]
    );
    assert_eq!((out.n_past, out.ga_i), (1024, 1024));
}

#[test]
fn self_extend_rejects_bad_parameters_and_changes_nothing() {
    let mut c = unified(64, 1);
    decode(&mut c, 0, 0, 16);
    let before = c.clone();
    for (ga_n, ga_w) in [(0, 4), (-2, 4), (2, 0), (2, -4), (3, 4), (4, 2)] {
        let e = self_extend_step(&mut c, 0, 16, 0, ga_n, ga_w).unwrap_err();
        assert!(
            matches!(e, KvError::BadShiftParams { .. }),
            "{ga_n} {ga_w}: {e}"
        );
    }
    assert!(self_extend_step(&mut c, 0, -1, 0, 2, 4).is_err());
    assert!(self_extend_step(&mut c, 0, 16, -4, 2, 4).is_err());
    assert!(self_extend_step(&mut c, 1, 16, 0, 2, 4).is_err());
    // overflow of ga_i + ib*bd + ga_w
    assert!(self_extend_step(&mut c, 0, i32::MAX, i32::MAX - 8, 2, 4).is_err());
    // too many passes
    assert!(self_extend_step(&mut c, 0, i32::MAX, 0, 2, 2).is_err());
    assert_eq!(c, before);
    // below the window: no pass, nothing changed
    let out = self_extend_step(&mut c, 0, 3, 0, 2, 4).unwrap();
    assert!(out.passes.is_empty());
    assert_eq!((out.n_past, out.ga_i), (3, 0));
    // ga_n 1: passes that change nothing
    let out = self_extend_step(&mut c, 0, 16, 0, 1, 4).unwrap();
    assert_eq!(out.passes.len(), 4);
    assert_eq!(c, before);
}

/// Seed 001: 36 tokens of one sequence in a unified cache of 32768 cells:
/// sinfo idxs 0..35 (k_idxs = stream * kv_size + cell), kq_mask ne {256, 36}.
#[test]
fn seed001_unified_36_tokens_idxs_and_mask_shape() {
    let mut c = KvCells::new(KvParams::unified(32768, 1)).unwrap();
    let batch: Vec<TokenMeta> = (0..36).map(|p| TokenMeta::new(p, 0)).collect();
    let plan = c.find_cells(&batch).unwrap();
    assert_eq!(plan.rows(), (0..36).collect::<Vec<u64>>());
    c.apply(&plan).unwrap().commit();
    let n_kv = c.n_kv(0);
    assert_eq!(n_kv, 256);
    let q: Vec<Query> = (0..36).map(|p| Query { seq_id: 0, pos: p }).collect();
    let m = c.mask(&q, n_kv, &MaskParams::causal()).unwrap();
    assert_eq!(m.len(), 256 * 36);
    for (t, row) in m.chunks(256).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            assert_eq!(v == 0.0, j <= t, "token {t} cell {j}");
            assert!(v == 0.0 || v == f32::NEG_INFINITY);
        }
    }
}

/// Seed 001: two sequences, not unified: sequence s uses stream s, rows
/// s * kv_size + cell ("the first sequence would use 0-511 and the second
/// 512-1023").
#[test]
fn seed001_per_seq_streams_rows() {
    let mut c = KvCells::new(KvParams::per_seq(512, 2)).unwrap();
    let batch: Vec<TokenMeta> = (0..3)
        .flat_map(|p| [TokenMeta::new(p, 0), TokenMeta::new(p, 1)])
        .collect();
    let plan = c.find_cells(&batch).unwrap();
    assert_eq!(plan.rows(), vec![0, 512, 1, 513, 2, 514]);
    c.apply(&plan).unwrap().commit();
    assert_eq!((c.used(0), c.used(1)), (3, 3));
    assert_eq!(c.stream_of(1).unwrap(), 1);
    // the same requests in a unified cache share one stream, masks agree
    let mut u = KvCells::new(KvParams::unified(512, 2)).unwrap();
    u.apply(&u.find_cells(&batch).unwrap()).unwrap().commit();
    for s in 0..2 {
        let q = [Query { seq_id: s, pos: 2 }];
        let a = c.mask(&q, 512, &MaskParams::causal()).unwrap();
        let b = u.mask(&q, 512, &MaskParams::causal()).unwrap();
        let visible = |m: &[f32], st: u32, c: &KvCells| -> Vec<i32> {
            (0..512)
                .filter(|&j| m[j] == 0.0)
                .map(|j| c.cell(st, j as u32).unwrap().pos)
                .collect()
        };
        assert_eq!(visible(&a, s as u32, &c), visible(&b, 0, &u));
    }
}

/// Seed 001's full-cache story: 4 cells "The cat sat on" at 0..3; "The" is
/// evicted, the rest rotated back by one, "mat" goes to cell 0 at pos 3.
#[test]
fn seed001_evict_and_reuse_cell() {
    let mut c = unified(4, 1);
    decode(&mut c, 0, 0, 4);
    assert!(c.find_cells(&[TokenMeta::new(4, 0)]).is_err());
    c.seq_rm(0, 0, 1).unwrap();
    c.seq_add(0, 1, 4, -1).unwrap();
    let plan = c.take_shifts().unwrap();
    assert_eq!(plan.shifts, vec![0, -1, -1, -1]);
    decode(&mut c, 0, 3, 1);
    assert_eq!(positions(&c, 4), vec![3, 0, 1, 2]);
    assert_eq!(shifts(&c, 4), vec![0, 0, 0, 0]);
    let m = c
        .mask(&[Query { seq_id: 0, pos: 3 }], 4, &MaskParams::causal())
        .unwrap();
    assert_eq!(m, vec![0.0; 4]);
}

/// Seed 002: llama.cpp's state writer for `cells[0] = {pos 181, seq {3}}`:
/// cell_count 1, one range (0, 1), the position 181.
#[test]
fn seed002_one_cell_state() {
    let mut c = unified(16, 4);
    decode(&mut c, 3, 181, 1);
    let id = ModelIdentity {
        arch: "lfm2".into(),
        n_layer: 16,
        n_embd_k_gqa: 8,
        n_embd_v_gqa: 8,
        type_k: 1,
        type_v: 1,
        k_row_bytes: 16,
        v_row_bytes: 16,
    };
    let w = c.state_write(3, &id).unwrap();
    assert_eq!(w.src_rows, vec![0]);
    assert_eq!(w.storage_bytes, 16 * 32);
    // cell_count then (pos, shift): at the end of the header
    let n = w.bytes.len();
    let cells = &w.bytes[n - 16 - 12..n - 16];
    assert_eq!(
        cells,
        [1u32.to_le_bytes(), 181i32.to_le_bytes(), 0i32.to_le_bytes()].concat()
    );
}
