//! GBNF grammars, llama.cpp's format, for constrained sampling.
//!
//! [`Grammar::parse`] reads the text (rules `name ::= ...`, alternatives
//! `|`, sequences, literals `"..."` with escapes, classes `[a-z]` `[^...]`,
//! any character `.`, groups `( )`, repetition `*` `+` `?` `{m}` `{m,}`
//! `{m,n}`, comments `#`) into rules of code-point ranges and rule
//! references, repetitions rewritten into helper rules. A [`Matcher`] walks
//! it as llama.cpp does: a set of stacks, each the elements still to match,
//! its top a character class; a code point advances every stack whose top
//! takes it. [`json_schema`] turns a JSON schema into such a grammar.
//!
//! Token masks: [`Matcher::allowed`] walks a [`TokenTrie`] of the
//! vocabulary's texts depth first, advancing the stacks one code point per
//! trie edge, so a prefix shared by many tokens is matched once and a
//! subtree no stack survives is skipped whole.

mod json;
mod matcher;
mod parse;

pub use json::{json_schema, json_schema_rules, JSON_PRIMITIVES};
pub use matcher::{Matcher, TokenTrie};

/// What went wrong, naming where.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GrammarError {
    /// The GBNF text does not parse.
    #[error("grammar: {what} at line {line}, column {col}")]
    Syntax {
        /// What was expected or found.
        what: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        col: usize,
    },
    /// A rule is used but never defined, or `root` is missing.
    #[error("grammar: rule `{0}` is not defined")]
    Undefined(String),
    /// A rule can reach itself without consuming a character.
    #[error("grammar: rule `{0}` is left-recursive")]
    LeftRecursive(String),
    /// The JSON schema uses something this converter refuses.
    #[error("json schema: {0}")]
    Schema(String),
    /// Too large (repetition counts, rules).
    #[error("grammar: {0}")]
    TooLarge(String),
}

/// One element of an alternative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elem {
    /// One code point within any of the ranges (inclusive), or, when
    /// `negated`, within none of them.
    Char {
        /// Inclusive code-point ranges.
        ranges: Vec<(u32, u32)>,
        /// `[^...]`.
        negated: bool,
    },
    /// Rule number `n`.
    Rule(usize),
}

impl Elem {
    fn takes(&self, c: u32) -> bool {
        match self {
            Elem::Char { ranges, negated } => {
                ranges.iter().any(|&(a, b)| a <= c && c <= b) != *negated
            }
            Elem::Rule(_) => false,
        }
    }
}

/// A parsed grammar: rules of alternatives of elements; rule 0 is `root`.
#[derive(Clone, Debug)]
pub struct Grammar {
    /// `rules[r][a]`: alternative `a` of rule `r`.
    pub rules: Vec<Vec<Vec<Elem>>>,
    /// Rule names (helper rules get `name_k`).
    pub names: Vec<String>,
}

/// Most rules a grammar may grow to (repetitions expand into copies).
const MAX_RULES: usize = 100_000;

impl Grammar {
    /// Parse GBNF text; `root` is the start rule.
    pub fn parse(text: &str) -> Result<Grammar, GrammarError> {
        let g = parse::parse(text)?;
        g.check_left_recursion()?;
        Ok(g)
    }

    /// Refuse rules that reach themselves through elements that may match
    /// nothing (the matcher would loop).
    fn check_left_recursion(&self) -> Result<(), GrammarError> {
        let n = self.rules.len();
        // nullable[r]: rule r may match the empty string.
        let mut nullable = vec![false; n];
        loop {
            let mut changed = false;
            for r in 0..n {
                if !nullable[r]
                    && self.rules[r].iter().any(|alt| {
                        alt.iter()
                            .all(|e| matches!(e, Elem::Rule(x) if nullable[*x]))
                    })
                {
                    nullable[r] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // first[r]: rules r can start with without consuming.
        let firsts: Vec<Vec<usize>> = (0..n)
            .map(|r| {
                let mut f = Vec::new();
                for alt in &self.rules[r] {
                    for e in alt {
                        match e {
                            Elem::Rule(x) => {
                                f.push(*x);
                                if !nullable[*x] {
                                    break;
                                }
                            }
                            Elem::Char { .. } => break,
                        }
                    }
                }
                f
            })
            .collect();
        // A cycle in `firsts` is left recursion (iterative DFS, 3 colours).
        let mut colour = vec![0u8; n];
        for start in 0..n {
            if colour[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            colour[start] = 1;
            while let Some(&mut (r, ref mut k)) = stack.last_mut() {
                if *k < firsts[r].len() {
                    let x = firsts[r][*k];
                    *k += 1;
                    match colour[x] {
                        0 => {
                            colour[x] = 1;
                            stack.push((x, 0));
                        }
                        1 => return Err(GrammarError::LeftRecursive(self.names[x].clone())),
                        _ => {}
                    }
                } else {
                    colour[r] = 2;
                    stack.pop();
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(g: &str, s: &str) -> bool {
        let g = std::sync::Arc::new(Grammar::parse(g).unwrap());
        let mut m = Matcher::new(g);
        s.chars().all(|c| m.advance(c as u32)) && m.is_accepting()
    }

    fn prefix_ok(g: &str, s: &str) -> bool {
        let g = std::sync::Arc::new(Grammar::parse(g).unwrap());
        let mut m = Matcher::new(g);
        s.chars().all(|c| m.advance(c as u32))
    }

    #[test]
    fn literals_classes_groups_and_repetition() {
        assert!(accepts(r#"root ::= "a"{5,5}"#, "aaaaa"));
        assert!(!accepts(r#"root ::= "a"{5,5}"#, "aaaa"));
        assert!(!prefix_ok(r#"root ::= "a"{5,5}"#, "aaaaaa"));
        assert!(accepts(
            r#"root ::= [a-c]+ ("x" | "yz")? # comment"#,
            "abcbyz"
        ));
        assert!(accepts("root ::= [^\\n]* \"\\n\"", "anything at all\n"));
        assert!(!prefix_ok("root ::= [^\\n]* \"\\n\"", "a\nb"));
        assert!(accepts(
            "root ::= item (\",\" item)*\nitem ::= [0-9]{1,3}",
            "1,22,333"
        ));
        assert!(!prefix_ok(
            "root ::= item (\",\" item)*\nitem ::= [0-9]{1,3}",
            "1234"
        ));
        assert!(accepts(r#"root ::= "é" "\u00e9" [\x41-\x42] ."#, "ééBz"));
        assert!(accepts("root ::= x{2,}\nx ::= \"ab\"", "ababab"));
    }

    #[test]
    fn errors_name_the_place_and_the_rule() {
        let e = Grammar::parse("root ::= this is (not valid GBNF").unwrap_err();
        assert!(
            matches!(e, GrammarError::Syntax { .. } | GrammarError::Undefined(_)),
            "{e}"
        );
        let e = Grammar::parse("root ::= \"a\" | (\"b\"").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert_eq!(
            Grammar::parse("root ::= x\n").unwrap_err(),
            GrammarError::Undefined("x".into())
        );
        assert_eq!(
            Grammar::parse("x ::= \"a\"").unwrap_err(),
            GrammarError::Undefined("root".into())
        );
        let e = Grammar::parse("root ::= root \"a\" | \"b\"").unwrap_err();
        assert_eq!(e, GrammarError::LeftRecursive("root".into()));
        assert!(Grammar::parse("root ::= \"a\"{1000000}").is_err());
    }
}
