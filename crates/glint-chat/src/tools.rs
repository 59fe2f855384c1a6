//! Tool calls and reasoning as chat templates write them: which format a
//! template's model answers in, a grammar that forces a call in it, and a
//! parser that splits an answer (whole or while it streams) into
//! `reasoning_content`, `content` and `tool_calls`.
//!
//! | format | a call looks like | detected by (in the template) |
//! |---|---|---|
//! | [`ToolFormat::Hermes`] (Qwen 2.5, Hermes 2/3, SmolLM3, the default) | `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` | `<tool_call>`, or nothing else known |
//! | [`ToolFormat::Llama3Json`] (Llama 3.1/3.2/3.3) | `{"name": …, "parameters": {…}}` | `<|start_header_id|>` and `"parameters"` |
//! | [`ToolFormat::FunctionaryV32`] | `>>>name\n{…}` (content is `>>>all\n…`) | `>>>all` |
//!
//! Reasoning: an answer that opens with `<think>` (or a prompt that
//! ends inside one: the template opened it) has its thoughts up to
//! `</think>` split out, unless [`ReasoningFormat::None`].

use serde_json::{json, Map, Value};

/// How a template's model writes tool calls (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name", "arguments"}</tool_call>`.
    Hermes,
    /// A bare `{"name", "parameters"}` object.
    Llama3Json,
    /// `>>>recipient\n…`: `all` for content, else a function's name.
    FunctionaryV32,
}

impl ToolFormat {
    /// The format of the model whose chat template is `source`.
    pub fn detect(source: &str) -> ToolFormat {
        if source.contains(">>>all") {
            ToolFormat::FunctionaryV32
        } else if source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if source.contains("<|start_header_id|>") && source.contains("\"parameters\"") {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::Hermes
        }
    }

    /// Its name, for logs and `/props`.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3Json => "llama3-json",
            ToolFormat::FunctionaryV32 => "functionary-v3.2",
        }
    }
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may call a tool or answer (calls are parsed).
    Auto,
    /// No calls: the answer is content, never parsed for calls.
    None,
    /// A call must come (forced by a grammar).
    Required,
    /// This function must be called.
    Function(String),
}

impl ToolChoice {
    /// From a request's `tool_choice` (absent: auto): `"auto"`, `"none"`,
    /// `"required"` or `{"type": "function", "function": {"name": …}}`.
    pub fn from_json(v: Option<&Value>) -> Result<ToolChoice, String> {
        match v {
            None | Some(Value::Null) => Ok(ToolChoice::Auto),
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(format!(
                    "tool_choice {other:?}: expected \"auto\", \"none\", \"required\" or a function"
                )),
            },
            Some(Value::Object(o)) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(|n| ToolChoice::Function(n.to_string()))
                .ok_or_else(|| "tool_choice: an object needs function.name".to_string()),
            Some(_) => Err("tool_choice must be a string or an object".into()),
        }
    }
}

/// One tool a request offers: a function's name and its parameters'
/// JSON schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The function's name.
    pub name: String,
    /// Its parameters' JSON schema (`{}`: any object).
    pub parameters: Value,
}

/// Longest tool name taken.
const MAX_NAME: usize = 256;

