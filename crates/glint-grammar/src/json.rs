//! JSON schema to GBNF: the parts of a schema clients use (what llama.cpp's
//! json-schema-to-grammar covers, less `pattern`): `type` (one or a list),
//! `const`, `enum`, `properties` with `required` (in the
//! schema's order; optional ones optional), `additionalProperties`, `items` (a schema, or a list of
//! them: a tuple), `prefixItems`, `minItems`/`maxItems`, string
//! `minLength`/`maxLength`, `anyOf`/`oneOf`, `allOf` of one, `$ref` to
//! `#/$defs/…` or `#/definitions/…`. `{}` or `true` is any JSON value.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::GrammarError;

/// Shared rules: whitespace (bounded, as llama.cpp's), JSON primitives.
const PRIMITIVES: &str = r#"space ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" space
integral-part ::= [0] | [1-9] [0-9]{0,15}
number ::= ("-"? integral-part) ("." [0-9]+)? ([eE] [-+]? integral-part)? space
integer ::= ("-"? integral-part) space
boolean ::= ("true" | "false") space
null ::= "null" space
value ::= object | array | string | number | boolean | null
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
"#;

/// Most nesting of a schema (bounds the converter's recursion).
const MAX_DEPTH: usize = 64;

/// The GBNF text of `schema` (its root rule `root`).
pub fn json_schema(schema: &Value) -> Result<String, GrammarError> {
    let mut out = json_schema_rules(schema, "root")?;
    out.push_str(PRIMITIVES);
    Ok(out)
}

/// The rules of `schema` alone, its root named `name` and its other rules
/// (`$ref` targets) prefixed with it, for grammars that hold several
/// schemas (one per tool). They use the rules of [`JSON_PRIMITIVES`],
/// which the whole grammar must hold once.
pub fn json_schema_rules(schema: &Value, name: &str) -> Result<String, GrammarError> {
    let mut c = Conv {
        root: schema,
        refs: BTreeMap::new(),
        pending: Vec::new(),
        prefix: if name == "root" {
            String::new()
        } else {
            format!("{name}-")
        },
    };
    let body = c.visit(schema, 0)?;
    let mut out = format!("{name} ::= {body}\n");
    // Each referenced definition once, as a rule of its own (so a schema
    // may refer to itself).
    while let Some(r) = c.pending.pop() {
        let target = c.resolve(&r)?;
        let body = c.visit(target, 1)?;
        out.push_str(&format!("{} ::= {body}\n", c.refs[&r]));
    }
    Ok(out)
}

/// The shared rules every JSON schema's rules use (`space`, `string`,
/// `value`, ...).
pub const JSON_PRIMITIVES: &str = PRIMITIVES;

struct Conv<'a> {
    root: &'a Value,
    /// `$ref` path -> its rule's name.
    refs: BTreeMap<String, String>,
    /// References seen but not yet converted.
    pending: Vec<String>,
    /// Before each reference rule's name.
    prefix: String,
}

