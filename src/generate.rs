//! The high-level generation loop: prompt in `n_batch` chunks, then one token
//! at a time through the sampler chain, text streamed as it completes.

use std::time::Instant;

use glint_sample::{Sampler, SamplerParams};

use crate::{Batch, Context, Error};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Tokens to generate; `< 0` = until an end-of-generation token or a
    /// full context.
    pub n_predict: i32,
    /// The sampler chain's parameters (llama.cpp's defaults).
    pub sampling: SamplerParams,
    /// Stop at end-of-generation tokens (EOS, EOT, …).
    pub stop_at_eog: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            n_predict: -1,
            sampling: SamplerParams::default(),
            stop_at_eog: true,
        }
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// `n_predict` tokens were generated.
    NPredict,
    /// The context is full.
    ContextFull,
    /// The callback asked to stop.
    Callback,
}

/// What a generation did, for speed reports.
#[derive(Clone, Debug)]
pub struct GenerateStats {
    /// Prompt tokens processed.
    pub n_prompt: usize,
    /// Tokens generated (the end-of-generation token included).
    pub n_gen: usize,
    /// Seconds spent on the prompt.
    pub prompt_secs: f64,
    /// Seconds spent generating.
    pub gen_secs: f64,
    /// Why it stopped.
    pub stop: StopReason,
    /// The generated token ids.
    pub tokens: Vec<u32>,
}

impl GenerateStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.n_prompt as f64 / self.prompt_secs.max(1e-9)
    }
    /// Generated tokens per second (the first token's time is the prompt's).
    pub fn gen_tps(&self) -> f64 {
        self.n_gen.saturating_sub(1) as f64 / self.gen_secs.max(1e-9)
    }
}

/// One generated token as the callback sees it.
pub struct TokenEvent<'a> {
    /// Its id; `None` for text flushed at the end (bytes held back waiting
    /// for the rest of a character).
    pub id: Option<u32>,
    /// Text that became complete with it (may be empty: half a character).
    pub text: &'a str,
    /// Logits it was sampled from (`None` on the greedy device path).
    pub logits: Option<&'a [f32]>,
}

/// True when greedy decoding can take the device argmax: nothing in the chain
/// would change which token is largest.
pub(crate) fn plain_greedy(s: &SamplerParams) -> bool {
    s.temp <= 0.0
        && s.mirostat == 0
        && s.logit_bias.is_empty()
        && (s.penalty_last_n == 0
            || (s.penalty_repeat == 1.0 && s.penalty_freq == 0.0 && s.penalty_present == 0.0))
        && s.dry_multiplier == 0.0
}

/// Decode `prompt` into sequence 0 of an empty `ctx` and generate after it,
/// calling `on_token` for each token (return `false` to stop). `want_logits`
/// makes the loop read the logits even when greedy decoding would not need
/// them (for logprobs).
pub fn generate(
    ctx: &mut Context,
    prompt: &[u32],
    params: &GenerateParams,
    want_logits: bool,
    on_token: &mut dyn FnMut(&TokenEvent) -> bool,
) -> Result<GenerateStats, Error> {
    let model = ctx.model();
    let tok = model.tokenizer();
    if prompt.is_empty() {
        return Err(Error::Invalid("the prompt has no tokens".into()));
    }
    let n_ctx = ctx.n_ctx() as usize;
    if prompt.len() >= n_ctx {
        return Err(Error::Invalid(format!(
            "the prompt has {} tokens, the context holds {n_ctx} (raise -c/--ctx-size)",
            prompt.len()
        )));
    }
    params
        .sampling
        .validate()
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let mut chain = params
        .sampling
        .build_chain(model.n_vocab(), n_ctx)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let greedy = plain_greedy(&params.sampling) && !want_logits;

    // Prompt, in n_batch chunks; logits for its last token only.
    let t0 = Instant::now();
    let n_batch = ctx.params().n_batch as usize;
    let mut pos = 0i32;
    for chunk in prompt.chunks(n_batch) {
        let last = pos as usize + chunk.len() == prompt.len();
        let mut b = Batch::new();
        for (i, &t) in chunk.iter().enumerate() {
            b.add(t, pos + i as i32, &[0], last && i + 1 == chunk.len());
        }
        ctx.decode(&b)?;
        pos += chunk.len() as i32;
    }
    for &t in prompt {
        chain.accept(t);
    }
    let mut last_idx = (prompt.len() - 1) % n_batch;
    let prompt_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut dec = tok.stream_decoder(true);
    let mut tokens = Vec::new();
    let stop = loop {
        if params.n_predict >= 0 && tokens.len() >= params.n_predict as usize {
            break StopReason::NPredict;
        }
        let (id, logits) = if greedy {
            (ctx.argmax(last_idx)?, None)
        } else {
            let l = ctx.logits(last_idx)?.to_vec();
            let id = chain
                .sample(&l)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            (id, Some(l))
        };
        if greedy {
            chain.accept(id);
        }
        tokens.push(id);
        let eog = params.stop_at_eog && tok.is_eog(id);
        let text = if eog { String::new() } else { dec.push(id)? };
        let go_on = on_token(&TokenEvent {
            id: Some(id),
            text: &text,
            logits: logits.as_deref(),
        });
        if eog {
            break StopReason::EndOfGeneration;
        }
        if !go_on {
            break StopReason::Callback;
        }
        if pos as usize >= n_ctx {
            break StopReason::ContextFull;
        }
        if params.n_predict >= 0 && tokens.len() >= params.n_predict as usize {
            break StopReason::NPredict;
        }
        ctx.decode(&Batch::from_tokens(&[id], pos, 0))?;
        pos += 1;
        last_idx = 0;
    };
    let rest = dec.flush();
    if !rest.is_empty() {
        on_token(&TokenEvent {
            id: None,
            text: &rest,
            logits: None,
        });
    }
    Ok(GenerateStats {
        n_prompt: prompt.len(),
        n_gen: tokens.len(),
        prompt_secs,
        gen_secs: t1.elapsed().as_secs_f64(),
        stop,
        tokens,
    })
}
