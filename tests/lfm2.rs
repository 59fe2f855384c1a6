//! LFM2 (the `lfm2` architecture: short-convolution layers with a recurrent
//! state interleaved with grouped-query attention layers, QK-norm, NEOX
//! RoPE, `token_embd_norm` as the final norm) held to llama.cpp.
//!
//! No LFM2 weights are reachable here, so the model is made in this test,
//! deterministically, by glint's own GGUF writer ([`write_fixture`]): every
//! tensor F32 with its own random rows, SmolLM2's real tokenizer copied in,
//! 6 layers `conv conv attn conv attn conv`. `fixtures/lfm2/refs.json` holds
//! llama.cpp's run on the same bytes (its sha256 is checked first; how the
//! goldens were made: `fixtures/lfm2/README.md`): prompt ids, then greedy
//! steps with a repeat penalty (so the path does not loop), each with the
//! reference's top-8 raw logits and the margin between the two best
//! penalized ones.
//!
//! Held on both backends: the prompt ids, every step's top-8 logits within
//! [`LOGIT_TOL`] (F32 weights: only summation order and the f16 K/V cache
//! round separate the engines), and glint's own penalized greedy pick
//! wherever the reference's margin is above [`MIN_MARGIN`]. Then the
//! recurrent memory's semantics: two sequences decoded interleaved in one
//! batch give each one's solo logits; a removal inside a sequence is
//! refused with a message naming why, past its end or of all of it works;
//! a saved sequence restores to the same next logits.

mod common;

use std::path::Path;
use std::sync::OnceLock;

use glint::gguf::{Array, GgufFile, GgufWriter, Value};
use glint::quant::GgmlType;
use glint::{BackendKind, Batch, Context, ContextParams, Model, ModelParams};
use glint_testkit::Rng;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Largest |glint − llama.cpp| of a reference top-8 logit: both run F32
/// weights and an f16 K/V cache; the logits spread over about ±10.
const LOGIT_TOL: f32 = 1e-2;
/// Steps whose penalized top-2 margin is below this are not asked to pick
/// the reference's token (they are still compared logit by logit).
const MIN_MARGIN: f32 = 0.1;
/// Largest |wgpu − cpu| of a logit.
const WGPU_VS_CPU: f32 = 1e-2;

/// The fixture's shape.
const N_EMBD: usize = 64;
const N_HEAD: usize = 4;
const N_HEAD_KV: u32 = 2;
const N_FF: usize = 160;
const L_CACHE: usize = 3;
/// Per layer: a short-convolution layer?
const CONV: [bool; 6] = [true, true, false, true, false, true];
/// The generator's seed.
const SEED: u64 = 0x1f2e_3d4c_5b6a_7988;

