//! mul_mat and get_rows for every weight format with a kernel, against an
//! f64 reference over a scalar dequantization written from ggml's block
//! layouts (K-quants: glint-quant's `dequantize_row`, bit-identical to
//! ggml); windowed binding of tensors over the binding limit.

mod common;

use common::*;
use glint_backend::{Backend, BackendError, GgmlType, SharedBytes, Usage};
use glint_gpu::{GpuBackend, GpuOptions, GpuTensor, MatvecChoice};
use half::{bf16, f16};

fn h(b: &[u8], o: usize) -> f64 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f64()
}

/// Scalar dequantization of one row (`k` elements), from ggml's layouts.
fn dequant_row(ty: GgmlType, b: &[u8], k: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(k);
    match ty {
        GgmlType::F32 => out.extend(
            b.chunks(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
        ),
        GgmlType::F16 => out.extend(
            b.chunks(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()),
        ),
        GgmlType::BF16 => out.extend(
            b.chunks(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()),
        ),
        _ if is_k_quant(ty) => {
            let mut y = vec![0f32; k];
            glint_quant::dequantize_row(ty, b, &mut y).unwrap();
            out.extend(y.iter().map(|&v| v as f64));
        }
        _ => {
            let bs = ty.type_size();
            for blk in b.chunks(bs) {
                let mut q = [0f64; 32];
                match ty {
                    GgmlType::Q8_0 => {
                        let d = h(blk, 0);
                        for j in 0..32 {
                            q[j] = d * blk[2 + j] as i8 as f64;
                        }
                    }
                    GgmlType::Q4_0 | GgmlType::Q4_1 => {
                        let d = h(blk, 0);
                        let (m, qs, off) = if ty == GgmlType::Q4_1 {
                            (h(blk, 2), 4, 0.0)
                        } else {
                            (0.0, 2, 8.0)
                        };
                        for j in 0..16 {
                            q[j] = d * ((blk[qs + j] & 0xF) as f64 - off) + m;
                            q[j + 16] = d * ((blk[qs + j] >> 4) as f64 - off) + m;
                        }
                    }
                    GgmlType::Q5_0 | GgmlType::Q5_1 => {
                        let d = h(blk, 0);
                        let (m, o, off) = if ty == GgmlType::Q5_1 {
                            (h(blk, 2), 4, 0.0)
                        } else {
                            (0.0, 2, 16.0)
                        };
                        let qh = u32::from_le_bytes([blk[o], blk[o + 1], blk[o + 2], blk[o + 3]]);
                        for j in 0..16 {
                            let lo = (blk[o + 4 + j] & 0xF) as u32 | ((qh >> j) & 1) << 4;
                            let hi = (blk[o + 4 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
                            q[j] = d * (lo as f64 - off) + m;
                            q[j + 16] = d * (hi as f64 - off) + m;
                        }
                    }
                    _ => unreachable!(),
                }
                out.extend_from_slice(&q);
            }
        }
    }
    assert_eq!(out.len(), k);
    out
}

/// Random bytes of a `[k, n]` weight with sane scales (no NaN/inf halves).
fn random_weight(r: &mut Rng, ty: GgmlType, k: usize, n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..n {
        match ty {
            GgmlType::F32 => (0..k).for_each(|_| b.extend(r.f32().to_le_bytes())),
            GgmlType::F16 => (0..k).for_each(|_| b.extend(f16::from_f32(r.f32()).to_le_bytes())),
            GgmlType::BF16 => (0..k).for_each(|_| b.extend(bf16::from_f32(r.f32()).to_le_bytes())),
            _ if is_k_quant(ty) => b.extend(random_k_blocks(r, ty, k / 256)),
            _ => {
                for _ in 0..k / 32 {
                    let start = b.len();
                    b.extend((0..ty.type_size()).map(|_| r.next_u64() as u8));
                    b[start..start + 2]
                        .copy_from_slice(&f16::from_f32(r.f32() * 0.05).to_le_bytes());
                    if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                        b[start + 2..start + 4]
                            .copy_from_slice(&f16::from_f32(r.f32() * 0.1).to_le_bytes());
                    }
                }
            }
        }
    }
    b
}

fn weight(be: &GpuBackend, ty: GgmlType, k: usize, n: usize, bytes: Vec<u8>) -> GpuTensor {
    be.weight(
        desc(ty, [k, n, 1, 1], Usage::Weights),
        SharedBytes::from_vec(bytes),
    )
    .unwrap()
}

/// mul_mat of `be` on weight bytes `wb` (`[k, n]` of `ty`) and x `[k, m]`.
fn mul_mat_out(
    be: &GpuBackend,
    ty: GgmlType,
    wb: &[u8],
    x: &[f32],
    [k, n, m]: [usize; 3],
) -> Vec<f32> {
    let w = weight(be, ty, k, n, wb.to_vec());
    let tx = f32s_on(be, [k, m, 1, 1], x);
    let out = f32s_on(be, [n, m, 1, 1], &vec![f32::NAN; n * m]);
    be.mul_mat(&w, &tx, &out).unwrap();
    let mut got = vec![0u8; n * m * 4];
    be.read(&out, 0, &mut got).unwrap();
    bytemuck::cast_slice(&got).to_vec()
}

/// `got` (mul_mat of `wb` and `x`) against the f64 reference, within the
/// format's tolerance.
fn assert_mul_mat(
    what: &str,
    ty: GgmlType,
    wb: &[u8],
    x: &[f32],
    [k, n, m]: [usize; 3],
    got: &[f32],
) {
    let rb = ty.bytes_for(k as u64).unwrap() as usize;
    let rows: Vec<Vec<f64>> = (0..n)
        .map(|i| dequant_row(ty, &wb[i * rb..(i + 1) * rb], k))
        .collect();
    let mut want = vec![0f64; n * m];
    for c in 0..m {
        for (i, row) in rows.iter().enumerate() {
            want[c * n + i] = row
                .iter()
                .zip(&x[c * k..])
                .map(|(a, &b)| a * b as f64)
                .sum();
        }
    }
    let t = if is_float(ty) {
        tol::MATMUL_FLOAT
    } else {
        tol::MATMUL_QUANT
    };
    assert_close(&format!("{what} {ty:?} k{k} n{n} m{m}"), got, &want, t);
}

/// mul_mat of `be` for one type and shape vs the reference.
fn check_mul_mat(be: &GpuBackend, r: &mut Rng, ty: GgmlType, k: usize, n: usize, m: usize) {
    let wb = random_weight(r, ty, k, n);
    let x = r.vec_scaled(k * m, 1.0);
    let got = mul_mat_out(be, ty, &wb, &x, [k, n, m]);
    assert_mul_mat("mul_mat", ty, &wb, &x, [k, n, m], &got);
}

fn check_get_rows(be: &GpuBackend, r: &mut Rng, ty: GgmlType, k: usize, n: usize) {
    let wb = random_weight(r, ty, k, n);
    let rb = ty.bytes_for(k as u64).unwrap() as usize;
    let w = weight(be, ty, k, n, wb.clone());
    let ids: Vec<i32> = vec![
        0,
        (n - 1) as i32,
        r.below(n) as i32,
        -1,
        n as i32,
        r.below(n) as i32,
        (n / 2) as i32,
    ];
    let tids = be
        .alloc(desc(GgmlType::I32, [ids.len(), 1, 1, 1], Usage::Scratch))
        .unwrap();
    be.write(&tids, 0, bytemuck::cast_slice(&ids)).unwrap();
    let out = be
        .alloc(desc(GgmlType::F32, [k, ids.len(), 1, 1], Usage::Scratch))
        .unwrap();
    be.write(&out, 0, &vec![0xFF; k * ids.len() * 4]).unwrap();
    be.get_rows(&w, &tids, &out).unwrap();
    let mut got = vec![0u8; k * ids.len() * 4];
    be.read(&out, 0, &mut got).unwrap();
    let got: Vec<f32> = bytemuck::cast_slice(&got).to_vec();
    let mut want = Vec::new();
    for &id in &ids {
        if id < 0 || id as usize >= n {
            want.extend(std::iter::repeat_n(0.0, k));
        } else {
            want.extend(dequant_row(ty, &wb[id as usize * rb..][..rb], k));
        }
    }
    assert_close(&format!("get_rows {ty:?}"), &got, &want, tol::GET_ROWS);
}

#[test]
fn mul_mat_matvec_and_matmul_every_type() {
    each_gpu(|| {
        let mut r = Rng(seed());
        for ty in weight_types() {
            // Float rows of 998 exercise the tails; quant rows are whole blocks
            // (768: an odd number of K-quant super-blocks).
            let k = row_len(ty, [998, 768, 1024]);
            for (n, m) in [(67, 1), (13, 3), (131, 67)] {
                check_mul_mat(gpu(), &mut r, ty, k, n, m);
            }
            // Long rows: the matvec's unrolled steps (4 pairs of 8 a lane,
            // 2048 elements a workgroup step) and the pairs after them, and
            // for plain floats (4356 = 8 * 544 + 4) its last group of 4.
            let k = row_len(ty, [4356, 4352, 4352]);
            for (n, m) in [(9, 1), (5, 6)] {
                check_mul_mat(gpu(), &mut r, ty, k, n, m);
            }
        }
    });
}

/// The float matvec of the formats whose weights are a scale times a level
/// (flag PS: the levels dotted with x, each group of 4's dot scaled once)
/// and the same matvec scaling every weight first
/// ([`GpuOptions::disable_matvec_scaled`]) both hold the f64 reference
/// within the format's tolerance, and they are two paths (their sums
/// round differently somewhere). One and eight columns, rows of 320 and
/// of 1024 (whether a row's pairs end in the loop's remainder depends on
/// the lanes a row has). The fused matvecs share the loop
/// (matvec_cols.wgsl's `partials`).
#[test]
fn scaled_matvec_and_scaled_weights_both_hold_the_reference() {
    // The environment's switches override the options: the float path
    // with PS must be the default's.
    for var in ["GLINT_INT8", "GLINT_MATVEC_SCALED"] {
        if std::env::var_os(var).is_some() {
            eprintln!("skipped: {var} is set");
            return;
        }
    }
    let on = GpuBackend::new(GpuOptions::default()).unwrap();
    let off = GpuBackend::new(GpuOptions {
        disable_matvec_scaled: true,
        ..Default::default()
    })
    .unwrap();
    assert!(
        off.name().contains("matvec scales each weight"),
        "{}",
        off.name()
    );
    assert!(
        !on.name().contains("matvec scales each weight"),
        "{}",
        on.name()
    );
    let mut r = Rng(seed());
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q3_K,
        GgmlType::Q6_K,
    ] {
        let mut differ = 0;
        for (k, m) in [(320usize, 1), (1024, 1), (1024, 8)] {
            let k = if is_k_quant(ty) {
                k.next_multiple_of(256)
            } else {
                k
            };
            let n = 37;
            let wb = random_weight(&mut r, ty, k, n);
            let x = r.vec_scaled(k * m, 1.0);
            let a = mul_mat_out(&on, ty, &wb, &x, [k, n, m]);
            let b = mul_mat_out(&off, ty, &wb, &x, [k, n, m]);
            assert_mul_mat("scaled", ty, &wb, &x, [k, n, m], &a);
            assert_mul_mat("per weight", ty, &wb, &x, [k, n, m], &b);
            differ += a
                .iter()
                .zip(&b)
                .filter(|(p, q)| p.to_bits() != q.to_bits())
                .count();
        }
        assert!(differ > 0, "{ty:?}: flag PS changed no sum");
    }
}

/// The load-time tune ([`GpuBackend::tune_matvec`], forced on: it is off
/// on a software adapter by default) times the matvec at 1, 2 and 4 rows
/// at once and keeps one by its rule; rows the options set are not tuned;
/// off, it does nothing. Whichever it keeps, the matvec gives the untuned
/// backend's bits (and holds the f64 reference).
#[test]
fn the_tune_times_each_rows_at_once_and_keeps_one_with_the_same_bits() {
    for var in ["GLINT_TUNE", "GLINT_MATVEC_ROWS", "GLINT_MATVEC_WG_ROWS"] {
        if std::env::var_os(var).is_some() {
            eprintln!("skipped: {var} is set");
            return;
        }
    }
    let mut r = Rng(seed());
    let (k, n) = (512, 64);
    let types = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q6_K];
    let bytes: Vec<Vec<u8>> = types
        .iter()
        .map(|&ty| random_weight(&mut r, ty, k, n))
        .collect();
    // What `opts` tunes a step of one matvec of each weight at one column
    // for (None: nothing), and the backend after.
    let tune = |opts: GpuOptions| {
        let be = GpuBackend::new(opts).unwrap();
        let ws: Vec<GpuTensor> = types
            .iter()
            .zip(&bytes)
            .map(|(&ty, b)| weight(&be, ty, k, n, b.clone()))
            .collect();
        let x = f32s_on(&be, [k, 1, 1, 1], &vec![0.5; k]);
        let out = f32s_on(&be, [n, 1, 1, 1], &vec![0.0; n]);
        let mut steps = 0;
        let report = be
            .tune_matvec(1234, || -> Result<(), BackendError> {
                steps += 1;
                for w in &ws {
                    be.mul_mat(w, &x, &out)?;
                }
                be.sync()
            })
            .unwrap();
        drop((ws, x, out));
        (report, steps, be)
    };
    let on = || GpuOptions {
        tune: Some(true),
        ..Default::default()
    };
    let off = || GpuOptions {
        tune: Some(false),
        ..Default::default()
    };

    // Off: nothing timed, the default stays.
    let (report, steps, untuned) = tune(off());
    assert!(report.is_none() && untuned.tune_report().is_none());
    assert_eq!(steps, 0);
    assert!(!untuned.tune_wanted());
    let default_rows = if untuned.features_used().subgroups {
        2
    } else {
        1
    };
    assert_eq!(untuned.matvec_choice(), MatvecChoice { rows: default_rows });
    assert!(!untuned.name().contains("tuned"), "{}", untuned.name());

    let (report, steps, be) = tune(on());
    if !be.features_used().subgroups {
        // A row a workgroup: nothing to choose.
        assert!(report.is_none() && steps == 0);
        return;
    }
    let report = report.expect("a tune report");
    eprintln!("{report}");
    let got: Vec<usize> = report.runs.iter().map(|r| r.choice.rows).collect();
    assert_eq!(got, [2, 1, 4]);
    // An untimed step each, then TUNE_PASSES rounds of a step each.
    assert_eq!(steps, 3 * (1 + glint_gpu::TUNE_PASSES));
    assert_eq!(
        (report.step_bytes, report.passes),
        (1234, glint_gpu::TUNE_PASSES)
    );
    assert!(report.runs.iter().all(|r| r.median.as_nanos() > 0));
    // The rule: the fastest where it beats the default by the margin.
    let t: Vec<f64> = report.runs.iter().map(|r| r.median.as_secs_f64()).collect();
    let fastest = t.iter().cloned().fold(f64::INFINITY, f64::min);
    if fastest < t[0] * (1.0 - glint_gpu::TUNE_MARGIN) {
        assert_eq!(t[report.chosen], fastest, "{report}");
    } else {
        assert_eq!(report.chosen, 0, "{report}");
    }
    assert_eq!(be.matvec_choice(), report.choice());
    assert_eq!(be.matvec_rows(), report.choice().rows);
    assert_eq!(be.tune_report().map(|r| r.chosen), Some(report.chosen));
    assert!(!be.tune_wanted() || be.tune_report().is_some());
    assert!(be.name().contains("matvec tuned at load"), "{}", be.name());
    // The kept rows give the untuned bits, at one column and eight.
    for (ty, b) in types.iter().zip(&bytes) {
        for m in [1, 8] {
            let x = r.vec_scaled(k * m, 1.0);
            let got = mul_mat_out(&be, *ty, b, &x, [k, n, m]);
            let want = mul_mat_out(&untuned, *ty, b, &x, [k, n, m]);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{ty:?} m {m}");
            assert_mul_mat("tuned", *ty, b, &x, [k, n, m], &got);
        }
    }

    // Rows set by the options: kept, nothing to time.
    let (report, steps, be) = tune(GpuOptions {
        matvec_rows: 4,
        ..on()
    });
    assert!(report.is_none() && be.tune_report().is_none() && steps == 0);
    assert_eq!(be.matvec_rows(), 4);

    // A step that fails: the error comes back, the default stays.
    let be = GpuBackend::new(on()).unwrap();
    let mut steps = 0;
    let e = be
        .tune_matvec(0, || {
            steps += 1;
            match steps {
                4 => Err(BackendError::Device("step 4 failed".into())),
                _ => Ok(()),
            }
        })
        .unwrap_err();
    assert!(e.to_string().contains("step 4 failed"), "{e}");
    assert_eq!(be.matvec_choice(), MatvecChoice { rows: 2 });
    assert!(be.tune_report().is_none());
}

