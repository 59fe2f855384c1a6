//! Logits for many positions of one micro-batch: the scratch starts with
//! room for a few rows (`OUTPUTS_AT_FIRST`) and grows when a batch asks for
//! more, and each row is what decoding up to that position alone gives.

mod common;

use glint::{BackendKind, Batch, Context, ContextParams, Model, ModelParams};

/// One batch of the whole prompt vs the prompt's prefixes: other batch
/// sizes run other (equal up to rounding) kernels.
const PREFIX_TOL: f32 = 1e-3;

#[test]
fn every_position_of_a_batch_has_its_logits_and_the_scratch_grows_for_them() {
    let model = Model::load(
        common::model("smollm2"),
        &ModelParams {
            backend: BackendKind::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let text = "One two three four five six seven eight nine ten eleven twelve thirteen fourteen";
    let ids = model.tokenizer().encode(text, true, true).unwrap();
    assert!(ids.len() >= 14, "{} tokens", ids.len());
    let params = ContextParams {
        n_ctx: 128,
        ..Default::default()
    };
    let mut ctx = Context::new(&model, params.clone()).unwrap();
    let scratch_before = model.memory().scratch;
    let mut b = Batch::new();
    for (i, &t) in ids.iter().enumerate() {
        b.add(t, i as i32, &[0], true);
    }
    ctx.decode(&b).unwrap();
    let all: Vec<Vec<f32>> = (0..ids.len())
        .map(|i| ctx.logits(i).unwrap().to_vec())
        .collect();
    let grown = model.memory().scratch - scratch_before;
    let row = model.n_vocab() * 4;
    assert!(
        grown >= (ids.len() - glint_model::OUTPUTS_AT_FIRST) * row,
        "scratch grew by {grown} bytes for {} rows of {row}",
        ids.len()
    );
    for &n in &[1usize, 8, 9, ids.len()] {
        let mut alone = Context::new(&model, params.clone()).unwrap();
        let mut b = Batch::new();
        for (i, &t) in ids[..n].iter().enumerate() {
            b.add(t, i as i32, &[0], i + 1 == n);
        }
        alone.decode(&b).unwrap();
        let d = common::max_abs_diff(alone.logits(n - 1).unwrap(), &all[n - 1]);
        assert!(d <= PREFIX_TOL, "position {}: max-abs {d}", n - 1);
    }
}
