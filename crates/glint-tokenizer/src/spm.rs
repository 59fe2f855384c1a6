//! SentencePiece (`tokenizer.ggml.model = llama`) the way llama.cpp's
//! `llm_tokenizer_spm` does it: the text's characters as symbols, adjacent
//! pairs whose concatenation is a token queued by that token's score
//! (highest first; equal scores leftmost first), merged until no pair is a
//! token; then each symbol is its token, or its bytes as `<0xXX>` tokens.
//!
//! It holds no copy of the vocabulary: a table of ids (4 bytes a slot)
//! indexes the vocabulary's own texts. For Gemma 3's 262,144 tokens that
//! is 2 MiB, where the `tokenizers` BPE built from derived merges held
//! about 50 MiB and took 0.6–0.85 s to build.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::{Result, TokenizerError};
use crate::index::TextIndex;
use crate::vocab::Vocab;
use crate::SPM_SPACE;

/// The SentencePiece merger of one vocabulary.
pub(crate) struct Spm {
    index: TextIndex,
    /// The `<0xXX>` token of each byte.
    bytes: [Option<u32>; 256],
}

/// A run of the text (a character at first) in the linked list of
/// symbols; `n == 0` once merged into its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    n: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A pair of adjacent symbols whose text is a token of `score`.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Bytes of the pair's text when queued: a pair whose symbols changed
    /// since is stale.
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// The heap's top: the highest score, then the leftmost (llama.cpp's
    /// `llm_bigram_spm::comparator`; -0.0 and 0.0 compare equal there too).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl Spm {
    pub(crate) fn new(vocab: &Vocab) -> Spm {
        let index = TextIndex::new(&vocab.texts);
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = index.get(&vocab.texts, &format!("<0x{b:02X}>"));
        }
        Spm { index, bytes }
    }

    /// The token whose text is `text`, if any.
    fn token(&self, vocab: &Vocab, text: &str) -> Option<u32> {
        self.index.get(&vocab.texts, text)
    }

    /// Appends the ids of `text` (no special tokens in it; any space
    /// prefix already added) to `out`. Spaces are written as `▁` first.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let text = text.replace(' ', SPM_SPACE);
        let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
        let n_chars = text.chars().count();
        for (k, (start, c)) in text.char_indices().enumerate() {
            syms.push(Symbol {
                start,
                n: c.len_utf8(),
                prev: k.checked_sub(1),
                next: (k + 1 < n_chars).then_some(k + 1),
            });
        }
        let mut queue = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<Bigram>, syms: &[Symbol], l: usize, r: usize| {
            let (a, b) = (syms[l], syms[r]);
            let piece = &text[a.start..b.start + b.n];
            if let Some(id) = self.token(vocab, piece) {
                queue.push(Bigram {
                    score: vocab.scores[id as usize],
                    left: l,
                    right: r,
                    size: piece.len(),
                });
            }
        };
        for r in 1..syms.len() {
            push(&mut queue, &syms, r - 1, r);
        }
        while let Some(bg) = queue.pop() {
            let (l, r) = (syms[bg.left], syms[bg.right]);
            if l.n == 0 || r.n == 0 || l.n + r.n != bg.size {
                continue;
            }
            // The right symbol joins the left one and leaves the list.
            syms[bg.left].n += r.n;
            syms[bg.right].n = 0;
            syms[bg.left].next = r.next;
            if let Some(nx) = r.next {
                syms[nx].prev = Some(bg.left);
            }
            if let Some(pv) = syms[bg.left].prev {
                push(&mut queue, &syms, pv, bg.left);
            }
            if let Some(nx) = syms[bg.left].next {
                push(&mut queue, &syms, bg.left, nx);
            }
        }
        // A merged symbol's text is a token by construction; a lone
        // character may not be: its bytes then (byte fallback).
        let mut at = Some(0);
        while let Some(i) = at {
            let s = syms[i];
            let piece = &text[s.start..s.start + s.n];
            match self.token(vocab, piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        let id = self.bytes[b as usize].ok_or_else(|| TokenizerError::Backend {
                            what: "encoding text",
                            message: format!(
                                "{piece:?} is not a token and the vocabulary has no <0x{b:02X}> \
                                 byte token"
                            ),
                        })?;
                        out.push(id);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }
}
