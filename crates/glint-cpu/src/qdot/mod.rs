//! Fast integer dots of one quantized weight row with one row of quantized
//! activations: the same numbers as `glint_quant::vec_dot` (ggml's
//! `ggml_vec_dot_*_generic`), computed whole blocks at a time, for every
//! quantized weight type glint computes with (Q4_0..Q8_0, Q2_K..Q6_K).
//!
//! Each type has a plain twin ([`plain_dot`]) written over fixed-size block
//! arrays so the compiler can vectorize it without bounds checks, and — on
//! x86_64 with AVX2, FMA and F16C, detected once at run time — an AVX2
//! version ([`avx2_dot`]). The plain kernels keep ggml's integer sums and
//! ggml's float operations in ggml's order, so they agree bit for bit with
//! `glint_quant::vec_dot`. The AVX2 Q2_K, Q3_K and Q5_K kernels are the
//! plain ones compiled for AVX2 (also bit-exact); the other AVX2 kernels are ggml's own AVX2
//! loops, with exact integer sums but f32 lanes summed in a different order,
//! so they differ by rounding only. The tests hold every kernel to the
//! reference with a tolerance named per type. [`fast_dot_cols`] is the
//! multi-column variant: one weight row against several activation columns.
//! [`fast_dot_prepared`] is the one-column dot of AVX-512 VNNI cpus, on a
//! column prepared once ([`prepare_tile_col`]) for every row of a product.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the public entry points: which kernel a type gets on this cpu |
//! | `plain.rs` | the plain twins, portable, bit-exact with ggml's reference |
//! | `simd.rs` | x86_64: run-time detection of each tier, the safe entries |
//! | `no_simd.rs` | `simd.rs` elsewhere: no tier, no kernel |
//! | `shared.rs` | x86_64: vector helpers both tiers use (loads, nibbles, sums) |
//! | `avx2.rs` | the AVX2 (+FMA, F16C) kernels: one column and [`COLS`] columns |
//! | `avx512.rs` | the AVX-512 VNNI kernels: prefill tiles, decode rows, `vpdpwssd` K-quants |
//! | `lanes.rs` | x86_64: the lane kernels, rows interleaved in the lanes (prefill) |
//! | `emulated.rs` | the VNNI tier on any AVX2 cpu: its instructions modelled |
//!
//! Callers guarantee that `x` and `y` hold the same number of whole blocks
//! (`mul_mat_ggml` checks the row lengths once per call). A short row is
//! never read out of bounds: the AVX2 and plain one-column kernels truncate
//! it, the prepared one-column, multi-column and tile kernels panic on the
//! bounds-checked slice.

use glint_backend::GgmlType;
use glint_quant::kquants::get_scale_min_k4;
use half::f16;

/// A dot of one weight row (`x`) with one activation row (`y`, the weight
/// type's `vec_dot_type`; for the kernels of [`fast_dot_prepared`], that
/// row prepared by [`prepare_tile_col`]).
pub type DotFn = fn(&[u8], &[u8]) -> f32;

/// One weight row dotted with `N` activation rows at once (prefill, and
/// decode of several sequences): the weight block is unpacked once for all
/// of them. Each column's result is what [`avx2_dot`] gives for it, bit for
/// bit (the 32-element types and Q4_K: one accumulator, the blocks in
/// order); Q6_K's takes the `- 32` out through the block sums, so its lanes
/// round otherwise (f32 rounding).
pub type DotColsFn<const N: usize = COLS> = fn(&[u8], [&[u8]; N]) -> [f32; N];

/// `out[r]` = weight row `r` of `w` (consecutive rows of `row_bytes`) ·
/// one activation column (decode): [`ROWS`] rows at a time read each
/// block of the column once, and each row's result is its one-row
/// kernel's, bit for bit — [`fast_dot_prepared`]'s on a column prepared
/// by [`prepare_tile_col`] ([`fast_dot_prepared_rows`]), [`fast_dot`]'s
/// on the quantized column ([`fast_dot_rows`]).
pub type DotRowsFn = fn(&[u8], usize, &[u8], &mut [f32]);

