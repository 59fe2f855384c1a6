//! Chat: a model's chat template turned into prompt token ids, and a
//! conversation that keeps its KV cache between turns.
//!
//! [`Chat`] owns the compiled template: the model's own
//! (`tokenizer.chat_template`), else a known format for its architecture
//! ([`glint_chat::fallback_template`]). It renders OpenAI-style messages and
//! tokenizes the result as llama.cpp does (`common_chat_templates_apply`,
//! then tokenize with `add_special` and `parse_special`): a template that
//! writes `{{ bos_token }}` itself (Gemma, Llama 3) would get a second BOS
//! from the tokenizer, so the rendered text loses a leading BOS text when
//! the tokenizer adds one.
//!
//! [`Conversation`] is a chat whose turns reuse the cache: each turn renders
//! the whole conversation, keeps the longest prefix of ids already in
//! sequence 0, drops the rest (`seq_rm`) and decodes only the new suffix. A
//! template may re-render earlier turns differently from how they were
//! generated (trimmed, or a reply re-tokenized), and the prefix match
//! handles that without special cases.

use std::time::Instant;

pub use glint_chat::builtin;
/// Tool calls and reasoning as templates write them (see [`glint_chat::tools`]).
pub use glint_chat::tools;
use glint_chat::ChatTemplate;
use glint_gguf::GgufFile;
use std::cell::RefCell;

use glint_sample::SamplerParams;
use glint_tokenizer::Tokenizer;
use serde_json::{json, Value};

use crate::engine::{run_local, EventSink, Request};
use crate::generate::{LocalSink, Shared, StopReason, TokenEvent};
use crate::{Context, Error, Model};

/// Where a [`Chat`]'s template came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model's own `tokenizer.chat_template`.
    Model,
    /// A built-in format, by name (`gemma3`, `llama3`, `chatml`).
    Fallback(&'static str),
    /// Given by the user (`--chat-template-file`).
    Given,
}

impl std::fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateOrigin::Model => f.write_str("the model's (tokenizer.chat_template)"),
            TemplateOrigin::Fallback(name) => write!(f, "built-in `{name}` (the model has none)"),
            TemplateOrigin::Given => f.write_str("given (--chat-template-file)"),
        }
    }
}

/// A model's chat template, compiled once, with the tokenizer facts that
/// decide how its output is tokenized.
#[derive(Debug)]
pub struct Chat {
    template: ChatTemplate,
    /// The template's Jinja text.
    source: String,
    origin: TemplateOrigin,
    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    add_bos: bool,
    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    add_eos: bool,
}

impl Chat {
    /// The template of the model in `gguf`, rendered with the BOS and EOS
    /// texts of `tok`.
    pub fn new(gguf: &GgufFile, tok: &Tokenizer) -> Result<Chat, Error> {
        let (source, origin) = match gguf.get_str("tokenizer.chat_template")? {
            Some(source) => (source, TemplateOrigin::Model),
            None => {
                let arch = gguf.architecture()?;
                let has_token =
                    |t: &str| (0..tok.n_vocab() as u32).any(|id| tok.token_text(id) == Some(t));
                let (source, name) = glint_chat::fallback_template(arch, has_token);
                (source, TemplateOrigin::Fallback(name))
            }
        };
        Chat::build(source, origin, tok)
    }

    /// A chat with the Jinja template `source` instead of the model's
    /// (llama-server's `--chat-template-file`).
    pub fn from_source(source: &str, tok: &Tokenizer) -> Result<Chat, Error> {
        Chat::build(source, TemplateOrigin::Given, tok)
    }

    /// `source` compiled with the BOS and EOS texts of `tok`.
    fn build(source: &str, origin: TemplateOrigin, tok: &Tokenizer) -> Result<Chat, Error> {
        let text = |id: Option<u32>| id.and_then(|id| tok.token_text(id)).unwrap_or("");
        Ok(Chat {
            template: ChatTemplate::new(source, text(tok.bos()), text(tok.eos()))?,
            source: source.to_string(),
            origin,
            add_bos: tok.add_bos(),
            add_eos: tok.add_eos(),
        })
    }

