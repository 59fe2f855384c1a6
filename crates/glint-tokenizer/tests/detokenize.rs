//! Detokenizing: `decode(encode(x)) == x` on every corpus line for both real
//! models, llama.cpp's own detokenization of its ids, and the streaming
//! decoder (same text as `decode`, never half a character).

mod common;

use common::{corpus, ids, lines, model_ref, tokenizer, GEMMA3, SMOLLM2};
use glint_tokenizer::{TokenType, Tokenizer};

/// Streams `ids` one at a time; returns the concatenated text after
/// checking no push returned a replacement character `decode` lacks.
fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> String {
    let mut dec = tok.stream_decoder(skip_special);
    let mut out = String::new();
    for &id in ids {
        out.push_str(&dec.push(id).expect("push"));
    }
    out.push_str(&dec.flush());
    out
}

fn check_round_trip(file: &str) {
    let tok = tokenizer(file);
    let mut failures = Vec::new();
    let mut texts = lines();
    texts.push(corpus());
    for line in &texts {
        let plain = tok.encode(line, true, false).unwrap();
        let back = tok.decode(&plain, true).unwrap();
        if &back != line {
            failures.push(format!("plain: {line:?} -> {back:?}"));
        }
        // Special tokens parsed and rendered back, no BOS.
        let special = tok.encode(line, false, true).unwrap();
        let back = tok.decode(&special, false).unwrap();
        if &back != line {
            failures.push(format!("special: {line:?} -> {back:?}"));
        }
        let streamed = stream(tok, &plain, true);
        if &streamed != line {
            failures.push(format!("stream: {line:?} -> {streamed:?}"));
        }
    }
    assert!(failures.is_empty(), "{file}:\n{}", failures.join("\n"));
}

#[test]
fn smollm2_round_trip() {
    check_round_trip(SMOLLM2);
}

#[test]
fn gemma3_round_trip() {
    check_round_trip(GEMMA3);
}

/// Our detokenization of llama.cpp's ids equals llama.cpp's (`detok_plain`:
/// its pieces joined, control tokens as nothing).
#[test]
fn decode_reference_ids_like_llama_cpp() {
    for file in [SMOLLM2, GEMMA3] {
        let tok = tokenizer(file);
        let m = model_ref(file);
        let want = m["detok_plain"].as_array().expect("detok_plain");
        let plain = m["plain"].as_array().expect("plain");
        for (ids_v, want) in plain.iter().zip(want) {
            let ids = ids(ids_v);
            let want = want.as_str().unwrap();
            assert_eq!(tok.decode(&ids, true).unwrap(), want, "{file}: {ids:?}");
            assert_eq!(stream(tok, &ids, true), want, "{file} stream: {ids:?}");
        }
    }
}

/// Emoji and CJK that Gemma has no token for come as `<0xXX>` byte tokens,
/// one per UTF-8 byte; the stream gives nothing until a character is whole.
#[test]
fn stream_holds_back_split_characters_gemma3() {
    let tok = tokenizer(GEMMA3);
    let text = "𓀀𓁐 🫨 𠜎𠜱 ok";
    let ids = tok.encode(text, false, false).unwrap();
    let n_byte = ids
        .iter()
        .filter(|&&i| tok.token_type(i) == Some(TokenType::Byte))
        .count();
    assert!(n_byte >= 8, "expected byte-fallback tokens in {ids:?}");
    let mut dec = tok.stream_decoder(true);
    let mut out = String::new();
    for &id in &ids {
        let piece = dec.push(id).unwrap();
        assert!(
            !piece.contains('\u{FFFD}'),
            "half a character leaked: {piece:?}"
        );
        // A byte token that does not end a character yields nothing.
        if tok.token_type(id) == Some(TokenType::Byte) && !piece.is_empty() {
            assert_eq!(
                piece.chars().count(),
                1,
                "one character per completing byte"
            );
        }
        out.push_str(&piece);
    }
    assert_eq!(dec.flush(), "");
    assert_eq!(out, text);
    assert_eq!(tok.decode(&ids, true).unwrap(), text);
}

/// Byte-level BPE splits a 4-byte emoji across tokens too.
#[test]
fn stream_holds_back_split_characters_smollm2() {
    let tok = tokenizer(SMOLLM2);
    let text = "🤖🚀✨ 中文分词 👨‍👩‍👧";
    let ids = tok.encode(text, false, false).unwrap();
    let mut dec = tok.stream_decoder(true);
    let mut out = String::new();
    let mut empty_pushes = 0;
    for &id in &ids {
        let piece = dec.push(id).unwrap();
        assert!(
            !piece.contains('\u{FFFD}'),
            "half a character leaked: {piece:?}"
        );
        empty_pushes += usize::from(piece.is_empty());
        out.push_str(&piece);
    }
    assert!(empty_pushes > 0, "no token split a character: {ids:?}");
    assert_eq!(dec.flush(), "");
    assert_eq!(out, text);
}

/// A stream cut in the middle of a character flushes one U+FFFD, as
/// `decode` (lossy UTF-8) does.
#[test]
fn flush_of_half_a_character_is_a_replacement() {
    let tok = tokenizer(GEMMA3);
    let ids = tok.encode("𓀀", false, false).unwrap();
    assert!(ids.len() >= 2, "{ids:?}");
    let cut = &ids[..ids.len() - 1];
    let mut dec = tok.stream_decoder(true);
    for &id in cut {
        assert_eq!(dec.push(id).unwrap(), "");
    }
    assert_eq!(dec.flush(), "\u{FFFD}");
    assert_eq!(tok.decode(cut, true).unwrap(), "\u{FFFD}");
}

#[test]
fn special_token_accessors() {
    let smol = tokenizer(SMOLLM2);
    assert_eq!(smol.n_vocab(), 49152);
    assert_eq!((smol.bos(), smol.eos()), (Some(1), Some(2)));
    assert_eq!(smol.eot(), Some(2), "<|im_end|>");
    assert!(smol.is_eog(0) && smol.is_eog(2) && !smol.is_eog(1));
    assert_eq!(smol.token_text(1), Some("<|im_start|>"));
    assert_eq!(smol.token_type(1), Some(TokenType::Control));
    assert_eq!(smol.token_text(49152), None);

    let gemma = tokenizer(GEMMA3);
    assert_eq!(gemma.n_vocab(), 262144);
    assert_eq!((gemma.bos(), gemma.eos()), (Some(2), Some(1)));
    assert_eq!(gemma.eot(), Some(106), "<end_of_turn>");
    assert!(gemma.is_eog(1) && gemma.is_eog(106) && !gemma.is_eog(2));
    assert_eq!(gemma.token_text(106), Some("<end_of_turn>"));
    assert!(gemma.decode(&[262144], true).is_err(), "out-of-range id");
}