/// Weight rows a [`DotRowsFn`] takes at a time.
pub const ROWS: usize = 4;

/// Activation columns per full-width [`DotColsFn`] call.
pub const COLS: usize = 4;

/// One type's multi-column kernel at each width: [`COLS`] columns, and two
/// or three for the columns a product of a few has left over (a batch of
/// 2, 3, 6 or 7 sequences decoding together). Every column's arithmetic is
/// its own, so column `c`'s result is the same, bit for bit, at every width
/// (the tests hold them equal).
#[derive(Clone, Copy, Debug)]
pub struct DotCols {
    pub two: DotColsFn<2>,
    pub three: DotColsFn<3>,
    pub four: DotColsFn<COLS>,
}

/// The multi-column kernels for `ty` on this cpu, or `None`: use
/// [`fast_dot`] once per column.
pub fn fast_dot_cols(ty: GgmlType) -> Option<DotCols> {
    simd::dot_cols(ty)
}

/// The AVX2-only multi-column kernels (no VNNI), or `None` where the cpu
/// lacks AVX2: what [`fast_dot_cols`] gives on AVX2 cpus without AVX-512
/// VNNI (the tests hold the two equal).
pub fn avx2_dot_cols(ty: GgmlType) -> Option<DotCols> {
    simd::dot_cols_avx2(ty)
}

/// Weight rows, and the most activation columns, of one [`TileFn`] call.
pub const TILE: usize = 4;

/// Bytes of one prepared activation block ([`prepare_tile_col`]):
/// levels `[i8; 32]`, `init: [i32; 8]`, `dy: f32`, `sy: f32`, and
/// `init`'s sum (i32, for the lane kernels).
pub const TILE_BLOCK: usize = 76;

/// [`TILE`] weight rows against `N` prepared activation columns:
/// `out[r][c]`. Each result is bit-identical to [`fast_dot_cols`]'s.
pub type TileFn<const N: usize = TILE> = fn([&[u8]; TILE], [&[u8]; N]) -> [[f32; N]; TILE];

/// Bytes of one block of [`TILE`] weight rows unpacked by a [`Tiles`]'
/// `unpack`: each row's unsigned levels (`[u8; 32]`), then each row's `d`,
/// then each row's `m` (f32).
pub const PRE_BLOCK: usize = TILE * 40;

/// [`TileFn`] on [`TILE`] weight rows unpacked once by `unpack`
/// ([`PRE_BLOCK`] bytes a block): the same results, bit for bit.
pub type PreTileFn<const N: usize = TILE> = fn(&[u8], [&[u8]; N]) -> [[f32; N]; TILE];

/// One type's tile kernel at each column count, as [`DotCols`]: [`TILE`]
/// columns, and two or three for the columns left over; and the same on
/// rows unpacked once (`unpack`, then `pre_*`), so that a prefill's many
/// column groups pass over a tile without unpacking its blocks again.
#[derive(Clone, Copy, Debug)]
pub struct Tiles {
    pub two: TileFn<2>,
    pub three: TileFn<3>,
    pub four: TileFn<TILE>,
    /// [`TILE`] rows into [`PRE_BLOCK`] bytes a block.
    pub unpack: fn([&[u8]; TILE], &mut [u8]),
    pub pre_two: PreTileFn<2>,
    pub pre_three: PreTileFn<3>,
    pub pre_four: PreTileFn<TILE>,
}

/// Weight rows of one [`LaneFn`] call: one per i32 lane of a 256-bit vector.
pub const LANES: usize = 8;

/// Bytes of one block of [`LANES`] weight rows unpacked by a [`Lanes`]'
/// `unpack`: the rows' unsigned levels as eight groups of four bytes
/// (`[[u8; 4]; LANES]` each, rows in lane order), then each row's `d`,
/// then each row's `m` (f32; zeros for the types without one).
pub const LANE_BLOCK: usize = LANES * 40;

