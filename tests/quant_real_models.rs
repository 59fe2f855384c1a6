//! Dequantization of whole tensors of the real models, bit-identical to the
//! independent oracle (gguf-py 0.19.0, itself bit-identical to ggml's C):
//! `fixtures/quant/real_models.json` holds the sha256 of gguf-py's float32
//! output for 2-3 tensors of every type in both models
//! (made by `fixtures/quant/make_golden.py --real`).

mod common;

use std::collections::BTreeSet;

use glint::gguf::GgufFile;
use serde_json::Value;
use sha2::{Digest, Sha256};

#[test]
fn dequantize_real_tensors_bit_identical_to_gguf_py() {
    let path = common::fixture("quant/real_models.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let entries = doc["tensors"].as_array().unwrap();
    let mut covered = BTreeSet::new();
    for model in glint_cli::models::KNOWN_MODELS {
        let f = GgufFile::open(common::model(model.name)).unwrap();
        for e in entries.iter().filter(|e| e["model"] == model.file) {
            let name = e["tensor"].as_str().unwrap();
            let t = f
                .tensor(name)
                .unwrap_or_else(|| panic!("{}: no tensor {name}", model.file));
            assert_eq!(t.ty.name(), e["type"], "{name}: type");
            assert_eq!(
                t.byte_range().start as u64,
                e["data_offset"].as_u64().unwrap(),
                "{name}"
            );
            assert_eq!(t.n_bytes, e["n_bytes"].as_u64().unwrap(), "{name}");
            let mut out = vec![0f32; t.n_elements as usize];
            glint::quant::dequantize_row(t.ty, f.tensor_data(t), &mut out).unwrap();
            let first: Vec<f32> = e["first8"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            for (i, (a, b)) in out.iter().zip(&first).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{name}[{i}]: {a} vs {b}");
            }
            let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
            let sha = format!("{:x}", Sha256::digest(&bytes));
            assert_eq!(
                sha,
                e["sha256_f32"].as_str().unwrap(),
                "{}: {name} ({})",
                model.file,
                t.ty
            );
            covered.insert((model.name, t.ty.name()));
        }
    }
    // Every tensor type present in each model is covered.
    let want: BTreeSet<(&str, &str)> = [
        ("smollm2", "F32"),
        ("smollm2", "Q4_1"),
        ("smollm2", "Q8_0"),
        ("gemma3", "F32"),
        ("gemma3", "Q5_0"),
        ("gemma3", "Q4_K"),
        ("gemma3", "Q6_K"),
        ("gemma3", "Q8_0"),
    ]
    .into_iter()
    .collect();
    assert_eq!(covered, want);
}
