//! The commands: each parses its flags and calls the library's public API.

pub mod args;
mod bench;
mod chat;
mod generate;
mod logprobs_out;
pub mod options;
pub mod output;
pub mod passkey;
mod perplexity;
mod serve;

use args::Flag;

const USAGE: &str = "\
glint — a pure-Rust LLM inference engine (GGUF, WGSL through wgpu, a rayon cpu backend)

usage: glint <command> [options]

commands:
  inspect MODEL.gguf [--json]   what the file holds: header, metadata, tensors, totals per type
  generate [-m MODEL] PROMPT    generate text (see `glint generate --help`)
  bench -m MODEL                speed as llama-bench: pp512, tg128 (see `glint bench --help`)
  chat [-m MODEL]               talk to a model, one line per turn (see `glint chat --help`)
  passkey [-m MODEL]            passkey retrieval over lengths x depths (long-context modes)
  perplexity -m MODEL -f FILE   perplexity / KL divergence as llama-perplexity (see --help)
  devices                       the cpu and every wgpu adapter: api, kind, features, limits
  serve [-m MODEL]              an OpenAI-compatible HTTP server (see `glint serve --help`)
  pull [NAME ...|all]           fetch known models (smollm2, gemma3, qwen2) into the model cache
  help                          this text

Run `glint <command> --help` for a command's options.";

/// Run the command line `argv` (without the program name).
pub fn run(argv: &[String]) -> Result<(), String> {
    let (cmd, rest) = match argv.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => {
            return output::println(USAGE);
        }
    };
    match cmd {
        "inspect" => inspect(rest),
        "generate" => generate(rest),
        "bench" => bench::run(rest),
        "chat" => chat::run(rest),
        "serve" => serve::run(rest),
        "pull" => pull(rest),
        "devices" | "--list-devices" => devices(rest),
        "perplexity" => perplexity::run(rest),
        "passkey" => passkey::run(rest),
        "help" | "-h" | "--help" => output::println(USAGE),
        other => Err(format!("unknown command `{other}` (try `glint help`)")),
    }
}

const INSPECT_FLAGS: &[Flag] = &[
    Flag {
        name: "json",
        aliases: &[],
        value: None,
        help: "print JSON instead of text",
    },
    Flag {
        name: "full",
        aliases: &[],
        value: None,
        help: "with --json: every array item, not the first few",
    },
    Flag {
        name: "help",
        aliases: &["-h"],
        value: None,
        help: "this text",
    },
];

fn inspect(rest: &[String]) -> Result<(), String> {
    let p = args::parse(rest, INSPECT_FLAGS)?;
    if p.has("help") {
        return output::println(&args::help(
            "glint inspect MODEL.gguf [--json [--full]]",
            INSPECT_FLAGS,
        ));
    }
    let path = match p.positional.as_slice() {
        [one] => one,
        [] => return Err("inspect: which file? (glint inspect MODEL.gguf)".into()),
        more => return Err(format!("inspect: one file at a time, got {}", more.len())),
    };
    let f = glint::gguf::GgufFile::open(path).map_err(|e| format!("{path}: {e}"))?;
    if p.has("json") {
        let doc = crate::inspect::render_json(path, &f, p.has("full"));
        output::println(&format!("{doc:#}"))
    } else {
        output::print(&crate::inspect::render_text(path, &f))
    }
}

fn generate(rest: &[String]) -> Result<(), String> {
    generate::run(rest)
}

fn pull(rest: &[String]) -> Result<(), String> {
    let names: Vec<&str> = match rest {
        [] => vec![crate::models::DEFAULT_MODEL],
        [n] if n == "-h" || n == "--help" => {
            let mut text = "usage: glint pull [NAME ...|all]\n\nknown models:".to_string();
            for m in crate::models::KNOWN_MODELS {
                text += &format!("\n  {:<8} {} ({} bytes)", m.name, m.file, m.size);
            }
            return output::println(&text);
        }
        [n] if n == "all" => crate::models::KNOWN_MODELS.iter().map(|m| m.name).collect(),
        more => more.iter().map(String::as_str).collect(),
    };
    for name in names {
        let m = crate::models::known_model(name).ok_or_else(|| {
            let names: Vec<&str> = crate::models::KNOWN_MODELS.iter().map(|m| m.name).collect();
            format!(
                "pull: no known model `{name}` (known: {})",
                names.join(", ")
            )
        })?;
        let path = crate::models::pull(m, &mut |line| eprintln!("glint: {line}"))
            .map_err(|e| e.to_string())?;
        output::println(&path.display().to_string())?;
    }
    Ok(())
}

/// `glint devices` (llama.cpp's `--list-devices`): what each device offers
/// the kernels.
fn devices(rest: &[String]) -> Result<(), String> {
    if let Some(a) = rest.first() {
        return Err(format!("devices: unexpected argument `{a}`"));
    }
    let mut s = String::new();
    for d in glint::devices() {
        let id = d
            .adapter
            .map_or("cpu".to_string(), |i| format!("--adapter {i}"));
        s += &format!("{id}: {} ({}, {})\n", d.name, d.api, d.kind);
        if !d.features.is_empty() {
            s += &format!("  features: {}\n", d.features.join(", "));
        }
        for (k, v) in &d.limits {
            s += &format!("  {k}: {v}\n");
        }
    }
    output::print(&s)
}