/// The tools of a request's `tools` array: `{"type": "function",
/// "function": {"name", "parameters"}}` each, or `{"type":
/// "code_interpreter"}` (a `python` function taking `code`).
pub fn tools_from_json(v: &Value) -> Result<Vec<Tool>, String> {
    let list = v.as_array().ok_or("`tools` must be an array")?;
    let mut out: Vec<Tool> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
        let tool = match kind {
            "function" => {
                let f = t
                    .get("function")
                    .and_then(Value::as_object)
                    .ok_or(format!("tools[{i}]: no `function` object"))?;
                let name = f
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty() && n.len() <= MAX_NAME)
                    .ok_or(format!("tools[{i}]: function.name must be a non-empty string of at most {MAX_NAME} bytes"))?;
                if name.contains(['\n', '"', '<', '>']) {
                    return Err(format!(
                        "tools[{i}]: function.name {name:?} holds a character a call cannot carry"
                    ));
                }
                let parameters = match f.get("parameters") {
                    None | Some(Value::Null) => json!({"type": "object"}),
                    Some(p @ Value::Object(_)) => p.clone(),
                    Some(_) => {
                        return Err(format!("tools[{i}]: function.parameters must be an object"))
                    }
                };
                Tool {
                    name: name.to_string(),
                    parameters,
                }
            }
            "code_interpreter" => Tool {
                name: "python".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"code": {"type": "string"}},
                    "required": ["code"],
                }),
            },
            other => return Err(format!("tools[{i}]: type {other:?} is not supported")),
        };
        if out.iter().any(|o| o.name == tool.name) {
            return Err(format!("tools[{i}]: a second tool named {:?}", tool.name));
        }
        out.push(tool);
    }
    Ok(out)
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
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The GBNF grammar (root `root`) that forces the answer to be a call in
/// `format` to one of `tools` (or to the one `choice` names), or several
/// when `parallel`; `None` when `choice` forces nothing (auto, none).
pub fn call_grammar(
    format: ToolFormat,
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
) -> Result<Option<String>, String> {
    let chosen: Vec<&Tool> = match choice {
        ToolChoice::Auto | ToolChoice::None => return Ok(None),
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Function(n) => tools.iter().filter(|t| &t.name == n).collect(),
    };
    if chosen.is_empty() {
        return Err(match choice {
            ToolChoice::Function(n) => {
                format!("tool_choice names {n:?}, which is not among `tools`")
            }
            _ => "tool_choice \"required\" needs at least one tool".into(),
        });
    }
    let mut rules = String::new();
    let mut alts = Vec::new();
    for (i, t) in chosen.iter().enumerate() {
        let args = format!("args-{i}");
        rules.push_str(
            &glint_grammar::json_schema_rules(&t.parameters, &args)
                .map_err(|e| format!("tool {:?}: its parameters: {e}", t.name))?,
        );
        // The name as JSON writes it (quoted, escaped), as a GBNF literal.
        let json_name = lit(&Value::from(t.name.as_str()).to_string());
        let body = match format {
            ToolFormat::Hermes => {
                format!(r#"{json_name} space "," space "\"arguments\"" space ":" space {args}"#)
            }
            ToolFormat::Llama3Json => {
                format!(r#"{json_name} space "," space "\"parameters\"" space ":" space {args}"#)
            }
            ToolFormat::FunctionaryV32 => format!("{} \"\\n\" {args}", lit(&t.name)),
        };
        rules.push_str(&format!("tool-{i} ::= {body}\n"));
        alts.push(format!("tool-{i}"));
    }
    let one = format!("({})", alts.join(" | "));
    let root = match format {
        ToolFormat::Hermes => {
            rules.push_str(&format!(
                "call ::= \"<tool_call>\\n{{\" space \"\\\"name\\\"\" space \":\" space {one} \"}}\" space \"</tool_call>\"\n"
            ));
            if parallel {
                "root ::= call (space call)*\n".to_string()
            } else {
                "root ::= call\n".to_string()
            }
        }
        ToolFormat::Llama3Json => {
            rules.push_str(&format!(
                "call ::= \"{{\" space \"\\\"name\\\"\" space \":\" space {one} \"}}\" space\n"
            ));
            "root ::= call\n".to_string()
        }
        ToolFormat::FunctionaryV32 => {
            rules.push_str("all-text ::= ([^>] | \">\" [^>] | \">>\" [^>])*\n");
            let more = if parallel { " (\">>>\" call)*" } else { "" };
            rules.push_str(&format!("call ::= {one}\n"));
            format!("root ::= (call | \"all\\n\" all-text \">>>\" call){more}\n")
        }
    };
    Ok(Some(format!(
        "{root}{rules}{}",
        glint_grammar::JSON_PRIMITIVES
    )))
}

/// With `tool_choice` auto: the grammar of a call (as
/// [`call_grammar`] forces one) and the text that starts it, for a lazy
/// grammar (the answer is free until the model opens a call, then the
/// call must be well formed). `None` for formats whose calls have no
/// opening text of their own (Functionary's recipients).
pub fn lazy_call_grammar(
    format: ToolFormat,
    tools: &[Tool],
    parallel: bool,
) -> Result<Option<(String, String)>, String> {
    let trigger = match format {
        ToolFormat::Hermes => "<tool_call>",
        ToolFormat::Llama3Json => "{\"name\"",
        ToolFormat::FunctionaryV32 => return Ok(None),
    };
    Ok(
        call_grammar(format, tools, &ToolChoice::Required, parallel)?
            .map(|g| (g, trigger.to_string())),
    )
}

/// `--reasoning-format`: what becomes of a model's `<think>` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Left in `content` as the model wrote it.
    None,
    /// Split out into `reasoning_content` (llama-server's `auto` and
    /// `deepseek`).
    #[default]
    Split,
    /// `deepseek-legacy`: split out, and also left in `content` (whole
    /// answers only).
    Both,
}

impl ReasoningFormat {
    /// From llama-server's names: `none`, `auto`, `deepseek`,
    /// `deepseek-legacy`.
    pub fn parse(s: &str) -> Option<ReasoningFormat> {
        match s {
            "none" => Some(ReasoningFormat::None),
            "auto" | "deepseek" => Some(ReasoningFormat::Split),
            "deepseek-legacy" => Some(ReasoningFormat::Both),
            _ => None,
        }
    }
}

/// One parsed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, a JSON object's text.
    pub arguments: String,
}

