//! The sampler interface and the chain that runs samplers in order.

use crate::{SampleError, TokenData, TokenDataArray};

/// One step of a sampling pipeline: llama.cpp's `llama_sampler_i`.
///
/// `apply` rewrites the candidates (filters, scales, or selects); `accept`
/// tells the sampler which token was finally emitted (penalties and DRY keep
/// a history); `reset` forgets that history and re-seeds random state.
pub trait Sampler: Send + SamplerClone {
    /// llama.cpp's name for the sampler (`"top-k"`, `"dist"`, ...).
    fn name(&self) -> &'static str;
    /// Rewrite the candidates in place.
    fn apply(&mut self, cur_p: &mut TokenDataArray);
    /// Record the emitted token. Default: no history.
    fn accept(&mut self, _token: u32) {}
    /// Forget history, re-seed random state. Default: nothing to forget.
    fn reset(&mut self) {}
}

/// A boxed copy of a sampler with its current state (history, RNG, mu), so
/// that `Box<dyn Sampler>` is `Clone`. Implemented for every `Clone` sampler.
pub trait SamplerClone {
    /// A copy of the sampler with its current state.
    fn clone_box(&self) -> Box<dyn Sampler>;
}

impl<S: Sampler + Clone + 'static> SamplerClone for S {
    fn clone_box(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn Sampler> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

impl std::fmt::Debug for dyn Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Samplers applied in order: llama.cpp's `llama_sampler_chain`.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    samplers: Vec<Box<dyn Sampler>>,
    n_sample: u64,
}

impl Chain {
    /// An empty chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a sampler (`llama_sampler_chain_add`).
    pub fn push(&mut self, sampler: Box<dyn Sampler>) {
        self.samplers.push(sampler);
    }

    /// Builder form of [`push`](Self::push).
    pub fn with(mut self, sampler: impl Sampler + 'static) -> Self {
        self.samplers.push(Box::new(sampler));
        self
    }

    /// The samplers, in order.
    pub fn samplers(&self) -> &[Box<dyn Sampler>] {
        &self.samplers
    }

    /// Mutable access to the samplers, in order.
    pub fn samplers_mut(&mut self) -> &mut [Box<dyn Sampler>] {
        &mut self.samplers
    }

    /// The samplers' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.samplers.iter().map(|s| s.name()).collect()
    }

    /// `logits -> top-k -> ...`, like `common_sampler_print`.
    pub fn describe(&self) -> String {
        let mut s = String::from("logits");
        for smpl in &self.samplers {
            s.push_str(" -> ");
            s.push_str(smpl.name());
        }
        s
    }

    /// How many tokens were accepted since creation.
    pub fn n_sample(&self) -> u64 {
        self.n_sample
    }

    /// Run the samplers over the raw `logits` and return the candidates with
    /// the selection, without accepting. Errors: empty logits, a NaN or `+inf`
    /// logit (`-inf` is a legal mask), a chain that masked every token (a
    /// logit bias banning all, say), or a chain that selected nothing (it
    /// lacks a selecting sampler such as `dist` or `greedy`).
    pub fn apply_logits(&mut self, logits: &[f32]) -> Result<TokenDataArray, SampleError> {
        check_logits(logits)?;
        self.apply_array(TokenDataArray::from_logits(logits))
    }

    /// [`sample`](Self::sample) from the best candidates alone: `cands`,
    /// `(id, logit)` sorted by descending logit (ties: ascending id), are
    /// the `k` a chain whose first effect is a top-k of `k` would keep
    /// ([`SamplerParams::leading_top_k`](crate::SamplerParams::leading_top_k)).
    /// The chain then sees what it would have seen after its top-k, so it
    /// picks the same token with the same random draws. Errors as
    /// [`sample`](Self::sample) (the caller checked the full logits' NaN and
    /// `+inf`: they sort first, so they would be among the candidates).
    pub fn sample_sorted(&mut self, cands: &[(u32, f32)]) -> Result<u32, SampleError> {
        if cands.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        if let Some(&(token, value)) = cands
            .iter()
            .find(|(_, v)| v.is_nan() || *v == f32::INFINITY)
        {
            return Err(SampleError::BadLogit { token, value });
        }
        let data = cands
            .iter()
            .map(|&(id, logit)| TokenData { id, logit, p: 0.0 })
            .collect();
        let cur_p = self.apply_array(TokenDataArray {
            data,
            selected: None,
            sorted: true,
        })?;
        self.accept_selected(&cur_p)
    }

    /// Accept and return the token `cur_p`'s selection names.
    fn accept_selected(&mut self, cur_p: &TokenDataArray) -> Result<u32, SampleError> {
        let token = cur_p
            .selected_token()
            .ok_or_else(|| SampleError::NoSelection {
                chain: self.describe(),
            })?;
        self.accept(token);
        Ok(token)
    }

    /// The chain over `cur_p`, its selection checked.
    fn apply_array(&mut self, mut cur_p: TokenDataArray) -> Result<TokenDataArray, SampleError> {
        self.apply(&mut cur_p);
        match cur_p.selected {
            // A selection with no probability: the chain (a logit bias of
            // -inf on every token, say) masked everything, and a selector
            // that still returned a token must not be believed.
            Some(i) if i < cur_p.data.len() && cur_p.data[i].logit == f32::NEG_INFINITY => {
                Err(SampleError::AllMasked)
            }
            Some(i) if i < cur_p.data.len() => Ok(cur_p),
            _ => Err(SampleError::NoSelection {
                chain: self.describe(),
            }),
        }
    }

    /// Sample one token and accept it: `llama_sampler_sample`.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SampleError> {
        let cur_p = self.apply_logits(logits)?;
        self.accept_selected(&cur_p)
    }
}

impl Sampler for Chain {
    fn name(&self) -> &'static str {
        "chain"
    }

    fn apply(&mut self, cur_p: &mut TokenDataArray) {
        for smpl in &mut self.samplers {
            smpl.apply(cur_p);
        }
    }

    fn accept(&mut self, token: u32) {
        for smpl in &mut self.samplers {
            smpl.accept(token);
        }
        self.n_sample += 1;
    }

    fn reset(&mut self) {
        for smpl in &mut self.samplers {
            smpl.reset();
        }
    }
}

pub(crate) fn check_logits(logits: &[f32]) -> Result<(), SampleError> {
    if logits.is_empty() {
        return Err(SampleError::EmptyLogits);
    }
    if let Some((i, &v)) = logits
        .iter()
        .enumerate()
        .find(|(_, v)| v.is_nan() || **v == f32::INFINITY)
    {
        return Err(SampleError::BadLogit {
            token: i as u32,
            value: v,
        });
    }
    Ok(())
}
