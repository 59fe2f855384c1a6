//! The fast integer dots (`glint_cpu::qdot`) and `mul_mat_ggml` held to
//! ggml's reference loops (`glint_quant::vec_dot`) on random blocks.

mod common;

use common::Rng;
use glint_backend::GgmlType;
use glint_cpu::{amx, mul_mat_ggml_with, qdot, Kernels, WeightRows, AMX_MIN_M};
use glint_quant::{BlockQ2_K, BlockQ3_K, BlockQ5_K, QuantError};
use half::f16;

/// The types with a fast kernel.
const FAST: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The fast types whose AVX2 kernel is the plain one compiled for AVX2:
/// one column at a time, no multi-column kernel.
const NO_COLS: [GgmlType; 3] = [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K];

/// Allowed |fast - reference| relative to sum |terms| (the dot of the
/// dequantized |weights| with the dequantized |activations|), per kernel
/// family and type. The plain kernels and the AVX2 Q2_K, Q3_K and Q5_K
/// kernels (the plain ones compiled for AVX2) keep ggml's
/// float operations in ggml's order: exact. The other AVX2 kernels are
/// ggml's AVX2 loops (exact integer sums, FMA into 8 f32 lanes summed at
/// the end): f32 rounding only, a few ulps of the terms.
fn tolerance(what: &str, ty: GgmlType) -> f64 {
    use GgmlType as T;
    match (what, ty) {
        ("plain", _) => 0.0,
        // The AMX tiles (the fast kernels from AMX_MIN_M columns on an AMX
        // cpu): the 32-element types' numbers are the reference's; the
        // K-quants' super-block sums are exact where ggml adds eight f32
        // lanes: rounding.
        ("amx", T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0) => 0.0,
        ("amx", T::Q4_K | T::Q5_K | T::Q6_K) => LEGACY_AVX2_TOL,
        // From AMX_MIN_M columns Q5_K and Q3_K take the lane kernels, whose
        // super-block sums are exact where ggml adds eight f32 lanes
        // (Q2_K's are ggml's numbers: exact).
        ("fast", T::Q5_K | T::Q3_K) => LEGACY_AVX2_TOL,
        (_, T::Q2_K | T::Q3_K | T::Q5_K) => 0.0,
        (_, T::Q4_K | T::Q6_K) => LEGACY_AVX2_TOL,
        (_, T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::Q8_0) => LEGACY_AVX2_TOL,
        _ => panic!("{what} {ty}: no tolerance named"),
    }
}

/// The AVX2 kernels' tolerance, relative to sum |terms|.
const LEGACY_AVX2_TOL: f64 = 1e-6;

/// Random rows of `ty`: quantized from random data (with a few outliers, so
/// the levels reach their extremes) where glint_quant quantizes the type,
/// else random bytes with sane f16 scales.
fn random_row(ty: GgmlType, k: usize, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
    let mut row = vec![0u8; row_bytes];
    let mut x = rng.vec(k);
    for _ in 0..k / 64 {
        let i = rng.below(k);
        x[i] *= 8.0;
    }
    match glint_quant::quantize_row(ty, &x, &mut row) {
        Ok(()) => {}
        Err(QuantError::Unsupported { .. }) => {
            // Random levels and scales, sane f16 d (and dmin).
            for b in row.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            let mut scale = || f16::from_f32(0.01 + 0.05 * rng.f32().abs());
            for blk in row.chunks_mut(ty.type_size()) {
                match ty {
                    GgmlType::Q5_K => {
                        let mut b: BlockQ5_K = bytemuck::pod_read_unaligned(blk);
                        (b.d, b.dmin) = (scale(), scale());
                        blk.copy_from_slice(bytemuck::bytes_of(&b));
                    }
                    GgmlType::Q2_K => {
                        let mut b: BlockQ2_K = bytemuck::pod_read_unaligned(blk);
                        (b.d, b.dmin) = (scale(), scale());
                        blk.copy_from_slice(bytemuck::bytes_of(&b));
                    }
                    GgmlType::Q3_K => {
                        let mut b: BlockQ3_K = bytemuck::pod_read_unaligned(blk);
                        b.d = scale();
                        blk.copy_from_slice(bytemuck::bytes_of(&b));
                    }
                    _ => panic!("no random-block recipe for {ty}"),
                }
            }
        }
        Err(e) => panic!("{ty}: {e}"),
    }
    row
}

/// `sum |w_i| |x_i|` over the dequantized rows: the scale of the tolerance.
fn abs_terms(ty: GgmlType, row: &[u8], act: &[u8], k: usize) -> f64 {
    let (mut w, mut a) = (vec![0f32; k], vec![0f32; k]);
    glint_quant::dequantize_row(ty, row, &mut w).unwrap();
    glint_quant::dequantize_row(ty.vec_dot_type(), act, &mut a).unwrap();
    w.iter()
        .zip(&a)
        .map(|(w, a)| (w.abs() * a.abs()) as f64)
        .sum()
}

/// `got`, an AVX2 kernel's dot of `row` with `act` (`k` elements of `ty`),
/// within the AVX2 tolerance of `glint_quant::vec_dot`; `case` names it.
fn assert_avx2_near_vec_dot(case: &str, ty: GgmlType, row: &[u8], act: &[u8], k: usize, got: f32) {
    let want = glint_quant::vec_dot(ty, row, act).unwrap();
    let diff = (got as f64 - want as f64).abs();
    assert!(
        diff <= tolerance("avx2", ty) * abs_terms(ty, row, act, k),
        "{case}: got {got}, want {want}"
    );
}

/// Checks `kernel` against `glint_quant::vec_dot` on `n_seeds` random row
/// pairs of several lengths; returns how many pairs it compared.
fn check_kernel(what: &str, ty: GgmlType, kernel: qdot::DotFn, n_seeds: u64) -> usize {
    let vt = ty.vec_dot_type();
    let mut n = 0;
    for seed in 0..n_seeds {
        let mut rng = Rng(1000 + seed);
        for blocks in [1, 2, 3, 16] {
            let k = blocks * ty.block_size();
            let row = random_row(ty, k, &mut rng);
            let mut act = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
            glint_quant::quantize_row(vt, &rng.vec(k), &mut act).unwrap();
            let want = glint_quant::vec_dot(ty, &row, &act).unwrap();
            let got = kernel(&row, &act);
            let terms = abs_terms(ty, &row, &act, k);
            assert!(terms > 0.0 && want != 0.0, "{what} {ty}: degenerate inputs");
            let diff = (got as f64 - want as f64).abs();
            assert!(
                diff <= tolerance(what, ty) * terms,
                "{what} {ty} k={k} seed {seed}: got {got}, want {want} (diff {diff}, terms {terms})"
            );
            n += 1;
        }
    }
    n
}

/// [`check_kernel`] for every fast type, the kernels from `kernel_of`, on
/// 50 seeds each.
fn check_kernels(what: &str, kernel_of: fn(GgmlType) -> Option<qdot::DotFn>) {
    let mut n = 0;
    for ty in FAST {
        let kernel = kernel_of(ty).unwrap_or_else(|| panic!("{ty}: no {what} kernel"));
        n += check_kernel(what, ty, kernel, 50);
    }
    assert_eq!(n, FAST.len() * 50 * 4);
}

#[test]
fn plain_kernels_match_ggml_reference() {
    check_kernels("plain", qdot::plain_dot);
}

#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_kernels_match_ggml_reference() {
    check_kernels("avx2", qdot::avx2_dot);
}

/// Whether this cpu runs `qdot`'s AVX2 tier and its AVX-512 VNNI tier.
fn cpu_tiers() -> (bool, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! all {
            ($($f:tt),*) => { $(std::is_x86_feature_detected!($f))&&* };
        }
        let avx2 = all!("avx2", "fma", "f16c");
        (
            avx2,
            avx2 && all!("avx512f", "avx512bw", "avx512vl", "avx512vnni"),
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (false, false)
    }
}

