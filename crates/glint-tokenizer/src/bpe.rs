//! Byte-level BPE (`tokenizer.ggml.model = gpt2`) giving the ids of
//! llama.cpp's `llm_tokenizer_bpe` (and of Hugging Face's `tokenizers`
//! pipeline it replaced here, which held about 15 MiB for SmolLM2's 49,152
//! tokens and 48,900 merges, against about 3 MiB here):
//!
//! 1. the row's regexes split the text in turn, each splitting every piece
//!    the previous ones left, matches and the text between them each a
//!    piece of its own (llama.cpp's `unicode_regex_split`);
//! 2. each piece's bytes written as GPT-2's byte-to-unicode characters;
//! 3. a piece that is a token as a whole is that token where the row
//!    ignores merges; otherwise its characters are symbols, and the
//!    adjacent pair of lowest merge rank (leftmost among equals) merges
//!    until no pair has a merge.
//!
//! Token texts are found through a [`TextIndex`] over the vocabulary's own
//! texts; the merges are a map from a pair of ids to their rank and
//! result.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use ahash::AHashMap;
use fancy_regex::Regex;

use crate::error::{Result, TokenizerError};
use crate::index::TextIndex;
use crate::pre::PreTokenizerRow;
use crate::vocab::Vocab;

/// The byte-level BPE merger of one vocabulary.
pub(crate) struct Bpe {
    index: TextIndex,
    /// (left id, right id) -> (rank, merged id).
    merges: AHashMap<(u32, u32), (u32, u32)>,
    regexes: Vec<Regex>,
    ignore_merges: bool,
    /// Each byte's character in GPT-2's byte-to-unicode table.
    byte_chars: [char; 256],
}

/// A symbol of a piece: a token id, its neighbours, and whether it was
/// merged into its left neighbour.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
    gone: bool,
}

