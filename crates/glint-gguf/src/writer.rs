//! Writing GGUF v3: fixtures for tests and synthetic models for benchmarks.
//!
//! Metadata is written as given (any [`Value`], nesting included) so tests can
//! build unusual files; tensors are checked (name, dims, byte size) because a
//! written file should always open.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use glint_quant::GgmlType;

use crate::error::{GgufError, Result};
use crate::reader::{
    align_up, DEFAULT_ALIGNMENT, GGUF_MAGIC, KEY_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN,
};
use crate::value::{Array, Value};

/// Writes one tensor's bytes into the data section, for tensors too big to
/// hold in memory; called once per [`GgufWriter::write_to`].
pub type TensorWriteFn = Box<dyn FnMut(&mut dyn Write) -> io::Result<()>>;

enum TensorSource {
    Bytes(Vec<u8>),
    Stream(TensorWriteFn),
}

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    n_bytes: u64,
    source: TensorSource,
}

/// Builds a GGUF v3 file: metadata in insertion order, then tensors, each
/// at an offset aligned to `general.alignment` (default 32), padded with
/// zero bytes.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl std::fmt::Debug for GgufWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("n_kv", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Adds a metadata pair. `general.alignment` must be a `u32` power of two.
    pub fn add_kv(&mut self, key: impl Into<String>, value: Value) -> Result<&mut Self> {
        let key = key.into();
        if key == KEY_ALIGNMENT {
            match value {
                Value::U32(a) if a.is_power_of_two() => {}
                Value::U32(a) => return Err(GgufError::BadAlignment { value: a.into() }),
                ref v => {
                    return Err(GgufError::KeyType {
                        key,
                        expected: "u32",
                        found: v.type_desc(),
                    })
                }
            }
        }
        if !self.keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.metadata.push((key, value));
        Ok(self)
    }

    /// Adds a tensor with its bytes; `bytes.len()` must be what `dims` and
    /// `ty` take.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        bytes: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let n_bytes = self.check_tensor(&name, dims, ty)?;
        if bytes.len() as u64 != n_bytes {
            return Err(GgufError::TensorBytesMismatch {
                tensor: name,
                ne: dims.to_vec(),
                ty,
                expected: n_bytes,
                got: bytes.len() as u64,
            });
        }
        self.push(name, dims, ty, n_bytes, TensorSource::Bytes(bytes));
        Ok(self)
    }

    /// Adds a tensor whose bytes `write` produces when the file is written,
    /// so a multi-GB synthetic model never sits in memory. Writing fails
    /// with [`GgufError::TensorBytesMismatch`] if `write` produces another
    /// number of bytes than `dims` and `ty` take.
    pub fn add_tensor_with(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        write: impl FnMut(&mut dyn Write) -> io::Result<()> + 'static,
    ) -> Result<&mut Self> {
        let name = name.into();
        let n_bytes = self.check_tensor(&name, dims, ty)?;
        self.push(
            name,
            dims,
            ty,
            n_bytes,
            TensorSource::Stream(Box::new(write)),
        );
        Ok(self)
    }

    fn push(
        &mut self,
        name: String,
        dims: &[u64],
        ty: GgmlType,
        n_bytes: u64,
        source: TensorSource,
    ) {
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            n_bytes,
            source,
        });
    }

    /// The same checks the reader makes on one tensor info; returns its size.
    fn check_tensor(&self, name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
        if name.len() as u64 > MAX_TENSOR_NAME_LEN {
            return Err(GgufError::TensorNameTooLong {
                name: name.into(),
                len: name.len() as u64,
                max: MAX_TENSOR_NAME_LEN,
            });
        }
        if self.names.contains(name) {
            return Err(GgufError::DuplicateTensor { name: name.into() });
        }
        if dims.is_empty() || dims.len() > MAX_DIMS as usize {
            return Err(GgufError::BadDimCount {
                tensor: name.into(),
                n_dims: dims.len() as u32,
            });
        }
        if let Some(dim) = dims.iter().position(|&d| d == 0) {
            return Err(GgufError::ZeroDim {
                tensor: name.into(),
                dim,
                ne: dims.to_vec(),
            });
        }
        let n = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| GgufError::ElementCountOverflow {
                tensor: name.into(),
                ne: dims.to_vec(),
            })?;
        let ne0 = dims.first().copied().unwrap_or(1);
        let block_size = ty.block_size();
        if ne0 % block_size as u64 != 0 {
            return Err(GgufError::NotWholeBlocks {
                tensor: name.into(),
                ne0,
                ty,
                block_size,
            });
        }
        ty.bytes_for(n).ok_or(GgufError::TensorSizeOverflow {
            tensor: name.into(),
            what: "byte size",
        })
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find_map(|(k, v)| match v {
                Value::U32(a) if k == KEY_ALIGNMENT => Some(u64::from(*a)),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Writes the file to `w`; returns the number of bytes written.
    pub fn write_to<W: Write>(&mut self, w: W) -> Result<u64> {
        let align = self.alignment();
        let mut w = Counting { inner: w, n: 0 };
        let overflow = |name: &str| GgufError::TensorSizeOverflow {
            tensor: name.into(),
            what: "data offset",
        };

        w.write_all(&GGUF_MAGIC).map_err(GgufError::Write)?;
        put_u32(&mut w, 3)?;
        put_u64(&mut w, self.tensors.len() as u64)?;
        put_u64(&mut w, self.metadata.len() as u64)?;
        for (k, v) in &self.metadata {
            put_str(&mut w, k)?;
            put_u32(&mut w, v.value_type().id())?;
            put_value(&mut w, v)?;
        }

        // Tensor offsets: each one aligned, relative to the data section.
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut w, &t.name)?;
            put_u32(&mut w, t.dims.len() as u32)?;
            for &d in &t.dims {
                put_u64(&mut w, d)?;
            }
            put_u32(&mut w, t.ty.id())?;
            put_u64(&mut w, offset)?;
            offset = offset
                .checked_add(t.n_bytes)
                .and_then(|end| align_up(end, align))
                .ok_or_else(|| overflow(&t.name))?;
        }
        pad(&mut w, align)?;

        for t in &mut self.tensors {
            let start = w.n;
            match &mut t.source {
                TensorSource::Bytes(b) => w.write_all(b).map_err(GgufError::Write)?,
                TensorSource::Stream(f) => f(&mut w).map_err(GgufError::Write)?,
            }
            let got = w.n - start;
            if got != t.n_bytes {
                return Err(GgufError::TensorBytesMismatch {
                    tensor: t.name.clone(),
                    ne: t.dims.clone(),
                    ty: t.ty,
                    expected: t.n_bytes,
                    got,
                });
            }
            pad(&mut w, align)?;
        }
        w.flush().map_err(GgufError::Write)?;
        Ok(w.n)
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write_to_path(&mut self, path: impl AsRef<Path>) -> Result<u64> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.write_to(BufWriter::new(file))
    }

    /// Writes the file into a new `Vec`.
    pub fn to_bytes(&mut self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }
}

