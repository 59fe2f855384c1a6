//! The incremental matcher: llama.cpp's stacks over a [`Grammar`].

use std::sync::Arc;

use crate::{Elem, Grammar};

/// A place in the grammar: rule, alternative, element index.
type Pos = (u32, u32, u32);
/// What is left to match, innermost last; its top is a character class
/// (or the stack is empty: the root is complete).
type Stack = Vec<Pos>;

/// Where a partial output stands in a grammar: every way it can go on.
#[derive(Clone, Debug)]
pub struct Matcher {
    g: Arc<Grammar>,
    stacks: Vec<Stack>,
}

/// Most stacks kept at once (an ambiguous grammar can multiply them).
const MAX_STACKS: usize = 4096;

impl Matcher {
    /// At the start of `root`.
    pub fn new(g: Arc<Grammar>) -> Matcher {
        let mut stacks = Vec::new();
        for a in 0..g.rules[0].len() {
            expand(&g, vec![(0, a as u32, 0)], &mut stacks);
        }
        dedup(&mut stacks);
        Matcher { g, stacks }
    }

    /// Take code point `c`; false (and nothing changes) when no way of the
    /// grammar takes it here.
    pub fn advance(&mut self, c: u32) -> bool {
        let next = step(&self.g, &self.stacks, c);
        if next.is_empty() {
            return false;
        }
        self.stacks = next;
        true
    }

    /// Take every code point of `s`; false (and nothing changes) when the
    /// grammar refuses one.
    pub fn advance_str(&mut self, s: &str) -> bool {
        let mut stacks = self.stacks.clone();
        for c in s.chars() {
            stacks = step(&self.g, &stacks, u32::from(c));
            if stacks.is_empty() {
                return false;
            }
        }
        self.stacks = stacks;
        true
    }

    /// Whether the output so far is a whole sentence of the grammar (the
    /// end-of-generation token may come now).
    pub fn is_accepting(&self) -> bool {
        self.stacks.iter().any(Vec::is_empty)
    }

    /// Whether nothing more can come (every way is complete).
    pub fn is_done(&self) -> bool {
        self.stacks.iter().all(Vec::is_empty)
    }

    /// `allowed[t]` for each token of `trie`: whether token `t`'s text can
    /// follow here. Tokens with no text (specials, partial UTF-8) are not
    /// allowed; the caller decides about end-of-generation.
    pub fn allowed(&self, trie: &TokenTrie) -> Vec<bool> {
        let mut out = vec![false; trie.n_vocab];
        walk(&self.g, trie, 0, &self.stacks, &mut out);
        out
    }
}

fn walk(g: &Grammar, trie: &TokenTrie, node: usize, stacks: &[Stack], out: &mut [bool]) {
    for &(c, child) in &trie.nodes[node].children {
        let next = step(g, stacks, c);
        if next.is_empty() {
            continue;
        }
        for &t in &trie.nodes[child].tokens {
            out[t as usize] = true;
        }
        walk(g, trie, child, &next, out);
    }
}

/// The stacks after code point `c`.
fn step(g: &Grammar, stacks: &[Stack], c: u32) -> Vec<Stack> {
    let mut out = Vec::new();
    for s in stacks {
        let Some(&(r, a, i)) = s.last() else {
            continue;
        };
        let e = &g.rules[r as usize][a as usize][i as usize];
        if e.takes(c) {
            let mut n = s.clone();
            n.pop();
            n.push((r, a, i + 1));
            expand(g, n, &mut out);
        }
        if out.len() > MAX_STACKS {
            break;
        }
    }
    dedup(&mut out);
    out
}

fn dedup(stacks: &mut Vec<Stack>) {
    stacks.sort_unstable();
    stacks.dedup();
}

/// Bring `s` to a character class on top (or empty), every alternative of
/// each rule reached pushed as its own stack, into `out`.
fn expand(g: &Grammar, mut s: Stack, out: &mut Vec<Stack>) {
    loop {
        let Some(&(r, a, i)) = s.last() else {
            out.push(s);
            return;
        };
        let alt = &g.rules[r as usize][a as usize];
        match alt.get(i as usize) {
            None => {
                s.pop();
            }
            Some(Elem::Char { .. }) => {
                out.push(s);
                return;
            }
            Some(Elem::Rule(callee)) => {
                s.pop();
                // The caller's continuation; a finished one is not kept (a
                // tail call), so right recursion does not grow the stack.
                if (i as usize) + 1 < alt.len() {
                    s.push((r, a, i + 1));
                }
                for b in 0..g.rules[*callee].len() {
                    let mut n = s.clone();
                    n.push((*callee as u32, b as u32, 0));
                    expand(g, n, out);
                }
                return;
            }
        }
    }
}

/// The vocabulary's token texts as a trie of code points.
#[derive(Debug)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    n_vocab: usize,
}

#[derive(Debug, Default)]
struct Node {
    children: Vec<(u32, usize)>,
    tokens: Vec<u32>,
}

impl TokenTrie {
    /// From each token's bytes (`None`: a token with no text of its own,
    /// like a control token); a token whose bytes are not whole UTF-8
    /// characters is left out.
    pub fn new(texts: &[Option<Vec<u8>>]) -> TokenTrie {
        let mut nodes = vec![Node::default()];
        for (t, bytes) in texts.iter().enumerate() {
            let Some(s) = bytes.as_deref().and_then(|b| std::str::from_utf8(b).ok()) else {
                continue;
            };
            if s.is_empty() {
                continue;
            }
            let mut n = 0;
            for c in s.chars() {
                let c = u32::from(c);
                n = match nodes[n].children.iter().find(|x| x.0 == c) {
                    Some(&(_, k)) => k,
                    None => {
                        nodes.push(Node::default());
                        let k = nodes.len() - 1;
                        nodes[n].children.push((c, k));
                        k
                    }
                };
            }
            nodes[n].tokens.push(t as u32);
        }
        TokenTrie {
            nodes,
            n_vocab: texts.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trie_walk_allows_exactly_the_tokens_a_plain_check_allows() {
        let g = Arc::new(Grammar::parse("root ::= \"{\" [a-z]* \"}\" | \"ab\"").unwrap());
        let texts: Vec<Option<Vec<u8>>> = ["{", "{a", "{ab}", "a", "ab", "abc", "}", "x", "{A", ""]
            .iter()
            .map(|s| Some(s.as_bytes().to_vec()))
            .chain([None, Some(vec![0xe9])])
            .collect();
        let trie = TokenTrie::new(&texts);
        let m = Matcher::new(g);
        let got = m.allowed(&trie);
        let plain: Vec<bool> = texts
            .iter()
            .map(|t| {
                t.as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .is_some_and(|s| !s.is_empty() && m.clone().advance_str(s))
            })
            .collect();
        assert_eq!(got, plain);
        assert_eq!(
            got,
            vec![true, true, true, true, true, false, false, false, false, false, false, false]
        );
        let mut m2 = m.clone();
        assert!(m2.advance_str("ab") && m2.is_accepting() && m2.is_done());
    }
}
