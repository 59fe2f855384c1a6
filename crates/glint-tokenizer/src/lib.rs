//! Tokenizers built from GGUF metadata that give llama.cpp's token ids.
//!
//! # Why this shape
//!
//! A GGUF file carries the vocabulary (`tokenizer.ggml.*`) but not the
//! program that uses it: that is llama.cpp's `llama-vocab.cpp`. glint must
//! give the same ids, or the model sees a different prompt.
//!
//! - **gpt2** (byte-level BPE): written here (`bpe.rs`), the file's merges
//!   ranked in order and the pre-tokenizer regexes llama.cpp picks for
//!   `tokenizer.ggml.pre` (see [`pre_tokenizer_names`]; `fancy-regex`, pure
//!   Rust), as Hugging Face's `tokenizers` pipeline gave them before (15
//!   MiB for SmolLM2's vocabulary, against about 3 MiB here).
//! - **llama** (SentencePiece): llama.cpp's own algorithm, written here
//!   (`spm.rs`): adjacent symbols whose concatenation is a token merged by
//!   that token's score, highest first, equal scores leftmost first; spaces
//!   become `▁`, characters left that are not tokens fall back to `<0xXX>`
//!   byte tokens. It indexes the vocabulary's texts in place (2 MiB for
//!   Gemma 3's 262,144 tokens, where a `tokenizers` BPE built from derived
//!   merges held about 50 MiB and took 0.6–0.85 s to build).
//!
//! What a `tokenizers` pipeline would do differently from llama.cpp is done here:
//! splitting out special tokens (llama.cpp's `tokenizer_st_partition`:
//! longest token text first, user-defined tokens always, control tokens only
//! when parsing special), SentencePiece's space prefix after each special
//! token, BOS/EOS, and detokenizing (token pieces as bytes, so a
//! [`StreamDecoder`] can hold back half a UTF-8 character).
//!
//! # Where it can still differ from llama.cpp
//!
//! None of these occur in the reference corpus (every id matches):
//!
//! - Per-token lstrip/rstrip (llama.cpp sets them for a few models by name:
//!   Phi-3, Jina, ModernBERT) are not applied.
//! - Decoding does not apply llama.cpp's `clean_spaces`, so that
//!   `decode(encode(x)) == x`.
//! - gpt2 merges whose parts or result are not tokens are dropped.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod bpe;
mod error;
mod index;
mod pre;
mod spm;
mod vocab;

use std::borrow::Cow;

use aho_corasick::AhoCorasick;
use glint_gguf::GgufFile;

pub use error::{Result, TokenizerError};
pub use vocab::TokenType;

use pre::PreTokenizerRow;
use vocab::{attr, Vocab};

/// SentencePiece's visible space, U+2581.
pub(crate) const SPM_SPACE: &str = "\u{2581}";

/// Every `tokenizer.ggml.pre` value glint supports for gpt2 vocabularies.
pub fn pre_tokenizer_names() -> Vec<&'static str> {
    pre::PRE_TOKENIZERS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}

/// Which algorithm the vocabulary uses (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `gpt2`: byte-level BPE with merges.
    Bpe,
    /// `llama`: SentencePiece BPE with scores and byte fallback.
    Spm,
}

/// A tokenizer for one model's vocabulary.
pub struct Tokenizer {
    kind: VocabKind,
    /// What splits and merges plain text.
    merger: Merger,
    vocab: Vocab,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    /// Control, user-defined and unknown tokens, longest text first (ties
    /// by id): the order llama.cpp splits them out of the input.
    special: Vec<u32>,
    /// Finds which of `special` occur in a text (pattern i = `special[i]`).
    special_finder: Option<AhoCorasick>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("n_vocab", &self.n_vocab())
            .field("bos", &self.vocab.bos)
            .field("eos", &self.vocab.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .finish_non_exhaustive()
    }
}

/// The algorithm that splits and merges plain text, by vocabulary kind.
enum Merger {
    /// gpt2: byte-level BPE, merged here (`bpe.rs`).
    Bpe(Box<bpe::Bpe>),
    /// llama: SentencePiece, merged here (`spm.rs`).
    Spm(Box<spm::Spm>),
}

