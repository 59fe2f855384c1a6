//! The one table of GGML tensor types. Everything that needs a fact about a
//! type (the GGUF reader sizing tensors, the kernels, the tests) iterates or
//! indexes [`TYPES`]; nothing else hard-codes block sizes.

/// A GGML tensor element type, by its GGUF type id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// What glint can do with a type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Support {
    /// Dequantize, dot products and compute kernels on both backends.
    Compute,
    /// Activation-side format only (quantized activations for integer dots,
    /// quantized KV): dequantize and quantize, never a weight type.
    Activation,
    /// Sized and listed (a GGUF holding it opens and `inspect` shows it),
    /// but no kernels: loading a model that needs it is an error naming it.
    SizeOnly,
}

/// One row of the type table.
#[derive(Clone, Copy, Debug)]
pub struct TypeInfo {
    pub ty: GgmlType,
    /// The id stored in GGUF tensor infos (ggml's `enum ggml_type`).
    pub id: u32,
    /// ggml's spelling, as `gguf-dump` prints it.
    pub name: &'static str,
    /// Elements per block.
    pub block_size: usize,
    /// Bytes per block.
    pub type_size: usize,
    pub support: Support,
    /// The activation format ggml pairs with this weight type in its integer
    /// dot product (`type_traits_cpu[ty].vec_dot_type`), except that the
    /// float types take f32 activations here. Meaningful for Compute types;
    /// other rows carry ggml's choice or the type itself.
    pub vec_dot_type: GgmlType,
    /// The WGSL file (under the top-level `shaders/`) defining `dequant1`
    /// and `dequant4` for rows of this type: every Compute type has one, and
    /// the wgpu backend picks its weight kernels by it (with the block size
    /// and bytes per block above, injected as WGSL constants).
    pub wgsl: Option<&'static str>,
}

use GgmlType as T;
use Support::{Activation as A, Compute as C, SizeOnly as S};

// One argument per column of the table.
#[allow(clippy::too_many_arguments)]
const fn row(
    ty: GgmlType,
    id: u32,
    name: &'static str,
    bs: usize,
    ts: usize,
    s: Support,
    vdt: GgmlType,
    wgsl: Option<&'static str>,
) -> TypeInfo {
    TypeInfo {
        ty,
        id,
        name,
        block_size: bs,
        type_size: ts,
        support: s,
        vec_dot_type: vdt,
        wgsl,
    }
}

