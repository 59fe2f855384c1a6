//! Shared test helpers: the real models and llama.cpp's reference ids.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use glint_gguf::GgufFile;
use glint_tokenizer::Tokenizer;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

pub use glint_testkit::test_model;

/// The tokenizer of a real model, built once per test binary.
pub fn tokenizer(file: &str) -> &'static Tokenizer {
    static SMOL: OnceLock<Tokenizer> = OnceLock::new();
    static GEMMA: OnceLock<Tokenizer> = OnceLock::new();
    let cell = match file {
        SMOLLM2 => &SMOL,
        GEMMA3 => &GEMMA,
        other => panic!("no test tokenizer for {other}"),
    };
    cell.get_or_init(|| {
        let path = test_model(file);
        let gguf =
            GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("tokenizer of {file}: {e}"))
    })
}

/// llama.cpp's reference ids: `fixtures/reference/tokenizer/` (what the
/// files are and how they were made: `fixtures/reference/README.md`).
pub fn reference_dir() -> PathBuf {
    glint_testkit::fixture("reference/tokenizer")
}

/// The corpus, whole.
pub fn corpus() -> String {
    let p = reference_dir().join("corpus.txt");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// `reference_ids.json`, parsed.
pub fn reference() -> &'static serde_json::Value {
    static REF: OnceLock<serde_json::Value> = OnceLock::new();
    REF.get_or_init(|| {
        let p = reference_dir().join("reference_ids.json");
        let text =
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", p.display()))
    })
}

/// The corpus lines, as the reference lists them.
pub fn lines() -> Vec<String> {
    reference()["lines"]
        .as_array()
        .expect("reference `lines` is an array")
        .iter()
        .map(|l| l.as_str().expect("line is a string").to_string())
        .collect()
}

/// An id list from the reference.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an id list")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// The reference entry of one model.
pub fn model_ref(file: &str) -> &'static serde_json::Value {
    let m = &reference()["models"][file];
    assert!(m.is_object(), "reference has no entry for {file}");
    m
}

/// Compares one id list; returns a message describing a mismatch.
pub fn compare(what: &str, text: &str, got: &[u32], want: &[u32]) -> Option<String> {
    if got == want {
        return None;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "{what}: {text:?}\n  got  {got:?}\n  want {want:?}\n  first difference at index {first}"
    ))
}
