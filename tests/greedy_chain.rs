//! Greedy decoding chained on the device (`Context::decode_greedy`: each
//! step takes its token from the previous step's argmax on the backend, and
//! is started before that token is read back) against the plain loop
//! (`argmax`, then `decode` of the token): the same tokens, the same cells
//! and the same last logits, to the bit, on both backends; and a plain
//! decode after a chain starts afresh.

mod common;

use glint::{BackendKind, Batch, Context, ContextParams, Model};

fn model(backend: BackendKind) -> Model {
    common::f32_model("smollm2", backend)
}

const STEPS: usize = 12;

/// The prompt in sequence 1 of a fresh context (so sequence ids are not
/// all 0), then `STEPS` greedy tokens, chained or not: the tokens, the
/// sequence's last position and the last step's logits.
fn run(m: &Model, chained: bool) -> (Vec<u32>, i32, Vec<u32>) {
    let mut c = Context::new(
        m,
        ContextParams {
            n_ctx: 256,
            n_seq_max: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let ids = m
        .tokenizer()
        .encode("The capital of France is", true, true)
        .unwrap();
    let mut b = Batch::new();
    for (i, &t) in ids.iter().enumerate() {
        b.add(t, i as i32, &[1], i + 1 == ids.len());
    }
    c.decode(&b).unwrap();
    let mut tokens = Vec::new();
    for k in 0..STEPS {
        let t = if chained {
            c.decode_greedy(1).unwrap()
        } else {
            let t = c.argmax(b.len() - 1).unwrap();
            b = Batch::from_tokens(&[t], (ids.len() + k) as i32, 1);
            c.decode(&b).unwrap();
            t
        };
        tokens.push(t);
    }
    let last = c.seq_pos_max(1).unwrap();
    let i = if chained { 0 } else { b.len() - 1 };
    let logits = c.logits(i).unwrap().iter().map(|v| v.to_bits()).collect();
    (tokens, last, logits)
}

#[test]
fn chained_greedy_equals_the_plain_loop() {
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model(backend);
        let (plain, plain_last, plain_logits) = run(&m, false);
        let (chain, chain_last, chain_logits) = run(&m, true);
        assert_eq!(chain, plain, "{backend:?}: tokens");
        assert_eq!(chain_last, plain_last, "{backend:?}: last position");
        assert!(
            chain_logits == plain_logits,
            "{backend:?}: last logits differ"
        );
        // Not one token repeated: the chain moved on every step.
        assert!(plain.windows(2).any(|w| w[0] != w[1]), "{plain:?}");
    }
}

#[test]
fn a_chain_starts_from_one_row_and_a_decode_after_it_starts_afresh() {
    let m = model(BackendKind::Wgpu);
    let mut c = Context::new(
        &m,
        ContextParams {
            n_ctx: 128,
            n_seq_max: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut b = Batch::new();
    b.add(1, 0, &[0], true);
    b.add(2, 0, &[1], true);
    c.decode(&b).unwrap();
    let e = c.decode_greedy(0).unwrap_err().to_string();
    assert!(e.contains("one output row"), "{e}");
    // Nothing was decoded by the refused call.
    assert_eq!(c.seq_pos_max(0).unwrap(), 0);
    let b = Batch::from_tokens(&[3], 1, 0);
    c.decode(&b).unwrap();
    let t = c.decode_greedy(0).unwrap();
    assert_eq!(c.seq_pos_max(0).unwrap(), 2);
    // A plain decode drops the chain's read; its own output is what
    // argmax gives, and a new chain starts from it.
    let b = Batch::from_tokens(&[t], 3, 0);
    c.decode(&b).unwrap();
    let want = c.argmax(0).unwrap();
    assert_eq!(c.decode_greedy(0).unwrap(), want);
    assert_eq!(c.seq_pos_max(0).unwrap(), 4);
}

/// The engine (`generate`, `glint serve`) chains the greedy steps of a
/// request running alone: the tokens of the plain loop, every step
/// chained, and the cells the plain path leaves.
#[test]
fn the_engine_chains_a_greedy_request_running_alone() {
    use glint::engine::{Event, Request};
    use glint::{Engine, EngineParams};
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model(backend);
        let (plain, _, _) = run(&m, false);
        let e = Engine::start(
            &m,
            ContextParams {
                n_ctx: 256,
                n_seq_max: 1,
                ..Default::default()
            },
            EngineParams::default(),
        )
        .unwrap();
        let ids = m
            .tokenizer()
            .encode("The capital of France is", true, true)
            .unwrap();
        let n_prompt = ids.len();
        let mut req = Request::new(ids);
        req.sampling.temp = 0.0;
        req.max_tokens = Some(STEPS);
        req.ignore_eos = true;
        let events = e.submit_channel(req).unwrap();
        let mut tokens = Vec::new();
        loop {
            match events.recv().expect("the engine is running") {
                Event::Delta { token, .. } => tokens.extend(token),
                Event::Done { .. } => break,
                Event::Failed(f) => panic!("{backend:?}: {f}"),
                Event::Progress { .. } => {}
            }
        }
        assert_eq!(tokens, plain, "{backend:?}: tokens");
        let stats = e.decode_stats();
        // GLINT_CHAIN=0 (for comparisons) turns the engine's chaining off.
        let off = std::env::var_os("GLINT_CHAIN").is_some_and(|v| v == "0");
        let want = if off { 0 } else { STEPS as u64 };
        assert_eq!(stats.n_chained, want, "{backend:?}: {stats:?}");
        // The last token, decoded ahead of its reading, was taken back:
        // the slot holds what the plain path leaves (it never decodes it).
        assert_eq!(
            e.slots()[0].n_cached,
            n_prompt + STEPS - 1,
            "{backend:?}: {:?}",
            e.slots()
        );
    }
}
