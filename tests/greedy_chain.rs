//! Greedy decoding chained on the device (`Context::decode_greedy`: each
//! step takes its token from the previous step's argmax on the backend, and
//! is started before that token is read back) against the plain loop
//! (`argmax`, then `decode` of the token): the same tokens, the same cells
//! and the same last logits, to the bit, on both backends; and a plain
//! decode after a chain starts afresh. The same for several sequences
//! chained in one step (`Context::decode_greedy_seqs`), in a unified cache
//! and in one stream per sequence, and in the engine for the choices of a
//! request.

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

/// The sequences of [`run_seqs`] (not in order, not all of them), each
/// with its own prompt.
const SEQS: [i32; 3] = [2, 0, 3];
const PROMPTS: [&str; 3] = ["The capital of France is", "Once upon a time", "1, 2, 3,"];
/// Steps of [`run_seqs`] and of the engine's three choices (fewer than
/// `STEPS`: a step of three columns takes lavapipe most of a second).
const SEQ_STEPS: usize = 4;

/// Each sequence's tokens, its last position and the last step's logits.
type Run = (Vec<Vec<u32>>, Vec<i32>, Vec<Vec<u32>>);

/// Each of `PROMPTS` in its sequence of `SEQS`, their last tokens' rows
/// in one batch, then `SEQ_STEPS` steps of one greedy token of each sequence,
/// chained (`decode_greedy_seqs`) or not. `unified`: one stream for all,
/// else one a sequence.
fn run_seqs(m: &Model, chained: bool, unified: bool) -> Run {
    let mut c = Context::new(
        m,
        ContextParams {
            n_ctx: 4 * 64,
            n_seq_max: 4,
            kv_unified: unified,
            ..Default::default()
        },
    )
    .unwrap();
    let mut b = Batch::new();
    let mut rows = Vec::new();
    for (&s, p) in SEQS.iter().zip(PROMPTS) {
        let ids = m.tokenizer().encode(p, true, true).unwrap();
        for (i, &t) in ids.iter().enumerate() {
            if i + 1 == ids.len() {
                rows.push(b.len());
            }
            b.add(t, i as i32, &[s], i + 1 == ids.len());
        }
    }
    c.decode(&b).unwrap();
    let mut tokens = vec![Vec::new(); SEQS.len()];
    for _ in 0..SEQ_STEPS {
        let next = if chained {
            c.decode_greedy_seqs(&SEQS).unwrap()
        } else {
            let next: Vec<u32> = rows.iter().map(|&i| c.argmax(i).unwrap()).collect();
            b.clear();
            for (&s, &t) in SEQS.iter().zip(&next) {
                b.add(t, c.seq_pos_max(s).unwrap() + 1, &[s], true);
            }
            c.decode(&b).unwrap();
            rows = (0..SEQS.len()).collect();
            next
        };
        for (t, n) in tokens.iter_mut().zip(next) {
            t.push(n);
        }
    }
    let last = SEQS.iter().map(|&s| c.seq_pos_max(s).unwrap()).collect();
    let logits = (0..SEQS.len())
        .map(|i| c.logits(i).unwrap().iter().map(|v| v.to_bits()).collect())
        .collect();
    (tokens, last, logits)
}

#[test]
fn chained_greedy_of_several_sequences_equals_the_plain_loop() {
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model(backend);
        for unified in [true, false] {
            let what = format!("{backend:?}, unified {unified}");
            let (plain, plain_last, plain_logits) = run_seqs(&m, false, unified);
            let (chain, chain_last, chain_logits) = run_seqs(&m, true, unified);
            assert_eq!(chain, plain, "{what}: tokens");
            assert_eq!(chain_last, plain_last, "{what}: last positions");
            for (k, (c, p)) in chain_logits.iter().zip(&plain_logits).enumerate() {
                assert!(c == p, "{what}: the last logits of row {k} differ");
            }
            // Each sequence went its own way (its own prompt), and moved on.
            assert!(
                plain[0] != plain[1] && plain[1] != plain[2] && plain[0] != plain[2],
                "{plain:?}"
            );
            for t in &plain {
                assert!(t.windows(2).any(|w| w[0] != w[1]), "{what}: {t:?}");
            }
        }
    }
}