/// A pair of adjacent symbols with a merge: the heap's top is the lowest
/// rank, then the leftmost.
#[derive(PartialEq, Eq)]
struct Pair {
    rank: u32,
    left: usize,
    merged: u32,
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pair {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// The bytes GPT-2's table writes as themselves: printable Latin-1 but
/// the soft hyphen; the rest become `256 + n` in byte order.
fn printable(b: u32) -> bool {
    (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
}

/// GPT-2's byte-to-unicode table.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0;
    for (b, c) in out.iter_mut().enumerate() {
        let b = b as u32;
        let code = if printable(b) {
            b
        } else {
            n += 1;
            255 + n
        };
        *c = char::from_u32(code).expect("below the surrogates");
    }
    out
}

/// The byte GPT-2's table writes as `c`, if any.
pub(crate) fn char_byte(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth((c - 256) as usize)
        .map(|b| b as u8)
}

impl Bpe {
    /// The merger for `vocab` with the file's merge lines and the row's
    /// regexes. Merges are split as llama.cpp splits them (at the first
    /// space after the first byte); a repeated pair keeps its first rank;
    /// merges whose parts or result are not tokens are dropped, and ranks
    /// count the merges kept.
    pub(crate) fn new(
        vocab: &Vocab,
        merge_lines: &glint_gguf::StrArray,
        row: &PreTokenizerRow,
    ) -> Result<Bpe> {
        let index = TextIndex::new(&vocab.texts);
        let mut merges = AHashMap::with_capacity(merge_lines.len());
        let mut joined = String::new();
        for line in merge_lines.iter() {
            let Some(pos) = line.bytes().skip(1).position(|b| b == b' ') else {
                continue;
            };
            let (a, b) = (&line[..pos + 1], &line[pos + 2..]);
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let ids = (
                index.get(&vocab.texts, a),
                index.get(&vocab.texts, b),
                index.get(&vocab.texts, &joined),
            );
            if let (Some(a), Some(b), Some(ab)) = ids {
                let rank = merges.len() as u32;
                merges.entry((a, b)).or_insert((rank, ab));
            }
        }
        merges.shrink_to_fit();
        let regexes = row
            .regexes
            .iter()
            .map(|re| {
                Regex::new(re).map_err(|e| TokenizerError::Backend {
                    what: "compiling a pre-tokenizer regex",
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bpe {
            index,
            merges,
            regexes,
            ignore_merges: row.ignore_merges,
            byte_chars: byte_chars(),
        })
    }

    /// Appends the ids of `text` (no special tokens in it) to `out`.
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut pieces = vec![text];
        for re in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                split_isolated(re, piece, &mut next)?;
            }
            pieces = next;
        }
        let mut word = String::new();
        let mut syms = Vec::new();
        let mut queue = BinaryHeap::new();
        for piece in pieces {
            word.clear();
            word.extend(piece.bytes().map(|b| self.byte_chars[b as usize]));
            self.merge_word(vocab, &word, &mut syms, &mut queue, out);
        }
        Ok(())
    }

    /// The tokens of one piece written in byte-level characters.
    fn merge_word(
        &self,
        vocab: &Vocab,
        word: &str,
        syms: &mut Vec<Symbol>,
        queue: &mut BinaryHeap<Pair>,
        out: &mut Vec<u32>,
    ) {
        if self.ignore_merges {
            if let Some(id) = self.index.get(&vocab.texts, word) {
                out.push(id);
                return;
            }
        }
        // Characters that are not tokens (only in malformed vocabularies)
        // are left out, as `tokenizers` leaves them without an unknown
        // token.
        syms.clear();
        let mut buf = [0u8; 4];
        for c in word.chars() {
            if let Some(id) = self.index.get(&vocab.texts, c.encode_utf8(&mut buf)) {
                let k = syms.len();
                syms.push(Symbol {
                    id,
                    prev: k.checked_sub(1),
                    next: None,
                    gone: false,
                });
                if k > 0 {
                    syms[k - 1].next = Some(k);
                }
            }
        }
        queue.clear();
        let pair = |syms: &[Symbol], l: usize, r: usize| {
            self.merges
                .get(&(syms[l].id, syms[r].id))
                .map(|&(rank, merged)| Pair {
                    rank,
                    left: l,
                    merged,
                })
        };
        for r in 1..syms.len() {
            queue.extend(pair(syms, r - 1, r));
        }
        while let Some(p) = queue.pop() {
            let l = syms[p.left];
            let Some(r) = l.next.filter(|_| !l.gone) else {
                continue;
            };
            // A pair queued before one of its symbols changed is stale.
            if self.merges.get(&(l.id, syms[r].id)).map(|m| m.1) != Some(p.merged) {
                continue;
            }
            let after = syms[r].next;
            syms[p.left].id = p.merged;
            syms[p.left].next = after;
            syms[r].gone = true;
            if let Some(nx) = after {
                syms[nx].prev = Some(p.left);
            }
            if let Some(pv) = syms[p.left].prev {
                queue.extend(pair(syms, pv, p.left));
            }
            if let Some(nx) = after {
                queue.extend(pair(syms, p.left, nx));
            }
        }
        out.extend(syms.iter().filter(|s| !s.gone).map(|s| s.id));
    }
}

/// `text` split by `re`: each match a piece, and the text between matches
/// a piece of its own; empty pieces left out.
fn split_isolated<'t>(re: &Regex, text: &'t str, out: &mut Vec<&'t str>) -> Result<()> {
    let mut at = 0;
    for m in re.find_iter(text) {
        let m = m.map_err(|e| TokenizerError::Backend {
            what: "pre-tokenizing text",
            message: e.to_string(),
        })?;
        if m.start() > at {
            out.push(&text[at..m.start()]);
        }
        if m.end() > m.start() {
            out.push(m.as_str());
        }
        at = m.end();
    }
    if at < text.len() {
        out.push(&text[at..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2's table: every byte a distinct character that maps back to
    /// it; printable bytes as themselves, the 68 others from U+0100 on.
    #[test]
    fn byte_chars_are_gpt2_s_table_and_invert() {
        let t = byte_chars();
        for (b, &c) in t.iter().enumerate() {
            assert_eq!(char_byte(c), Some(b as u8), "byte {b:#04x} as {c:?}");
        }
        assert_eq!(
            (t[b'!' as usize], t[b' ' as usize], t[0]),
            ('!', '\u{120}', '\u{100}')
        );
        assert_eq!(t[0xAD], '\u{143}', "the soft hyphen is not printable");
        let mut sorted = t.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
        assert_eq!(char_byte('\u{144}'), None, "past the table");
    }

    /// Matches and the text between them each a piece; nothing lost.
    #[test]
    fn split_isolated_keeps_gaps_and_matches() {
        let re = Regex::new(r"\p{N}").unwrap();
        let mut out = Vec::new();
        split_isolated(&re, "ab12c3", &mut out).unwrap();
        assert_eq!(out, ["ab", "1", "2", "c", "3"]);
        out.clear();
        split_isolated(&re, "", &mut out).unwrap();
        assert!(out.is_empty());
    }
}
