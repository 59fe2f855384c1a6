//! Perplexity and KL divergence as `llama-perplexity` computes them, so the
//! two tools' numbers compare and one KL-divergence base file serves both.
//!
//! The text is cut into chunks of `n_ctx` tokens; each chunk is decoded from
//! an empty cache (its first token replaced by BOS when the tokenizer adds
//! one) and scored on its second half: the logits at position `i` predict
//! token `i + 1`, for `i` in `n_ctx / 2 .. n_ctx - 1`.
//!
//! The base file (`--kl-divergence-base`), little-endian:
//!
//! ```text
//! magic    8 bytes   "_logits_"
//! n_ctx    u32
//! n_vocab  i32
//! n_chunk  i32
//! tokens   n_chunk * n_ctx x i32
//! then per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them),
//! nv = 2 * ((n_vocab + 1) / 2) + 4 u16:
//!   scale (f32, in two u16), min_log_prob (f32, in two u16),
//!   n_vocab u16: round((logit - min_logit) / scale), 0 below min_logit
//!   (min_logit = max(min of the logits, max - 16), scale = (max - min_logit) / 65535)
//! ```

use crate::{Batch, Context, Error};

/// Leading bytes of a base file.
pub const BASE_MAGIC: [u8; 8] = *b"_logits_";

/// u16 per scored token in a base file.
pub fn n_packed(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// First scored position of a chunk of `n_ctx`.
pub fn first_scored(n_ctx: usize) -> usize {
    n_ctx / 2
}

/// Positions scored per chunk.
pub fn n_scored(n_ctx: usize) -> usize {
    n_ctx - 1 - first_scored(n_ctx)
}

/// Round to nearest (ties to even) through the f32 mantissa, as ggml does:
/// exact for |x| < 2^22.
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `(max logit, log of the sum of exp(logit - max))`: f32 exponentials
/// summed in f64, as llama-perplexity does.
fn log_sum_exp(logits: &[f32]) -> (f32, f32) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    (max, sum.ln() as f32)
}

/// The negative log-likelihood of `tok` under `logits`.
pub fn nll(logits: &[f32], tok: u32) -> f64 {
    let (max, lse) = log_sum_exp(logits);
    (max + lse - logits[tok as usize]) as f64
}

/// Pack `logits`' log-probabilities into `out` (`n_packed` u16, the base
/// file's encoding); returns the negative log-likelihood of `tok`.
pub fn pack_log_probs(logits: &[f32], tok: u32, out: &mut [u16]) -> f64 {
    let (max, lse) = log_sum_exp(logits);
    let min = logits.iter().copied().fold(f32::INFINITY, f32::min);
    let min = min.max(max - 16.0);
    let min_log_prob = min - max - lse;
    let scale = (max - min) / 65535.0;
    let (head, rest) = out.split_at_mut(4);
    for (k, v) in [scale, min_log_prob].iter().enumerate() {
        let b = v.to_bits();
        head[2 * k] = b as u16;
        head[2 * k + 1] = (b >> 16) as u16;
    }
    for (o, &l) in rest.iter_mut().zip(logits) {
        *o = if scale != 0.0 && l > min {
            nearest_int((l - min) / scale) as u16
        } else {
            0
        };
    }
    (max + lse - logits[tok as usize]) as f64
}

/// The (scale, min_log_prob) of one packed token.
fn unpack_head(p: &[u16]) -> (f32, f32) {
    let f = |k: usize| f32::from_bits(p[2 * k] as u32 | (p[2 * k + 1] as u32) << 16);
    (f(0), f(1))
}

