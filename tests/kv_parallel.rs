//! Several sequences in one cache: the unified and the multi-stream layouts
//! give the same logits, and `glint generate -np 4` gives each sequence what
//! it gives alone.

mod common;

use glint::{Batch, Context, ContextParams, Model};

/// Unified vs per-sequence streams (and vs one sequence alone): the same
/// math over the same keys, only the masked-out slots and the summation
/// length differ.
const LAYOUT_TOL: f32 = 1e-3;

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a land far away, there lived",
    "1, 2, 3, 4,",
];

fn load() -> Model {
    common::cpu_model("smollm2")
}

/// Decode every prompt (sequence i = prompt i) in one batch, then one greedy
/// token per sequence in a second batch: the last-token logits of both steps.
fn two_steps(model: &Model, prompts: &[Vec<u32>], unified: bool) -> Vec<Vec<f32>> {
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: 256,
            n_seq_max: prompts.len() as u32,
            kv_unified: unified,
            ..Default::default()
        },
    )
    .unwrap();
    let mut b = Batch::new();
    let mut last = Vec::new();
    for (s, p) in prompts.iter().enumerate() {
        for (i, &t) in p.iter().enumerate() {
            if i + 1 == p.len() {
                last.push(b.len());
            }
            b.add(t, i as i32, &[s as i32], i + 1 == p.len());
        }
    }
    ctx.decode(&b).unwrap();
    let mut out: Vec<Vec<f32>> = last
        .iter()
        .map(|&i| ctx.logits(i).unwrap().to_vec())
        .collect();
    let next: Vec<u32> = last.iter().map(|&i| ctx.argmax(i).unwrap()).collect();
    let mut b = Batch::new();
    for (s, p) in prompts.iter().enumerate() {
        b.add(next[s], p.len() as i32, &[s as i32], true);
    }
    ctx.decode(&b).unwrap();
    for s in 0..prompts.len() {
        out.push(ctx.logits(s).unwrap().to_vec());
    }
    out
}

#[test]
fn unified_and_multi_stream_give_the_same_logits() {
    let model = load();
    let tok = model.tokenizer();
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tok.encode(p, true, true).unwrap())
        .collect();
    for n in [2, 4] {
        let u = two_steps(&model, &prompts[..n], true);
        let m = two_steps(&model, &prompts[..n], false);
        for (k, (a, b)) in u.iter().zip(&m).enumerate() {
            let d = common::max_abs_diff(a, b);
            assert!(d <= LAYOUT_TOL, "{n} sequences, row {k}: max-abs {d}");
        }
        // Each sequence alone.
        for s in 0..n {
            let alone = two_steps(&model, &prompts[s..s + 1], true);
            for (step, a) in alone.iter().enumerate() {
                let d = common::max_abs_diff(a, &u[step * n + s]);
                assert!(d <= LAYOUT_TOL, "seq {s} step {step}: max-abs {d}");
            }
        }
    }
}

fn run(args: &[&str]) -> String {
    let m = common::model("smollm2");
    let mut all = vec!["generate", "-m", m.to_str().unwrap(), "--backend", "cpu"];
    all.extend_from_slice(args);
    let out = common::glint(&all);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn parallel_sequences_give_what_each_gives_alone() {
    let tmp = common::TempDir::new("kv-parallel");
    let dir = tmp.path().to_path_buf();
    let file = dir.join("prompts.txt");
    std::fs::write(&file, PROMPTS.join("\n") + "\n").unwrap();
    let f = file.to_str().unwrap();
    let common_args = ["-n", "12", "--temp", "0", "--ignore-eos", "-c", "512"];

    let mut args = vec!["-np", "4", "-f", f];
    args.extend_from_slice(&common_args);
    let together = run(&args);
    args.push("--no-kv-unified");
    let streams = run(&args);
    assert_eq!(together, streams);

    let mut want = String::new();
    for (i, p) in PROMPTS.iter().enumerate() {
        let mut a = vec!["-p", p];
        a.extend_from_slice(&common_args);
        let alone = run(&a);
        want.push_str(&format!("[{i}] {alone}"));
    }
    assert_eq!(together, want);
}

#[test]
fn too_many_prompts_for_parallel_is_an_error() {
    let out = common::glint(&[
        "generate",
        "-m",
        "/nonexistent.gguf",
        "-np",
        "2",
        "-p",
        "a",
        "-p",
        "b",
        "-p",
        "c",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("3 prompts, --parallel 2"), "{err}");
}
