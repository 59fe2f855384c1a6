//! The GGUF corruption fuzz carried through to loading a model (what
//! `generate -m` does): a small real-shaped model (SmolLM2's tokenizer and
//! metadata, tiny random F16 weights) written by our own writer, then
//! mutated in its header, metadata and tensor table and loaded. Every
//! mutation must load or fail with an error: no panic, no abort.

mod common;

use glint::gguf::{GgufFile, GgufWriter, Value};
use glint::quant::GgmlType;
use glint::{BackendKind, Model, ModelParams};
use glint_testkit::Rng;

/// SmolLM2's metadata (tokenizer included) over a 2-layer model of width 64:
/// F16 matrices, F32 norms.
fn tiny_model() -> Vec<u8> {
    let src = GgufFile::open(common::model("smollm2")).unwrap();
    let n_vocab = 49152u64;
    let (n_embd, n_ff, n_layer) = (64u64, 128u64, 2u32);
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        let v = match k.as_ref() {
            "llama.block_count" => Value::U32(n_layer),
            "llama.embedding_length" => Value::U32(n_embd as u32),
            "llama.feed_forward_length" => Value::U32(n_ff as u32),
            "llama.attention.head_count" | "llama.attention.head_count_kv" => Value::U32(4),
            "llama.rope.dimension_count" => Value::U32(16),
            _ => v.clone(),
        };
        w.add_kv(k, v).unwrap();
    }
    let mut rng = Rng::new(11);
    // Matrices F16, norms F32 (as converters write them).
    let mut add = |name: &str, dims: &[u64]| {
        let n: u64 = dims.iter().product();
        let ty = if dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::F16
        };
        let mut bytes = vec![0u8; ty.bytes_for(n).unwrap() as usize];
        let vals = rng.vec_scaled(n as usize, 0.05);
        glint::quant::quantize_row(ty, &vals, &mut bytes).unwrap();
        w.add_tensor(name, dims, ty, bytes).unwrap();
    };
    add("token_embd.weight", &[n_embd, n_vocab]);
    for il in 0..n_layer {
        for (t, dims) in [
            ("attn_q", [n_embd, n_embd]),
            ("attn_k", [n_embd, n_embd]),
            ("attn_v", [n_embd, n_embd]),
            ("attn_output", [n_embd, n_embd]),
            ("ffn_gate", [n_embd, n_ff]),
            ("ffn_up", [n_embd, n_ff]),
            ("ffn_down", [n_ff, n_embd]),
        ] {
            add(&format!("blk.{il}.{t}.weight"), &dims);
        }
        for t in ["attn_norm", "ffn_norm"] {
            add(&format!("blk.{il}.{t}.weight"), &[n_embd]);
        }
    }
    add("output_norm.weight", &[n_embd]);
    w.to_bytes().unwrap()
}

#[test]
fn mutated_model_files_load_or_fail_cleanly() {
    let good = tiny_model();
    let cpu = ModelParams {
        backend: BackendKind::Cpu,
        n_threads: Some(1),
        ..Default::default()
    };
    // The untouched file loads: the fuzz starts from a valid model.
    Model::from_gguf(GgufFile::from_bytes(good.clone()).unwrap(), &cpu).unwrap();
    // Everything before the tensor data: header, metadata, tensor table.
    let data_at = GgufFile::from_bytes(good.clone()).unwrap().data_offset() as usize;

    let mut rng = Rng::new(0xf022);
    let (mut tried, mut loaded, mut refused, mut panics) = (0, 0, 0, 0);
    for _ in 0..1000 {
        let mut b = good.clone();
        match rng.next_u64() % 4 {
            0 => b.truncate((rng.next_u64() % data_at as u64) as usize),
            _ => {
                for _ in 0..1 + rng.next_u64() % 4 {
                    let i = (rng.next_u64() % data_at as u64) as usize;
                    b[i] = rng.next_u64() as u8;
                }
            }
        }
        tried += 1;
        let r = std::panic::catch_unwind(|| {
            GgufFile::from_bytes(b)
                .map_err(glint::Error::from)
                .and_then(|f| Model::from_gguf(f, &cpu).map(|_| ()))
        });
        match r {
            Ok(Ok(())) => loaded += 1,
            Ok(Err(e)) => {
                assert!(!e.to_string().is_empty());
                refused += 1
            }
            Err(_) => panics += 1,
        }
    }
    eprintln!("{tried} mutated files: {loaded} loaded, {refused} refused, {panics} panics");
    assert_eq!(tried, 1000);
    assert_eq!(panics, 0);
    assert_eq!(loaded + refused, tried);
    assert!(refused > tried / 4, "mutations that matter are refused");
}

/// The same mutations through the binary, as a user meets them: `glint
/// generate -m FILE` exits 0 or 1 with one error line, never a panic or an
/// abort (a subset: each run is a process).
#[test]
fn generate_on_mutated_model_files_exits_cleanly() {
    let good = tiny_model();
    let data_at = GgufFile::from_bytes(good.clone()).unwrap().data_offset() as usize;
    let tmp = common::TempDir::new("fuzz-gen");
    let dir = tmp.path().to_path_buf();
    let path = dir.join("m.gguf");
    let run = |path: &std::path::Path| {
        #[rustfmt::skip]
        let args = ["generate", "-m", path.to_str().unwrap(), "-p", "Hi", "-n", "1",
            "--backend", "cpu", "-t", "1", "-c", "64"];
        common::glint(&args)
    };
    // The untouched file generates.
    std::fs::write(&path, &good).unwrap();
    common::success(run(&path));
    let mut rng = Rng::new(0x9e11);
    let (mut ok, mut refused) = (0, 0);
    for i in 0..40 {
        let mut b = good.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            let k = (rng.next_u64() % data_at as u64) as usize;
            b[k] = rng.next_u64() as u8;
        }
        std::fs::write(&path, &b).unwrap();
        let out = run(&path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "mutation {i}: {err}");
        match out.status.code() {
            Some(0) => ok += 1,
            Some(1) => refused += 1,
            other => panic!("mutation {i}: exit {other:?}: {err}"),
        }
    }
    eprintln!("40 mutated files through glint generate: {ok} ran, {refused} refused");
}
