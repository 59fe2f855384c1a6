//! Copy-on-write of shared KV cells (`Context::seq_unshare`) on the real
//! SmolLM2: seq 0 decodes a prompt, `seq_cp` shares it with seq 1 (the
//! unified cache shares cells, it copies no row), then seq 1 is unshared
//! and context-shifted while seq 0 is not, and both go on decoding. Each
//! must get the logits it gets alone: seq 0 as if nothing happened, seq 1
//! as a solo run shifted the same way. And the bug unshare prevents: a
//! shift of seq 1 without it moves seq 0's cells.

mod common;

use glint::{BackendKind, Batch, Context, ContextParams, Model, ModelParams};

/// As kv_parallel.rs's: the same math over the same keys; the shared run
/// keeps other cells (masked) and another cell order, so summation order
/// and batch shapes may differ from the solo runs.
const LAYOUT_TOL: f32 = 1e-3;

/// As wgpu_kv.rs's: on the GPU the batch shapes pick other matmul paths,
/// so summation order differs as between wgpu and cpu.
const WGPU_LAYOUT_TOL: f32 = 2e-2;

/// 33 tokens with BOS (asserted).
const PROMPT: &str = "The pass key is 71432. Remember it, because you will be asked \
                      for it later. The grass is green and the sky is blue.";
const N_KEEP: i32 = 4;
const CONT: [&str; 2] = [" The sun is yellow and warm", " What is the pass key?"];
/// Room for the prompt, the copies and both continuations.
const N_CTX: u32 = 96;

/// A run's setup: the tokens, and `gap`: the prompt's positions from
/// `N_KEEP` on are moved up by `gap` (a `seq_add` on seq 0 before it is
/// shared) and not yet K-shifted when seq 1 is unshared, so the copies
/// must carry that pending shift with them (0: none).
struct Setup {
    prompt: Vec<u32>,
    /// Continuation tokens of seq 0 and seq 1 (fixed, not sampled, so both
    /// runs decode the same tokens).
    cont: [Vec<u32>; 2],
    gap: i32,
}

impl Setup {
    fn new(model: &Model, gap: i32) -> Self {
        let tok = model.tokenizer();
        let prompt = tok.encode(PROMPT, true, true).unwrap();
        assert_eq!(prompt.len(), 33, "prompt tokens");
        let cont = CONT.map(|c| {
            let mut t = tok.encode(c, false, true).unwrap();
            t.truncate(4);
            assert_eq!(t.len(), 4, "{c:?}");
            t
        });
        Setup { prompt, cont, gap }
    }

    fn n_prompt(&self) -> i32 {
        self.prompt.len() as i32
    }

    /// One past the prompt's last position (after the gap).
    fn n_past(&self) -> i32 {
        self.n_prompt() + self.gap
    }

    fn n_cont(&self) -> i32 {
        self.cont[0].len() as i32
    }

    /// What `context_shift(_, N_KEEP, n_past)` discards.
    fn n_discard(&self) -> i32 {
        (self.n_past() - N_KEEP) / 2
    }

    /// Decode the prompt into seq 0 and open the gap.
    fn prompt(&self, ctx: &mut Context) {
        ctx.decode(&Batch::from_tokens(&self.prompt, 0, 0)).unwrap();
        ctx.seq_add(0, N_KEEP, -1, self.gap).unwrap();
        assert_eq!(ctx.cells().has_shift(), self.gap != 0);
    }

    /// Seq 0's positions after the prompt and the continuation.
    fn positions(&self) -> Vec<i32> {
        (0..N_KEEP)
            .chain(N_KEEP + self.gap..self.n_past() + self.n_cont())
            .collect()
    }
}

