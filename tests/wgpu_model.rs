//! The wgpu backend runs the real model: SmolLM2's last-prompt-position
//! logits on the software Vulkan adapter against the cpu backend's f32 path
//! (the same arithmetic; named tolerance) and against llama.cpp's.

mod common;

use glint::{BackendKind, Batch, CpuPrecision, Model, ModelParams};

/// Largest |wgpu - cpu f32| over the vocabulary: both compute in f32 with
/// f32 activations; only summation order differs, through 30 layers.
const WGPU_VS_CPU_F32: f32 = 2e-2;

fn last_logits(backend: BackendKind, precision: CpuPrecision) -> (Vec<f32>, String) {
    let params = ModelParams {
        backend,
        cpu_precision: precision,
        ..Default::default()
    };
    let model = Model::load(common::model("smollm2"), &params).unwrap();
    let mut ctx = common::context(&model, 256);
    let prompt = [504u32, 3575, 282, 4649, 314];
    ctx.decode(&Batch::from_tokens(&prompt, 0, 0)).unwrap();
    let argmax = ctx.argmax(4).unwrap();
    let l = ctx.logits(4).unwrap().to_vec();
    assert_eq!(
        argmax,
        common::top_k(&l, 1)[0] as u32,
        "device argmax == host argmax"
    );
    (l, model.backend_name())
}

#[test]
fn smollm2_logits_on_wgpu_match_cpu() {
    let (gpu, name) = last_logits(BackendKind::Wgpu, CpuPrecision::F32);
    assert!(
        name.contains("Vulkan"),
        "expected the Vulkan adapter, got {name}"
    );
    let (cpu, _) = last_logits(BackendKind::Cpu, CpuPrecision::F32);
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