    /// [`Chat::new`] for a loaded model.
    pub fn for_model(model: &Model) -> Result<Chat, Error> {
        Chat::new(model.gguf(), model.tokenizer())
    }

    /// The template's Jinja text (the model's, or the fallback's).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Where the template came from.
    pub fn origin(&self) -> TemplateOrigin {
        self.origin
    }

    /// `messages` (an OpenAI-style array of `{role, content, ...}`) as the
    /// template writes them; `add_generation_prompt` opens an assistant turn.
    pub fn render(&self, messages: &[Value], add_generation_prompt: bool) -> Result<String, Error> {
        Ok(self
            .template
            .render(messages, add_generation_prompt, None)?)
    }

    /// As [`Chat::render`], with the request's `tools` and more template
    /// variables (`extra`: `enable_thinking`, `chat_template_kwargs`, the
    /// date llama.cpp gives templates, ...).
    pub fn render_with(
        &self,
        messages: &[Value],
        add_generation_prompt: bool,
        tools: Option<&Value>,
        extra: &serde_json::Map<String, Value>,
    ) -> Result<String, Error> {
        Ok(self
            .template
            .render_with(messages, add_generation_prompt, tools, extra)?)
    }

    /// Token ids of rendered chat text: control tokens in the text are
    /// parsed, BOS is added as the tokenizer wants it, and exactly once (a
    /// leading BOS text, and a trailing EOS text, are left to the tokenizer
    /// when it adds them itself, as llama.cpp does).
    pub fn tokenize(&self, tok: &Tokenizer, rendered: &str) -> Result<Vec<u32>, Error> {
        let mut text = rendered;
        let (bos, eos) = (self.template.bos_token(), self.template.eos_token());
        if self.add_bos && !bos.is_empty() {
            text = text.strip_prefix(bos).unwrap_or(text);
        }
        if self.add_eos && !eos.is_empty() {
            text = text.strip_suffix(eos).unwrap_or(text);
        }
        Ok(tok.encode(text, true, true)?)
    }

    /// Render then tokenize: the prompt text and its ids.
    pub fn prompt(
        &self,
        tok: &Tokenizer,
        messages: &[Value],
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<u32>), Error> {
        let text = self.render(messages, add_generation_prompt)?;
        let ids = self.tokenize(tok, &text)?;
        Ok((text, ids))
    }
}

/// A `{role, content}` message as a JSON value.
pub fn message(role: &str, content: &str) -> Value {
    json!({ "role": role, "content": content })
}

/// What one [`Conversation::reply`] did.
#[derive(Clone, Debug)]
pub struct TurnStats {
    /// Tokens of the rendered conversation (with the generation prompt).
    pub n_prompt: usize,
    /// Of those, already in the cache and reused.
    pub n_cached: usize,
    /// Of those, decoded this turn (`n_prompt - n_cached`).
    pub n_new: usize,
    /// Tokens generated (an end-of-generation token included).
    pub n_gen: usize,
    /// Seconds decoding the new prompt tokens.
    pub prompt_secs: f64,
    /// Seconds generating.
    pub gen_secs: f64,
    /// Why generation stopped.
    pub stop: StopReason,
    /// The reply's text.
    pub text: String,
}

impl TurnStats {
    /// Generated tokens per second (the first token's time is the prompt's).
    pub fn gen_tps(&self) -> f64 {
        self.n_gen.saturating_sub(1) as f64 / self.gen_secs.max(1e-9)
    }
}

/// A conversation in sequence 0 of a context, whose turns decode only what
/// the cache does not already hold.
///
/// Invariant: `cached[i]` is the token at position `i` of sequence 0, and
/// sequence 0 holds nothing else. Keep other users of the context off
/// sequence 0 (or call [`Conversation::reset`] after them).
pub struct Conversation {
    chat: Chat,
    system: Option<String>,
    messages: Vec<Value>,
    cached: Vec<u32>,
    /// Each turn builds its sampler chain anew and feeds it the whole
    /// conversation (what history samplers, penalties and DRY, see), as
    /// llama-server does for each request.
    sampling: SamplerParams,
    /// Tokens to generate per reply; `< 0` = until end of generation.
    n_predict: i32,
}

