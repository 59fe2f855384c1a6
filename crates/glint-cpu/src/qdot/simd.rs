//! x86_64: run-time detection of each tier, and the safe entries to its
//! kernels: the only place the `#[target_feature]` kernels are called from
//! code that does not itself have the features.
//!
//! Every entry is handed out only by a table below (`dot`, `dot_cols`,
//! `tile`, ...), and each table hands one out only after the detection of
//! its tier said yes.

#![allow(unsafe_code)]

use super::*;
use std::sync::OnceLock;

/// Whether this cpu has AVX2, FMA and F16C (detected once), and the tier
/// cap allows them.
pub(super) fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        allows(Tier::Avx2)
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    })
}

/// Whether this cpu has the AVX2 tier and AVX-512 F and DQ (the float
/// kernels' 512-bit tier: attention).
pub(super) fn has_avx512() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        has_avx2()
            && allows(Tier::Native)
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512dq")
    })
}

/// Whether this cpu has the AVX2 tier and AVX-512 F, BW, VL and VNNI.
pub(super) fn has_vnni() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        has_avx2()
            && allows(Tier::Native)
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
    })
}

/// Safe entries `$name` to the kernels `$module::$name`, compiled for
/// `$features`; each group of names follows its signature, in brackets
/// (`[<const N> fn(...)]`: generic over a column count `N`).
macro_rules! entries {
    ($features:literal, $module:ident { $($sig:tt $($name:ident),+;)* }) => {
        $($(entries!(@one $features, $sig, $name, $module::$name);)+)*
    };
    (@one $features:literal, [<const $n:ident> fn($($arg:ident: $t:ty),*) -> $ret:ty], $name:ident, $body:path) => {
        fn $name<const $n: usize>($($arg: $t),*) -> $ret {
            #[target_feature(enable = $features)]
            fn tf<const $n: usize>($($arg: $t),*) -> $ret {
                $body($($arg),*)
            }
            // SAFETY: as below.
            unsafe { tf::<$n>($($arg),*) }
        }
    };
    (@one $features:literal, [fn($($arg:ident: $t:ty),*) $(-> $ret:ty)?], $name:ident, $body:path) => {
        fn $name($($arg: $t),*) $(-> $ret)? {
            #[target_feature(enable = $features)]
            fn tf($($arg: $t),*) $(-> $ret)? {
                $body($($arg),*)
            }
            // SAFETY: `$name` is private to this file, where only the
            // tables below hand it out, each through `kernels` with the
            // detection of the tier of `$features`.
            unsafe { tf($($arg),*) }
        }
    };
}

/// [`entries!`] for the AVX-512 VNNI tier: each `(kernel, twin)` pair is a
/// kernel of `avx512` and its twin with the tier's instructions modelled,
/// which needs only the AVX2 tier.
macro_rules! vnni_entries {
    ($module:ident { $($sig:tt $(($vnni:ident, $model:ident)),+;)* }) => {
        $($(
            entries!(
                @one "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
                $sig, $vnni, $module::$vnni
            );
            entries!(@one "avx2,fma,f16c", $sig, $model, $module::$model);
        )+)*
    };
}

entries!("avx2,fma,f16c", avx2 {
    [fn(x: &[u8], y: &[u8]) -> f32]
        q4_0_q8_0, q4_1_q8_1, q5_0_q8_0, q5_1_q8_1, q8_0_q8_0, q2_k_q8_k, q3_k_q8_k,
        q4_k_q8_k, q5_k_q8_k, q6_k_q8_k;
    [<const N> fn(x: &[u8], ys: [&[u8]; N]) -> [f32; N]]
        q4_0_cols, q4_1_cols, q5_0_cols, q5_1_cols, q8_0_cols, q4_k_cols, q6_k_cols;
    [fn(w: &[u8], row_bytes: usize, y: &[u8], out: &mut [f32])]
        q4_0_q8_0_rows, q4_1_q8_1_rows, q5_0_q8_0_rows, q5_1_q8_1_rows, q8_0_q8_0_rows,
        q4_k_q8_k_rows, q6_k_q8_k_rows;
});

