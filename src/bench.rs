//! What `glint bench` measures, as a library: llama-bench's test protocol,
//! the bytes a test must read, the host's read bandwidth and peak RSS.
//!
//! Protocol (llama-bench's): before each repetition the cache is cleared and
//! `n_depth` tokens are decoded untimed; then the timer covers
//! - `pp N`: N random prompt tokens in batches of `n_batch` (split into
//!   micro-batches of `n_ubatch`), logits for the last token only;
//! - `tg N`: N single-token decodes, each waited for (`argmax` of its logits
//!   reads 4 bytes, llama-bench's `llama_synchronize`);
//! - `pp N + tg M`: both, one after the other.
//!
//! tokens/s = (N + M) / seconds. One untimed warm-up run comes first (the
//! prompt, then one generated token), as llama-bench does.
//!
//! With `n_parallel` P > 1 (llama-batched-bench's parallel level), P
//! sequences share one unified cache and every count is per sequence: the
//! depth and the prompt are decoded for each (sequence after sequence, in
//! batches of `n_batch` tokens that may hold several sequences), and each
//! generated step is one batch of P tokens, one per sequence, the P greedy
//! tokens read back together. tokens/s = P (N + M) / seconds, aggregate.

use std::time::Instant;

use glint::{Batch, CacheType, Context, Error, Model};

/// One test: `n_prompt` prompt tokens and `n_gen` generated ones after
/// `n_depth` tokens already in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    /// Prompt tokens (one timed batch run).
    pub n_prompt: u32,
    /// Generated tokens (single-token decodes).
    pub n_gen: u32,
    /// Tokens in the cache before the timer starts.
    pub n_depth: u32,
    /// Sequences decoded together (at least 1); the counts above are per
    /// sequence.
    pub n_parallel: u32,
}

impl Test {
    /// llama-bench's name: `pp512`, `tg128`, `pp512+tg128`, with `@d512`
    /// for a depth.
    pub fn name(&self) -> String {
        let mut s = match (self.n_prompt, self.n_gen) {
            (p, 0) => format!("pp{p}"),
            (0, g) => format!("tg{g}"),
            (p, g) => format!("pp{p}+tg{g}"),
        };
        if self.n_depth > 0 {
            s.push_str(&format!(" @ d{}", self.n_depth));
        }
        s
    }

    /// Cache cells one sequence of the test needs.
    pub fn n_ctx(&self) -> u32 {
        self.n_depth
            .saturating_add(self.n_prompt)
            .saturating_add(self.n_gen)
    }

    /// Sequences (at least 1).
    pub fn n_seq(&self) -> u32 {
        self.n_parallel.max(1)
    }

    /// Tokens the timer covers, over all sequences.
    pub fn n_tokens(&self) -> u32 {
        (self.n_prompt + self.n_gen).saturating_mul(self.n_seq())
    }
}

/// Random token ids below `n_vocab` (llama-bench: `std::rand() % n_vocab`),
/// from the workspace's one seeded generator.
pub struct TokenRng(glint_testkit::Rng);

impl TokenRng {
    /// Seeded generator.
    pub fn new(seed: u64) -> TokenRng {
        TokenRng(glint_testkit::Rng::new(seed))
    }
    /// The next id in `0..n_vocab`.
    pub fn token(&mut self, n_vocab: usize) -> u32 {
        (self.0.next_u64() % n_vocab.max(1) as u64) as u32
    }
}

/// Decode `n` random tokens at positions `pos0..` of each of sequences
/// `0..n_seq` (sequence after sequence) in batches of `n_batch` tokens,
/// logits for the last one only, and wait for them.
fn prompt(
    ctx: &mut Context,
    n: u32,
    pos0: u32,
    n_seq: u32,
    rng: &mut TokenRng,
) -> Result<(), Error> {
    let n_vocab = ctx.model().n_vocab();
    let n_batch = ctx.params().n_batch as usize;
    let total = n as usize * n_seq as usize;
    let mut batch = Batch::new();
    for i in 0..total {
        let (seq, j) = (i / n as usize, i % n as usize);
        let last = i + 1 == total;
        batch.add(
            rng.token(n_vocab),
            (pos0 as usize + j) as i32,
            &[seq as i32],
            last,
        );
        if batch.len() == n_batch || last {
            ctx.decode(&batch)?;
            if last {
                ctx.argmax(batch.len() - 1)?;
            }
            batch.clear();
        }
    }
    Ok(())
}

