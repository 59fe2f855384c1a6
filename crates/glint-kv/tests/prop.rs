//! Property test: long random sequences of operations on the real cells and
//! on a deliberately naive model (a Vec of (pos, rotated_for, BTreeSet<seq>)
//! per stream, everything recomputed by brute force); every observable is
//! compared after every step, and every error must leave the real cells
//! exactly as they were. Every batch is also undone on a copy: the rollback
//! must give back the cells before it.

use std::collections::BTreeSet;

use glint_kv::*;
use glint_testkit::Rng;

#[derive(Clone, Debug, PartialEq)]
struct NCell {
    pos: i32,
    /// The position K is rotated for (shift = pos - rotated_for).
    rotated_for: i32,
    seqs: BTreeSet<i32>,
}

impl NCell {
    fn empty() -> Self {
        NCell {
            pos: -1,
            rotated_for: -1,
            seqs: BTreeSet::new(),
        }
    }
}

struct Naive {
    kv_size: usize,
    n_seq: i32,
    per_seq: bool,
    streams: Vec<Vec<NCell>>,
}

impl Naive {
    fn stream(&self, s: i32) -> usize {
        if self.per_seq {
            s as usize
        } else {
            0
        }
    }
    fn valid(&self, s: i32) -> bool {
        (0..self.n_seq).contains(&s)
    }
    fn in_range(pos: i32, p0: i32, p1: i32) -> bool {
        let p0 = p0.max(0) as i64;
        let p1 = if p1 < 0 { i64::MAX } else { p1 as i64 };
        pos >= 0 && pos as i64 >= p0 && (pos as i64) < p1
    }
    fn all_positions(&self, s: i32) -> Vec<i32> {
        self.streams
            .iter()
            .flatten()
            .filter(|c| c.seqs.contains(&s))
            .map(|c| c.pos)
            .collect()
    }
    fn free(&self, st: usize) -> usize {
        self.streams[st].iter().filter(|c| c.pos < 0).count()
    }
    fn masked_swa(t: SwaType, n: i64, p0: i64, p1: i64) -> bool {
        match t {
            SwaType::None => false,
            SwaType::Standard => p1 - p0 >= n,
            SwaType::Chunked => p0 < p1 - p1.rem_euclid(n),
            SwaType::Symmetric => (p1 - p0).abs() > n / 2,
        }
    }
}

