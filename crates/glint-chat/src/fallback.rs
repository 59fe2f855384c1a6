//! Turn formats for models whose GGUF has no `tokenizer.chat_template`.
//!
//! Each is itself a Jinja template, rendered by the same engine as a
//! model's own, so there is one code path. They take the same context
//! (`messages`, `add_generation_prompt`, `bos_token`, ...).

/// Gemma 3's official template (google/gemma-3-*-it), verbatim: the system
/// message is folded into the first user turn, `assistant` is `model`.
pub const GEMMA3: &str = include_str!("fallback/gemma3.jinja");

/// The Llama 3 Instruct header format, one `<|start_header_id|>role
/// <|end_header_id|>\n\n content <|eot_id|>` per message, contents trimmed,
/// `bos_token` first. (Llama 3.0 Instruct's template; 3.1+ add a dated
/// system header that a model without a template cannot be assumed to
/// want.)
pub const LLAMA3: &str = include_str!("fallback/llama3.jinja");

/// ChatML: `<|im_start|>role\ncontent<|im_end|>\n` per message. What most
/// small instruct models (Qwen, SmolLM, Hermes) were tuned on, so the least
/// bad guess for a model nobody told us about.
pub const CHATML: &str = include_str!("fallback/chatml.jinja");

/// One known architecture family.
struct Row {
    /// Does `general.architecture` belong to the family?
    arch: fn(&str) -> bool,
    /// A token the vocabulary must have too, when the architecture name is
    /// shared with models in other formats.
    needs_token: Option<&'static str>,
    source: &'static str,
    name: &'static str,
}

const TABLE: &[Row] = &[
    Row {
        arch: |arch| arch.starts_with("gemma"),
        needs_token: None,
        source: GEMMA3,
        name: "gemma3",
    },
    Row {
        arch: |arch| arch == "llama",
        needs_token: Some("<|start_header_id|>"),
        source: LLAMA3,
        name: "llama3",
    },
];

/// The template (source, name) for a model without one: its architecture's
/// known turn format if there is one, else ChatML.
///
/// `arch` is `general.architecture`; `has_token` says whether the
/// vocabulary has a token with that exact text. The Llama 3 format is
/// chosen only for `llama` models with `<|start_header_id|>`: `llama` is
/// also the architecture of Llama 2, Mistral, SmolLM and many others.
pub fn fallback_template(
    arch: &str,
    has_token: impl Fn(&str) -> bool,
) -> (&'static str, &'static str) {
    for row in TABLE {
        if (row.arch)(arch) && row.needs_token.is_none_or(&has_token) {
            return (row.source, row.name);
        }
    }
    (CHATML, "chatml")
}
