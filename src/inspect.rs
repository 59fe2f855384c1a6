//! `glint inspect`: what `gguf-dump` shows — header, metadata (long arrays
//! summarized), the tensor table, totals per type — as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use glint::gguf::{Array, GgufFile, Value};
use serde_json::{json, Value as Json};

/// Arrays longer than this are summarized: type, length, first items.
const ARRAY_HEAD: usize = 3;
/// Strings longer than this are cut in the text listing (JSON keeps them whole).
const TEXT_STRING_MAX: usize = 96;

/// Per-type totals of the tensor table, in type-table order.
pub fn totals_per_type(f: &GgufFile) -> Vec<(glint::quant::GgmlType, usize, u64)> {
    let mut m: BTreeMap<glint::quant::GgmlType, (usize, u64)> = BTreeMap::new();
    for t in f.tensors() {
        let e = m.entry(t.ty).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    m.into_iter().map(|(ty, (n, b))| (ty, n, b)).collect()
}

fn architecture(f: &GgufFile) -> Option<&str> {
    match f.get("general.architecture") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn block_count(f: &GgufFile) -> Option<i128> {
    let arch = architecture(f)?;
    f.get(&format!("{arch}.block_count"))
        .and_then(Value::as_integer)
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head:?}… ({} chars)", s.chars().count())
    }
}

fn array_head_text(a: &Array) -> String {
    fn list<T: std::fmt::Debug>(v: &[T]) -> String {
        let items: Vec<String> = v
            .iter()
            .take(ARRAY_HEAD)
            .map(|x| format!("{x:?}"))
            .collect();
        let more = if v.len() > ARRAY_HEAD { ", …" } else { "" };
        format!("[{}{more}]", items.join(", "))
    }
    match a {
        Array::U8(v) => list(v),
        Array::I8(v) => list(v),
        Array::U16(v) => list(v),
        Array::I16(v) => list(v),
        Array::U32(v) => list(v),
        Array::I32(v) => list(v),
        Array::F32(v) => list(v),
        Array::Bool(v) => list(v),
        Array::String(v) => {
            let items: Vec<String> = v.iter().take(ARRAY_HEAD).map(|s| cut(s, 40)).collect();
            let more = if v.len() > ARRAY_HEAD { ", …" } else { "" };
            format!("[{}{more}]", items.join(", "))
        }
        Array::Array(v) => format!("[{} nested arrays]", v.len()),
        Array::U64(v) => list(v),
        Array::I64(v) => list(v),
        Array::F64(v) => list(v),
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => cut(s, TEXT_STRING_MAX),
        Value::Array(a) => {
            format!(
                "[{}; {}] {}",
                a.elem_type().name(),
                a.len(),
                array_head_text(a)
            )
        }
        other => other.to_string(),
    }
}

/// The text listing.
pub fn render_text(path: &str, f: &GgufFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "file: {path} ({} bytes)", f.file_size());
    let _ = writeln!(
        s,
        "GGUF v{}, alignment {}, data section at byte {}",
        f.version(),
        f.alignment(),
        f.data_offset()
    );
    let _ = writeln!(
        s,
        "architecture: {}, block_count: {}",
        architecture(f).unwrap_or("(none)"),
        block_count(f).map_or("(none)".to_string(), |n| n.to_string())
    );
    let _ = writeln!(s, "\nmetadata ({} keys):", f.metadata().len());
    let key_w = f.metadata().iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (i, (k, v)) in f.metadata().iter().enumerate() {
        let _ = writeln!(
            s,
            "  {i:4}: {k:<key_w$}  {:<16} = {}",
            v.type_desc(),
            value_text(v)
        );
    }
    let _ = writeln!(s, "\ntensors ({}):", f.tensors().len());
    let name_w = f.tensors().iter().map(|t| t.name.len()).max().unwrap_or(0);
    for (i, t) in f.tensors().iter().enumerate() {
        let dims: Vec<String> = t.dims().iter().map(u64::to_string).collect();
        let shape = format!("[{}]", dims.join(", "));
        let _ = writeln!(
            s,
            "  {i:4}: {:<name_w$}  {:<7} {:<22} {:>12} bytes",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes
        );
    }
    let _ = writeln!(s, "\ntotals per type:");
    let mut all_bytes = 0u64;
    for (ty, n, b) in totals_per_type(f) {
        all_bytes += b;
        let _ = writeln!(s, "  {:<7} {n:5} tensors {b:>14} bytes", ty.name());
    }
    let _ = writeln!(
        s,
        "  {:<7} {:5} tensors {all_bytes:>14} bytes",
        "all",
        f.tensors().len()
    );
    s
}

fn array_json(a: &Array, head: Option<usize>) -> Json {
    fn take<T: Clone + serde::Serialize>(v: &[T], head: Option<usize>) -> Json {
        let n = head.unwrap_or(v.len()).min(v.len());
        json!(v[..n].to_vec())
    }
    match a {
        Array::U8(v) => take(v, head),
        Array::I8(v) => take(v, head),
        Array::U16(v) => take(v, head),
        Array::I16(v) => take(v, head),
        Array::U32(v) => take(v, head),
        Array::I32(v) => take(v, head),
        Array::F32(v) => take(v, head),
        Array::Bool(v) => take(v, head),
        Array::String(v) => {
            let n = head.unwrap_or(v.len()).min(v.len());
            Json::Array(v.iter().take(n).map(|s| json!(s)).collect())
        }
        Array::Array(v) => {
            let n = head.unwrap_or(v.len()).min(v.len());
            Json::Array(v[..n].iter().map(|x| array_json(x, head)).collect())
        }
        Array::U64(v) => take(v, head),
        Array::I64(v) => take(v, head),
        Array::F64(v) => take(v, head),
    }
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(_) => Json::Null,
    }
}

/// The JSON document: `metadata` entries carry `value` for scalars and, for
/// arrays, `len` and `first` (the first few items; all of them with `full`).
pub fn render_json(path: &str, f: &GgufFile, full: bool) -> Json {
    let metadata: Vec<Json> = f
        .metadata()
        .iter()
        .map(|(k, v)| match v {
            Value::Array(a) => json!({
                "key": k,
                "type": v.type_desc(),
                "len": a.len(),
                "first": array_json(a, if full { None } else { Some(ARRAY_HEAD) }),
            }),
            _ => json!({ "key": k, "type": v.type_desc(), "value": value_json(v) }),
        })
        .collect();
    let tensors: Vec<Json> = f
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ty.name(),
                "shape": t.dims(),
                "n_elements": t.n_elements,
                "offset": t.offset,
                "bytes": t.n_bytes,
            })
        })
        .collect();
    let mut types = serde_json::Map::new();
    for (ty, n, b) in totals_per_type(f) {
        types.insert(ty.name().to_string(), json!({ "tensors": n, "bytes": b }));
    }
    json!({
        "file": path,
        "file_size": f.file_size(),
        "version": f.version(),
        "alignment": f.alignment(),
        "data_offset": f.data_offset(),
        "architecture": architecture(f),
        "block_count": block_count(f).map(|n| n as i64),
        "n_tensors": f.tensors().len(),
        "tensor_bytes": f.tensors().iter().map(|t| t.n_bytes).sum::<u64>(),
        "types": types,
        "metadata": metadata,
        "tensors": tensors,
    })
}
