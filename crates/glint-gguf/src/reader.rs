//! Parsing: header, metadata, tensor infos, and the checks that make the
//! tensor table safe to slice with.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use glint_quant::GgmlType;

use crate::error::{GgufError, Result};
use crate::storage::Storage;
use crate::value::{Array, Value, ValueType};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// Alignment of the data section and of each tensor when the file does not
/// set `general.alignment` (ggml's `GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The key holding the alignment (a `u32`).
pub const KEY_ALIGNMENT: &str = "general.alignment";

// ---- Caps. Each stops a file from making us allocate or loop on a number it
// ---- made up; the length-vs-bytes-remaining checks do most of that work, the
// ---- caps put a sane ceiling under them.

/// Most tensors in one file. The largest MoE GGUFs have a few thousand;
/// 2^20 leaves plenty of room while keeping the tensor table small.
pub const MAX_TENSORS: u64 = 1 << 20;

/// Most metadata pairs. Real files have tens; tokenizer vocabularies are one
/// array each, not one key per token.
pub const MAX_KV: u64 = 1 << 20;

/// Longest metadata key. Keys are dotted identifiers, a few dozen bytes.
pub const MAX_KEY_LEN: u64 = 64 << 10;

/// Longest string value. Chat templates are the longest strings in real
/// files (tens of KiB); 256 MiB refuses absurd lengths before reading them.
pub const MAX_STRING_LEN: u64 = 256 << 20;

/// Deepest array nesting. Real files nest at most 2 levels; a cap keeps a
/// crafted file from recursing the parser into a stack overflow.
pub const MAX_ARRAY_DEPTH: usize = 4;

/// Longest tensor name in bytes: ggml stores names in `char[GGML_MAX_NAME]`
/// with `GGML_MAX_NAME = 64` including the terminating NUL, and gguf.cpp
/// rejects `name.length() >= GGML_MAX_NAME`.
pub const MAX_TENSOR_NAME_LEN: u64 = 63;

/// Most dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// Smallest kv pair: empty key (8-byte length) + type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// Smallest tensor info: empty name (8) + n_dims (4) + one dim (8) + type (4)
/// + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// One tensor's entry in the tensor table, checked: its type is known, its
/// rows are whole blocks, and its bytes lie inside the file without
/// overlapping another tensor's.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Name, at most [`MAX_TENSOR_NAME_LEN`] bytes.
    pub name: String,
    /// Dimensions, innermost first (`ne[0]` is the row length); unused ones are 1.
    pub ne: [u64; 4],
    /// Number of dimensions stored in the file, 1..=4.
    pub n_dims: u32,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Product of `ne`.
    pub n_elements: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
    /// Absolute byte range in the file (checked inside it at parse time).
    range: Range<usize>,
}

impl TensorInfo {
    /// Absolute byte range of this tensor's data in the file — also its range
    /// in [`GgufFile::storage`].
    pub fn byte_range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The dimensions stored in the file (`ne[..n_dims]`).
    pub fn dims(&self) -> &[u64] {
        self.ne.get(..self.n_dims as usize).unwrap_or(&self.ne)
    }
}

/// A parsed GGUF file. Metadata and tensor infos are decoded up front;
/// tensor bytes stay in the map until asked for.
pub struct GgufFile {
    storage: Arc<Storage>,
    parsed: Parsed,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.parsed.version)
            .field("file_size", &self.file_size())
            .field("n_kv", &self.parsed.metadata.items.len())
            .field("n_tensors", &self.parsed.tensors.items.len())
            .finish_non_exhaustive()
    }
}