/// Write the LFM2 fixture to `path`: SmolLM2's tokenizer (every
/// `tokenizer.*` key of `smollm2`), random F32 tensors (uniform, scaled by
/// fan-in; norms around 1), each from its own seed.
pub fn write_fixture(smollm2: &Path, path: &Path) {
    let smol = GgufFile::open(smollm2).unwrap();
    let n_vocab = match smol.get("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(t))) => t.len(),
        other => panic!("SmolLM2 has no token list: {other:?}"),
    };
    let mut w = GgufWriter::new();
    let a = "lfm2";
    let u32v = |v: usize| Value::U32(v as u32);
    w.add_kv("general.architecture", Value::String(a.into()))
        .unwrap();
    w.add_kv(
        "general.name",
        Value::String("glint lfm2 test fixture".into()),
    )
    .unwrap();
    for (k, v) in [
        ("context_length", u32v(4096)),
        ("embedding_length", u32v(N_EMBD)),
        ("block_count", u32v(CONV.len())),
        ("feed_forward_length", u32v(N_FF)),
        ("attention.head_count", u32v(N_HEAD)),
        (
            "attention.head_count_kv",
            Value::Array(Array::I32(
                CONV.iter()
                    .map(|&c| if c { 0 } else { N_HEAD_KV as i32 })
                    .collect(),
            )),
        ),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("rope.freq_base", Value::F32(1_000_000.0)),
        ("shortconv.l_cache", u32v(L_CACHE)),
        ("vocab_size", u32v(n_vocab)),
    ] {
        w.add_kv(format!("{a}.{k}"), v).unwrap();
    }
    for (k, v) in smol.metadata() {
        if k.starts_with("tokenizer.") && k != "tokenizer.chat_template" {
            w.add_kv(k.clone(), v.clone()).unwrap();
        }
    }
    let mut tensors: Vec<(String, Vec<u64>, f32, f32)> = Vec::new(); // name, dims, lo, hi
    let mat = |name: String, k: usize, n: usize| {
        let s = (3.0 / k as f32).sqrt();
        (name, vec![k as u64, n as u64], -s, s)
    };
    let norm = |name: String, n: usize| (name, vec![n as u64], 0.8f32, 1.2f32);
    tensors.push((
        "token_embd.weight".into(),
        vec![N_EMBD as u64, n_vocab as u64],
        -0.5,
        0.5,
    ));
    let hd = N_EMBD / N_HEAD;
    let nkv = hd * N_HEAD_KV as usize;
    for (il, &conv) in CONV.iter().enumerate() {
        let b = |s: &str| format!("blk.{il}.{s}");
        tensors.push(norm(b("attn_norm.weight"), N_EMBD));
        if conv {
            tensors.push((
                b("shortconv.conv.weight"),
                vec![L_CACHE as u64, N_EMBD as u64],
                -0.6,
                0.6,
            ));
            tensors.push(mat(b("shortconv.in_proj.weight"), N_EMBD, 3 * N_EMBD));
            tensors.push(mat(b("shortconv.out_proj.weight"), N_EMBD, N_EMBD));
        } else {
            tensors.push(mat(b("attn_q.weight"), N_EMBD, N_EMBD));
            tensors.push(mat(b("attn_k.weight"), N_EMBD, nkv));
            tensors.push(mat(b("attn_v.weight"), N_EMBD, nkv));
            tensors.push(mat(b("attn_output.weight"), N_EMBD, N_EMBD));
            tensors.push(norm(b("attn_q_norm.weight"), hd));
            tensors.push(norm(b("attn_k_norm.weight"), hd));
        }
        tensors.push(norm(b("ffn_norm.weight"), N_EMBD));
        tensors.push(mat(b("ffn_gate.weight"), N_EMBD, N_FF));
        tensors.push(mat(b("ffn_up.weight"), N_EMBD, N_FF));
        tensors.push(mat(b("ffn_down.weight"), N_FF, N_EMBD));
    }
    tensors.push(norm("token_embd_norm.weight".into(), N_EMBD));
    for (i, (name, dims, lo, hi)) in tensors.into_iter().enumerate() {
        let mut r = Rng(SEED ^ ((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        let n: u64 = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| r.uniform(lo, hi)).collect();
        w.add_tensor(
            name,
            &dims,
            GgmlType::F32,
            bytemuck::cast_slice(&v).to_vec(),
        )
        .unwrap();
    }
    w.write_to_path(path).unwrap();
}

/// The fixture, written once per test process.
fn fixture() -> &'static Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("glint-lfm2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("lfm2-fixture.gguf");
        write_fixture(&common::model("smollm2"), &p);
        p
    })
}