impl Conversation {
    /// An empty conversation with `chat`'s template. `n_predict` caps each
    /// reply (`< 0`: until an end-of-generation token or a full context).
    pub fn new(chat: Chat, sampling: SamplerParams, n_predict: i32) -> Result<Self, Error> {
        sampling.validate()?;
        Ok(Conversation {
            chat,
            system: None,
            messages: Vec::new(),
            cached: Vec::new(),
            sampling,
            n_predict,
        })
    }

    /// The template in use.
    pub fn chat(&self) -> &Chat {
        &self.chat
    }

    /// The messages so far (the system message first, when set).
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    /// The token ids in the cache, position by position.
    pub fn cached(&self) -> &[u32] {
        &self.cached
    }

    /// Forget the conversation and clear the cache (the system message
    /// stays).
    pub fn reset(&mut self, ctx: &mut Context) {
        ctx.clear();
        self.cached.clear();
        self.messages.clear();
        if let Some(s) = &self.system {
            self.messages.push(message("system", s));
        }
    }

    /// Set (or with `None` drop) the system message and start over.
    pub fn set_system(&mut self, ctx: &mut Context, system: Option<String>) {
        self.system = system;
        self.reset(ctx);
    }

    /// Add `user` to the conversation and generate the assistant's reply,
    /// calling `on_token` for each token (return `false` to stop). The reply
    /// joins the conversation. On an error the user message is dropped and
    /// the cache cleared, so the next turn starts from a known state.
    pub fn reply(
        &mut self,
        ctx: &mut Context,
        user: &str,
        on_token: &mut dyn FnMut(&TokenEvent) -> bool,
    ) -> Result<TurnStats, Error> {
        self.messages.push(message("user", user));
        match self.turn(ctx, on_token) {
            Ok(stats) => {
                self.messages.push(message("assistant", &stats.text));
                Ok(stats)
            }
            Err(e) => {
                self.messages.pop();
                ctx.clear();
                self.cached.clear();
                Err(e)
            }
        }
    }

    fn turn(
        &mut self,
        ctx: &mut Context,
        on_token: &mut dyn FnMut(&TokenEvent) -> bool,
    ) -> Result<TurnStats, Error> {
        let model = ctx.model().clone();
        let tok = model.tokenizer();
        let n_ctx = ctx.n_ctx_stream() as usize;
        let (_, ids) = self.chat.prompt(tok, &self.messages, true)?;
        if ids.len() >= n_ctx {
            return Err(Error::Invalid(format!(
                "the conversation has {} tokens, the context holds {n_ctx} (/reset, or raise -c/--ctx-size)",
                ids.len()
            )));
        }
        // The engine keeps the longest cached prefix (all but the last token
        // at most: its logits are needed) and decodes the rest.
        let n_keep = common_prefix(&self.cached, &ids).min(ids.len() - 1);
        let mut req = Request::new(ids.clone());
        req.sampling = self.sampling.clone();
        req.max_tokens = usize::try_from(self.n_predict).ok();
        req.check(model.n_vocab(), n_ctx, 1)?;

        let t0 = Instant::now();
        let mut cb = |_: usize, ev: &TokenEvent| on_token(ev);
        let shared = RefCell::new(Shared::new(1, &mut cb));
        let sink = LocalSink {
            job: 0,
            shared: &shared,
        };
        let seqs = vec![(0, std::mem::take(&mut self.cached))];
        let jobs: Vec<(Request, Box<dyn EventSink + '_>)> = vec![(req, Box::new(sink))];
        let caches = run_local(ctx, tok, seqs, jobs)?;
        self.cached = caches.into_iter().next().map(|c| c.1).unwrap_or_default();
        let out = shared.borrow_mut().out.pop().unwrap_or_default();
        let text = out.text.clone();
        let stats = out.stats(ids.len() - n_keep, t0);
        Ok(TurnStats {
            n_prompt: ids.len(),
            n_cached: n_keep,
            n_new: ids.len() - n_keep,
            n_gen: stats.n_gen,
            prompt_secs: stats.prompt_secs,
            gen_secs: stats.gen_secs,
            stop: stats.stop,
            text,
        })
    }
}

/// Length of the longest common prefix of `a` and `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_stops_at_the_first_difference() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[7], &[8]), 0);
    }
}
