//! `glint passkey`: the passkey retrieval harness for long-context modes.
//! Landmark-style prompts (llama.cpp's passkey example: an instruction,
//! filler sentences, a 5-digit key at a given depth, more filler, the
//! question) for lengths × depths × seeds; each is run greedily in the mode
//! asked for, scored by the first integer generated, and tabulated.

use glint::generate::{generate, GenerateParams};
use glint::sample::SamplerParams;
use glint::{Context, ContextParams, Model};
use glint_testkit::Rng;

use super::args::{self, flag, Flag, Parsed};
use super::options::{model_params, model_path, num, with_device_flags};
use super::output;

/// Flags of this command; the device flags follow (`with_device_flags`).
#[rustfmt::skip]
const OWN_FLAGS: &[Flag] = &[
    flag!("model", ["-m"], Some("FILE|NAME"), "GGUF model or a known name (smollm2, gemma3, qwen2; default smollm2)"),
    flag!("lengths", [], Some("LIST"), "prompt lengths in tokens, e.g. 2048,8192 (default 2048)"),
    flag!("depths", [], Some("LIST"), "where the key sits, fractions of the filler (default 0.2,0.5,0.8)"),
    flag!("seeds", [], Some("N"), "prompts (keys) per length and depth (default 1)"),
    flag!("grp-attn-n", ["-gan"], Some("N"), "self-extend group size (default 1 = off)"),
    flag!("grp-attn-w", ["-gaw"], Some("N"), "self-extend window (default 512)"),
    flag!("grp-attn-mode", [], Some("shift|window"), "self-extend mode: shift (default; llama.cpp's: cached positions compressed with seq_add/seq_div, K re-rotated) or window (the SelfExtend paper's: positions never move, near pairs attend normally, distant ones at grouped positions; a second K cache)"),
    flag!("batch-size", ["-b"], Some("N"), "prompt tokens per decode (default 2048)"),
    flag!("verbose", ["-v"], None, "print each prompt's answer to stderr"),
];

const INSTRUCTION: &str = "There is an important info hidden inside a lot of irrelevant text. \
Find it and memorize it. I will quiz you about the important information there.\n\n";
const FILLER: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
const QUESTION: &str = "\nWhat is the pass key? The pass key is";

/// A prompt of about `n_tokens` with `key` at `depth` (0 = first, 1 = last)
/// of the filler.
pub fn prompt(model: &Model, n_tokens: usize, depth: f64, key: u32) -> Result<String, String> {
    let tok = model.tokenizer();
    let count = |s: &str| {
        tok.encode(s, false, false)
            .map(|v| v.len())
            .map_err(|e| e.to_string())
    };
    let needle = format!("The pass key is {key}. Remember it. {key} is the pass key. ");
    let fixed = count(INSTRUCTION)? + count(&needle)? + count(QUESTION)? + 1;
    let per = count(FILLER)?.max(1);
    let n_filler = n_tokens.saturating_sub(fixed) / per;
    let at = ((n_filler as f64) * depth.clamp(0.0, 1.0)).round() as usize;
    let mut s = String::from(INSTRUCTION);
    for i in 0..n_filler {
        if i == at {
            s += &needle;
        }
        s += FILLER;
    }
    if at >= n_filler {
        s += &needle;
    }
    s += QUESTION;
    Ok(s)
}