impl GgufFile {
    /// Memory-maps `path` and parses it. Tensor bytes are not read.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        Self::parse(Storage::map(path.as_ref())?)
    }

    /// Parses a file already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::parse(Storage::Owned(bytes))
    }

    fn parse(storage: Storage) -> Result<GgufFile> {
        let parsed = Parser::parse(storage.as_ref())?;
        Ok(GgufFile {
            storage: Arc::new(storage),
            parsed,
        })
    }

    /// Format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    /// Alignment of the data section and tensor offsets.
    pub fn alignment(&self) -> u64 {
        self.parsed.alignment
    }

    /// Absolute offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.parsed.data_offset
    }

    /// File size in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        (*self.storage).as_ref()
    }

    /// The file's bytes as a shareable owner, so a backend can keep tensor
    /// bytes (sliced with [`TensorInfo::byte_range`]) alive without copying
    /// them and without borrowing this `GgufFile`.
    pub fn storage(&self) -> Arc<dyn AsRef<[u8]> + Send + Sync> {
        self.storage.clone()
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.parsed.metadata.items
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.parsed.tensors.items
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.parsed.tensors.get(name)
    }

    /// A tensor's bytes, borrowed from the map. `info` should come from this
    /// file; one whose range lies outside it gives an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        self.bytes().get(info.byte_range()).unwrap_or(&[])
    }

    /// The bytes of the tensor called `name`.
    pub fn tensor_bytes(&self, name: &str) -> Option<&[u8]> {
        self.tensor(name).map(|t| self.tensor_data(t))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.parsed.metadata.get(key).map(|(_, v)| v)
    }
}

/// What parsing found: everything of a [`GgufFile`] but its bytes.
struct Parsed {
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Named<(String, Value)>,
    tensors: Named<TensorInfo>,
}

/// Items in file order with an index by name (metadata keys, tensor names).
struct Named<T> {
    items: Vec<T>,
    index: HashMap<String, usize>,
}

impl<T> Named<T> {
    /// Room for `n` items; `n` is capped at 2^20 by `Parser::header`.
    fn with_capacity(n: u64) -> Self {
        Named {
            items: Vec::with_capacity(n as usize),
            index: HashMap::with_capacity(n as usize),
        }
    }

    /// Append `item` under `name`, or give it back if the name is taken.
    fn push(&mut self, name: &str, item: T) -> std::result::Result<(), T> {
        if self.index.contains_key(name) {
            return Err(item);
        }
        self.index.insert(name.to_string(), self.items.len());
        self.items.push(item);
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&T> {
        self.index.get(name).and_then(|&i| self.items.get(i))
    }
}

/// A cursor over the file that never reads past its end.
struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn parse(data: &'a [u8]) -> Result<Parsed> {
        let mut p = Parser { data, pos: 0 };
        let (version, n_tensors, n_kv) = p.header()?;
        let metadata = p.metadata(n_kv)?;
        let alignment = read_alignment(&metadata)?;
        let mut tensors = p.tensor_infos(n_tensors)?;

        let infos_end = p.pos as u64;
        let data_offset = align_up(infos_end, alignment).ok_or(GgufError::DataOffsetOverflow {
            end: infos_end,
            alignment,
        })?;
        place_tensors(
            &mut tensors.items,
            data_offset,
            alignment,
            data.len() as u64,
        )?;

        Ok(Parsed {
            version,
            alignment,
            data_offset,
            metadata,
            tensors,
        })
    }

