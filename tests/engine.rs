//! The engine's loop through the library (no HTTP): `n` choices sharing one
//! prompt, a prompt prefix shared from a busy slot (the system-prompt
//! cache), context shift per request, and copy-on-write of shared cells
//! before a shift. Real SmolLM2 on the cpu backend.

mod common;

use glint::engine::{Event, FinishReason, Request, StopReason, TokenLogprob, Usage};
use glint::{ContextParams, Engine, EngineParams, Model};

/// A finished request: each choice's tokens and text, its stop reason and
/// counts.
#[derive(Debug, Default, Clone, PartialEq)]
struct Choice {
    tokens: Vec<u32>,
    text: String,
    stop: Option<StopReason>,
    usage: Usage,
    /// Each token's log-probabilities (with the 2 best).
    logprobs: Vec<TokenLogprob>,
    /// The request's prompt progress reports (total, cached, processed);
    /// on choice 0.
    progress: Vec<(usize, usize, usize)>,
}

/// Greedy runs whose batches differed (alone vs beside other choices, cold
/// vs from a cached or shared prefix) are not bit-identical on the cpu
/// backend: where other sequences' cells sit between a sequence's own in a
/// unified cache, attention sums its rows in other groups, and the 8-bit
/// quantization of activations turns those last bits into visible logit
/// changes. A greedy step may flip only where the two best tokens lie this
/// close (in log-probability, in both runs). The same bound as the serve
/// tests' `NEAR_TIE`.
const NEAR_TIE: f32 = 0.5;

/// Asserts that two greedy runs give the same tokens, or part only at a
/// near-tie (each run's token within `NEAR_TIE` of the other's, in both
/// runs); returns how many leading tokens they share.
fn agree_up_to_near_tie(a: &Choice, b: &Choice, what: &str) -> usize {
    let same = a
        .tokens
        .iter()
        .zip(&b.tokens)
        .take_while(|(x, y)| x == y)
        .count();
    if same < a.tokens.len().min(b.tokens.len()) {
        let (x, y) = (&a.logprobs[same], &b.logprobs[same]);
        for (mine, other) in [(x, y.token), (y, x.token)] {
            let alt = mine.top.iter().find(|t| t.0 == other).map(|t| t.2);
            assert!(
                alt.is_some_and(|l| (mine.logprob - l).abs() <= NEAR_TIE),
                "{what}: the runs part at token {same} ({} vs {}), no near-tie: {} vs {alt:?}",
                x.token,
                y.token,
                mine.logprob,
            );
        }
    }
    same
}

fn engine(model: &Model, n_ctx: u32, n_slots: u32) -> Engine {
    let ctx = ContextParams {
        n_ctx,
        n_seq_max: n_slots,
        ..Default::default()
    };
    Engine::start(model, ctx, EngineParams::default()).unwrap()
}

/// Run `req` to the end; one [`Choice`] per `req.n`.
fn run(engine: &Engine, req: Request) -> Vec<Choice> {
    let n = req.n;
    let events = engine.submit_channel(req).unwrap();
    collect(&events, n)
}

fn collect(events: &glint::engine::Events, n: usize) -> Vec<Choice> {
    let mut out = vec![Choice::default(); n];
    let mut done = 0;
    while done < n {
        match events.recv().expect("the engine is running") {
            Event::Delta {
                index,
                token,
                text,
                logprob,
            } => {
                out[index].tokens.extend(token);
                out[index].text.push_str(&text);
                out[index].logprobs.extend(logprob);
            }
            Event::Done {
                index,
                stop,
                usage,
                reason,
            } => {
                assert_eq!(reason, FinishReason::from(stop));
                out[index].stop = Some(stop);
                out[index].usage = usage;
                done += 1;
            }
            Event::Failed(e) => panic!("request failed: {e}"),
            Event::Progress {
                total,
                cached,
                processed,
            } => out[0].progress.push((total, cached, processed)),
        }
    }
    out
}

fn prompt(model: &Model, text: &str) -> Vec<u32> {
    model.tokenizer().encode(text, true, false).unwrap()
}

/// Greedy (the default chain samples at temperature 0.8), `max_tokens`
/// tokens whatever the model says.
fn request(ids: Vec<u32>, max_tokens: usize) -> Request {
    let mut r = Request::new(ids);
    r.sampling.temp = 0.0;
    r.max_tokens = Some(max_tokens);
    r.ignore_eos = true;
    r.logprobs = Some(2);
    r
}

