//! Two-window SelfExtend (`ContextParams::self_extend_window`) on SmolLM2:
//! a window covering the context decodes as plain attention; the result
//! does not depend on how the prompt is split into batches; it survives
//! `seq_rm`, `seq_cp` and a state save/restore; the two backends agree;
//! and the ops that would move cached positions are refused.

mod common;

use glint::{
    BackendKind, Batch, Context, ContextParams, CpuPrecision, Model, ModelParams, SelfExtendWindow,
};

/// Logits of one decode of the same tokens under two plans (batch split):
/// the window's attention computes each token alone, but the matmuls'
/// decode kernels (a few tokens) sum in another order than prefill's, in
/// plain mode as well; logits of magnitude ~20 through 30 layers.
const SPLIT_TOL: f32 = 1e-2;

/// A window covering the context takes the plain-loop attention instead
/// of the fast one (and no f16 rounding of Q): logits within this.
const PLAIN_TOL: f32 = 0.05;

/// The grouped K rebuilt after a restore is the f16 K rotated (not the
/// raw K rotated, then rounded): one more f16 rounding in distant keys.
const RESTORE_TOL: f32 = 0.02;

/// wgpu vs cpu: different kernels' rounding through 30 layers.
const BACKEND_TOL: f32 = 0.1;

/// SmolLM2 on the cpu backend in f32 (no 8-bit activations, whose steps
/// would turn last-bit differences into visible ones).
fn cpu_f32() -> Model {
    let p = ModelParams {
        backend: BackendKind::Cpu,
        cpu_precision: CpuPrecision::F32,
        ..Default::default()
    };
    Model::load(common::model("smollm2"), &p).unwrap()
}

fn prompt(model: &Model, n: usize) -> Vec<u32> {
    let text = "The quick brown fox jumps over the lazy dog while the cat watches from the \
                window and counts the birds that fly past. "
        .repeat(n / 20 + 1);
    let mut ids = model.tokenizer().encode(&text, true, false).unwrap();
    ids.truncate(n);
    ids
}