/// The dispatch hands out a tier's kernels exactly where the cpu has the
/// tier (run-time detection), and the emulated VNNI tier wherever it has AVX2.
#[test]
fn each_tier_is_handed_out_exactly_where_the_cpu_runs_it() {
    let (avx2, vnni) = cpu_tiers();
    for ty in FAST {
        assert_eq!(qdot::avx2_dot(ty).is_some(), avx2, "{ty}");
        let has_cols = !NO_COLS.contains(&ty);
        assert_eq!(qdot::avx2_dot_cols(ty).is_some(), avx2 && has_cols, "{ty}");
        assert_eq!(qdot::fast_dot_cols(ty).is_some(), avx2 && has_cols, "{ty}");
        assert_eq!(
            qdot::emulated::dot_cols(ty).is_some(),
            avx2 && has_cols,
            "{ty}"
        );
        let has_tile = TILE_TYPES.contains(&ty);
        let has_avx2_tile = AVX2_TILE_TYPES.contains(&ty);
        assert_eq!(
            qdot::fast_tile(ty).is_some(),
            (vnni && has_tile) || (avx2 && has_avx2_tile),
            "{ty}"
        );
        assert_eq!(qdot::avx2_tile(ty).is_some(), avx2 && has_avx2_tile, "{ty}");
        assert_eq!(qdot::emulated::tile(ty).is_some(), avx2 && has_tile, "{ty}");
        // The decode rows on prepared columns: the tile types, VNNI only.
        assert_eq!(
            qdot::fast_dot_prepared(ty).is_some(),
            vnni && has_tile,
            "{ty}"
        );
        assert_eq!(
            qdot::emulated::dot_prepared(ty).is_some(),
            avx2 && has_tile,
            "{ty}"
        );
    }
}

/// The multi-column kernels, each column against `glint_quant::vec_dot`
/// within the AVX2 tolerance of its type.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn multi_column_kernels_match_ggml_reference() {
    let mut n = 0;
    for ty in FAST {
        let Some(kernel) = qdot::fast_dot_cols(ty) else {
            continue;
        };
        for seed in 0..30 {
            let mut rng = Rng(5000 + seed);
            let k = [1, 3, 20][seed as usize % 3] * ty.block_size();
            let row = random_row(ty, k, &mut rng);
            let acts = random_cols(ty, k, &mut rng);
            let got = (kernel.four)(&row, std::array::from_fn(|c| &acts[c][..]));
            for (c, act) in acts.iter().enumerate() {
                let case = format!("cols {ty} k={k} seed {seed} col {c}");
                assert_avx2_near_vec_dot(&case, ty, &row, act, k, got[c]);
                n += 1;
            }
        }
    }
    assert_eq!(n, 7 * 30 * qdot::COLS, "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q6_K");
}

/// [`qdot::COLS`] random activation rows of `k` for `ty`, quantized by
/// ggml's reference quantizer.
fn random_cols(ty: GgmlType, k: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let vt = ty.vec_dot_type();
    (0..qdot::COLS)
        .map(|_| {
            let mut a = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
            glint_quant::quantize_row(vt, &rng.vec(k), &mut a).unwrap();
            a
        })
        .collect()
}

#[test]
fn fast_dot_covers_exactly_the_fast_types() {
    for info in glint_quant::TYPES {
        let has = qdot::fast_dot(info.ty).is_some();
        assert_eq!(has, FAST.contains(&info.ty), "{}", info.ty);
    }
}

