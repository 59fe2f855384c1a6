//! Embeddings (the hidden states after the output norm): held to
//! llama-server's `--embedding` on SmolLM2 (fixtures/embeddings, made as its
//! `made_by` says), the wgpu backend held to the cpu one, pooling held to
//! its definition, and an input's embedding independent of what ran before.

mod common;

use glint::embed::{embed, normalize, Pooling};
use glint::{BackendKind, Context, ContextParams, Model, ModelParams};

/// Cosine similarity at least this with llama-server's vectors: both run
/// the same Q4_1 weights with 8-bit activations, in other summation orders.
const LLAMA_COSINE: f64 = 0.99;
/// Cosine similarity at least this between glint's two backends.
const BACKEND_COSINE: f64 = 0.999;
/// Max-abs difference of float sums taken in another order.
const SUM_TOL: f32 = 1e-4;

fn load(backend: BackendKind) -> Model {
    let p = ModelParams {
        backend,
        ..Default::default()
    };
    Model::load(common::model("smollm2"), &p).unwrap()
}

fn ctx(model: &Model) -> Context {
    let p = ContextParams {
        n_ctx: 512,
        embeddings: true,
        ..Default::default()
    };
    Context::new(model, p).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let n = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn pooled(c: &mut Context, tokens: &[u32], p: Pooling) -> Vec<f32> {
    let mut v = embed(c, 0, tokens, p).unwrap().remove(0);
    normalize(&mut v);
    v
}

#[test]
fn pooled_embeddings_match_llama_server() {
    let reference = common::fixture("embeddings/smollm2-llama-server.json");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(reference).unwrap()).unwrap();
    let model = load(BackendKind::Cpu);
    let mut c = ctx(&model);
    for (pool, p) in [("mean", Pooling::Mean), ("last", Pooling::Last)] {
        for (k, text) in r["inputs"].as_array().unwrap().iter().enumerate() {
            let ids = model
                .tokenizer()
                .encode(text.as_str().unwrap(), true, true)
                .unwrap();
            let got = pooled(&mut c, &ids, p);
            let want: Vec<f32> = r["vectors"][pool][k]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(got.len(), want.len());
            let cos = cosine(&got, &want);
            assert!(cos >= LLAMA_COSINE, "{pool} {text}: cosine {cos}");
            let norm: f32 = got.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
    }
}

#[test]
fn pooling_follows_the_token_rows_and_inputs_do_not_leak() {
    let model = load(BackendKind::Cpu);
    let mut c = ctx(&model);
    let ids = model
        .tokenizer()
        .encode("The capital of France is Paris.", true, true)
        .unwrap();
    let rows = embed(&mut c, 0, &ids, Pooling::None).unwrap();
    assert_eq!(rows.len(), ids.len());
    let mean = embed(&mut c, 0, &ids, Pooling::Mean).unwrap().remove(0);
    for (j, &m) in mean.iter().enumerate() {
        let avg = rows.iter().map(|r| r[j]).sum::<f32>() / rows.len() as f32;
        assert!((avg - m).abs() <= SUM_TOL, "dim {j}: {avg} vs {m}");
    }
    let last = embed(&mut c, 0, &ids, Pooling::Last).unwrap().remove(0);
    assert_eq!(common::max_abs_diff(&last, rows.last().unwrap()), 0.0);
    let cls = embed(&mut c, 0, &ids, Pooling::Cls).unwrap().remove(0);
    assert!(common::max_abs_diff(&cls, &rows[0]) <= SUM_TOL);
    // After another input in the same sequence, the same vector.
    let other = model
        .tokenizer()
        .encode("Something else entirely", true, true)
        .unwrap();
    embed(&mut c, 0, &other, Pooling::Mean).unwrap();
    let again = embed(&mut c, 0, &ids, Pooling::Mean).unwrap().remove(0);
    assert_eq!(again, mean);
    // The sequence is left empty; too long an input is refused by name.
    assert_eq!(c.cells().seq_pos_max(0).unwrap(), -1);
    let long = vec![ids[1]; 513];
    let e = embed(&mut c, 0, &long, Pooling::Mean)
        .unwrap_err()
        .to_string();
    assert!(e.contains("too large") && e.contains("513"), "{e}");
}

#[test]
fn wgpu_embeddings_match_the_cpu_backend() {
    let ids = |m: &Model| {
        m.tokenizer()
            .encode("I believe the meaning of life is", true, true)
            .unwrap()
    };
    let cpu = load(BackendKind::Cpu);
    let gpu = load(BackendKind::Wgpu);
    let (mut cc, mut gc) = (ctx(&cpu), ctx(&gpu));
    for p in [Pooling::Mean, Pooling::Last] {
        let a = pooled(&mut cc, &ids(&cpu), p);
        let b = pooled(&mut gc, &ids(&gpu), p);
        let cos = cosine(&a, &b);
        assert!(cos >= BACKEND_COSINE, "{p:?}: cosine {cos}");
    }
}
