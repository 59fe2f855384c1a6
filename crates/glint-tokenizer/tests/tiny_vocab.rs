//! Tokenizers built from tiny GGUF files written in memory: errors that
//! name the bad value, and the two algorithms on vocabularies small enough
//! to work out by hand.

use glint_gguf::{Array, GgufFile, GgufWriter, Value};
use glint_tokenizer::{Tokenizer, TokenizerError};

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().collect()))
}

fn gguf(kvs: Vec<(&str, Value)>) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in kvs {
        w.add_kv(k, v).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// A SentencePiece (`llama`) vocabulary of `tokens`, plus the keys in `more`.
fn llama(tokens: &[&str], more: Vec<(&str, Value)>) -> GgufFile {
    let mut kvs = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(tokens)),
    ];
    kvs.extend(more);
    gguf(kvs)
}

/// A byte-level BPE vocabulary: `a`, `b`, `ab`, `Ġ`, `Ġab`.
fn gpt2(pre: &str) -> GgufFile {
    gguf(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(pre.into())),
        (
            "tokenizer.ggml.tokens",
            strings(&["a", "b", "ab", "Ġ", "Ġab", "<|end|>"]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(vec![1, 1, 1, 1, 1, 3])),
        ),
        ("tokenizer.ggml.merges", strings(&["a b", "Ġ ab"])),
        ("tokenizer.ggml.eos_token_id", Value::U32(5)),
    ])
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let err = Tokenizer::from_gguf(&gpt2("no-such-pre")).unwrap_err();
    match &err {
        TokenizerError::UnknownPreTokenizer { pre, .. } => assert_eq!(pre, "no-such-pre"),
        other => panic!("wrong error: {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-pre") && msg.contains("smollm"),
        "{msg}"
    );
}

#[test]
fn unknown_model_is_named() {
    let g = gguf(vec![
        ("tokenizer.ggml.model", Value::String("bert".into())),
        ("tokenizer.ggml.tokens", strings(&["a"])),
    ]);
    let err = Tokenizer::from_gguf(&g).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnknownModel { model } if model == "bert"));
    assert!(err.to_string().contains("bert"));
}

#[test]
fn duplicate_tokens_and_short_arrays_are_errors() {
    let g = llama(&["a", "b", "a"], vec![]);
    let err = Tokenizer::from_gguf(&g).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::DuplicateToken {
                first: 0,
                second: 2,
                ..
            }
        ),
        "{err}"
    );
    let g = llama(
        &["a", "b", "c"],
        vec![("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0])))],
    );
    let err = Tokenizer::from_gguf(&g).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::ArrayTooShort {
                found: 1,
                n_vocab: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn tiny_gpt2_bpe() {
    for pre in ["gpt2", "gpt-2", "smollm", "qwen2", "default", "dbrx"] {
        let tok = Tokenizer::from_gguf(&gpt2(pre)).unwrap();
        assert_eq!(tok.encode("ab ab", false, false).unwrap(), [2, 4], "{pre}");
        assert_eq!(tok.encode("ba", false, false).unwrap(), [1, 0], "{pre}");
        assert_eq!(tok.decode(&[2, 4], true).unwrap(), "ab ab");
        // A control token: text unless parsed as special.
        assert_eq!(
            tok.encode("a<|end|>", false, true).unwrap(),
            [0, 5],
            "{pre}"
        );
        assert_eq!(tok.decode(&[0, 5], true).unwrap(), "a");
        assert_eq!(tok.decode(&[0, 5], false).unwrap(), "a<|end|>");
        assert!(tok.is_eog(5));
    }
    // llama3 adds BOS by default, and llama.cpp's default BOS id (11) is
    // out of range here: refused, as llama.cpp refuses it.
    let err = Tokenizer::from_gguf(&gpt2("llama-bpe")).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingSpecialToken { .. }),
        "{err}"
    );
}

/// SentencePiece: merges go by the merged token's score, not left to right.
#[test]
fn tiny_spm_merges_by_score_and_falls_back_to_bytes() {
    let tokens = [
        "<unk>", "<s>", "</s>", "▁", "a", "b", "c", "ab", "bc", "▁a", "<0xC3>", "<0xA9>",
    ];
    let scores = vec![
        0.0, 0.0, 0.0, -5.0, -6.0, -7.0, -8.0, -2.0, -1.0, -3.0, 0.0, 0.0,
    ];
    let types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6];
    let g = llama(
        &tokens,
        vec![
            ("tokenizer.ggml.scores", Value::Array(Array::F32(scores))),
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
        ],
    );
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(
        (tok.bos(), tok.eos(), tok.add_bos()),
        (Some(1), Some(2), true)
    );
    // " abc" → ▁ a b c: bc (-1) first, then ▁a (-3); ab (-2) never forms.
    let ids = tok.encode("abc", true, false).unwrap();
    assert_eq!(ids, [1, 9, 8]);
    // The space prefix is removed again on decode.
    assert_eq!(tok.decode(&ids, true).unwrap(), "abc");
    // é is not a token: its two UTF-8 bytes.
    assert_eq!(tok.encode("é", false, false).unwrap(), [3, 10, 11]);
    // Decoding drops the prefix space of the first token (after a BOS).
    assert_eq!(tok.decode(&[3, 10, 11], true).unwrap(), "é");
    assert_eq!(tok.decode(&[1, 3, 10, 11], true).unwrap(), "é");
    assert_eq!(tok.decode(&[4, 3, 10, 11], true).unwrap(), "a é");
}

/// llama.cpp's SentencePiece order where a BPE of derived merges differed:
/// pairs of equal score merge leftmost first (not in token-id order), and a
/// character that is not a token still merges into a longer token.
#[test]
fn tiny_spm_ties_go_leftmost_and_non_token_characters_merge() {
    // "ba" has the lower id, "ab" the same score.
    let tokens = ["<unk>", "<s>", "</s>", "a", "b", "ba", "ab", "xa", "<0x78>"];
    let scores = vec![0.0, 0.0, 0.0, -5.0, -5.0, -1.0, -1.0, -2.0, 0.0];
    let types = vec![2, 3, 3, 1, 1, 1, 1, 1, 6];
    let g = llama(
        &tokens,
        vec![
            ("tokenizer.ggml.scores", Value::Array(Array::F32(scores))),
            ("tokenizer.ggml.token_type", Value::Array(Array::I32(types))),
            ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
        ],
    );
    let tok = Tokenizer::from_gguf(&g).unwrap();
    // a b a: (a,b) and (b,a) tie at -1; the leftmost, ab, goes first.
    assert_eq!(tok.encode("aba", false, false).unwrap(), [6, 3]);
    // b a b: ba (leftmost) first, then nothing: ba b.
    assert_eq!(tok.encode("bab", false, false).unwrap(), [5, 4]);
    // x is not a token, xa is: x a merges into xa.
    assert_eq!(tok.encode("xa", false, false).unwrap(), [7]);
    // x alone falls back to its byte.
    assert_eq!(tok.encode("x", false, false).unwrap(), [8]);
}
