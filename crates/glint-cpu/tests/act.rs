//! `glint_cpu::act`: activations quantized as ggml's x86 cpu backend does
//! (`quantize_row_q8_0`/`_q8_1` of arch/x86/quants.c; Q8_K by the
//! reference), held to loops written here from ggml's C, bit for bit.

mod common;

use common::Rng;
use glint_backend::GgmlType;
use half::f16;

/// ggml x86: d = amax / 127, id = 127 / amax, levels rint(x * id).
fn q8_x86(x: &[f32]) -> (f32, Vec<i8>) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (
        d,
        x.iter()
            .map(|&v| (v * id).round_ties_even() as i8)
            .collect(),
    )
}

/// Rows with outliers, exact ties and zero blocks.
fn rows(rng: &mut Rng, k: usize) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for r in 0..40 {
        let mut x: Vec<f32> = rng.vec(k).iter().map(|v| v * (1 + r) as f32).collect();
        if r % 5 == 1 {
            // levels that land exactly on .5: amax 127 makes id 1
            for (j, v) in x.iter_mut().enumerate() {
                *v = if j % 32 == 0 {
                    127.0
                } else {
                    (j % 64) as f32 * 0.5 - 16.0
                };
            }
        }
        if r % 7 == 2 {
            x[..k.min(256)].fill(0.0);
        }
        out.push(x);
    }
    out
}

#[test]
fn q8_0_and_q8_1_match_ggmls_x86_quantizer() {
    let mut rng = Rng(0xac7);
    let mut differ_from_ref = 0;
    for (vt, head) in [(GgmlType::Q8_0, 2), (GgmlType::Q8_1, 4)] {
        let k = 512;
        for x in rows(&mut rng, k) {
            let mut got = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
            glint_cpu::act::quantize_row(vt, &x, &mut got).unwrap();
            let size = head + 32;
            for (b, (xb, gb)) in x.chunks(32).zip(got.chunks(size)).enumerate() {
                let (d, q) = q8_x86(xb);
                assert_eq!(
                    &gb[..2],
                    &f16::from_f32(d).to_le_bytes(),
                    "{vt} block {b} d"
                );
                if vt == GgmlType::Q8_1 {
                    let sum: i32 = q.iter().map(|&l| l as i32).sum();
                    let s = f16::from_f32(d * sum as f32).to_le_bytes();
                    assert_eq!(&gb[2..4], &s, "{vt} block {b} s");
                }
                let gq: Vec<i8> = gb[head..].iter().map(|&l| l as i8).collect();
                assert_eq!(gq, q, "{vt} block {b} levels");
            }
            let mut reference = vec![0u8; got.len()];
            glint_quant::quantize_row(vt, &x, &mut reference).unwrap();
            differ_from_ref += usize::from(reference != got);
        }
    }
    // The tie rows round half to even here, half away from zero in `_ref`.
    assert!(
        differ_from_ref >= 16,
        "only {differ_from_ref} rows differ from the _ref quantizer"
    );
}

#[test]
fn q8_k_is_ggmls_reference_bit_for_bit() {
    let mut rng = Rng(0xac8);
    for x in rows(&mut rng, 1024) {
        let vt = GgmlType::Q8_K;
        let mut got = vec![0u8; vt.bytes_for(1024).unwrap() as usize];
        let mut want = got.clone();
        glint_cpu::act::quantize_row(vt, &x, &mut got).unwrap();
        glint_quant::quantize_row(vt, &x, &mut want).unwrap();
        assert_eq!(got, want);
    }
}

#[test]
fn bad_lengths_are_errors_and_other_types_pass_through() {
    let x = vec![0.5f32; 64];
    let mut short = vec![0u8; 60];
    assert!(glint_cpu::act::quantize_row(GgmlType::Q8_0, &x, &mut short).is_err());
    assert!(glint_cpu::act::quantize_row(GgmlType::Q8_K, &x, &mut vec![0u8; 292]).is_err());
    let mut h = vec![0u8; 128];
    glint_cpu::act::quantize_row(GgmlType::F16, &x, &mut h).unwrap();
    assert_eq!(&h[..2], &f16::from_f32(0.5).to_le_bytes());
}
