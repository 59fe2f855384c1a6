//! The int8 matvec (`GpuOptions::int8_matvec`, flag Q8): x quantized to
//! ggml's Q8_0/Q8_1/Q8_K blocks in each workgroup and the dots taken with
//! `dot4I8Packed`, held to the cpu backend's `Precision::Ggml` (what
//! llama.cpp computes), on both shared feature sets, for every op that
//! takes a matvec: plain, residual added, fused parts, gate/up, the norm
//! folded in, the post-norm added. Each case is also far from the `F32`
//! oracle (the activations' rounding shows), so the test fails if the
//! path silently fell back to float dots.

mod common;

use common::*;
use glint_backend::{Backend, GgmlType, Glu, PostAdd, SharedBytes, Tensor, TensorDesc, Usage};
use glint_cpu::{CpuBackend, Precision};
use glint_gpu::wgpu::DeviceType;
use glint_gpu::{GpuBackend, GpuOptions};

/// Named tolerances of this file, as `common::tol` but relative to the
/// outputs' size: |gpu - cpu Ggml| / (1 + RMS of cpu Ggml's outputs).
mod int8_tol {
    /// The same Q8 levels and scales on both sides, each unit's integer
    /// sums exact and scaled in ggml's order: only the order the units'
    /// floats are summed in differs (seen: 1.1e-6 at k 320 and 512); past
    /// k 4096, times sqrt(k / 4096) ([`super::same_levels`]).
    pub const SAME_LEVELS: f64 = 1e-5;
    /// Gate/up with their activation: the cpu's ggml silu and the
    /// kernel's differ by a few ulps, magnified by up (seen: 3.4e-6).
    pub const GLU: f64 = 3e-5;
    /// The norm folded in: the gpu sums the squares in another order (and
    /// on a GPU, not lavapipe, its division may be off by an ulp), so an
    /// element within an ulp of a level's midpoint may round to the other
    /// level: one level of one element of x, d_x * |w| in every output of
    /// its column (amax / 127 of x's block: about 3e-3 of the outputs'
    /// size here). Held to it: at most FLIPPED_COLUMNS of a case's columns
    /// past SAME_LEVELS (GLU).
    pub const ONE_LEVEL: f64 = 2e-2;
    pub const FLIPPED_COLUMNS: usize = 2;
    /// A case must be this far from the F32 oracle (the activations'
    /// rounding; seen: at least 3.7e-3), or it did not take the int8 path.
    pub const FROM_F32: f64 = 1e-3;
}

/// The formats with an int8 path: every quantized one with a kernel.
fn int8_types() -> impl Iterator<Item = GgmlType> {
    weight_types().filter(|&ty| !is_float(ty))
}

/// The int8 backends: every optional feature (subgroup rows, immediates),
/// and none (one row a workgroup, workgroup-memory reductions).
fn int8_gpus() -> [&'static GpuBackend; 2] {
    static ON: std::sync::OnceLock<GpuBackend> = std::sync::OnceLock::new();
    static OFF: std::sync::OnceLock<GpuBackend> = std::sync::OnceLock::new();
    let opts = GpuOptions {
        int8_matvec: true,
        ..Default::default()
    };
    [
        ON.get_or_init(|| GpuBackend::new(opts.clone()).expect("a wgpu adapter")),
        OFF.get_or_init(|| GpuBackend::new(without_features(opts)).expect("a wgpu adapter")),
    ]
}

fn cpu(p: Precision) -> CpuBackend {
    CpuBackend::with_precision(Some(2), p).expect("cpu backend")
}

/// One case's inputs: three weight parts of one type (rows 70, 33, 33,
/// the Q/K/V-like run; 1 and 2 the gate/up pair), x and the norms' data.
struct Case {
    k: usize,
    m: usize,
    parts: Vec<(TensorDesc, SharedBytes)>,
    x: Vec<f32>,
    res: Vec<f32>,
    y: Vec<f32>,
    pw: Vec<f32>,
    nw: Vec<f32>,
}

const NS: [usize; 3] = [70, 33, 33];

impl Case {
    fn new(r: &mut Rng, ty: GgmlType, k: usize, m: usize) -> Case {
        let parts = NS
            .iter()
            .enumerate()
            .map(|(i, &n)| random_part(r, ty, k, n, i))
            .collect();
        Case {
            k,
            m,
            parts,
            x: r.vec_scaled(k * m, 3.0),
            res: r.vec_scaled(NS[0] * m, 1.0),
            y: r.vec_scaled(k * m, 0.5),
            pw: r.vec_scaled(k, 1.0),
            nw: r.vec_scaled(k, 1.0),
        }
    }
}

/// What an output went through besides the matvec.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Plain,
    Glu,
    Normed,
    NormedGlu,
    /// No matvec: the post-norm's sum, f32 on both sides.
    Stream,
}