    /// Magic, version, and the two counts: `(version, n_tensors, n_kv)`,
    /// the counts capped and checked against the bytes left.
    fn header(&mut self) -> Result<(u32, u64, u64)> {
        let magic = self.array::<4>(&|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = u32::from_le_bytes(self.array::<4>(&|| "version".into())?);
        match version {
            2 | 3 => {}
            1 => return Err(GgufError::VersionOne),
            v if matches!(v.swap_bytes(), 2 | 3) => {
                return Err(GgufError::BigEndian {
                    raw: v,
                    swapped: v.swap_bytes(),
                })
            }
            v => return Err(GgufError::UnsupportedVersion { version: v }),
        }
        let n_tensors = self.u64(&|| "tensor_count".into())?;
        let n_kv = self.u64(&|| "metadata_kv_count".into())?;
        cap("tensor_count", n_tensors, MAX_TENSORS)?;
        cap("metadata_kv_count", n_kv, MAX_KV)?;
        // Both counts against the bytes left before allocating for either.
        let min_bytes = n_kv
            .saturating_mul(MIN_KV_BYTES)
            .saturating_add(n_tensors.saturating_mul(MIN_TENSOR_INFO_BYTES));
        if min_bytes > self.remaining() {
            return Err(GgufError::LyingCount {
                what: format!("header ({n_kv} metadata pairs, {n_tensors} tensors)"),
                count: n_kv.saturating_add(n_tensors),
                min_bytes,
                available: self.remaining(),
                offset: self.pos as u64,
            });
        }
        Ok((version, n_tensors, n_kv))
    }

    /// `n_kv` key-value pairs in file order; a key seen twice is an error.
    fn metadata(&mut self, n_kv: u64) -> Result<Named<(String, Value)>> {
        let mut metadata = Named::with_capacity(n_kv);
        for i in 0..n_kv {
            let key = self.string(MAX_KEY_LEN, &|| format!("metadata key #{i}"))?;
            let ty = self.value_type(&|| format!("value type of key '{key}'"), &key)?;
            let value = self.value(ty, &key)?;
            if let Err((key, _)) = metadata.push(&key.clone(), (key, value)) {
                return Err(GgufError::DuplicateKey { key });
            }
        }
        Ok(metadata)
    }

    /// `n_tensors` tensor infos in file order; a name seen twice is an error.
    fn tensor_infos(&mut self, n_tensors: u64) -> Result<Named<TensorInfo>> {
        let mut tensors = Named::with_capacity(n_tensors);
        for i in 0..n_tensors {
            let t = self.tensor_info(i)?;
            if let Err(t) = tensors.push(&t.name.clone(), t) {
                return Err(GgufError::DuplicateTensor { name: t.name });
            }
        }
        Ok(tensors)
    }

    /// A value type id; one not in the table is an error naming `key`.
    fn value_type(&mut self, what: &dyn Fn() -> String, key: &str) -> Result<ValueType> {
        let type_off = self.pos as u64;
        let type_id = self.u32(what)?;
        ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.into(),
            type_id,
            offset: type_off,
        })
    }

    fn remaining(&self) -> u64 {
        self.data.len().saturating_sub(self.pos) as u64
    }

    /// The next `n` bytes; `what` names them in the error if the file ends.
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .and_then(|end| self.data.get(self.pos..end))
            .ok_or_else(|| GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            })?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A `u64` length + UTF-8 string, the length checked against `max` and
    /// against the bytes left before anything is allocated.
    fn string(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<String> {
        self.str(max, what).map(str::to_owned)
    }

    /// A string (u64 length, UTF-8 bytes) of at most `max` bytes, borrowed
    /// from the buffer.
    fn str(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<&'a str> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > max {
            return Err(GgufError::OverCap {
                what: format!("length of {}", what()),
                value: len,
                cap: max,
            });
        }
        let offset = self.pos as u64;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset,
        })
    }

    fn value(&mut self, ty: ValueType, key: &str) -> Result<Value> {
        let what = || format!("value of key '{key}'");
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(&what)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(&what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let offset = self.pos as u64;
                let [b] = self.array(&what)?;
                Value::Bool(bool_byte(b, key, offset)?)
            }
            ValueType::String => Value::String(self.string(MAX_STRING_LEN, &what)?),
            ValueType::Array => Value::Array(self.array_value(key, 1)?),
        })
    }

    /// An array at nesting level `depth` (1 = the key's own array).
    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                key: key.into(),
                cap: MAX_ARRAY_DEPTH,
            });
        }
        let what = || format!("array in key '{key}'");
        let ty = self.value_type(&what, key)?;
        let n = self.u64(&what)?;
        // The check that stops a lying count: n elements of this type take at
        // least n * min_size bytes, which must still be in the file. After it,
        // n fits usize and allocating n elements is bounded by the file size.
        let min_bytes = n.checked_mul(ty.min_size());
        if min_bytes.is_none_or(|b| b > self.remaining()) {
            return Err(GgufError::LyingCount {
                what: format!("array of {} in key '{key}'", ty.name()),
                count: n,
                min_bytes: min_bytes.unwrap_or(u64::MAX),
                available: self.remaining(),
                offset: self.pos as u64,
            });
        }
        let n = n as usize;
        let elem_bytes = ty.min_size();
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n as u64, &what)?.to_vec()),
            ValueType::I8 => {
                Array::I8(self.fixed(n, elem_bytes, &what, |b| b.first().map_or(0, |&x| x as i8))?)
            }
            ValueType::U16 => Array::U16(self.fixed(n, elem_bytes, &what, le_u16)?),
            ValueType::I16 => Array::I16(self.fixed(n, elem_bytes, &what, |b| le_u16(b) as i16)?),
            ValueType::U32 => Array::U32(self.fixed(n, elem_bytes, &what, le_u32)?),
            ValueType::I32 => Array::I32(self.fixed(n, elem_bytes, &what, |b| le_u32(b) as i32)?),
            ValueType::F32 => {
                Array::F32(self.fixed(n, elem_bytes, &what, |b| f32::from_bits(le_u32(b)))?)
            }
            ValueType::U64 => Array::U64(self.fixed(n, elem_bytes, &what, le_u64)?),
            ValueType::I64 => Array::I64(self.fixed(n, elem_bytes, &what, |b| le_u64(b) as i64)?),
            ValueType::F64 => {
                Array::F64(self.fixed(n, elem_bytes, &what, |b| f64::from_bits(le_u64(b)))?)
            }
            ValueType::Bool => {
                let offset = self.pos as u64;
                let bytes = self.take(n as u64, &what)?;
                let mut out = Vec::with_capacity(n);
                for (i, &b) in bytes.iter().enumerate() {
                    out.push(bool_byte(b, key, offset + i as u64)?);
                }
                Array::Bool(out)
            }
            ValueType::String => {
                let mut out = crate::StrArray::with_capacity(n, 0);
                for i in 0..n {
                    let s = self.str(MAX_STRING_LEN, &|| format!("string #{i} in key '{key}'"))?;
                    out.push(s);
                }
                Array::String(out)
            }
            ValueType::Array => {
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    out.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(out)
            }
        })
    }

    /// `n` fixed-size little-endian elements of `size` bytes each. `decode`
    /// gets exactly `size` bytes (from `chunks_exact`).
    fn fixed<T>(
        &mut self,
        n: usize,
        size: u64,
        what: &dyn Fn() -> String,
        decode: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<T>> {
        let total = (n as u64).saturating_mul(size);
        let bytes = self.take(total, what)?;
        Ok(bytes.chunks_exact(size as usize).map(decode).collect())
    }

    /// The dimensions of tensor `name`: `(ne, n_dims, n_elements)`, checked:
    /// 1..=4 of them, none zero, and an element count that fits ggml's
    /// int64_t.
    fn dims(&mut self, name: &str, what: &dyn Fn() -> String) -> Result<([u64; 4], u32, u64)> {
        let n_dims = self.u32(what)?;
        if !(1..=MAX_DIMS).contains(&n_dims) {
            return Err(GgufError::BadDimCount {
                tensor: name.to_string(),
                n_dims,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(what)?);
        }
        if let Some(dim) = dims.iter().position(|&d| d == 0) {
            return Err(GgufError::ZeroDim {
                tensor: name.to_string(),
                dim,
                ne: dims,
            });
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64);
        let Some(n_elements) = n_elements else {
            return Err(GgufError::ElementCountOverflow {
                tensor: name.to_string(),
                ne: dims,
            });
        };
        let mut ne = [1u64; 4];
        for (slot, d) in ne.iter_mut().zip(&dims) {
            *slot = *d;
        }
        Ok((ne, n_dims, n_elements))
    }

    /// One tensor info, checked on its own (placement comes later).
    fn tensor_info(&mut self, i: u64) -> Result<TensorInfo> {
        let name_what = || format!("name of tensor #{i}");
        let len_off = self.pos;
        let len = self.u64(&|| format!("length of {}", name_what()))?;
        if len > MAX_TENSOR_NAME_LEN {
            // Name it as far as the file lets us, for the message.
            self.pos = len_off;
            let shown = self.string(MAX_KEY_LEN, &name_what).unwrap_or_default();
            return Err(GgufError::TensorNameTooLong {
                name: shown,
                len,
                max: MAX_TENSOR_NAME_LEN,
            });
        }
        self.pos = len_off;
        let name = self.string(MAX_TENSOR_NAME_LEN, &name_what)?;
        let what = || format!("tensor info of '{name}'");

        let (ne, n_dims, n_elements) = self.dims(&name, &what)?;

        let type_id = self.u32(&what)?;
        let Some(ty) = GgmlType::from_id(type_id) else {
            return Err(GgufError::UnknownTensorType {
                tensor: name,
                type_id,
            });
        };
        let block_size = ty.block_size();
        if ne[0] % block_size as u64 != 0 {
            return Err(GgufError::NotWholeBlocks {
                tensor: name,
                ne0: ne[0],
                ty,
                block_size,
            });
        }
        let Some(n_bytes) = ty.bytes_for(n_elements) else {
            return Err(GgufError::TensorSizeOverflow {
                tensor: name,
                what: "byte size",
            });
        };
        let offset = self.u64(&what)?;
        Ok(TensorInfo {
            name,
            ne,
            n_dims,
            ty,
            offset,
            n_elements,
            n_bytes,
            range: 0..0,
        })
    }
}

/// `general.alignment` if present (a `u32`, a power of two), else the
/// default.
fn read_alignment(metadata: &Named<(String, Value)>) -> Result<u64> {
    let alignment = match metadata.get(KEY_ALIGNMENT) {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) => u64::from(*a),
        Some((_, v)) => {
            return Err(GgufError::KeyType {
                key: KEY_ALIGNMENT.into(),
                expected: "u32",
                found: v.type_desc(),
            })
        }
    };
    if !alignment.is_power_of_two() {
        return Err(GgufError::BadAlignment { value: alignment });
    }
    Ok(alignment)
}

