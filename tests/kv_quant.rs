//! Quantized KV caches (`-ctk`/`-ctv` q8_0, q4_0) on SmolLM2: the
//! next-token distributions of a q8_0 and a q4_0 cache against an f16
//! cache's (KL divergence, top-1), teacher-forced along the f16 run; a
//! context shift (seq_rm + seq_add: the K-shift requantizes) against the
//! same shift of an f16 cache, and wgpu's against cpu's; and
//! `glint generate --context-shift -ctk q8_0 -ctv q8_0` through the loop.

mod common;

use glint::{BackendKind, Batch, CacheType, Context, ContextParams, Model};

const PROMPT: &str = "The history of the printing press begins in the fifteenth century, \
when Johannes Gutenberg combined movable metal type, oil-based inks and a wooden \
press adapted from those used for wine. Within fifty years printing had spread to \
more than two hundred cities, and the price of books fell so far that";

fn model(backend: BackendKind) -> Model {
    common::f32_model("smollm2", backend)
}

fn context(m: &Model, ty: CacheType, n_ctx: u32) -> Context {
    Context::new(
        m,
        ContextParams {
            n_ctx,
            type_k: ty,
            type_v: ty,
            ..Default::default()
        },
    )
    .unwrap()
}

fn log_softmax(x: &[f32]) -> Vec<f64> {
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = x.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln() + max;
    x.iter().map(|&v| v as f64 - lse).collect()
}

/// KL(p || q) of two logit rows.
fn kld(p: &[f32], q: &[f32]) -> f64 {
    let (lp, lq) = (log_softmax(p), log_softmax(q));
    lp.iter().zip(&lq).map(|(a, b)| a.exp() * (a - b)).sum()
}

fn argmax(x: &[f32]) -> usize {
    common::top_k(x, 1)[0]
}

/// Logits after the prompt, then after each of `n` tokens fed in turn
/// (`forced`, or the greedy choice when `None`); the tokens fed.
fn run(m: &Model, ty: CacheType, forced: Option<&[u32]>, n: usize) -> (Vec<Vec<f32>>, Vec<u32>) {
    let ids = m.tokenizer().encode(PROMPT, true, true).unwrap();
    let mut ctx = context(m, ty, 512);
    ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
    let mut rows = vec![ctx.logits(ids.len() - 1).unwrap().to_vec()];
    let mut fed = Vec::new();
    for i in 0..n {
        let t = match forced {
            Some(f) => f[i],
            None => argmax(rows.last().unwrap()) as u32,
        };
        fed.push(t);
        ctx.decode(&Batch::from_tokens(&[t], (ids.len() + i) as i32, 0))
            .unwrap();
        rows.push(ctx.logits(0).unwrap().to_vec());
    }
    (rows, fed)
}

/// Mean KL divergence from the f16 cache's distributions, and how many
/// top-1 tokens differ, over the prompt's last token and 24 greedy steps.
/// Measured on SmolLM2 (cpu, f32 numerics): q8_0 mean KLD 3.1e-4 (max
/// 1.6e-3), no top-1 flip; q4_0 mean 0.071 (max 0.27), 6 flips in 25 (4-bit
/// keys and values move a 135M model's logits). Bounds: about 3× the KLD,
/// and the flips with a margin.
#[test]
fn quantized_caches_hold_the_f16_caches_distributions() {
    let m = model(BackendKind::Cpu);
    let n = 24;
    let (want, fed) = run(&m, CacheType::F16, None, n);
    for (ty, max_kld, max_flips) in [(CacheType::Q8_0, 1e-3, 1), (CacheType::Q4_0, 0.25, 10)] {
        let (got, _) = run(&m, ty, Some(&fed), n);
        let klds: Vec<f64> = want.iter().zip(&got).map(|(p, q)| kld(p, q)).collect();
        let mean = klds.iter().sum::<f64>() / klds.len() as f64;
        let flips = want
            .iter()
            .zip(&got)
            .filter(|(p, q)| argmax(p) != argmax(q))
            .count();
        eprintln!(
            "{ty:?}: mean KLD {mean:.2e}, max {:.2e}, top-1 flips {flips}",
            klds.iter().cloned().fold(0.0, f64::max)
        );
        assert!(
            mean < max_kld,
            "{ty:?}: mean KLD {mean} (per step {klds:?})"
        );
        assert!(flips <= max_flips, "{ty:?}: {flips} top-1 flips");
    }
}

/// Decode the prompt, drop `n_discard` tokens after the first `n_keep`
/// and slide the rest down (llama.cpp's context shift: seq_rm, seq_add, so
/// the next decode K-shifts the cached keys, a quantized cache's by
/// dequantize, rotate, requantize), decode one token: its logits.
fn shifted(m: &Model, ty: CacheType) -> Vec<f32> {
    let ids = m.tokenizer().encode(PROMPT, true, true).unwrap();
    let n = ids.len() as i32;
    let (n_keep, n_discard) = (8, 20);
    let next = ids[ids.len() - 1];
    let mut ctx = context(m, ty, 256);
    ctx.decode(&Batch::from_tokens(&ids[..ids.len() - 1], 0, 0))
        .unwrap();
    ctx.seq_rm(0, n_keep, n_keep + n_discard).unwrap();
    ctx.seq_add(0, n_keep + n_discard, n - 1, -n_discard)
        .unwrap();
    assert!(ctx.cells().has_shift());
    ctx.decode(&Batch::from_tokens(&[next], n - 1 - n_discard, 0))
        .unwrap();
    assert!(!ctx.cells().has_shift(), "the decode applied the K-shift");
    ctx.logits(0).unwrap().to_vec()
}