/// Every matvec op of `case` on `be`: (name, kind, values) per output.
fn run<B: Backend>(be: &B, c: &Case) -> Vec<(String, Kind, Vec<f32>)> {
    let (k, m) = (c.k, c.m);
    let f = |ne: [usize; 4], v: &[f32]| {
        let t = be
            .alloc(TensorDesc {
                ty: GgmlType::F32,
                ne,
                label: "in".into(),
                usage: Usage::Scratch,
            })
            .unwrap();
        be.write(&t, 0, bytemuck::cast_slice(v)).unwrap();
        t
    };
    let o = |n: usize| f([n, m, 1, 1], &vec![f32::NAN; n * m]);
    let read = |t: &B::Tensor| -> Vec<f32> {
        let mut b = vec![0u8; t.desc().n_bytes()];
        be.read(t, 0, &mut b).unwrap();
        bytemuck::cast_slice(&b).to_vec()
    };
    let packed = be.weights(c.parts.clone()).unwrap();
    let pair = be.weights(c.parts[1..].to_vec()).unwrap();
    let single = be
        .weight(c.parts[0].0.clone(), c.parts[0].1.clone())
        .unwrap();
    let x = f([k, m, 1, 1], &c.x);
    let (y, pw, nw) = (
        f([k, m, 1, 1], &c.y),
        f([k, 1, 1, 1], &c.pw),
        f([k, 1, 1, 1], &c.nw),
    );
    let (h, tmp, stream) = (o(k), o(k), o(k));
    let outs: Vec<_> = NS.iter().map(|&n| o(n)).collect();
    let outr: Vec<&B::Tensor> = outs.iter().collect();
    let ws: Vec<&B::Tensor> = packed.iter().collect();
    let mut got = Vec::new();
    let mut keep = |name: &str, kind: Kind, t: &B::Tensor| {
        got.push((name.to_string(), kind, read(t)));
    };

    be.mul_mat(&single, &x, &outs[0]).unwrap();
    keep("mul_mat", Kind::Plain, &outs[0]);
    let res = f([NS[0], m, 1, 1], &c.res);
    let sum = o(NS[0]);
    be.mul_mat_add(&single, &x, &res, &o(NS[0]), &sum).unwrap();
    keep("mul_mat_add", Kind::Plain, &sum);

    be.mul_mats(&ws, &x, &outr).unwrap();
    for (i, t) in outs.iter().enumerate() {
        keep(&format!("mul_mats part {i}"), Kind::Plain, t);
    }
    let (gate, up, act) = (o(NS[1]), o(NS[1]), o(NS[1]));
    be.mul_mats_glu(Glu::SwiGlu, &pair[0], &pair[1], &x, &gate, &up, &act)
        .unwrap();
    keep("mul_mats_glu", Kind::Glu, &act);

    let eps = 1e-2;
    be.norm_mul_mats(&x, None, (&nw, eps), &h, &ws, &outr)
        .unwrap();
    for (i, t) in outs.iter().enumerate() {
        keep(&format!("norm_mul_mats part {i}"), Kind::Normed, t);
    }
    let post = |out| PostAdd {
        y: &y,
        w: &pw,
        eps: 0.3,
        tmp: &tmp,
        out,
    };
    be.norm_mul_mats(&x, Some(post(&stream)), (&nw, eps), &h, &ws, &outr)
        .unwrap();
    keep("post-norm stream", Kind::Stream, &stream);
    for (i, t) in outs.iter().enumerate() {
        keep(&format!("norm_mul_mats + post part {i}"), Kind::Normed, t);
    }
    be.norm_mul_mats_glu(
        Glu::SwiGlu,
        &x,
        Some(post(&stream)),
        (&nw, eps),
        &h,
        [&pair[0], &pair[1]],
        [&gate, &up],
        &act,
    )
    .unwrap();
    keep("norm_mul_mats_glu + post", Kind::NormedGlu, &act);
    got
}

/// [`int8_tol::SAME_LEVELS`] for rows of `k`.
fn same_levels(k: usize) -> f64 {
    int8_tol::SAME_LEVELS * (k as f64 / 4096.0).sqrt().max(1.0)
}

/// |got - want| / (1 + the RMS of want) of each output (NaN: infinite):
/// relative to the outputs' size, not each one's (an output near 0 sums
/// products that cancel, and keeps their rounding).
fn errors(got: &[f32], want: &[f32]) -> Vec<f64> {
    assert_eq!(got.len(), want.len());
    let ss: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    let scale = 1.0 + (ss / want.len().max(1) as f64).sqrt();
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            let e = (g as f64 - w as f64).abs() / scale;
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .collect()
}

fn worst(e: &[f64]) -> f64 {
    e.iter().copied().fold(0.0, f64::max)
}