entries!("avx2,fma,f16c", avx512 {
    [<const N> fn(xs: [&[u8]; TILE], ys: [&[u8]; N]) -> [[f32; N]; TILE]]
        q4_0_tile_avx2, q5_0_tile_avx2;
    [<const N> fn(xp: &[u8], ys: [&[u8]; N]) -> [[f32; N]; TILE]]
        q4_0_tile_avx2_pre, q5_0_tile_avx2_pre;
    [fn(xs: [&[u8]; TILE], out: &mut [u8])]
        q4_0_unpack, q4_1_unpack, q5_0_unpack, q5_1_unpack, q8_0_unpack;
    [fn(ty: GgmlType, act: &[u8], out: &mut [u8])] prepare_avx2;
});

vnni_entries!(avx512 {
    [fn(x: &[u8], y: &[u8]) -> f32]
        (q4_0_row, q4_0_row_model), (q4_1_row, q4_1_row_model), (q5_0_row, q5_0_row_model),
        (q5_1_row, q5_1_row_model), (q8_0_row, q8_0_row_model);
    [fn(w: &[u8], row_bytes: usize, y: &[u8], out: &mut [f32])]
        (q4_0_rows, q4_0_rows_model), (q4_1_rows, q4_1_rows_model),
        (q5_0_rows, q5_0_rows_model), (q5_1_rows, q5_1_rows_model),
        (q8_0_rows, q8_0_rows_model);
    [<const N> fn(x: &[u8], ys: [&[u8]; N]) -> [f32; N]]
        (q4_k_cols_vnni, q4_k_cols_model), (q6_k_cols_vnni, q6_k_cols_model);
    [<const N> fn(xs: [&[u8]; TILE], ys: [&[u8]; N]) -> [[f32; N]; TILE]]
        (q4_0_tile, q4_0_tile_model), (q4_1_tile, q4_1_tile_model),
        (q5_0_tile, q5_0_tile_model), (q5_1_tile, q5_1_tile_model),
        (q8_0_tile, q8_0_tile_model);
    [<const N> fn(xp: &[u8], ys: [&[u8]; N]) -> [[f32; N]; TILE]]
        (q4_0_tile_pre, q4_0_tile_pre_model), (q4_1_tile_pre, q4_1_tile_pre_model),
        (q5_0_tile_pre, q5_0_tile_pre_model), (q5_1_tile_pre, q5_1_tile_pre_model),
        (q8_0_tile_pre, q8_0_tile_pre_model);
    [fn(ty: GgmlType, act: &[u8], out: &mut [u8])] (prepare, prepare_model);
});

entries!("avx2,fma,f16c", lanes {
    [<const N> fn(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N]]
        q4_0_lanes_avx2, q4_1_lanes_avx2, q5_0_lanes_avx2, q5_1_lanes_avx2,
        q2_k_lanes_avx2, q3_k_lanes_avx2, q4_k_lanes_avx2, q5_k_lanes_avx2, q6_k_lanes_avx2;
    [fn(xs: [&[u8]; LANES], out: &mut [u8])]
        q4_0_lane_unpack, q4_1_lane_unpack, q5_0_lane_unpack, q5_1_lane_unpack, q8_0_lane_unpack,
        q2_k_lane_unpack, q3_k_lane_unpack, q4_k_lane_unpack, q5_k_lane_unpack, q6_k_lane_unpack;
});

vnni_entries!(lanes {
    [<const N> fn(xp: &[u8], ys: [&[u8]; N]) -> [[f32; LANES]; N]]
        (q4_0_lanes, q4_0_lanes_model), (q4_1_lanes, q4_1_lanes_model),
        (q5_0_lanes, q5_0_lanes_model), (q5_1_lanes, q5_1_lanes_model),
        (q8_0_lanes, q8_0_lanes_model), (q2_k_lanes, q2_k_lanes_model),
        (q3_k_lanes, q3_k_lanes_model), (q4_k_lanes, q4_k_lanes_model),
        (q5_k_lanes, q5_k_lanes_model), (q6_k_lanes, q6_k_lanes_model);
});

/// `$widths` ([`DotCols`] or [`Tiles`]) of a kernel generic over its
/// column count.
macro_rules! widths {
    ($widths:ident, $kernel:ident) => {
        $widths {
            two: $kernel::<2>,
            three: $kernel::<3>,
            four: $kernel::<4>,
        }
    };
}

