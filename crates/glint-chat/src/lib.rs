//! Chat templates: a conversation in, the prompt text a model was tuned on
//! out.
//!
//! A GGUF model carries its chat template as Jinja source in
//! `tokenizer.chat_template`, copied from the Hugging Face
//! `tokenizer_config.json`. Those templates are written against Python's
//! jinja2 as transformers' `apply_chat_template` sets it up, and a prompt
//! that differs by one space or newline from what the model saw in training
//! tokenizes differently and answers worse. So [`ChatTemplate`] renders
//! them with [`minijinja`] set up the same way, and the tests hold every
//! render to jinja2's output byte for byte (`fixtures/chat/`).
//!
//! What "set up the same way" means:
//! - `trim_blocks` and `lstrip_blocks` on, a single trailing newline of the
//!   source dropped (jinja2's default `keep_trailing_newline=False`), loop
//!   controls (`break`, `continue`) on;
//! - undefined values lenient, as jinja2's default `Undefined`: printing or
//!   iterating one is fine, `message.tool_calls` on a message without them
//!   is undefined and false;
//! - context `messages`, `tools` (`none` when not given, as transformers
//!   passes `tools=None`), `documents` (`none`), `add_generation_prompt`,
//!   `bos_token`, `eos_token`;
//! - globals `raise_exception(msg)` (becomes [`ChatError::Template`]) and
//!   `strftime_now(fmt)` (local time, or the fixed time given to
//!   [`ChatTemplate::with_fixed_now`]);
//! - `tojson` is Python's `json.dumps(ensure_ascii=False)`: `", "` and
//!   `": "` separators, no HTML escaping, Python float reprs;
//! - Python's string, list and dict methods (`.strip()`, `.startswith()`,
//!   `.items()`, `.split()`, ...) through `minijinja-contrib`'s pycompat,
//!   with `strip`/`lstrip`/`rstrip` and the `trim` filter using Python's
//!   idea of whitespace.
//!
//! Models without a template get a known format for their architecture
//! ([`fallback_template`]), rendered by the same engine.
//!
//! Templates come from model files, so they are hostile input: a syntax
//! error is an error from [`ChatTemplate::new`] naming the line, and a
//! render is bounded by minijinja's fuel (instruction count) and recursion
//! limits.
#![deny(missing_docs)]

mod error;
mod fallback;
mod pyjson;
pub mod tools;

use std::sync::Arc;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, ErrorKind, State, UndefinedBehavior};
use serde::Serialize;

pub use error::{ChatError, Result};
pub use fallback::{fallback_template, CHATML, GEMMA3, LLAMA3};
/// The date-time type [`ChatTemplate::with_fixed_now`] takes.
pub use jiff::civil::DateTime;

/// The name the template is stored under inside its environment; it shows
/// up in minijinja's error messages.
const NAME: &str = "chat_template";

/// Instructions one render may execute. The largest real template over a
/// long conversation with tools takes well under a million; this only stops
/// a hostile template from spinning for minutes.
const FUEL: u64 = 50_000_000;

/// A plain `{role, content}` message. Anything `Serialize` works as a
/// message (`serde_json::Value` for tool calls, names and the rest); this
/// is the common case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The text of the message.
    pub content: String,
}

impl Message {
    /// A message with this role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template plus the special tokens it is rendered with.
///
/// Compiled once in [`ChatTemplate::new`]; [`ChatTemplate::render`] takes
/// `&self` and can be called from many threads.
pub struct ChatTemplate {
    // Owns the template source (`add_template_owned`), hence `'static`.
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// Carried as the source of the minijinja error that `raise_exception`
/// returns, so [`ChatTemplate::render`] can tell the template's own refusal
/// from a failure.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

impl ChatTemplate {
    /// Compiles `source` (Jinja, as in `tokenizer.chat_template`) to be
    /// rendered with these special tokens. A model whose tokenizer has no
    /// BOS token (Qwen) passes `""`, which renders as transformers renders
    /// its undefined `bos_token`.
    ///
    /// Errors with [`ChatError::Compile`], naming the line, if `source` is
    /// not valid Jinja.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| compile_error(&e))?;
        env.set_syntax(syntax);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(python_method);
        env.add_filter("tojson", pyjson::tojson);
        env.add_filter("trim", py_trim);
        env.add_test("iterable", is_iterable);
        env.add_test("sequence", is_sequence);
        env.add_function("raise_exception", raise_exception);
        set_clock(&mut env, None);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| compile_error(&e))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// Makes `strftime_now` see `now` instead of the local time, for
    /// reproducible prompts and tests. (Llama 3.2's template prints today's
    /// date into the system header.)
    pub fn with_fixed_now(mut self, now: DateTime) -> ChatTemplate {
        set_clock(&mut self.env, Some(now));
        self
    }

