//! Token ids equal llama.cpp's (0c1e57098) on `fixtures/reference/tokenizer`:
//! every corpus line alone, with control tokens as plain text and parsed as
//! special, and the whole file at once, for both real models.

mod common;

use common::{compare, corpus, ids, lines, model_ref, tokenizer, GEMMA3, SMOLLM2};

/// Encodes every line in one mode and compares with the reference list.
fn check_lines(file: &str, mode: &str, parse_special: bool) {
    let tok = tokenizer(file);
    let want = model_ref(file)[mode].as_array().expect("per-line ids");
    let lines = lines();
    assert_eq!(
        want.len(),
        lines.len(),
        "{file} {mode}: one id list per line"
    );
    let mut failures = Vec::new();
    for (line, want) in lines.iter().zip(want) {
        let got = tok.encode(line, true, parse_special).expect("encode");
        if let Some(msg) = compare(&format!("{file} {mode}"), line, &got, &ids(want)) {
            failures.push(msg);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} lines differ from llama.cpp:\n{}",
        failures.len(),
        lines.len(),
        failures.join("\n")
    );
}

fn check_whole_file(file: &str) {
    let tok = tokenizer(file);
    let text = corpus();
    let got = tok.encode(&text, true, true).expect("encode");
    let want = ids(&model_ref(file)["whole_file_special"]);
    if let Some(msg) = compare(&format!("{file} whole file"), "corpus.txt", &got, &want) {
        panic!("{msg}");
    }
}

/// The three checks for each model: `model_tests!(module, FILE)` gives
/// `module::lines_plain`, `module::lines_special` and `module::whole_file`.
macro_rules! model_tests {
    ($($model:ident: $file:expr),* $(,)?) => {$(
        mod $model {
            use super::*;

            #[test]
            fn lines_plain() {
                check_lines($file, "plain", false);
            }

            #[test]
            fn lines_special() {
                check_lines($file, "special", true);
            }

            #[test]
            fn whole_file() {
                check_whole_file($file);
            }
        }
    )*};
}

model_tests!(smollm2: SMOLLM2, gemma3: GEMMA3);

/// The prompt of `fixtures/reference/gen_*` (ids from their `result.json`).
#[test]
fn reference_prompt_ids() {
    let prompt = "The capital of France is";
    assert_eq!(
        tokenizer(SMOLLM2).encode(prompt, true, true).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    assert_eq!(
        tokenizer(GEMMA3).encode(prompt, true, true).unwrap(),
        [2, 818, 5279, 529, 7001, 563]
    );
}

/// BOS as each model adds it, matching the reference's `add_bos`.
#[test]
fn add_bos_matches_reference() {
    for file in [SMOLLM2, GEMMA3] {
        let want = model_ref(file)["add_bos"].as_bool().expect("add_bos");
        assert_eq!(tokenizer(file).add_bos(), want, "{file}");
    }
}