/// What `decode_greedy_seqs` cannot chain is refused before anything is
/// decoded, the last decode's outputs kept; a step that fits then chains.
#[test]
fn a_chain_of_several_sequences_refuses_what_it_cannot_chain() {
    let m = model(BackendKind::Wgpu);
    let mut c = Context::new(
        &m,
        ContextParams {
            n_ctx: 4 * 32,
            n_seq_max: 4,
            n_ubatch: 4,
            kv_unified: false,
            ..Default::default()
        },
    )
    .unwrap();
    let mut b = Batch::new();
    for s in 0..3 {
        b.add(1 + s as u32, 0, &[s], true);
    }
    c.decode(&b).unwrap();
    let want: Vec<u32> = (0..3).map(|i| c.argmax(i).unwrap()).collect();
    for (seqs, says) in [
        (
            &[0, 1][..],
            "one output row per sequence; the last had 3 for 2",
        ),
        (&[0, 1, 1], "sequence 1 given twice"),
        (
            &[0, 1, 2],
            "3 sequences over 3 streams do not fit one micro-batch of 4",
        ),
        (&[0, 1, 7], "7"),
    ] {
        let e = c.decode_greedy_seqs(seqs).unwrap_err().to_string();
        assert!(e.contains(says), "{seqs:?}: {e}");
        for s in 0..3 {
            assert_eq!(c.seq_pos_max(s).unwrap(), 0, "{seqs:?}: sequence {s}");
        }
        assert_eq!(c.argmax(2).unwrap(), want[2], "{seqs:?}");
    }
    // Two sequences in neighbouring streams fit a micro-batch of four
    // (two tokens over two streams' rows).
    b.clear();
    b.add(4, 1, &[0], true);
    b.add(5, 1, &[1], true);
    c.decode(&b).unwrap();
    let want: Vec<u32> = (0..2).map(|i| c.argmax(i).unwrap()).collect();
    assert_eq!(c.decode_greedy_seqs(&[0, 1]).unwrap(), want);
    assert_eq!(
        (c.seq_pos_max(0).unwrap(), c.seq_pos_max(1).unwrap()),
        (2, 2)
    );
    assert_eq!(c.seq_pos_max(2).unwrap(), 0);
}

/// A decode split into micro-batches leaves only the last one's greedy
/// choices on the device: a chain from rows of an earlier one is refused
/// (nothing decoded), and after a step whose rows are all in its last
/// micro-batch, it chains.
#[test]
fn a_chain_takes_its_rows_from_the_last_micro_batch_only() {
    let m = model(BackendKind::Wgpu);
    let mut c = Context::new(
        &m,
        ContextParams {
            n_ctx: 64,
            n_seq_max: 2,
            n_ubatch: 4,
            ..Default::default()
        },
    )
    .unwrap();
    // Micro-batches of tokens 0..4 (row 0, sequence 0's) and 4..6 (row 1).
    let mut b = Batch::new();
    b.add(1, 0, &[0], true);
    for p in 0..5 {
        b.add(2 + p as u32, p, &[1], p == 4);
    }
    c.decode(&b).unwrap();
    let want = [c.argmax(0).unwrap(), c.argmax(5).unwrap()];
    let e = c.decode_greedy_seqs(&[0, 1]).unwrap_err().to_string();
    assert!(
        e.contains("rows the device still holds") && e.contains("had 1 of its 2 rows"),
        "{e}"
    );
    assert_eq!(
        (c.seq_pos_max(0).unwrap(), c.seq_pos_max(1).unwrap()),
        (0, 4)
    );
    assert_eq!([c.argmax(0).unwrap(), c.argmax(5).unwrap()], want);
    // The plain step of both: two rows in one micro-batch, and a chain on.
    b.clear();
    b.add(want[0], 1, &[0], true);
    b.add(want[1], 5, &[1], true);
    c.decode(&b).unwrap();
    let next = vec![c.argmax(0).unwrap(), c.argmax(1).unwrap()];
    assert_eq!(c.decode_greedy_seqs(&[0, 1]).unwrap(), next);
    assert_eq!(
        (c.seq_pos_max(0).unwrap(), c.seq_pos_max(1).unwrap()),
        (2, 6)
    );
}