/// `mul_mat_ggml` with each kernel set against the reference loops, on the
/// decode (m = 1), few-column and column-block prefill (`m_prefill`) paths,
/// with row counts that leave partial tasks and tiles: the plain kernels bit for bit, the fast
/// ones within their tolerance (relative to sum |w| |x|).
#[test]
fn mul_mat_ggml_fast_and_plain_match_reference() {
    // Enough columns for the column-block prefill path (and its tiles) on
    // this pool, with an odd block and columns left over at the end.
    let m_prefill = 2 * 16 * rayon::current_num_threads() + 7;
    let mut rng = Rng(77);
    let mut n_checked = 0;
    for ty in FAST {
        let k = 2 * 256;
        for n in [1, 37, 203] {
            let rows: Vec<u8> = (0..n).flat_map(|_| random_row(ty, k, &mut rng)).collect();
            let row_bytes = rows.len() / n;
            // w_abs: [k, n] |dequantized weights|
            let mut w_abs = vec![0f32; k * n];
            for (r, dst) in w_abs.chunks_mut(k).enumerate() {
                glint_quant::dequantize_row(ty, &rows[r * row_bytes..(r + 1) * row_bytes], dst)
                    .unwrap();
                dst.iter_mut().for_each(|v| *v = v.abs());
            }
            for m in M_FEW.into_iter().chain([40, m_prefill, AMX_MIN_M + 5]) {
                let x = rng.vec(k * m);
                let w = WeightRows {
                    ty,
                    bytes: &rows,
                    row_bytes,
                    k,
                    n,
                };
                let run = |kern| {
                    let mut out = vec![0f32; n * m];
                    mul_mat_ggml_with(kern, w, &x, m, &mut out).unwrap();
                    out
                };
                let want = run(Kernels::Reference);
                assert!(
                    want.iter().any(|&v| v != 0.0),
                    "{ty} n={n} m={m}: degenerate"
                );
                for (kern, what) in [(Kernels::Plain, "plain"), (Kernels::Fast, "fast")] {
                    // The fast kernels take the AMX tiles from AMX_MIN_M
                    // columns where the cpu has them.
                    let amx_taken = amx::available() && amx::supports(ty) && m >= AMX_MIN_M;
                    let what = if kern == Kernels::Fast && amx_taken {
                        "amx"
                    } else {
                        what
                    };
                    let got = run(kern);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        let (r, c) = (i % n, i / n);
                        let terms: f64 = w_abs[r * k..(r + 1) * k]
                            .iter()
                            .zip(&x[c * k..(c + 1) * k])
                            .map(|(w, x)| (w * x.abs()) as f64)
                            .sum();
                        // 1.01: the activations are quantized, |q8| <= |x| (1 + 1/127).
                        let tol = tolerance(what, ty) * terms * 1.01;
                        assert!(
                            ((g - w) as f64).abs() <= tol,
                            "{ty} {kern:?} n={n} m={m} out[{i}]: got {g}, want {w}"
                        );
                        n_checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(
        n_checked,
        FAST.len()
            * 2
            * (1 + 37 + 203)
            * (M_FEW.iter().sum::<usize>() + 40 + m_prefill + AMX_MIN_M + 5)
    );
}

/// Column counts of the decode and few-column paths: one, and every way
/// the few-column path splits up to two groups of [`qdot::COLS`] and a bit
/// (a batch of 2, 3, 5, 6 or 7 sequences decoding together).
const M_FEW: [usize; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

/// [`Kernels::Avx2`] (what a cpu without AVX-512 runs: the AVX2 one-column,
/// multi-column and tile kernels, no VNNI row, no AMX) equals the vector
/// kernels this cpu picks ([`Kernels::NoAmx`]: VNNI where it has it), bit
/// for bit, for every fast type at one column (decode), a few columns and
/// a prefill's width. On an AVX2-only cpu the two are the same kernels;
/// the VNNI tiers are held to the AVX2 ones kernel by kernel above, their
/// emulation included.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn the_avx2_tier_of_mul_mat_equals_the_fast_vector_kernels() {
    let m_prefill = 2 * 16 * rayon::current_num_threads() + 7;
    let mut rng = Rng(0xa5f2);
    let (k, n) = (2 * 256, 133);
    let mut n_checked = 0;
    for ty in FAST {
        let rows: Vec<u8> = (0..n).flat_map(|_| random_row(ty, k, &mut rng)).collect();
        let w = WeightRows {
            ty,
            bytes: &rows,
            row_bytes: rows.len() / n,
            k,
            n,
        };
        for m in [1, 3, 9, m_prefill, AMX_MIN_M + 9] {
            let x = rng.vec(k * m);
            let [avx2, fast, model] =
                [Kernels::Avx2, Kernels::NoAmx, Kernels::AmxModel].map(|kern| {
                    let mut out = vec![0f32; n * m];
                    mul_mat_ggml_with(kern, w, &x, m, &mut out).unwrap();
                    out
                });
            // From AMX_MIN_M columns a type with lane kernels gets the AMX
            // path's numbers (the plain kernels' for the 32-element types
            // and Q2_K; Q3_K's, which the AMX path does not take, are held
            // to their twin in `check_lanes`); Q8_0 has them on VNNI cpus
            // only, so there the two tiers differ by rounding and each is
            // held apart.
            let fast_lanes = m >= AMX_MIN_M && qdot::fast_lanes(ty).is_some();
            let avx2_lanes = m >= AMX_MIN_M && qdot::avx2_lanes(ty).is_some();
            let model_twin = avx2_lanes && ty != GgmlType::Q3_K;
            let want = if fast_lanes && !avx2_lanes {
                &model
            } else {
                &avx2
            };
            for (i, (a, f)) in want.iter().zip(&fast).enumerate() {
                assert_eq!(a.to_bits(), f.to_bits(), "{ty} m={m} out[{i}]: {a} vs {f}");
                if model_twin {
                    let p = model[i];
                    assert_eq!(
                        a.to_bits(),
                        p.to_bits(),
                        "{ty} m={m} out[{i}]: {a} vs model {p}"
                    );
                }
                n_checked += 1;
            }
        }
    }
    assert_eq!(
        n_checked,
        FAST.len() * n * (1 + 3 + 9 + m_prefill + AMX_MIN_M + 9)
    );
}

/// A column's result from `mul_mat_ggml` (fast kernels) does not depend
/// on how many other columns share the product, bit for bit, from two
/// columns up to [`AMX_MIN_M`] (few-column and prefill paths: the
/// multi-column kernels, or the tiles, which equal them; never the
/// one-column kernel), and from [`AMX_MIN_M`] up (the lane kernels, or on
/// an AMX cpu the AMX tiles, which equal them). So a sequence decoded in a
/// batch of 2 gets the same numbers as in a batch of 3, 7 or 60; a
/// prompt's, the same in a micro-batch of 64 as of 512.
#[test]
fn mul_mat_ggml_columns_do_not_depend_on_the_other_columns() {
    let m_prefill = (2 * 16 * rayon::current_num_threads() + 7).max(AMX_MIN_M + 7);
    // The column-block prefill path with one column in its last block.
    let m_lone = m_prefill - 6;
    // The widest product of the vector kernels, and a width between.
    let (m_vector, m_mid) = (AMX_MIN_M - 1, 40);
    let mut rng = Rng(78);
    let (k, n) = (2 * 256, 203);
    let mut n_checked = 0;
    for ty in FAST {
        let rows: Vec<u8> = (0..n).flat_map(|_| random_row(ty, k, &mut rng)).collect();
        let w = WeightRows {
            ty,
            bytes: &rows,
            row_bytes: rows.len() / n,
            k,
            n,
        };
        let x = rng.vec(k * m_prefill);
        let run = |kern, m: usize| {
            let mut out = vec![0f32; n * m];
            mul_mat_ggml_with(kern, w, &x[..k * m], m, &mut out).unwrap();
            out
        };
        // The widest product of each regime; without AMX tiles (NoAmx) and
        // with them where the cpu has them (Fast): the same numbers.
        let (vector, wide) = (run(Kernels::Fast, m_vector), run(Kernels::Fast, m_prefill));
        let lanes = run(Kernels::NoAmx, m_prefill);
        for (i, (a, l)) in wide.iter().zip(&lanes).enumerate() {
            assert_eq!(
                a.to_bits(),
                l.to_bits(),
                "{ty} AMX vs lanes out[{i}]: {a} vs {l}"
            );
            n_checked += 1;
        }
        for m in M_FEW.into_iter().skip(1).chain([m_mid, AMX_MIN_M, m_lone]) {
            let want = if m >= AMX_MIN_M { &wide } else { &vector };
            for (i, (g, w)) in run(Kernels::Fast, m).iter().zip(want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{ty} m={m} out[{i}] (row {}, col {}): {g} vs {w}",
                    i % n,
                    i / n
                );
                n_checked += 1;
            }
        }
    }
    assert_eq!(
        n_checked,
        FAST.len() * n * ((2..=9).chain([m_mid, AMX_MIN_M, m_lone]).sum::<usize>() + m_prefill)
    );
}

#[test]
fn mul_mat_ggml_rejects_rows_of_the_wrong_length() {
    let (k, n) = (64, 3);
    let rows = vec![0u8; 20 * 2 * n - 1]; // Q4_1: 40 bytes a row, one short
    let mut out = vec![0f32; n];
    let w = WeightRows {
        ty: GgmlType::Q4_1,
        bytes: &rows,
        row_bytes: 40,
        k,
        n,
    };
    let e = mul_mat_ggml_with(Kernels::Fast, w, &vec![1.0; k], 1, &mut out).unwrap_err();
    assert!(e.to_string().contains("Q4_1"), "{e}");
}

/// The types with a prefill tile kernel (AVX-512 VNNI).
const TILE_TYPES: [GgmlType; 5] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

/// The types with an AVX2 tile kernel: not Q8_0 (`maddubs` would
/// saturate), nor Q4_1/Q5_1 (their multi-column kernels are faster).
const AVX2_TILE_TYPES: [GgmlType; 2] = [GgmlType::Q4_0, GgmlType::Q5_0];

/// Holds `tiles` (with their column preparation `prepare`) to the AVX2
/// multi-column kernel bit for bit: each result of the full tile (TILE x
/// TILE) and of the two- and three-column ones, on the rows as stored and
/// unpacked once (`unpack`, `pre_*`), equals it for the same row
/// and column (the lanes hold the same exact integers;
/// the float steps are the same), on rows whose levels reach their
/// extremes. Returns the prepared columns of every call, for comparing two
/// preparations, and how many results it compared.
fn check_tile(
    what: &str,
    ty: GgmlType,
    tiles: qdot::Tiles,
    prepare: fn(GgmlType, &[u8], &mut [u8]),
) -> (Vec<Vec<u8>>, usize) {
    let cols = qdot::avx2_dot_cols(ty).expect("a tile type has an AVX2 cols kernel");
    let vt = ty.vec_dot_type();
    let (mut all_prep, mut n) = (Vec::new(), 0);
    for seed in 0..20 {
        let mut rng = Rng(7000 + seed);
        let k = [1, 3, 20][seed as usize % 3] * 32;
        let rows: Vec<Vec<u8>> = (0..qdot::TILE)
            .map(|_| random_row(ty, k, &mut rng))
            .collect();
        let acts: Vec<Vec<u8>> = (0..qdot::TILE)
            .map(|c| {
                let mut x = rng.vec(k);
                if c == 1 {
                    x[0] = 40.0; // an outlier: levels at -127/127 elsewhere small
                }
                let mut a = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
                glint_cpu::act::quantize_row(vt, &x, &mut a).unwrap();
                a
            })
            .collect();
        let prep: Vec<Vec<u8>> = acts
            .iter()
            .map(|a| {
                let mut p = vec![0u8; k / 32 * qdot::TILE_BLOCK];
                prepare(ty, a, &mut p);
                p
            })
            .collect();
        let xs = std::array::from_fn(|r| &rows[r][..]);
        // got: (row, col, result) of the full tile, and of the narrow ones
        // on the columns at the start and at the end.
        let prep_ref = &prep;
        let ys = |c0: usize| move |c: usize| &prep_ref[c0 + c][..];
        let mut got: Vec<_> =
            tile_results(0, (tiles.four)(xs, std::array::from_fn(ys(0)))).collect();
        for c0 in [0, qdot::TILE - 3] {
            let out = (tiles.three)(xs, std::array::from_fn(ys(c0)));
            got.extend(tile_results(c0, out));
        }
        for c0 in [0, qdot::TILE - 2] {
            let out = (tiles.two)(xs, std::array::from_fn(ys(c0)));
            got.extend(tile_results(c0, out));
        }
        // The same on the rows unpacked once (what a prefill task runs).
        let mut xp = vec![0u8; k / 32 * qdot::PRE_BLOCK];
        (tiles.unpack)(xs, &mut xp);
        got.extend(tile_results(
            0,
            (tiles.pre_four)(&xp, std::array::from_fn(ys(0))),
        ));
        for c0 in [0, qdot::TILE - 3] {
            let out = (tiles.pre_three)(&xp, std::array::from_fn(ys(c0)));
            got.extend(tile_results(c0, out));
        }
        for c0 in [0, qdot::TILE - 2] {
            let out = (tiles.pre_two)(&xp, std::array::from_fn(ys(c0)));
            got.extend(tile_results(c0, out));
        }
        let want: Vec<[f32; qdot::COLS]> = rows
            .iter()
            .map(|row| (cols.four)(row, std::array::from_fn(|c| &acts[c][..])))
            .collect();
        for (r, c, v) in got {
            assert_eq!(
                v.to_bits(),
                want[r][c].to_bits(),
                "{what} {ty} k={k} seed {seed} row {r} col {c}: {v} vs {}",
                want[r][c]
            );
            n += 1;
        }
        all_prep.extend(prep);
    }
    (all_prep, n)
}

/// A tile's results on columns `c0..` as `(row, column, result)`.
fn tile_results<const N: usize>(
    c0: usize,
    out: [[f32; N]; qdot::TILE],
) -> impl Iterator<Item = (usize, usize, f32)> {
    out.into_iter()
        .enumerate()
        .flat_map(move |(r, v)| v.into_iter().enumerate().map(move |(c, v)| (r, c0 + c, v)))
}

/// [`check_tile`] for every tile type, the kernels from `tile_of`; the
/// prepared columns of each type.
fn check_tiles(
    what: &str,
    types: &[GgmlType],
    tile_of: fn(GgmlType) -> Option<qdot::Tiles>,
    prepare: fn(GgmlType, &[u8], &mut [u8]),
) -> Vec<Vec<Vec<u8>>> {
    let mut n = 0;
    let mut preps = Vec::new();
    for &ty in types {
        let tile = tile_of(ty).unwrap_or_else(|| panic!("{what} {ty}: no tile kernel"));
        let (prep, m) = check_tile(what, ty, tile, prepare);
        preps.push(prep);
        n += m;
    }
    // Per seed: the full tile and two of each narrow one, TILE rows each,
    // packed and unpacked.
    assert_eq!(
        n,
        types.len() * 20 * qdot::TILE * (qdot::TILE + 2 * 3 + 2 * 2) * 2
    );
    preps
}

/// The VNNI tiles' arithmetic on any AVX2 cpu: the tile kernels with
/// `vpdpbusd` run through its lane model (`qdot::emulated`), everything
/// else the tier's own code, held bit for bit to the AVX2 kernels.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn emulated_vnni_tiles_equal_the_multi_column_kernels_bit_for_bit() {
    check_tiles(
        "emulated",
        &TILE_TYPES,
        qdot::emulated::tile,
        qdot::emulated::prepare_tile_col,
    );
}

/// The real AVX-512 VNNI tiles: bit for bit the AVX2 kernels' results, and
/// their prepared columns the emulation's byte for byte (so the lane model
/// is `vpdpbusd`'s arithmetic).
#[test]
#[cfg_attr(not(host_vnni), ignore = "this cpu lacks AVX-512 F, BW, VL or VNNI")]
fn vnni_tiles_equal_the_multi_column_kernels_and_their_emulation() {
    let vnni = check_tiles("vnni", &TILE_TYPES, qdot::fast_tile, qdot::prepare_tile_col);
    let emulated = check_tiles(
        "emulated",
        &TILE_TYPES,
        qdot::emulated::tile,
        qdot::emulated::prepare_tile_col,
    );
    assert!(vnni == emulated, "prepared columns differ");
}

/// Three blocks of `ty` (symmetric, no min) with `d = 0.5` and every
/// other byte `fill`: with 0xff every level at its top, with 0x00 at its
/// bottom.
fn extreme_row(ty: GgmlType, fill: u8) -> Vec<u8> {
    let x_size = ty.bytes_for(32).unwrap() as usize;
    let mut b = vec![fill; 3 * x_size];
    for blk in b.chunks_mut(x_size) {
        blk[..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
    }
    b
}

/// Three Q8_0 blocks with `d = 1` and level `i` of each block `f(i)`.
fn extreme_col(f: fn(usize) -> i8) -> Vec<u8> {
    let y_size = GgmlType::Q8_0.bytes_for(32).unwrap() as usize;
    let mut b = vec![0u8; 3 * y_size];
    for blk in b.chunks_mut(y_size) {
        blk[..2].copy_from_slice(&f16::from_f32(1.0).to_bits().to_le_bytes());
        for (i, v) in blk[2..].iter_mut().enumerate() {
            *v = f(i) as u8;
        }
    }
    b
}

/// The extreme activation columns: levels all 127, all -127, alternating,
/// and alternating in pairs.
fn extreme_cols() -> [Vec<u8>; 4] {
    [
        extreme_col(|_| 127),
        extreme_col(|_| -127),
        extreme_col(|i| if i % 2 == 0 { 127 } else { -127 }),
        extreme_col(|i| if i % 4 < 2 { -127 } else { 127 }),
    ]
}

/// `acts` (three blocks each) prepared for `ty`'s AVX2 tiles and lanes.
fn prepared_avx2(ty: GgmlType, acts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    acts.iter()
        .map(|a| {
            let mut p = vec![0u8; 3 * qdot::TILE_BLOCK];
            qdot::prepare_tile_col_avx2(ty, a, &mut p);
            p
        })
        .collect()
}

/// The AVX2 tiles (`maddubs` + `madd` for `vpdpbusd`; what a prefill of
/// Q4_0/Q5_0 weights runs on AVX2 cpus without VNNI): bit for bit
/// the multi-column kernels' results, their prepared columns the VNNI
/// emulation's byte for byte, and no saturation at the extreme levels
/// (every weight level at its top against activation levels of ±127).
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_tiles_equal_the_multi_column_kernels_bit_for_bit() {
    let avx2 = check_tiles(
        "avx2",
        &AVX2_TILE_TYPES,
        qdot::avx2_tile,
        qdot::prepare_tile_col_avx2,
    );
    let emulated = check_tiles(
        "emulated",
        &AVX2_TILE_TYPES,
        qdot::emulated::tile,
        qdot::emulated::prepare_tile_col,
    );
    assert!(avx2 == emulated, "prepared columns differ");

    // Extremes, 3 blocks: weight bytes all 0xff (after d/m: every level
    // at its top, 15 or 31) and all 0x00 (its bottom); activation levels
    // all 127, all -127, and alternating, with d = 1 (Q8_0 blocks: both
    // tile types are symmetric, without a min).
    for ty in AVX2_TILE_TYPES {
        let tiles = qdot::avx2_tile(ty).expect("an AVX2 tile");
        let cols = qdot::avx2_dot_cols(ty).expect("an AVX2 cols kernel");
        assert_eq!(ty.vec_dot_type(), GgmlType::Q8_0, "{ty}");
        let rows = [0xff, 0x00, 0xff, 0x0f].map(|f| extreme_row(ty, f));
        let acts = extreme_cols();
        let prep = prepared_avx2(ty, &acts);
        let got = (tiles.four)(
            std::array::from_fn(|r| &rows[r][..]),
            std::array::from_fn(|c| &prep[c][..]),
        );
        for (r, x) in rows.iter().enumerate() {
            let want = (cols.four)(x, std::array::from_fn(|c| &acts[c][..]));
            for c in 0..qdot::TILE {
                assert_eq!(
                    got[r][c].to_bits(),
                    want[c].to_bits(),
                    "{ty} extremes row {r} col {c}: {} vs {}",
                    got[r][c],
                    want[c]
                );
            }
        }
        // The all-top row against all-127 is the largest dot: its value.
        let top = match ty {
            GgmlType::Q4_0 => 7.0,  // 15 - 8
            GgmlType::Q5_0 => 15.0, // 31 - 16
            _ => panic!("{ty}: not an AVX2 tile type"),
        };
        assert_eq!(got[0][0], 3.0 * 32.0 * 0.5 * top * 127.0, "{ty}");
    }
}

/// Weight rows of `ty` for the decode rows' checks, `blocks` blocks each:
/// quantized from random data with outliers, and (Q8_0, whose quantizer
/// never writes -128) one of random bytes with a sane scale, so every
/// level, -128 among them, meets the unsigned offset trick.
fn row_cases(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let k = blocks * 32;
    let mut rows = vec![random_row(ty, k, rng), random_row(ty, k, rng)];
    if ty == GgmlType::Q8_0 {
        let mut raw: Vec<u8> = (0..ty.bytes_for(k as u64).unwrap())
            .map(|_| rng.next_u64() as u8)
            .collect();
        for blk in raw.chunks_mut(34) {
            blk[..2].copy_from_slice(&f16::from_f32(0.02).to_bits().to_le_bytes());
        }
        rows.push(raw);
    }
    rows
}

/// The decode rows (`row_of`, on columns from `prepare`, and `rows_of`
/// over consecutive rows) against the AVX2 one-column kernels,
/// bit for bit, for every tile type, on odd and even block counts (the
/// pair loop and its odd last block) and activations whose levels reach
/// ±127; returns how many results it compared.
fn check_rows(
    what: &str,
    row_of: fn(GgmlType) -> Option<qdot::DotFn>,
    rows_of: fn(GgmlType) -> Option<qdot::DotRowsFn>,
    prepare: fn(GgmlType, &[u8], &mut [u8]),
) -> usize {
    let mut n = 0;
    for ty in TILE_TYPES {
        let kernel = row_of(ty).unwrap_or_else(|| panic!("{what} {ty}: no row kernel"));
        let more = rows_of(ty).unwrap_or_else(|| panic!("{what} {ty}: no rows kernel"));
        let avx2 = qdot::avx2_dot(ty).expect("an AVX2 kernel");
        let vt = ty.vec_dot_type();
        for seed in 0..12 {
            let mut rng = Rng(9000 + seed);
            for blocks in [1, 2, 3, 16, 21] {
                let k = blocks * 32;
                let mut x = rng.vec(k);
                x[rng.below(k)] = 40.0; // an outlier: ±127 at it
                let mut act = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
                glint_cpu::act::quantize_row(vt, &x, &mut act).unwrap();
                let mut prep = vec![0u8; blocks * qdot::TILE_BLOCK];
                prepare(ty, &act, &mut prep);
                let cases = row_cases(ty, blocks, &mut rng);
                for (i, row) in cases.iter().enumerate() {
                    let (got, want) = (kernel(row, &prep), avx2(row, &act));
                    assert!(want != 0.0, "{what} {ty}: degenerate inputs");
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{what} {ty} k={k} seed {seed} row {i}: {got} vs {want}"
                    );
                    n += 1;
                }
                // Nine consecutive rows (two groups of qdot::ROWS and
                // one alone), the cases in turn.
                let w: Vec<u8> = (0..9)
                    .flat_map(|i| cases[i % cases.len()].clone())
                    .collect();
                let row_bytes = cases[0].len();
                let mut got = [0f32; 9];
                more(&w, row_bytes, &prep, &mut got);
                for (i, got) in got.into_iter().enumerate() {
                    let want = avx2(&w[i * row_bytes..(i + 1) * row_bytes], &act);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{what} {ty} rows k={k} seed {seed} row {i}: {got} vs {want}"
                    );
                    n += 1;
                }
            }
        }
    }
    n
}

/// Rows compared by [`check_rows`]: 5 types x 12 seeds x 5 lengths x 2
/// rows, and Q8_0's raw-byte row; then nine consecutive rows a case.
const ROW_CHECKS: usize = 5 * 12 * 5 * 2 + 12 * 5 + 5 * 12 * 5 * 9;

/// The VNNI decode rows' arithmetic on any AVX2 cpu (`vpdpbusd` through
/// its lane model, Q5_0's and Q5_1's fifth bits spread as AVX2 does),
/// held bit for bit to the AVX2 one-column kernels.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn emulated_vnni_rows_equal_the_avx2_kernels_bit_for_bit() {
    let n = check_rows(
        "emulated",
        qdot::emulated::dot_prepared,
        qdot::emulated::dot_prepared_rows,
        qdot::emulated::prepare_tile_col,
    );
    assert_eq!(n, ROW_CHECKS);
}