/// Bytes of one K-quant super-block (256 elements) of [`LANES`] weight
/// rows unpacked by a [`Lanes`]' `unpack`: levels `[64][LANES][4]` u8,
/// scales `[16][LANES]` i32, pairs of mins (or Q3_K's and Q6_K's scales)
/// `[8][LANES]` i32, `d` and `dmin` `[LANES]` f32.
pub const K_LANE_BLOCK: usize = 2048 + 16 * 32 + 8 * 32 + 2 * 32;

/// [`LANES`] weight rows unpacked once (`Lanes::unpack`, whole blocks)
/// against `N` columns (prepared by [`prepare_tile_col`], or the Q8_K
/// activations for the K-quants): `out[c][r]`.
pub type LaneFn<const N: usize = COLS> = fn(&[u8], [&[u8]; N]) -> [[f32; LANES]; N];

/// One type's lane kernels at each column count (one to [`COLS`]) and
/// the unpacking of [`LANES`] rows they read. Every row's and column's
/// arithmetic is its own: a result does not depend on the width, the
/// other columns, or the other rows.
#[derive(Clone, Copy, Debug)]
pub struct Lanes {
    /// [`LANES`] rows into `block_bytes` a weight block.
    pub unpack: fn([&[u8]; LANES], &mut [u8]),
    /// Bytes of one weight block of [`LANES`] rows unpacked:
    /// [`LANE_BLOCK`], or [`K_LANE_BLOCK`] for the K-quants.
    pub block_bytes: usize,
    /// Whether the kernels read columns prepared by [`prepare_tile_col`]
    /// (the 32-element types), or the quantized activations as they are
    /// (Q8_K: the K-quants).
    pub prepared: bool,
    pub one: LaneFn<1>,
    pub two: LaneFn<2>,
    pub three: LaneFn<3>,
    pub four: LaneFn<COLS>,
}

/// The lane kernels for `ty` (prefill: `mul_mat_ggml` takes them from
/// `AMX_MIN_M` columns): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K..Q6_K
/// where the cpu has AVX-512 VNNI (with VL and BW); the same but Q8_0
/// where it has AVX2 (`vpdpbusd` as `maddubs` + `madd`, exact for levels
/// up to 63; Q8_0's `x + 128` reach 255); else `None`.
///
/// Each weight row's unsigned levels (`x + off`, see [`fast_tile`]; Q3_K's
/// and Q6_K's offsets of 4 and 32 come off through the activations'
/// `bsums`) sit in one i32 lane, [`LANES`] rows a vector, so a block's
/// `vpdpbusd` leave each lane its row's exact block (or sub-block) sum,
/// and one convert and the block's float steps serve all the rows. The
/// 32-element types' and Q2_K's float steps are ggml's reference loop's,
/// in its order, so each result is [`plain_dot`]'s bit for bit; Q3_K's to
/// Q6_K's take exact super-block sums where ggml adds eight f32 lanes, the
/// AMX tiles' numbers (rounding).
pub fn fast_lanes(ty: GgmlType) -> Option<Lanes> {
    simd::lanes(ty)
}

/// The AVX2 lane kernels (all of [`fast_lanes`]' types but Q8_0), or
/// `None` where the cpu lacks AVX2: what [`fast_lanes`] gives on AVX2
/// cpus without VNNI.
pub fn avx2_lanes(ty: GgmlType) -> Option<Lanes> {
    simd::lanes_avx2(ty)
}

/// The tile kernels for `ty` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) where the
/// cpu has AVX-512 VNNI (with VL and BW); else, where it has AVX2, those
/// of [`avx2_tile`] (Q4_0, Q5_0); else `None`.
///
/// The weight levels are made unsigned (`x + off`: 8, 16 or 128; 0 for the
/// types with a min) and meet the activation levels in `vpdpbusd`, which
/// sums four u8·i8 products into each i32 lane exactly; the lanes start at
/// `init = -off * (the sum of the lane's four activation levels)`, so each
/// lane ends at exactly the `sum(x * y)` of the AVX2 kernels' `maddubs` +
/// `madd`, and the float steps after it are theirs.
pub fn fast_tile(ty: GgmlType) -> Option<Tiles> {
    simd::tile(ty)
}

