//! `simd.rs` on targets other than x86_64: no tier, so no kernel; the
//! callers fall back to the plain twins.

use super::*;

pub(super) fn has_avx2() -> bool {
    false
}

pub(super) fn has_avx512() -> bool {
    false
}

pub(super) fn dot(_: GgmlType) -> Option<DotFn> {
    None
}

pub(super) fn dot_cols(_: GgmlType) -> Option<DotCols> {
    None
}

pub(super) fn dot_cols_avx2(_: GgmlType) -> Option<DotCols> {
    None
}

pub(super) fn dot_cols_model(_: GgmlType) -> Option<DotCols> {
    None
}

pub(super) fn tile(_: GgmlType) -> Option<Tiles> {
    None
}

pub(super) fn tile_model(_: GgmlType) -> Option<Tiles> {
    None
}

pub(super) fn prepare_tile_col(_: GgmlType, _: &[u8], _: &mut [u8]) {}

pub(super) fn prepare_tile_col_model(_: GgmlType, _: &[u8], _: &mut [u8]) {}

pub(super) fn tile_avx2(_: GgmlType) -> Option<Tiles> {
    None
}

pub(super) fn prepare_tile_col_avx2(_: GgmlType, _: &[u8], _: &mut [u8]) {}

pub(super) fn dot_prepared(_: GgmlType) -> Option<DotFn> {
    None
}

pub(super) fn dot_prepared_model(_: GgmlType) -> Option<DotFn> {
    None
}

pub(super) fn dot_rows(_: GgmlType) -> Option<DotRowsFn> {
    None
}

pub(super) fn dot_prepared_rows(_: GgmlType) -> Option<DotRowsFn> {
    None
}

pub(super) fn dot_prepared_rows_model(_: GgmlType) -> Option<DotRowsFn> {
    None
}

pub(super) fn lanes(_: GgmlType) -> Option<Lanes> {
    None
}

pub(super) fn lanes_avx2(_: GgmlType) -> Option<Lanes> {
    None
}

pub(super) fn lanes_model(_: GgmlType) -> Option<Lanes> {
    None
}