/// [`Tiles`] of the tile kernel `$tile` and its unpacked twin `$pre`
/// (rows unpacked by `$unpack`).
macro_rules! tiles {
    ($tile:ident, $pre:ident, $unpack:ident) => {
        Tiles {
            two: $tile::<2>,
            three: $tile::<3>,
            four: $tile::<4>,
            unpack: $unpack,
            pre_two: $pre::<2>,
            pre_three: $pre::<3>,
            pre_four: $pre::<4>,
        }
    };
}

/// One type's kernels on the x86 tiers.
struct Kernels {
    ty: GgmlType,
    /// AVX2: one column (and over consecutive rows, where it has that),
    /// and several.
    dot: DotFn,
    dot_rows: Option<DotRowsFn>,
    cols: Option<DotCols>,
    /// AVX-512 VNNI, where it has its own: `cols` with `vpdpwssd`, and
    /// the prefill tile; each with its instruction's lane model (AVX2 only).
    cols_vnni: Option<(DotCols, DotCols)>,
    tile: Option<(Tiles, Tiles)>,
    /// AVX2: the prefill tile with `maddubs` + `madd` for `vpdpbusd`
    /// (Q4_0, Q5_0: see `avx512::avx2_tile_kernels`).
    tile_avx2: Option<Tiles>,
    /// AVX-512 VNNI: the one-column kernel on a prepared column (decode),
    /// and its lane model (AVX2 only); the same over consecutive rows.
    row: Option<(DotFn, DotFn)>,
    rows: Option<(DotRowsFn, DotRowsFn)>,
}

/// Every type with an x86 kernel, one row each.
#[rustfmt::skip]
const KERNELS: [Kernels; 10] = [
    Kernels { ty: GgmlType::Q4_0, dot: q4_0_q8_0, dot_rows: Some(q4_0_q8_0_rows), cols: Some(widths!(DotCols, q4_0_cols)), cols_vnni: None,
              tile: Some((tiles!(q4_0_tile, q4_0_tile_pre, q4_0_unpack),
                          tiles!(q4_0_tile_model, q4_0_tile_pre_model, q4_0_unpack))),
              tile_avx2: Some(tiles!(q4_0_tile_avx2, q4_0_tile_avx2_pre, q4_0_unpack)),
              row: Some((q4_0_row, q4_0_row_model)),
              rows: Some((q4_0_rows, q4_0_rows_model)) },
    Kernels { ty: GgmlType::Q4_1, dot: q4_1_q8_1, dot_rows: Some(q4_1_q8_1_rows), cols: Some(widths!(DotCols, q4_1_cols)), cols_vnni: None,
              tile: Some((tiles!(q4_1_tile, q4_1_tile_pre, q4_1_unpack),
                          tiles!(q4_1_tile_model, q4_1_tile_pre_model, q4_1_unpack))), tile_avx2: None,
              row: Some((q4_1_row, q4_1_row_model)),
              rows: Some((q4_1_rows, q4_1_rows_model)) },
    Kernels { ty: GgmlType::Q5_0, dot: q5_0_q8_0, dot_rows: Some(q5_0_q8_0_rows), cols: Some(widths!(DotCols, q5_0_cols)), cols_vnni: None,
              tile: Some((tiles!(q5_0_tile, q5_0_tile_pre, q5_0_unpack),
                          tiles!(q5_0_tile_model, q5_0_tile_pre_model, q5_0_unpack))),
              tile_avx2: Some(tiles!(q5_0_tile_avx2, q5_0_tile_avx2_pre, q5_0_unpack)),
              row: Some((q5_0_row, q5_0_row_model)),
              rows: Some((q5_0_rows, q5_0_rows_model)) },
    Kernels { ty: GgmlType::Q5_1, dot: q5_1_q8_1, dot_rows: Some(q5_1_q8_1_rows), cols: Some(widths!(DotCols, q5_1_cols)), cols_vnni: None,
              tile: Some((tiles!(q5_1_tile, q5_1_tile_pre, q5_1_unpack),
                          tiles!(q5_1_tile_model, q5_1_tile_pre_model, q5_1_unpack))), tile_avx2: None,
              row: Some((q5_1_row, q5_1_row_model)),
              rows: Some((q5_1_rows, q5_1_rows_model)) },
    Kernels { ty: GgmlType::Q8_0, dot: q8_0_q8_0, dot_rows: Some(q8_0_q8_0_rows), cols: Some(widths!(DotCols, q8_0_cols)), cols_vnni: None,
              tile: Some((tiles!(q8_0_tile, q8_0_tile_pre, q8_0_unpack),
                          tiles!(q8_0_tile_model, q8_0_tile_pre_model, q8_0_unpack))), tile_avx2: None,
              row: Some((q8_0_row, q8_0_row_model)),
              rows: Some((q8_0_rows, q8_0_rows_model)) },
    Kernels { ty: GgmlType::Q4_K, dot: q4_k_q8_k, dot_rows: Some(q4_k_q8_k_rows), cols: Some(widths!(DotCols, q4_k_cols)),
              cols_vnni: Some((widths!(DotCols, q4_k_cols_vnni), widths!(DotCols, q4_k_cols_model))), tile: None, tile_avx2: None,
              row: None, rows: None },
    Kernels { ty: GgmlType::Q2_K, dot: q2_k_q8_k, dot_rows: None, cols: None, cols_vnni: None, tile: None, tile_avx2: None,
              row: None, rows: None },
    Kernels { ty: GgmlType::Q3_K, dot: q3_k_q8_k, dot_rows: None, cols: None, cols_vnni: None, tile: None, tile_avx2: None,
              row: None, rows: None },
    Kernels { ty: GgmlType::Q5_K, dot: q5_k_q8_k, dot_rows: None, cols: None, cols_vnni: None, tile: None, tile_avx2: None,
              row: None, rows: None },
    Kernels { ty: GgmlType::Q6_K, dot: q6_k_q8_k, dot_rows: Some(q6_k_q8_k_rows), cols: Some(widths!(DotCols, q6_k_cols)),
              cols_vnni: Some((widths!(DotCols, q6_k_cols_vnni), widths!(DotCols, q6_k_cols_model))), tile: None, tile_avx2: None,
              row: None, rows: None },
];