/// The AVX2 tile kernels for `ty` (Q4_0, Q5_0), or `None` where the cpu
/// lacks AVX2: [`fast_tile`]'s arithmetic with `vpdpbusd` as `maddubs` +
/// `madd` + `add` (exact for these operands; not for Q8_0, whose unsigned
/// levels reach 255 and would saturate `maddubs`). Q4_1 and Q5_1 have one
/// too on VNNI cpus but not here: their multi-column kernels measured
/// faster on AVX2. What [`fast_tile`] gives on AVX2 cpus without VNNI; the
/// tests hold it to the multi-column kernels bit for bit.
pub fn avx2_tile(ty: GgmlType) -> Option<Tiles> {
    simd::tile_avx2(ty)
}

/// [`prepare_tile_col`] for [`avx2_tile`]'s and [`avx2_lanes`]' kernels
/// (the same bytes as the VNNI preparation). Does nothing where neither
/// has a kernel.
pub fn prepare_tile_col_avx2(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    simd::prepare_tile_col_avx2(ty, act, out)
}

/// One activation column (Q8_0 blocks for Q4_0/Q5_0/Q8_0 weights, Q8_1 for
/// Q4_1/Q5_1) prepared for [`fast_tile`]'s, [`fast_lanes`]' or
/// [`fast_dot_prepared`]'s kernel of `ty` (the same bytes for each): `out`
/// is [`TILE_BLOCK`] bytes per block. It does nothing for the types whose
/// kernels read no prepared column.
pub fn prepare_tile_col(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    simd::prepare_tile_col(ty, act, out)
}

/// The one-column kernel of `ty` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) on a
/// column prepared by [`prepare_tile_col`] (not the raw activation row),
/// where the cpu has AVX-512 VNNI (with VL and BW); else `None`: use
/// [`fast_dot`]. A decode step's products: each block's lanes come from
/// one `vpdpbusd` of the unsigned weight levels and the column's `init`
/// (see [`fast_tile`]), where the AVX2 kernel takes `sign`, `maddubs` and
/// `madd`; the float steps are the AVX2 kernel's, so each result is
/// [`avx2_dot`]'s, bit for bit (the tests hold them equal).
pub fn fast_dot_prepared(ty: GgmlType) -> Option<DotFn> {
    simd::dot_prepared(ty)
}

/// [`fast_dot`] over consecutive rows, where the type has that (on AVX2,
/// every type but Q2_K, Q3_K and Q5_K): [`ROWS`] rows per read of the
/// column, each row's result [`fast_dot`]'s, bit for bit. The decode
/// loop's kernel where the column is not prepared for VNNI.
pub fn fast_dot_rows(ty: GgmlType) -> Option<DotRowsFn> {
    simd::dot_rows(ty)
}

/// [`fast_dot_prepared`] over consecutive rows (the same types and cpus):
/// the decode loop's kernel, [`ROWS`] rows per read of the column.
pub fn fast_dot_prepared_rows(ty: GgmlType) -> Option<DotRowsFn> {
    simd::dot_prepared_rows(ty)
}

/// How far up the x86 tiers the kernels may go: what the cpu has, capped
/// by `GLINT_CPU_TIER` (`native`, the default; `avx2`: no AVX-512, VNNI or
/// AMX, what an AVX2-only cpu runs; `plain`: no SIMD kernels at all). A
/// cap lets one machine run, test and time a tier below its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// The plain loops only.
    Plain,
    /// AVX2, FMA and F16C at most.
    Avx2,
    /// Everything the cpu has.
    Native,
}

/// The environment variable that caps the tier.
pub const TIER_VAR: &str = "GLINT_CPU_TIER";