/// Running sums of a KL-divergence run against a base (llama-perplexity's
/// `kl_divergence_result`), and every token's KLD and Δp for percentiles.
#[derive(Clone, Debug, Default)]
pub struct KldStats {
    /// Σ nll and Σ nll² of this run.
    pub sum_nll: f64,
    /// See `sum_nll`.
    pub sum_nll2: f64,
    /// Σ nll and Σ nll² of the base.
    pub sum_nll_base: f64,
    /// See `sum_nll_base`.
    pub sum_nll_base2: f64,
    /// Σ nll · nll_base.
    pub sum_nll_nll_base: f64,
    /// Σ KLD and Σ KLD².
    pub sum_kld: f64,
    /// See `sum_kld`.
    pub sum_kld2: f64,
    /// Σ Δp, Σ Δp², Σ Δp⁴ (Δp = p(token) here − p(token) in the base).
    pub sum_p_diff: f64,
    /// See `sum_p_diff`.
    pub sum_p_diff2: f64,
    /// See `sum_p_diff`.
    pub sum_p_diff4: f64,
    /// Largest |Δp|.
    pub max_p_diff: f32,
    /// Tokens whose most likely next token is the base's.
    pub n_same_top: usize,
    /// Tokens scored.
    pub count: usize,
    /// Each token's KLD.
    pub kld_values: Vec<f32>,
    /// Each token's Δp.
    pub p_diff_values: Vec<f32>,
}

impl KldStats {
    /// Score one position: `logits` here, `base` its packed base entry,
    /// `tok` the token that follows.
    pub fn add(&mut self, logits: &[f32], base: &[u16], tok: u32) {
        let (mut max, lse) = log_sum_exp(logits);
        let imax = logits
            .iter()
            .enumerate()
            .fold(0, |b, (i, &l)| if l > logits[b] { i } else { b });
        let (scale, min_log_prob) = unpack_head(base);
        let base = &base[4..];
        let nll = max + lse - logits[tok as usize];
        let nll_base = -(scale * base[tok as usize] as f32 + min_log_prob);
        self.sum_nll += nll as f64;
        self.sum_nll2 += (nll * nll) as f64;
        self.sum_nll_base += nll_base as f64;
        self.sum_nll_base2 += (nll_base * nll_base) as f64;
        self.sum_nll_nll_base += (nll * nll_base) as f64;
        max += lse;
        let (mut kld, mut imax_base, mut best) = (0f64, 0usize, 0f32);
        for (i, (&q, &l)) in base.iter().zip(logits).enumerate() {
            let p_log_base = scale * q as f32 + min_log_prob;
            if i == 0 || p_log_base > best {
                best = p_log_base;
                imax_base = i;
            }
            if p_log_base > -16.0 {
                kld += (p_log_base.exp() * (p_log_base - l + max)) as f64;
            }
        }
        self.sum_kld += kld;
        self.sum_kld2 += kld * kld;
        self.count += 1;
        self.n_same_top += (imax == imax_base) as usize;
        let p_diff = (-nll).exp() - (-nll_base).exp();
        let d2 = (p_diff * p_diff) as f64;
        self.sum_p_diff += p_diff as f64;
        self.sum_p_diff2 += d2;
        self.sum_p_diff4 += d2 * d2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(kld as f32);
        self.p_diff_values.push(p_diff);
    }
}

/// Mean and its uncertainty from a sum and a sum of squares.
pub fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let f = sum / count as f64;
    let df = sum2 / count as f64 - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    (f, df)
}

/// Covariance of two means from their sums.
pub fn covariance(suma: f64, sumb: f64, sumab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (sumab / n - (suma / n) * (sumb / n)) / (n - 1.0)
}

/// Decode one chunk from an empty sequence 0 (its first token replaced by
/// `bos` when given) in batches of `n_batch`, and return the logits of its
/// scored positions: `[n_scored, n_vocab]`.
pub fn chunk_logits(
    ctx: &mut Context,
    chunk: &[u32],
    n_batch: usize,
    bos: Option<u32>,
) -> Result<Vec<f32>, Error> {
    let n_ctx = chunk.len();
    let first = first_scored(n_ctx);
    let n_vocab = ctx.model().n_vocab();
    ctx.clear();
    let mut out = Vec::with_capacity(n_scored(n_ctx) * n_vocab);
    for start in (0..n_ctx).step_by(n_batch.max(1)) {
        let end = (start + n_batch).min(n_ctx);
        let mut b = Batch::new();
        for (pos, &t) in chunk.iter().enumerate().take(end).skip(start) {
            let t = if pos == 0 { bos.unwrap_or(t) } else { t };
            b.add(t, pos as i32, &[0], pos >= first && pos + 1 < n_ctx);
        }
        ctx.decode(&b)?;
        for i in 0..end - start {
            if start + i >= first && start + i + 1 < n_ctx {
                out.extend_from_slice(ctx.logits(i)?);
            }
        }
    }
    Ok(out)
}