/// The real VNNI decode rows (`vpdpbusd`, and AVX-512 BW's masked add for
/// the fifth bits): bit for bit the AVX2 one-column kernels; and
/// `mul_mat_ggml`'s fast decode (m = 1, which takes them here) gives each
/// row's AVX2 dot, bit for bit, for every fast type, with rows enough for
/// several tasks.
#[test]
#[cfg_attr(not(host_vnni), ignore = "this cpu lacks AVX-512 F, BW, VL or VNNI")]
fn vnni_rows_equal_the_avx2_kernels_bit_for_bit() {
    let n = check_rows(
        "vnni",
        qdot::fast_dot_prepared,
        qdot::fast_dot_prepared_rows,
        qdot::prepare_tile_col,
    );
    assert_eq!(n, ROW_CHECKS);
    let mut rng = Rng(0x0de_c0de);
    for ty in FAST {
        let (k, n) = (2 * 256, 300);
        let rows: Vec<u8> = (0..n).flat_map(|_| random_row(ty, k, &mut rng)).collect();
        let row_bytes = rows.len() / n;
        let x = rng.vec(k);
        let w = WeightRows {
            ty,
            bytes: &rows,
            row_bytes,
            k,
            n,
        };
        let mut got = vec![0f32; n];
        mul_mat_ggml_with(Kernels::Fast, w, &x, 1, &mut got).unwrap();
        let vt = ty.vec_dot_type();
        let mut act = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
        glint_cpu::act::quantize_row(vt, &x, &mut act).unwrap();
        let avx2 = qdot::avx2_dot(ty).expect("an AVX2 kernel");
        for (r, g) in got.iter().enumerate() {
            let want = avx2(&rows[r * row_bytes..(r + 1) * row_bytes], &act);
            assert_eq!(g.to_bits(), want.to_bits(), "{ty} row {r}: {g} vs {want}");
        }
    }
}