/// An answer taken apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The thoughts (`<think>` … `</think>`), without the tags.
    pub reasoning: String,
    /// What is said to the user.
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
}

const THINK: &str = "<think>";
const UNTHINK: &str = "</think>";

/// How to take a request's answers apart.
#[derive(Clone, Debug)]
pub struct OutputParser {
    /// The template's tool format, `None` when calls are not parsed
    /// (no tools, or `tool_choice: "none"`).
    pub calls: Option<ToolFormat>,
    /// The template's format, for what it writes even without tools
    /// (Functionary's `all\n` recipient).
    pub format: ToolFormat,
    /// What becomes of `<think>`.
    pub reasoning: ReasoningFormat,
    /// The prompt ended inside `<think>`: the answer starts in thought.
    pub thinking_open: bool,
}

/// The length of the longest end of `s` that begins `marker` (a marker
/// that may still be coming).
fn partial_marker(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && marker.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

/// Whether the prompt `text` ends inside an opened `<think>` block.
pub fn prompt_opens_thinking(text: &str) -> bool {
    text.trim_end().ends_with(THINK)
}

/// The first JSON value at the start of `s` and where it ends; `Err(true)`
/// when `s` is a value's unfinished beginning, `Err(false)` when it is not
/// JSON.
fn json_prefix(s: &str) -> Result<(Value, usize), bool> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Ok((v, it.byte_offset())),
        Some(Err(e)) => Err(e.is_eof()),
        None => Err(true),
    }
}

impl OutputParser {
    /// `text` taken apart. With `partial` (the answer is still coming), a
    /// marker's or a call's unfinished beginning at the end is held back
    /// from every field, so what a partial parse returns only ever grows.
    pub fn parse(&self, text: &str, partial: bool) -> Parsed {
        let mut out = Parsed::default();
        let rest = self.split_reasoning(text, partial, &mut out);
        let Some(rest) = rest else {
            if partial {
                out.reasoning.truncate(out.reasoning.trim_end().len());
            }
            return out;
        };
        let content_text = match self.reasoning {
            ReasoningFormat::Both if !partial && !out.reasoning.is_empty() => text.to_string(),
            _ => rest.to_string(),
        };
        match self.calls {
            None => {
                let body = match self.format {
                    ToolFormat::FunctionaryV32 => strip_all_recipient(&content_text, partial),
                    _ => Some(content_text.as_str()),
                };
                if let Some(body) = body {
                    out.content.push_str(body);
                }
            }
            Some(ToolFormat::Hermes) => parse_hermes(&content_text, partial, &mut out),
            Some(ToolFormat::Llama3Json) => parse_llama3(&content_text, partial, &mut out),
            Some(ToolFormat::FunctionaryV32) => parse_functionary(&content_text, partial, &mut out),
        }
        if partial {
            // Whitespace at the end may yet be trimmed (before a call, at
            // the end of thoughts): held back until text follows it.
            out.content.truncate(out.content.trim_end().len());
            out.reasoning.truncate(out.reasoning.trim_end().len());
        }
        out
    }

