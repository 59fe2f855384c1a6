//! GBNF text to [`Grammar`]: a recursive-descent parser over code points.

use std::collections::HashMap;

use crate::{Elem, Grammar, GrammarError, MAX_RULES};

/// Most copies one `{m,n}` may make.
const MAX_REPEAT: u32 = 10_000;

struct Parser<'a> {
    src: Vec<char>,
    at: usize,
    text: &'a str,
    rules: Vec<Option<Vec<Vec<Elem>>>>,
    names: Vec<String>,
    ids: HashMap<String, usize>,
}

pub(crate) fn parse(text: &str) -> Result<Grammar, GrammarError> {
    let mut p = Parser {
        src: text.chars().collect(),
        at: 0,
        text,
        rules: Vec::new(),
        names: Vec::new(),
        ids: HashMap::new(),
    };
    p.id("root");
    p.skip_space(true);
    while p.at < p.src.len() {
        let name = p.name()?;
        p.skip_space(false);
        p.expect("::=")?;
        p.skip_space(true);
        let alts = p.alternatives(&name)?;
        let id = p.id(&name);
        if p.rules[id].is_some() {
            return Err(p.error(&format!("rule `{name}` is defined twice")));
        }
        p.rules[id] = Some(alts);
        p.skip_space(true);
    }
    let mut rules = Vec::with_capacity(p.rules.len());
    for (i, r) in p.rules.into_iter().enumerate() {
        rules.push(r.ok_or_else(|| GrammarError::Undefined(p.names[i].clone()))?);
    }
    Ok(Grammar {
        rules,
        names: p.names,
    })
}

