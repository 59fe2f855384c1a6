//! llama.cpp's reference runs replayed on the cells: the self-extend run
//! (`reference/selfextend_smollm2_divadd`, the one with the right K-shift
//! sign) and the context-shift run (`reference/ctxshift_smollm2`). Fixtures:
//! `fixtures/*.json`, made from the reference folders by
//! `fixtures/make_fixtures.py`.

mod common;
use common::*;
use glint_kv::*;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn int(v: &Value) -> i32 {
    v.as_i64().unwrap() as i32
}

fn ints(v: &Value) -> Vec<i32> {
    v.as_array().unwrap().iter().map(int).collect()
}

fn op_json(op: &KvOp) -> Value {
    match *op {
        KvOp::SeqRm { seq, p0, p1 } => serde_json::json!(["seq_rm", seq, p0, p1]),
        KvOp::SeqAdd { seq, p0, p1, d } => serde_json::json!(["seq_add", seq, p0, p1, d]),
        KvOp::SeqDiv { seq, p0, p1, n } => serde_json::json!(["seq_div", seq, p0, p1, n]),
    }
}

fn sorted(mut v: Vec<i32>) -> Vec<i32> {
    v.sort();
    v
}

/// Like llama.cpp's decode: apply the pending K-shift, then place the batch.
fn decode_at(cells: &mut KvCells, p0: i32, n: i32) {
    if let Some(plan) = cells.take_shifts() {
        assert!(plan.shifts.iter().any(|&s| s != 0));
    }
    decode(cells, 0, p0, n);
}

#[test]
fn selfextend_smollm2_divadd_events_and_cells() {
    let f = fixture("selfextend_smollm2_divadd");
    let (ga_n, ga_w) = (int(&f["ga_n"]), int(&f["ga_w"]));
    assert_eq!((ga_n, ga_w, int(&f["n_prompt"])), (4, 512, 1491));
    let mut cells = unified(int(&f["n_ctx"]) as u32, 1);
    let (mut n_past, mut ga_i) = (0, 0);
    let mut events = Vec::new();
    let mut n_decoded = 0;
    for d in f["decodes"].as_array().unwrap() {
        if n_decoded > 0 {
            // the loop runs before every decode but the first
            let out = self_extend_step(&mut cells, 0, n_past, ga_i, ga_n, ga_w).unwrap();
            for p in &out.passes {
                events.push(serde_json::json!({
                    "kind": "selfextend",
                    "n_past_before": p.n_past_before, "ga_i_before": p.ga_i_before,
                    "ib": p.ib, "bd": p.bd, "dd": p.dd,
                    "calls": p.calls.iter().map(op_json).collect::<Vec<_>>(),
                    "n_past_after": p.n_past_after, "ga_i_after": p.ga_i_after,
                    "seq_pos_min": p.seq_pos_min, "seq_pos_max": p.seq_pos_max,
                }));
            }
            (n_past, ga_i) = (out.n_past, out.ga_i);
        }
        assert_eq!(
            (n_past, ga_i),
            (int(&d["pos0"]), int(&d["ga_i"])),
            "decode {d}"
        );
        // positions continue seq_pos_max + 1 (the script's autopos check)
        assert_eq!(cells.seq_pos_max(0).unwrap() + 1, n_past);
        let n = int(&d["n_tokens"]);
        decode_at(&mut cells, n_past, n);
        n_past += n;
        n_decoded += n;
        if n_decoded == 1491 {
            let after = ints(&f["cells_after_prompt"]);
            assert_eq!(seq_positions_in_order(&cells, 0), after);
        }
    }
    assert_eq!(Value::Array(events), f["events"]);
    assert_eq!(n_past, int(&f["n_past_final"]));
    let want = ints(&f["cells_final"]);
    let got = seq_positions_in_order(&cells, 0);
    assert_eq!(got.len(), int(&f["n_cells_final"]) as usize);
    assert_eq!(sorted(got.clone()), sorted(want.clone()));
    assert_eq!(got, want); // cell order too: contiguous placement from the head
    assert_eq!(cells.seq_pos_min(0).unwrap(), int(&f["seq_pos_min_final"]));
    assert_eq!(cells.seq_pos_max(0).unwrap(), int(&f["seq_pos_max_final"]));
}

#[test]
fn ctxshift_smollm2_event_and_cells() {
    let f = fixture("ctxshift_smollm2");
    let (n_ctx, n_keep) = (int(&f["n_ctx"]), int(&f["n_keep"]));
    assert_eq!((n_ctx, n_keep), (256, 16));
    let mut cells = unified(n_ctx as u32, 1);
    let mut n_past = 0;
    let mut events = Vec::new();
    for d in f["decodes"].as_array().unwrap() {
        let n = int(&d["n_tokens"]);
        if n_past + n >= n_ctx {
            let cs = context_shift(&mut cells, 0, n_keep, n_past).unwrap();
            events.push(serde_json::json!({
                "kind": "ctxshift", "n_past_before": n_past, "n_keep": n_keep,
                "n_left": n_past - n_keep, "n_discard": cs.n_discard,
                "calls": cs.calls.iter().map(op_json).collect::<Vec<_>>(),
                "seq_rm_ok": true, "n_past_after": cs.n_past,
                "seq_pos_min": cells.seq_pos_min(0).unwrap(),
                "seq_pos_max": cells.seq_pos_max(0).unwrap(),
            }));
            n_past = cs.n_past;
        }
        assert_eq!(n_past, int(&d["pos0"]));
        decode_at(&mut cells, n_past, n);
        n_past += n;
        if events.is_empty() && n_past == int(&f["n_prompt"]) {
            assert_eq!(
                seq_positions_in_order(&cells, 0),
                ints(&f["cells_after_prompt"])
            );
        }
    }
    assert_eq!(Value::Array(events), f["events"]);
    assert_eq!(n_past, int(&f["n_past_final"]));
    let want = ints(&f["cells_final"]);
    let got = seq_positions_in_order(&cells, 0);
    assert_eq!(sorted(got.clone()), sorted(want.clone()));
    // the freed cells 16.. are reused from the head, as in llama.cpp
    assert_eq!(got, want);
    assert_eq!(cells.seq_pos_min(0).unwrap(), int(&f["seq_pos_min_final"]));
    assert_eq!(cells.seq_pos_max(0).unwrap(), int(&f["seq_pos_max_final"]));
}
