//! KV operations on the wgpu backend: a `seq_div` (negative K-shifts, as
//! self-extend makes) and a `seq_add`, then a decode — the K-shift kernel
//! runs on the software Vulkan adapter — held to the cpu backend's f32 path;
//! and unified vs per-sequence streams on wgpu.

mod common;

use glint::{BackendKind, Batch, Context, ContextParams, Model};

/// As in wgpu_model.rs: same f32 arithmetic, summation order differs.
const WGPU_VS_CPU_F32: f32 = 2e-2;

fn model(backend: BackendKind) -> Model {
    common::f32_model("smollm2", backend)
}

/// Prompt, then compress its positions (seq_div by 2, then shift the tail),
/// then one more token: its logits.
fn shifted_logits(m: &Model) -> Vec<f32> {
    let ids = m
        .tokenizer()
        .encode(
            "The pass key is 71432. Remember it. The sky is blue and",
            true,
            true,
        )
        .unwrap();
    let mut ctx = Context::new(
        m,
        ContextParams {
            n_ctx: 256,
            ..Default::default()
        },
    )
    .unwrap();
    ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
    let n = ids.len() as i32;
    ctx.seq_div(0, 0, 8, 2).unwrap(); // positions 0..7 -> 0..3 (shifts 0, -1, -1, -2, ...)
    ctx.seq_add(0, 8, n, -4).unwrap(); // the rest slides down to follow
    assert!(ctx.cells().has_shift());
    ctx.decode(&Batch::from_tokens(&[ids[ids.len() - 1]], n - 4, 0))
        .unwrap();
    assert!(!ctx.cells().has_shift(), "the decode applied the K-shift");
    ctx.logits(0).unwrap().to_vec()
}

#[test]
fn kshift_after_seq_div_on_wgpu_matches_cpu() {
    let gpu = shifted_logits(&model(BackendKind::Wgpu));
    let cpu = shifted_logits(&model(BackendKind::Cpu));
    let d = common::max_abs_diff(&gpu, &cpu);
    assert!(d < WGPU_VS_CPU_F32, "max |wgpu - cpu| = {d}");
    assert_eq!(common::top_k(&gpu, 5), common::top_k(&cpu, 5));
}

#[test]
fn unified_and_per_sequence_streams_agree_on_wgpu() {
    let m = model(BackendKind::Wgpu);
    let prompts = ["The capital of France is", "Water boils at"];
    let run = |kv_unified: bool| {
        let mut ctx = Context::new(
            &m,
            ContextParams {
                n_ctx: 64,
                n_seq_max: 2,
                kv_unified,
                ..Default::default()
            },
        )
        .unwrap();
        let mut b = Batch::new();
        let mut last = Vec::new();
        for (s, p) in prompts.iter().enumerate() {
            let ids = m.tokenizer().encode(p, true, true).unwrap();
            for (i, &t) in ids.iter().enumerate() {
                b.add(t, i as i32, &[s as i32], i + 1 == ids.len());
            }
            last.push(b.len() - 1);
        }
        ctx.decode(&b).unwrap();
        last.iter()
            .map(|&i| ctx.logits(i).unwrap().to_vec())
            .collect::<Vec<_>>()
    };
    let (u, s) = (run(true), run(false));
    for (a, b) in u.iter().zip(&s) {
        // The layouts batch differently (one 11-token pass vs one pass per
        // stream), so the GPU takes other matmul paths: summation order
        // differs as between wgpu and cpu.
        let d = common::max_abs_diff(a, b);
        assert!(d < WGPU_VS_CPU_F32, "unified vs per-sequence on wgpu: {d}");
        assert_eq!(common::top_k(a, 5), common::top_k(b, 5));
    }
}
