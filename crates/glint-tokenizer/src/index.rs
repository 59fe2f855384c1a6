//! Token text -> id over a vocabulary's own texts (no copy of them).

use glint_gguf::StrArray;

/// A slot of [`TextIndex`] holding no id.
const EMPTY: u32 = u32::MAX;

/// Token text -> id over the vocabulary's texts: open addressing, linear
/// probing, a power-of-two table at most half full.
pub(crate) struct TextIndex {
    // [capacity] token ids, EMPTY where free
    slots: Vec<u32>,
    hasher: ahash::RandomState,
}

impl TextIndex {
    pub(crate) fn new(texts: &StrArray) -> TextIndex {
        let cap = (texts.len() * 2).next_power_of_two().max(16);
        let mut ix = TextIndex {
            slots: vec![EMPTY; cap],
            // Fixed seeds: the same table on every run.
            hasher: ahash::RandomState::with_seeds(1, 2, 3, 4),
        };
        for (id, t) in texts.iter().enumerate() {
            // The vocabulary's texts are unique (Vocab::read checks it).
            let mut i = ix.home(t);
            while ix.slots[i] != EMPTY {
                i = (i + 1) & (cap - 1);
            }
            ix.slots[i] = id as u32;
        }
        ix
    }

    fn home(&self, text: &str) -> usize {
        self.hasher.hash_one(text) as usize & (self.slots.len() - 1)
    }

    pub(crate) fn get(&self, texts: &StrArray, text: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(text);
        loop {
            let id = self.slots[i];
            if id == EMPTY {
                return None;
            }
            if &texts[id as usize] == text {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
    }
}