/// `n` steps at positions `pos0..`, each one token of each of sequences
/// `0..n_seq` in one batch, the greedy tokens of all the sequences read
/// back together. Unless `GLINT_CHAIN=0`, a step whose last one left a
/// row per sequence decodes their greedy tokens chained on the device
/// ([`Context::decode_greedy_seqs`]: started before the tokens before
/// it are read back); the others (the first step of an empty cache, the
/// first after a prompt of several sequences, whose one output row
/// cannot start them all) decode random tokens, waited for where the
/// next step cannot chain. With `wait`, the last step is waited for,
/// else its tokens are left in flight for the next call.
fn generate(
    ctx: &mut Context,
    n: u32,
    pos0: u32,
    n_seq: u32,
    rng: &mut TokenRng,
    wait: bool,
) -> Result<(), Error> {
    let n_vocab = ctx.model().n_vocab();
    let chain = std::env::var_os("GLINT_CHAIN").is_none_or(|v| v != "0");
    let seqs: Vec<i32> = (0..n_seq as i32).collect();
    let mut batch = Batch::new();
    for i in 0..n {
        let fresh = pos0 == 0 && i == 0;
        if chain && !fresh && ctx.chain_fits(&seqs).is_ok() {
            ctx.decode_greedy_seqs(&seqs)?;
            continue;
        }
        batch.clear();
        for &s in &seqs {
            batch.add(rng.token(n_vocab), (pos0 + i) as i32, &[s], true);
        }
        ctx.decode(&batch)?;
        if !chain || ctx.chain_fits(&seqs).is_err() {
            for s in 0..seqs.len() {
                ctx.argmax(s)?;
            }
        }
    }
    if wait && n > 0 {
        for s in 0..seqs.len() {
            ctx.argmax(s)?;
        }
    }
    Ok(())
}

/// Cells per sequence [`step_counters`] fills at depth `n_prompt`: the
/// prompt (at least one token), two warm-up tokens and the measured one.
pub fn step_cells(n_prompt: u32) -> u32 {
    n_prompt.max(1) + 3
}

/// The wgpu backend's work for one decode step of `n_seq` sequences at
/// depth `n_prompt` each (after two warm-up steps, so pipelines are
/// compiled): `None` on the cpu backend. The context needs `n_seq`
/// sequences of [`step_cells`] cells.
pub fn step_counters(
    ctx: &mut Context,
    n_prompt: u32,
    n_seq: u32,
    rng: &mut TokenRng,
) -> Result<Option<glint::GpuCounters>, Error> {
    let model = ctx.model().clone();
    if model.gpu_counters().is_none() {
        return Ok(None);
    }
    let n_seq = n_seq.max(1);
    ctx.clear();
    prompt(ctx, n_prompt.max(1), 0, n_seq, rng)?;
    generate(ctx, 2, n_prompt.max(1), n_seq, rng, false)?;
    let before = model.gpu_counters().unwrap_or_default();
    generate(ctx, 1, n_prompt.max(1) + 2, n_seq, rng, false)?;
    let after = model.gpu_counters().unwrap_or_default();
    Ok(Some(after.since(&before)))
}