/// The first run of digits in `text`.
pub fn first_integer(text: &str) -> Option<u32> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn list<T: std::str::FromStr>(p: &Parsed, name: &str, default: &str) -> Result<Vec<T>, String> {
    p.get(name)
        .unwrap_or(default)
        .split(',')
        .map(|s| {
            let s = s.trim();
            let s = s
                .strip_suffix('k')
                .map_or(s.to_string(), |n| format!("{n}000"));
            s.parse::<T>()
                .map_err(|_| format!("--{name}: cannot parse `{s}`"))
        })
        .collect()
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let flags = with_device_flags(OWN_FLAGS);
    let p = args::parse(rest, &flags)?;
    if p.has("help") {
        return output::println(&args::help("glint passkey -m MODEL [options]", &flags));
    }
    let lengths: Vec<usize> = list(&p, "lengths", "2048")?;
    let depths: Vec<f64> = list(&p, "depths", "0.2,0.5,0.8")?;
    let seeds = num::<usize>(&p, "seeds")?.unwrap_or(1).max(1);
    let window = super::options::self_extend_window(&p)?;
    let params = GenerateParams {
        n_predict: 8,
        sampling: SamplerParams {
            temp: 0.0,
            ..Default::default()
        },
        ga_n: if window.is_some() {
            1
        } else {
            num(&p, "grp-attn-n")?.unwrap_or(1)
        },
        ga_w: num(&p, "grp-attn-w")?.unwrap_or(512),
        ..Default::default()
    };
    glint::generate::validate_self_extend(params.ga_n, params.ga_w).map_err(|e| e.to_string())?;
    let model = Model::load(model_path(&p)?, &model_params(&p)?).map_err(|e| e.to_string())?;
    let n_batch = num::<u32>(&p, "batch-size")?.unwrap_or(2048);
    let mode = if let Some(w) = window {
        format!("self-extend (window) -gan {} -gaw {}", w.n, w.w)
    } else if params.ga_n > 1 {
        format!(
            "self-extend (shift) -gan {} -gaw {}",
            params.ga_n, params.ga_w
        )
    } else {
        "none".to_string()
    };
    // The model's RoPE scaling (its metadata or the --rope-* flags).
    let mode = match model.hparams().rope_scaling {
        glint::RopeScaling::None => mode,
        glint::RopeScaling::Linear { factor } => format!("{mode}, RoPE linear x{factor}"),
        glint::RopeScaling::Yarn {
            factor, n_ctx_orig, ..
        } => format!("{mode}, RoPE YaRN x{factor} (trained context {n_ctx_orig})"),
    };
    let mut rng = Rng::new(1234);
    let mut table = format!(
        "mode: {mode}\n\n| length | {} | total |\n|---:|{}---:|\n",
        depths
            .iter()
            .map(|d| format!("depth {d}"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(depths.len())
    );
    let (mut found_all, mut tried_all) = (0, 0);
    for &n in &lengths {
        let mut row = format!("| {n} |");
        let mut found_row = 0;
        for &d in &depths {
            let mut found = 0;
            for _ in 0..seeds {
                let key = 10_000 + (rng.next_u64() % 90_000) as u32;
                let text = prompt(&model, n, d, key)?;
                let ids = model
                    .tokenizer()
                    .encode(&text, true, true)
                    .map_err(|e| e.to_string())?;
                let mut ctx = Context::new(
                    &model,
                    ContextParams {
                        n_ctx: (ids.len() + 16) as u32,
                        n_batch,
                        n_ubatch: n_batch.min(512),
                        self_extend_window: window,
                        // Self-extend's shift mode moves cached positions,
                        // which a sliding-window ring cannot take.
                        swa_full: window.is_none(),
                        ..Default::default()
                    },
                )
                .map_err(|e| e.to_string())?;
                let mut answer = String::new();
                generate(&mut ctx, &ids, &params, &mut |ev| {
                    answer.push_str(ev.text);
                    true
                })
                .map_err(|e| e.to_string())?;
                let ok = first_integer(&answer) == Some(key);
                found += ok as usize;
                if p.has("verbose") {
                    eprintln!(
                        "glint passkey: {n} tokens ({}), depth {d}, key {key}: {answer:?} {}",
                        ids.len(),
                        if ok { "ok" } else { "missed" }
                    );
                }
            }
            row += &format!(" {found}/{seeds} |");
            found_row += found;
        }
        let tried = seeds * depths.len();
        row += &format!(" {found_row}/{tried} |\n");
        table += &row;
        found_all += found_row;
        tried_all += tried;
    }
    table += &format!("\nretrieved {found_all} of {tried_all}\n");
    output::print(&table)
}
