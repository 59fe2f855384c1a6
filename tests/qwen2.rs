//! Qwen2.5-Coder-0.5B-Instruct Q4_K_M (`qwen2`: Q/K/V biases, an untied
//! Q8_0 output matrix, 14:2 grouped-query attention, rope base 1e6, a
//! 151,936-token vocabulary with 271 unused padding entries) held to
//! llama.cpp's reference runs in `fixtures/qwen2/refs.json` (how they were
//! made: `fixtures/qwen2/README.md`), on four prompts: prose, code, a chat
//! turn and a tool-call turn rendered with the model's own template.
//!
//! On the cpu backend: prompt ids, greedy ids up to the first near-tie, and
//! the last-prompt-position logits (top-1, top-5 up to near-ties, max-abs and
//! correlation over the reference's top-64 and a fixed sample of the
//! vocabulary). On the wgpu backend (the shortest prompt only: the software
//! Vulkan driver is slow): the same logits against the cpu f32 path and
//! llama.cpp.
//! Also: chat renders against Python jinja2's, and the special tokens
//! (`<|im_start|>`, `<tool_call>`, the unused `[PAD…]` entries) through
//! encode, decode and the streaming decoder against llama.cpp.

mod common;

use std::sync::OnceLock;

use glint::chat::Chat;
use glint::{BackendKind, Batch, Context, ContextParams, CpuPrecision, Model, ModelParams};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// llama.cpp's own configurations (flash attention, f16/f32 cache, batch vs
/// token-by-token prefill) differ by up to ~1.4 in max-abs logit
/// (../shared/oracle/README.md, finding 2); tests/generate_cpu.rs holds
/// SmolLM2 and Gemma 3 to the same bound.
const LLAMA_CPP_SPREAD: f32 = 1.4;
/// Tokens whose reference logits are this close to the 5th largest are
/// near-ties: which of them makes the top 5 is noise.
const NEAR_TIE: f32 = 0.1;
/// Greedy steps are compared up to the first one with a smaller margin.
const MIN_MARGIN: f64 = 0.3;
/// Largest |wgpu - cpu f32| over the vocabulary: both compute in f32 with
/// f32 activations; only summation order differs, through 24 layers.
const WGPU_VS_CPU_F32: f32 = 2e-2;
/// The first unused (`[PAD…]`) id: 151665..151936 are padding entries of the
/// embedding matrix with no text behind them.
const FIRST_UNUSED: u32 = 151_665;

/// `fixtures/qwen2/refs.json`, parsed once.
fn refs() -> &'static Value {
    static REFS: OnceLock<Value> = OnceLock::new();
    REFS.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/qwen2/refs.json");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap()
    })
}

/// The reference record of generation prompt `name`.
fn prompt_ref(name: &str) -> &'static Value {
    refs()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no prompt {name} in refs.json"))
}

/// A JSON value of the reference as `T` (id lists, `[id, logit]` pairs).
fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    typed(v)
}

fn load(backend: BackendKind, precision: CpuPrecision) -> Model {
    let params = ModelParams {
        backend,
        cpu_precision: precision,
        ..Default::default()
    };
    let model = Model::load(common::model("qwen2"), &params).unwrap();
    assert_eq!(model.n_vocab(), 151_936);
    model
}

/// The prompt's ids as glint makes them: raw text as the reference does,
/// a chat through the model's template (`tools` are not part of glint's
/// chat API, so a turn with tools starts from the reference's render, which
/// `chat_renders_match_jinja2` ties to this template).
fn prompt_ids(model: &Model, r: &Value) -> Vec<u32> {
    let tok = model.tokenizer();
    if let Some(text) = r["text"].as_str() {
        return tok.encode(text, true, false).unwrap();
    }
    let chat = Chat::for_model(model).unwrap();
    let rendered = r["rendered"].as_str().unwrap();
    if r["tools"].is_null() {
        let (text, ids) = chat
            .prompt(tok, r["messages"].as_array().unwrap(), true)
            .unwrap();
        assert_eq!(text, rendered, "{}: render", r["name"]);
        ids
    } else {
        chat.tokenize(tok, rendered).unwrap()
    }
}

/// Greedy-decode `n` tokens after `prompt` (one-batch prefill, then one
/// token per decode, as the reference): (ids, last-prompt-position logits).
fn greedy(model: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let params = ContextParams {
        n_ctx: 1024,
        ..Default::default()
    };
    let mut ctx = Context::new(model, params).unwrap();
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let last = prompt.len() - 1;
    let logits = ctx.logits(last).unwrap().to_vec();
    let mut out = vec![ctx.argmax(last).unwrap()];
    while out.len() < n {
        let pos = (prompt.len() + out.len() - 1) as i32;
        ctx.decode(&Batch::from_tokens(&[*out.last().unwrap()], pos, 0))
            .unwrap();
        out.push(ctx.argmax(0).unwrap());
    }
    (out, logits)
}