/// The decode loop's AVX2 kernels over consecutive rows (`fast_dot_rows`:
/// four rows per read of the column, the rest alone) give each row's
/// one-row AVX2 dot, bit for bit, for every type that has them: nine
/// rows (two groups of four and one alone), odd and even block counts.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_rows_equal_the_one_row_kernels_bit_for_bit() {
    let mut rng = Rng(0x4057);
    let mut n = 0;
    // The AMX types but Q5_K (its AVX2 kernel is the plain body).
    for ty in AMX_TYPES.into_iter().filter(|&t| t != GgmlType::Q5_K) {
        let more = qdot::fast_dot_rows(ty).expect("an AVX2 rows kernel");
        let one = qdot::avx2_dot(ty).expect("an AVX2 kernel");
        let vt = ty.vec_dot_type();
        for k in [256, 288, 512, 768] {
            if ty.bytes_for(k as u64).is_none() {
                continue; // a K-quant takes whole super-blocks
            }
            let w: Vec<u8> = (0..9).flat_map(|_| random_row(ty, k, &mut rng)).collect();
            let row_bytes = w.len() / 9;
            let mut act = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
            glint_cpu::act::quantize_row(vt, &rng.vec(k), &mut act).unwrap();
            let mut got = [0f32; 9];
            more(&w, row_bytes, &act, &mut got);
            for (r, got) in got.into_iter().enumerate() {
                let want = one(&w[r * row_bytes..(r + 1) * row_bytes], &act);
                assert!(want != 0.0, "{ty}: degenerate inputs");
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{ty} k={k} row {r}: {got} vs {want}"
                );
                n += 1;
            }
        }
    }
    // 5 types at 4 lengths, the K-quants at 3, nine rows each.
    assert_eq!(n, (5 * 4 + 2 * 3) * 9);
}

