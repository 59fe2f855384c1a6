//! Shared test helpers: the real models and llama.cpp's reference ids.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use glint_gguf::GgufFile;
use glint_tokenizer::Tokenizer;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The model cache, as `glint::models::models_dir`: `$GLINT_MODELS`, else
/// `~/.cache/glint/models`.
fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GLINT_MODELS") {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("glint").join("models")
}

/// Path of a real test model; a missing model fails the test (never skips).
pub fn test_model(file: &str) -> PathBuf {
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "test model {file} not found in {}: run `scripts/fetch-models.sh` \
         (or set GLINT_MODELS to a directory holding it)",
        models_dir().display()
    );
    path
}

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

/// `shared/reference/tokenizer/`: beside the project root (`/work/shared`
/// for worktrees under `/work`).
pub fn reference_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest.join("../../../shared/reference/tokenizer");
    assert!(
        dir.join("reference_ids.json").is_file(),
        "llama.cpp reference ids not found at {}: shared/reference/ must sit beside the \
         project root",
        dir.display()
    );
    dir
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