/// `ty`'s row of [`KERNELS`] where this cpu has `tier` (the AVX2 tier
/// or the VNNI tier), else `None`: the one gate every table below takes.
fn kernels(ty: GgmlType, tier: fn() -> bool) -> Option<&'static Kernels> {
    KERNELS.iter().find(|k| k.ty == ty).filter(|_| tier())
}

/// The AVX2 one-column kernels; `None` unless [`has_avx2`].
pub(super) fn dot(ty: GgmlType) -> Option<DotFn> {
    kernels(ty, has_avx2).map(|k| k.dot)
}

/// [`dot`] over consecutive rows (every type but Q2_K, Q3_K, Q5_K);
/// `None` unless [`has_avx2`].
pub(super) fn dot_rows(ty: GgmlType) -> Option<DotRowsFn> {
    kernels(ty, has_avx2).and_then(|k| k.dot_rows)
}

/// The multi-column kernels (VNNI ones where [`has_vnni`]); `None`
/// unless [`has_avx2`].
pub(super) fn dot_cols(ty: GgmlType) -> Option<DotCols> {
    match kernels(ty, has_vnni).and_then(|k| k.cols_vnni) {
        Some((vnni, _)) => Some(vnni),
        None => dot_cols_avx2(ty),
    }
}

/// The AVX2 multi-column kernels; `None` unless [`has_avx2`].
pub(super) fn dot_cols_avx2(ty: GgmlType) -> Option<DotCols> {
    kernels(ty, has_avx2).and_then(|k| k.cols)
}

/// [`dot_cols`] of a VNNI cpu with `vpdpwssd` modelled (AVX2 only).
pub(super) fn dot_cols_model(ty: GgmlType) -> Option<DotCols> {
    let k = kernels(ty, has_avx2)?;
    k.cols_vnni.map(|(_, model)| model).or(k.cols)
}

/// The one-column kernels on a column prepared by [`prepare`] (VNNI:
/// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); `None` unless [`has_vnni`], and
/// unless the type has the VNNI tile whose preparation they read.
pub(super) fn dot_prepared(ty: GgmlType) -> Option<DotFn> {
    kernels(ty, has_vnni)
        .filter(|k| k.tile.is_some())
        .and_then(|k| k.row)
        .map(|(vnni, _)| vnni)
}

