//! `Precision::Ggml` (the default) computes what ggml's cpu backend computes:
//! integer dots against activations quantized to the weight's vec_dot_type,
//! f16-rounded operands for F16 weights, and f16 rounding of Q and of the
//! softmax weights in attention over an F16 cache. Held to plain loops
//! written here from those rules.

mod common;

use common::*;
use glint_backend::{AttnParams, Backend, GgmlType};
use half::f16;

/// Relative to the sum of |terms|: only summation order may differ.
const GGML_DOT_TOL: f32 = 1e-5;

/// An F16 tensor of `shape` holding `v`.
fn f16s(be: &glint_cpu::CpuBackend, shape: [usize; 4], v: &[f16]) -> glint_cpu::CpuTensor {
    from_bytes(be, GgmlType::F16, shape, bytemuck::cast_slice(v))
}

fn read_f32(be: &glint_cpu::CpuBackend, t: &glint_cpu::CpuTensor, n: usize) -> Vec<f32> {
    let mut b = vec![0u8; n * 4];
    be.read(t, 0, &mut b).unwrap();
    bytemuck::cast_slice(&b).to_vec()
}

#[test]
fn mul_mat_quantizes_activations_like_ggml() {
    let be = ggml_backend();
    let mut rng = Rng(0x5eed_0001);
    for (ty, k) in [
        (GgmlType::Q4_1, 576),
        (GgmlType::Q8_0, 640),
        (GgmlType::Q5_0, 640),
        (GgmlType::Q4_K, 512),
        (GgmlType::Q6_K, 768),
        (GgmlType::F16, 96),
    ] {
        let (n, vt) = (37, ty.vec_dot_type());
        let wf = rng.vec(k * n);
        let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
        let mut wb = vec![0u8; row_bytes * n];
        for r in 0..n {
            glint_quant::quantize_row(
                ty,
                &wf[r * k..(r + 1) * k],
                &mut wb[r * row_bytes..(r + 1) * row_bytes],
            )
            .unwrap();
        }
        let w = from_bytes(&be, ty, [k, n, 1, 1], &wb);
        for m in [1usize, 3, 9, 70] {
            let x = rng.vec(k * m);
            let xt = f32s(&be, [k, m, 1, 1], &x);
            let out = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
            be.mul_mat(&w, &xt, &out).unwrap();
            let got = read_f32(&be, &out, n * m);
            let act_bytes = vt.bytes_for(k as u64).unwrap() as usize;
            for c in 0..m {
                let xc = &x[c * k..(c + 1) * k];
                // The activation as ggml sees it.
                let mut act = vec![0u8; act_bytes];
                glint_cpu::act::quantize_row(vt, xc, &mut act).unwrap();
                for r in 0..n {
                    let row = &wb[r * row_bytes..(r + 1) * row_bytes];
                    let want = glint_quant::vec_dot(ty, row, &act).unwrap();
                    let mut wrow = vec![0f32; k];
                    glint_quant::dequantize_row(ty, row, &mut wrow).unwrap();
                    let scale: f32 = wrow.iter().zip(xc).map(|(a, b)| (a * b).abs()).sum();
                    let e = (got[c * n + r] - want).abs();
                    assert!(
                        e <= GGML_DOT_TOL * scale.max(1e-3),
                        "{ty} m={m} [{r},{c}]: {} vs {want}",
                        got[c * n + r]
                    );
                }
            }
        }
    }
}

#[test]
fn attention_rounds_q_and_weights_to_f16_over_an_f16_cache() {
    let be = ggml_backend();
    let mut rng = Rng(0x5eed_0002);
    let (hd, nh, nkv, n_kv, m) = (16usize, 4usize, 2usize, 11usize, 3usize);
    let q = rng.vec(hd * nh * m);
    let kf = rng.vec(hd * nkv * n_kv);
    let vf = rng.vec(hd * nkv * n_kv);
    let k16: Vec<f16> = kf.iter().map(|&x| f16::from_f32(x)).collect();
    let v16: Vec<f16> = vf.iter().map(|&x| f16::from_f32(x)).collect();
    let mut mask = vec![0f32; n_kv * m];
    for i in 0..m {
        for j in n_kv - 2 + i..n_kv {
            mask[i * n_kv + j] = f32::NEG_INFINITY;
        }
    }
    let qt = f32s(&be, [hd, nh, m, 1], &q);
    let (kt, vt) = (
        f16s(&be, [hd * nkv, n_kv, 1, 1], &k16),
        f16s(&be, [hd * nkv, n_kv, 1, 1], &v16),
    );
    let mt = f32s(&be, [n_kv, m, 1, 1], &mask);
    let out = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
    let p = AttnParams {
        scale: 0.25,
        ..AttnParams::new(nh, nkv, hd, n_kv)
    };
    be.attention(&qt, &kt, &vt, &mt, &p, &out).unwrap();
    let got = read_f32(&be, &out, hd * nh * m);
    for i in 0..m {
        for h in 0..nh {
            let hk = h / (nh / nkv);
            let qh: Vec<f64> = q[(i * nh + h) * hd..][..hd]
                .iter()
                .map(|&x| f16::from_f32(x).to_f64())
                .collect();
            let s: Vec<f64> = (0..n_kv)
                .map(|j| {
                    let d: f64 = (0..hd)
                        .map(|e| qh[e] * k16[j * hd * nkv + hk * hd + e].to_f64())
                        .sum();
                    d * 0.25 + mask[i * n_kv + j] as f64
                })
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
            for e in 0..hd {
                let want: f64 = (0..n_kv)
                    .map(|j| {
                        f16::from_f64((s[j] - mx).exp() / z).to_f64()
                            * v16[j * hd * nkv + hk * hd + e].to_f64()
                    })
                    .sum();
                let g = got[(i * nh + h) * hd + e] as f64;
                assert!(
                    (g - want).abs() < 2e-5,
                    "token {i} head {h} dim {e}: {g} vs {want}"
                );
            }
        }
    }
}