/// The cap `GLINT_CPU_TIER` sets (read once), or why its value is not one.
pub fn tier_cap() -> Result<Tier, String> {
    static CAP: std::sync::OnceLock<Result<Tier, String>> = std::sync::OnceLock::new();
    CAP.get_or_init(|| match std::env::var_os(TIER_VAR) {
        None => Ok(Tier::Native),
        Some(v) => match v.to_str() {
            Some("native") | Some("") => Ok(Tier::Native),
            Some("avx2") => Ok(Tier::Avx2),
            Some("plain") => Ok(Tier::Plain),
            _ => Err(format!(
                "{TIER_VAR}={}: expected native, avx2 or plain",
                v.to_string_lossy()
            )),
        },
    })
    .clone()
}

/// Whether the cap allows `tier` (an unreadable value allows everything:
/// [`crate::CpuBackend::new`] refuses to start with one).
pub(crate) fn allows(tier: Tier) -> bool {
    tier_cap().unwrap_or(Tier::Native) >= tier
}

/// Whether this cpu has AVX2, FMA and F16C (detected once).
pub(crate) fn has_avx2() -> bool {
    simd::has_avx2()
}

/// Whether this cpu has the AVX2 tier and AVX-512 F and DQ (detected once):
/// the 512-bit float kernels of attention.
pub(crate) fn has_avx512() -> bool {
    simd::has_avx512()
}

/// The fastest dot for `ty` on this cpu, or `None`: use `glint_quant::vec_dot`.
pub fn fast_dot(ty: GgmlType) -> Option<DotFn> {
    avx2_dot(ty).or_else(|| plain_dot(ty))
}

/// The portable kernels.
pub fn plain_dot(ty: GgmlType) -> Option<DotFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => plain::q4_0_q8_0,
        T::Q4_1 => plain::q4_1_q8_1,
        T::Q5_0 => plain::q5_0_q8_0,
        T::Q5_1 => plain::q5_1_q8_1,
        T::Q8_0 => plain::q8_0_q8_0,
        T::Q2_K => plain::q2_k_q8_k,
        T::Q3_K => plain::q3_k_q8_k,
        T::Q4_K => plain::q4_k_q8_k,
        T::Q5_K => plain::q5_k_q8_k,
        T::Q6_K => plain::q6_k_q8_k,
        _ => return None,
    })
}

/// The AVX2 kernels, or `None` where the cpu lacks AVX2, FMA or F16C (or is not x86_64).
pub fn avx2_dot(ty: GgmlType) -> Option<DotFn> {
    simd::dot(ty)
}

/// The little-endian f16 at `b[at..at + 2]`, as f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline(always)]
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `&b[at..at + N]` as an array: lets the kernels index without bounds checks.
#[inline(always)]
fn arr<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    b[at..at + N].try_into().expect("slice of N bytes")
}

// Block sizes in bytes.
const Q4_0: usize = 18; // d: f16, qs: [u8; 16]
const Q4_1: usize = 20; // d, m: f16, qs: [u8; 16]
const Q5_0: usize = 22; // d: f16, qh: [u8; 4], qs: [u8; 16]
const Q5_1: usize = 24; // d, m: f16, qh: [u8; 4], qs: [u8; 16]
const Q8_0: usize = 34; // d: f16, qs: [i8; 32]
const Q8_1: usize = 36; // d, s: f16, qs: [i8; 32]
const Q2_K: usize = 84; // scales: [u8; 16], qs: [u8; 64], d, dmin: f16
const Q3_K: usize = 110; // hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16
const Q4_K: usize = 144; // d, dmin: f16, scales: [u8; 12], qs: [u8; 128]
const Q5_K: usize = 176; // d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]
const Q6_K: usize = 210; // ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16
const Q8_K: usize = 292; // d: f32, qs: [i8; 256], bsums: [i16; 16]

pub mod emulated;
pub mod plain;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod lanes;
#[cfg(target_arch = "x86_64")]
pub(crate) mod shared;
#[cfg_attr(not(target_arch = "x86_64"), path = "no_simd.rs")]
mod simd;
