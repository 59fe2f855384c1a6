//! Greedy generation through the library API on the cpu backend, held to
//! llama.cpp's reference run (`../shared/reference/gen_*/result.json`).

mod common;

use glint::{Batch, Context, ContextParams, Model, ModelParams};
use serde_json::Value;

fn reference(name: &str) -> Value {
    let p = common::reference(&format!("{name}/result.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy-decode `n` tokens after `prompt`, returning the ids and the
/// last-prompt-position logits.
fn greedy(model: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: 512,
            ..Default::default()
        },
    )
    .unwrap();
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let logits = ctx.logits(prompt.len() - 1).unwrap().to_vec();
    let mut out = vec![ctx.argmax(prompt.len() - 1).unwrap()];
    let mut pos = prompt.len() as i32;
    while out.len() < n {
        ctx.decode(&Batch::from_tokens(&[*out.last().unwrap()], pos, 0))
            .unwrap();
        out.push(ctx.argmax(0).unwrap());
        pos += 1;
    }
    (out, logits)
}

#[test]
fn smollm2_greedy_matches_llama_cpp() {
    let r = reference("gen_smollm2");
    let model = Model::load(
        common::model("smollm2"),
        &ModelParams {
            backend: glint::BackendKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let (got, logits) = greedy(&model, &ids(&r["prompt_ids"]), 32);
    let want = ids(&r["generated_ids"]);
    assert_eq!(got, want, "greedy ids differ from llama.cpp");
    let (_, ref_logits) = common::read_npy_f32(&common::reference("gen_smollm2/logits_last.npy"));
    let top = |l: &[f32], k: usize| {
        let mut i: Vec<usize> = (0..l.len()).collect();
        i.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        i.truncate(k);
        i
    };
    eprintln!(
        "ours top5 {:?}\nref  top5 {:?}",
        top(&logits, 5),
        top(&ref_logits, 5)
    );
    for id in [7042usize, 260, 4528, 1315, 5145, 2250, 216] {
        eprintln!("{id}: ours {} ref {}", logits[id], ref_logits[id]);
    }
    let md = logits
        .iter()
        .zip(&ref_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let n = logits.len() as f64;
    let (ma, mb) = (
        logits.iter().map(|&v| v as f64).sum::<f64>() / n,
        ref_logits.iter().map(|&v| v as f64).sum::<f64>() / n,
    );
    let cov: f64 = logits
        .iter()
        .zip(&ref_logits)
        .map(|(&a, &b)| (a as f64 - ma) * (b as f64 - mb))
        .sum();
    let va: f64 = logits.iter().map(|&a| (a as f64 - ma).powi(2)).sum();
    let vb: f64 = ref_logits.iter().map(|&b| (b as f64 - mb).powi(2)).sum();
    eprintln!("maxabs {md} pearson {}", cov / (va * vb).sqrt());
}