/// What the step [`step_counters`] measures at depth `n_prompt` with
/// `n_seq` sequences must read, by [`BYTES_FORMULA`]: (weight bytes, K/V
/// bytes of the cells it attends, each sequence its own). The
/// denominators of the counters' `weight_bytes_ratio` and `kv_bytes_ratio`.
pub fn step_bytes(
    model: &Model,
    n_prompt: u32,
    n_seq: u32,
    type_k: CacheType,
    type_v: CacheType,
) -> (f64, f64) {
    // The prompt fills positions 0..n, two warm-up tokens n and n + 1: the
    // measured token is at n + 2.
    let pos = n_prompt.max(1) + 2;
    let w = weight_bytes_per_pass(model) as f64;
    let step = Test {
        n_prompt: 0,
        n_gen: 1,
        n_depth: pos,
        n_parallel: n_seq,
    };
    (w, bytes_read(model, &step, 1, 1, type_k, type_v) - w)
}

/// llama-bench's warm-up: the prompt (if any) and one generated token.
pub fn warm_up(ctx: &mut Context, test: &Test, rng: &mut TokenRng) -> Result<(), Error> {
    ctx.clear();
    if test.n_prompt > 0 {
        prompt(ctx, test.n_prompt, 0, test.n_seq(), rng)?;
    }
    if test.n_gen > 0 {
        generate(ctx, 1, test.n_prompt, test.n_seq(), rng, true)?;
    }
    Ok(())
}

/// One timed repetition.
#[derive(Clone, Copy, Debug)]
pub struct RunTime {
    /// Wall time of the test's tokens.
    pub seconds: f64,
    /// On wgpu: the part of it the host was not blocked on the device (in
    /// queue submits or waits), its own work: recording and encoding the
    /// steps, the forward pass's logic, the cache's bookkeeping. Once the
    /// host records a step while the device runs the one before (greedy
    /// chaining), a step takes the longer of this and the device's time,
    /// on any GPU. `None` on the cpu backend.
    pub host_seconds: Option<f64>,
}