/// Greedy steps of the reference before its first margin below `MIN_MARGIN`.
fn steps_before_near_tie(r: &Value) -> usize {
    let steps = r["steps"].as_array().unwrap();
    steps
        .iter()
        .position(|s| s["margin"].as_f64().unwrap() < MIN_MARGIN)
        .unwrap_or(steps.len())
}

/// Our last-position logits against the reference's: the top-1, the top-5
/// up to near-ties of the 5th, and over the reference's top-64 and its
/// vocabulary sample the largest difference and (sample) the correlation.
/// Returns (max-abs, pearson).
fn check_logits(name: &str, ours: &[f32], r: &Value) -> (f32, f64) {
    let top: Vec<(usize, f32)> = typed(&r["top64"]);
    let mine = common::top_k(ours, 5);
    assert_eq!(mine[0], top[0].0, "{name}: top-1");
    let fifth = top[4].1;
    let want5: Vec<usize> = top[..5].iter().map(|t| t.0).collect();
    let ref_logit = |id: usize| top.iter().find(|t| t.0 == id).map(|t| t.1);
    for &t in mine.iter().filter(|t| !want5.contains(t)) {
        let l = ref_logit(t).unwrap_or(f32::NEG_INFINITY);
        assert!(
            (l - fifth).abs() <= NEAR_TIE,
            "{name}: top-5 {mine:?} vs llama.cpp {want5:?}: {t} (ref {l}) is no near-tie of the 5th ({fifth})"
        );
    }
    for &t in want5.iter().filter(|t| !mine.contains(t)) {
        let l = ref_logit(t).unwrap();
        assert!(
            (l - fifth).abs() <= NEAR_TIE,
            "{name}: top-5 {mine:?} vs llama.cpp {want5:?}: llama.cpp's {t} ({l}) is no near-tie of the 5th"
        );
    }
    let stride = refs()["sample_stride"].as_u64().unwrap() as usize;
    let sample: Vec<f32> = typed(&r["sample"]);
    assert_eq!(sample.len(), ours.len().div_ceil(stride));
    let ours_sample: Vec<f32> = ours.iter().step_by(stride).copied().collect();
    let top_ours: Vec<f32> = top.iter().map(|t| ours[t.0]).collect();
    let top_want: Vec<f32> = top.iter().map(|t| t.1).collect();
    let max =
        common::max_abs_diff(&ours_sample, &sample).max(common::max_abs_diff(&top_ours, &top_want));
    let pearson = common::pearson(&ours_sample, &sample);
    eprintln!(
        "{name}: top5 {mine:?} (llama.cpp {want5:?}), max-abs {max:.3}, pearson {pearson:.6}"
    );
    assert!(max < LLAMA_CPP_SPREAD, "{name}: max-abs {max}");
    assert!(pearson >= 0.999, "{name}: pearson {pearson}");
    (max, pearson)
}

/// One reference prompt on the cpu backend: prompt ids, greedy ids up to
/// the first near-tie, the detokenized text of the reference's ids, and the
/// last-position logits.
fn cpu_prompt_matches(name: &str) {
    let r = prompt_ref(name);
    let model = load(BackendKind::Cpu, CpuPrecision::default());
    let prompt = prompt_ids(&model, r);
    assert_eq!(prompt, ids(&r["prompt_ids"]), "{name}: prompt ids");
    let want = ids(&r["generated_ids"]);
    let n = steps_before_near_tie(r);
    let (got, logits) = greedy(&model, &prompt, want.len());
    let same = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
    let tok = model.tokenizer();
    eprintln!(
        "{name}: {same} of {} greedy ids equal llama.cpp's (first near-tie at step {n})\n  glint:     {:?}\n  llama.cpp: {:?}",
        want.len(),
        tok.decode(&got, false).unwrap(),
        r["generated_text"].as_str().unwrap()
    );
    assert_eq!(got[..n], want[..n], "{name}: greedy ids before step {n}");
    assert_eq!(
        tok.decode(&want, false).unwrap(),
        r["generated_text"].as_str().unwrap(),
        "{name}: detokenized reference ids"
    );
    check_logits(name, &logits, r);
}

#[test]
fn prose_on_cpu_matches_llama_cpp() {
    cpu_prompt_matches("prose");
}

#[test]
fn code_on_cpu_matches_llama_cpp() {
    cpu_prompt_matches("code");
}

#[test]
fn chat_turn_on_cpu_matches_llama_cpp() {
    cpu_prompt_matches("chat");
}