fn compare(real: &KvCells, naive: &Naive, rng: &mut Rng, ctx: &str) {
    for (st, cells) in naive.streams.iter().enumerate() {
        for (i, n) in cells.iter().enumerate() {
            let c = real.cell(st as u32, i as u32).unwrap();
            let shift = if n.pos < 0 { 0 } else { n.pos - n.rotated_for };
            let seqs: BTreeSet<i32> = c.seqs.iter().collect();
            assert_eq!(
                (c.pos, c.shift, &seqs),
                (n.pos, shift, &n.seqs),
                "{ctx}: cell {st}/{i}"
            );
        }
        assert_eq!(
            real.free(st as u32) as usize,
            naive.free(st),
            "{ctx}: free {st}"
        );
        let max_p1 = cells.iter().rposition(|c| c.pos >= 0).map_or(0, |i| i + 1);
        assert_eq!(real.used_max_p1(st as u32) as usize, max_p1, "{ctx}");
    }
    let any_shift = naive
        .streams
        .iter()
        .flatten()
        .any(|c| c.pos >= 0 && c.pos != c.rotated_for);
    assert_eq!(real.has_shift(), any_shift, "{ctx}: has_shift");
    for s in 0..naive.n_seq {
        let ps = naive.all_positions(s);
        let min = ps.iter().min().copied().unwrap_or(-1);
        let max = ps.iter().max().copied().unwrap_or(-1);
        assert_eq!(real.seq_pos_min(s).unwrap(), min, "{ctx}: seq_pos_min({s})");
        assert_eq!(real.seq_pos_max(s).unwrap(), max, "{ctx}: seq_pos_max({s})");
        assert_eq!(real.seq_n_cells(s).unwrap() as usize, ps.len(), "{ctx}");
    }
    // a random mask query
    let s = rng.range(0, naive.n_seq as i64);
    let p1 = rng.range(0, 48);
    let swa_type = [
        SwaType::None,
        SwaType::Standard,
        SwaType::Chunked,
        SwaType::Symmetric,
    ][rng.range(0, 4) as usize];
    let params = MaskParams {
        causal: rng.chance(80),
        swa_type,
        n_swa: rng.range(1, 12) as u32,
        alibi: rng.chance(20),
    };
    let n_kv = rng.range(0, naive.kv_size as i64 + 1) as u32;
    let m = real
        .mask(&[Query { seq_id: s, pos: p1 }], n_kv, &params)
        .unwrap();
    let cells = &naive.streams[naive.stream(s)];
    for j in 0..n_kv as usize {
        let c = &cells[j];
        let visible = c.pos >= 0
            && c.seqs.contains(&s)
            && !(params.causal && c.pos > p1)
            && !Naive::masked_swa(swa_type, params.n_swa as i64, c.pos as i64, p1 as i64);
        let want = if !visible {
            f32::NEG_INFINITY
        } else if params.alibi {
            -((c.pos - p1).abs() as f32)
        } else {
            0.0
        };
        assert_eq!(
            m[j], want,
            "{ctx}: mask seq {s} pos {p1} cell {j} {params:?}"
        );
    }
    // The device copy's words, and the count of a few queries' visible
    // pairs without the mask.
    let st = naive.stream(s);
    let cw = real.cell_words_len();
    assert_eq!(
        cw,
        1 + (naive.n_seq as usize).div_ceil(32),
        "{ctx}: words a cell"
    );
    let mut words = vec![0i32; naive.kv_size * cw];
    real.cell_words(st as u32, 0..naive.kv_size, &mut words);
    for (j, (w, c)) in words.chunks_exact(cw).zip(&naive.streams[st]).enumerate() {
        let held: BTreeSet<i32> = (0..32 * (cw as i32 - 1))
            .filter(|&q| (w[1 + q as usize / 32] as u32) >> (q % 32) & 1 == 1)
            .collect();
        assert_eq!(
            (w[0], &held),
            (c.pos, &c.seqs),
            "{ctx}: cell words {st}/{j}"
        );
    }
    let queries: Vec<Query> = (0..rng.range(1, 10))
        .map(|_| {
            let seq_id = if naive.per_seq {
                s
            } else {
                rng.range(0, naive.n_seq as i64)
            };
            Query {
                seq_id,
                pos: rng.range(0, 48),
            }
        })
        .collect();
    let m = real.mask(&queries, n_kv, &params).unwrap();
    // The backends build the same mask from the copy's words.
    let built = glint_backend::KqMask {
        first_row: 0,
        causal: params.causal,
        window: match params.swa_type {
            SwaType::None => glint_backend::MaskWindow::None,
            SwaType::Standard => glint_backend::MaskWindow::Standard(params.n_swa),
            SwaType::Chunked => glint_backend::MaskWindow::Chunked(params.n_swa),
            SwaType::Symmetric => glint_backend::MaskWindow::Symmetric(params.n_swa),
        },
        alibi: params.alibi,
        visible: None,
    };
    for (t, q) in queries.iter().enumerate() {
        for j in 0..n_kv as usize {
            let v = built.value(&words[j * cw..][..cw], q.pos, q.seq_id);
            let want = m[t * n_kv as usize + j];
            assert_eq!(
                v.to_bits(),
                want.to_bits(),
                "{ctx}: built mask {q:?} cell {j}"
            );
        }
    }
    let shown = m.iter().filter(|v| **v > f32::NEG_INFINITY).count() as u64;
    assert_eq!(
        real.mask_visible(&queries, n_kv, &params).unwrap(),
        shown,
        "{ctx}: visible pairs of {queries:?} {params:?}"
    );
}

