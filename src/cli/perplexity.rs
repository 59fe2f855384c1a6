//! `glint perplexity`: llama-perplexity's flags, output and base-file
//! format. Perplexity over a text, or with `--kl-divergence-base FILE` the
//! base file written as well; with `--kl-divergence` too, the KL divergence
//! (and Δp, same-top agreement, PPL ratio) against that base instead.

use std::io::{Read, Write};

use glint::perplexity::{
    chunk_logits, covariance, mean_and_uncertainty, n_packed, n_scored, pack_log_probs, KldStats,
    BASE_MAGIC,
};
use glint::{Context, ContextParams, Model};

use super::args::{self, flag, Flag, Parsed};
use super::options::{model_params, model_path, num, read_text_file, threads, with_device_flags};
use super::output;

/// Flags of this command; the device flags follow (`with_device_flags`).
#[rustfmt::skip]
const OWN_FLAGS: &[Flag] = &[
    flag!("model", ["-m"], Some("FILE|NAME"), "GGUF model or a known name (smollm2, gemma3, qwen2; default smollm2)"),
    flag!("file", ["-f"], Some("FILE"), "the text to score"),
    flag!("ctx-size", ["-c"], Some("N"), "tokens per chunk (default 512)"),
    flag!("batch-size", ["-b"], Some("N"), "tokens per decode (default 2048, at most -c used)"),
    flag!("chunks", [], Some("N"), "chunks to score (default -1 = all)"),
    flag!("kl-divergence-base", [], Some("FILE"), "write the base's log-probabilities here (or read them with --kl-divergence)"),
    flag!("kl-divergence", [], None, "score against --kl-divergence-base instead of writing it"),
    flag!("precision", [], Some("ggml|f32"), "cpu numerics: ggml's (default) or plain f32 (a base for the fast paths)"),
];

/// What a run needs, checked before the model is loaded.
struct Job {
    n_ctx: usize,
    n_batch: usize,
    n_chunks: i64,
    base: Option<String>,
    kld: bool,
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let flags = with_device_flags(OWN_FLAGS);
    let p = args::parse(rest, &flags)?;
    if p.has("help") {
        return output::println(&args::help(
            "glint perplexity -m MODEL -f FILE [options]",
            &flags,
        ));
    }
    let job = job(&p)?;
    let text = read_text_file(
        "file",
        p.get("file")
            .ok_or("perplexity: give the text with -f FILE")?,
    )?;
    let mut mp = model_params(&p)?;
    mp.n_threads = threads(&p)?;
    if let Some(prec) = p.get("precision") {
        mp.cpu_precision = match prec {
            "ggml" => glint::CpuPrecision::Ggml,
            "f32" => glint::CpuPrecision::F32,
            other => return Err(format!("--precision: `{other}` (ggml, f32)")),
        };
    }
    let model = Model::load(model_path(&p)?, &mp).map_err(|e| e.to_string())?;
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: job.n_ctx as u32,
            n_batch: job.n_batch as u32,
            n_ubatch: job.n_batch.min(512) as u32,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    if job.kld {
        kl_divergence(&job, &mut ctx)
    } else {
        let tokens = model
            .tokenizer()
            .encode(&text, true, true)
            .map_err(|e| e.to_string())?;
        perplexity(&job, &mut ctx, &tokens)
    }
}

fn job(p: &Parsed) -> Result<Job, String> {
    let n_ctx = num::<usize>(p, "ctx-size")?.unwrap_or(512);
    if n_ctx < 4 {
        return Err(format!("-c {n_ctx}: a chunk needs at least 4 tokens"));
    }
    let n_batch = num::<usize>(p, "batch-size")?
        .unwrap_or(2048)
        .clamp(1, n_ctx);
    let base = p.get("kl-divergence-base").map(str::to_string);
    let kld = p.has("kl-divergence");
    if kld && base.is_none() {
        return Err("--kl-divergence needs --kl-divergence-base FILE".into());
    }
    Ok(Job {
        n_ctx,
        n_batch,
        n_chunks: num::<i64>(p, "chunks")?.unwrap_or(-1),
        base,
        kld,
    })
}

/// The BOS that replaces each chunk's first token, when the tokenizer adds
/// one (as llama-perplexity does).
fn bos(ctx: &Context) -> Option<u32> {
    let tok = ctx.model().tokenizer();
    tok.bos().filter(|_| tok.add_bos())
}

