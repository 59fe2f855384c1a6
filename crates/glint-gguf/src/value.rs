//! Metadata values: one variant per GGUF value type, arrays as typed vectors.

use std::fmt;

/// A GGUF metadata value type id (`enum gguf_type` in ggml).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValueType {
    /// 0
    U8,
    /// 1
    I8,
    /// 2
    U16,
    /// 3
    I16,
    /// 4
    U32,
    /// 5
    I32,
    /// 6
    F32,
    /// 7: one byte, 0 or 1.
    Bool,
    /// 8: `u64` length + UTF-8 bytes.
    String,
    /// 9: `u32` element type, `u64` count, elements.
    Array,
    /// 10
    U64,
    /// 11
    I64,
    /// 12
    F64,
}

/// `(type, id, name, smallest encoding in bytes)`. The smallest encoding is
/// what the reader multiplies a claimed element count by before allocating:
/// an empty string is its 8-byte length, an empty array its 4-byte type plus
/// 8-byte count.
const VALUE_TYPES: &[(ValueType, u32, &str, u64)] = &[
    (ValueType::U8, 0, "u8", 1),
    (ValueType::I8, 1, "i8", 1),
    (ValueType::U16, 2, "u16", 2),
    (ValueType::I16, 3, "i16", 2),
    (ValueType::U32, 4, "u32", 4),
    (ValueType::I32, 5, "i32", 4),
    (ValueType::F32, 6, "f32", 4),
    (ValueType::Bool, 7, "bool", 1),
    (ValueType::String, 8, "string", 8),
    (ValueType::Array, 9, "array", 12),
    (ValueType::U64, 10, "u64", 8),
    (ValueType::I64, 11, "i64", 8),
    (ValueType::F64, 12, "f64", 8),
];

impl ValueType {
    /// The type with GGUF id `id`.
    pub fn from_id(id: u32) -> Option<ValueType> {
        VALUE_TYPES.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    fn row(self) -> &'static (ValueType, u32, &'static str, u64) {
        // One row per variant (tested), so the fallback is never taken.
        VALUE_TYPES
            .iter()
            .find(|r| r.0 == self)
            .unwrap_or(&VALUE_TYPES[0])
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Lower-case name as used in error messages (`u32`, `string`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Fewest bytes one value of this type takes in a file.
    pub fn min_size(self) -> u64 {
        self.row().3
    }
}

/// One metadata value.
#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    /// `u8`
    U8(u8),
    /// `i8`
    I8(i8),
    /// `u16`
    U16(u16),
    /// `i16`
    I16(i16),
    /// `u32`
    U32(u32),
    /// `i32`
    I32(i32),
    /// `f32`
    F32(f32),
    /// `bool`
    Bool(bool),
    /// `string`
    String(String),
    /// `array`
    Array(Array),
    /// `u64`
    U64(u64),
    /// `i64`
    I64(i64),
    /// `f64`
    F64(f64),
}

/// A metadata array: all elements share one type, so it is one typed vector.
/// Nested arrays hold arrays that may each have their own element type.
#[derive(Clone, PartialEq, Debug)]
pub enum Array {
    /// `u8[]`
    U8(Vec<u8>),
    /// `i8[]`
    I8(Vec<i8>),
    /// `u16[]`
    U16(Vec<u16>),
    /// `i16[]`
    I16(Vec<i16>),
    /// `u32[]`
    U32(Vec<u32>),
    /// `i32[]`
    I32(Vec<i32>),
    /// `f32[]`
    F32(Vec<f32>),
    /// `bool[]`
    Bool(Vec<bool>),
    /// `string[]`, held compactly.
    String(StrArray),
    /// `array[]`
    Array(Vec<Array>),
    /// `u64[]`
    U64(Vec<u64>),
    /// `i64[]`
    I64(Vec<i64>),
    /// `f64[]`
    F64(Vec<f64>),
}

impl Value {
    /// This value's GGUF type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Type description for messages: `u32`, `string`, `array of f32`.
    pub fn type_desc(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.elem_type().name()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The value as an `i128` if it is an integer of any width (bools are
    /// not integers here).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }
}

impl Array {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Short form for `inspect`-style listings: scalars in full, strings quoted,
/// arrays as their type and length.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Array(a) => write!(f, "[{}; {}]", a.elem_type().name(), a.len()),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_table_has_one_row_per_id() {
        for (i, a) in VALUE_TYPES.iter().enumerate() {
            assert_eq!(a.1 as usize, i, "ids are 0..=12 in order");
            assert_eq!(ValueType::from_id(a.1), Some(a.0));
            assert_eq!(a.0.id(), a.1);
        }
        assert_eq!(ValueType::from_id(13), None);
    }
}

/// A string array held compactly: every string's bytes in one buffer and
/// where each ends. A vocabulary of 262144 token texts as `Vec<String>`
/// costs a 24-byte header and a heap allocation a token (about 56 bytes
/// with glibc's malloc, ~14 MiB); here 8 bytes and the text.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StrArray {
    buf: String,
    /// `ends[i]`: the byte of `buf` where string i ends (it starts where
    /// string i - 1 ends, or at 0).
    ends: Vec<usize>,
}

impl StrArray {
    /// An empty array.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty array with room for `n` strings of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Self {
        StrArray {
            buf: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    /// Append `s`.
    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
        self.ends.push(self.buf.len());
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.buf[start..end])
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| &self[i])
    }

    /// The strings, each its own `String`.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }

    /// The text bytes of all the strings.
    pub fn text_bytes(&self) -> usize {
        self.buf.len()
    }
}

impl std::ops::Index<usize> for StrArray {
    type Output = str;

    /// String `i`; panics past the end, as a slice does.
    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(s) => s,
            None => panic!("index {i} out of a string array of {}", self.len()),
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for StrArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut a = StrArray::new();
        for s in iter {
            a.push(s.as_ref());
        }
        a
    }
}

impl From<Vec<String>> for StrArray {
    fn from(v: Vec<String>) -> Self {
        v.iter().collect()
    }
}

impl<const N: usize> From<[&str; N]> for StrArray {
    fn from(v: [&str; N]) -> Self {
        v.iter().collect()
    }
}

impl std::fmt::Debug for StrArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod str_array_tests {
    use super::StrArray;

    #[test]
    fn strings_come_back_by_index_empty_ones_too() {
        let a: StrArray = ["", "ab", "", "ü🦙", "c"].into();
        assert_eq!(a.len(), 5);
        assert_eq!(a.text_bytes(), 2 + "ü🦙".len() + 1);
        assert_eq!(a.iter().collect::<Vec<_>>(), ["", "ab", "", "ü🦙", "c"]);
        assert_eq!(
            (a.get(0), a.get(3), a.get(5)),
            (Some(""), Some("ü🦙"), None)
        );
        assert_eq!(&a[4], "c");
        assert_eq!(a.to_vec(), vec!["", "ab", "", "ü🦙", "c"]);
        assert_eq!(StrArray::from(a.to_vec()), a);
        assert!(StrArray::new().is_empty() && StrArray::new().get(0).is_none());
        assert_eq!(format!("{a:?}"), r#"["", "ab", "", "ü🦙", "c"]"#);
    }
}
