//! `tojson` as Hugging Face defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, byte for byte.
//!
//! minijinja's own `tojson` differs in ways a tokenizer sees: it escapes
//! `<`, `>`, `&` and `'` for HTML, writes `{"a":1}` without Python's spaces,
//! and prints floats the Rust way (`0.00001` where Python has `1e-05`).

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The knobs of `json.dumps` that templates use.
struct Options {
    ensure_ascii: bool,
    /// `None`: one line. `Some(s)`: newline, then `s` once per level.
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The `tojson` filter: `value | tojson(indent=4)` and so on.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            // Python: `' ' * indent`, so a negative indent is no indent
            // but still one item per line.
            ValueKind::Number => {
                let n = i64::try_from(v.clone())?;
                Some(" ".repeat(n.clamp(0, 64) as usize))
            }
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            _ => {
                return Err(invalid(format!(
                    "tojson: indent must be an int or a string, not {}",
                    v.kind()
                )))
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    (a.to_string(), b.to_string())
                }
                _ => {
                    return Err(invalid(
                        "tojson: separators must be a pair of strings".into(),
                    ))
                }
            }
        }
        _ => (
            if indent.is_some() { "," } else { ", " }.to_string(),
            ": ".to_string(),
        ),
    };
    kwargs.assert_all_used()?;
    let opts = Options {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    write_value(&mut out, value, &opts, 0)?;
    Ok(out)
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Templates are hostile input too: `{% set x = [x, x] %}` forty times
/// over is a small source and a huge document.
const MAX_DEPTH: usize = 128;

fn write_value(out: &mut String, value: &Value, opts: &Options, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(invalid(format!(
            "tojson: nested deeper than {MAX_DEPTH} levels"
        )));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value)?,
        ValueKind::String | ValueKind::Bytes => match value.as_str() {
            Some(s) => write_str(out, s, opts.ensure_ascii),
            None => return Err(invalid("tojson: bytes are not JSON serializable".into())),
        },
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, opts, depth, '[', ']', &items, |out, item| {
                write_value(out, item, opts, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((key_string(&key)?, item));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, opts, depth, '{', '}', &entries, |out, (key, item)| {
                write_str(out, key, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                write_value(out, item, opts, depth + 1)
            })?;
        }
        ValueKind::Undefined => {
            return Err(invalid(
                "tojson: Object of type Undefined is not JSON serializable".into(),
            ))
        }
        other => {
            return Err(invalid(format!(
                "tojson: a {other} is not JSON serializable"
            )))
        }
    }
    Ok(())
}

fn write_container<T>(
    out: &mut String,
    opts: &Options,
    depth: usize,
    open: char,
    close: char,
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_sep);
        }
        if let Some(indent) = &opts.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        write_item(out, item)?;
    }
    if let Some(indent) = &opts.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// Python turns `None`, bools and numbers used as keys into strings.
fn key_string(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key)?;
            s
        }
        other => {
            return Err(invalid(format!(
                "tojson: keys must be str, int, float, bool or None, not {other}"
            )))
        }
    })
}

fn write_number(out: &mut String, value: &Value) -> Result<(), Error> {
    if value.is_integer() {
        let n = i128::try_from(value.clone())?;
        let _ = write!(out, "{n}");
    } else {
        out.push_str(&py_float_repr(f64::try_from(value.clone())?));
    }
    Ok(())
}

/// Python's `repr(float)`: the shortest digits that round-trip, positional
/// for exponents in [-4, 16), else `d.ddde±XX`.
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` is also shortest-round-trip: "-1.2345e-5".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    let body = if (-4..16).contains(&exp) {
        if exp < 0 {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        } else if n <= exp + 1 {
            format!("{digits}{}.0", "0".repeat((exp + 1 - n) as usize))
        } else {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            format!("{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let exp_sign = if exp < 0 { '-' } else { '+' };
        let dot = if rest.is_empty() { "" } else { "." };
        format!("{first}{dot}{rest}e{exp_sign}{:02}", exp.abs())
    };
    format!("{sign}{body}")
}

/// A JSON string as Python writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`,
/// `\f`, other controls as `\u00XX`; with `ensure_ascii`, all non-ASCII as
/// `\uXXXX` (surrogate pairs above the BMP).
fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::py_float_repr;

    #[test]
    fn floats_print_as_python_repr() {
        // Each right-hand side is what `repr(x)` prints in CPython 3.11.
        let cases = [
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (0.5, "0.5"),
            (7.5, "7.5"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-2.5e-7, "-2.5e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want, "repr({x:e})");
        }
    }
}
