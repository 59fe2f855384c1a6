//! Generation with the sampler chain (llama.cpp's samplers and defaults),
//! text streamed to stdout as each token completes a character.
//!
//! cargo run --release -p glint --example sample_stream -- MODEL.gguf "Once upon a time" [SEED]

use std::io::Write;

use glint::generate::{generate, GenerateParams};
use glint::sample::SamplerParams;
use glint::{Context, ContextParams, Model, ModelParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: sample_stream MODEL.gguf PROMPT [SEED]")?;
    let prompt = args.next().unwrap_or_else(|| "Once upon a time".into());
    let seed: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(42);

    let model = Model::load(&path, &ModelParams::default())?;
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 1024,
            ..Default::default()
        },
    )?;
    let ids = model.tokenizer().encode(&prompt, true, true)?;
    let params = GenerateParams {
        n_predict: 64,
        sampling: SamplerParams {
            temp: 0.7,
            top_k: 40,
            top_p: 0.9,
            seed,
            ..Default::default()
        },
        ..Default::default()
    };

    print!("{prompt}");
    let mut out = std::io::stdout();
    let stats = generate(&mut ctx, &ids, &params, &mut |ev| {
        // `false` from the callback stops generation (a closed stdout, say).
        write!(out, "{}", ev.text).is_ok() && out.flush().is_ok()
    })?;
    println!();
    eprintln!(
        "{} tokens, {:.1} t/s, stopped: {:?}",
        stats.n_gen,
        stats.gen_tps(),
        stats.stop
    );
    Ok(())
}
