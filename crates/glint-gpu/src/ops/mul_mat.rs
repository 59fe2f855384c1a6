//! `shaders/mul_mat.wgsl`: `out[n, m] = W[k, n] . x[k, m]` for every weight
//! format; the weight is bound in windows of whole rows, one dispatch each.

use glint_backend::{check, BackendError, GgmlType, Result};

use super::{f32_bits, T};
use crate::pipelines::PipelineKey;
use crate::tensor::Bind;
use crate::GpuBackend;

/// `m` up to this takes the matvec path of `mul_mat`: a row a workgroup (a
/// subgroup's rows at once, with subgroups)
/// for every column, the row read once (`matvec_cols.wgsl`'s `MAX_COLS`).
/// A decode step of up to 8 sequences streams the weights once.
pub(crate) const MATVEC_MAX_M: usize = 8;

/// Elements of x (all columns together) the int8 matvec quantizes into
/// workgroup memory: `matvec_cols.wgsl`'s `Q8_BLOCKS` units of 32. A 7B's
/// down projection (k 11008) at one column, SmolLM2's at eight.
pub(crate) const Q8_MAX_ELEMENTS: usize = 384 * 32;

/// The same with flag `Q8W`, where the adapter has the workgroup memory
/// ([`int8_wide_fits`]): an 8B's down projection (k 14336) at one column,
/// a 7B's other matvecs at six.
pub(crate) const Q8_WIDE_ELEMENTS: usize = 768 * 32;

/// Workgroup memory of an int8 matvec quantizing up to `elements` of x:
/// the levels (a byte an element), a unit's scales (two u32s), and
/// reduce.wgsl's `red` (64 f32s).
const fn q8_workgroup_bytes(elements: usize) -> u32 {
    (elements + elements / 32 * 8 + MATVEC_WG * 4) as u32
}

/// Whether the device can run the int8 matvec: the instance's WGSL has
/// the packed integer dot, the adapter the workgroup memory (15 KiB).
pub(crate) fn int8_fits(ctx: &crate::context::Context) -> bool {
    ctx.int8_dot
        && ctx.limits.max_compute_workgroup_storage_size >= q8_workgroup_bytes(Q8_MAX_ELEMENTS)
}

/// Whether the adapter has the wide variant's workgroup memory (30 KiB:
/// every Vulkan, Metal and DX12 GPU has 32).
pub(crate) fn int8_wide_fits(ctx: &crate::context::Context) -> bool {
    ctx.limits.max_compute_workgroup_storage_size >= q8_workgroup_bytes(Q8_WIDE_ELEMENTS)
}

/// The formats with an int8 matvec (their files define `q8_weights` and
/// `q8_block` under flag Q8): the 32-element blocks, whose activations
/// ggml quantizes to Q8_0 or Q8_1, and the K-quants (Q8_K): every
/// quantized format with a kernel.
pub(crate) fn has_int8(ty: GgmlType) -> bool {
    use GgmlType as G;
    matches!(
        ty,
        G::Q4_0
            | G::Q4_1
            | G::Q5_0
            | G::Q5_1
            | G::Q8_0
            | G::Q2_K
            | G::Q3_K
            | G::Q4_K
            | G::Q5_K
            | G::Q6_K
    )
}

/// Whether `ty`'s weights are a scale times a level, its file defining
/// `pair_scaled` (quant/common.wgsl's `Scaled`): the float matvec dots the
/// levels and scales each group's dot once (flag `PS`, matvec_cols.wgsl).
pub(crate) fn has_pair_scaled(ty: GgmlType) -> bool {
    use GgmlType as G;
    matches!(ty, G::Q4_0 | G::Q5_0 | G::Q8_0 | G::Q3_K | G::Q6_K)
}

/// The int8 flags of a matvec of `ty` over x `[k, m]`: `Q8` where the
/// backend's int8 is on, the format has one, and x fits the workgroup
/// memory, with `Q8W` where it fits only the wide variant's; none else.
pub(crate) fn int8_flags(
    be: &GpuBackend,
    ty: GgmlType,
    (k, m): (usize, usize),
) -> &'static [&'static str] {
    let whole = k.is_multiple_of(ty.block_size());
    let n = k * m;
    if !be.int8 || !has_int8(ty) || !whole {
        &[]
    } else if n <= Q8_MAX_ELEMENTS {
        &["Q8"]
    } else if n <= Q8_WIDE_ELEMENTS && be.int8_wide {
        &["Q8", "Q8W"]
    } else {
        &[]
    }
}