    /// Puts the thoughts into `out.reasoning` and returns what follows
    /// them (`None`: nothing follows yet).
    fn split_reasoning<'t>(
        &self,
        text: &'t str,
        partial: bool,
        out: &mut Parsed,
    ) -> Option<&'t str> {
        if self.reasoning == ReasoningFormat::None {
            return Some(text);
        }
        let inner = if self.thinking_open {
            text
        } else {
            let t = text.trim_start();
            if let Some(r) = t.strip_prefix(THINK) {
                r
            } else if partial && THINK.starts_with(t) {
                // Nothing yet, or `<think>` may be coming.
                return None;
            } else {
                return Some(text);
            }
        };
        match inner.find(UNTHINK) {
            Some(end) => {
                out.reasoning = inner[..end].trim().to_string();
                Some(inner[end + UNTHINK.len()..].trim_start())
            }
            None => {
                let keep = if partial {
                    partial_marker(inner, UNTHINK)
                } else {
                    0
                };
                let thought = &inner[..inner.len() - keep];
                out.reasoning = if partial {
                    thought.trim_start().to_string()
                } else {
                    thought.trim().to_string()
                };
                None
            }
        }
    }
}

/// Functionary's content without its `all\n` recipient (`None`: the
/// recipient is not complete yet).
fn strip_all_recipient(text: &str, partial: bool) -> Option<&str> {
    if let Some(r) = text.strip_prefix("all\n") {
        return Some(r);
    }
    if partial && "all\n".starts_with(text) {
        return None;
    }
    Some(text)
}