#[test]
fn int8_matvecs_follow_the_cpu_ggml_numerics() {
    let (ggml, f32s) = (cpu(Precision::Ggml), cpu(Precision::F32));
    let mut r = Rng(seed());
    for gpu in int8_gpus() {
        assert!(gpu.features_used().int8, "{}", gpu.name());
        assert!(gpu.name().contains("int8 matvec"), "{}", gpu.name());
        assert_eq!(int8_types().count(), 10);
        for ty in int8_types() {
            // k: 10 blocks (not a multiple of the lanes; K-quants: 2
            // super-blocks); m: 1, 3 of the 4 a pipeline takes, and 8
            // (every column).
            let k = if ty.block_size() == 256 { 512 } else { 320 };
            for (k, m) in [(k, 1), (k, 3), (256, 8)] {
                let case = Case::new(&mut r, ty, k, m);
                let (g, want, far) = (run(gpu, &case), run(&ggml, &case), run(&f32s, &case));
                for ((name, kind, got), ((_, _, w), (_, _, f))) in
                    g.iter().zip(want.iter().zip(&far))
                {
                    let what = format!("{} {ty:?} k{k} m{m}: {name}", gpu.name());
                    let e = errors(got, w);
                    let close = match kind {
                        Kind::Plain | Kind::Normed | Kind::Stream => same_levels(k),
                        Kind::Glu | Kind::NormedGlu => int8_tol::GLU,
                    };
                    // Columns with an output past `close`.
                    let n = e.len() / m;
                    let flipped = e.chunks(n).filter(|c| worst(c) > close).count();
                    // lavapipe divides and fuses as the cpu does: the plain
                    // matvecs' levels are the cpu's there, to the last one.
                    let exact = gpu.adapter_info().device_type == DeviceType::Cpu;
                    let (most, bound) = match kind {
                        Kind::Plain | Kind::Glu | Kind::Stream if exact => (0, close),
                        _ => (int8_tol::FLIPPED_COLUMNS, int8_tol::ONE_LEVEL),
                    };
                    assert!(
                        flipped <= most && worst(&e) <= bound,
                        "{what}: {flipped} columns past {close:e} from cpu Ggml, worst {:e}",
                        worst(&e)
                    );
                    if *kind != Kind::Stream {
                        let ef = worst(&errors(got, f));
                        assert!(
                            ef > int8_tol::FROM_F32,
                            "{what}: {ef:e} from the F32 oracle: not the int8 path?"
                        );
                    }
                }
            }
        }
    }
}

/// x of 384 units of 32 (all the workgroup memory holds: SmolLM2's down
/// projection at 8 columns) takes the int8 path, to its last unit, and up
/// to 768 units its wide variant (flag Q8W, where the adapter has 32 KiB
/// of workgroup memory); a block (a K-quant's super-block) more takes the
/// float path, held to the F32 oracle.
#[test]
fn int8_takes_what_fits_its_workgroup_memory() {
    let (ggml, f32s) = (cpu(Precision::Ggml), cpu(Precision::F32));
    let mut r = Rng(seed());
    use GgmlType::{Q4_1, Q6_K};
    // (format, k, m, int8 path: 0 float, 1 plain, 2 wide)
    let cases = [
        (Q4_1, 1536, 8, 1),
        (Q4_1, 4096, 3, 1),
        (Q4_1, 1568, 8, 2),
        (Q4_1, 4096, 6, 2),  // to the wide variant's last unit
        (Q4_1, 14336, 1, 2), // an 8B's down projection
        (Q4_1, 3104, 8, 0),  // past the wide variant
        (Q6_K, 1536, 8, 1),
        (Q6_K, 3072, 8, 2),
        (Q6_K, 3328, 8, 0),
    ];
    for gpu in int8_gpus() {
        // lavapipe has 32 KiB of workgroup memory: the wide variant's too.
        let wide = gpu.limits().max_compute_workgroup_storage_size >= 30976;
        let exact = gpu.adapter_info().device_type == DeviceType::Cpu;
        for (ty, k, m, path) in cases {
            let int8 = path == 1 || (path == 2 && wide);
            let case = Case::new(&mut r, ty, k, m);
            let (g, want, far) = (run(gpu, &case), run(&ggml, &case), run(&f32s, &case));
            // mul_mat, then mul_mat_add.
            for i in 0..2 {
                let what = format!("{} {ty:?} k{k} m{m}: {}", gpu.name(), g[i].0);
                let (eg, ef) = (
                    worst(&errors(&g[i].2, &want[i].2)),
                    worst(&errors(&g[i].2, &far[i].2)),
                );
                if int8 {
                    let tol = if exact {
                        same_levels(k)
                    } else {
                        int8_tol::ONE_LEVEL
                    };
                    assert!(eg <= tol, "{what}: {eg:e} from cpu Ggml");
                    assert!(ef > int8_tol::FROM_F32, "{what}: {ef:e} from F32");
                } else {
                    assert!(ef <= tol::MATMUL_QUANT, "{what}: {ef:e} from F32");
                    assert!(eg > int8_tol::FROM_F32, "{what}: {eg:e} from cpu Ggml");
                }
            }
        }
    }
}
