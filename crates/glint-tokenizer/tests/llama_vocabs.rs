//! Tokenizer parity on llama.cpp's own vocabulary test set: the 19
//! vocab-only `ggml-vocab-*.gguf` files of llama.cpp 0c1e57098 and, for 15
//! of them, the inputs and ids its `tests/test-tokenizer-0` checks
//! (`.inp`/`.out`, 45 to 50 cases each). Every vocabulary glint supports
//! gives exactly llama.cpp's ids on every case; every other one fails to load
//! with an error that names what is unsupported. The expected outcome of each
//! file is written down below, so a newly supported (or newly broken)
//! vocabulary shows up as a change to this table.
//!
//! The files are fetched by `scripts/fetch-vocabs.sh` (called by
//! `scripts/fetch-models.sh`) into `$GLINT_MODELS/llama-vocab`; a missing
//! file fails the test.

use std::path::{Path, PathBuf};

use glint_gguf::GgufFile;
use glint_tokenizer::Tokenizer;

/// What a vocabulary file must do.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Load, and give llama.cpp's ids on all of its `.inp`/`.out` cases,
    /// of which there are this many.
    Matches(usize),
    /// Load (llama.cpp ships no cases for it).
    Loads,
    /// Fail to load, with an error message containing this text (the
    /// unsupported `tokenizer.ggml.model` or `tokenizer.ggml.pre`).
    Refused(&'static str),
}

use Expect::{Loads, Matches, Refused};

/// Every vocabulary in llama.cpp's `models/`, as
/// (name in `ggml-vocab-NAME.gguf`, `tokenizer.ggml.model` / `.pre`, outcome).
const VOCABS: &[(&str, &str, Expect)] = &[
    ("aquila", "gpt2 / (none)", Loads),
    ("baichuan", "llama", Loads),
    (
        "bert-bge",
        "bert / bert-bge",
        Refused("unknown tokenizer model `bert`"),
    ),
    ("command-r", "gpt2 / command-r", Matches(46)),
    ("deepseek-coder", "gpt2 / deepseek-coder", Matches(46)),
    ("deepseek-llm", "gpt2 / deepseek-llm", Matches(46)),
    ("falcon", "gpt2 / falcon", Matches(46)),
    (
        "gemma-4",
        "gemma4",
        Refused("unknown tokenizer model `gemma4`"),
    ),
    ("gpt-2", "gpt2 / gpt-2", Matches(46)),
    ("gpt-neox", "gpt2 / (none)", Loads),
    ("llama-bpe", "gpt2 / llama-bpe", Matches(46)),
    ("llama-spm", "llama / default", Matches(46)),
    ("mpt", "gpt2 / mpt", Matches(46)),
    (
        "nomic-bert-moe",
        "t5",
        Refused("unknown tokenizer model `t5`"),
    ),
    ("phi-3", "llama / default", Matches(46)),
    ("qwen2", "gpt2 / qwen2", Matches(46)),
    ("qwen35", "gpt2 / qwen35", Matches(50)),
    ("refact", "gpt2 / refact", Matches(46)),
    ("starcoder", "gpt2 / starcoder", Matches(46)),
];

/// `$GLINT_MODELS/llama-vocab`, else `~/.cache/glint/models/llama-vocab`.
fn vocab_dir() -> PathBuf {
    let models = match std::env::var_os("GLINT_MODELS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into()))
            .join(".cache/glint/models"),
    };
    models.join("llama-vocab")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `scripts/fetch-vocabs.sh` (or scripts/fetch-models.sh)",
            path.display()
        )
    })
}

/// The cases of `ggml-vocab-NAME.gguf.inp`/`.out`, read as test-tokenizer-0
/// reads them: inputs separated by `\n__ggml_vocab_test__\n` (the file ends
/// with one), one line of space-separated ids per input.
fn cases(gguf: &Path) -> Vec<(String, Vec<u32>)> {
    let inp = read(&PathBuf::from(format!("{}.inp", gguf.display())));
    let out = read(&PathBuf::from(format!("{}.out", gguf.display())));
    let sep = "\n__ggml_vocab_test__\n";
    let inputs: Vec<&str> = inp
        .strip_suffix(sep)
        .expect("the .inp file ends with a separator")
        .split(sep)
        .collect();
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), ids.len(), "{}: .inp vs .out", gguf.display());
    inputs.into_iter().map(String::from).zip(ids).collect()
}

/// Checks one vocabulary; returns its table row and, if it did not do what
/// `expect` says, why.
fn check(name: &str, expect: Expect) -> (String, Option<String>) {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `scripts/fetch-vocabs.sh` (or scripts/fetch-models.sh)",
            path.display()
        )
    });
    let tok = Tokenizer::from_gguf(&gguf);
    match (expect, tok) {
        (Refused(want), Err(e)) => {
            let msg = e.to_string();
            let bad =
                (!msg.contains(want)).then(|| format!("{name}: error {msg:?} lacks {want:?}"));
            (format!("refused: {}", msg.split(" (").next().unwrap()), bad)
        }
        (Refused(_), Ok(_)) => (
            "loads".into(),
            Some(format!("{name}: loads, expected refused")),
        ),
        (_, Err(e)) => (format!("refused: {e}"), Some(format!("{name}: {e}"))),
        (Loads, Ok(_)) => ("loads (no cases)".into(), None),
        (Matches(n), Ok(tok)) => {
            let cases = cases(&path);
            assert_eq!(cases.len(), n, "{name}: number of cases");
            let mut failed = Vec::new();
            for (text, want) in &cases {
                // test-tokenizer-0: add_special = false, parse_special = false.
                let got = tok.encode(text, false, false).unwrap();
                if &got != want {
                    failed.push(format!("  {text:?}\n    got  {got:?}\n    want {want:?}"));
                }
            }
            let row = format!(
                "{} of {} cases match",
                cases.len() - failed.len(),
                cases.len()
            );
            let bad = (!failed.is_empty()).then(|| format!("{name}:\n{}", failed.join("\n")));
            (row, bad)
        }
    }
}

#[test]
fn every_llama_cpp_vocab_matches_or_is_refused() {
    let mut table = String::from("| vocab | tokenizer | glint |\n| --- | --- | --- |\n");
    let mut failures = Vec::new();
    for &(name, kind, expect) in VOCABS {
        let (row, bad) = check(name, expect);
        table.push_str(&format!("| {name} | {kind} | {row} |\n"));
        failures.extend(bad);
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