fn check_err<T: std::fmt::Debug>(
    real: &mut KvCells,
    before: &KvCells,
    r: Result<T>,
    expect_err: bool,
    ctx: &str,
) -> Option<T> {
    match r {
        Ok(v) => {
            assert!(!expect_err, "{ctx}: expected an error, got {v:?}");
            Some(v)
        }
        Err(e) => {
            assert!(expect_err, "{ctx}: unexpected error {e}");
            assert_eq!(real, before, "{ctx}: error {e} changed the cells");
            None
        }
    }
}

/// Undoing a batch on a copy of `after` gives `before` back exactly; and so
/// it does when the K-shift ran between the batch and the undo, except that
/// the taken shifts stay taken (`before` with its shifts taken: the K rows
/// are rotated by then).
fn check_rollback(after: &KvCells, before: &KvCells, log: &CellLog, ctx: &str) {
    let mut undone = after.clone();
    undone.rollback(log.clone()).unwrap();
    assert_eq!(&undone, before, "{ctx}: rollback");
    let (mut shifted, mut want) = (after.clone(), before.clone());
    assert_eq!(
        shifted.take_shifts(),
        want.take_shifts(),
        "{ctx}: a batch changes no pending shift"
    );
    shifted.rollback(log.clone()).unwrap();
    assert_eq!(shifted, want, "{ctx}: rollback after take_shifts");
}