/// [`dot_prepared`] with `vpdpbusd` modelled (AVX2 only), on a column
/// prepared by [`prepare_model`] (which [`prepare_tile_col_model`] runs
/// for the types with a tile).
pub(super) fn dot_prepared_model(ty: GgmlType) -> Option<DotFn> {
    kernels(ty, has_avx2)
        .filter(|k| k.tile.is_some())
        .and_then(|k| k.row)
        .map(|(_, model)| model)
}

/// [`dot_prepared`] over consecutive rows; `None` where that is.
pub(super) fn dot_prepared_rows(ty: GgmlType) -> Option<DotRowsFn> {
    kernels(ty, has_vnni)
        .filter(|k| k.tile.is_some())
        .and_then(|k| k.rows)
        .map(|(vnni, _)| vnni)
}

/// [`dot_prepared_model`] over consecutive rows (AVX2 only).
pub(super) fn dot_prepared_rows_model(ty: GgmlType) -> Option<DotRowsFn> {
    kernels(ty, has_avx2)
        .filter(|k| k.tile.is_some())
        .and_then(|k| k.rows)
        .map(|(_, model)| model)
}

/// The VNNI tile kernels; `None` unless [`has_vnni`].
fn tile_vnni(ty: GgmlType) -> Option<Tiles> {
    kernels(ty, has_vnni)
        .and_then(|k| k.tile)
        .map(|(vnni, _)| vnni)
}

/// The tile kernels: VNNI where [`has_vnni`], else the AVX2 ones.
pub(super) fn tile(ty: GgmlType) -> Option<Tiles> {
    tile_vnni(ty).or_else(|| tile_avx2(ty))
}

/// The AVX2 tile kernels (Q4_0, Q5_0); `None` unless [`has_avx2`].
pub(super) fn tile_avx2(ty: GgmlType) -> Option<Tiles> {
    kernels(ty, has_avx2).and_then(|k| k.tile_avx2)
}

/// [`tile`] with `vpdpbusd` modelled (AVX2 only).
pub(super) fn tile_model(ty: GgmlType) -> Option<Tiles> {
    kernels(ty, has_avx2)
        .and_then(|k| k.tile)
        .map(|(_, model)| model)
}

/// The columns [`tile`]'s kernel of `ty` reads, and [`lanes`]' (the same
/// types where the kernels read prepared columns: the VNNI tile types, and
/// on AVX2 [`prepare_tile_col_avx2`]'s). Does nothing unless one of them
/// has a kernel for `ty`.
pub(super) fn prepare_tile_col(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    if tile_vnni(ty).is_some() {
        prepare(ty, act, out)
    } else {
        prepare_tile_col_avx2(ty, act, out)
    }
}

/// The columns [`tile_avx2`]'s and [`lanes_avx2`]'s kernels of `ty` read
/// (the same bytes as the VNNI preparation). Does nothing unless one of
/// them has a kernel.
pub(super) fn prepare_tile_col_avx2(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    if tile_avx2(ty).is_some() || lanes_avx2(ty).is_some_and(|l| l.prepared) {
        prepare_avx2(ty, act, out)
    }
}

/// [`prepare_tile_col`] with `vpdpbusd` modelled (AVX2 only).
/// Does nothing unless [`tile_model`] has a kernel for `ty`.
pub(super) fn prepare_tile_col_model(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    if tile_model(ty).is_some() {
        prepare_model(ty, act, out)
    }
}

/// [`Lanes`] of the lane kernel `$kernel` on rows unpacked by `$unpack`
/// (the 32-element types' layout; `K` before: the K-quants').
macro_rules! lanes {
    ($kernel:ident, $unpack:ident) => {
        lanes!(@ $kernel, $unpack, LANE_BLOCK, true)
    };
    (K $kernel:ident, $unpack:ident) => {
        lanes!(@ $kernel, $unpack, K_LANE_BLOCK, false)
    };
    (@ $kernel:ident, $unpack:ident, $block:expr, $prepared:expr) => {
        Lanes {
            unpack: $unpack,
            block_bytes: $block,
            prepared: $prepared,
            one: $kernel::<1>,
            two: $kernel::<2>,
            three: $kernel::<3>,
            four: $kernel::<4>,
        }
    };
}