/// A piece of input after special tokens are split out.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// The BPE pre-tokenizer `tokenizer.ggml.pre` names (`default` when absent).
fn find_pre(gguf: &GgufFile) -> Result<&'static PreTokenizerRow> {
    let name = gguf.get_str(vocab::KEY_PRE)?.unwrap_or("default");
    pre::find(name).ok_or_else(|| TokenizerError::UnknownPreTokenizer {
        pre: name.to_string(),
        supported: pre::supported_names(),
    })
}

/// `(add_bos, add_eos, add_space_prefix)`: the file's flags, else
/// llama.cpp's defaults for the model (`pre_row` is `None` for
/// SentencePiece). A flag that adds a token the vocabulary lacks is an error.
fn read_add_flags(
    gguf: &GgufFile,
    pre_row: Option<&PreTokenizerRow>,
    vocab: &Vocab,
) -> Result<(bool, bool, bool)> {
    let (default_add_bos, default_space_prefix) = match pre_row {
        Some(row) => (row.add_bos, false),
        None => (true, true),
    };
    let add_bos = gguf
        .get_bool(vocab::KEY_ADD_BOS)?
        .unwrap_or(default_add_bos);
    let add_eos = gguf.get_bool(vocab::KEY_ADD_EOS)?.unwrap_or(false);
    let add_space_prefix = match pre_row {
        None => gguf
            .get_bool(vocab::KEY_ADD_SPACE_PREFIX)?
            .unwrap_or(default_space_prefix),
        Some(_) => false,
    };
    if add_bos && vocab.bos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            add_key: vocab::KEY_ADD_BOS,
            id_key: "tokenizer.ggml.bos_token_id",
        });
    }
    if add_eos && vocab.eos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            add_key: vocab::KEY_ADD_EOS,
            id_key: "tokenizer.ggml.eos_token_id",
        });
    }
    Ok((add_bos, add_eos, add_space_prefix))
}

/// Control, user-defined and unknown tokens, longest text first (the order
/// llama.cpp splits them out of the input), and a finder over their texts.
fn special_tokens(vocab: &Vocab) -> Result<(Vec<u32>, Option<AhoCorasick>)> {
    let mut special: Vec<u32> = (0..vocab.texts.len() as u32)
        .filter(|&i| {
            vocab.attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
        })
        .collect();
    special.sort_by_key(|&i| std::cmp::Reverse(vocab.texts[i as usize].len()));
    let special_finder = if special.is_empty() {
        None
    } else {
        Some(
            AhoCorasick::new(special.iter().map(|&i| &vocab.texts[i as usize])).map_err(|e| {
                TokenizerError::Backend {
                    what: "indexing special tokens",
                    message: e.to_string(),
                }
            })?,
        )
    };
    Ok((special, special_finder))
}