fn context(model: &Model, n_seq_max: u32) -> Context {
    Context::new(
        model,
        ContextParams {
            n_ctx: N_CTX,
            n_seq_max,
            kv_unified: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Positions of every cell holding `seq`, ascending.
fn seq_positions(ctx: &Context, seq: i32) -> Vec<i32> {
    let cells = ctx.cells();
    let mut out: Vec<i32> = (0..cells.params().kv_size)
        .filter_map(|i| cells.cell(0, i))
        .filter(|c| c.seqs.contains(seq))
        .map(|c| c.pos)
        .collect();
    out.sort();
    out
}

/// One sequence alone: the prompt, a context shift if asked, then the
/// continuation one token per batch: its logits per token.
fn solo(model: &Model, t: &Setup, cont: &[u32], shift: bool) -> Vec<Vec<f32>> {
    let mut ctx = context(model, 1);
    t.prompt(&mut ctx);
    let mut n_past = t.n_past();
    if shift {
        n_past = ctx.context_shift(0, N_KEEP, n_past).unwrap().n_past;
    }
    cont.iter()
        .enumerate()
        .map(|(k, &tok)| {
            ctx.decode(&Batch::from_tokens(&[tok], n_past + k as i32, 0))
                .unwrap();
            ctx.logits(0).unwrap().to_vec()
        })
        .collect()
}

/// Both sequences in one cache: seq 0's prompt shared with seq 1, seq 1
/// unshared (if asked) and context-shifted, then both continuations
/// decoded side by side (one batch per step). Returns the context and the
/// logits of seq 0 and seq 1 per step.
fn shared(model: &Model, t: &Setup, unshare: bool) -> (Context, [Vec<Vec<f32>>; 2]) {
    let mut ctx = context(model, 2);
    let (n, n_past) = (t.n_prompt(), t.n_past());
    t.prompt(&mut ctx);
    ctx.seq_cp(0, 1, -1, -1).unwrap();
    assert_eq!(
        ctx.cells().used(0),
        n as u32,
        "seq_cp shares, copies no cell"
    );

    if unshare {
        // only the range the shift moves: the dropped positions just lose seq 1
        let copied = ctx.seq_unshare(1, N_KEEP + t.n_discard(), -1).unwrap();
        assert_eq!(copied as i32, n_past - N_KEEP - t.n_discard());
        assert_eq!(ctx.cells().used(0), (n + copied as i32) as u32);
    }
    let shift = ctx.context_shift(1, N_KEEP, n_past).unwrap();
    assert_eq!(shift.n_discard, t.n_discard());

    let mut out = [Vec::new(), Vec::new()];
    for k in 0..t.n_cont() {
        let mut b = Batch::new();
        b.add(t.cont[0][k as usize], n_past + k, &[0], true);
        b.add(t.cont[1][k as usize], shift.n_past + k, &[1], true);
        ctx.decode(&b).unwrap();
        for (s, o) in out.iter_mut().enumerate() {
            o.push(ctx.logits(s).unwrap().to_vec());
        }
    }
    (ctx, out)
}

/// The largest max-abs difference over the steps.
fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| common::max_abs_diff(x, y))
        .fold(0.0, f32::max)
}

/// The shared run with unshare against both solo runs, within `tol`.
fn check_unshared(model: &Model, gap: i32, tol: f32) {
    let t = Setup::new(model, gap);
    let (ctx, [got0, got1]) = shared(model, &t, true);

    // seq 0 never moved: its prompt, then its continuation
    assert_eq!(seq_positions(&ctx, 0), t.positions());
    // seq 1: the kept positions, the slid-down rest (the shift closed the
    // gap: n_discard >= gap), its continuation
    assert!(t.n_discard() >= gap);
    let n_past1 = t.n_past() - t.n_discard();
    assert_eq!(
        seq_positions(&ctx, 1),
        (0..n_past1 + t.n_cont()).collect::<Vec<_>>()
    );
    // the kept prefix is still shared (one cell per position), nothing else
    let cells = ctx.cells();
    for i in 0..cells.params().kv_size {
        let c = cells.cell(0, i).unwrap();
        let both = c.seqs.contains(0) && c.seqs.contains(1);
        assert_eq!(both, c.pos >= 0 && c.pos < N_KEEP, "cell {i}: {c:?}");
    }

    let want0 = solo(model, &t, &t.cont[0], false);
    let want1 = solo(model, &t, &t.cont[1], true);
    let (d0, d1) = (worst(&got0, &want0), worst(&got1, &want1));
    assert!(d0 <= tol, "gap {gap}: seq 0 vs alone: max-abs {d0}");
    assert!(
        d1 <= tol,
        "gap {gap}: seq 1 vs alone, shifted: max-abs {d1}"
    );
    for (k, (g, w)) in got1.iter().zip(&want1).enumerate() {
        assert_eq!(
            common::top_k(g, 5),
            common::top_k(w, 5),
            "gap {gap}: seq 1 step {k}"
        );
    }
}

#[test]
fn unshared_sequence_shifts_alone_cpu() {
    let model = common::cpu_model("smollm2");
    check_unshared(&model, 0, LAYOUT_TOL);
    // the copies carry a pending shift (K rotated later, on both rows)
    check_unshared(&model, 3, LAYOUT_TOL);
}

#[test]
fn without_unshare_a_shift_of_one_sequence_moves_the_other() {
    let model = common::cpu_model("smollm2");
    let t = Setup::new(&model, 0);
    let n = t.n_prompt();
    let (ctx, [got0, _]) = shared(&model, &t, false);

    // the bug: the shared cells slid down for seq 0 too, and the dropped
    // range left seq 0 holes: 0..N_KEEP, then the discarded positions
    // (still seq 0's, never moved) overlapping the slid-down tail
    let mut want: Vec<i32> = (0..N_KEEP + t.n_discard())
        .chain(N_KEEP..n - t.n_discard())
        .chain(n..n + t.n_cont())
        .collect();
    want.sort();
    let got = seq_positions(&ctx, 0);
    assert_eq!(got, want);
    assert_ne!(got, t.positions());

    // and seq 0's logits are no longer its own
    let want0 = solo(&model, &t, &t.cont[0], false);
    let d = worst(&got0, &want0);
    assert!(d > 100.0 * LAYOUT_TOL, "seq 0 vs alone: max-abs {d}");
}

#[test]
fn unshared_sequence_shifts_alone_wgpu() {
    let p = ModelParams {
        backend: BackendKind::Wgpu,
        ..Default::default()
    };
    let model = Model::load(common::model("smollm2"), &p).unwrap();
    check_unshared(&model, 3, WGPU_LAYOUT_TOL);
}
