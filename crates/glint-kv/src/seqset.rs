//! A fixed-size bitset of sequence ids: one per cell, no allocation.

use crate::SeqId;

/// Most sequences a cache can be created for (as llama.cpp's `LLAMA_MAX_SEQ`).
pub const MAX_SEQ: u32 = 256;

const WORDS: usize = (MAX_SEQ as usize) / 64;

/// The set of sequences that use one cell.
///
/// Ids are `0..MAX_SEQ`; the cache checks ids against its own `n_seq_max`
/// before they reach a set.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SeqSet([u64; WORDS]);

impl SeqSet {
    /// The empty set.
    pub const fn new() -> Self {
        SeqSet([0; WORDS])
    }

    /// A set holding exactly `seq_id`.
    ///
    /// Precondition: `0 <= seq_id < MAX_SEQ`.
    pub fn single(seq_id: SeqId) -> Self {
        let mut s = SeqSet::new();
        s.insert(seq_id);
        s
    }

    /// Whether `seq_id` is in the set (false for ids outside `0..MAX_SEQ`).
    pub fn contains(&self, seq_id: SeqId) -> bool {
        if seq_id < 0 || seq_id as u32 >= MAX_SEQ {
            return false;
        }
        let s = seq_id as usize;
        self.0[s / 64] >> (s % 64) & 1 == 1
    }

    /// Adds `seq_id`.
    ///
    /// Precondition: `0 <= seq_id < MAX_SEQ`.
    pub fn insert(&mut self, seq_id: SeqId) {
        debug_assert!(seq_id >= 0 && (seq_id as u32) < MAX_SEQ, "seq_id {seq_id}");
        let s = seq_id as usize;
        self.0[s / 64] |= 1 << (s % 64);
    }

    /// Removes `seq_id` (no-op when absent or out of range).
    pub fn remove(&mut self, seq_id: SeqId) {
        if seq_id < 0 || seq_id as u32 >= MAX_SEQ {
            return;
        }
        let s = seq_id as usize;
        self.0[s / 64] &= !(1 << (s % 64));
    }

    /// No sequence in the set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// Number of sequences in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The set as 32-bit words, bit `s % 32` of word `s / 32` for id `s`
    /// (the layout of a device copy of the cells).
    pub fn words32(&self) -> [u32; MAX_SEQ as usize / 32] {
        let mut out = [0u32; MAX_SEQ as usize / 32];
        for (i, w) in self.0.iter().enumerate() {
            out[2 * i] = *w as u32;
            out[2 * i + 1] = (*w >> 32) as u32;
        }
        out
    }

    /// The ids in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, &w)| {
            (0..64)
                .filter(move |b| w >> b & 1 == 1)
                .map(move |b| (wi * 64 + b) as SeqId)
        })
    }
}

impl std::fmt::Debug for SeqSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<SeqId> for SeqSet {
    /// Collects ids; ids outside `0..MAX_SEQ` are a caller bug (debug-asserted).
    fn from_iter<I: IntoIterator<Item = SeqId>>(iter: I) -> Self {
        let mut s = SeqSet::new();
        for q in iter {
            s.insert(q);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_iter_across_words() {
        let mut s = SeqSet::new();
        for q in [0, 63, 64, 200, 255] {
            s.insert(q);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 63, 64, 200, 255]);
        assert_eq!(s.len(), 5);
        s.remove(64);
        assert!(!s.contains(64) && s.contains(63) && s.contains(255));
        assert!(!s.contains(-1) && !s.contains(256));
        s.remove(-3);
        assert_eq!(s.len(), 4);
        assert!(!s.is_empty());
        assert!(SeqSet::new().is_empty());
        let w = s.words32();
        assert_eq!((w[0], w[1], w[6], w[7]), (1, 1 << 31, 1 << 8, 1 << 31));
        assert_eq!(w.iter().map(|w| w.count_ones()).sum::<u32>(), 4);
    }
}