/// Every type glint knows, in id order. Block sizes and bytes per block are
/// ggml's C `type_traits` (`sizeof(block_*)`). Note: Q8_1 is 36 bytes
/// (`{f16 d; f16 s; i8 qs[32]}`); gguf-py's `GGML_QUANT_SIZES` still says 40
/// from the days `d` and `s` were f32.
#[rustfmt::skip]
pub const TYPES: &[TypeInfo] = &[
    row(T::F32, 0, "F32", 1, 4, C, T::F32, Some("quant/f32.wgsl")),
    row(T::F16, 1, "F16", 1, 2, C, T::F32, Some("quant/f16.wgsl")),
    row(T::Q4_0, 2, "Q4_0", 32, 18, C, T::Q8_0, Some("quant/q4_0.wgsl")),
    row(T::Q4_1, 3, "Q4_1", 32, 20, C, T::Q8_1, Some("quant/q4_1.wgsl")),
    row(T::Q5_0, 6, "Q5_0", 32, 22, C, T::Q8_0, Some("quant/q5_0.wgsl")),
    row(T::Q5_1, 7, "Q5_1", 32, 24, C, T::Q8_1, Some("quant/q5_1.wgsl")),
    row(T::Q8_0, 8, "Q8_0", 32, 34, C, T::Q8_0, Some("quant/q8_0.wgsl")),
    row(T::Q8_1, 9, "Q8_1", 32, 36, A, T::Q8_1, None),
    row(T::Q2_K, 10, "Q2_K", 256, 84, C, T::Q8_K, Some("quant/q2_k.wgsl")),
    row(T::Q3_K, 11, "Q3_K", 256, 110, C, T::Q8_K, Some("quant/q3_k.wgsl")),
    row(T::Q4_K, 12, "Q4_K", 256, 144, C, T::Q8_K, Some("quant/q4_k.wgsl")),
    row(T::Q5_K, 13, "Q5_K", 256, 176, C, T::Q8_K, Some("quant/q5_k.wgsl")),
    row(T::Q6_K, 14, "Q6_K", 256, 210, C, T::Q8_K, Some("quant/q6_k.wgsl")),
    row(T::Q8_K, 15, "Q8_K", 256, 292, A, T::Q8_K, None),
    row(T::IQ2_XXS, 16, "IQ2_XXS", 256, 66, S, T::Q8_K, None),
    row(T::IQ2_XS, 17, "IQ2_XS", 256, 74, S, T::Q8_K, None),
    row(T::IQ3_XXS, 18, "IQ3_XXS", 256, 98, S, T::Q8_K, None),
    row(T::IQ1_S, 19, "IQ1_S", 256, 50, S, T::Q8_K, None),
    row(T::IQ4_NL, 20, "IQ4_NL", 32, 18, S, T::Q8_0, None),
    row(T::IQ3_S, 21, "IQ3_S", 256, 110, S, T::Q8_K, None),
    row(T::IQ2_S, 22, "IQ2_S", 256, 82, S, T::Q8_K, None),
    row(T::IQ4_XS, 23, "IQ4_XS", 256, 136, S, T::Q8_K, None),
    row(T::I8, 24, "I8", 1, 1, S, T::I8, None),
    row(T::I16, 25, "I16", 1, 2, S, T::I16, None),
    row(T::I32, 26, "I32", 1, 4, S, T::I32, None),
    row(T::I64, 27, "I64", 1, 8, S, T::I64, None),
    row(T::F64, 28, "F64", 1, 8, S, T::F64, None),
    row(T::IQ1_M, 29, "IQ1_M", 256, 56, S, T::Q8_K, None),
    row(T::BF16, 30, "BF16", 1, 2, C, T::F32, Some("quant/bf16.wgsl")),
    row(T::TQ1_0, 34, "TQ1_0", 256, 54, S, T::Q8_K, None),
    row(T::TQ2_0, 35, "TQ2_0", 256, 66, S, T::Q8_K, None),
    row(T::MXFP4, 39, "MXFP4", 32, 17, S, T::Q8_0, None),
];

impl GgmlType {
    /// The type with GGUF id `id`, or `None` for an id glint does not know.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().find(|r| r.id == id).map(|r| r.ty)
    }

    /// The type named `name` (ggml spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TYPES
            .iter()
            .find(|r| r.name.eq_ignore_ascii_case(name))
            .map(|r| r.ty)
    }

    /// This type's table row.
    pub fn info(self) -> &'static TypeInfo {
        // The table has exactly one row per variant (tested), so this finds one.
        TYPES.iter().find(|r| r.ty == self).unwrap_or(&TYPES[0])
    }

    pub fn id(self) -> u32 {
        self.info().id
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn block_size(self) -> usize {
        self.info().block_size
    }

    pub fn type_size(self) -> usize {
        self.info().type_size
    }

    pub fn support(self) -> Support {
        self.info().support
    }

    /// The activation format [`crate::vec_dot`] takes with a row of this type.
    pub fn vec_dot_type(self) -> GgmlType {
        self.info().vec_dot_type
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of
    /// blocks or the size overflows `u64`.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_one_row_per_id_and_name() {
        for (i, a) in TYPES.iter().enumerate() {
            for b in &TYPES[i + 1..] {
                assert_ne!(a.id, b.id, "{} and {} share an id", a.name, b.name);
                assert_ne!(a.ty, b.ty);
                assert_ne!(a.name, b.name);
            }
            assert_eq!(GgmlType::from_id(a.id), Some(a.ty));
            assert_eq!(GgmlType::from_name(a.name), Some(a.ty));
            assert_eq!(a.ty.info().id, a.id);
            assert_eq!(
                a.wgsl.is_some(),
                a.support == Support::Compute,
                "{}: a WGSL file exactly for the Compute types",
                a.name
            );
        }
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was removed from ggml");
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn bytes_for_checks_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
        assert_eq!(GgmlType::Q6_K.bytes_for(512), Some(420));
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