/// `generate_parallel` (`glint generate -np`) chains greedy sequences of
/// their own prompts: the tokens of the plain loop over the same batches
/// (the prompts in one batch, then a token of each a step), with prompts
/// longer than a micro-batch, so the first step after them cannot chain
/// (their last rows are in different micro-batches) and the others do.
#[test]
fn generate_parallel_chains_from_prompts_split_into_micro_batches() {
    use glint::generate::{generate_parallel, GenerateParams};
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model(backend);
        let params = ContextParams {
            n_ctx: 3 * 64,
            n_seq_max: 3,
            n_ubatch: 4,
            ..Default::default()
        };
        let prompts: Vec<Vec<u32>> = PROMPTS
            .iter()
            .map(|p| m.tokenizer().encode(p, true, true).unwrap())
            .collect();
        // Rows 0 and 1 at least 4 tokens apart: in different micro-batches.
        assert!(prompts[1].len() >= 4, "{prompts:?}");
        // The plain loop, sequences 0..3.
        let mut c = Context::new(&m, params.clone()).unwrap();
        let mut b = Batch::new();
        let mut rows = Vec::new();
        for (s, p) in prompts.iter().enumerate() {
            for (i, &t) in p.iter().enumerate() {
                if i + 1 == p.len() {
                    rows.push(b.len());
                }
                b.add(t, i as i32, &[s as i32], i + 1 == p.len());
            }
        }
        c.decode(&b).unwrap();
        let mut plain = vec![Vec::new(); 3];
        for _ in 0..SEQ_STEPS {
            let next: Vec<u32> = rows.iter().map(|&i| c.argmax(i).unwrap()).collect();
            b.clear();
            for (s, &t) in next.iter().enumerate() {
                b.add(t, c.seq_pos_max(s as i32).unwrap() + 1, &[s as i32], true);
                plain[s].push(t);
            }
            c.decode(&b).unwrap();
            rows = (0..3).collect();
        }
        let mut c = Context::new(&m, params).unwrap();
        let mut gp = GenerateParams {
            n_predict: SEQ_STEPS as i32,
            stop_at_eog: false,
            ..Default::default()
        };
        gp.sampling.temp = 0.0;
        let mut got = vec![Vec::new(); 3];
        generate_parallel(&mut c, &prompts, &gp, &mut |s, ev| {
            got[s].extend(ev.id);
            true
        })
        .unwrap();
        assert_eq!(got, plain, "{backend:?}");
        for (s, p) in prompts.iter().enumerate() {
            // The last token, decoded ahead of its reading, was taken back.
            let last = c.seq_pos_max(s as i32).unwrap();
            assert_eq!(last as usize, p.len() + SEQ_STEPS - 2, "{backend:?}: {s}");
        }
    }
}

/// The engine chains the greedy steps of several slots together: a
/// request's three choices (one prompt, copied into three slots) give the
/// tokens and cells of the same engine with chaining off, every step after
/// the first token of each chained.
#[test]
fn the_engine_chains_the_choices_of_a_greedy_request() {
    use glint::engine::{Event, Request};
    use glint::{Engine, EngineParams};
    for backend in [BackendKind::Cpu, BackendKind::Wgpu] {
        let m = model(backend);
        let ids = m
            .tokenizer()
            .encode("The capital of France is", true, true)
            .unwrap();
        let go = |chain: bool| {
            let e = Engine::start(
                &m,
                ContextParams {
                    n_ctx: 3 * 64,
                    n_seq_max: 3,
                    ..Default::default()
                },
                EngineParams {
                    chain,
                    ..Default::default()
                },
            )
            .unwrap();
            let mut req = Request::new(ids.clone());
            req.sampling.temp = 0.0;
            req.max_tokens = Some(SEQ_STEPS);
            req.ignore_eos = true;
            req.n = 3;
            let events = e.submit_channel(req).unwrap();
            let mut tokens = vec![Vec::new(); 3];
            let mut done = 0;
            while done < 3 {
                match events.recv().expect("the engine is running") {
                    Event::Delta { index, token, .. } => tokens[index].extend(token),
                    Event::Done { .. } => done += 1,
                    Event::Failed(f) => panic!("{backend:?}: {f}"),
                    Event::Progress { .. } => {}
                }
            }
            let cached: Vec<usize> = e.slots().iter().map(|s| s.n_cached).collect();
            (tokens, cached, e.decode_stats())
        };
        let (plain, plain_cached, plain_stats) = go(false);
        let (chain, chain_cached, stats) = go(true);
        assert_eq!(chain, plain, "{backend:?}: tokens");
        assert_eq!(chain_cached, plain_cached, "{backend:?}: cells");
        assert_eq!(
            chain_cached,
            vec![ids.len() + SEQ_STEPS - 1; 3],
            "{backend:?}"
        );
        assert_eq!(plain_stats.n_chained, 0, "{backend:?}: {plain_stats:?}");
        assert!(plain[0].len() == SEQ_STEPS && plain.iter().all(|t| *t == plain[0]));
        // GLINT_CHAIN=0 (for comparisons) turns the engine's chaining off.
        let off = std::env::var_os("GLINT_CHAIN").is_some_and(|v| v == "0");
        let want = if off { 0 } else { SEQ_STEPS as u64 - 1 };
        assert_eq!(stats.n_chained, want, "{backend:?}: {stats:?}");
        // One step more: the tokens the choices end at, decoded ahead of
        // their reading and taken back.
        let more = if off { 0 } else { 1 };
        assert_eq!(stats.n_decode, plain_stats.n_decode + more, "{backend:?}");
    }
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