/// Runs `steps` random operations; returns how many rollbacks were checked
/// on a cache with a pending K-shift, and how many cells `seq_unshare` copied.
fn run(seed: u64, kv_size: u32, n_seq: u32, layout: StreamLayout, steps: usize) -> (usize, usize) {
    let mut rng = Rng(seed);
    let params = KvParams {
        kv_size,
        n_seq_max: n_seq,
        layout,
        n_pad: 1,
    };
    let mut real = KvCells::new(params).unwrap();
    let per_seq = layout == StreamLayout::PerSeq;
    let mut naive = Naive {
        kv_size: kv_size as usize,
        n_seq: n_seq as i32,
        per_seq,
        streams: vec![vec![NCell::empty(); kv_size as usize]; real.n_stream() as usize],
    };
    let id = ModelIdentity {
        arch: "llama".into(),
        n_layer: 1,
        n_embd_k_gqa: 2,
        n_embd_v_gqa: 2,
        type_k: 1,
        type_v: 1,
        k_row_bytes: 4,
        v_row_bytes: 4,
    };
    // A device's copy of the cells, kept by `take_changed`: garbage at first.
    let cw = real.cell_words_len();
    let mut mirror = vec![vec![7i32; kv_size as usize * cw]; real.n_stream() as usize];
    let n = n_seq as i64;
    let mut rollbacks_with_shift = 0;
    let mut unshared = 0;
    for step in 0..steps {
        let before = real.clone();
        // mostly valid ids, sometimes -1 or out of range
        let seq = |rng: &mut Rng| {
            if rng.chance(90) {
                rng.range(0, n)
            } else {
                rng.range(-1, n + 3)
            }
        };
        let p0 = rng.range(-3, 40);
        let p1 = if rng.chance(20) {
            -1
        } else {
            rng.range(-1, 48)
        };
        let op = rng.range(0, 106);
        let ctx = format!("seed {seed} kv {kv_size} n_seq {n_seq} {layout:?} step {step} op {op}");
        match op {
            0..=29 => {
                // a batch
                let n_tok = rng.range(1, kv_size as i64 / 2 + 3) as usize;
                let mut batch = Vec::new();
                for _ in 0..n_tok {
                    let s = seq(&mut rng);
                    let mut ids = vec![s];
                    if !per_seq && rng.chance(15) {
                        ids.push(rng.range(0, n));
                    }
                    batch.push(TokenMeta {
                        pos: rng.range(-1, 40),
                        seq_ids: ids,
                    });
                }
                let bad = batch
                    .iter()
                    .any(|t| t.pos < 0 || t.seq_ids.iter().any(|&s| !naive.valid(s)));
                let mut need = vec![0usize; naive.streams.len()];
                if !bad {
                    for t in &batch {
                        need[naive.stream(t.seq_ids[0])] += 1;
                    }
                }
                let full = need.iter().enumerate().any(|(st, &k)| k > naive.free(st));
                let r = real.find_cells(&batch);
                assert_eq!(real, before, "{ctx}: find_cells changed the cells");
                if let Some(plan) = check_err(&mut real, &before, r, bad || full, &ctx) {
                    let mut seen = BTreeSet::new();
                    for (t, p) in batch.iter().zip(plan.cells()) {
                        assert_eq!(p.stream as usize, naive.stream(t.seq_ids[0]), "{ctx}");
                        assert!(
                            naive.streams[p.stream as usize][p.cell as usize].pos < 0,
                            "{ctx}"
                        );
                        assert!(seen.insert((p.stream, p.cell)), "{ctx}: cell twice");
                    }
                    // a single-stream batch takes a contiguous run if one exists
                    if need.iter().filter(|&&k| k > 0).count() == 1 {
                        let st = need.iter().position(|&k| k > 0).unwrap();
                        let k = need[st];
                        let cells = &naive.streams[st];
                        let run_exists = (0..=cells.len() - k)
                            .any(|a| cells[a..a + k].iter().all(|c| c.pos < 0));
                        let mut planned: Vec<u32> = plan.cells().iter().map(|p| p.cell).collect();
                        planned.sort();
                        let contiguous = planned.windows(2).all(|w| w[1] == w[0] + 1);
                        assert_eq!(run_exists, contiguous, "{ctx}: contiguity {planned:?}");
                    }
                    let log = real.apply(&plan).unwrap();
                    assert_eq!(log.len(), batch.len(), "{ctx}");
                    check_rollback(&real, &before, &log, &ctx);
                    rollbacks_with_shift += before.has_shift() as usize;
                    for (t, p) in batch.iter().zip(plan.cells()) {
                        naive.streams[p.stream as usize][p.cell as usize] = NCell {
                            pos: t.pos,
                            rotated_for: t.pos,
                            seqs: t.seq_ids.iter().copied().collect(),
                        };
                    }
                }
            }
            30..=41 => {
                let s = seq(&mut rng);
                let r = real.seq_rm(s, p0, p1);
                if check_err(&mut real, &before, r, s >= n as i32, &ctx).is_some() {
                    for c in naive.streams.iter_mut().flatten() {
                        if Naive::in_range(c.pos, p0, p1) && (s < 0 || c.seqs.contains(&s)) {
                            if s < 0 {
                                c.seqs.clear();
                            } else {
                                c.seqs.remove(&s);
                            }
                            if c.seqs.is_empty() {
                                *c = NCell::empty();
                            }
                        }
                    }
                }
            }
            42..=53 => {
                let (src, dst) = (seq(&mut rng), seq(&mut rng));
                let (p0, p1) = if rng.chance(50) { (-1, -1) } else { (p0, p1) };
                let valid = naive.valid(src) && naive.valid(dst);
                let cross = valid && src != dst && naive.stream(src) != naive.stream(dst);
                let ps = if valid {
                    naive.all_positions(src)
                } else {
                    vec![]
                };
                let whole = ps.iter().all(|&p| Naive::in_range(p, p0, p1));
                let room = !cross || ps.len() <= naive.free(naive.stream(dst));
                let expect_err = !valid || (cross && (!whole || !room));
                let r = real.seq_cp(src, dst, p0, p1);
                if let Some(copies) = check_err(&mut real, &before, r, expect_err, &ctx) {
                    if !cross {
                        assert!(copies.is_empty());
                        if src != dst {
                            for c in naive.streams.iter_mut().flatten() {
                                if c.seqs.contains(&src) && Naive::in_range(c.pos, p0, p1) {
                                    c.seqs.insert(dst);
                                }
                            }
                        }
                    } else {
                        let k = kv_size as u64;
                        let (ss, ds) = (naive.stream(src), naive.stream(dst));
                        let mut src_cells: Vec<u64> = copies.iter().map(|c| c.src_row).collect();
                        src_cells.sort();
                        let want: Vec<u64> = (0..k)
                            .filter(|&i| naive.streams[ss][i as usize].seqs.contains(&src))
                            .map(|i| ss as u64 * k + i)
                            .collect();
                        assert_eq!(src_cells, want, "{ctx}: copies cover src");
                        for c in &copies {
                            assert_eq!(c.dst_row / k, ds as u64, "{ctx}");
                            let from = naive.streams[ss][(c.src_row % k) as usize].clone();
                            let to = &mut naive.streams[ds][(c.dst_row % k) as usize];
                            assert!(to.pos < 0, "{ctx}: copy into a used cell");
                            *to = NCell {
                                seqs: [dst].into_iter().collect(),
                                ..from
                            };
                        }
                    }
                }
            }
            54..=59 => {
                let s = seq(&mut rng);
                let r = real.seq_keep(s);
                if check_err(&mut real, &before, r, !naive.valid(s), &ctx).is_some() {
                    for c in naive.streams.iter_mut().flatten() {
                        if c.seqs.contains(&s) {
                            c.seqs = [s].into_iter().collect();
                        } else {
                            *c = NCell::empty();
                        }
                    }
                }
            }
            60..=74 => {
                let s = seq(&mut rng);
                let d = if rng.chance(10) {
                    0
                } else {
                    rng.range(-12, 12)
                };
                let r = real.seq_add(s, p0, p1, d);
                if check_err(&mut real, &before, r, s >= n as i32, &ctx).is_some() && d != 0 {
                    for c in naive.streams.iter_mut().flatten() {
                        if Naive::in_range(c.pos, p0, p1) && (s < 0 || c.seqs.contains(&s)) {
                            c.pos += d;
                            if c.pos < 0 {
                                *c = NCell::empty();
                            }
                        }
                    }
                }
            }
            75..=84 => {
                let s = seq(&mut rng);
                let d = rng.range(-1, 5);
                let r = real.seq_div(s, p0, p1, d);
                if check_err(&mut real, &before, r, s >= n as i32 || d <= 0, &ctx).is_some() {
                    for c in naive.streams.iter_mut().flatten() {
                        if Naive::in_range(c.pos, p0, p1) && (s < 0 || c.seqs.contains(&s)) {
                            c.pos /= d;
                        }
                    }
                }
            }
            85..=91 => {
                let plan = real.take_shifts();
                let want: Vec<i32> = naive
                    .streams
                    .iter()
                    .flatten()
                    .map(|c| if c.pos < 0 { 0 } else { c.pos - c.rotated_for })
                    .collect();
                match plan {
                    None => assert!(want.iter().all(|&s| s == 0), "{ctx}"),
                    Some(p) => assert_eq!(p.shifts, want, "{ctx}: shift plan"),
                }
                for c in naive.streams.iter_mut().flatten() {
                    c.rotated_for = c.pos;
                }
            }
            92..=97 => {
                // save a sequence, restore it into another
                let (a, b) = (rng.range(0, n), seq(&mut rng));
                let w = real.state_write(a, &id).unwrap();
                let mut blob = w.bytes.clone();
                blob.resize(blob.len() + w.storage_bytes as usize, 7);
                seal_state(&mut blob);
                let saved: Vec<NCell> = naive.streams[naive.stream(a)]
                    .iter()
                    .filter(|c| c.seqs.contains(&a))
                    .cloned()
                    .collect();
                let valid = naive.valid(b);
                let room = valid && {
                    let st = naive.stream(b);
                    let freed = naive.streams[st]
                        .iter()
                        .filter(|c| c.seqs == [b].into())
                        .count();
                    saved.len() <= naive.free(st) + freed
                };
                let r = real.state_read(&blob, b, &id);
                if let Some(res) = check_err(&mut real, &before, r, !valid || !room, &ctx) {
                    for c in naive.streams.iter_mut().flatten() {
                        c.seqs.remove(&b);
                        if c.seqs.is_empty() {
                            *c = NCell::empty();
                        }
                    }
                    let st = naive.stream(b);
                    for (row, c) in res.dst_rows.iter().zip(saved) {
                        assert_eq!(row / kv_size as u64, st as u64, "{ctx}");
                        let to = &mut naive.streams[st][(row % kv_size as u64) as usize];
                        assert!(to.pos < 0, "{ctx}: restore into a used cell");
                        *to = NCell {
                            seqs: [b].into(),
                            ..c
                        };
                    }
                }
            }
            98..=103 => {
                // copy-on-write of the cells `s` shares in [p0, p1)
                let s = seq(&mut rng);
                let valid = naive.valid(s);
                let st = if valid { naive.stream(s) } else { 0 };
                let shared: Vec<u64> = if valid {
                    (0..kv_size as u64)
                        .filter(|&i| {
                            let c = &naive.streams[st][i as usize];
                            Naive::in_range(c.pos, p0, p1)
                                && c.seqs.contains(&s)
                                && c.seqs.len() > 1
                        })
                        .map(|i| st as u64 * kv_size as u64 + i)
                        .collect()
                } else {
                    vec![]
                };
                let expect_err = !valid || shared.len() > naive.free(st);
                let r = real.seq_unshare(s, p0, p1);
                if let Some(copies) = check_err(&mut real, &before, r, expect_err, &ctx) {
                    let src: Vec<u64> = copies.iter().map(|c| c.src_row).collect();
                    assert_eq!(src, shared, "{ctx}: copies cover the shared cells");
                    unshared += copies.len();
                    let k = kv_size as u64;
                    for c in &copies {
                        assert_eq!(c.dst_row / k, st as u64, "{ctx}: copy to another stream");
                        let from = &mut naive.streams[st][(c.src_row % k) as usize];
                        from.seqs.remove(&s);
                        let copy = NCell {
                            seqs: [s].into(),
                            ..from.clone()
                        };
                        let to = &mut naive.streams[st][(c.dst_row % k) as usize];
                        assert!(to.pos < 0, "{ctx}: copy into a used cell");
                        *to = copy;
                    }
                }
            }
            _ => {
                real.clear();
                for c in naive.streams.iter_mut().flatten() {
                    *c = NCell::empty();
                }
            }
        }
        compare(&real, &naive, &mut rng, &ctx);
        // A copy kept up to date by the changed cells alone is the cells.
        for (st, copy) in mirror.iter_mut().enumerate() {
            let r = real.take_changed(st as u32);
            let w = cw;
            real.cell_words(st as u32, r.clone(), &mut copy[r.start * w..r.end * w]);
            let mut all = vec![0i32; copy.len()];
            real.cell_words(st as u32, 0..kv_size as usize, &mut all);
            assert!(
                *copy == all,
                "{ctx}: the copy of stream {st} missed a change"
            );
            assert_eq!(real.take_changed(st as u32), 0..0, "{ctx}: taken twice");
        }
        if rng.chance(5) {
            assert_eq!(
                real.clone().take_changed(0),
                0..kv_size as usize,
                "{ctx}: a clone"
            );
        }
    }
    (rollbacks_with_shift, unshared)
}