/// A call's arguments as text: an object's (or a string holding one).
fn arguments_text(v: &Value) -> Option<String> {
    match v {
        Value::Object(_) => Some(v.to_string()),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => Some(o.to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// A `{"name", "arguments"|"parameters"}` object as a call.
fn call_of(v: &Value) -> Option<ToolCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.to_string();
    let args = o
        .get("arguments")
        .or_else(|| o.get("parameters"))
        .map(arguments_text)
        .unwrap_or_else(|| Some("{}".into()))?;
    Some(ToolCall {
        name,
        arguments: args,
    })
}

fn push_content(out: &mut Parsed, s: &str) {
    out.content.push_str(s);
}

/// `<tool_call>{…}</tool_call>` blocks; the text around them is content.
fn parse_hermes(text: &str, partial: bool, out: &mut Parsed) {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let mut rest = text;
    loop {
        let Some(at) = rest.find(OPEN) else {
            let keep = if partial {
                partial_marker(rest, OPEN)
            } else {
                0
            };
            push_content(out, &rest[..rest.len() - keep]);
            break;
        };
        push_content(out, &rest[..at]);
        let body_start = &rest[at + OPEN.len()..];
        let (body, after, closed) = match body_start.find(CLOSE) {
            Some(end) => (&body_start[..end], &body_start[end + CLOSE.len()..], true),
            None => (body_start, "", false),
        };
        if !closed && partial {
            // Held back until it closes (or the answer ends).
            break;
        }
        let call = json_prefix(body.trim_start())
            .ok()
            .and_then(|(v, _)| call_of(&v));
        match call {
            Some(c) => out.calls.push(c),
            None => {
                push_content(out, &rest[at..rest.len() - after.len()]);
            }
        }
        rest = after;
        if !closed {
            break;
        }
    }
    trim_around_calls(out);
}

/// Content beside calls loses the whitespace that only separated them.
fn trim_around_calls(out: &mut Parsed) {
    if !out.calls.is_empty() {
        let t = out.content.trim_end().len();
        out.content.truncate(t);
    }
}

/// Llama 3's bare `{"name": …, "parameters": {…}}` objects: content is the
/// text before the first.
fn parse_llama3(text: &str, partial: bool, out: &mut Parsed) {
    let mut i = 0;
    let mut content_end = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if bytes[i] != b'{' {
            i += 1;
            continue;
        }
        match json_prefix(&text[i..]) {
            Ok((v, len)) => match call_of(&v) {
                Some(c) if looks_like_call(&v) => {
                    push_content(out, &text[content_end..i]);
                    out.calls.push(c);
                    i += len;
                    // Calls may be separated by `;` or whitespace.
                    while i < bytes.len() && (bytes[i] == b';' || bytes[i].is_ascii_whitespace()) {
                        i += 1;
                    }
                    content_end = i;
                }
                _ => i += len,
            },
            Err(true) if partial => {
                // Perhaps a call under way: held back.
                push_content(out, &text[content_end..i]);
                trim_around_calls(out);
                return;
            }
            Err(_) => i += 1,
        }
    }
    push_content(out, &text[content_end..]);
    trim_around_calls(out);
}

/// An object is a call when it has a string `name` and `parameters` or
/// `arguments` (not any JSON a model prints).
fn looks_like_call(v: &Value) -> bool {
    v.get("name").is_some_and(Value::is_string)
        && (v.get("parameters").is_some() || v.get("arguments").is_some())
}

/// Functionary v3.2: `recipient\nbody` segments split by `>>>`.
fn parse_functionary(text: &str, partial: bool, out: &mut Parsed) {
    let segments: Vec<&str> = text.split(">>>").collect();
    let n = segments.len();
    for (k, seg) in segments.iter().enumerate() {
        let last = k + 1 == n;
        let Some(nl) = seg.find('\n') else {
            if !(seg.trim().is_empty() || partial && last) {
                push_content(out, seg);
            }
            continue;
        };
        let (recipient, body) = (seg[..nl].trim(), &seg[nl + 1..]);
        if recipient == "all" {
            let keep = if partial && last {
                partial_marker(body, ">>>")
            } else {
                0
            };
            push_content(out, &body[..body.len() - keep]);
            continue;
        }
        let b = body.trim();
        match json_prefix(b) {
            Ok((v @ Value::Object(_), _)) => out.calls.push(ToolCall {
                name: recipient.to_string(),
                arguments: v.to_string(),
            }),
            Err(true) if partial && last => {}
            _ if partial && last => {}
            _ if recipient == "python" => out.calls.push(ToolCall {
                name: recipient.to_string(),
                arguments: json!({ "code": body }).to_string(),
            }),
            _ => push_content(out, seg),
        }
    }
    trim_around_calls(out);
}

/// A change a stream sends: new reasoning, new content, or a whole call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// More `reasoning_content`.
    Reasoning(String),
    /// More `content`.
    Content(String),
    /// Call number `.0`, whole.
    Call(usize, ToolCall),
}

/// A streamed answer taken apart as it comes: each piece of text in, the
/// deltas it makes certain out.
#[derive(Clone, Debug)]
pub struct StreamParser {
    parser: OutputParser,
    text: String,
    sent_reasoning: usize,
    sent_content: usize,
    sent_calls: usize,
}

impl StreamParser {
    /// A stream taken apart by `parser`.
    pub fn new(parser: OutputParser) -> StreamParser {
        StreamParser {
            parser,
            text: String::new(),
            sent_reasoning: 0,
            sent_content: 0,
            sent_calls: 0,
        }
    }

    /// The deltas `piece` makes certain.
    pub fn push(&mut self, piece: &str) -> Vec<Delta> {
        self.text.push_str(piece);
        let p = self.parser.parse(&self.text, true);
        self.diff(p)
    }

    /// The answer is whole: whatever was held back.
    pub fn finish(&mut self) -> Vec<Delta> {
        let p = self.parser.parse(&self.text, false);
        self.diff(p)
    }

    /// The whole answer so far, parsed as finished.
    pub fn parsed(&self) -> Parsed {
        self.parser.parse(&self.text, false)
    }