/// The matvec pipeline's `COLS` constant for `m` columns: m rounded up to
/// a power of two (at most 4 pipelines per kernel and type).
pub(crate) fn cols(m: usize) -> f64 {
    m.clamp(1, MATVEC_MAX_M).next_power_of_two() as f64
}

/// A matvec pipeline's key for weights of type `ty`, rows of `k`, `m`
/// columns: the backend's flags (subgroups; f16 for F16 weights), then,
/// where x's columns are whole vec4s (k % 4 == 0), `P8`: x read as vec4s,
/// a lane takes 8 weights a step, paired as the format's bytes hold them
/// (`quant/pair.wgsl`), and loads 4 pairs' weights at once (4 steps of a
/// row, or fewer steps of the rows it takes at once). Then `extra`.
///
/// H100 (Vulkan), `kernels --quick`, 4096x4096 m=1, GB/s of weights, main
/// before pairs -> vec4 x loads alone -> both: Q4_0 311 -> 366 -> 518, Q8_0
/// 605 -> 759 -> 861, Q6_K 356 -> 376 -> 501, Q4_K 251 -> 296 -> 297;
/// `glint bench --synthetic llama2-7b:q4_0` tg128 99.4 -> 135.6 t/s, four
/// sequences 197.7 -> 283.1. Unrolling by 1 or 2 instead of 4, and
/// `u32_at` without its branch, were within the noise.
///
/// With subgroups, also `SGROW` and its `RPW` ([`matvec_rows_per_group`]).
/// Always `NR`, the rows a lane dots at once ([`matvec_joint_rows`]; glu
/// twice as many, each a gate and an up row, at most [`MATVEC_MAX_JOINT`]).
/// Where the int8 path takes it, `Q8` ([`int8_flags`]): x quantized,
/// integer dots. Else, with `P8`, for the formats whose weights are a
/// scale times a level ([`has_pair_scaled`]), `PS`: the levels dotted with
/// x and each group of 4's dot scaled once (off with
/// `GpuOptions::disable_matvec_scaled`).
pub(crate) fn matvec_key(
    be: &GpuBackend,
    key: PipelineKey,
    ty: GgmlType,
    (k, m): (usize, usize),
    extra: &[&'static str],
) -> PipelineKey {
    let mut flags = be.flags(true, ty == GgmlType::F16);
    let int8 = int8_flags(be, ty, (k, m));
    if k % 4 == 0 {
        flags.push("P8");
        if int8.is_empty() && be.matvec_scaled && has_pair_scaled(ty) {
            flags.push("PS");
        }
    }
    flags.extend_from_slice(int8);
    flags.extend_from_slice(extra);
    let rpw = matvec_rows_per_group(be);
    if rpw > 0 {
        flags.push("SGROW");
    }
    // glu's rows are each a gate and an up row (at most MATVEC_MAX_JOINT
    // of them at once: glu takes 4 at once in two turns).
    let joint = matvec_joint_rows(be);
    let nr = if extra.contains(&"GLU") {
        (2 * joint).min(MATVEC_MAX_JOINT)
    } else {
        joint
    };
    let key = key
        .with_type(ty)
        .with_flags(flags)
        .with_constant("COLS", cols(m))
        .with_constant("NR", nr as f64);
    match rpw {
        0 => key,
        n => key.with_constant("RPW", n as f64),
    }
}

/// Lanes of a matvec workgroup (`WG` in mul_mat.wgsl and matvec_fused.wgsl).
const MATVEC_WG: usize = 64;

/// Rows a matvec workgroup takes with flag `SGROW` ([`matvec_joint_rows`]
/// a subgroup, times 64 lanes over the adapter's smallest subgroup size,
/// 1 to 8: where the driver picks larger subgroups, each takes several
/// turns), or 0 where the device has no subgroups or
/// [`GpuBackend::matvec_sgrow`] is off: one row a workgroup, its 64 lanes
/// summing through workgroup memory.
///
/// lavapipe (subgroups of 8, 2 cores), `glint bench -p 0 -n 16 -r 3`, a
/// row a workgroup -> a row a subgroup: SmolLM2 tg16 0.61 -> 4.36 t/s,
/// Gemma 3 270M 0.20 -> 1.50 (its barriers are costly). Not yet measured
/// on a GPU: `GLINT_MATVEC_WG_ROWS=1` gives the old path to compare.
pub(crate) fn matvec_rows_per_group(be: &GpuBackend) -> usize {
    if !be.features_used().subgroups || !be.matvec_sgrow {
        return 0;
    }
    let min = be.ctx.info.subgroup_min_size.max(1) as usize;
    (MATVEC_WG / min).clamp(1, 8) * matvec_joint_rows(be)
}

/// The most rows a lane dots at once (matvec_cols.wgsl's `MAX_NR`): the
/// most a subgroup may take at once ([`GpuOptions::matvec_rows`]).
///
/// [`GpuOptions::matvec_rows`]: crate::GpuOptions::matvec_rows
pub(crate) const MATVEC_MAX_JOINT: usize = 4;

/// Rows a matvec subgroup takes at once (`NR`: their weights dotted with
/// one read of x; `glu` twice as many, each row's gate and up, up to
/// [`MATVEC_MAX_JOINT`]): 2 by
/// default, [`GpuOptions::matvec_rows`] where set; 1 without `SGROW`
/// (a row a workgroup).
///
/// lavapipe (subgroups of 8, 2 cores), `glint bench -p 0 -n 16 -r 2 -npl
/// 1,4`, rows 1 -> 2 -> 4: SmolLM2 4.7 -> 6.3 -> 7.3 t/s and 7.2 -> 11.5
/// -> 14.8, Gemma 3 1.7 -> 2.4 -> 2.9 and 2.8 -> 4.9 -> 6.9. Two is
/// llama.cpp's Vulkan default for Q4_0 and the K-quants. Not yet measured
/// on a GPU: `GLINT_MATVEC_ROWS=1` gives the old path.
///
/// [`GpuOptions::matvec_rows`]: crate::GpuOptions::matvec_rows
pub(crate) fn matvec_joint_rows(be: &GpuBackend) -> usize {
    if !be.features_used().subgroups || !be.matvec_sgrow {
        return 1;
    }
    be.matvec_rows.load(std::sync::atomic::Ordering::Relaxed)
}

/// Workgroups a matvec of `rows` rows takes.
pub(crate) fn matvec_groups(be: &GpuBackend, rows: usize) -> usize {
    rows.div_ceil(matvec_rows_per_group(be).max(1))
}

/// Workgroup memory of the matmul's 128 x 128 tiles (flag `TL`): the W and
/// x tiles, 16 k-steps of 128 f32s each.
pub(crate) const TL_WORKGROUP_BYTES: u32 = 2 * 16 * 128 * 4;

/// The side of the matmul's output tiles for a window of `rows` weight
/// rows and `m` columns: the backend's setting where it forces one
/// ([`GpuOptions::matmul_tile`], or 64 where the adapter lacks
/// [`TL_WORKGROUP_BYTES`]), else ([`tile_for`]) 128 (8 x 8 a thread, flag
/// `TL`) where both pass 64, else 64 (4 x 4 a thread).
///
/// lavapipe (2 cores), `glint bench -p 256 -n 0 -r 2`, 64 -> 128: SmolLM2
/// 19.0 -> 23.6-25.1 t/s, Gemma 3 21.0-21.6 -> 28.2-28.6, the narrow 7B
/// 53.6-55.2 -> 66.0-67.9; at `-p 64` (which the rule keeps at 64) a forced
/// 128 ran 15-20% slower on SmolLM2 and Gemma 3 (mixed on the narrow 7B:
/// 53.5 and 70.6 against 62.9 and 63.8). Not yet measured on a GPU:
/// `GLINT_MATMUL_TILE=64` gives the old tiles (the same kernel text at
/// Q = 1, its updates written out as before).
///
/// [`GpuOptions::matmul_tile`]: crate::GpuOptions::matmul_tile
pub(crate) fn matmul_tile(be: &GpuBackend, rows: usize, m: usize) -> usize {
    tile_for(be.matmul_tile, rows, m)
}

/// The tile side for `setting` (0: by the shape) and a window of `rows`
/// rows by `m` columns: 128 where both pass 64, llama.cpp's Vulkan rule for
/// its large tile (smaller matrices keep more workgroups), else 64.
pub(crate) fn tile_for(setting: usize, rows: usize, m: usize) -> usize {
    match setting {
        0 if rows > 64 && m > 64 => 128,
        0 => 64,
        n => n,
    }
}

/// w: [k, n] any weight format; x: [k, m] f32; out: [n, m] f32.
/// `matvec`: a row a workgroup (with subgroups, [`matvec_joint_rows`] a
/// subgroup), every column; `matmul`: output tiles of [`matmul_tile`]
/// rows and columns.
pub(crate) fn mul_mat(be: &GpuBackend, w: &T, x: &T, out: &T) -> Result<()> {
    mul_mat_normed(be, w, x, None, out)
}

/// The RMSNorm a matvec folds in (flag `NORM`): its weights (F32 `[k]`,
/// checked by the caller) and eps.
pub(crate) type Norm<'a> = Option<(&'a T, f32)>;