/// Every shape for seeds 1..=4; the rollbacks must have met pending shifts.
/// Returns the cells `seq_unshare` copied.
fn run_shapes(layout: StreamLayout, seed_step: u64, shapes: &[(u32, u32)]) -> usize {
    let (mut rollbacks_with_shift, mut unshared) = (0, 0);
    for seed in 1..=4 {
        for &(kv_size, n_seq) in shapes {
            let seed = seed * seed_step + kv_size as u64;
            let (r, u) = run(seed, kv_size, n_seq, layout, 3000);
            rollbacks_with_shift += r;
            unshared += u;
        }
    }
    assert!(rollbacks_with_shift > 100, "{rollbacks_with_shift}");
    unshared
}

#[test]
fn random_ops_match_the_naive_model_unified() {
    let shapes = [(1, 1), (7, 1), (16, 3), (33, 5), (64, 64)];
    // shared cells (seq_cp, multi-sequence tokens) get unshared
    let unshared = run_shapes(StreamLayout::Unified, 7919, &shapes);
    assert!(unshared > 100, "{unshared}");
}

#[test]
fn random_ops_match_the_naive_model_per_seq() {
    let shapes = [(1, 2), (8, 2), (16, 3), (12, 5)];
    // one sequence per stream: nothing is ever shared
    assert_eq!(run_shapes(StreamLayout::PerSeq, 104_729, &shapes), 0);
}
