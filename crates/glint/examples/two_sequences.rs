//! Two sequences in one context: both prompts decoded in one batch, then one
//! token for each sequence per step, each attending only to its own cells.
//! The model and its context live together in one struct, which moves to a
//! worker thread (a `Model` is a cheap, `Send + Sync` handle).
//!
//! cargo run --release -p glint --example two_sequences -- MODEL.gguf

use glint::{Batch, Context, ContextParams, Model, ModelParams};

/// What an application keeps: the model and a context made from it.
struct App {
    model: Model,
    ctx: Context,
}

impl App {
    /// Greedy continuations of `prompts`, one sequence each, `n` tokens.
    fn continue_all(&mut self, prompts: &[&str], n: usize) -> Result<Vec<String>, glint::Error> {
        let tok = self.model.tokenizer();
        let mut batch = Batch::new();
        let mut next_pos = Vec::new();
        let mut last_index = Vec::new();
        for (seq, p) in prompts.iter().enumerate() {
            let ids = tok.encode(p, true, true)?;
            for (i, &t) in ids.iter().enumerate() {
                batch.add(t, i as i32, &[seq as i32], i + 1 == ids.len());
            }
            last_index.push(batch.len() - 1);
            next_pos.push(ids.len() as i32);
        }
        self.ctx.decode(&batch)?;
        let mut next: Vec<u32> = last_index
            .iter()
            .map(|&i| self.ctx.argmax(i))
            .collect::<Result<_, _>>()?;
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        for _ in 0..n {
            let mut step = Batch::new();
            for (seq, &t) in next.iter().enumerate() {
                out[seq].push(t);
                step.add(t, next_pos[seq], &[seq as i32], true);
                next_pos[seq] += 1;
            }
            self.ctx.decode(&step)?;
            for (seq, t) in next.iter_mut().enumerate() {
                *t = self.ctx.argmax(seq)?;
            }
        }
        out.iter().map(|ids| Ok(tok.decode(ids, true)?)).collect()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: two_sequences MODEL.gguf")?;
    let model = Model::load(&path, &ModelParams::default())?;
    let ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 512,
            n_seq_max: 2,
            ..Default::default()
        },
    )?;
    let mut app = App { model, ctx };
    let worker = std::thread::spawn(move || {
        app.continue_all(&["The capital of France is", "Water boils at"], 16)
    });
    for (seq, text) in worker
        .join()
        .map_err(|_| "worker panicked")??
        .iter()
        .enumerate()
    {
        println!("sequence {seq}: {text}");
    }
    Ok(())
}
