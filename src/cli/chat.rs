//! `glint chat`: a conversation on stdin/stdout, one user line per turn, the
//! KV cache kept between turns; and the chat prompt of `glint generate
//! --chat`.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

use glint::chat::{Chat, Conversation};
use glint::{Context, Model};

use super::args::{self, Flag};
use super::options::{context_params, model_params, model_path, sampler_params, FLAGS, ROPE_FLAGS};

/// `generate`'s flags that `chat` does not take: they make no sense in a
/// conversation, or the conversation loop does not implement them (prompt
/// caches, context shift, self-extend, prompt dumps, --ignore-eos, which
/// would never end a turn). Not listed in `chat --help`; given, they are
/// unknown-flag errors rather than silently ignored.
const NOT_IN_CHAT: &[&str] = &[
    "prompt",
    "file",
    "echo",
    "logprobs",
    "chat",
    "messages",
    "no-special",
    "prompt-cache",
    "context-shift",
    "keep",
    "grp-attn-n",
    "grp-attn-w",
    "grp-attn-mode",
    "verbose-prompt",
    "ignore-eos",
    "parallel",
    "kv-unified",
    "no-kv-unified",
];

const COMMANDS: &str = "\
commands: /reset (clear the conversation and the cache), /system TEXT (set the system message \
and start over; /system alone drops it), /exit (or end of input)";

fn chat_flags() -> Vec<Flag> {
    FLAGS
        .iter()
        .chain(ROPE_FLAGS)
        .filter(|f| !NOT_IN_CHAT.contains(&f.name))
        .copied()
        .collect()
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let flags = chat_flags();
    let p = args::parse(rest, &flags)?;
    if p.has("help") {
        return super::output::println(&format!(
            "{}\n{COMMANDS}",
            args::help("glint chat [options]  (then one message per line)", &flags)
        ));
    }
    if let Some(a) = p.positional.first() {
        return Err(format!(
            "chat: unexpected argument `{a}` (messages come on stdin)"
        ));
    }
    let sampling = sampler_params(&p)?;
    let n_predict = p.parse::<i32>("n-predict")?.unwrap_or(-1);
    let verbose = p.has("verbose");

    let path = model_path(&p)?;
    let t_load = Instant::now();
    let model = Model::load(&path, &model_params(&p)?).map_err(|e| e.to_string())?;
    let mut ctx = Context::new(&model, context_params(&p, &model)?).map_err(|e| e.to_string())?;
    let chat = Chat::for_model(&model).map_err(|e| e.to_string())?;
    if verbose {
        eprintln!(
            "glint: {} ({}) on {}, context {} tokens, loaded in {:.2} s",
            path.display(),
            model.hparams().arch.name,
            model.backend_name(),
            ctx.n_ctx(),
            t_load.elapsed().as_secs_f64()
        );
        eprintln!("glint: chat template: {}", chat.origin());
    }
    let mut conv = Conversation::new(chat, sampling, n_predict).map_err(|e| e.to_string())?;
    if let Some(s) = p.get("system") {
        conv.set_system(&mut ctx, Some(s.to_string()));
    }

    repl(&mut conv, &mut ctx)
}

/// What a line typed at the chat does.
enum Line<'a> {
    /// Nothing (an empty line, a command already handled).
    Skip,
    /// End the conversation.
    Exit,
    /// A user message.
    Message(&'a str),
}

/// Handle a `/command` line (or pass a message on).
fn command<'a>(
    text: &'a str,
    conv: &mut Conversation,
    ctx: &mut Context,
    turn: &mut usize,
) -> Line<'a> {
    let cmd = text.trim();
    let (head, arg) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
    match head {
        "" => Line::Skip,
        "/exit" | "/quit" => Line::Exit,
        "/reset" => {
            conv.reset(ctx);
            *turn = 0;
            eprintln!("glint: conversation cleared");
            Line::Skip
        }
        "/system" => {
            let arg = arg.trim();
            conv.set_system(ctx, (!arg.is_empty()).then(|| arg.to_string()));
            *turn = 0;
            eprintln!("glint: system message set; conversation cleared");
            Line::Skip
        }
        "/help" => {
            eprintln!("glint: {COMMANDS}");
            Line::Skip
        }
        h if h.starts_with('/') => {
            eprintln!("glint: unknown command `{h}` (/help)");
            Line::Skip
        }
        _ => Line::Message(text),
    }
}

/// One line per turn from stdin, each reply streamed to stdout.
fn repl(conv: &mut Conversation, ctx: &mut Context) -> Result<(), String> {
    let stdin = std::io::stdin();
    // The `> ` prompt only for a person at a terminal: piped output stays
    // just the replies.
    let interactive = stdin.is_terminal();
    let mut out = std::io::stdout().lock();
    let mut turn = 0usize;
    let mut line = String::new();
    loop {
        if interactive {
            write!(out, "> ")
                .and_then(|()| out.flush())
                .map_err(|e| format!("writing the output: {e}"))?;
        }
        line.clear();
        let n = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("reading stdin: {e}"))?;
        if n == 0 {
            if interactive {
                let _ = writeln!(out);
            }
            return Ok(());
        }
        let text = match command(line.trim_end_matches(['\n', '\r']), conv, ctx, &mut turn) {
            Line::Skip => continue,
            Line::Exit => return Ok(()),
            Line::Message(text) => text,
        };
        turn += 1;
        let mut io_err = None;
        let result = conv.reply(ctx, text, &mut |ev| {
            if let Err(e) = out.write_all(ev.text.as_bytes()).and_then(|()| out.flush()) {
                io_err = Some(e);
                return false;
            }
            true
        });
        let _ = writeln!(out).and_then(|()| out.flush());
        if let Some(e) = io_err {
            return match e.kind() {
                std::io::ErrorKind::BrokenPipe => Ok(()),
                _ => Err(format!("writing the output: {e}")),
            };
        }
        match result {
            Ok(s) => eprintln!(
                "glint: turn {turn}: {} new prompt tokens (cached {}), {} generated, {:.1} tokens/s",
                s.n_new,
                s.n_cached,
                s.n_gen,
                s.gen_tps()
            ),
            Err(e) => {
                // The conversation dropped the message and its cache: the
                // next line starts a clean turn.
                turn -= 1;
                eprintln!("glint: {e}");
            }
        }
    }
}