    /// Renders `messages` as transformers' `apply_chat_template(messages,
    /// tools=tools, add_generation_prompt=..., tokenize=False)` does.
    ///
    /// `add_generation_prompt` appends the opening of an assistant turn, for
    /// generating a reply. `tools` is the list of tool (function) schemas,
    /// for templates that describe them to the model.
    ///
    /// Errors: [`ChatError::Template`] when the template calls
    /// `raise_exception` (carrying its message), [`ChatError::Render`] for
    /// anything else that fails while rendering, [`ChatError::Input`] if a
    /// message does not serialize.
    pub fn render<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String> {
        self.render_with(
            messages,
            add_generation_prompt,
            tools,
            &serde_json::Map::new(),
        )
    }

    /// As [`ChatTemplate::render`], with more variables for the template
    /// (`extra`: llama-server's `chat_template_kwargs`, `enable_thinking`,
    /// `date_string`, ...); the standard ones above win over them.
    pub fn render_with<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let messages = to_value("messages", messages)?;
        let tools = match tools {
            Some(tools) => to_value("tools", tools)?,
            None => Value::from(()),
        };
        let extra = to_value("extra", extra)?;
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools,
            documents => (),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            ..extra
        };
        let template = self.env.get_template(NAME).map_err(|e| render_error(&e))?;
        template.render(ctx).map_err(|e| render_error(&e))
    }

    /// The BOS token this template renders with.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The EOS token this template renders with.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

fn to_value<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<Value> {
    // Through serde_json first: a failing `Serialize` is an error here, not
    // an "invalid value" that fails at its first use inside the template.
    let json = serde_json::to_value(value).map_err(|e| ChatError::Input {
        what,
        message: e.to_string(),
    })?;
    Ok(Value::from(minijinja::value::Serde(json)))
}

fn compile_error(e: &minijinja::Error) -> ChatError {
    ChatError::Compile {
        line: e.line(),
        message: describe(e),
    }
}

fn render_error(e: &minijinja::Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(Raised(msg)) = err.downcast_ref::<Raised>() {
            return ChatError::Template(msg.clone());
        }
        source = err.source();
    }
    ChatError::Render {
        line: e.line(),
        message: describe(e),
    }
}

/// The kind and detail, without minijinja's `(in chat_template:3)` suffix:
/// the line is its own field.
fn describe(e: &minijinja::Error) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    }
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(
        minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(Raised(message)),
    )
}

/// (Re)defines the `strftime_now(fmt)` global: `fixed`, or the local time
/// at each call. Python's `datetime.now()` is naive local time, so the
/// civil (zone-less) date-time is formatted.
fn set_clock(env: &mut Environment<'static>, fixed: Option<DateTime>) {
    let fixed = Arc::new(fixed);
    env.add_function("strftime_now", move |format: &str| {
        let now = match *fixed {
            Some(now) => now,
            None => jiff::Zoned::now().datetime(),
        };
        jiff::fmt::strtime::format(format, now).map_err(|e| {
            minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("strftime_now({format:?}): {e}"),
            )
        })
    });
}

/// jinja2's `iterable` test, `iter(value)` succeeds: `none` is not
/// iterable there (minijinja iterates it as empty), undefined is. Gemma 3's
/// template tells a `null` content apart from a list of parts this way.
fn is_iterable(value: &Value) -> bool {
    !value.is_none() && (value.is_undefined() || value.try_iter().is_ok())
}

/// jinja2's `sequence` test, `len(value)` and `value[...]` both work:
/// strings and dicts too, not only lists (minijinja's sees lists only).
fn is_sequence(value: &Value) -> bool {
    value.is_undefined()
        || matches!(
            value.kind(),
            ValueKind::String | ValueKind::Seq | ValueKind::Map | ValueKind::Bytes
        )
}

/// Python's `str.isspace()`: Unicode White_Space (what Rust's
/// `char::is_whitespace` tests) plus the four separators `\x1c`..`\x1f`.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// jinja2's `trim`: `str.strip(chars)`.
fn py_trim(value: &str, chars: Option<&str>) -> String {
    match chars {
        Some(chars) => value.trim_matches(|c| chars.contains(c)).to_string(),
        None => value.trim_matches(is_py_space).to_string(),
    }
}