/// A context shift over a quantized cache against the same shift over an
/// f16 cache (the kept keys were made with the dropped tokens in view, so
/// a fresh decode of the kept tokens is another computation: it is not the
/// reference). Measured on cpu: q8_0 KLD 5.4e-4, near its 3.1e-4 without a
/// shift (the one requantization adds little); q4_0 0.17. The q8_0 top-5
/// is f16's.
#[test]
fn a_quantized_context_shift_holds_the_f16_shift() {
    let m = model(BackendKind::Cpu);
    let want = shifted(&m, CacheType::F16);
    for (ty, max_kld) in [(CacheType::Q8_0, 2e-3), (CacheType::Q4_0, 0.5)] {
        let got = shifted(&m, ty);
        let d = kld(&want, &got);
        eprintln!("{ty:?}: KLD vs the f16 cache's shift {d:.2e}");
        assert!(d < max_kld, "{ty:?}: KLD {d}");
        if ty == CacheType::Q8_0 {
            assert_eq!(common::top_k(&got, 5), common::top_k(&want, 5));
        }
    }
}

/// The same on the wgpu backend (set_rows, K-shift and attention kernels
/// of a q8_0 cache), held to the cpu backend's shifted logits.
#[test]
fn a_q8_0_context_shift_on_wgpu_matches_cpu() {
    let gpu = shifted(&model(BackendKind::Wgpu), CacheType::Q8_0);
    let cpu = shifted(&model(BackendKind::Cpu), CacheType::Q8_0);
    let d = kld(&cpu, &gpu);
    eprintln!("wgpu vs cpu, q8_0 shifted: KLD {d:.2e}");
    assert!(d < 1e-3, "KLD {d}");
    assert_eq!(argmax(&gpu), argmax(&cpu));
}

/// llama.cpp's context-shift run (n_ctx 256, n_keep 16, 191-token prompt,
/// 120 tokens: one shift) with a q8_0 cache: the same shift, the same
/// cells, all 120 tokens, and the KV memory line says q8_0's size
/// (34/64 of f16's).
#[test]
fn generate_shifts_a_q8_0_context() {
    let prompt = common::reference("ctxshift_prompt.txt");
    let args = |ty: &'static str| {
        vec![
            "--ctx-size",
            "256",
            "--keep",
            "16",
            "--context-shift",
            "--file",
            prompt.to_str().unwrap().to_string().leak(),
            "--n-predict",
            "120",
            "--verbose",
            "-ctk",
            ty,
            "-ctv",
            ty,
        ]
    };
    let (text, err) = common::greedy_cpu("smollm2", &args("q8_0"));
    assert!(
        err.contains("prompt 191 tokens") && err.contains("generation 120 tokens"),
        "{err}"
    );
    let (events, _) = common::kv_events_and_cells(&err);
    assert_eq!(
        events[1..],
        ["kv: seq_rm(0, 16, 135)", "kv: seq_add(0, 135, 255, -119)"]
    );
    assert!(text.trim().len() > 100, "{text}");
    let kv_mib = |err: &str| -> f64 {
        // "glint: memory on the backend: weights … MiB, KV cache 47.8 MiB, …"
        let at = err
            .find("KV cache ")
            .unwrap_or_else(|| panic!("no KV memory in {err}"));
        let v = err[at + "KV cache ".len()..]
            .split_whitespace()
            .next()
            .unwrap();
        v.parse().unwrap_or_else(|_| panic!("KV cache `{v}`"))
    };
    let (_, err16) = common::greedy_cpu("smollm2", &args("f16"));
    let (q8, f16) = (kv_mib(&err), kv_mib(&err16));
    assert!(
        (q8 / f16 - 34.0 / 64.0).abs() < 0.01,
        "KV {q8} MiB with q8_0, {f16} MiB with f16"
    );
}

/// A q8_0 sequence copied into another stream (`seq_cp` with one stream
/// per sequence: rows dequantized and quantized again, which gives back
/// the same bytes) and one restored from a saved state decode exactly as
/// the original.
#[test]
fn a_q8_0_sequence_copies_and_restores_exactly() {
    let m = model(BackendKind::Cpu);
    let ids = m.tokenizer().encode(PROMPT, true, true).unwrap();
    let (head, next) = (&ids[..ids.len() - 1], ids[ids.len() - 1]);
    let at = head.len() as i32;
    let mut ctx = Context::new(
        &m,
        ContextParams {
            n_ctx: 512,
            n_seq_max: 3,
            kv_unified: false,
            type_k: CacheType::Q8_0,
            type_v: CacheType::Q8_0,
            ..Default::default()
        },
    )
    .unwrap();
    ctx.decode(&Batch::from_tokens(head, 0, 0)).unwrap();
    let saved = ctx.state_seq_save(0).unwrap();
    ctx.seq_cp(0, 1, -1, -1).unwrap();
    ctx.state_seq_load(&saved, 2).unwrap();
    let mut logits = Vec::new();
    for seq in 0..3 {
        ctx.decode(&Batch::from_tokens(&[next], at, seq)).unwrap();
        logits.push(ctx.logits(0).unwrap().to_vec());
    }
    assert_eq!(logits[1], logits[0], "seq_cp into another stream");
    assert_eq!(logits[2], logits[0], "state restore into another stream");
}