/// One timed repetition. The context needs `test.n_seq()` sequences of
/// `test.n_ctx()` cells.
pub fn run_once(ctx: &mut Context, test: &Test, rng: &mut TokenRng) -> Result<RunTime, Error> {
    ctx.clear();
    let p = test.n_seq();
    if test.n_depth > 0 {
        prompt(ctx, test.n_depth, 0, p, rng)?;
    }
    let blocked0 = ctx.model().gpu_host_blocked_ns();
    let t0 = Instant::now();
    if test.n_prompt > 0 {
        prompt(ctx, test.n_prompt, test.n_depth, p, rng)?;
    }
    if test.n_gen > 0 {
        generate(ctx, test.n_gen, test.n_depth + test.n_prompt, p, rng, true)?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let host_seconds = match (blocked0, ctx.model().gpu_host_blocked_ns()) {
        (Some(b0), Some(b1)) => Some((seconds - b1.saturating_sub(b0) as f64 / 1e9).max(0.0)),
        _ => None,
    };
    Ok(RunTime {
        seconds,
        host_seconds,
    })
}

/// Bytes of weights one forward pass reads: every tensor, except that an
/// untied `token_embd` is only gathered (a row per token) and not counted.
pub fn weight_bytes_per_pass(model: &Model) -> u64 {
    let f = model.gguf();
    let untied = f.tensor("output.weight").is_some();
    f.tensors()
        .iter()
        .filter(|t| !(untied && t.name == "token_embd.weight"))
        .map(|t| t.n_bytes)
        .sum()
}

/// Weight elements in the file (llama-bench's "params").
pub fn n_params(model: &Model) -> u64 {
    model.gguf().tensors().iter().map(|t| t.n_elements).sum()
}

/// Weight bytes in the file (llama-bench's "size").
pub fn model_bytes(model: &Model) -> u64 {
    model.gguf().tensors().iter().map(|t| t.n_bytes).sum()
}

/// The formula behind [`bytes_read`], for `--help` and reports.
pub const BYTES_FORMULA: &str = "\
bytes read = sum over forward passes (one per micro-batch of <= n_ubatch tokens; \
a tg step, one token of each sequence, is its own pass) of [weight bytes + K/V \
bytes of every cache cell the pass's tokens attend, each sequence its own cells]; \
weight bytes = all tensors (an untied token_embd is only gathered and not \
counted); a cell is attended per layer from position 0 (or the sliding window's \
start on SWA layers) to the pass's last token of that sequence; GB/s = bytes read \
/ median seconds / 1e9";

/// Bytes `test` must read, by [`BYTES_FORMULA`]: weights once per forward
/// pass plus the K/V rows each pass attends. Activations are not counted.
pub fn bytes_read(
    model: &Model,
    test: &Test,
    n_batch: u32,
    n_ubatch: u32,
    type_k: CacheType,
    type_v: CacheType,
) -> f64 {
    let hp = model.hparams();
    let w = weight_bytes_per_pass(model) as f64;
    let el = |t: CacheType| match t {
        CacheType::F16 => 2.0,
        CacheType::F32 => 4.0,
        CacheType::Q8_0 => 34.0 / 32.0,
        CacheType::Q4_0 => 18.0 / 32.0,
    };
    // K and V of one cell in one layer.
    let cell = hp.n_embd_kv() as f64 * (el(type_k) + el(type_v));
    // Cells one pass over positions [a, b) attends, over all layers.
    let pass_kv = |a: u32, b: u32| -> f64 {
        (0..hp.n_layer)
            .map(|il| {
                let swa = hp.swa_layers.get(il).copied().unwrap_or(false) && hp.n_swa > 0;
                let lo = if swa {
                    (a + 1).saturating_sub(hp.n_swa as u32)
                } else {
                    0
                };
                (b - lo) as f64
            })
            .sum::<f64>()
            * cell
    };
    let mut total = 0.0;
    // The prompt: each sequence's tokens after the one before's, in
    // batches of n_batch, each split into micro-batches; a micro-batch's
    // tokens of one sequence attend that sequence's cells.
    let n_seq = test.n_seq() as u64;
    let (n_p, n_b) = (test.n_prompt as u64, n_batch.max(1) as u64);
    let n_ub = n_ubatch.min(n_batch).max(1) as u64;
    let all = n_p * n_seq;
    let mut i = 0u64;
    while i < all {
        let batch_end = (i + n_b).min(all);
        while i < batch_end {
            let ub_end = (i + n_ub).min(batch_end);
            total += w;
            // The pieces of sequences within [i, ub_end).
            let mut j = i;
            while j < ub_end {
                let seq_end = ((j / n_p + 1) * n_p).min(ub_end);
                let (a, b) = (j % n_p, (seq_end - 1) % n_p + 1);
                total += pass_kv(test.n_depth + a as u32, test.n_depth + b as u32);
                j = seq_end;
            }
            i = ub_end;
        }
    }
    let end = test.n_depth + test.n_prompt;
    for p in end..end + test.n_gen {
        total += w + n_seq as f64 * pass_kv(p, p + 1);
    }
    total
}

/// Peak resident set size of this process (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Reset the peak RSS to the current RSS (Linux `clear_refs` 5), so the
/// next [`peak_rss_bytes`] covers only what follows. Best effort.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Median, min and max (of a non-empty slice; NaN for an empty one).
pub fn median_min_max(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[0], s[n - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_follow_llama_bench() {
        let t = |p, g, d| Test {
            n_prompt: p,
            n_gen: g,
            n_depth: d,
            n_parallel: 1,
        };
        assert_eq!(t(512, 0, 0).name(), "pp512");
        assert_eq!(t(0, 128, 0).name(), "tg128");
        assert_eq!(t(512, 128, 0).name(), "pp512+tg128");
        assert_eq!(t(0, 128, 512).name(), "tg128 @ d512");
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median_min_max(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_min_max(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }

    #[test]
    fn tokens_stay_in_the_vocabulary() {
        let mut r = TokenRng::new(7);
        assert!((0..1000).all(|_| r.token(10) < 10));
    }
}