#[test]
fn n_choices_decode_the_prompt_once_and_each_equals_its_solo_run() {
    let model = common::cpu_model("smollm2");
    let ids = prompt(&model, "The three most common colours of cars are");

    // Greedy: every choice is the solo greedy run.
    let e = engine(&model, 1024, 4);
    let mut req = request(ids.clone(), 12);
    req.n = 3;
    let choices = run(&e, req);
    let solo = run(&engine(&model, 1024, 4), request(ids.clone(), 12));
    for c in &choices {
        agree_up_to_near_tie(c, &solo[0], "a choice vs the solo run");
        assert_eq!(c.stop, Some(StopReason::NPredict));
        assert_eq!(c.usage.prompt_tokens, ids.len());
        assert_eq!(c.usage.completion_tokens, 12);
    }

    // Seeded sampling: choice i samples with seed + i. Its first token comes
    // from the prompt's logits, the very row a solo request with that seed
    // samples from, so it is the solo run's first token. (Later tokens come
    // from a batch of 2 instead of 1: the logits differ in the last bits,
    // and at temperature 1 a draw near a boundary may go the other way.)
    let sampled = |seed: u32, n: usize| {
        let mut r = request(ids.clone(), 16);
        r.n = n;
        r.sampling.temp = 1.0;
        r.sampling.seed = seed;
        run(&engine(&model, 1024, 4), r)
    };
    let two = sampled(42, 2);
    assert_eq!(two[0].tokens[0], sampled(42, 1)[0].tokens[0]);
    assert_eq!(two[1].tokens[0], sampled(43, 1)[0].tokens[0]);
    assert_ne!(two[0].tokens, two[1].tokens);
    // The same request again: the same choices.
    assert_eq!(sampled(42, 2), two);

    // More choices than slots: refused before queueing.
    let mut too_many = request(ids, 4);
    too_many.n = 5;
    let err = e.submit_channel(too_many).err().expect("refused");
    assert!(err.to_string().contains("5 choices"), "{err}");
}

#[test]
fn a_busy_slots_prefix_is_shared_into_a_new_request_and_gives_the_cold_tokens() {
    let model = common::cpu_model("smollm2");
    let system = "You are a careful assistant. Answer in one short sentence, \
                  without lists, and never mention that you are an assistant. ";
    let a = prompt(&model, &format!("{system}Question: what is rain?"));
    let b = prompt(&model, &format!("{system}Question: what is snow?"));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    assert!(common > 20, "the prompts share {common} tokens");

    let cold_b = run(&engine(&model, 2048, 4), request(b.clone(), 16));

    let e = engine(&model, 2048, 4);
    let ev_a = e.submit_channel(request(a.clone(), 48)).unwrap();
    // Wait until A generates: its prompt is in its slot's cells.
    loop {
        match ev_a.recv() {
            Some(Event::Progress { .. }) => continue,
            Some(Event::Delta { .. }) => break,
            other => panic!("expected A's first token, got {other:?}"),
        }
    }
    let warm_b = run(&e, request(b.clone(), 16));
    assert_eq!(warm_b[0].usage.cached_tokens, common);
    agree_up_to_near_tie(&warm_b[0], &cold_b[0], "warm vs cold");
    assert_eq!(cold_b[0].usage.cached_tokens, 0);
    // A goes on undisturbed.
    let rest_a = collect(&ev_a, 1);
    assert_eq!(rest_a[0].usage.completion_tokens, 48);
}

#[test]
fn context_shift_lets_a_slot_generate_past_its_context() {
    let model = common::cpu_model("smollm2");
    let ids = prompt(&model, "Once upon a time, in a small village by the sea,");
    let e = engine(&model, 128, 2);

    // Without a shift the slot ends when its context is full.
    let full = run(&e, request(ids.clone(), 300));
    assert_eq!(full[0].stop, Some(StopReason::ContextFull));
    // Tokens at positions len..128 are decoded; the one sampled last is not.
    assert_eq!(full[0].usage.completion_tokens, 128 - ids.len() + 1);

    let mut shifting = request(ids.clone(), 300);
    shifting.context_shift = true;
    shifting.n_keep = 4;
    let out = run(&e, shifting);
    assert_eq!(out[0].stop, Some(StopReason::NPredict));
    assert_eq!(out[0].usage.completion_tokens, 300);
    // The first tokens come before any shift: they equal the plain run's.
    assert_eq!(out[0].tokens[..40], full[0].tokens[..40]);
}