/// One type's lane kernels: VNNI, its model (AVX2 only), and AVX2's own.
struct LaneKernels {
    ty: GgmlType,
    vnni: Lanes,
    model: Lanes,
    avx2: Option<Lanes>,
}

/// Every type with lane kernels, one row each.
#[rustfmt::skip]
const LANE_KERNELS: [LaneKernels; 10] = [
    LaneKernels { ty: GgmlType::Q2_K, vnni: lanes!(K q2_k_lanes, q2_k_lane_unpack),
                  model: lanes!(K q2_k_lanes_model, q2_k_lane_unpack),
                  avx2: Some(lanes!(K q2_k_lanes_avx2, q2_k_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q3_K, vnni: lanes!(K q3_k_lanes, q3_k_lane_unpack),
                  model: lanes!(K q3_k_lanes_model, q3_k_lane_unpack),
                  avx2: Some(lanes!(K q3_k_lanes_avx2, q3_k_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q4_K, vnni: lanes!(K q4_k_lanes, q4_k_lane_unpack),
                  model: lanes!(K q4_k_lanes_model, q4_k_lane_unpack),
                  avx2: Some(lanes!(K q4_k_lanes_avx2, q4_k_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q5_K, vnni: lanes!(K q5_k_lanes, q5_k_lane_unpack),
                  model: lanes!(K q5_k_lanes_model, q5_k_lane_unpack),
                  avx2: Some(lanes!(K q5_k_lanes_avx2, q5_k_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q6_K, vnni: lanes!(K q6_k_lanes, q6_k_lane_unpack),
                  model: lanes!(K q6_k_lanes_model, q6_k_lane_unpack),
                  avx2: Some(lanes!(K q6_k_lanes_avx2, q6_k_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q4_0, vnni: lanes!(q4_0_lanes, q4_0_lane_unpack),
                  model: lanes!(q4_0_lanes_model, q4_0_lane_unpack),
                  avx2: Some(lanes!(q4_0_lanes_avx2, q4_0_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q4_1, vnni: lanes!(q4_1_lanes, q4_1_lane_unpack),
                  model: lanes!(q4_1_lanes_model, q4_1_lane_unpack),
                  avx2: Some(lanes!(q4_1_lanes_avx2, q4_1_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q5_0, vnni: lanes!(q5_0_lanes, q5_0_lane_unpack),
                  model: lanes!(q5_0_lanes_model, q5_0_lane_unpack),
                  avx2: Some(lanes!(q5_0_lanes_avx2, q5_0_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q5_1, vnni: lanes!(q5_1_lanes, q5_1_lane_unpack),
                  model: lanes!(q5_1_lanes_model, q5_1_lane_unpack),
                  avx2: Some(lanes!(q5_1_lanes_avx2, q5_1_lane_unpack)) },
    LaneKernels { ty: GgmlType::Q8_0, vnni: lanes!(q8_0_lanes, q8_0_lane_unpack),
                  model: lanes!(q8_0_lanes_model, q8_0_lane_unpack), avx2: None },
];

/// `ty`'s row of [`LANE_KERNELS`] where this cpu has `tier`.
fn lane_kernels(ty: GgmlType, tier: fn() -> bool) -> Option<&'static LaneKernels> {
    LANE_KERNELS.iter().find(|k| k.ty == ty).filter(|_| tier())
}

/// The lane kernels: VNNI where [`has_vnni`], else the AVX2 ones.
pub(super) fn lanes(ty: GgmlType) -> Option<Lanes> {
    match lane_kernels(ty, has_vnni) {
        Some(k) => Some(k.vnni),
        None => lanes_avx2(ty),
    }
}

/// The AVX2 lane kernels (not Q8_0); `None` unless [`has_avx2`].
pub(super) fn lanes_avx2(ty: GgmlType) -> Option<Lanes> {
    lane_kernels(ty, has_avx2).and_then(|k| k.avx2)
}

/// [`lanes`] of a VNNI cpu with `vpdpbusd` modelled (AVX2 only).
pub(super) fn lanes_model(ty: GgmlType) -> Option<Lanes> {
    lane_kernels(ty, has_avx2).map(|k| k.model)
}
