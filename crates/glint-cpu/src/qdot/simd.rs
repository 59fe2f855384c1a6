//! x86_64: run-time detection of each tier, and the safe entries to its
//! kernels: the only place the `#[target_feature]` kernels are called from
//! code that does not itself have the features.
//!
//! Every entry is handed out only by a table below (`dot`, `dot_cols`,
//! `tile`, ...), and each table is called only after the detection of its
//! tier said yes (its doc line names which).

#![allow(unsafe_code)]

use super::*;
use std::sync::OnceLock;

/// Whether this cpu has AVX2, FMA and F16C (detected once).
pub(super) fn has_avx2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    })
}

/// Whether this cpu has the AVX2 tier and AVX-512 F, BW, VL and VNNI.
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

/// Safe entries `$name` to the kernels `$body`, compiled for `$features`;
/// `$sig` is their signature, in brackets.
macro_rules! entries {
    ($features:literal, $sig:tt { $($name:ident = $body:path;)* }) => {
        $(entries!(@one $features, $sig, $name, $body);)*
    };
    (@one $features:literal, [fn($($arg:ident: $t:ty),*) $(-> $ret:ty)?], $name:ident, $body:path) => {
        fn $name($($arg: $t),*) $(-> $ret)? {
            #[target_feature(enable = $features)]
            fn tf($($arg: $t),*) $(-> $ret)? {
                $body($($arg),*)
            }
            // SAFETY: `$name` is private to this file, where it is used
            // only by the functions below, each called only after the
            // detection of the tier of `$features` said yes.
            unsafe { tf($($arg),*) }
        }
    };
}

entries!("avx2,fma,f16c", [fn(x: &[u8], y: &[u8]) -> f32] {
    q4_0_q8_0 = avx2::q4_0_q8_0;
    q4_1_q8_1 = avx2::q4_1_q8_1;
    q5_0_q8_0 = avx2::q5_0_q8_0;
    q5_1_q8_1 = avx2::q5_1_q8_1;
    q8_0_q8_0 = avx2::q8_0_q8_0;
    q4_k_q8_k = avx2::q4_k_q8_k;
    q5_k_q8_k = avx2::q5_k_q8_k;
    q6_k_q8_k = avx2::q6_k_q8_k;
});

entries!("avx2,fma,f16c", [fn(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS]] {
    q4_0_cols = avx2::q4_0_cols;
    q4_1_cols = avx2::q4_1_cols;
    q5_0_cols = avx2::q5_0_cols;
    q5_1_cols = avx2::q5_1_cols;
    q8_0_cols = avx2::q8_0_cols;
    q4_k_cols = avx2::q4_k_cols;
    q6_k_cols = avx2::q6_k_cols;
    q4_k_cols_model = avx512::q4_k_cols_model;
    q6_k_cols_model = avx512::q6_k_cols_model;
});

entries!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", [fn(x: &[u8], ys: [&[u8]; COLS]) -> [f32; COLS]] {
    q4_k_cols_vnni = avx512::q4_k_cols_vnni;
    q6_k_cols_vnni = avx512::q6_k_cols_vnni;
});

entries!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", [fn(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE]] {
    q4_0_tile = avx512::q4_0_tile;
    q4_1_tile = avx512::q4_1_tile;
    q5_0_tile = avx512::q5_0_tile;
    q5_1_tile = avx512::q5_1_tile;
    q8_0_tile = avx512::q8_0_tile;
});

entries!("avx2,fma,f16c", [fn(xs: [&[u8]; TILE], ys: [&[u8]; TILE]) -> [[f32; TILE]; TILE]] {
    q4_0_tile_model = avx512::q4_0_tile_model;
    q4_1_tile_model = avx512::q4_1_tile_model;
    q5_0_tile_model = avx512::q5_0_tile_model;
    q5_1_tile_model = avx512::q5_1_tile_model;
    q8_0_tile_model = avx512::q8_0_tile_model;
});

entries!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", [fn(ty: GgmlType, act: &[u8], out: &mut [u8])] {
    prepare_vnni = avx512::prepare;
});

entries!("avx2,fma,f16c", [fn(ty: GgmlType, act: &[u8], out: &mut [u8])] {
    prepare_model_avx2 = avx512::prepare_model;
});

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

/// [`dot_cols`] of a VNNI cpu with `vpdpwssd` modelled (AVX2 only).
/// Only called after [`has_avx2`] said yes.
pub(super) fn dot_cols_model(ty: GgmlType) -> Option<DotColsFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_K => q4_k_cols_model,
        T::Q6_K => q6_k_cols_model,
        _ => return dot_cols_avx2(ty),
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

/// [`tile`] with `vpdpbusd` modelled (AVX2 only).
/// Only called after [`has_avx2`] said yes.
pub(super) fn tile_model(ty: GgmlType) -> Option<TileFn> {
    use GgmlType as T;
    Some(match ty {
        T::Q4_0 => q4_0_tile_model,
        T::Q4_1 => q4_1_tile_model,
        T::Q5_0 => q5_0_tile_model,
        T::Q5_1 => q5_1_tile_model,
        T::Q8_0 => q8_0_tile_model,
        _ => return None,
    })
}

/// Only called after [`has_vnni`] said yes.
pub(super) fn prepare(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    prepare_vnni(ty, act, out)
}

/// [`prepare`] with `vpdpbusd` modelled (AVX2 only).
/// Only called after [`has_avx2`] said yes.
pub(super) fn prepare_model(ty: GgmlType, act: &[u8], out: &mut [u8]) {
    prepare_model_avx2(ty, act, out)
}