/// Copy-on-write. Two choices share every prompt cell; shift-mode
/// self-extend then compresses each choice's positions, step after step.
/// Choice 0's first pass must move private copies of the shared cells (else
/// it would move choice 1's prompt too, and choice 1's own pass would
/// compress the same cells a second time): both choices equal the solo run.
#[test]
fn self_extend_copies_shared_cells_so_each_choice_equals_the_solo_run() {
    let model = common::cpu_model("smollm2");
    let text = "The history of the lighthouse begins in antiquity. Sailors needed \
                fires on hills to find harbours at night, and the Pharos of Alexandria, \
                built in the third century before our era, stood for more than a thousand \
                years. Tell the story in detail:";
    let ids = prompt(&model, text);
    assert!(ids.len() > 40, "a prompt of {} tokens", ids.len());
    let req = |n: usize| {
        let mut r = request(ids.clone(), 24);
        r.n = n;
        r.ga_n = 4;
        r.ga_w = 16;
        r
    };
    let both = run(&engine(&model, 1024, 4), req(2));
    let solo = run(&engine(&model, 1024, 4), req(1));
    let plain = run(&engine(&model, 1024, 4), request(ids.clone(), 24));
    agree_up_to_near_tie(&both[0], &solo[0], "choice 0 vs solo");
    agree_up_to_near_tie(&both[1], &solo[0], "choice 1 vs solo");
    // Self-extend did change the positions the model saw.
    assert_ne!(solo[0].tokens, plain[0].tokens);
}

/// The RAM cache: a slot's prefix that a new, unrelated request cuts is
/// kept in host memory, and a later request starting with it loads it
/// instead of prefilling it, with the tokens of a cold run.
#[test]
fn a_cut_prefix_comes_back_from_the_ram_cache_with_the_cold_tokens() {
    let model = common::cpu_model("smollm2");
    let a = prompt(
        &model,
        "A recipe for bread: mix flour, water, salt and yeast, knead for ten \
         minutes, let it rise for an hour, shape it, and bake it until golden.",
    );
    let b = prompt(
        &model,
        "The capital of France is a city on the Seine called",
    );
    let c = prompt(
        &model,
        "Rain forms when water vapour condenses into droplets that",
    );
    let mut d = a.clone();
    d.extend(prompt(&model, " Then serve it warm.").into_iter().skip(1));

    let cold_d = run(&engine(&model, 1024, 2), request(d.clone(), 12));

    let e = engine(&model, 1024, 2);
    run(&e, request(a.clone(), 4)); // slot 0 holds A
    run(&e, request(b, 4)); // slot 1 (empty first) holds B
    run(&e, request(c, 4)); // slot 0 (least recently used) cuts A: saved
    let warm_d = run(&e, request(d.clone(), 12));
    assert_eq!(warm_d[0].usage.cached_tokens, a.len());
    agree_up_to_near_tie(&warm_d[0], &cold_d[0], "warm vs cold");

    // Without a RAM cache the same sequence prefills D from scratch.
    let ctx = ContextParams {
        n_ctx: 1024,
        n_seq_max: 2,
        ..Default::default()
    };
    let params = EngineParams {
        cache_ram: 0,
        ..Default::default()
    };
    let e = Engine::start(&model, ctx, params).unwrap();
    run(&e, request(a.clone(), 4));
    run(
        &e,
        request(prompt(&model, "Hello there, how are you today?"), 4),
    );
    run(&e, request(prompt(&model, "Seven times eight equals"), 4));
    assert_eq!(run(&e, request(d, 12))[0].usage.cached_tokens, 0);
}

