//! The candidate list every sampler reads and rewrites.

use std::cmp::Ordering;

/// One candidate token: llama.cpp's `llama_token_data`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenData {
    /// Token id.
    pub id: u32,
    /// Log-odds; samplers rewrite it (temperature, penalties, masks to `-inf`).
    pub logit: f32,
    /// Probability, valid only after a sampler that computes a softmax.
    pub p: f32,
}

/// The candidates of one sampling step: llama.cpp's `llama_token_data_array`.
///
/// Samplers shrink `data` (truncation keeps a prefix, XTC drops a prefix),
/// reorder it, and set `selected`, an index into `data` (not a token id).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenDataArray {
    /// The candidates, in whatever order the last sampler left them.
    pub data: Vec<TokenData>,
    /// Index into `data` of the chosen token, set by a selecting sampler
    /// (greedy, dist, mirostat).
    pub selected: Option<usize>,
    /// Whether `data` is known to be sorted by descending logit.
    pub sorted: bool,
}

impl TokenDataArray {
    /// One candidate per logit, token id = index, `p = 0`, unsorted, nothing
    /// selected: what `llama_sampler_sample` builds.
    pub fn from_logits(logits: &[f32]) -> Self {
        let data = logits
            .iter()
            .enumerate()
            .map(|(i, &logit)| TokenData {
                id: i as u32,
                logit,
                p: 0.0,
            })
            .collect();
        TokenDataArray {
            data,
            selected: None,
            sorted: false,
        }
    }

    /// Number of candidates left.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The selected token id, if a sampler selected one in range.
    pub fn selected_token(&self) -> Option<u32> {
        self.selected.and_then(|i| self.data.get(i)).map(|t| t.id)
    }

    /// Sort by descending logit (ties: ascending id), keeping only the first
    /// `k`; marks the array sorted. llama.cpp's
    /// `llama_token_data_array_partial_sort_inplace`, with a deterministic
    /// tie order where llama.cpp's `std::partial_sort` leaves it unspecified.
    pub fn partial_sort_truncate(&mut self, k: usize) {
        let k = k.min(self.data.len());
        if k == 0 {
            self.data.clear();
        } else {
            if k < self.data.len() {
                self.data.select_nth_unstable_by(k - 1, cmp_desc);
                self.data.truncate(k);
            }
            self.data.sort_unstable_by(cmp_desc);
        }
        self.sorted = true;
    }

    /// Sort all candidates by descending logit (ties: ascending id).
    pub fn sort(&mut self) {
        self.data.sort_unstable_by(cmp_desc);
        self.sorted = true;
    }

    /// The highest logit: the first when sorted, else found by a scan.
    /// Needs a candidate.
    pub(crate) fn max_logit(&self) -> f32 {
        if self.sorted {
            self.data[0].logit
        } else {
            self.data
                .iter()
                .map(|t| t.logit)
                .fold(self.data[0].logit, f32::max)
        }
    }

    /// llama.cpp's `llama_sampler_softmax_impl`: optionally sort, then
    /// `p = exp(logit - max) / sum` in f32. No-op on an empty array.
    pub fn softmax(&mut self, do_sort: bool) {
        if self.data.is_empty() {
            return;
        }
        if do_sort && !self.sorted {
            self.sort();
        }
        let max_l = self.max_logit();
        let mut cum_sum = 0.0f32;
        for t in &mut self.data {
            t.p = (t.logit - max_l).exp();
            cum_sum += t.p;
        }
        for t in &mut self.data {
            t.p /= cum_sum;
        }
    }
}

/// Descending logit, then ascending id: a total order, so every sort here is
/// deterministic. NaN logits (rejected by [`crate::Chain::sample`]) sort by
/// `f32::total_cmp` and cannot panic.
pub(crate) fn cmp_desc(a: &TokenData, b: &TokenData) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}