/// Counts bytes so padding and tensor sizes can be checked while streaming.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut Counting<W>, align: u64) -> Result<()> {
    let target = align_up(w.n, align).unwrap_or(w.n);
    let zeros = [0u8; 256];
    let mut left = target - w.n;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        w.write_all(zeros.get(..n).unwrap_or(&[]))
            .map_err(GgufError::Write)?;
        left -= n as u64;
    }
    Ok(())
}

fn put(w: &mut dyn Write, b: &[u8]) -> Result<()> {
    w.write_all(b).map_err(GgufError::Write)
}
fn put_u32(w: &mut dyn Write, v: u32) -> Result<()> {
    put(w, &v.to_le_bytes())
}
fn put_u64(w: &mut dyn Write, v: u64) -> Result<()> {
    put(w, &v.to_le_bytes())
}
fn put_str(w: &mut dyn Write, s: &str) -> Result<()> {
    put_u64(w, s.len() as u64)?;
    put(w, s.as_bytes())
}

fn put_value(w: &mut dyn Write, v: &Value) -> Result<()> {
    match v {
        Value::U8(x) => put(w, &x.to_le_bytes()),
        Value::I8(x) => put(w, &x.to_le_bytes()),
        Value::U16(x) => put(w, &x.to_le_bytes()),
        Value::I16(x) => put(w, &x.to_le_bytes()),
        Value::U32(x) => put(w, &x.to_le_bytes()),
        Value::I32(x) => put(w, &x.to_le_bytes()),
        Value::F32(x) => put(w, &x.to_le_bytes()),
        Value::Bool(x) => put(w, &[u8::from(*x)]),
        Value::String(s) => put_str(w, s),
        Value::Array(a) => put_array(w, a),
        Value::U64(x) => put(w, &x.to_le_bytes()),
        Value::I64(x) => put(w, &x.to_le_bytes()),
        Value::F64(x) => put(w, &x.to_le_bytes()),
    }
}

fn put_array(w: &mut dyn Write, a: &Array) -> Result<()> {
    put_u32(w, a.elem_type().id())?;
    put_u64(w, a.len() as u64)?;
    // Fixed-size elements go out as one buffer (a vocabulary's scores are
    // 100k+ floats), not one write per element.
    fn each<T, const N: usize>(
        w: &mut dyn Write,
        xs: &[T],
        f: impl Fn(&T) -> [u8; N],
    ) -> Result<()> {
        let buf: Vec<u8> = xs.iter().flat_map(f).collect();
        put(w, &buf)
    }
    match a {
        Array::U8(v) => put(w, v),
        Array::I8(v) => each(w, v, |x| x.to_le_bytes()),
        Array::U16(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I16(v) => each(w, v, |x| x.to_le_bytes()),
        Array::U32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::F32(v) => each(w, v, |x| x.to_le_bytes()),
        Array::Bool(v) => each(w, v, |x| [u8::from(*x)]),
        Array::String(v) => v.iter().try_for_each(|s| put_str(w, s)),
        Array::Array(v) => v.iter().try_for_each(|a| put_array(w, a)),
        Array::U64(v) => each(w, v, |x| x.to_le_bytes()),
        Array::I64(v) => each(w, v, |x| x.to_le_bytes()),
        Array::F64(v) => each(w, v, |x| x.to_le_bytes()),
    }
}
