//! RoPE scaling overrides (llama.cpp's `--rope-scaling`, `--rope-scale`,
//! `--yarn-*`) and the K-shift under YaRN: a shift is a pure rotation (the
//! magnitude factor is applied once, at the first rope, never again), so k
//! successive shifts land where one rope at the final position does, on
//! both backends.

mod common;

use glint::{BackendKind, Model, ModelParams, RopeOverrides, RopeScaling};
use glint_backend::{Backend, GgmlType, RopeParams, TensorDesc, Usage};

fn yarn() -> RopeOverrides {
    RopeOverrides {
        scaling: Some("yarn".into()),
        factor: Some(4.0),
        yarn_attn_factor: Some(1.2),
        ..Default::default()
    }
}

/// SmolLM2 on the cpu with `rope`.
fn load(rope: RopeOverrides) -> Result<Model, glint::Error> {
    let p = ModelParams {
        backend: BackendKind::Cpu,
        rope,
        ..Default::default()
    };
    Model::load(common::model("smollm2"), &p)
}

#[test]
fn the_flags_reach_the_model() {
    let m = load(yarn()).unwrap();
    match m.hparams().rope_scaling {
        RopeScaling::Yarn {
            factor,
            n_ctx_orig,
            attn_factor,
            ..
        } => {
            assert_eq!((factor, attn_factor), (4.0, 1.2));
            assert_eq!(n_ctx_orig, 8192, "the trained context by default");
        }
        other => panic!("{other:?}"),
    }
    let r = m.hparams().rope(0, m.hparams().n_head_kv);
    assert_eq!(
        (r.freq_scale, r.ext_factor, r.attn_factor),
        (0.25, 1.0, 1.2)
    );
    // A lying value is refused, naming the flag.
    let e = load(RopeOverrides {
        factor: Some(-2.0),
        ..yarn()
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("--rope-scale -2"), "{e}");
}

/// `x` roped at `pos`, shifted `k` times by `d`, against `x` roped at
/// `pos + k*d`: the largest difference relative to the largest value.
fn drift<B: Backend>(be: &B, p: &RopeParams, k: usize, d: i32) -> f32 {
    let (row, m) = (p.head_dim * p.n_head, 4usize);
    let t = |ty: GgmlType, ne: [usize; 4], label: &str| {
        be.alloc(TensorDesc {
            ty,
            ne,
            label: label.into(),
            usage: Usage::Scratch,
        })
        .unwrap()
    };
    let x = t(GgmlType::F32, [p.head_dim, p.n_head, m, 1], "x");
    let pos = t(GgmlType::I32, [m, 1, 1, 1], "pos");
    let k_rows = t(GgmlType::F32, [p.head_dim, p.n_head, m, 1], "k");
    let fresh = t(GgmlType::F32, [p.head_dim, p.n_head, m, 1], "fresh");
    let shift = t(GgmlType::I32, [m, 1, 1, 1], "shift");
    let xs = glint_testkit::Rng::new(7).vec(row * m);
    be.write(&x, 0, bytemuck::cast_slice(&xs)).unwrap();
    let p0 = [3i32, 100, 1000, 2900];
    be.write(&pos, 0, bytemuck::cast_slice(&p0)).unwrap();
    be.rope(&x, &pos, p, &k_rows).unwrap();
    be.write(&shift, 0, bytemuck::cast_slice(&[d; 4])).unwrap();
    let kp = RopeParams {
        n_head: p.n_head,
        ..*p
    };
    // kshift takes the cache as [head_dim * n_head, n_rows]: the same bytes.
    let k2 = be.view(&k_rows, [row, m, 1, 1]).unwrap();
    for _ in 0..k {
        be.kshift(&k2, &shift, &kp).unwrap();
    }
    let p1: Vec<i32> = p0.iter().map(|&q| q + k as i32 * d).collect();
    be.write(&pos, 0, bytemuck::cast_slice(&p1)).unwrap();
    be.rope(&x, &pos, p, &fresh).unwrap();
    let read = |t: &B::Tensor| {
        let mut b = vec![0u8; row * m * 4];
        be.read(t, 0, &mut b).unwrap();
        bytemuck::cast_slice::<u8, f32>(&b).to_vec()
    };
    let (a, b) = (read(&k_rows), read(&fresh));
    let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    common::max_abs_diff(&a, &b) / max
}

#[test]
fn ten_yarn_shifts_equal_one_rope_at_the_final_position_on_both_backends() {
    let m = load(yarn()).unwrap();
    let rp = m.hparams().rope(0, m.hparams().n_head_kv);
    assert!(
        rp.ext_factor > 0.0 && rp.attn_factor != 1.0,
        "YaRN with a magnitude factor"
    );
    let cpu = glint_cpu::CpuBackend::with_precision(Some(2), glint_cpu::Precision::F32).unwrap();
    let gpu = glint_gpu::GpuBackend::new(Default::default()).unwrap();
    // Tolerances, relative to the largest value: the cpu computes angles
    // in f64; the device computes them in f32, so a rope at position ~3000
    // differs from rope + shift by ~pos * 2^-24 before any shift compounds.
    for (name, tol, one, ten) in [
        (
            "cpu",
            1e-5,
            drift(&cpu, &rp, 1, 37),
            drift(&cpu, &rp, 10, 37),
        ),
        (
            "wgpu",
            2e-4,
            drift(&gpu, &rp, 1, 37),
            drift(&gpu, &rp, 10, 37),
        ),
    ] {
        eprintln!("{name}: relative max-abs drift after 1 shift {one:.2e}, after 10 {ten:.2e}");
        // Re-applying the magnitude factor on each shift (as llama.cpp does)
        // would be off by attn_factor^10 - 1 = 5.2, not by rounding.
        assert!(
            one < tol && ten < tol,
            "{name}: drift {one} after 1, {ten} after 10"
        );
        assert!(
            ten <= 4.0 * one.max(1e-7),
            "{name}: drift grows with shifts: {one} -> {ten}"
        );
    }
}

/// The flags through the generation loop: a YaRN context that shifts.
#[test]
fn generate_with_yarn_and_context_shift() {
    let (_, err) = common::greedy_cpu(
        "smollm2",
        &[
            "-p",
            "Once upon a time",
            "-n",
            "40",
            "-c",
            "32",
            "--context-shift",
            "--keep",
            "4",
            "--rope-scaling",
            "yarn",
            "--rope-scale",
            "2",
            "--ignore-eos",
            "--verbose",
        ],
    );
    assert!(err.contains("kv: context-shift"), "{err}");
    assert!(err.contains("generation 40 tokens"), "{err}");
    let bad = common::generate("smollm2", &["-p", "Hi", "--rope-scaling", "ntk"]);
    let e = common::one_line_error(&bad, "--rope-scaling ntk");
    assert!(e.contains("--rope-scaling `ntk`"), "{e}");
}

#[test]
fn a_context_past_the_trained_one_is_warned_of_only_without_an_extension() {
    let warned = |extra: &[&str]| -> bool {
        let mut args = vec!["-p", "Hi", "-n", "1", "-c", "16384"];
        args.extend_from_slice(extra);
        let (_, err) = common::greedy_cpu("smollm2", &args);
        err.contains("warning: -c 16384 is above the model's trained context (8192)")
    };
    assert!(warned(&[]), "plain attention past 8192");
    assert!(warned(&["-gan", "1"]), "a group of 1 is no self-extend");
    assert!(!warned(&["-gan", "8", "-gaw", "512"]), "self-extend");
    assert!(
        !warned(&["--rope-scaling", "yarn", "--rope-scale", "2"]),
        "YaRN"
    );
}