/// ggml's `ggml_vec_gelu_f32` / `ggml_vec_geglu_f32` under `GGML_GELU_FP16`
/// (its default): 0 at or below -10, `x` at or above 10, else the f16 table
/// entry `f16(gelu(f16(x)))`. The f32 oracle keeps the exact formula.
#[test]
fn gelu_and_geglu_use_ggmls_f16_table() {
    let be = ggml_backend();
    let oracle = backend();
    let mut rng = Rng(0x6e1);
    let n = 4096;
    let mut xv: Vec<f32> = rng.vec(n).iter().map(|v| v * 12.0).collect();
    // The edges, signed zeros, and values whose f16 is subnormal or
    // rounds to an even neighbour.
    xv[..11].copy_from_slice(&[
        -10.0,
        10.0,
        -10.5,
        11.0,
        0.0,
        -0.0,
        3.0e-6,
        -4.5e-5,
        6.0e-8,
        1.0 + 1.0 / 2048.0, // halfway between two f16s: to the even one
        -9.9990,
    ]);
    let gv: Vec<f32> = rng.vec(n).iter().map(|v| v * 3.0 + 0.5).collect();
    let tanh_gelu = |x: f32| 0.5 * x * (1.0 + (0.797_884_6 * x * (1.0 + 0.044715 * x * x)).tanh());
    let table = |x: f32| {
        if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x
        } else {
            let h = f16::from_f32(x).to_f32();
            f16::from_f32(tanh_gelu(h)).to_f32()
        }
    };
    let x = f32s(&be, [n, 1, 1, 1], &xv);
    let g = f32s(&be, [n, 1, 1, 1], &gv);
    let out = zeros(&be, GgmlType::F32, [n, 1, 1, 1]);
    be.unary(glint_backend::Unary::Gelu, &x, &out).unwrap();
    let got = read_f32(&be, &out, n);
    for i in 0..n {
        assert_eq!(got[i].to_bits(), table(xv[i]).to_bits(), "gelu({})", xv[i]);
    }
    be.glu(glint_backend::Glu::GeGlu, &x, &g, &out).unwrap();
    let got = read_f32(&be, &out, n);
    for i in 0..n {
        let want = table(xv[i]) * gv[i];
        assert_eq!(
            got[i].to_bits(),
            want.to_bits(),
            "geglu({}, {})",
            xv[i],
            gv[i]
        );
    }
    // A length with a tail past the last whole 8 (the vector loop's
    // remainder), from an odd start.
    let m = 13;
    let (xs, gs) = (&xv[5..5 + m], &gv[5..5 + m]);
    let (x13, g13) = (f32s(&be, [m, 1, 1, 1], xs), f32s(&be, [m, 1, 1, 1], gs));
    let o13 = zeros(&be, GgmlType::F32, [m, 1, 1, 1]);
    be.glu(glint_backend::Glu::GeGlu, &x13, &g13, &o13).unwrap();
    let got = read_f32(&be, &o13, m);
    for i in 0..m {
        let want = table(xs[i]) * gs[i];
        assert_eq!(
            got[i].to_bits(),
            want.to_bits(),
            "geglu({}, {})",
            xs[i],
            gs[i]
        );
    }
    // The oracle is not the table: somewhere the two differ.
    let xo = f32s(&oracle, [n, 1, 1, 1], &xv);
    let oo = zeros(&oracle, GgmlType::F32, [n, 1, 1, 1]);
    oracle.unary(glint_backend::Unary::Gelu, &xo, &oo).unwrap();
    let exact = read_f32(&oracle, &oo, n);
    let differ = (0..n).filter(|&i| exact[i] != table(xv[i])).count();
    assert!(differ > n / 4, "only {differ} of {n} differ from the table");
}

