//! The wgpu backend runs the real models: SmolLM2's and Gemma 3's
//! last-prompt-position logits on the software Vulkan adapter against the
//! cpu backend's f32 path (the same arithmetic; named tolerance) and against
//! llama.cpp's.

mod common;

use glint::{BackendKind, Batch, CpuPrecision, Model, ModelParams};

/// Largest |wgpu - cpu f32| over the vocabulary: both compute in f32 with
/// f32 activations; only summation order differs, through 30 layers.
const WGPU_VS_CPU_F32: f32 = 2e-2;

/// The same for Gemma 3 (18 layers of Q5_0/Q4_K/Q6_K/Q8_0 weights, QK-norm
/// fused into rope_store on wgpu, post-norms, GQA 4/1 at head_dim 256).
const GEMMA3_WGPU_VS_CPU_F32: f32 = 2e-2;

fn last_logits(
    name: &str,
    prompt: &[u32],
    backend: BackendKind,
    precision: CpuPrecision,
) -> (Vec<f32>, String) {
    let params = ModelParams {
        backend,
        cpu_precision: precision,
        ..Default::default()
    };
    let model = Model::load(common::model(name), &params).unwrap();
    let mut ctx = common::context(&model, 256);
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let last = prompt.len() - 1;
    let argmax = ctx.argmax(last).unwrap();
    let l = ctx.logits(last).unwrap().to_vec();
    assert_eq!(
        argmax,
        common::top_k(&l, 1)[0] as u32,
        "device argmax == host argmax"
    );
    (l, model.backend_name())
}

#[test]
fn smollm2_logits_on_wgpu_match_cpu() {
    let prompt = [504u32, 3575, 282, 4649, 314];
    let (gpu, name) = last_logits("smollm2", &prompt, BackendKind::Wgpu, CpuPrecision::F32);
    assert!(
        name.contains("Vulkan"),
        "expected the Vulkan adapter, got {name}"
    );
    let (cpu, _) = last_logits("smollm2", &prompt, BackendKind::Cpu, CpuPrecision::F32);
    let max = gpu
        .iter()
        .zip(&cpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max < WGPU_VS_CPU_F32, "max |wgpu - cpu| = {max}");
    assert_eq!(common::top_k(&gpu, 5), common::top_k(&cpu, 5));
    let (_, want) = common::read_npy_f32(&common::reference("gen_smollm2/logits_last.npy"));
    assert_eq!(common::top_k(&gpu, 1), common::top_k(&want, 1));
    assert!(common::pearson(&gpu, &want) > 0.999);
}

/// Gemma 3's logits at the prompt's last position, then at one decoded
/// token after it (`next`, one row: the decode shape of every kernel).
fn gemma3_logits(prompt: &[u32], next: u32, backend: BackendKind) -> [Vec<f32>; 2] {
    let params = ModelParams {
        backend,
        cpu_precision: CpuPrecision::F32,
        ..Default::default()
    };
    let model = Model::load(common::model("gemma3"), &params).unwrap();
    if backend == BackendKind::Wgpu {
        assert!(
            model.backend_name().contains("Vulkan"),
            "{}",
            model.backend_name()
        );
    }
    let mut ctx = common::context(&model, 256);
    ctx.decode(&Batch::from_tokens(prompt, 0, 0)).unwrap();
    let first = ctx.logits(prompt.len() - 1).unwrap().to_vec();
    ctx.decode(&Batch::from_tokens(&[next], prompt.len() as i32, 0))
        .unwrap();
    [first, ctx.logits(0).unwrap().to_vec()]
}

#[test]
fn gemma3_logits_on_wgpu_match_cpu_and_llama_cpp() {
    let r = common::reference_json("gen_gemma3/result.json");
    let prompt = common::ids(&r["prompt_ids"]);
    let next = common::ids(&r["generated_ids"])[0];
    let gpu = gemma3_logits(&prompt, next, BackendKind::Wgpu);
    let cpu = gemma3_logits(&prompt, next, BackendKind::Cpu);
    for (step, (g, c)) in ["prefill", "decode"].iter().zip(gpu.iter().zip(&cpu)) {
        let max = common::max_abs_diff(g, c);
        eprintln!("gemma3 {step}: max |wgpu - cpu f32| = {max}");
        assert!(
            max < GEMMA3_WGPU_VS_CPU_F32,
            "{step}: max |wgpu - cpu| = {max}"
        );
        assert_eq!(common::top_k(g, 5), common::top_k(c, 5), "{step}");
    }
    let (_, want) = common::read_npy_f32(&common::reference("gen_gemma3/logits_last.npy"));
    assert_eq!(common::top_k(&gpu[0], 1), common::top_k(&want, 1));
    assert!(common::pearson(&gpu[0], &want) > 0.999);
}
