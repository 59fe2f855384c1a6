//! `GLINT_CPU_TIER=avx2` caps the kernels at the AVX2 tier: on any cpu
//! the fast paths are then exactly what an AVX2-only cpu runs. Alone in
//! its test binary: the cap is read once per process, so it is set before
//! anything asks.

mod common;

use common::Rng;
use glint_backend::{Backend, GgmlType};
use glint_cpu::{amx, mul_mat_ggml_with, qdot, CpuBackend, Kernels, WeightRows};

#[test]
fn the_avx2_cap_runs_the_avx2_tier_bit_for_bit() {
    std::env::set_var(qdot::TIER_VAR, "avx2");
    assert_eq!(qdot::tier_cap(), Ok(qdot::Tier::Avx2));
    let be = CpuBackend::new(Some(2)).unwrap();
    assert_eq!(be.name(), "cpu (2 threads, Avx2 tier)");
    assert!(!amx::available(), "the cap leaves AMX off");
    // No VNNI kernels under the cap; the AVX2 ones where the cpu has AVX2.
    for ty in [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0] {
        assert!(
            qdot::fast_dot_prepared(ty).is_none(),
            "{ty}: a VNNI row kernel"
        );
        assert_eq!(qdot::fast_dot(ty).is_some(), cfg!(host_avx2), "{ty}");
    }
    // Kernels::Fast under the cap is Kernels::Avx2: decode (one column),
    // a few columns, and a prefill's worth (the lane kernels).
    let mut rng = Rng(0x71e2);
    let (k, n) = (512, 72);
    let mut compared = 0;
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let x: Vec<f32> = rng.vec(k * n);
        let mut w = vec![0u8; ty.bytes_for(k as u64).unwrap() as usize * n];
        let row_bytes = w.len() / n;
        for row in w.chunks_mut(row_bytes) {
            glint_quant::quantize_row(ty, &rng.vec(k), row).unwrap();
        }
        let wr = WeightRows {
            ty,
            bytes: &w,
            row_bytes,
            k,
            n,
        };
        for m in [1, 3, 64] {
            let (mut fast, mut avx2) = (vec![0f32; n * m], vec![0f32; n * m]);
            mul_mat_ggml_with(Kernels::Fast, wr, &x[..k * m], m, &mut fast).unwrap();
            mul_mat_ggml_with(Kernels::Avx2, wr, &x[..k * m], m, &mut avx2).unwrap();
            for (i, (f, a)) in fast.iter().zip(&avx2).enumerate() {
                assert_eq!(f.to_bits(), a.to_bits(), "{ty} m={m} [{i}]: {f} vs {a}");
            }
            compared += n * m;
        }
    }
    assert_eq!(compared, 5 * 72 * (1 + 3 + 64));
}