#[test]
fn get_rows_every_type() {
    each_gpu(|| {
        let mut r = Rng(seed());
        for ty in weight_types() {
            let k = row_len(ty, [998, 512, 256]);
            check_get_rows(gpu(), &mut r, ty, k, 67);
        }
    });
}

/// Windowing with odd row sizes (Q4_0 rows of 18 * 5 = 90 bytes) under a
/// small binding limit: several windows, offsets aligned, whole rows.
#[test]
fn windows_under_a_small_binding_limit() {
    let opts = GpuOptions {
        max_binding_bytes: Some(4096),
        ..Default::default()
    };
    for opts in [opts.clone(), without_features(opts)] {
        let be = GpuBackend::new(opts).unwrap();
        eprintln!("on {}", be.name());
        let mut r = Rng(seed());
        for ty in [GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::F16, GgmlType::F32] {
            let k = if is_float(ty) { 158 } else { 160 };
            check_mul_mat(&be, &mut r, ty, k, 301, 1);
            check_mul_mat(&be, &mut r, ty, k, 301, 70);
            check_get_rows(&be, &mut r, ty, k, 301);
        }
    }
}

/// The same for the K-quants, whose rows (84, 110, 144, 176, 210 bytes a
/// super-block) are not multiples of the offset alignment: a window must
/// start at a multiple of `align / gcd(row_bytes, align)` rows. 801 rows of
/// 256 elements are over 64 KiB for every type: at least three windows
/// under a 32 KiB limit.
#[test]
fn k_quant_windows_under_a_small_binding_limit() {
    let opts = GpuOptions {
        max_binding_bytes: Some(32 << 10),
        ..Default::default()
    };
    for opts in [opts.clone(), without_features(opts)] {
        let be = GpuBackend::new(opts).unwrap();
        eprintln!("on {}", be.name());
        let mut r = Rng(seed());
        for ty in k_types() {
            let (k, n) = (256, 801);
            assert!(ty.bytes_for((k * n) as u64).unwrap() > 64 << 10, "{ty}");
            check_mul_mat(&be, &mut r, ty, k, n, 1);
            check_mul_mat(&be, &mut r, ty, k, n, 70);
            check_get_rows(&be, &mut r, ty, k, n);
        }
    }
}