/// Checks each tensor's offset against the alignment and the file, fills in
/// its absolute range, and checks no two tensors share bytes.
fn place_tensors(
    tensors: &mut [TensorInfo],
    data_offset: u64,
    alignment: u64,
    file_size: u64,
) -> Result<()> {
    for t in tensors.iter_mut() {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let overflow = |what| GgufError::TensorSizeOverflow {
            tensor: t.name.clone(),
            what,
        };
        let start = data_offset
            .checked_add(t.offset)
            .ok_or_else(|| overflow("data start"))?;
        let end = start
            .checked_add(t.n_bytes)
            .ok_or_else(|| overflow("data end"))?;
        if end > file_size {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                data_offset,
                start,
                end,
                file_size,
            });
        }
        // end <= file_size, which is a usize (the file is in memory).
        t.range = start as usize..end as usize;
    }
    let mut by_start: Vec<&TensorInfo> = tensors.iter().collect();
    by_start.sort_by_key(|t| t.range.start);
    for pair in by_start.windows(2) {
        if let [a, b] = pair {
            if b.range.start < a.range.end {
                return Err(GgufError::TensorOverlap {
                    first: a.name.clone(),
                    first_start: a.range.start as u64,
                    first_end: a.range.end as u64,
                    second: b.name.clone(),
                    second_start: b.range.start as u64,
                    second_end: b.range.end as u64,
                });
            }
        }
    }
    Ok(())
}

fn cap(what: &str, value: u64, cap: u64) -> Result<()> {
    if value > cap {
        return Err(GgufError::OverCap {
            what: what.into(),
            value,
            cap,
        });
    }
    Ok(())
}

fn bool_byte(b: u8, key: &str, offset: u64) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::BadBool {
            key: key.into(),
            byte,
            offset,
        }),
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), `None` on overflow.
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

// Decoders for `chunks_exact` chunks, whose length is the element size; the
// zero fallback is unreachable.
fn le_u16(b: &[u8]) -> u16 {
    b.try_into().map(u16::from_le_bytes).unwrap_or(0)
}
fn le_u32(b: &[u8]) -> u32 {
    b.try_into().map(u32::from_le_bytes).unwrap_or(0)
}
fn le_u64(b: &[u8]) -> u64 {
    b.try_into().map(u64::from_le_bytes).unwrap_or(0)
}