impl Parser<'_> {
    fn id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        self.ids.insert(name.to_string(), self.rules.len());
        self.names.push(name.to_string());
        self.rules.push(None);
        self.rules.len() - 1
    }

    /// A new helper rule named after `base`.
    fn helper(&mut self, base: &str, alts: Vec<Vec<Elem>>) -> Result<usize, GrammarError> {
        if self.rules.len() >= MAX_RULES {
            return Err(GrammarError::TooLarge(format!(
                "more than {MAX_RULES} rules"
            )));
        }
        let name = format!("{base}_{}", self.rules.len());
        let id = self.id(&name);
        self.rules[id] = Some(alts);
        Ok(id)
    }

    fn error(&self, what: &str) -> GrammarError {
        let before: String = self.src[..self.at.min(self.src.len())].iter().collect();
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let _ = self.text;
        GrammarError::Syntax {
            what: what.to_string(),
            line,
            col,
        }
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.at).copied()
    }

    /// Spaces, tabs and comments; newlines too when `newlines` (or when
    /// the next line continues the rule: inside groups the caller says).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            if c == '#' {
                while let Some(c) = self.peek() {
                    if c == '\n' {
                        break;
                    }
                    self.at += 1;
                }
            } else if c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n') {
                self.at += 1;
            } else {
                break;
            }
        }
    }

    fn expect(&mut self, s: &str) -> Result<(), GrammarError> {
        for c in s.chars() {
            if self.peek() != Some(c) {
                return Err(self.error(&format!("expected `{s}`")));
            }
            self.at += 1;
        }
        Ok(())
    }

    fn name(&mut self) -> Result<String, GrammarError> {
        let start = self.at;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                self.at += 1;
            } else {
                break;
            }
        }
        if self.at == start {
            return Err(self.error("expected a rule name"));
        }
        Ok(self.src[start..self.at].iter().collect())
    }

    /// Whether a new rule starts here (`name ::=`), which ends the one
    /// before it at a newline.
    fn rule_starts(&self) -> bool {
        let mut k = self.at;
        while k < self.src.len()
            && (self.src[k].is_ascii_alphanumeric() || self.src[k] == '-' || self.src[k] == '_')
        {
            k += 1;
        }
        if k == self.at {
            return false;
        }
        while k < self.src.len() && (self.src[k] == ' ' || self.src[k] == '\t') {
            k += 1;
        }
        self.src[k..].starts_with(&[':', ':', '='])
    }

    fn alternatives(&mut self, rule: &str) -> Result<Vec<Vec<Elem>>, GrammarError> {
        self.alternatives_in(rule, false)
    }

    /// `seq | seq | ...`; in a group, newlines are spaces and `)` ends it.
    fn alternatives_in(
        &mut self,
        rule: &str,
        nested: bool,
    ) -> Result<Vec<Vec<Elem>>, GrammarError> {
        let mut alts = vec![self.sequence(rule, nested)?];
        loop {
            self.skip_space(nested);
            if self.peek() == Some('|') {
                self.at += 1;
                self.skip_space(true);
                alts.push(self.sequence(rule, nested)?);
            } else {
                return Ok(alts);
            }
        }
    }

    fn sequence(&mut self, rule: &str, nested: bool) -> Result<Vec<Elem>, GrammarError> {
        let mut seq: Vec<Elem> = Vec::new();
        loop {
            self.skip_space(nested);
            // At a newline outside a group: the rule goes on on the next line
            // unless a new rule starts there or the text ends.
            if !nested && self.peek() == Some('\n') {
                let save = self.at;
                self.skip_space(true);
                if self.peek().is_none() || self.rule_starts() || self.peek() == Some('|') {
                    if self.peek() != Some('|') {
                        self.at = save;
                        self.skip_space(true);
                    }
                    return Ok(seq);
                }
            }
            let Some(c) = self.peek() else {
                return Ok(seq);
            };
            let start = seq.len();
            match c {
                '"' => {
                    self.at += 1;
                    loop {
                        match self.peek() {
                            None => return Err(self.error("unterminated literal")),
                            Some('"') => {
                                self.at += 1;
                                break;
                            }
                            Some(_) => {
                                let cp = self.char_in_literal()?;
                                seq.push(Elem::Char {
                                    ranges: vec![(cp, cp)],
                                    negated: false,
                                });
                            }
                        }
                    }
                }
                '[' => {
                    self.at += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.at += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.error("unterminated character class")),
                            Some(']') => {
                                self.at += 1;
                                break;
                            }
                            Some(_) => {
                                let a = self.char_in_literal()?;
                                let b = if self.peek() == Some('-')
                                    && self.src.get(self.at + 1) != Some(&']')
                                {
                                    self.at += 1;
                                    self.char_in_literal()?
                                } else {
                                    a
                                };
                                if b < a {
                                    return Err(self.error("a range that ends before it starts"));
                                }
                                ranges.push((a, b));
                            }
                        }
                    }
                    seq.push(Elem::Char { ranges, negated });
                }
                '.' => {
                    self.at += 1;
                    seq.push(Elem::Char {
                        ranges: vec![(u32::from('\n'), u32::from('\n'))],
                        negated: true,
                    });
                }
                '(' => {
                    self.at += 1;
                    self.skip_space(true);
                    let alts = self.alternatives_in(rule, true)?;
                    self.skip_space(true);
                    if self.peek() != Some(')') {
                        return Err(self.error("expected `)`"));
                    }
                    self.at += 1;
                    let id = self.helper(rule, alts)?;
                    seq.push(Elem::Rule(id));
                }
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    if !nested && self.rule_starts() {
                        return Ok(seq);
                    }
                    let name = self.name()?;
                    let id = self.id(&name);
                    seq.push(Elem::Rule(id));
                }
                '|' | ')' => return Ok(seq),
                _ => return Err(self.error(&format!("unexpected `{c}`"))),
            }
            // Repetition applies to the last element (a literal's last char
            // only if it was one char: wrap literals longer than one).
            self.skip_space(false);
            if let Some(op) = self.peek().filter(|c| matches!(c, '*' | '+' | '?' | '{')) {
                let item: Vec<Elem> = seq.drain(start..).collect();
                let (min, max) = self.repetition(op)?;
                let e = self.repeat(rule, item, min, max)?;
                seq.extend(e);
            }
        }
    }

    /// `*` `+` `?` `{m}` `{m,}` `{m,n}`: (min, max or None).
    fn repetition(&mut self, op: char) -> Result<(u32, Option<u32>), GrammarError> {
        self.at += 1;
        Ok(match op {
            '*' => (0, None),
            '+' => (1, None),
            '?' => (0, Some(1)),
            _ => {
                let m = self.number()?;
                let r = if self.peek() == Some(',') {
                    self.at += 1;
                    if self.peek() == Some('}') {
                        (m, None)
                    } else {
                        let n = self.number()?;
                        if n < m {
                            return Err(self.error("{m,n} with n < m"));
                        }
                        (m, Some(n))
                    }
                } else {
                    (m, Some(m))
                };
                if self.peek() != Some('}') {
                    return Err(self.error("expected `}`"));
                }
                self.at += 1;
                r
            }
        })
    }

    fn number(&mut self) -> Result<u32, GrammarError> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let s: String = self.src[start..self.at].iter().collect();
        let n: u32 = s.parse().map_err(|_| self.error("expected a number"))?;
        if n > MAX_REPEAT {
            return Err(GrammarError::TooLarge(format!(
                "a repetition of {n}, more than {MAX_REPEAT}"
            )));
        }
        Ok(n)
    }

    /// `item` repeated min..=max (max None: unbounded), as helper rules.
    fn repeat(
        &mut self,
        rule: &str,
        item: Vec<Elem>,
        min: u32,
        max: Option<u32>,
    ) -> Result<Vec<Elem>, GrammarError> {
        let mut out = Vec::new();
        for _ in 0..min {
            out.extend(item.iter().cloned());
        }
        match max {
            None => {
                // star ::= item star | ε
                let id = self.helper(rule, vec![])?;
                let mut alt = item.clone();
                alt.push(Elem::Rule(id));
                self.rules[id] = Some(vec![alt, vec![]]);
                out.push(Elem::Rule(id));
            }
            Some(max) => {
                // opt_k ::= item opt_{k-1} | ε, nested max - min deep.
                let mut next: Option<usize> = None;
                for _ in min..max {
                    let mut alt = item.clone();
                    if let Some(n) = next {
                        alt.push(Elem::Rule(n));
                    }
                    next = Some(self.helper(rule, vec![alt, vec![]])?);
                }
                if let Some(n) = next {
                    out.push(Elem::Rule(n));
                }
            }
        }
        if out.len() > MAX_REPEAT as usize * 4 {
            return Err(GrammarError::TooLarge("a repetition too long".into()));
        }
        Ok(out)
    }

    /// One code point of a literal or class, escapes decoded.
    fn char_in_literal(&mut self) -> Result<u32, GrammarError> {
        let c = self.peek().ok_or_else(|| self.error("unexpected end"))?;
        self.at += 1;
        if c != '\\' {
            return Ok(u32::from(c));
        }
        let e = self
            .peek()
            .ok_or_else(|| self.error("unexpected end after `\\`"))?;
        self.at += 1;
        let hex = |p: &mut Self, n: usize| -> Result<u32, GrammarError> {
            let s: String = p
                .src
                .get(p.at..p.at + n)
                .map(|s| s.iter().collect())
                .unwrap_or_default();
            p.at += n;
            u32::from_str_radix(&s, 16).map_err(|_| p.error("a bad hex escape"))
        };
        Ok(match e {
            'n' => 10,
            'r' => 13,
            't' => 9,
            '\\' | '"' | '[' | ']' | '-' | '^' | '\'' => u32::from(e),
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            _ => return Err(self.error(&format!("unknown escape `\\{e}`"))),
        })
    }
}