impl Tokenizer {
    /// Builds the tokenizer described by `tokenizer.ggml.*` in `gguf`.
    ///
    /// Errors name the key: an unknown `tokenizer.ggml.model` or
    /// `tokenizer.ggml.pre`, missing or mistyped arrays, arrays shorter than
    /// the token list, duplicate token texts, or `add_bos_token` without a
    /// BOS id.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let model = gguf.require_str(vocab::KEY_MODEL)?;
        let (kind, default_bos, default_eos) = match model {
            "gpt2" => (VocabKind::Bpe, Some(11), Some(11)),
            "llama" => (VocabKind::Spm, Some(1), Some(2)),
            other => {
                return Err(TokenizerError::UnknownModel {
                    model: other.to_string(),
                })
            }
        };
        // Check the pre-tokenizer before the (slow) vocabulary work.
        let pre_row = match kind {
            VocabKind::Bpe => Some(find_pre(gguf)?),
            VocabKind::Spm => None,
        };
        let vocab = Vocab::read(gguf, default_bos, default_eos)?;
        let (add_bos, add_eos, add_space_prefix) = read_add_flags(gguf, pre_row, &vocab)?;
        let merger = match pre_row {
            Some(row) => {
                let merges = gguf.require_str_array(vocab::KEY_MERGES)?;
                Merger::Bpe(Box::new(bpe::Bpe::new(&vocab, merges, row)?))
            }
            None => Merger::Spm(Box::new(spm::Spm::new(&vocab))),
        };
        let (special, special_finder) = special_tokens(&vocab)?;
        Ok(Tokenizer {
            kind,
            merger,
            vocab,
            add_bos,
            add_eos,
            add_space_prefix,
            special,
            special_finder,
        })
    }

    /// Token ids for `text`.
    ///
    /// `add_special` adds BOS and EOS where the model asks for them
    /// (`tokenizer.ggml.add_bos_token` / `add_eos_token`, llama.cpp's
    /// defaults when absent). `parse_special` recognises control tokens
    /// written in the text (`<|im_start|>`); without it they are plain text.
    /// User-defined tokens are recognised either way, as in llama.cpp.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.vocab.bos);
        }
        // SentencePiece: a space before text that starts the input or
        // follows a special token, if the model wants it.
        let mut prev_special = true;
        for frag in self.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    if self.kind == VocabKind::Spm && self.add_space_prefix && prev_special {
                        self.encode_plain(&format!(" {t}"), &mut out)?;
                    } else {
                        self.encode_plain(t, &mut out)?;
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.vocab.eos);
        }
        Ok(out)
    }

    /// Encodes text holding no special tokens with the vocabulary's merger.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        match &self.merger {
            Merger::Spm(spm) => spm.encode(&self.vocab, text, out),
            Merger::Bpe(bpe) => bpe.encode(&self.vocab, text, out),
        }
    }

    /// Splits special tokens out of `text` like llama.cpp's
    /// `tokenizer_st_partition`: for each special token, longest text
    /// first, every occurrence in every remaining text fragment becomes a
    /// token. Control and unknown tokens take part only with
    /// `parse_special`.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut frags = vec![Fragment::Text(text)];
        let Some(finder) = &self.special_finder else {
            return frags;
        };
        // Only tokens that occur somewhere in the text can split it; the
        // pattern index is the position in `special`, so sorting keeps
        // llama.cpp's order.
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        present.sort_unstable();
        present.dedup();
        for idx in present {
            let id = self.special[idx];
            let a = self.vocab.attrs[id as usize];
            if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let needle = &self.vocab.texts[id as usize];
            let mut next = Vec::with_capacity(frags.len() + 2);
            for frag in frags {
                match frag {
                    Fragment::Token(_) => next.push(frag),
                    Fragment::Text(mut rest) => {
                        while let Some(pos) = rest.find(needle) {
                            if pos > 0 {
                                next.push(Fragment::Text(&rest[..pos]));
                            }
                            next.push(Fragment::Token(id));
                            rest = &rest[pos + needle.len()..];
                        }
                        if !rest.is_empty() {
                            next.push(Fragment::Text(rest));
                        }
                    }
                }
            }
            frags = next;
        }
        frags
    }

    /// The bytes token `id` stands for, like llama.cpp's `token_to_piece`
    /// without lstrip: control and unknown tokens give their text only when
    /// `special`; user-defined tokens always give their text; unused tokens
    /// give nothing.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<Cow<'_, [u8]>> {
        let i = self.check_id(id)?;
        let a = self.vocab.attrs[i];
        let text = &self.vocab.texts[i];
        if a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return Ok(if special {
                Cow::Borrowed(text.as_bytes())
            } else {
                Cow::Borrowed(&[])
            });
        }
        if a & attr::USER_DEFINED != 0 {
            return Ok(Cow::Borrowed(text.as_bytes()));
        }
        if a & attr::NORMAL != 0 {
            return Ok(match self.kind {
                VocabKind::Spm => {
                    if text.contains(SPM_SPACE) {
                        Cow::Owned(text.replace(SPM_SPACE, " ").into_bytes())
                    } else {
                        Cow::Borrowed(text.as_bytes())
                    }
                }
                VocabKind::Bpe => Cow::Owned(byte_level_decode(text)),
            });
        }
        if a & attr::BYTE != 0 {
            return Ok(match parse_byte_token(text) {
                Some(b) => Cow::Owned(vec![b]),
                None => Cow::Borrowed(text.as_bytes()),
            });
        }
        Ok(Cow::Borrowed(&[]))
    }

    /// Text for `ids`. With `skip_special`, control and unknown tokens give
    /// nothing (llama.cpp's `remove_special` and `unparse_special = false`);
    /// otherwise their text. A SentencePiece model that adds a space prefix
    /// loses one leading space from the first token (after a leading BOS),
    /// so that `decode(encode(x))` is `x`. Bytes that are not UTF-8 become
    /// U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        let mut first = true;
        for (n, &id) in ids.iter().enumerate() {
            if self.is_leading_bos(n, id, skip_special) {
                continue;
            }
            let piece = self.token_to_piece(id, !skip_special)?;
            bytes.extend_from_slice(self.lstrip(&piece, first));
            first = false;
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A detokenizer that takes one id at a time and gives back only
    /// complete UTF-8 text; see [`StreamDecoder`].
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder {
            tok: self,
            skip_special,
            pending: Vec::new(),
            n_pushed: 0,
            first: true,
        }
    }

    /// llama.cpp's detokenizer drops a BOS in first place when removing
    /// special tokens, and the space strip then applies to the next token.
    fn is_leading_bos(&self, n: usize, id: u32, skip_special: bool) -> bool {
        n == 0 && skip_special && self.add_bos && Some(id) == self.vocab.bos
    }

    fn lstrip<'p>(&self, piece: &'p [u8], first: bool) -> &'p [u8] {
        if first && self.add_space_prefix && self.kind == VocabKind::Spm {
            piece.strip_prefix(b" ").unwrap_or(piece)
        } else {
            piece
        }
    }

    fn check_id(&self, id: u32) -> Result<usize> {
        let i = id as usize;
        if i < self.vocab.texts.len() {
            Ok(i)
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                n_vocab: self.vocab.texts.len(),
            })
        }
    }

    /// Which algorithm the vocabulary uses.
    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.vocab.texts.len()
    }

    /// The token's text as stored in the vocabulary (`Ġ`/`▁` and all), or
    /// `None` out of range.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize)
    }

    /// The token's stored type, or `None` out of range.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.types.get(id as usize).copied()
    }

    /// The token's score (SentencePiece; 0 where the file has none).
    pub fn token_score(&self, id: u32) -> Option<f32> {
        self.vocab.scores.get(id as usize).copied()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// End-of-turn token (`tokenizer.ggml.eot_token_id`, else found by
    /// name: `<|eot_id|>`, `<|im_end|>`, `<end_of_turn>`, …).
    pub fn eot(&self) -> Option<u32> {
        self.vocab.eot
    }

    /// The fill-in-the-middle tokens (prefix, suffix, middle), when the
    /// model has all three (by GGUF key, or by their usual names).
    pub fn fim(&self) -> Option<[u32; 3]> {
        match self.vocab.fim {
            [Some(p), Some(s), Some(m)] => Some([p, s, m]),
            _ => None,
        }
    }

    /// Whether generating `id` ends generation (EOS, EOT, EOM and the
    /// tokens llama.cpp recognises by name).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// The end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether `encode(.., add_special = true, ..)` adds BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` adds EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
}