fn refs() -> &'static Json {
    static R: OnceLock<Json> = OnceLock::new();
    R.get_or_init(|| {
        let p = common::fixture("lfm2/refs.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    })
}

/// Writes the fixture where `GLINT_WRITE_LFM2` says (to make the goldens
/// with llama.cpp: `fixtures/lfm2/README.md`); without it, checks the
/// file's sha256 against the one the goldens were made from.
#[test]
fn fixture_is_the_one_the_goldens_were_made_from() {
    if let Ok(out) = std::env::var("GLINT_WRITE_LFM2") {
        write_fixture(&common::model("smollm2"), Path::new(&out));
    }
    let bytes = std::fs::read(fixture()).unwrap();
    let sha = format!("{:x}", Sha256::digest(&bytes));
    assert_eq!(
        sha,
        refs()["sha256"].as_str().unwrap(),
        "the generator changed: remake the goldens"
    );
}

fn load(backend: BackendKind) -> Model {
    let params = ModelParams {
        backend,
        ..Default::default()
    };
    Model::load(fixture(), &params).unwrap()
}

fn context(model: &Model, n_seq_max: u32) -> Context {
    Context::new(
        model,
        ContextParams {
            n_ctx: 512 * n_seq_max,
            n_batch: 512,
            n_ubatch: 512,
            n_seq_max,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Decode `tokens` of `seq` from `pos`, logits of the last one.
fn decode(ctx: &mut Context, tokens: &[u32], pos: i32, seq: i32) -> Vec<f32> {
    let mut b = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.add(t, pos + i as i32, &[seq], i + 1 == tokens.len());
    }
    ctx.decode(&b).unwrap();
    ctx.logits(tokens.len() - 1).unwrap().to_vec()
}

/// llama.cpp's repeat penalty over `history`: each distinct token's logit
/// divided by `p` when positive, times `p` otherwise.
fn penalized(logits: &[f32], history: &[u32], p: f32) -> Vec<f32> {
    let mut l = logits.to_vec();
    let mut seen = std::collections::HashSet::new();
    for &t in history {
        if seen.insert(t) {
            let v = &mut l[t as usize];
            *v = if *v > 0.0 { *v / p } else { *v * p };
        }
    }
    l
}

fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best as u32
}

/// Every prompt of the goldens on `backend`: ids, per-step top-8 logits,
/// penalized greedy picks. Returns each prompt's logits of every step.
fn run_goldens(backend: BackendKind) -> Vec<Vec<Vec<f32>>> {
    let model = load(backend);
    let r = refs();
    let (penalty, last_n) = (
        r["repeat_penalty"].as_f64().unwrap() as f32,
        r["repeat_last_n"].as_u64().unwrap() as usize,
    );
    let mut all = Vec::new();
    let (mut max_diff, mut picks, mut n_steps) = (0f32, 0, 0);
    for p in r["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let ids: Vec<u32> = serde_json::from_value(p["prompt_ids"].clone()).unwrap();
        let mine = model
            .tokenizer()
            .encode(p["text"].as_str().unwrap(), true, false)
            .unwrap();
        assert_eq!(mine, ids, "{name}: prompt ids");
        let mut ctx = context(&model, 1);
        let mut logits = decode(&mut ctx, &ids, 0, 0);
        let mut history = ids.clone();
        let mut steps = Vec::new();
        for (k, st) in p["steps"].as_array().unwrap().iter().enumerate() {
            for pair in st["top"].as_array().unwrap() {
                let (id, want) = (
                    pair[0].as_u64().unwrap() as usize,
                    pair[1].as_f64().unwrap() as f32,
                );
                max_diff = max_diff.max((logits[id] - want).abs());
                assert!(
                    (logits[id] - want).abs() <= LOGIT_TOL,
                    "{name} step {k} ({backend:?}): token {id} logit {} vs llama.cpp {want}",
                    logits[id]
                );
            }
            let tok = st["token"].as_u64().unwrap() as u32;
            let window = &history[history.len().saturating_sub(last_n)..];
            n_steps += 1;
            if st["margin"].as_f64().unwrap() as f32 > MIN_MARGIN {
                assert_eq!(
                    argmax(&penalized(&logits, window, penalty)),
                    tok,
                    "{name} step {k} ({backend:?})"
                );
                picks += 1;
            }
            steps.push(logits.clone());
            let pos = history.len() as i32;
            history.push(tok);
            logits = decode(&mut ctx, &[tok], pos, 0);
        }
        all.push(steps);
    }
    // Most steps are clear: the picks are a real check, not a formality.
    assert!(
        picks * 4 >= n_steps * 3,
        "{picks} of {n_steps} steps above the margin"
    );
    eprintln!(
        "{backend:?}: {n_steps} steps, {picks} picks held, max |glint - llama.cpp| of a top-8 logit {max_diff:.2e}"
    );
    all
}

#[test]
fn matches_llama_cpp_on_cpu_and_wgpu() {
    let cpu = run_goldens(BackendKind::Cpu);
    let gpu = run_goldens(BackendKind::Wgpu);
    for (pc, pg) in cpu.iter().zip(&gpu) {
        for (c, g) in pc.iter().zip(pg) {
            let d = c
                .iter()
                .zip(g)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(d <= WGPU_VS_CPU, "wgpu vs cpu max |diff| {d}");
        }
    }
}

/// Two prompts decoded as sequences 0 and 1 of one context, their tokens
/// interleaved in each batch: each sequence's logits are its solo run's
/// (the short convolutions keep one state per sequence), within the cpu
/// backend's batch-vs-single tolerance.
#[test]
fn interleaved_sequences_match_solo_runs() {
    let model = load(BackendKind::Cpu);
    let r = refs();
    let prompts: Vec<Vec<u32>> = r["prompts"].as_array().unwrap()[..2]
        .iter()
        .map(|p| serde_json::from_value(p["prompt_ids"].clone()).unwrap())
        .collect();
    let next = [11u32, 2025];
    let solo: Vec<Vec<f32>> = (0..2)
        .map(|i| {
            let mut ctx = context(&model, 1);
            decode(&mut ctx, &prompts[i], 0, 0);
            decode(&mut ctx, &[next[i]], prompts[i].len() as i32, 0)
        })
        .collect();
    let mut ctx = context(&model, 2);
    // Prompt tokens alternate between the sequences while both have some.
    let mut b = Batch::new();
    let n = prompts[0].len().max(prompts[1].len());
    for k in 0..n {
        for (s, p) in prompts.iter().enumerate() {
            if let Some(&t) = p.get(k) {
                b.add(t, k as i32, &[s as i32], false);
            }
        }
    }
    ctx.decode(&b).unwrap();
    let mut b = Batch::new();
    for (s, (p, &t)) in prompts.iter().zip(&next).enumerate() {
        b.add(t, p.len() as i32, &[s as i32], true);
    }
    ctx.decode(&b).unwrap();
    for (s, want) in solo.iter().enumerate() {
        let got = ctx.logits(s).unwrap();
        let d = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-3, "sequence {s}: max |interleaved - solo| {d}");
    }
}

/// The recurrent state's sequence operations: a removal inside a sequence
/// is refused, naming why, and changes nothing; past its end or of all of
/// it works; a partial copy is refused, a whole one works; a saved
/// sequence restores to the same next logits; a token of two sequences is
/// refused.
#[test]
fn recurrent_sequence_operations() {
    let model = load(BackendKind::Cpu);
    let ids: Vec<u32> = serde_json::from_value(refs()["prompts"][2]["prompt_ids"].clone()).unwrap();
    let n = ids.len() as i32;
    let mut ctx = context(&model, 2);
    decode(&mut ctx, &ids, 0, 0);
    let e = ctx.seq_rm(0, 10, -1).unwrap_err();
    let msg = e.to_string();
    eprintln!("seq_rm(0, 10, -1): {msg}");
    assert!(
        msg.contains("recurrent") && msg.contains("only the whole sequence"),
        "{msg}"
    );
    assert_eq!(
        ctx.seq_pos_max(0).unwrap(),
        n - 1,
        "a refused removal changes nothing"
    );
    ctx.seq_rm(0, n, -1).unwrap();
    assert!(ctx
        .seq_cp(0, 1, 0, 5)
        .unwrap_err()
        .to_string()
        .contains("recurrent"));
    ctx.seq_cp(0, 1, -1, -1).unwrap();
    let state = ctx.state_seq_save(0).unwrap();
    let want = decode(&mut ctx, &[42], n, 0);
    // The copy moves on alone, from the same state.
    assert_eq!(decode(&mut ctx, &[42], n, 1), want);
    // Positions must continue the state.
    let mut b = Batch::new();
    b.add(7, n + 5, &[0], true);
    assert!(ctx
        .decode(&b)
        .unwrap_err()
        .to_string()
        .contains("recurrent state is at position"));
    // One token, two sequences.
    let mut b = Batch::new();
    b.add(7, n + 1, &[0, 1], true);
    assert!(ctx
        .decode(&b)
        .unwrap_err()
        .to_string()
        .contains("exactly one"));
    ctx.seq_rm(0, -1, -1).unwrap();
    assert_eq!(ctx.seq_pos_max(0).unwrap(), -1);
    ctx.state_seq_load(&state, 0).unwrap();
    assert_eq!(decode(&mut ctx, &[42], n, 0), want, "restored state");
    // A prefix of a recurrent state cannot be restored.
    ctx.seq_rm(0, -1, -1).unwrap();
    let e = ctx.state_seq_load_prefix(&state, 0, 10).unwrap_err();
    assert!(e.to_string().contains("cannot be cut back"), "{e}");
    // A corrupt blob is refused.
    let mut bad = state.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    assert!(ctx
        .state_seq_load(&bad, 0)
        .unwrap_err()
        .to_string()
        .contains("checksum"));
}

/// One request through an engine of one slot: its tokens, the prompt
/// tokens it found cached, and the engine's decode stats after it.
fn engine_run(e: &glint::Engine, prompt: &[u32]) -> (Vec<u32>, usize, glint::engine::DecodeStats) {
    let mut r = glint::engine::Request::new(prompt.to_vec());
    r.sampling.temp = 0.0;
    r.max_tokens = Some(8);
    r.ignore_eos = true;
    let events = e.submit_channel(r).unwrap();
    let (mut tokens, mut cached) = (Vec::new(), 0);
    loop {
        match events.recv().expect("the engine is running") {
            glint::engine::Event::Delta { token, .. } => tokens.extend(token),
            glint::engine::Event::Progress { cached: c, .. } => cached = c,
            glint::engine::Event::Done { .. } => break,
            glint::engine::Event::Failed(m) => panic!("request failed: {m}"),
        }
    }
    (tokens, cached, e.decode_stats())
}

fn lfm2_engine(model: &Model, ctx_checkpoints: usize) -> glint::Engine {
    lfm2_engine_with(
        model,
        ctx_checkpoints,
        glint::EngineParams::default().checkpoint_bytes,
    )
}

fn lfm2_engine_with(
    model: &Model,
    ctx_checkpoints: usize,
    checkpoint_bytes: usize,
) -> glint::Engine {
    let ctx = ContextParams {
        n_ctx: 1024,
        n_seq_max: 1,
        ..Default::default()
    };
    let params = glint::EngineParams {
        ctx_checkpoints,
        checkpoint_bytes,
        cache_ram: 0,
        ..Default::default()
    };
    glint::Engine::start(model, ctx, params).unwrap()
}

/// Prefix reuse on the hybrid model (seed 002's checkpoints): a prompt of
/// 200 tokens leaves a checkpoint 64 tokens before its end; a second
/// prompt sharing its first 180 tokens cannot cut the recurrent state back
/// to 180, so it restores the checkpoint (136 tokens kept, 64 + 20
/// prefilled) and gives the tokens of a cold run of the same prompt.
/// Without checkpoints the same prompt starts over (nothing kept).
#[test]
fn checkpoint_restore_reuses_a_shared_prefix() {
    let model = load(BackendKind::Cpu);
    let mut r = Rng(7);
    let a: Vec<u32> = (0..200).map(|_| 300 + r.below(40_000) as u32).collect();
    let mut b = a[..180].to_vec();
    b.extend((0..20).map(|_| 300 + r.below(40_000) as u32));

    let e = lfm2_engine(&model, 8);
    let (_, cached_a, st) = engine_run(&e, &a);
    assert_eq!(
        (cached_a, st.checkpoints_made, st.checkpoints_restored),
        (0, 1, 0)
    );
    let (warm, cached_b, st) = engine_run(&e, &b);
    assert_eq!(cached_b, 136, "the checkpoint's tokens are reused");
    assert_eq!((st.checkpoints_restored, st.checkpoint_tokens), (1, 136));

    let (cold, cached, _) = engine_run(&lfm2_engine(&model, 8), &b);
    assert_eq!(cached, 0);
    assert_eq!(
        warm, cold,
        "a restored checkpoint gives the cold run's tokens"
    );

    // Without checkpoints: the shared prefix is of no use.
    let e = lfm2_engine(&model, 0);
    engine_run(&e, &a);
    let (none, cached, st) = engine_run(&e, &b);
    assert_eq!(
        (cached, st.checkpoints_made, st.checkpoints_restored),
        (0, 0, 0)
    );
    assert_eq!(none, cold);
    // A byte budget below one checkpoint keeps none: both prompts make
    // one, and drop it at once.
    let e = lfm2_engine_with(&model, 8, 1);
    engine_run(&e, &a);
    let (_, cached, st) = engine_run(&e, &b);
    assert_eq!(
        (cached, st.checkpoints_made, st.checkpoints_restored),
        (0, 2, 0)
    );
    eprintln!(
        "prompt of {} tokens sharing 180 with the last: {} prefilled with a checkpoint restore, {} without",
        b.len(),
        b.len() - cached_b,
        b.len()
    );
}

/// One wgpu decode step of LFM2 (attention and short-convolution layers,
/// and the device-side backup of the recurrent states a failed decode rolls
/// back to) within the budgets `tests/gpu_budget.rs` holds SmolLM2 and
/// Gemma 3 to: one pass, one submit, nothing created per token, one i32
/// read back. The step writes one input more than theirs, the recurrent
/// slots; the backup's queue write of slot ids used to submit the copies
/// recorded before it (2 submits), until a write submits only when a
/// recorded op binds the buffer written.
#[test]
fn one_wgpu_decode_step_stays_within_the_budget() {
    let model = load(BackendKind::Wgpu);
    let c = common::one_gpu_step(&model, 2);
    let n_layer = model.hparams().n_layer as u64;
    // Today's structure: 68 kernels for the fixture's 6 layers.
    assert!(
        c.dispatches > 0 && c.dispatches <= 11 * n_layer + 7,
        "{c:?}"
    );
    assert_eq!((c.passes, c.submits), (1, 1), "{c:?}");
    assert_eq!((c.buffers_created, c.bind_groups_created), (0, 0), "{c:?}");
    assert_eq!(c.pipelines_created, 0, "{c:?}");
    // The step's inputs (the slots among them) staged together: one write.
    assert_eq!(c.queue_writes, 1, "{c:?}");
    assert_eq!(c.readback_bytes, 4, "{c:?}");
    assert_eq!(common::one_gpu_step(&model, 3).dispatches, c.dispatches);
}