fn ctx(model: &Model, window: Option<SelfExtendWindow>, n_ubatch: u32, n_seq: u32) -> Context {
    Context::new(
        model,
        ContextParams {
            n_ctx: 1024,
            n_batch: 1024,
            n_ubatch,
            n_seq_max: n_seq,
            self_extend_window: window,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Decode `ids` at positions `from..` of `seq`, `step` tokens a call; the
/// last token's logits.
fn decode(c: &mut Context, ids: &[u32], from: usize, seq: i32, step: usize) -> Vec<f32> {
    let mut b = Batch::new();
    for (k, chunk) in ids.chunks(step).enumerate() {
        b.clear();
        for (i, &t) in chunk.iter().enumerate() {
            let pos = from + k * step + i;
            b.add(t, pos as i32, &[seq], pos == from + ids.len() - 1);
        }
        c.decode(&b).unwrap();
    }
    let last = ids.len() - 1 - (ids.len() - 1) / step * step;
    c.logits(last).unwrap().to_vec()
}

fn window() -> Option<SelfExtendWindow> {
    Some(SelfExtendWindow::new(4, 128).unwrap())
}

#[test]
fn a_covering_window_decodes_as_plain_attention() {
    let m = cpu_f32();
    let ids = prompt(&m, 300);
    let plain = decode(&mut ctx(&m, None, 512, 1), &ids, 0, 0, 512);
    let covering = Some(SelfExtendWindow::new(4, 512).unwrap());
    let win = decode(&mut ctx(&m, covering, 512, 1), &ids, 0, 0, 512);
    let d = common::max_abs_diff(&plain, &win);
    assert!(d < PLAIN_TOL, "covering window vs plain: {d}");
    // A window shorter than the prompt does change the logits.
    let narrow = decode(&mut ctx(&m, window(), 512, 1), &ids, 0, 0, 512);
    assert!(common::max_abs_diff(&plain, &narrow) > 10.0 * PLAIN_TOL);
}

#[test]
fn the_result_does_not_depend_on_the_batch_split() {
    let m = cpu_f32();
    let ids = prompt(&m, 400);
    let whole = decode(&mut ctx(&m, window(), 512, 1), &ids, 0, 0, 512);
    for (ub, step) in [(64, 512), (512, 37), (512, 1)] {
        let split = decode(&mut ctx(&m, window(), ub, 1), &ids, 0, 0, step);
        let d = common::max_abs_diff(&whole, &split);
        assert!(d < SPLIT_TOL, "n_ubatch {ub}, {step} tokens a decode: {d}");
    }
}

#[test]
fn seq_rm_seq_cp_and_a_restore_keep_it_right() {
    let m = cpu_f32();
    let ids = prompt(&m, 400);
    let (head, tail) = ids.split_at(350);
    let mut c = ctx(&m, window(), 512, 2);
    decode(&mut c, head, 0, 0, 512);
    let want = decode(&mut c, tail, 350, 0, 512);

    // seq_rm the tail and decode it again.
    c.seq_rm(0, 350, -1).unwrap();
    let again = decode(&mut c, tail, 350, 0, 512);
    let d = common::max_abs_diff(&want, &again);
    assert!(d < SPLIT_TOL, "after seq_rm: {d}");

    // seq_cp the head into sequence 1 and decode the tail there.
    c.seq_rm(0, 350, -1).unwrap();
    c.seq_cp(0, 1, -1, -1).unwrap();
    let copied = decode(&mut c, tail, 350, 1, 512);
    let d = common::max_abs_diff(&want, &copied);
    assert!(d < SPLIT_TOL, "after seq_cp: {d}");

    // Save the head, restore it into a fresh context, decode the tail.
    let state = c.state_seq_save(0).unwrap();
    let mut fresh = ctx(&m, window(), 512, 2);
    fresh.state_seq_load(&state, 1).unwrap();
    let restored = decode(&mut fresh, tail, 350, 1, 512);
    let d = common::max_abs_diff(&want, &restored);
    assert!(d < RESTORE_TOL, "after a restore: {d}");
}

#[test]
fn moving_positions_is_refused() {
    let m = cpu_f32();
    let mut c = ctx(&m, window(), 512, 1);
    decode(&mut c, &prompt(&m, 50), 0, 0, 512);
    for e in [
        c.seq_add(0, 0, -1, 5).unwrap_err(),
        c.seq_div(0, 0, -1, 2).unwrap_err(),
        c.context_shift(0, 4, 50).unwrap_err(),
    ] {
        assert!(e.to_string().contains("window mode"), "{e}");
    }
    assert!(SelfExtendWindow::new(1, 128).is_err());
    assert!(SelfExtendWindow::new(4, 130).is_err());
}

#[test]
fn wgpu_and_cpu_agree_in_window_mode() {
    let gpu = Model::load(
        common::model("smollm2"),
        &ModelParams {
            backend: BackendKind::Wgpu,
            ..Default::default()
        },
    )
    .unwrap();
    let cpu = cpu_f32();
    let ids = prompt(&cpu, 400);
    let a = decode(&mut ctx(&cpu, window(), 512, 1), &ids, 0, 0, 512);
    let b = decode(&mut ctx(&gpu, window(), 512, 1), &ids, 0, 0, 512);
    let d = common::max_abs_diff(&a, &b);
    assert!(d < BACKEND_TOL, "wgpu vs cpu: {d}");
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    assert_eq!(argmax(&a), argmax(&b));
}

#[test]
fn one_stream_per_sequence_gives_what_the_unified_cache_gives() {
    let m = cpu_f32();
    let a = prompt(&m, 300);
    let b: Vec<u32> = a.iter().rev().copied().collect();
    let run = |unified: bool| {
        let mut c = Context::new(
            &m,
            ContextParams {
                n_ctx: 1024,
                n_batch: 1024,
                n_seq_max: 2,
                kv_unified: unified,
                self_extend_window: window(),
                ..Default::default()
            },
        )
        .unwrap();
        // Both sequences in one batch.
        let mut batch = Batch::new();
        for (seq, ids) in [(0, &a), (1, &b)] {
            for (i, &t) in ids.iter().enumerate() {
                batch.add(t, i as i32, &[seq], i == ids.len() - 1);
            }
        }
        c.decode(&batch).unwrap();
        (
            c.logits(a.len() - 1).unwrap().to_vec(),
            c.logits(a.len() + b.len() - 1).unwrap().to_vec(),
        )
    };
    let (u0, u1) = run(true);
    let (s0, s1) = run(false);
    assert!(common::max_abs_diff(&u0, &s0) < SPLIT_TOL);
    assert!(common::max_abs_diff(&u1, &s1) < SPLIT_TOL);
    // Each is what the sequence gives alone.
    let alone = decode(&mut ctx(&m, window(), 512, 1), &a, 0, 0, 1024);
    assert!(common::max_abs_diff(&u0, &alone) < SPLIT_TOL);
}