/// `str.strip`, `lstrip` or `rstrip` with a predicate for the characters.
type Trim = fn(&str, &dyn Fn(char) -> bool) -> String;

/// Python methods on template values: `strip`, `lstrip` and `rstrip` on
/// strings here (Python's whitespace), the rest from `minijinja-contrib`.
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, minijinja::Error> {
    if let Some(s) = value.as_str() {
        let trim: Option<Trim> = match method {
            "strip" => Some(|s, f| s.trim_matches(f).to_string()),
            "lstrip" => Some(|s, f| s.trim_start_matches(f).to_string()),
            "rstrip" => Some(|s, f| s.trim_end_matches(f).to_string()),
            _ => None,
        };
        if let Some(trim) = trim {
            let (chars,): (Option<Value>,) = minijinja::value::from_args(args)?;
            let out = match chars.as_ref().filter(|c| !c.is_none()) {
                Some(chars) => {
                    let chars = chars.as_str().ok_or_else(|| {
                        minijinja::Error::new(
                            ErrorKind::InvalidOperation,
                            format!("{method} arg must be None or str, not {}", chars.kind()),
                        )
                    })?;
                    trim(s, &|c| chars.contains(c))
                }
                None => trim(s, &is_py_space),
            };
            return Ok(Value::from(out));
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_whitespace_includes_information_separators() {
        // "\x1c".isspace() is True in Python; Rust's trim leaves it.
        assert_eq!(py_trim("\x1c hi\u{3000}\x1f", None), "hi");
        assert_eq!(py_trim("xxhixx", Some("x")), "hi");
        let t = ChatTemplate::new(
            "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip('\\x1f') }}",
            "",
            "",
        )
        .unwrap();
        let env_out = t
            .env
            .get_template(NAME)
            .unwrap()
            .render(minijinja::context! { s => "\x1c a \x1f" });
        assert_eq!(env_out.unwrap(), "a|a \x1f|\x1c a ");
    }
}

/// llama.cpp's built-in template names (`--chat-template NAME`) glint knows,
/// as Jinja writing what llama.cpp's own formatter writes for them.
const BUILTIN: &[(&str, &str)] = &[
    (
        "chatml",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    ),
    (
        "llama3",
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}\
         {% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    ),
    (
        "command-r",
        "{% for m in messages %}<|START_OF_TURN_TOKEN|>\
         {% if m.role == 'system' %}<|SYSTEM_TOKEN|>{% elif m.role == 'user' %}<|USER_TOKEN|>{% else %}<|CHATBOT_TOKEN|>{% endif %}\
         {{ m.content | trim }}<|END_OF_TURN_TOKEN|>{% endfor %}\
         {% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}",
    ),
    (
        "gemma",
        "{% set ns = namespace(system='') %}{% for m in messages %}\
         {% if m.role == 'system' %}{% set ns.system = ns.system + (m.content | trim) + '\n\n' %}\
         {% else %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n\
         {% if m.role == 'user' %}{{ ns.system }}{% set ns.system = '' %}{% endif %}{{ m.content | trim }}<end_of_turn>\n{% endif %}\
         {% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
    ),
    (
        "zephyr",
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|endoftext|>\n{% endfor %}\
         {% if add_generation_prompt %}<|assistant|>\n{% endif %}",
    ),
];

/// The Jinja source of llama.cpp's built-in template `name`, if glint has
/// it (`chatml`, `llama3`, `command-r`, `gemma`, `zephyr`).
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

#[cfg(test)]
mod builtin_tests {
    use super::*;

    #[test]
    fn builtin_templates_write_what_llama_cpp_writes() {
        let msgs = serde_json::json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "Hi there"},
        ]);
        let msgs = msgs.as_array().unwrap();
        let t = ChatTemplate::new(builtin("command-r").unwrap(), "", "").unwrap();
        assert_eq!(
            t.render(msgs, true, None).unwrap(),
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>\
             <|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>\
             <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
        );
        let t = ChatTemplate::new(builtin("llama3").unwrap(), "", "").unwrap();
        assert_eq!(
            t.render(msgs, true, None).unwrap(),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let t = ChatTemplate::new(builtin("gemma").unwrap(), "", "").unwrap();
        assert_eq!(
            t.render(msgs, true, None).unwrap(),
            "<start_of_turn>user\nYou are a test.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
        );
        for (name, _) in BUILTIN {
            assert!(
                ChatTemplate::new(builtin(name).unwrap(), "", "").is_ok(),
                "{name}"
            );
        }
        assert!(builtin("nope").is_none());
    }
}
