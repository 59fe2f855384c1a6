//! Attention masks built on the backend from its copy of the cells (the
//! default) against masks built on the host and uploaded (llama.cpp's way,
//! `Context::set_host_masks`): the same logits, to the bit, on both
//! backends, through everything that edits cells — a shared prefix
//! (`seq_cp`), several sequences in one batch, `seq_rm`, a context shift
//! (`seq_add`, the K-shift), `seq_keep`, `clear` — in the unified and the
//! per-sequence layouts, and on Gemma 3's sliding-window layers in the full
//! cache and in their ring.

mod common;

use glint::{BackendKind, Batch, Context, ContextParams, Model};

fn model(name: &str, backend: BackendKind) -> Model {
    common::f32_model(name, backend)
}

/// Every output row's logits after each decode of a script of cache edits
/// (`moves`: with position edits, which a ring refuses).
fn script(m: &Model, unified: bool, swa_full: bool, host: bool, moves: bool) -> Vec<Vec<f32>> {
    let mut c = Context::new(
        m,
        ContextParams {
            n_ctx: 512,
            n_seq_max: 3,
            kv_unified: unified,
            swa_full,
            ..Default::default()
        },
    )
    .unwrap();
    c.set_host_masks(host);
    let tok = |s: &str| m.tokenizer().encode(s, true, true).unwrap();
    let mut out = Vec::new();
    let mut run = |c: &mut Context, b: &Batch| {
        c.decode(b).unwrap();
        for i in 0..b.len() {
            if let Ok(l) = c.logits(i) {
                out.push(l.to_vec());
            }
        }
    };
    // A prompt in sequence 0, shared by 1 (per-sequence streams copy it).
    let a = tok("The capital of France is Paris, and the capital of Italy is");
    let mut b = Batch::new();
    for (i, &t) in a.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == a.len());
    }
    run(&mut c, &b);
    c.seq_cp(0, 1, -1, -1).unwrap();
    // Sequence 1 goes on from the shared prompt, 2 starts its own, in one
    // batch; then one token each for all three.
    let n = a.len() as i32;
    let other = tok("def fibonacci(n):");
    let mut b = Batch::new();
    for (i, &t) in tok(" Rome. And").iter().skip(1).enumerate() {
        b.add(t, n + i as i32, &[1], true);
    }
    for (i, &t) in other.iter().enumerate() {
        b.add(t, i as i32, &[2], i + 1 == other.len());
    }
    run(&mut c, &b);
    let next = |c: &Context, s: i32| c.seq_pos_max(s).unwrap() + 1;
    let step = |c: &Context, t: u32| {
        let mut b = Batch::new();
        for s in 0..3 {
            b.add(t + s as u32, next(c, s), &[s], true);
        }
        b
    };
    let b = step(&c, 100);
    run(&mut c, &b);
    // Sequence 0 forgets its middle; 2 shifts back (a context shift).
    c.seq_rm(0, 3, 8).unwrap();
    if moves {
        let p = next(&c, 2);
        c.seq_rm(2, 1, 4).unwrap();
        c.seq_add(2, 4, p, -3).unwrap();
    }
    let b = step(&c, 200);
    run(&mut c, &b);
    c.seq_keep(1).unwrap();
    let mut b = Batch::new();
    b.add(300, next(&c, 1), &[1], true);
    run(&mut c, &b);
    c.clear();
    let mut b = Batch::new();
    for (i, &t) in other.iter().enumerate() {
        b.add(t, i as i32, &[2], true);
    }
    run(&mut c, &b);
    out
}

#[track_caller]
fn same(what: &str, built: &[Vec<f32>], host: &[Vec<f32>]) {
    assert_eq!(built.len(), host.len(), "{what}: rows");
    assert!(built.len() >= 15, "{what}: {} rows", built.len());
    for (i, (a, b)) in built.iter().zip(host).enumerate() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(a) == bits(b), "{what}: row {i} differs");
    }
}

#[test]
fn masks_from_cells_equal_uploaded_ones_llama() {
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model("smollm2", backend);
        for unified in [true, false] {
            let what = format!("smollm2 {backend:?} unified {unified}");
            let built = script(&m, unified, true, false, true);
            let host = script(&m, unified, true, true, true);
            same(&what, &built, &host);
        }
    }
}

#[test]
fn masks_from_cells_equal_uploaded_ones_sliding_window() {
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model("gemma3", backend);
        // The full cache (with a context shift), then the ring.
        for (swa_full, moves) in [(true, true), (false, false)] {
            let what = format!("gemma3 {backend:?} swa_full {swa_full}");
            let built = script(&m, true, swa_full, false, moves);
            let host = script(&m, true, swa_full, true, moves);
            same(&what, &built, &host);
        }
    }
}