fn lit(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value as a GBNF literal (compact, then space).
fn value_lit(v: &Value) -> String {
    format!("{} space", lit(&v.to_string()))
}

fn bad(m: impl Into<String>) -> GrammarError {
    GrammarError::Schema(m.into())
}

impl<'a> Conv<'a> {
    fn resolve(&self, r: &str) -> Result<&'a Value, GrammarError> {
        let path = r
            .strip_prefix("#/")
            .ok_or_else(|| bad(format!("$ref {r:?}: only local references (#/$defs/…)")))?;
        let mut v = self.root;
        for part in path.split('/') {
            v = v
                .get(part)
                .ok_or_else(|| bad(format!("$ref {r:?}: no such definition")))?;
        }
        Ok(v)
    }

    fn visit(&mut self, s: &'a Value, depth: usize) -> Result<String, GrammarError> {
        if depth > MAX_DEPTH {
            return Err(bad(format!("nested deeper than {MAX_DEPTH}")));
        }
        let o = match s {
            Value::Bool(true) => return Ok("value".into()),
            Value::Object(o) => o,
            other => return Err(bad(format!("a schema must be an object, not {other}"))),
        };
        if let Some(r) = o.get("$ref") {
            let r = r.as_str().ok_or_else(|| bad("$ref must be a string"))?;
            if !self.refs.contains_key(r) {
                let name = format!("{}ref{}", self.prefix, self.refs.len());
                self.refs.insert(r.to_string(), name);
                self.pending.push(r.to_string());
            }
            return Ok(self.refs[r].clone());
        }
        if let Some(c) = o.get("const") {
            return Ok(value_lit(c));
        }
        if let Some(e) = o.get("enum") {
            let e = e
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| bad("enum must be a non-empty array"))?;
            return Ok(format!(
                "({})",
                e.iter().map(value_lit).collect::<Vec<_>>().join(" | ")
            ));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(a) = o.get(key) {
                let a = a
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| bad(format!("{key} must be a non-empty array")))?;
                let alts = a
                    .iter()
                    .map(|x| self.visit(x, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(format!("({})", alts.join(" | ")));
            }
        }
        if let Some(a) = o.get("allOf") {
            match a.as_array().map(Vec::as_slice) {
                Some([one]) => return self.visit(one, depth + 1),
                _ => return Err(bad("allOf of more than one schema is not supported")),
            }
        }
        if o.contains_key("pattern") {
            return Err(bad("`pattern` is not supported"));
        }
        let types: Vec<&str> = match o.get("type") {
            None => {
                if o.contains_key("properties") {
                    vec!["object"]
                } else if o.contains_key("items") || o.contains_key("prefixItems") {
                    vec!["array"]
                } else {
                    return Ok("value".into());
                }
            }
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .map(|t| {
                    t.as_str()
                        .ok_or_else(|| bad("type must be a string or strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(bad(format!("type {other} is not a type name"))),
        };
        let alts = types
            .iter()
            .map(|t| self.typed(o, t, depth))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(if alts.len() == 1 {
            alts.into_iter().next().unwrap_or_default()
        } else {
            format!("({})", alts.join(" | "))
        })
    }

    fn typed(
        &mut self,
        o: &'a serde_json::Map<String, Value>,
        t: &str,
        depth: usize,
    ) -> Result<String, GrammarError> {
        let count = |k: &str| -> Result<Option<u32>, GrammarError> {
            match o.get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n <= 10_000)
                    .map(|n| Some(n as u32))
                    .ok_or_else(|| bad(format!("{k} must be an integer up to 10000"))),
            }
        };
        Ok(match t {
            "string" => match (count("minLength")?, count("maxLength")?) {
                (None, None) => "string".into(),
                (min, max) => {
                    let (min, max) = (
                        min.unwrap_or(0),
                        max.map_or(String::new(), |m| m.to_string()),
                    );
                    format!("\"\\\"\" char{{{min},{max}}} \"\\\"\" space")
                }
            },
            "number" => "number".into(),
            "integer" => "integer".into(),
            "boolean" => "boolean".into(),
            "null" => "null".into(),
            "array" => {
                let tuple = match (o.get("prefixItems"), o.get("items")) {
                    (Some(Value::Array(p)), _) | (None, Some(Value::Array(p))) => Some(p),
                    _ => None,
                };
                if let Some(p) = tuple {
                    let items = p
                        .iter()
                        .map(|x| self.visit(x, depth + 1))
                        .collect::<Result<Vec<_>, _>>()?;
                    return Ok(format!(
                        "\"[\" space {} \"]\" space",
                        items.join(" \",\" space ")
                    ));
                }
                let item = match o.get("items") {
                    None => "value".to_string(),
                    Some(i) => self.visit(i, depth + 1)?,
                };
                let (min, max) = (count("minItems")?.unwrap_or(0), count("maxItems")?);
                let rest = |n: u32| {
                    format!(
                        "(\",\" space {item}){{{n},{}}}",
                        max.map_or(String::new(), |m| m.saturating_sub(1).to_string())
                    )
                };
                match (min, max) {
                    (_, Some(0)) => "\"[\" space \"]\" space".into(),
                    (0, _) => format!("\"[\" space ({item} {})? \"]\" space", rest(0)),
                    (m, _) => format!("\"[\" space {item} {} \"]\" space", rest(m - 1)),
                }
            }
            "object" => {
                let props = match o.get("properties") {
                    None => None,
                    Some(Value::Object(p)) => Some(p),
                    Some(_) => return Err(bad("properties must be an object")),
                };
                let required: Vec<&str> = match o.get("required") {
                    None => Vec::new(),
                    Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
                    Some(_) => return Err(bad("required must be an array of names")),
                };
                let Some(props) = props.filter(|p| !p.is_empty()) else {
                    return Ok("object".into());
                };
                // The required properties in the map's order, then the
                // optional ones, each optional, commas only between the
                // ones present.
                let (mut req, mut opt) = (Vec::new(), Vec::new());
                for (k, v) in props {
                    let kv = format!(
                        "{} space \":\" space {}",
                        lit(&format!("\"{k}\"")),
                        self.visit(v, depth + 1)?
                    );
                    if required.contains(&k.as_str()) {
                        req.push(kv);
                    } else {
                        opt.push(kv);
                    }
                }
                let comma = |kv: &String| format!("(\",\" space {kv})?");
                let inner = if !req.is_empty() {
                    let mut b = req.join(" \",\" space ");
                    for kv in &opt {
                        b.push(' ');
                        b.push_str(&comma(kv));
                    }
                    b
                } else {
                    // No required one: which optional comes first picks an
                    // alternative; any later ones may follow it.
                    let alts: Vec<String> = (0..opt.len())
                        .map(|i| {
                            let mut a = opt[i].clone();
                            for kv in &opt[i + 1..] {
                                a.push(' ');
                                a.push_str(&comma(kv));
                            }
                            a
                        })
                        .collect();
                    format!("({})?", alts.join(" | "))
                };
                format!("\"{{\" space {inner} \"}}\" space")
            }
            other => return Err(bad(format!("type {other:?} is not a JSON type"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Grammar, Matcher};
    use serde_json::json;
    use std::sync::Arc;

    fn accepts(schema: Value, text: &str) -> bool {
        let g = Arc::new(Grammar::parse(&json_schema(&schema).unwrap()).unwrap());
        let mut m = Matcher::new(g);
        m.advance_str(text) && m.is_accepting()
    }

    #[test]
    fn schemas_accept_their_values_and_refuse_others() {
        assert!(accepts(json!({"const": "42"}), "\"42\""));
        assert!(!accepts(json!({"const": "42"}), "42"));
        let person = json!({"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
            "required": ["name"]});
        // Required properties first (in the map's order), then the optional
        // ones in theirs.
        assert!(accepts(
            person.clone(),
            r#"{"name": "Ann", "age": 3, "tags": ["a", "b"]}"#
        ));
        assert!(accepts(
            json!({"properties": {"a": {}, "b": {}}}),
            r#"{"b": 1}"#
        ));
        assert!(accepts(json!({"properties": {"a": {}, "b": {}}}), r#"{}"#));
        assert!(!accepts(
            json!({"properties": {"a": {}, "b": {}}}),
            r#"{"b": 1, "a": 2}"#
        ));
        assert!(accepts(person.clone(), r#"{"name":"Ann"}"#));
        assert!(!accepts(person.clone(), r#"{"age": 3}"#));
        assert!(!accepts(
            person.clone(),
            r#"{"name": "Ann", "tags": ["a", "b", "c"]}"#
        ));
        assert!(!accepts(person.clone(), r#"{"age": 3, "name": "Ann"}"#));
        assert!(accepts(json!({"enum": [1, "x", null]}), "null"));
        assert!(accepts(
            json!({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}),
            "true"
        ));
        assert!(accepts(
            json!({"type": "object"}),
            r#"{"a": [1, 2.5e3, {"b": null}]}"#
        ));
        assert!(accepts(json!({}), "-0.5"));
        let tree = json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["kids"]}}});
        assert!(accepts(tree, r#"{"kids": [{"kids": []}]}"#));
        assert!(accepts(
            json!({"type": "string", "minLength": 2, "maxLength": 3}),
            "\"abc\""
        ));
        assert!(!accepts(
            json!({"type": "string", "minLength": 2, "maxLength": 3}),
            "\"a\""
        ));
    }

    #[test]
    fn invalid_schemas_are_refused_naming_why() {
        for s in [
            json!(123),
            json!({"type": 123}),
            json!({"type": "hiccup"}),
            json!({"pattern": "a+"}),
            json!({"$ref": "#/nope"}),
        ] {
            assert!(json_schema(&s).is_err(), "{s}");
        }
    }
}
