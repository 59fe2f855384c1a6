//! x86_64: runtime detection of each tier and the safe entries to its kernels.

#![allow(unsafe_code)]

use super::*;
use std::sync::OnceLock;

pub(super) fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    })
}

/// Only called after [`has_avx2`] said yes.
pub(super) fn dot(ty: GgmlType) -> Option<DotFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => q4_0_q8_0,
        T::Q4_1 => q4_1_q8_1,
        T::Q5_0 => q5_0_q8_0,
        T::Q5_1 => q5_1_q8_1,
        T::Q8_0 => q8_0_q8_0,
        T::Q4_K => q4_k_q8_k,
        T::Q5_K => q5_k_q8_k,
        T::Q6_K => q6_k_q8_k,
        _ => return None,
    })
}

pub(super) fn has_vnni() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        has_avx2()
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
    })
}

/// Only called after [`has_vnni`] said yes.
pub(super) fn tile(ty: GgmlType) -> Option<TileFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => q4_0_tile,
        T::Q4_1 => q4_1_tile,
        T::Q5_0 => q5_0_tile,
        T::Q5_1 => q5_1_tile,
        T::Q8_0 => q8_0_tile,
        _ => return None,
    })
}

/// Only called after [`has_vnni`] said yes.
pub(super) fn prepare(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn tf(ty: GgmlType, act: &[u8], out: &mut [u8]) {
        avx512::prepare(ty, act, out)
    }
    // SAFETY: reachable only after `has_vnni()`.
    unsafe { tf(ty, act, out) }
}

macro_rules! entry_tile {
    ($name:ident, $body:path) => {
        fn $name(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            fn tf(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE] {
                $body(xs, ys)
            }
            // SAFETY: reachable only through `tile`, after `has_vnni()`.
            unsafe { tf(xs, ys) }
        }
    };
}
entry_tile!(q4_0_tile, avx512::q4_0_tile);

macro_rules! entry_cols_vnni {
    ($name:ident, $body:path) => {
        fn $name(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            fn tf(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                $body(x, ys)
            }
            // SAFETY: reachable only through `dot_cols`, after `has_vnni()`.
            unsafe { tf(x, ys) }
        }
    };
}
entry_cols_vnni!(q4_k_cols_vnni, avx512::q4_k_cols_vnni);
entry_cols_vnni!(q6_k_cols_vnni, avx512::q6_k_cols_vnni);
entry_tile!(q4_1_tile, avx512::q4_1_tile);
entry_tile!(q5_0_tile, avx512::q5_0_tile);
entry_tile!(q5_1_tile, avx512::q5_1_tile);
entry_tile!(q8_0_tile, avx512::q8_0_tile);

/// Only called after [`has_avx2`] said yes.
pub(super) fn dot_cols(ty: GgmlType) -> Option<DotColsFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_K if has_vnni() => q4_k_cols_vnni,
        T::Q6_K if has_vnni() => q6_k_cols_vnni,
        _ => return dot_cols_avx2(ty),
    })
}

/// Only called after [`has_avx2`] said yes.
pub(super) fn dot_cols_avx2(ty: GgmlType) -> Option<DotColsFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => q4_0_cols,
        T::Q4_1 => q4_1_cols,
        T::Q5_0 => q5_0_cols,
        T::Q5_1 => q5_1_cols,
        T::Q8_0 => q8_0_cols,
        T::Q4_K => q4_k_cols,
        T::Q6_K => q6_k_cols,
        _ => return None,
    })
}

/// As `entry!`, for the multi-column kernels (handed out by `dot_cols`).
macro_rules! entry_cols {
    ($name:ident, $body:path) => {
        fn $name(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn tf(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS] {
                $body(x, ys)
            }
            // SAFETY: reachable only through `dot_cols`, after `has_avx2()`.
            unsafe { tf(x, ys) }
        }
    };
}
entry_cols!(q4_0_cols, avx2::q4_0_cols);
entry_cols!(q4_1_cols, avx2::q4_1_cols);
entry_cols!(q5_0_cols, avx2::q5_0_cols);
entry_cols!(q5_1_cols, avx2::q5_1_cols);
entry_cols!(q8_0_cols, avx2::q8_0_cols);
entry_cols!(q4_k_cols, avx2::q4_k_cols);
entry_cols!(q6_k_cols, avx2::q6_k_cols);

/// A safe entry for each AVX2 kernel; they are handed out only by
/// [`dot`], which runs only after [`has_avx2`] confirmed AVX2 and FMA.
macro_rules! entry {
    ($name:ident, $body:path) => {
        fn $name(x: &[u8], y: &[u8]) -> f32 {
            #[target_feature(enable = "avx2,fma,f16c")]
            fn tf(x: &[u8], y: &[u8]) -> f32 {
                $body(x, y)
            }
            // SAFETY: reachable only through `dot`, after `has_avx2()`.
            unsafe { tf(x, y) }
        }
    };
}
entry!(q4_0_q8_0, avx2::q4_0_q8_0);
entry!(q4_1_q8_1, avx2::q4_1_q8_1);
entry!(q5_0_q8_0, avx2::q5_0_q8_0);
entry!(q5_1_q8_1, avx2::q5_1_q8_1);
entry!(q8_0_q8_0, avx2::q8_0_q8_0);
entry!(q4_k_q8_k, avx2::q4_k_q8_k);
entry!(q5_k_q8_k, avx2::q5_k_q8_k);
entry!(q6_k_q8_k, avx2::q6_k_q8_k);