    fn diff(&mut self, p: Parsed) -> Vec<Delta> {
        let mut out = Vec::new();
        if p.reasoning.len() > self.sent_reasoning
            && p.reasoning.is_char_boundary(self.sent_reasoning)
        {
            out.push(Delta::Reasoning(
                p.reasoning[self.sent_reasoning..].to_string(),
            ));
            self.sent_reasoning = p.reasoning.len();
        }
        if p.content.len() > self.sent_content && p.content.is_char_boundary(self.sent_content) {
            out.push(Delta::Content(p.content[self.sent_content..].to_string()));
            self.sent_content = p.content.len();
        }
        for (i, c) in p.calls.into_iter().enumerate().skip(self.sent_calls) {
            out.push(Delta::Call(i, c));
            self.sent_calls = i + 1;
        }
        out
    }
}

/// A message's `tool_calls` arguments as templates want them: objects, not
/// the JSON strings OpenAI clients send (llama.cpp does the same before it
/// renders). Arguments that are not JSON stay as they are.
pub fn arguments_as_objects(messages: &mut [Value]) {
    for m in messages {
        let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) else {
            continue;
        };
        for c in calls {
            let Some(f) = c.get_mut("function").and_then(Value::as_object_mut) else {
                continue;
            };
            if let Some(Value::String(s)) = f.get("arguments") {
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s) {
                    f.insert("arguments".into(), v);
                }
            }
        }
    }
}