/// A batch of queries gives, bit for bit, what each query gives alone: the
/// batched path (a widened window, all heads of a kv head at once) and the
/// one-token path (rows widened one at a time, head by head) multiply and
/// add in the same order. GQA 4/1 with head_dim 256 (Gemma 3) and 9/3 with
/// 64 (SmolLM2), F16 caches, causal.
#[test]
fn attention_of_a_batch_equals_its_tokens_one_at_a_time() {
    let be = ggml_backend();
    let mut rng = Rng(0x5eed_0003);
    for (nh, nkv, hd) in [(4usize, 1usize, 256usize), (9, 3, 64)] {
        let (n_kv, m) = (23usize, 5usize);
        let q = rng.vec(hd * nh * m);
        let k16: Vec<f16> = rng
            .vec(hd * nkv * n_kv)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let v16: Vec<f16> = rng
            .vec(hd * nkv * n_kv)
            .iter()
            .map(|&x| f16::from_f32(x))
            .collect();
        let kt = f16s(&be, [hd * nkv, n_kv, 1, 1], &k16);
        let vt = f16s(&be, [hd * nkv, n_kv, 1, 1], &v16);
        let mut mask = vec![0f32; n_kv * m];
        for i in 0..m {
            for j in n_kv - m + i + 1..n_kv {
                mask[i * n_kv + j] = f32::NEG_INFINITY;
            }
        }
        let p = AttnParams::new(nh, nkv, hd, n_kv);
        let out = zeros(&be, GgmlType::F32, [hd * nh, m, 1, 1]);
        let (qt, mt) = (
            f32s(&be, [hd, nh, m, 1], &q),
            f32s(&be, [n_kv, m, 1, 1], &mask),
        );
        be.attention(&qt, &kt, &vt, &mt, &p, &out).unwrap();
        let batch = read_f32(&be, &out, hd * nh * m);
        for i in 0..m {
            let qi = f32s(&be, [hd, nh, 1, 1], &q[i * hd * nh..(i + 1) * hd * nh]);
            let mi = f32s(&be, [n_kv, 1, 1, 1], &mask[i * n_kv..(i + 1) * n_kv]);
            let oi = zeros(&be, GgmlType::F32, [hd * nh, 1, 1, 1]);
            be.attention(&qi, &kt, &vt, &mi, &p, &oi).unwrap();
            let alone = read_f32(&be, &oi, hd * nh);
            for (e, (a, b)) in alone.iter().zip(&batch[i * hd * nh..]).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{nh}/{nkv} hd {hd} token {i} elem {e}"
                );
            }
        }
    }
}

/// `mul_mats` (a decode step's Q/K/V or gate/up as one job, `x` quantized
/// once per vec_dot_type) gives, bit for bit, what `mul_mat` gives weight
/// by weight: for a decode column (the one-job path; weights of three
/// vec_dot types, rows enough to split into several tasks) and for a
/// prefill (weight by weight); and a length mismatch is an error.
#[test]
fn mul_mats_equal_mul_mat_weight_by_weight() {
    let be = ggml_backend();
    let mut rng = Rng(0x5eed_0002);
    let k = 512;
    // Q8_0 and Q5_0 share a vec_dot_type but not a prepared column (on a
    // VNNI cpu each prepares its own: Gemma 3's Q/K/V).
    let tys = [
        GgmlType::Q4_1,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ];
    let ns = [576usize, 192, 192, 1536, 256];
    let ws: Vec<_> = tys
        .iter()
        .zip(ns)
        .map(|(&ty, n)| {
            let wf = rng.vec(k * n);
            let rb = ty.bytes_for(k as u64).unwrap() as usize;
            let mut wb = vec![0u8; rb * n];
            for r in 0..n {
                glint_quant::quantize_row(
                    ty,
                    &wf[r * k..(r + 1) * k],
                    &mut wb[r * rb..(r + 1) * rb],
                )
                .unwrap();
            }
            from_bytes(&be, ty, [k, n, 1, 1], &wb)
        })
        .collect();
    for m in [1usize, 20] {
        let xt = f32s(&be, [k, m, 1, 1], &rng.vec(k * m));
        let outs: Vec<_> = ns
            .iter()
            .map(|&n| zeros(&be, GgmlType::F32, [n, m, 1, 1]))
            .collect();
        let wr: Vec<_> = ws.iter().collect();
        let or: Vec<_> = outs.iter().collect();
        be.mul_mats(&wr, &xt, &or).unwrap();
        for (((w, o), &n), ty) in ws.iter().zip(&outs).zip(&ns).zip(tys) {
            let one = zeros(&be, GgmlType::F32, [n, m, 1, 1]);
            be.mul_mat(w, &xt, &one).unwrap();
            let (got, want) = (read_f32(&be, o, n * m), read_f32(&be, &one, n * m));
            assert!(got.iter().any(|&v| v != 0.0), "{ty} m={m}: zeros");
            assert!(got == want, "{ty} m={m}: mul_mats differs from mul_mat");
        }
    }
    let xt = f32s(&be, [k, 1, 1, 1], &rng.vec(k));
    let o = zeros(&be, GgmlType::F32, [576, 1, 1, 1]);
    let e = be.mul_mats(&[&ws[0], &ws[1]], &xt, &[&o]).unwrap_err();
    assert!(e.to_string().contains("2 weights for 1 outputs"), "{e}");
}