/// Detokenizes one token at a time.
///
/// Byte-fallback tokens and byte-level BPE tokens can each hold part of a
/// UTF-8 character; [`push`](Self::push) returns only text that is
/// complete and keeps the rest for the next call, and [`flush`](Self::flush)
/// returns what is left at the end. The concatenated output equals
/// [`Tokenizer::decode`] of the same ids.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    /// Bytes not yet returned: at most an incomplete UTF-8 sequence.
    pending: Vec<u8>,
    n_pushed: usize,
    /// The next token is the first one that is not a dropped BOS.
    first: bool,
}

impl StreamDecoder<'_> {
    /// Adds token `id`; returns the text completed by it (maybe empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let n = self.n_pushed;
        self.n_pushed += 1;
        if self.tok.is_leading_bos(n, id, self.skip_special) {
            // Still check the id, as `decode` would.
            self.tok.check_id(id)?;
            return Ok(String::new());
        }
        let piece = self.tok.token_to_piece(id, !self.skip_special)?;
        self.pending
            .extend_from_slice(self.tok.lstrip(&piece, self.first));
        self.first = false;
        Ok(self.take_complete())
    }

    /// Returns whatever is left (an incomplete character becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// Moves every complete character (and U+FFFD for each invalid
    /// sequence, as `from_utf8_lossy` does) out of `pending`, keeping a
    /// trailing sequence that more bytes could still complete.
    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix up to `valid_up_to` is UTF-8 by definition.
                    out.push_str(&String::from_utf8_lossy(
                        &self.pending[start..start + valid],
                    ));
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start += valid + bad;
                        }
                        None => {
                            start += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}

/// `<0xAB>` → `0xAB`.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A byte-level BPE token's bytes; characters outside the table (only in
/// malformed vocabularies) are kept as their UTF-8.
fn byte_level_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match bpe::char_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}
