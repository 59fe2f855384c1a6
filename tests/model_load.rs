//! Loading: unsupported architectures and tensor types are clear errors at
//! load time, naming what; micro-batching does not change the results.

mod common;

use glint::gguf::{GgufFile, GgufWriter, Value};
use glint::quant::GgmlType;
use glint::{BackendKind, Batch, Context, ContextParams, Model, ModelParams};

/// SmolLM2 rewritten by our writer, with `edit` applied to each key/value
/// and `retype` to each tensor's type.
fn rewritten(
    tag: &str,
    edit: impl Fn(&str, &Value) -> Value,
    retype: impl Fn(&str, GgmlType) -> GgmlType,
) -> std::path::PathBuf {
    let src = GgufFile::open(common::model("smollm2")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.add_kv(k, edit(k, v)).unwrap();
    }
    for t in src.tensors() {
        let dims: Vec<u64> = t.dims().to_vec();
        w.add_tensor(
            &t.name,
            &dims,
            retype(&t.name, t.ty),
            src.tensor_data(t).to_vec(),
        )
        .unwrap();
    }
    let p = std::env::temp_dir().join(format!("glint-load-{}-{tag}.gguf", std::process::id()));
    w.write_to_path(&p).unwrap();
    p
}

fn cpu() -> ModelParams {
    ModelParams {
        backend: BackendKind::Cpu,
        ..Default::default()
    }
}

fn load_err(p: &std::path::Path) -> String {
    let e = Model::load(p, &cpu())
        .err()
        .expect("the load must fail")
        .to_string();
    std::fs::remove_file(p).ok();
    e
}

#[test]
fn unknown_architecture_is_named_at_load() {
    let p = rewritten(
        "arch",
        |k, v| match k {
            "general.architecture" => Value::String("mamba".into()),
            _ => v.clone(),
        },
        |_, ty| ty,
    );
    let e = load_err(&p);
    assert!(e.contains("architecture `mamba` is not supported"), "{e}");
}

#[test]
fn tensor_type_without_kernels_is_named_at_load() {
    // output_norm is F32 [576] = 2304 bytes; as I32 the bytes still fit, but
    // glint has no I32 weight kernels.
    let p = rewritten(
        "type",
        |_, v| v.clone(),
        |name, ty| {
            if name == "output_norm.weight" {
                GgmlType::I32
            } else {
                ty
            }
        },
    );
    let e = load_err(&p);
    assert!(e.contains("output_norm.weight") && e.contains("I32"), "{e}");
}

#[test]
fn tensor_shape_that_disagrees_with_hparams_is_named() {
    let p = rewritten(
        "shape",
        |k, v| match k {
            "llama.feed_forward_length" => Value::U32(1024),
            _ => v.clone(),
        },
        |_, ty| ty,
    );
    let e = load_err(&p);
    assert!(
        e.contains("blk.0.ffn_gate.weight") && e.contains("1536"),
        "{e}"
    );
}

/// Hyperparameters a hostile file can lie about: each is refused at load,
/// naming the key and the value, before anything is sized by it (a
/// `block_count` of 0xffffffff once asked for terabytes).
#[test]
fn lying_hyperparameters_are_refused_at_load() {
    #[rustfmt::skip]
    let cases = [
        ("llama.block_count", Value::U32(0xffff_ffff), "llama.block_count = 4294967295"),
        ("llama.block_count", Value::U32(0), "llama.block_count = 0"),
        ("llama.embedding_length", Value::U32(0), "llama.embedding_length = 0"),
        ("llama.context_length", Value::U32(0xffff_ffff), "llama.context_length"),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::NAN), "layer_norm_rms_epsilon = NaN"),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(-1e-5), "layer_norm_rms_epsilon = -0.00001"),
        ("llama.rope.freq_base", Value::F32(0.0), "llama.rope.freq_base = 0"),
        ("llama.rope.dimension_count", Value::U32(0), "rope.dimension_count = 0"),
        // once silently replaced by another token
        ("tokenizer.ggml.bos_token_id", Value::U32(60_000), "bos_token_id = 60000, outside the vocabulary of 49152"),
    ];
    for (key, value, needle) in cases {
        let p = rewritten(
            "hparams",
            |k, v| if k == key { value.clone() } else { v.clone() },
            |_, ty| ty,
        );
        let e = load_err(&p);
        assert!(e.contains(needle), "{key} = {value:?}: {e}");
    }
}

#[test]
fn micro_batches_give_the_same_logits() {
    let model = Model::load(common::model("smollm2"), &cpu()).unwrap();
    let prompt: Vec<u32> = model
        .tokenizer()
        .encode(
            "The quick brown fox jumps over the lazy dog, and then",
            true,
            true,
        )
        .unwrap();
    let run = |n_ubatch: u32| {
        let mut ctx = Context::new(
            &model,
            ContextParams {
                n_ctx: 256,
                n_ubatch,
                ..Default::default()
            },
        )
        .unwrap();
        let mut b = Batch::new();
        for (i, &t) in prompt.iter().enumerate() {
            b.add(t, i as i32, &[0], i % 3 == 0 || i + 1 == prompt.len());
        }
        ctx.decode(&b).unwrap();
        let idx: Vec<usize> = (0..prompt.len())
            .filter(|i| i % 3 == 0 || i + 1 == prompt.len())
            .collect();
        idx.iter()
            .map(|&i| ctx.logits(i).unwrap().to_vec())
            .collect::<Vec<_>>()
    };
    let whole = run(512);
    for ub in [1, 4, 5] {
        let split = run(ub);
        for (a, b) in whole.iter().zip(&split) {
            // Same cache contents, same per-token arithmetic: only the
            // activation batches differ, which the cpu backend computes per column.
            assert!(
                common::max_abs_diff(a, b) < 1e-3,
                "n_ubatch {ub}: {}",
                common::max_abs_diff(a, b)
            );
        }
    }
}