/// A type with no dequantizer (SizeOnly, like IQ2_XXS) is held as bytes but
/// mul_mat and get_rows return a typed error naming it, not a panic.
#[test]
fn size_only_weight_is_an_error_not_a_panic() {
    let be = gpu();
    let ty = GgmlType::IQ2_XXS;
    let (k, n) = (256, 3);
    let bytes = vec![0u8; ty.bytes_for((k * n) as u64).unwrap() as usize];
    let w = weight(be, ty, k, n, bytes);
    let x = f32s([k, 1, 1, 1], &vec![1.0; k]);
    let out = poisoned(GgmlType::F32, [n, 1, 1, 1]);
    let e = be.mul_mat(&w, &x, &out).unwrap_err();
    assert!(
        matches!(
            e,
            BackendError::Type {
                op: "mul_mat",
                ty: GgmlType::IQ2_XXS,
                what: "weight"
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("IQ2_XXS"), "{e}");
    let out = poisoned(GgmlType::F32, [k, 2, 1, 1]);
    let e = be.get_rows(&w, &i32s(&[0, 2]), &out).unwrap_err();
    assert!(
        matches!(
            e,
            BackendError::Type {
                op: "get_rows",
                ty: GgmlType::IQ2_XXS,
                ..
            }
        ),
        "{e}"
    );
}

/// A real weight over the binding limit: [1024, 80000] f32 = 312 MiB,
/// m = 1; a sample of rows vs the reference. The limit is the device's
/// own where it is 128 MiB (lavapipe); a device that binds more (an H100
/// binds 2 GiB) gets a backend capped at 128 MiB, so the same windows are
/// crossed on every device rather than the test passing without any.
#[test]
fn big_weight_over_the_binding_limit() {
    const CAP: u64 = 128 << 20;
    let capped;
    let be = if gpu().limits().max_storage_buffer_binding_size > CAP {
        capped = GpuBackend::new(GpuOptions {
            max_binding_bytes: Some(CAP),
            ..Default::default()
        })
        .unwrap();
        &capped
    } else {
        gpu()
    };
    let (k, n) = (1024usize, 80_000usize);
    let bytes = (k * n * 4) as u64;
    let limit = be.limits().max_storage_buffer_binding_size.min(CAP);
    assert!(bytes > limit, "not over the limit");
    let mut r = Rng(seed());
    let mut wb = Vec::with_capacity(k * n * 4);
    for _ in 0..k * n {
        wb.extend_from_slice(&r.f32().to_le_bytes());
    }
    // Every tensor on `be` (the common helpers allocate on the shared
    // backend, another device when `be` is the capped one).
    let on_be = |ty: GgmlType, ne: [usize; 4], bytes: &[u8]| {
        let t = be.alloc(desc(ty, ne, Usage::Scratch)).unwrap();
        be.write(&t, 0, bytes).unwrap();
        t
    };
    let read_be = |t: &GpuTensor| -> Vec<f32> {
        let mut b = vec![0u8; t.desc_bytes()];
        be.read(t, 0, &mut b).unwrap();
        bytemuck::cast_slice(&b).to_vec()
    };
    let w = weight(be, GgmlType::F32, k, n, wb);
    let x = r.vec_scaled(k, 1.0);
    let tx = on_be(GgmlType::F32, [k, 1, 1, 1], bytemuck::cast_slice(&x));
    let out = on_be(GgmlType::F32, [n, 1, 1, 1], &vec![0xFF; n * 4]);
    be.mul_mat(&w, &tx, &out).unwrap();
    let got = read_be(&out);
    // Rows from every window, the window edges included.
    let rows_per_128mib = (128 << 20) / (k * 4);
    let mut sample: Vec<usize> = vec![
        0,
        1,
        rows_per_128mib - 1,
        rows_per_128mib,
        2 * rows_per_128mib,
        n - 1,
    ];
    sample.extend((0..40).map(|_| r.below(n)));
    let mut wrow = vec![0u8; k * 4];
    for &i in &sample {
        be.read(&w, i * k * 4, &mut wrow).unwrap();
        let row: &[f32] = bytemuck::cast_slice(&wrow);
        let want: f64 = row.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
        assert_close(
            &format!("big row {i}"),
            &got[i..i + 1],
            &[want],
            tol::MATMUL_FLOAT,
        );
    }
    assert!(got.iter().all(|v| v.is_finite()), "a row was not written");
    // get_rows across windows of the same table.
    let ids = vec![
        0,
        (n - 1) as i32,
        rows_per_128mib as i32,
        3 * rows_per_128mib as i32 / 2,
    ];
    let out = on_be(
        GgmlType::F32,
        [k, ids.len(), 1, 1],
        &vec![0xFF; k * ids.len() * 4],
    );
    let tids = on_be(
        GgmlType::I32,
        [ids.len(), 1, 1, 1],
        bytemuck::cast_slice(&ids),
    );
    be.get_rows(&w, &tids, &out).unwrap();
    let got = read_be(&out);
    for (j, &id) in ids.iter().enumerate() {
        be.read(&w, id as usize * k * 4, &mut wrow).unwrap();
        let want: Vec<f64> = bytemuck::cast_slice::<u8, f32>(&wrow)
            .iter()
            .map(|&v| v as f64)
            .collect();
        assert_close("big get_rows", &got[j * k..(j + 1) * k], &want, 0.0);
    }
}

#[test]
fn memory_report_counts_weights() {
    // A backend of its own: other tests allocate on the shared one meanwhile.
    let be = GpuBackend::new(GpuOptions::default()).unwrap();
    let w = weight(&be, GgmlType::Q8_0, 64, 3, vec![0; 34 * 2 * 3]);
    assert_eq!(be.memory().weights, 204);
    drop(w);
    assert_eq!(be.memory().weights, 0);
}

/// A matvec subgroup's rows taken 1, 2 or 4 at once
/// ([`GpuOptions::matvec_rows`]: their weights against one read of x)
/// give every row the bits of a row alone: the plain matvec, the residual
/// add in its epilogue, the fused Q/K/V matvec and the fused gate/up/GLU,
/// each with the norm folded in and the previous block's post-norm added
/// (the stream it stores compared too), with f32 dots and, for the
/// quantized formats, integer dots (int8). Parts of 37 and 21 rows leave
/// the last workgroup part-full (a row past the end read and not stored);
/// Q4_0 rows of 320 take the pair loop's remainder after its unrolled
/// steps, F32 rows of 260 its 4-element tail, F16 rows of 258 the path
/// without pairs, where the rows take their turns.
#[test]
fn matvec_rows_at_once_keep_each_rows_bits() {
    let mut r = Rng(seed());
    // A format of each pairing (and 1, 4 and 8 as the columns' bound):
    // each case compiles its kernels on three devices.
    let cases = [
        (GgmlType::F32, 260, 3),
        (GgmlType::F16, 258, 1),
        (GgmlType::Q4_0, 320, 1),
        (GgmlType::Q4_0, 256, 8),
        (GgmlType::Q4_K, 512, 3),
    ];
    for int8 in [false, true] {
        let bes: Vec<GpuBackend> = [1, 2, 4]
            .into_iter()
            .map(|n| {
                GpuBackend::new(GpuOptions {
                    matvec_rows: n,
                    int8_matvec: int8,
                    ..Default::default()
                })
                .unwrap()
            })
            .collect();
        // The rows at once are a subgroup's, and the int8 path needs the
        // packed dot: the adapter must have them (lavapipe has).
        let name = bes[0].name();
        assert!(bes[0].features_used().subgroups, "{name}");
        assert_eq!(bes[0].features_used().int8, int8, "{name}");
        let rows: Vec<usize> = bes.iter().map(|b| b.matvec_rows()).collect();
        assert_eq!(rows, [1, 2, 4]);
        assert!(
            bes[1].name().contains("matvec rows 2 at once"),
            "{}",
            bes[1].name()
        );
        for (ty, k, m) in cases {
            if int8 && is_float(ty) {
                continue;
            }
            let ns = [37usize, 21, 21];
            let parts: Vec<Vec<u8>> = ns
                .iter()
                .map(|&n| random_weight(&mut r, ty, k, n))
                .collect();
            let x = r.vec_scaled(k * m, 1.0);
            let y = r.vec_scaled(k * m, 1.0);
            let nw = r.vec_scaled(k, 1.0);
            let pw = r.vec_scaled(k, 1.0);
            let res = r.vec_scaled(ns[0] * m, 1.0);
            // Every output of one backend, in order.
            let run = |be: &GpuBackend| -> Vec<Vec<f32>> {
                let f32t = |ne: [usize; 4], v: &[f32]| f32s_on(be, ne, v);
                let o = |n: usize| f32t([n, m, 1, 1], &vec![f32::NAN; n * m]);
                let descs = |i: usize| desc(ty, [k, ns[i], 1, 1], Usage::Weights);
                let w = weight(be, ty, k, ns[0], parts[0].clone());
                let packed = be
                    .weights(
                        (0..3)
                            .map(|i| (descs(i), SharedBytes::from_vec(parts[i].clone())))
                            .collect(),
                    )
                    .unwrap();
                let (tx, ty_, tnw, tpw) = (
                    f32t([k, m, 1, 1], &x),
                    f32t([k, m, 1, 1], &y),
                    f32t([k, 1, 1, 1], &nw),
                    f32t([k, 1, 1, 1], &pw),
                );
                let tres = f32t([ns[0], m, 1, 1], &res);
                let (plain, added, tmp) = (o(ns[0]), o(ns[0]), o(ns[0]));
                be.mul_mat(&w, &tx, &plain).unwrap();
                be.mul_mat_add(&w, &tx, &tres, &tmp, &added).unwrap();
                let (h, post_tmp) = (o(k), o(k));
                let xo = [o(k), o(k)];
                let post = |out| glint_backend::PostAdd {
                    y: &ty_,
                    w: &tpw,
                    eps: 1e-5,
                    tmp: &post_tmp,
                    out,
                };
                let qkv = [o(ns[0]), o(ns[1]), o(ns[2])];
                be.norm_mul_mats(
                    &tx,
                    Some(post(&xo[0])),
                    (&tnw, 1e-5),
                    &h,
                    &[&packed[0], &packed[1], &packed[2]],
                    &[&qkv[0], &qkv[1], &qkv[2]],
                )
                .unwrap();
                let (gate, up, glu) = (o(ns[1]), o(ns[1]), o(ns[1]));
                be.norm_mul_mats_glu(
                    glint_backend::Glu::SwiGlu,
                    &tx,
                    Some(post(&xo[1])),
                    (&tnw, 1e-5),
                    &h,
                    [&packed[1], &packed[2]],
                    [&gate, &up],
                    &glu,
                )
                .unwrap();
                let read = |t: &GpuTensor| -> Vec<f32> {
                    let mut b = vec![0u8; glint_backend::Tensor::desc(t).n_bytes()];
                    be.read(t, 0, &mut b).unwrap();
                    bytemuck::cast_slice(&b).to_vec()
                };
                let mut outs = vec![read(&plain), read(&added)];
                outs.extend(qkv.iter().map(read));
                outs.push(read(&glu));
                outs.extend(xo.iter().map(read));
                outs
            };
            let what = format!("{ty:?} k{k} m{m} int8 {int8}");
            let want = run(&bes[0]);
            for v in &want {
                assert!(v.iter().all(|a| a.is_finite()), "{what}: {v:?}");
            }
            for be in &bes[1..] {
                let got = run(be);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{what} output {i}: not one row's bits");
                }
            }
        }
    }
}

/// The prefill matmul's tiles of 64 (4 x 4 a thread) and of 128 (8 x 8,
/// flag TL: [`GpuOptions::matmul_tile`]) give every output the same bits,
/// each within the format's tolerance of the f64 reference: part-full
/// tiles on both sides (131 rows, 67 and 130 columns), a tile of 128 over
/// a matrix smaller than it (the option forces it), a 64-row window
/// under a small binding limit, F32 rows of 998 (the last k-step's tail)
/// and F16 rows of 258, and quantized rows of a format of each layout.
#[test]
fn matmul_tiles_of_64_and_128_give_the_same_bits() {
    let mut r = Rng(seed());
    if std::env::var_os("GLINT_MATMUL_TILE").is_some() {
        // The variable would force one tile on both backends.
        return;
    }
    // Backends forced to tiles of 64 and 128, binding at most `max` bytes.
    let pair = |max: Option<u64>| -> Vec<GpuBackend> {
        [64, 128]
            .into_iter()
            .map(|t| {
                GpuBackend::new(GpuOptions {
                    matmul_tile: t,
                    max_binding_bytes: max,
                    ..Default::default()
                })
                .unwrap()
            })
            .collect()
    };
    // One random case on both: each near the reference, the two the same bits.
    let check =
        |bes: &[GpuBackend], r: &mut Rng, (ty, k, n, m): (GgmlType, usize, usize, usize)| {
            let wb = random_weight(r, ty, k, n);
            let x = r.vec_scaled(k * m, 1.0);
            let outs: Vec<Vec<u32>> = bes
                .iter()
                .map(|be| {
                    let got = mul_mat_out(be, ty, &wb, &x, [k, n, m]);
                    let t = be.matmul_tile();
                    assert_mul_mat(&format!("matmul tile {t}"), ty, &wb, &x, [k, n, m], &got);
                    got.iter().map(|f| f.to_bits()).collect()
                })
                .collect();
            assert!(
                outs[0] == outs[1],
                "{ty:?} k{k} n{n} m{m}: tiles of 64 and 128 differ"
            );
        };
    let bes = pair(None);
    let tiles: Vec<usize> = bes.iter().map(|b| b.matmul_tile()).collect();
    assert_eq!(tiles, [64, 128]);
    assert!(
        bes[1].name().contains("matmul tile 128"),
        "{}",
        bes[1].name()
    );
    let cases = [
        (GgmlType::F32, 998, 131, 67),
        (GgmlType::F16, 258, 200, 130),
        (GgmlType::Q4_0, 320, 131, 130),
        (GgmlType::Q8_0, 256, 67, 9),
        (GgmlType::Q4_K, 512, 131, 67),
        (GgmlType::Q6_K, 256, 257, 65),
    ];
    for case in cases {
        check(&bes, &mut r, case);
    }
    // Windows of 64 rows (a binding of 64 Q8_0 rows of 256): each window
    // its own dispatch, tiles of 128 over 64 rows.
    check(
        &pair(Some(64 * 272 + 4)),
        &mut r,
        (GgmlType::Q8_0, 256, 200, 70),
    );
}