/// The AVX2-only multi-column kernels (what cpus without AVX-512 VNNI run)
/// against the reference too, and equal bit for bit to the kernels
/// [`qdot::fast_dot_cols`] picks here and to the VNNI tier's run through
/// the lane model of `vpdpwssd` ([`qdot::emulated::dot_cols`]; the VNNI
/// K-quant kernels use `vpdpwssd` for `madd` + `add`: the same integers).
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_multi_column_kernels_match_the_reference_and_the_fast_ones() {
    let mut n = 0;
    for ty in FAST {
        let Some(avx2) = qdot::avx2_dot_cols(ty) else {
            assert!(NO_COLS.contains(&ty), "{ty} has no cols kernel");
            continue;
        };
        let fast = qdot::fast_dot_cols(ty).expect("a fast cols kernel");
        let emulated = qdot::emulated::dot_cols(ty).expect("an emulated cols kernel");
        for seed in 0..12 {
            let mut rng = Rng(9000 + seed);
            let k = [1, 2, 5][seed as usize % 3] * ty.block_size();
            let row = random_row(ty, k, &mut rng);
            let acts = random_cols(ty, k, &mut rng);
            let ys = std::array::from_fn(|c| &acts[c][..]);
            let (got, fast, emulated) = (
                (avx2.four)(&row, ys),
                (fast.four)(&row, ys),
                (emulated.four)(&row, ys),
            );
            for (c, act) in acts.iter().enumerate() {
                let case = format!("avx2 cols {ty} k={k} seed {seed} col {c}");
                assert_avx2_near_vec_dot(&case, ty, &row, act, k, got[c]);
                for (what, v) in [("fast", fast[c]), ("emulated", emulated[c])] {
                    assert_eq!(
                        got[c].to_bits(),
                        v.to_bits(),
                        "{what} {ty} seed {seed} col {c}"
                    );
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 7 * 12 * qdot::COLS);
}

/// The two- and three-column kernels (the columns a product of a few has
/// left over) of every tier, each column bit for bit what the four-column
/// kernel of its tier gives for it: every column's arithmetic is its own,
/// so the width changes nothing. With the four-column kernels held to the
/// reference above, so are these.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn narrow_multi_column_kernels_equal_the_four_column_ones_bit_for_bit() {
    type KernelsOf = fn(GgmlType) -> Option<qdot::DotCols>;
    let tiers: [(&str, KernelsOf); 3] = [
        ("fast", qdot::fast_dot_cols),
        ("avx2", qdot::avx2_dot_cols),
        ("emulated", qdot::emulated::dot_cols),
    ];
    let mut n = 0;
    for (what, kernels_of) in tiers {
        for ty in FAST {
            let Some(k) = kernels_of(ty) else {
                assert!(NO_COLS.contains(&ty), "{ty} has no cols kernel");
                continue;
            };
            for seed in 0..12 {
                let mut rng = Rng(11_000 + seed);
                let k_len = [1, 2, 5][seed as usize % 3] * ty.block_size();
                let row = random_row(ty, k_len, &mut rng);
                let acts = random_cols(ty, k_len, &mut rng);
                let want = (k.four)(&row, std::array::from_fn(|c| &acts[c][..]));
                // Each narrow kernel on the columns at the start and at the end.
                let mut got: Vec<(usize, f32)> = Vec::new();
                for c0 in [0, qdot::COLS - 2] {
                    let two = (k.two)(&row, std::array::from_fn(|c| &acts[c0 + c][..]));
                    got.extend(two.into_iter().enumerate().map(|(c, v)| (c0 + c, v)));
                }
                for c0 in [0, qdot::COLS - 3] {
                    let three = (k.three)(&row, std::array::from_fn(|c| &acts[c0 + c][..]));
                    got.extend(three.into_iter().enumerate().map(|(c, v)| (c0 + c, v)));
                }
                for (c, v) in got {
                    assert_eq!(
                        v.to_bits(),
                        want[c].to_bits(),
                        "{what} {ty} k={k_len} seed {seed} col {c}: {v} vs {}",
                        want[c]
                    );
                    n += 1;
                }
            }
        }
    }
    assert_eq!(n, 3 * 7 * 12 * (2 * 2 + 2 * 3));
}

/// A decode column gets the bits a prefill column gets: the one-column
/// kernel of each tier (`fast_dot`, `avx2_dot`; the VNNI decode rows are
/// held to `avx2_dot` by `vnni_rows_equal_the_avx2_kernels_bit_for_bit`)
/// against the column `c` of the four-column kernel of its tier,
/// for every type with both but Q6_K. The 32-element types sum their
/// blocks into one accumulator in order in both (ggml's AVX2 `vec_dot` and
/// llamafile's tinyBLAS order, which makes the cpu's decode logits
/// llama.cpp's: see `tests/generate_cpu.rs`), and Q4_K's lanes hold the
/// same integers in both. Q6_K's multi-column kernel takes the `- 32`
/// out through the block sums, so its lanes hold other integers (the same
/// total) and round otherwise; its one-column kernel keeps ggml's lanes.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn one_column_kernels_equal_the_multi_column_ones_bit_for_bit() {
    if qdot::avx2_dot(GgmlType::Q4_0).is_none() {
        eprintln!("skipped: the AVX2 kernels are off (GLINT_CPU_TIER)");
        return;
    }
    type Tier = (
        &'static str,
        fn(GgmlType) -> Option<qdot::DotFn>,
        fn(GgmlType) -> Option<qdot::DotCols>,
    );
    let tiers: [Tier; 2] = [
        ("fast", qdot::fast_dot, qdot::fast_dot_cols),
        ("avx2", qdot::avx2_dot, qdot::avx2_dot_cols),
    ];
    let mut n = 0;
    for (what, one_of, cols_of) in tiers {
        for ty in FAST {
            let Some(cols) = cols_of(ty).filter(|_| ty != GgmlType::Q6_K) else {
                assert!(
                    NO_COLS.contains(&ty) || ty == GgmlType::Q6_K,
                    "{ty} has no cols kernel"
                );
                continue;
            };
            let one = one_of(ty).unwrap_or_else(|| panic!("{what} {ty}: no one-column kernel"));
            for seed in 0..12 {
                let mut rng = Rng(12_000 + seed);
                // Odd and even block counts.
                let k_len = [1, 2, 5, 8][seed as usize % 4] * ty.block_size();
                let row = random_row(ty, k_len, &mut rng);
                let acts = random_cols(ty, k_len, &mut rng);
                let want = (cols.four)(&row, std::array::from_fn(|c| &acts[c][..]));
                for (c, act) in acts.iter().enumerate() {
                    let got = one(&row, act);
                    assert_eq!(
                        got.to_bits(),
                        want[c].to_bits(),
                        "{what} {ty} k={k_len} seed {seed} col {c}: {got} vs {}",
                        want[c]
                    );
                    n += 1;
                }
            }
        }
    }
    assert_eq!(n, 2 * 6 * 12 * qdot::COLS, "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K");
}

/// The types the AMX path takes: the 32-element block types, with the
/// reference loops' numbers bit for bit, and the K-quants, within
/// [`LEGACY_AVX2_TOL`] of them (ggml sums their lanes in f32).
const AMX_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Whether `ty` is one of the K-quants the AMX path takes (within
/// rounding of the reference; the others bit for bit).
fn is_k_quant(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// Row lengths of the AMX checks: one block of 32, an odd count (17) and
/// 24 blocks; the K-quants 2 and 3 super-blocks.
fn amx_ks(ty: GgmlType) -> &'static [usize] {
    if is_k_quant(ty) {
        &[512, 768]
    } else {
        &[32, 544, 768]
    }
}

/// Outputs [`check_amx`] checks for `ms` columns.
fn amx_outputs(ms: &[usize]) -> usize {
    let per_k = (1 + 37 + 203) * ms.iter().sum::<usize>();
    AMX_TYPES.iter().map(|&ty| amx_ks(ty).len() * per_k).sum()
}

/// `mul_mat_ggml` with `kern` at each of `ms` columns, for every AMX type
/// at the row lengths of [`amx_ks`] and row counts that leave a partial
/// band of 16 (the column counts in `ms` leave partial groups of 16):
/// against ggml's reference loops (bit for bit for the 32-element types,
/// within the tolerance for the K-quants), and, with `twin`, against
/// `twin`'s run bit for bit. Each run must go through the AMX path
/// (`amx::calls_on_this_thread`). Returns the number of outputs checked.
fn check_amx(kern: Kernels, twin: Option<Kernels>, ms: &[usize]) -> usize {
    let mut rng = Rng(79);
    let mut n_checked = 0;
    for ty in AMX_TYPES {
        assert!(amx::supports(ty), "{ty}");
        for &k in amx_ks(ty) {
            for n in [1, 37, 203] {
                let rows: Vec<u8> = (0..n).flat_map(|_| random_row(ty, k, &mut rng)).collect();
                let row_bytes = rows.len() / n;
                let w = WeightRows {
                    ty,
                    bytes: &rows,
                    row_bytes,
                    k,
                    n,
                };
                for &m in ms {
                    let x = rng.vec(k * m);
                    let run = |kern| {
                        let mut out = vec![0f32; n * m];
                        mul_mat_ggml_with(kern, w, &x, m, &mut out).unwrap();
                        out
                    };
                    let want = run(Kernels::Reference);
                    assert!(
                        want.iter().any(|&v| v != 0.0),
                        "{ty} n={n} m={m}: degenerate"
                    );
                    let calls = amx::calls_on_this_thread();
                    let got = run(kern);
                    let twin = twin.map(run);
                    assert_eq!(
                        amx::calls_on_this_thread() - calls,
                        1 + usize::from(twin.is_some()),
                        "{ty} {kern:?} k={k} n={n} m={m}: not through the AMX path"
                    );
                    // terms[c * n + r]: sum |w| |x| of row r and column c,
                    // the scale of the K-quants' tolerance.
                    let mut terms = vec![0f64; if is_k_quant(ty) { n * m } else { 0 }];
                    if is_k_quant(ty) {
                        let vt = ty.vec_dot_type();
                        let mut act = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
                        for c in 0..m {
                            glint_cpu::act::quantize_row(vt, &x[c * k..(c + 1) * k], &mut act)
                                .unwrap();
                            for r in 0..n {
                                let row = &rows[r * row_bytes..(r + 1) * row_bytes];
                                terms[c * n + r] = abs_terms(ty, row, &act, k);
                            }
                        }
                    }
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        let (r, c) = (i % n, i / n);
                        let case =
                            format!("{ty} {kern:?} k={k} n={n} m={m} out[{i}] (row {r}, col {c})");
                        if is_k_quant(ty) {
                            let tol = tolerance("amx", ty) * terms[i];
                            assert!(((g - w) as f64).abs() <= tol, "{case}: {g} vs {w}");
                        } else {
                            assert_eq!(g.to_bits(), w.to_bits(), "{case}: {g} vs {w}");
                        }
                        if let Some(t) = &twin {
                            assert_eq!(g.to_bits(), t[i].to_bits(), "{case}: {g} vs twin {}", t[i]);
                        }
                        n_checked += 1;
                    }
                }
            }
        }
    }
    n_checked
}

/// The AMX path with its tile products modelled in plain Rust (any cpu),
/// from one column up (the fast kernels take it from `AMX_MIN_M` on an AMX
/// cpu): the 32-element types equal ggml's reference loops bit for bit,
/// the K-quants are within their tolerance.
#[test]
fn amx_model_products_match_the_reference_loops() {
    let ms = [1, 2, 15, 16, 17, 40];
    let n = check_amx(Kernels::AmxModel, None, &ms);
    assert_eq!(n, amx_outputs(&ms));
}

/// The real AMX tiles, as the fast kernels run them from `AMX_MIN_M`
/// columns: the model's numbers bit for bit (so the model is their
/// arithmetic), hence the reference loops' for the 32-element types; and
/// the detection says yes where cpuid does.
#[test]
#[cfg_attr(
    not(host_amx),
    ignore = "this cpu lacks AMX-TILE, AMX-INT8 or AVX-512 F/BW/VL/VNNI, or is not on Linux"
)]
fn amx_products_equal_their_model_bit_for_bit() {
    assert!(
        amx::available(),
        "cpuid reports AMX-INT8 but the OS did not grant the tile state"
    );
    let ms = [AMX_MIN_M, AMX_MIN_M + 1, AMX_MIN_M + 17];
    let n = check_amx(Kernels::Fast, Some(Kernels::AmxModel), &ms);
    assert_eq!(n, amx_outputs(&ms));
}