fn perplexity(job: &Job, ctx: &mut Context, tokens: &[u32]) -> Result<(), String> {
    let n_ctx = job.n_ctx;
    if tokens.len() < 2 * n_ctx {
        return Err(format!(
            "perplexity: the text has {} tokens, at least {} are needed for -c {n_ctx}",
            tokens.len(),
            2 * n_ctx
        ));
    }
    let n_max = tokens.len() / n_ctx;
    let n_chunk = if job.n_chunks < 0 {
        n_max
    } else {
        (job.n_chunks as usize).min(n_max)
    };
    let n_vocab = ctx.model().n_vocab();
    let mut base = match &job.base {
        Some(path) => {
            // Streamed to a temporary file beside it, renamed into place at
            // the end: a failed or interrupted run never leaves half a base
            // file (nor destroys an older one) at `path`.
            let tmp = format!("{path}.partial");
            let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{tmp}: {e}"))?;
            let mut head = BASE_MAGIC.to_vec();
            head.extend_from_slice(&(n_ctx as u32).to_le_bytes());
            head.extend_from_slice(&(n_vocab as i32).to_le_bytes());
            head.extend_from_slice(&(n_chunk as i32).to_le_bytes());
            for &t in &tokens[..n_chunk * n_ctx] {
                head.extend_from_slice(&(t as i32).to_le_bytes());
            }
            f.write_all(&head).map_err(|e| format!("{tmp}: {e}"))?;
            Some((f, tmp))
        }
        None => None,
    };
    eprintln!(
        "perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={}",
        job.n_batch
    );
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let nv = n_packed(n_vocab);
    let mut packed = vec![0u16; nv];
    let bos = bos(ctx);
    let scored = (0..n_chunk).try_for_each(|c| -> Result<(), String> {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let logits = chunk_logits(ctx, chunk, job.n_batch, bos).map_err(|e| e.to_string())?;
        let first = n_ctx / 2;
        let mut bytes = Vec::new();
        for (k, row) in logits.chunks_exact(n_vocab).enumerate() {
            let next = chunk[first + k + 1];
            let v = pack_log_probs(row, next, &mut packed);
            nll += v;
            nll2 += v * v;
            count += 1;
            if base.is_some() {
                bytes.extend(packed.iter().flat_map(|x| x.to_le_bytes()));
            }
        }
        if let Some((f, tmp)) = &mut base {
            f.write_all(&bytes).map_err(|e| format!("{tmp}: {e}"))?;
        }
        output::print(&format!("[{}]{:.4},", c + 1, (nll / count as f64).exp()))
    });
    if let Some((f, tmp)) = base {
        let done = scored
            .clone()
            .and_then(|()| f.sync_all().map_err(|e| format!("{tmp}: {e}")))
            .and_then(|()| {
                let path = job.base.as_deref().unwrap_or_default();
                std::fs::rename(&tmp, path).map_err(|e| format!("{path}: {e}"))
            });
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done?;
    }
    scored?;
    output::println("")?;
    let mean = nll / count as f64;
    let var = nll2 / count as f64 - mean * mean;
    let ppl = mean.exp();
    if var > 0.0 {
        let sd = (var / (count - 1) as f64).sqrt();
        output::println(&format!(
            "Final estimate: PPL = {ppl:.4} +/- {:.5}",
            sd * ppl
        ))
    } else {
        Err("perplexity: unexpected negative variance of log(prob)".into())
    }
}

/// Read exactly `n` bytes of the base file `path`, saying what was missing.
fn read_exact(f: &mut std::fs::File, n: usize, what: &str, path: &str) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; n];
    f.read_exact(&mut b)
        .map_err(|e| format!("{path}: reading {what} ({n} bytes): {e}"))?;
    Ok(b)
}

