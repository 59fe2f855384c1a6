//! Synthetic models have the real files' shapes: `smollm2-135m:q4_1` against
//! the real SmolLM2-135M Q4_1 file.

mod common;

use glint::gguf::GgufFile;
use glint::{Batch, Model, ModelParams};

#[test]
fn synthetic_smollm2_has_the_real_files_hparams_and_tensor_types() {
    let tmp = common::TempDir::new("synth");
    let dir = tmp.path().to_path_buf();
    let preset = glint_cli::synthetic::preset("smollm2-135m:q4_1").unwrap();
    let path = dir.join("smollm2.gguf");
    preset.writer().unwrap().write_to_path(&path).unwrap();

    let real_path = common::model("smollm2");
    let real = GgufFile::open(&real_path).unwrap();
    let synth = GgufFile::open(&path).unwrap();

    // Same tensors (names, dims, types), whatever their order in the file.
    let table = |f: &GgufFile| {
        let mut t: Vec<(String, Vec<u64>, String)> = f
            .tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dims().to_vec(), t.ty.name().to_string()))
            .collect();
        t.sort();
        t
    };
    assert_eq!(table(&synth), table(&real));

    let params = ModelParams {
        backend: glint::BackendKind::Cpu,
        n_threads: Some(2),
        ..Default::default()
    };
    let m_real = Model::load(&real_path, &params).unwrap();
    let m = Model::load(&path, &params).unwrap();
    let (a, b) = (m.hparams(), m_real.hparams());
    assert_eq!(a.arch.name, b.arch.name);
    assert_eq!(
        (a.n_vocab, a.n_ctx_train, a.n_embd, a.n_layer, a.n_ff),
        (b.n_vocab, b.n_ctx_train, b.n_embd, b.n_layer, b.n_ff)
    );
    assert_eq!(
        (a.n_head, a.n_head_kv, a.head_dim, a.n_rot),
        (b.n_head, b.n_head_kv, b.head_dim, b.n_rot)
    );
    assert_eq!((a.rms_eps, a.rope_freq_base), (b.rms_eps, b.rope_freq_base));
    assert_eq!(a.swa_layers, b.swa_layers);
    assert_eq!(
        glint_cli::bench::model_bytes(&m),
        glint_cli::bench::model_bytes(&m_real)
    );

    // It runs: a prompt, then a few greedy tokens, all inside the vocabulary.
    let mut ctx = common::context(&m, 64);
    ctx.decode(&Batch::from_tokens(&[1, 2, 3, 4], 0, 0))
        .unwrap();
    let mut tok = ctx.argmax(3).unwrap();
    for pos in 4..8 {
        assert!((tok as usize) < a.n_vocab);
        ctx.decode(&Batch::from_tokens(&[tok], pos, 0)).unwrap();
        assert!(ctx.logits(0).unwrap().iter().all(|v| v.is_finite()));
        tok = ctx.argmax(0).unwrap();
    }
    drop(ctx);
}

#[test]
fn synthetic_gemma3_mirrors_the_real_type_mix() {
    let preset = glint_cli::synthetic::preset("gemma3-270m:q4_k").unwrap();
    let real = GgufFile::open(common::model("gemma3")).unwrap();
    let mut want: Vec<(String, Vec<u64>, String)> = real
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims().to_vec(), t.ty.name().to_string()))
        .collect();
    let mut got: Vec<(String, Vec<u64>, String)> = preset
        .tensors()
        .into_iter()
        .map(|t| (t.name, t.dims, t.ty.name().to_string()))
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(
        preset.tensor_bytes(),
        real.tensors().iter().map(|t| t.n_bytes).sum::<u64>()
    );
}

/// `lfm2-350m:q4_0`: LFM2-350M's layer plan (10 short-convolution layers,
/// attention at its config's `full_attn_idxs`), and it runs.
#[test]
fn synthetic_lfm2_has_the_layer_plan_and_runs() {
    let tmp = common::TempDir::new("synth-lfm2");
    let preset = glint_cli::synthetic::preset("lfm2-350m:q4_0").unwrap();
    let path = tmp.path().join("lfm2.gguf");
    preset.writer().unwrap().write_to_path(&path).unwrap();
    let params = ModelParams {
        backend: glint::BackendKind::Cpu,
        n_threads: Some(2),
        ..Default::default()
    };
    let m = Model::load(&path, &params).unwrap();
    let hp = m.hparams();
    assert_eq!(hp.arch.name, "lfm2");
    assert_eq!(hp.attn_layers(), vec![2, 5, 8, 10, 12, 14]);
    assert_eq!((hp.n_conv, hp.n_embd_conv(), hp.n_head_kv), (3, 2048, 8));
    let mut ctx = common::context(&m, 64);
    ctx.decode(&Batch::from_tokens(&[1, 2, 3, 4], 0, 0))
        .unwrap();
    let mut tok = ctx.argmax(3).unwrap();
    for pos in 4..8 {
        assert!((tok as usize) < hp.n_vocab);
        ctx.decode(&Batch::from_tokens(&[tok], pos, 0)).unwrap();
        assert!(ctx.logits(0).unwrap().iter().all(|v| v.is_finite()));
        tok = ctx.argmax(0).unwrap();
    }
}