/// A product of rows of no elements through the AMX path: zeros, no panic.
#[test]
fn amx_product_of_empty_rows_is_zeros() {
    for ty in AMX_TYPES {
        let w = WeightRows {
            ty,
            bytes: &[],
            row_bytes: 0,
            k: 0,
            n: 3,
        };
        let mut out = vec![1f32; 3 * 20];
        mul_mat_ggml_with(Kernels::AmxModel, w, &[], 20, &mut out).unwrap();
        assert!(out.iter().all(|&v| v == 0.0), "{ty}: {out:?}");
    }
}

/// The types with lane kernels (AVX-512 VNNI, and its emulation).
const LANE_TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The types with AVX2 lane kernels: not Q8_0 (its levels `x + 128`
/// reach 255, which `maddubs` would saturate).
const AVX2_LANE_TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Q3_K x Q8_K as its lane kernels compute it, one row and column: per
/// super-block the exact sum of each 16-element sub-block's `level * y`
/// (levels `field + 4 * hbit - 4`) times its scale (`6 bits - 32`), then
/// `acc + (d * dy) * sum` in f32 (where ggml's loop adds eight f32 lanes).
fn q3_k_exact(x: &[u8], y: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (xb, yb) in x.chunks_exact(110).zip(y.chunks_exact(292)) {
        let (hmask, qs, s) = (&xb[..32], &xb[32..96], &xb[96..108]);
        let mut total = 0i32;
        for j in 0..16 {
            let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
            let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
            let sc = i32::from(low | (high << 4)) - 32;
            let mut sum = 0i32;
            for e in 16 * j..16 * j + 16 {
                let (h, sh, l) = (e / 128, (e % 128) / 32, e % 32);
                let field = i32::from((qs[32 * h + l] >> (2 * sh)) & 3);
                let hbit = i32::from((hmask[l] >> (e / 32)) & 1);
                sum += (field + 4 * hbit - 4) * i32::from(yb[4 + e] as i8);
            }
            total += sc * sum;
        }
        let d = f16::from_le_bytes([xb[108], xb[109]]).to_f32();
        let dy = f32::from_le_bytes([yb[0], yb[1], yb[2], yb[3]]);
        acc += (d * dy) * total as f32;
    }
    acc
}

/// Holds the lane kernels `lanes_of(ty)` (columns prepared by `prepare`
/// where they read prepared columns) to their twin bit for bit: the AMX
/// path's model (`Kernels::AmxModel`: the plain kernels' numbers for the
/// 32-element types and Q2_K, the exact super-block sums for Q4_K, Q5_K
/// and Q6_K), and for Q3_K (which the AMX path does not take)
/// [`q3_k_exact`]: each result of
/// the one- to four-column kernels, on [`qdot::LANES`] rows unpacked once,
/// equals the model's for the same row and column; on random rows and, at
/// every third seed, on a row with every level at its top against columns
/// of all 127 and all -127 (the AVX2 kernels' `maddubs` must not
/// saturate). Returns the prepared columns, for comparing two
/// preparations, and how many results it compared.
fn check_lanes(
    what: &str,
    types: &[GgmlType],
    lanes_of: fn(GgmlType) -> Option<qdot::Lanes>,
    prepare: fn(GgmlType, &[u8], &mut [u8]),
) -> (Vec<Vec<u8>>, usize) {
    let (mut all_prep, mut n) = (Vec::new(), 0);
    for &ty in types {
        let lanes = lanes_of(ty).unwrap_or_else(|| panic!("{what} {ty}: no lane kernel"));
        let vt = ty.vec_dot_type();
        let block = ty.block_size();
        for seed in 0..12u64 {
            let mut rng = Rng(9100 + seed);
            let k = [1, 3, 8][seed as usize % 3] * block.max(32);
            let extreme = seed % 3 == 0;
            let mut rows: Vec<Vec<u8>> = (0..qdot::LANES)
                .map(|_| random_row(ty, k, &mut rng))
                .collect();
            if extreme {
                // Row 5: every level at its top (scales too for Q4_K/Q5_K;
                // d, dmin and Q6_K's scales kept).
                let levels = match ty {
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
                        4..ty.type_size()
                    }
                    GgmlType::Q2_K => 0..80,
                    GgmlType::Q3_K => 0..96,
                    GgmlType::Q6_K => 0..192,
                    _ => 2..ty.type_size(),
                };
                let top = if ty == GgmlType::Q8_0 { 0x7f } else { 0xff };
                for blk in rows[5].chunks_mut(ty.type_size()) {
                    blk[levels.clone()].fill(top);
                }
            }
            let xs: Vec<Vec<f32>> = (0..qdot::COLS)
                .map(|c| {
                    let mut x = rng.vec(k);
                    match c {
                        1 => x[0] = 40.0, // an outlier: levels at -127/127, the rest small
                        2 if extreme => x.fill(1.0),
                        3 if extreme => x.fill(-1.0),
                        _ => {}
                    }
                    x
                })
                .collect();
            let acts: Vec<Vec<u8>> = xs
                .iter()
                .map(|x| {
                    let mut a = vec![0u8; vt.bytes_for(k as u64).unwrap() as usize];
                    glint_cpu::act::quantize_row(vt, x, &mut a).unwrap();
                    a
                })
                .collect();
            let prep: Vec<Vec<u8>> = acts
                .iter()
                .map(|a| {
                    if !lanes.prepared {
                        return a.clone();
                    }
                    let mut p = vec![0u8; k / 32 * qdot::TILE_BLOCK];
                    prepare(ty, a, &mut p);
                    p
                })
                .collect();
            // want: [COLS, LANES], the AMX model's product.
            let all: Vec<u8> = rows.concat();
            let w = WeightRows {
                ty,
                bytes: &all,
                row_bytes: rows[0].len(),
                k,
                n: qdot::LANES,
            };
            let mut want = vec![0f32; qdot::LANES * qdot::COLS];
            mul_mat_ggml_with(Kernels::AmxModel, w, &xs.concat(), qdot::COLS, &mut want).unwrap();
            if ty == GgmlType::Q3_K {
                for (i, v) in want.iter_mut().enumerate() {
                    let (c, r) = (i / qdot::LANES, i % qdot::LANES);
                    *v = q3_k_exact(&rows[r], &acts[c]);
                }
            }
            let nb = k / block.max(32);
            let mut xp = vec![0u8; nb * lanes.block_bytes];
            (lanes.unpack)(std::array::from_fn(|r| &rows[r][..]), &mut xp);
            let prep_ref = &prep;
            let ys = |c0: usize| move |c: usize| &prep_ref[c0 + c][..];
            // (first column, out[c][r]) of every width, at both ends.
            let mut got: Vec<(usize, Vec<[f32; qdot::LANES]>)> = Vec::new();
            got.push((0, (lanes.four)(&xp, std::array::from_fn(ys(0))).to_vec()));
            for c0 in [0, 1] {
                got.push((c0, (lanes.three)(&xp, std::array::from_fn(ys(c0))).to_vec()));
            }
            for c0 in [0, 2] {
                got.push((c0, (lanes.two)(&xp, std::array::from_fn(ys(c0))).to_vec()));
            }
            for c0 in 0..qdot::COLS {
                got.push((c0, (lanes.one)(&xp, std::array::from_fn(ys(c0))).to_vec()));
            }
            for (c0, out) in got {
                for (c, col) in out.iter().enumerate() {
                    for (r, v) in col.iter().enumerate() {
                        let want = want[(c0 + c) * qdot::LANES + r];
                        assert_eq!(
                            v.to_bits(),
                            want.to_bits(),
                            "{what} {ty} k={k} seed {seed} row {r} col {}: {v} vs {want}",
                            c0 + c
                        );
                        n += 1;
                    }
                }
            }
            all_prep.extend(prep);
        }
    }
    // Per seed: LANES rows of a four-, two three-, two two- and four one-column calls.
    assert_eq!(n, types.len() * 12 * qdot::LANES * (4 + 2 * 3 + 2 * 2 + 4));
    (all_prep, n)
}

