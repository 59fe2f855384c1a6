//! Greedy generation with the library API: load, tokenize, decode, stream.
//!
//! cargo run --release -p glint --example greedy -- MODEL.gguf "The capital of France is"

use glint::{Batch, Context, ContextParams, Model, ModelParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: greedy MODEL.gguf PROMPT")?;
    let prompt = args
        .next()
        .unwrap_or_else(|| "The capital of France is".into());

    let model = Model::load(&path, &ModelParams::default())?;
    let mut ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 512,
            ..Default::default()
        },
    )?;
    let tok = model.tokenizer();
    let ids = tok.encode(&prompt, true, true)?;

    ctx.decode(&Batch::from_tokens(&ids, 0, 0))?;
    let mut next = ctx.argmax(ids.len() - 1)?;
    let mut stream = tok.stream_decoder(true);
    print!("{prompt}");
    for pos in ids.len()..ids.len() + 32 {
        if tok.is_eog(next) {
            break;
        }
        print!("{}", stream.push(next)?);
        ctx.decode(&Batch::from_tokens(&[next], pos as i32, 0))?;
        next = ctx.argmax(0)?;
    }
    println!("{}", stream.flush());
    Ok(())
}