/// Prompt progress: one report before any prompt token is decoded, then one
/// per batch with some of the prompt, `processed` growing by at most the
/// prefill cap to the whole prompt; a second run reports its cached part.
#[test]
fn prompt_progress_is_reported_batch_by_batch() {
    let model = common::cpu_model("smollm2");
    let ids = prompt(
        &model,
        &"The quick brown fox jumps over the lazy dog. ".repeat(6),
    );
    let e = Engine::start(
        &model,
        ContextParams {
            n_ctx: 1024,
            n_seq_max: 1,
            ..Default::default()
        },
        EngineParams {
            prefill_per_step: 16,
            ..Default::default()
        },
    )
    .unwrap();
    let p = run(&e, request(ids.clone(), 2)).remove(0).progress;
    let n = ids.len();
    assert_eq!(p[0], (n, 0, 0));
    assert_eq!(p.last().unwrap().2, n);
    assert_eq!(p.len(), 1 + n.div_ceil(16), "{p:?}");
    for w in p.windows(2) {
        assert!(w[1].2 > w[0].2 && w[1].2 - w[0].2 <= 16, "{p:?}");
    }
    // The same prompt again: all but its last token from the slot's cells.
    let p = run(&e, request(ids.clone(), 2)).remove(0).progress;
    assert_eq!(p, vec![(n, n - 1, n - 1), (n, n - 1, n)]);
}

/// A lazy grammar (`grammar_trigger`): the output is free until the
/// trigger appears, then the grammar holds from the trigger on; the free
/// part is what the model says without any grammar.
#[test]
fn a_lazy_grammar_holds_only_from_its_trigger() {
    let model = common::cpu_model("smollm2");
    let e = engine(&model, 1024, 1);
    let ids = prompt(&model, "Count with me: 1, 2, 3, 4,");
    let free = run(&e, request(ids.clone(), 12));
    let text = &free[0].text;
    // A number the model writes unconstrained.
    let at = text.find('7').expect("the model counts to 7");
    let mut req = request(ids.clone(), 12);
    req.grammar = Some(std::sync::Arc::new(
        glint::grammar::Grammar::parse(r#"root ::= "7" [a-z]+ "." "#).unwrap(),
    ));
    req.grammar_trigger = Some("7".into());
    req.ignore_eos = false;
    let lazy = &run(&e, req)[0];
    let (before, after) = lazy
        .text
        .split_at(lazy.text.find('7').expect("the trigger came"));
    assert_eq!(before, &text[..at], "free until the trigger");
    assert!(
        after.len() > 2
            && after[1..after.len() - 1]
                .chars()
                .all(|c| c.is_ascii_lowercase())
            && after.ends_with('.'),
        "{after:?}"
    );
    assert_eq!(lazy.stop, Some(StopReason::EndOfGeneration));
}

/// Holds the engine thread inside `send(Done)` until the test has looked
/// at what the engine publishes (`ack`).
struct HoldAtDone {
    tx: std::sync::mpsc::Sender<Event>,
    ack: std::sync::mpsc::Receiver<()>,
}

impl glint::engine::EventSink for HoldAtDone {
    fn send(&mut self, ev: Event) -> bool {
        let done = matches!(ev, Event::Done { .. });
        let ok = self.tx.send(ev).is_ok();
        if done {
            let _ = self.ack.recv();
        }
        ok
    }
    fn is_closed(&self) -> bool {
        false
    }
}

/// A client that has its answer and asks at once (llama.cpp's
/// `test_metrics_prometheus_format`: `requests_processing` 0 and
/// `n_decode_total` > 0 right after a completion) must see its slot idle
/// and the steps that answered it counted. The engine thread is held in
/// the `Done` send while the test reads; the engine once published only
/// after the step, so this read showed the slot busy and no decode.
#[test]
fn a_request_is_published_idle_before_its_done_is_sent() {
    let model = common::cpu_model("smollm2");
    let e = engine(&model, 512, 2);
    let ids = prompt(&model, "I believe");
    for n in [1, 3] {
        let (tx, rx) = std::sync::mpsc::channel();
        let (ack_tx, ack) = std::sync::mpsc::channel();
        e.submit(request(ids.clone(), n), Box::new(HoldAtDone { tx, ack }))
            .unwrap();
        let mut deltas = 0;
        loop {
            match rx.recv().expect("the engine answers") {
                Event::Done { usage, .. } => {
                    assert_eq!(usage.completion_tokens, n);
                    break;
                }
                Event::Delta { .. } => deltas += 1,
                _ => {}
            }
        }
        assert!(deltas >= 1);
        assert_eq!(e.n_processing(), 0, "max_tokens {n}");
        assert!(
            e.slots().iter().all(|s| !s.is_processing),
            "{:?}",
            e.slots()
        );
        assert!(e.slots().iter().any(|s| s.n_cached >= ids.len()));
        // One decode for the prompt, one per token after the first.
        assert!(e.decode_stats().n_decode >= n as u64, "max_tokens {n}");
        ack_tx.send(()).unwrap();
    }
}