fn kl_divergence(job: &Job, ctx: &mut Context) -> Result<(), String> {
    let path = job.base.as_deref().unwrap_or_default();
    let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let head = read_exact(&mut f, 20, "the header", path)?;
    if head[..8] != BASE_MAGIC {
        return Err(format!(
            "{path}: not a file of log-probabilities (no `_logits_` magic)"
        ));
    }
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let (n_ctx, n_vocab, n_chunk) = (word(8) as usize, word(12) as usize, word(16) as usize);
    if n_ctx != job.n_ctx {
        return Err(format!(
            "{path}: made with -c {n_ctx}, this run has -c {}",
            job.n_ctx
        ));
    }
    if n_vocab != ctx.model().n_vocab() {
        return Err(format!(
            "{path}: a vocabulary of {n_vocab}, the model has {}",
            ctx.model().n_vocab()
        ));
    }
    // Sizes come from the file: bound them by what the file holds.
    let file_len = f.metadata().map_err(|e| format!("{path}: {e}"))?.len() as u128;
    let per_chunk = (n_ctx as u128) * 4 + n_scored(n_ctx) as u128 * n_packed(n_vocab) as u128 * 2;
    if 20 + n_chunk as u128 * per_chunk > file_len {
        return Err(format!(
            "{path}: {n_chunk} chunks of -c {n_ctx} do not fit in its {file_len} bytes"
        ));
    }
    let tok_bytes = read_exact(&mut f, n_chunk * n_ctx * 4, "the tokens", path)?;
    let tokens: Vec<u32> = tok_bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Some(t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(format!("{path}: token {t} outside the vocabulary"));
    }
    let n_chunk = if job.n_chunks < 0 {
        n_chunk
    } else {
        (job.n_chunks as usize).min(n_chunk)
    };
    let nv = n_packed(n_vocab);
    let bos = bos(ctx);
    let mut kld = KldStats::default();
    eprintln!(
        "kl_divergence: computing over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={}",
        job.n_batch
    );
    output::println("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p")?;
    for c in 0..n_chunk {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let logits = chunk_logits(ctx, chunk, job.n_batch, bos).map_err(|e| e.to_string())?;
        let raw = read_exact(
            &mut f,
            n_scored(n_ctx) * nv * 2,
            &format!("chunk {}", c + 1),
            path,
        )?;
        let base: Vec<u16> = raw
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let first = n_ctx / 2;
        for (k, row) in logits.chunks_exact(n_vocab).enumerate() {
            kld.add(row, &base[k * nv..(k + 1) * nv], chunk[first + k + 1]);
        }
        output::println(&chunk_line(c + 1, &kld))?;
    }
    output::print(&summary(&mut kld))
}

/// One row of the per-chunk table, as llama-perplexity prints it.
fn chunk_line(chunk: usize, k: &KldStats) -> String {
    let lp = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
    let lpb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
    let cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
    let ratio_unc = (lp.1 * lp.1 + lpb.1 * lpb.1 - 2.0 * cov).sqrt();
    let kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
    let mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
    let rms = mse.0.sqrt();
    let top = k.n_same_top as f64 / k.count as f64;
    let top_unc = (top * (1.0 - top) / (k.count as f64 - 1.0)).sqrt();
    format!(
        "{chunk:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
        lp.0.exp(),
        lp.0.exp() * lp.1,
        lp.0 - lpb.0,
        ratio_unc,
        kl.0,
        kl.1,
        100.0 * rms,
        100.0 * 0.5 / rms * mse.1,
        100.0 * top,
        100.0 * top_unc
    )
}

/// The closing statistics: PPL of both, KLD percentiles, Δp, same top.
fn summary(k: &mut KldStats) -> String {
    let lp = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
    let lpb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
    let kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
    let top = k.n_same_top as f64 / k.count as f64;
    k.kld_values.sort_by(f32::total_cmp);
    let pct = |v: &[f32], f: f64| -> f32 {
        let p = f * (v.len() - 1) as f64;
        let (i, t) = (p as usize, (p - p.floor()) as f32);
        (1.0 - t) * v[i] + t * v[(i + 1).min(v.len() - 1)]
    };
    let v = &k.kld_values;
    format!(
        "\n====== Perplexity statistics ======\n\
         Mean PPL(Q)                   : {:10.6} ± {:10.6}\n\
         Mean PPL(base)                : {:10.6} ± {:10.6}\n\
         Mean ln(PPL(Q)/PPL(base))     : {:10.6}\n\n\
         ====== KL divergence statistics ======\n\
         Mean    KLD: {:10.6} ± {:10.6}\n\
         Maximum KLD: {:10.6}\n\
         99.9%   KLD: {:10.6}\n\
         99.0%   KLD: {:10.6}\n\
         Median  KLD: {:10.6}\n\
         Minimum KLD: {:10.6}\n\n\
         ====== Token probability statistics ======\n\
         Maximum Δp: {:6.3}%\n\
         Same top p: {:6.3} %\n",
        lp.0.exp(),
        lp.0.exp() * lp.1,
        lpb.0.exp(),
        lpb.0.exp() * lpb.1,
        lp.0 - lpb.0,
        kl.0,
        kl.1,
        v[v.len() - 1],
        pct(v, 0.999),
        pct(v, 0.99),
        pct(v, 0.5),
        v[0],
        100.0 * k.max_p_diff,
        100.0 * top
    )
}