/// [`check_lanes`] on a tier's kernels (`lanes_of`, columns from
/// `prepare`) and on the VNNI emulation's, the two tiers' prepared columns
/// held equal byte for byte.
fn check_lanes_and_their_emulation(
    what: &str,
    types: &[GgmlType],
    lanes_of: fn(GgmlType) -> Option<qdot::Lanes>,
    prepare: fn(GgmlType, &[u8], &mut [u8]),
) {
    let (tier, _) = check_lanes(what, types, lanes_of, prepare);
    let emulation = qdot::emulated::prepare_tile_col;
    let (emulated, _) = check_lanes("emulated", types, qdot::emulated::lanes, emulation);
    assert!(tier == emulated, "{what}: prepared columns differ");
}

/// The lane kernels of the VNNI tier on any AVX2 cpu (`vpdpbusd` and
/// `vpdpwssd` through their lane models): bit for bit the AMX model (the
/// plain kernels for the 32-element types).
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn emulated_vnni_lane_kernels_equal_the_amx_model_bit_for_bit() {
    check_lanes(
        "emulated",
        &LANE_TYPES,
        qdot::emulated::lanes,
        qdot::emulated::prepare_tile_col,
    );
}

/// The real VNNI lane kernels: bit for bit the AMX model, their prepared
/// columns the emulation's byte for byte.
#[test]
#[cfg_attr(not(host_vnni), ignore = "this cpu lacks AVX-512 F, BW, VL or VNNI")]
fn vnni_lane_kernels_equal_the_amx_model_and_their_emulation() {
    check_lanes_and_their_emulation(
        "vnni",
        &LANE_TYPES,
        qdot::fast_lanes,
        qdot::prepare_tile_col,
    );
}

/// The AVX2 lane kernels (`maddubs` + `madd` for `vpdpbusd`): bit for bit
/// the AMX model, extremes included, and their prepared columns the VNNI
/// emulation's byte for byte.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_lane_kernels_equal_the_amx_model_bit_for_bit() {
    check_lanes_and_their_emulation(
        "avx2",
        &AVX2_LANE_TYPES,
        qdot::avx2_lanes,
        qdot::prepare_tile_col_avx2,
    );
}

/// The AVX2 lane kernels at the extremes, 3 blocks: weight bytes all 0xff
/// (after d: every level at its top, 15 or 31), all 0x00 (its bottom) and
/// mixed; activation levels all 127, all -127 and alternating, with d = 1:
/// the plain kernels' results bit for bit (`maddubs` never saturates), and
/// the all-top row against all-127 (the largest dot) is its exact value.
#[test]
#[cfg_attr(not(host_avx2), ignore = "this cpu lacks AVX2, FMA or F16C")]
fn avx2_lane_kernels_do_not_saturate_at_the_extremes() {
    for ty in [GgmlType::Q4_0, GgmlType::Q5_0] {
        let lanes = qdot::avx2_lanes(ty).expect("an AVX2 lane kernel");
        let plain = qdot::plain_dot(ty).expect("a plain kernel");
        assert_eq!(ty.vec_dot_type(), GgmlType::Q8_0, "{ty}");
        let rows = [0xff, 0x00, 0xff, 0x0f, 0xf0, 0xff, 0x00, 0x5a].map(|f| extreme_row(ty, f));
        let acts = extreme_cols();
        let prep = prepared_avx2(ty, &acts);
        let mut xp = vec![0u8; 3 * qdot::LANE_BLOCK];
        (lanes.unpack)(std::array::from_fn(|r| &rows[r][..]), &mut xp);
        let got = (lanes.four)(&xp, std::array::from_fn(|c| &prep[c][..]));
        for (c, act) in acts.iter().enumerate() {
            for (r, x) in rows.iter().enumerate() {
                let want = plain(x, act);
                assert_eq!(
                    got[c][r].to_bits(),
                    want.to_bits(),
                    "{ty} extremes row {r} col {c}: {} vs {want}",
                    got[c][r]
                );
            }
        }
        let top = match ty {
            GgmlType::Q4_0 => 7.0,  // 15 - 8
            GgmlType::Q5_0 => 15.0, // 31 - 16
            _ => unreachable!(),
        };
        assert_eq!(got[0][0], 3.0 * 32.0 * 0.5 * top * 127.0, "{ty}");
    }
}