/// The OpenAI shape of a parsed call: `{"id", "type": "function",
/// "function": {"name", "arguments"}}`.
pub fn call_json(call: &ToolCall, id: &str) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), json!(call.name));
    f.insert("arguments".into(), json!(call.arguments));
    json!({ "id": id, "type": "function", "function": Value::Object(f) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use glint_grammar::{Grammar, Matcher};
    use std::sync::Arc;

    fn tools() -> Vec<Tool> {
        tools_from_json(&json!([
            {"type": "function", "function": {"name": "test", "parameters": {
                "type": "object",
                "properties": {"success": {"type": "boolean", "const": true}},
                "required": ["success"]}}},
            {"type": "code_interpreter"},
        ]))
        .unwrap()
    }

    fn parser(calls: Option<ToolFormat>, format: ToolFormat) -> OutputParser {
        OutputParser {
            calls,
            format,
            reasoning: ReasoningFormat::Split,
            thinking_open: false,
        }
    }

    fn accepts(grammar: &str, text: &str) -> bool {
        let g = Arc::new(Grammar::parse(grammar).unwrap());
        let mut m = Matcher::new(g);
        m.advance_str(text) && m.is_accepting()
    }

    /// Feeds `text` a few bytes at a time and checks the deltas add up to
    /// the whole parse, and that nothing held back leaks early.
    fn streamed(p: &OutputParser, text: &str, step: usize) -> Parsed {
        let mut s = StreamParser::new(p.clone());
        let mut got = Parsed::default();
        let apply = |ds: Vec<Delta>, got: &mut Parsed| {
            for d in ds {
                match d {
                    Delta::Reasoning(r) => got.reasoning.push_str(&r),
                    Delta::Content(c) => {
                        assert!(!c.is_empty());
                        got.content.push_str(&c)
                    }
                    Delta::Call(i, c) => {
                        assert_eq!(i, got.calls.len());
                        got.calls.push(c)
                    }
                }
            }
        };
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(step) {
            let piece: String = chunk.iter().collect();
            apply(s.push(&piece), &mut got);
        }
        apply(s.finish(), &mut got);
        got
    }

    #[test]
    fn formats_are_told_by_their_templates() {
        assert_eq!(
            ToolFormat::detect("{{ '>>>all\\n' }}"),
            ToolFormat::FunctionaryV32
        );
        assert_eq!(ToolFormat::detect("<tool_call>\\n"), ToolFormat::Hermes);
        assert_eq!(
            ToolFormat::detect(
                "<|start_header_id|> {\"name\": function name, \"parameters\": dictionary}"
            ),
            ToolFormat::Llama3Json
        );
        assert_eq!(ToolFormat::detect("<|im_start|>"), ToolFormat::Hermes);
    }

    #[test]
    fn hermes_calls_parse_whole_and_streamed() {
        let p = parser(Some(ToolFormat::Hermes), ToolFormat::Hermes);
        let text = "Let me run it.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}\n</tool_call>";
        let whole = p.parse(text, false);
        assert_eq!(whole.content, "Let me run it.");
        assert_eq!(
            whole.calls,
            vec![ToolCall {
                name: "python".into(),
                arguments: r#"{"code":"print(1)"}"#.into()
            }]
        );
        for step in [1, 2, 3, 7, 50] {
            assert_eq!(streamed(&p, text, step), whole, "step {step}");
        }
        // The partial marker is never sent as content.
        let mut s = StreamParser::new(p.clone());
        let ds = s.push("Hi <tool_c");
        assert_eq!(ds, vec![Delta::Content("Hi".into())]);
        // A broken call is content, not lost.
        let bad = p.parse("<tool_call>not json</tool_call>", false);
        assert!(bad.calls.is_empty());
        assert_eq!(bad.content, "<tool_call>not json</tool_call>");
    }

    #[test]
    fn llama3_calls_parse_whole_and_streamed() {
        let p = parser(Some(ToolFormat::Llama3Json), ToolFormat::Llama3Json);
        let text = "def f():\n    pass\n{\"name\": \"python\", \"parameters\": {\"code\": \"x = {1: 2}\"}}";
        let whole = p.parse(text, false);
        assert_eq!(whole.content, "def f():\n    pass");
        assert_eq!(whole.calls[0].name, "python");
        assert_eq!(whole.calls[0].arguments, r#"{"code":"x = {1: 2}"}"#);
        for step in [1, 4, 9] {
            assert_eq!(streamed(&p, text, step), whole, "step {step}");
        }
        // JSON that is not a call stays content.
        let plain = p.parse("a dict: {\"a\": 1} ok", false);
        assert!(plain.calls.is_empty());
        assert_eq!(plain.content, "a dict: {\"a\": 1} ok");
        assert_eq!(streamed(&p, "a dict: {\"a\": 1} ok", 2), plain);
    }

    #[test]
    fn functionary_recipients_parse_whole_and_streamed() {
        let p = parser(Some(ToolFormat::FunctionaryV32), ToolFormat::FunctionaryV32);
        let text = "all\nSure.>>>test\n{\n  \"success\": true\n}";
        let whole = p.parse(text, false);
        assert_eq!(whole.content, "Sure.");
        assert_eq!(
            whole.calls,
            vec![ToolCall {
                name: "test".into(),
                arguments: r#"{"success":true}"#.into()
            }]
        );
        for step in [1, 2, 5] {
            assert_eq!(streamed(&p, text, step), whole, "step {step}");
        }
        // Raw code for python becomes {"code": …}.
        let py = p.parse("python\nprint('hi')", false);
        assert_eq!(py.calls[0].arguments, r#"{"code":"print('hi')"}"#);
        // Without tools the recipient is still not content.
        let plain = parser(None, ToolFormat::FunctionaryV32);
        assert_eq!(plain.parse("all\nHello", false).content, "Hello");
        assert_eq!(streamed(&plain, "all\nHello", 1).content, "Hello");
    }

    #[test]
    fn thoughts_are_split_out() {
        let p = parser(None, ToolFormat::Hermes);
        let text = "<think>\nsum it\n</think>\n\nIt is 4.";
        let whole = p.parse(text, false);
        assert_eq!(
            (whole.reasoning.as_str(), whole.content.as_str()),
            ("sum it", "It is 4.")
        );
        for step in [1, 3] {
            let s = streamed(&p, text, step);
            assert_eq!(s.content, whole.content, "step {step}");
            assert_eq!(s.reasoning, whole.reasoning, "step {step}");
        }
        // Opened by the prompt.
        let open = OutputParser {
            thinking_open: true,
            ..p.clone()
        };
        let o = open.parse("hmm</think>ok", false);
        assert_eq!((o.reasoning.as_str(), o.content.as_str()), ("hmm", "ok"));
        // Unfinished thoughts are reasoning.
        assert_eq!(p.parse("<think>hmm", false).reasoning, "hmm");
        // none keeps them.
        let none = OutputParser {
            reasoning: ReasoningFormat::None,
            ..p.clone()
        };
        assert_eq!(none.parse(text, false).content, text);
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
    }

    #[test]
    fn forced_grammars_take_calls_and_refuse_the_rest() {
        let t = tools();
        let g = call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Required, false)
            .unwrap()
            .unwrap();
        assert!(accepts(
            &g,
            "<tool_call>\n{\"name\": \"test\", \"arguments\": {\"success\": true}}\n</tool_call>"
        ));
        assert!(accepts(
            &g,
            "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}</tool_call>"
        ));
        assert!(!accepts(
            &g,
            "<tool_call>\n{\"name\": \"test\", \"arguments\": {\"success\": false}}</tool_call>"
        ));
        assert!(!accepts(&g, "Hello"));
        let g = call_grammar(
            ToolFormat::Llama3Json,
            &t,
            &ToolChoice::Function("python".into()),
            false,
        )
        .unwrap()
        .unwrap();
        assert!(accepts(
            &g,
            "{\"name\": \"python\", \"parameters\": {\"code\": \"x\"}}"
        ));
        assert!(!accepts(
            &g,
            "{\"name\": \"test\", \"parameters\": {\"success\": true}}"
        ));
        let g = call_grammar(ToolFormat::FunctionaryV32, &t, &ToolChoice::Required, true)
            .unwrap()
            .unwrap();
        assert!(accepts(&g, "test\n{\"success\": true}"));
        assert!(accepts(
            &g,
            "all\nok > fine>>>test\n{\"success\": true}>>>python\n{\"code\": \"1\"}"
        ));
        assert!(!accepts(&g, "all\nonly words"));
        assert_eq!(
            call_grammar(ToolFormat::Hermes, &t, &ToolChoice::Auto, false),
            Ok(None)
        );
        assert!(call_grammar(
            ToolFormat::Hermes,
            &t,
            &ToolChoice::Function("nope".into()),
            false
        )
        .is_err());
        assert!(call_grammar(ToolFormat::Hermes, &[], &ToolChoice::Required, false).is_err());
    }

    #[test]
    fn lazy_grammars_start_at_the_calls_opening() {
        let t = tools();
        let (g, trigger) = lazy_call_grammar(ToolFormat::Hermes, &t, false)
            .unwrap()
            .unwrap();
        assert_eq!(trigger, "<tool_call>");
        assert!(accepts(
            &g,
            "<tool_call>\n{\"name\": \"test\", \"arguments\": {\"success\": true}}</tool_call>"
        ));
        let (g, trigger) = lazy_call_grammar(ToolFormat::Llama3Json, &t, false)
            .unwrap()
            .unwrap();
        assert!(accepts(
            &g,
            &format!("{trigger}: \"python\", \"parameters\": {{\"code\": \"1\"}}}}")
        ));
        assert_eq!(
            lazy_call_grammar(ToolFormat::FunctionaryV32, &t, false),
            Ok(None)
        );
    }

    #[test]
    fn bad_tools_and_choices_are_named() {
        assert!(tools_from_json(&json!({})).is_err());
        assert!(tools_from_json(&json!([{"type": "function"}]))
            .unwrap_err()
            .contains("tools[0]"));
        assert!(
            tools_from_json(&json!([{"type": "function", "function": {"name": "a\nb"}}])).is_err()
        );
        assert!(tools_from_json(&json!([{"type": "retrieval"}])).is_err());
        assert_eq!(
            ToolChoice::from_json(Some(&json!("none"))),
            Ok(ToolChoice::None)
        );
        assert_eq!(
            ToolChoice::from_json(Some(
                &json!({"type": "function", "function": {"name": "f"}})
            )),
            Ok(ToolChoice::Function("f".into()))
        );
        assert!(ToolChoice::from_json(Some(&json!("always"))).is_err());
    }

    #[test]
    fn string_arguments_become_objects_for_templates() {
        let mut m = vec![json!({"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})];
        arguments_as_objects(&mut m);
        assert_eq!(
            m[0]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
    }
}
