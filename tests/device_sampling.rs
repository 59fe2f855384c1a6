//! Sampling with a leading top-k on the wgpu backend: the device selects
//! the k candidates of each logits row (`Backend::top_k`) and only they come
//! back, not the vocabulary; the chain then picks from them what it picks
//! from the full logits.

mod common;

use glint::engine::{Engine, EngineParams, Event, Request};
use glint::{BackendKind, Batch, ContextParams, Model, ModelParams};

fn wgpu_model(name: &str) -> Model {
    let p = ModelParams {
        backend: BackendKind::Wgpu,
        ..Default::default()
    };
    Model::load(common::model(name), &p).unwrap()
}

/// The `k` largest of `logits` as `(id, logit)`, in the samplers' order
/// (descending logit, ascending id: `common::top_k`'s).
fn host_top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    common::top_k(logits, k)
        .into_iter()
        .map(|i| (i as u32, logits[i]))
        .collect()
}

/// `Context::top_k` after a decode: one dispatch and one row of candidates
/// read back (2052 bytes, where the logits are 4 a token: 192 KiB for
/// SmolLM2, 1 MiB for Gemma 3), and the candidates are the k largest
/// logits of the row read back afterwards, ids and bits, in the samplers'
/// order (descending logit, ascending id).
#[test]
fn top_k_candidates_come_from_the_device_and_are_the_logits_own() {
    for name in ["smollm2", "gemma3"] {
        let model = wgpu_model(name);
        let mut ctx = common::context(&model, 128);
        let ids = model
            .tokenizer()
            .encode("The capital of France is", true, true)
            .unwrap();
        ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
        let last = ids.len() - 1;
        let before = model.gpu_counters().unwrap();
        let got = ctx.top_k(last, 40).unwrap().expect("candidates").to_vec();
        let c = model.gpu_counters().unwrap().since(&before);
        assert_eq!(c.dispatches, 1, "{name}: {c:?}");
        let row_bytes = (1 + 2 * glint_model::TOPK_CAP as u64) * 4;
        assert_eq!(c.readback_bytes, row_bytes, "{name}: {c:?}");
        // Asked again: no work, the same answer.
        let before = model.gpu_counters().unwrap();
        assert_eq!(ctx.top_k(last, 40).unwrap().unwrap(), &got[..]);
        assert_eq!(model.gpu_counters().unwrap().since(&before).dispatches, 0);

        let want = host_top_k(ctx.logits(last).unwrap(), 40);
        assert_eq!(got.len(), 40, "{name}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (g.0, g.1.to_bits()),
                (w.0, w.1.to_bits()),
                "{name}: {got:?} vs {want:?}"
            );
        }
        // From the host logits now: the same.
        assert_eq!(ctx.top_k(last, 40).unwrap().unwrap(), &want[..], "{name}");
        // Past what the device path takes: the caller reads the logits.
        let past = glint_model::TOPK_MAX_K + 1;
        let mut ctx = common::context(&model, 128);
        ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
        assert!(ctx.top_k(last, past).unwrap().is_none(), "{name}");
    }
}

/// Two sequences' rows pending together, asked with different k: each
/// answer is its row's own (the rows are selected together, the cache
/// keyed by k), and equal to the host's sort of the logits.
#[test]
fn rows_of_one_step_asked_with_different_k_get_their_own_candidates() {
    let model = wgpu_model("smollm2");
    let mut ctx = glint::Context::new(
        &model,
        ContextParams {
            n_ctx: 128,
            n_seq_max: 2,
            kv_unified: true,
            ..Default::default()
        },
    )
    .unwrap();
    let tok = model.tokenizer();
    let a = tok.encode("The capital of France is", true, true).unwrap();
    let b = tok.encode("Water boils at", true, true).unwrap();
    let mut batch = Batch::new();
    for (s, ids) in [&a, &b].iter().enumerate() {
        for (p, &t) in ids.iter().enumerate() {
            batch.add(t, p as i32, &[s as i32], p + 1 == ids.len());
        }
    }
    ctx.decode(&batch).unwrap();
    let (ia, ib) = (a.len() - 1, a.len() + b.len() - 1);
    let got_a = ctx.top_k(ia, 40).unwrap().unwrap().to_vec();
    let got_b = ctx.top_k(ib, 10).unwrap().unwrap().to_vec();
    let again_a = ctx.top_k(ia, 40).unwrap().unwrap().to_vec();
    assert_eq!(got_a, again_a);
    for (i, got) in [(ia, &got_a), (ib, &got_b)] {
        let want = host_top_k(ctx.logits(i).unwrap(), got.len());
        assert_eq!(got, &want, "row of token {i}");
    }
    assert_ne!(got_a[..10], got_b[..], "two prompts, two rows");
}

/// The engine samples a request whose chain starts with a top-k (llama.cpp's
/// default chain, at a temperature that keeps many candidates) from the
/// device's candidates, and picks the tokens a run that reads the full
/// logits picks (asking for logprobs makes it read them), seed for seed.
#[test]
fn sampling_with_a_leading_top_k_picks_what_the_logits_pick() {
    let model = wgpu_model("smollm2");
    let ctx = ContextParams {
        n_ctx: 256,
        n_seq_max: 1,
        ..Default::default()
    };
    let engine = Engine::start(&model, ctx, EngineParams::default()).unwrap();
    let ids = model
        .tokenizer()
        .encode("Once upon a time", true, false)
        .unwrap();
    let run = |logprobs: Option<usize>, seed: u32| -> Vec<u32> {
        let mut r = Request::new(ids.clone());
        r.sampling.temp = 1.5;
        r.sampling.seed = seed;
        r.max_tokens = Some(12);
        r.ignore_eos = true;
        r.logprobs = logprobs;
        assert_eq!(r.sampling.leading_top_k(), Some(40));
        let events = engine.submit_channel(r).unwrap();
        let mut tokens = Vec::new();
        loop {
            match events.recv().expect("the engine is running") {
                Event::Delta { token, .. } => tokens.extend(token),
                Event::Done { .. } => return tokens,
                Event::Failed(e) => panic!("request failed: {e}"),
                Event::Progress { .. } => {}
            }
        }
    };
    // What a run reads back: the device's candidates (about 2 KiB a
    // token), or the logits (4 bytes a vocabulary entry a token).
    let read_back = |logprobs: Option<usize>, seed: u32| -> (Vec<u32>, u64) {
        let before = model.gpu_counters().unwrap();
        let tokens = run(logprobs, seed);
        (
            tokens,
            model.gpu_counters().unwrap().since(&before).readback_bytes,
        )
    };
    let row = model.n_vocab() as u64 * 4;
    let mut seen = Vec::new();
    for seed in [1u32, 2] {
        let (on_device, small) = read_back(None, seed);
        let (from_logits, large) = read_back(Some(1), seed);
        assert!(small < 12 * 4096, "{small} bytes read back for 12 tokens");
        assert!(large >= 12 * row, "{large} bytes read back for 12 tokens");
        assert_eq!(on_device.len(), 12);
        assert_eq!(on_device, from_logits, "seed {seed}");
        seen.push(on_device);
    }
    // The seeds matter: the runs sample, they do not decode greedily.
    assert_ne!(seen[0], seen[1], "both seeds gave the same tokens");
}