/// [`mul_mat`], or with `norm` the matvec of `rms_norm(x) * norm.0` (`m`
/// up to [`MATVEC_MAX_M`] only: the caller checks).
pub(crate) fn mul_mat_normed(be: &GpuBackend, w: &T, x: &T, norm: Norm, out: &T) -> Result<()> {
    let op = "mul_mat";
    let m = check::mul_mat(w, x, out)?;
    let (k, n) = (w.desc.ne[0], w.desc.n_rows());
    be.check_bindable(op, &[x, out])?;
    let matvec = m <= MATVEC_MAX_M;
    if !matvec && norm.is_some() {
        // The callers fold a norm only where `folds_norm` said yes (m <=
        // MATVEC_MAX_M); the matmul has no NORM variant.
        return Err(BackendError::Shape {
            op,
            detail: format!("a norm folded into a matmul of {m} columns (most {MATVEC_MAX_M})"),
        });
    }
    let entry = if matvec { "matvec" } else { "matmul" };
    let n_in = 2 + norm.is_some() as u32;
    let key = PipelineKey::new("mul_mat.wgsl", entry, n_in, 1);
    let key = if matvec {
        let extra: &[&'static str] = if norm.is_some() { &["NORM"] } else { &[] };
        matvec_key(be, key, w.desc.ty, (k, m), extra)
    } else {
        key.with_type(w.desc.ty)
            .with_flags(be.flags(false, w.desc.ty == GgmlType::F16))
    };
    for win in be.windows(op, w)?.iter() {
        let tile = matmul_tile(be, win.n_rows, m);
        let mut key = key.clone();
        let n_wg = if matvec {
            matvec_groups(be, win.n_rows)
        } else {
            if tile == 128 {
                key.flags.push("TL");
            }
            win.n_rows.div_ceil(tile) * m.div_ceil(tile)
        };
        let (row0, n_local) = (win.row0 as u32, win.n_rows as u32);
        // With a norm, its weights are bound after x and its eps follows
        // the params (without one, neither is passed).
        let (nw, eps) = norm.unwrap_or((x, 0.0));
        let params = [
            k as u32,
            n as u32,
            m as u32,
            row0,
            n_local,
            w.desc.row_bytes() as u32,
            f32_bits(eps),
        ];
        // matvec: each row once, for every column; matmul: a tile's rows
        // for each block of `tile` columns.
        let passes = if matvec { 1 } else { m.div_ceil(tile) };
        be.weight_read(w, (win.n_rows * passes) as u64 * w.desc.row_bytes() as u64);
        let ins = [Bind::window(w, win), Bind::whole(x), Bind::whole(nw)];
        let (ins, params) = (&ins[..n_in as usize], &params[..4 + n_in as usize]);
        be.dispatch(key, ins, &[Bind::whole(out)], params, n_wg)?;
    }
    Ok(())
}

/// `out = w · x + res` in one matvec dispatch, `res` added in its epilogue
/// (flag `ADD`): for `m` up to [`MATVEC_MAX_M`] with the weight in one
/// binding window and `res`/`out` of `out`'s shape. Returns `Ok(false)`,
/// having recorded nothing, where that does not hold (the caller runs
/// `mul_mat` then `add`).
pub(crate) fn mul_mat_add(be: &GpuBackend, w: &T, x: &T, res: &T, out: &T) -> Result<bool> {
    let op = "mul_mat_add";
    let m = check::mul_mat(w, x, out)?;
    let (k, n) = (w.desc.ne[0], w.desc.n_rows());
    let wins = be.windows(op, w)?;
    let fits = m <= MATVEC_MAX_M
        && wins.len() == 1
        && res.desc.ty == GgmlType::F32
        && res.desc.n_elements() == n * m;
    if !fits {
        return Ok(false);
    }
    be.check_bindable(op, &[x, res, out])?;
    let key = PipelineKey::new("mul_mat.wgsl", "matvec", 3, 1);
    let key = matvec_key(be, key, w.desc.ty, (k, m), &["ADD"]);
    let win = &wins[0];
    let params = [
        k as u32,
        n as u32,
        m as u32,
        win.row0 as u32,
        win.n_rows as u32,
        w.desc.row_bytes() as u32,
    ];
    be.weight_read(w, win.n_rows as u64 * w.desc.row_bytes() as u64);
    let ins = [Bind::window(w, win), Bind::whole(x), Bind::whole(res)];
    let n_wg = matvec_groups(be, win.n_rows);
    be.dispatch(key, &ins, &[Bind::whole(out)], &params, n_wg)?;
    Ok(true)
}