#[test]
fn tool_call_turn_on_cpu_matches_llama_cpp() {
    // llama.cpp's reply is a call of the tool (as bare JSON: this small
    // model leaves out the `<tool_call>` tags the template asks for).
    let r = prompt_ref("tool_call");
    let text = r["generated_text"].as_str().unwrap();
    assert!(text.starts_with(r#"{"name": "get_weather", "arguments": {"city": "Paris""#));
    cpu_prompt_matches("tool_call");
}

/// Last-position logits of `prompt` in a fresh context of `model`.
fn last_logits(model: &Model, prompt: &[u32]) -> Vec<f32> {
    let mut ctx = Context::new(model, ContextParams::default()).unwrap();
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let last = prompt.len() - 1;
    let argmax = ctx.argmax(last).unwrap();
    let logits = ctx.logits(last).unwrap().to_vec();
    assert_eq!(
        argmax as usize,
        common::top_k(&logits, 1)[0],
        "device argmax == host argmax"
    );
    logits
}

#[test]
fn wgpu_matches_cpu_f32_and_llama_cpp() {
    let gpu_model = load(BackendKind::Wgpu, CpuPrecision::F32);
    let backend = gpu_model.backend_name();
    assert!(
        backend.contains("Vulkan"),
        "expected the Vulkan adapter, got {backend}"
    );
    let cpu_model = load(BackendKind::Cpu, CpuPrecision::F32);
    // The shortest prompt only: the software driver takes 30-70 s for it.
    let r = prompt_ref("code");
    let prompt = ids(&r["prompt_ids"]);
    let gpu = last_logits(&gpu_model, &prompt);
    let cpu = last_logits(&cpu_model, &prompt);
    let max = common::max_abs_diff(&gpu, &cpu);
    eprintln!("code: max |wgpu - cpu f32| = {max}");
    assert!(max < WGPU_VS_CPU_F32, "max |wgpu - cpu f32| = {max}");
    assert_eq!(common::top_k(&gpu, 5), common::top_k(&cpu, 5));
    check_logits("code (wgpu)", &gpu, r);
}

#[test]
fn chat_renders_match_jinja2() {
    let model = load(BackendKind::Cpu, CpuPrecision::default());
    // The GGUF's template is the one the references were rendered from; it
    // is also glint-chat's `qwen2.5-instruct` fixture, whose renders with
    // `tools` are checked there.
    let source = model
        .gguf()
        .get_str("tokenizer.chat_template")
        .unwrap()
        .unwrap();
    let sha = format!("{:x}", Sha256::digest(source.as_bytes()));
    assert_eq!(sha, refs()["chat_template_sha256"].as_str().unwrap());
    let chat = Chat::for_model(&model).unwrap();
    for r in refs()["renders"].as_array().unwrap() {
        let agp = r["add_generation_prompt"].as_bool().unwrap();
        let (text, ids_) = chat
            .prompt(model.tokenizer(), r["messages"].as_array().unwrap(), agp)
            .unwrap();
        assert_eq!(text, r["rendered"].as_str().unwrap(), "{}", r["name"]);
        assert_eq!(ids_, ids(&r["ids"]), "{}", r["name"]);
    }
}

#[test]
fn special_tokens_round_trip_as_llama_cpp() {
    let model = load(BackendKind::Cpu, CpuPrecision::default());
    let tok = model.tokenizer();
    for t in refs()["tokens"].as_array().unwrap() {
        let text = t["text"].as_str().unwrap();
        for (mode, parse_special) in [("plain", false), ("special", true)] {
            let got = tok.encode(text, false, parse_special).unwrap();
            assert_eq!(got, ids(&t[mode]), "{text:?} {mode}");
            // Back to the same text, special tokens written out.
            assert_eq!(tok.decode(&got, false).unwrap(), text, "{text:?} {mode}");
        }
    }
    for p in refs()["pieces"].as_array().unwrap() {
        let id = p["id"].as_u64().unwrap() as u32;
        for (mode, special) in [("plain", false), ("special", true)] {
            let piece = tok.token_to_piece(id, special).unwrap();
            assert_eq!(
                std::str::from_utf8(&piece).unwrap(),
                p[mode].as_str().unwrap(),
                "piece of {id} ({mode})"
            );
        }
    }
    // Every unused padding entry decodes to nothing, alone or between text,
    // whole or streamed, and no text encodes to one.
    let n_vocab = tok.n_vocab() as u32;
    assert_eq!(n_vocab - FIRST_UNUSED, 271);
    let hello = tok.encode("Hello", false, false).unwrap();
    let mut mixed = hello.clone();
    mixed.extend(FIRST_UNUSED..n_vocab);
    mixed.extend(&hello);
    for skip_special in [false, true] {
        assert_eq!(tok.decode(&mixed, skip_special).unwrap(), "HelloHello");
        let mut stream = tok.stream_decoder(skip_special);
        let mut text = String::new();
        for &id in &mixed {
            text.push_str(&stream.push(id).unwrap());
        }
        text.push_str(&stream.flush());
        assert_eq!(text, "HelloHello");
    }
    let pad_text: String = (FIRST_UNUSED..n_vocab)
        .map(|id| tok.token_text(id).unwrap())
        .collect();
    let encoded = tok.encode(&pad_text, false, true).unwrap();
    assert!(encoded.iter().all(|&id| id < FIRST_UNUSED));
}
