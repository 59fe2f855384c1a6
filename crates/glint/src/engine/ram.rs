//! Prefixes given up by idle slots, kept in host memory (llama-server's
//! `--cache-ram`): when the KV cache needs an idle slot's cells, its state
//! is saved here first, and a later request whose prompt starts with those
//! tokens gets them back with one state load instead of a prefill.
//!
//! Entries are matched on their **tokens**, compared one by one (never on a
//! hash alone: llama.cpp #27148 restored an unrelated conversation from a
//! hash match), and evicted least recently used first once their bytes pass
//! the budget.

use crate::chat::common_prefix;

/// One saved prefix.
struct Entry {
    /// Token ids at positions `0..tokens.len()`.
    tokens: Vec<u32>,
    /// `Context::state_seq_save` of them (checksummed).
    state: Vec<u8>,
    last_used: u64,
}

/// Saved prefixes within a byte budget.
pub(super) struct RamCache {
    budget: usize,
    used: usize,
    entries: Vec<Entry>,
}

/// Prefixes shorter than this are not worth a state save and load.
pub(super) const MIN_TOKENS: usize = 16;

impl RamCache {
    /// An empty cache of at most `budget` bytes.
    pub(super) fn new(budget: usize) -> RamCache {
        RamCache {
            budget,
            used: 0,
            entries: Vec::new(),
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub(super) fn used(&self) -> usize {
        self.used
    }

    /// Keep `state` of `tokens`; an entry that is a prefix of it goes
    /// (this one holds more), then the least recently used until the
    /// budget holds. A state larger than the whole budget is not kept.
    pub(super) fn insert(&mut self, tokens: Vec<u32>, state: Vec<u8>, now: u64) {
        if state.len() > self.budget || tokens.len() < MIN_TOKENS {
            return;
        }
        self.entries.retain(|e| {
            let covered = common_prefix(&e.tokens, &tokens) == e.tokens.len();
            if covered {
                self.used -= e.state.len();
            }
            !covered
        });
        self.used += state.len();
        self.entries.push(Entry {
            tokens,
            state,
            last_used: now,
        });
        while self.used > self.budget {
            let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used) else {
                break;
            };
            self.used -= self.entries.swap_remove(i).state.len();
        }
    }

    /// The entry sharing the longest token prefix with `prompt` (at most
    /// `limit` tokens counted): (its index, that length).
    pub(super) fn best(&self, prompt: &[u32], limit: usize) -> Option<(usize, usize)> {
        (0..self.entries.len())
            .map(|i| (i, common_prefix(&self.entries[i].tokens, prompt).min(limit)))
            .filter(|&(_, c)| c >= MIN_TOKENS)
            .max_by_key(|&(_, c)| c)
    }

    /// Entry `i`'s state, marked used at `now`.
    pub(super) fn take(&mut self, i: usize, now: u64) -> &[u8] {
        self.entries[i].last_used = now;
        &self.entries[i].state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(n: usize, base: u32) -> Vec<u32> {
        (0..n as u32).map(|i| base + i).collect()
    }

    #[test]
    fn matches_on_tokens_and_keeps_within_the_budget() {
        let mut c = RamCache::new(100);
        c.insert(toks(20, 0), vec![0; 40], 1);
        c.insert(toks(20, 1000), vec![0; 40], 2);
        assert_eq!(c.used(), 80);
        // The longest common prefix, capped at the limit.
        let mut p = toks(18, 0);
        p.push(7);
        assert_eq!(c.best(&p, 100), Some((0, 18)));
        assert_eq!(c.best(&p, 17), Some((0, 17)));
        // Too short a match is none.
        assert_eq!(c.best(&toks(10, 0), 100), None);
        // Over budget: the least recently used goes (entry 0 was used at 3).
        let _ = c.take(0, 3);
        c.insert(toks(30, 5000), vec![0; 40], 4);
        assert_eq!(c.used(), 80);
        assert!(c.best(&toks(20, 1000), 100).is_none());
        assert!(c.best(&toks(20, 0), 100).is_some());
        // A longer save of the same prefix replaces the shorter one.
        c.insert(toks(25, 0), vec![0; 10], 5);
        assert_eq!(c.best(&toks(25, 0), 100).map(|b| b.1), Some(25));
        assert_eq!(c.used(), 50);
        // Bigger than the budget: not kept.
        c.insert(toks(20, 9000), vec![0; 101], 6);
        assert_eq!(c.used(), 50);
    }
}
