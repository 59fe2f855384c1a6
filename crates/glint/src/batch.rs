//! [`Batch`]: tokens to decode, each at a position in one or more sequences.

/// Tokens to decode, each at an explicit position in one or more sequences.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub(crate) tokens: Vec<i32>,
    pub(crate) pos: Vec<i32>,
    pub(crate) seq_ids: Vec<Vec<i32>>,
    pub(crate) logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// A batch of one sequence's tokens at positions `pos0..`, logits for the
    /// last token only.
    pub fn from_tokens(tokens: &[u32], pos0: i32, seq_id: i32) -> Batch {
        let mut b = Batch::new();
        for (i, &t) in tokens.iter().enumerate() {
            b.add(t, pos0 + i as i32, &[seq_id], i + 1 == tokens.len());
        }
        b
    }

    /// Append a token.
    pub fn add(&mut self, token: u32, pos: i32, seq_ids: &[i32], logits: bool) {
        self.tokens.push(token.min(i32::MAX as u32) as i32);
        self.pos.push(pos);
        self.seq_ids.push(seq_ids.to_vec());
        self.logits.push(logits);
    }

    /// Remove every token.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.pos.clear();
        self.seq_ids.clear();
        self.logits.clear();
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}
