//! `glint inspect` on the real models, held to the reference facts gguf-py
//! wrote (`fixtures/reference/gguf_facts.json`), and on hostile files.

mod common;

use serde_json::Value;

fn facts(model_file: &str) -> Value {
    let all: Value = serde_json::from_str(
        &std::fs::read_to_string(common::reference("gguf_facts.json")).expect("readable"),
    )
    .expect("valid json");
    all[format!("models/{model_file}")].clone()
}

fn inspect_json(path: &std::path::Path) -> Value {
    let out = common::glint(&["inspect", path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints valid JSON")
}

fn check_model(name: &str, file: &str, arch: &str, blocks: u64, types: &[(&str, u64)]) {
    let doc = inspect_json(&common::model(name));
    let want = facts(file);
    let sum = &want["summary"];
    assert_eq!(doc["architecture"], arch);
    assert_eq!(doc["block_count"], blocks);
    assert_eq!(doc["architecture"], sum["architecture"]);
    assert_eq!(doc["block_count"], sum["block_count"]);
    assert_eq!(doc["version"], sum["gguf_version"]);
    assert_eq!(doc["alignment"], sum["alignment"]);
    assert_eq!(doc["data_offset"], sum["data_offset"]);
    assert_eq!(doc["file_size"], sum["file_size"]);
    assert_eq!(doc["n_tensors"], sum["n_tensors"]);
    assert_eq!(doc["tensor_bytes"], sum["tensor_bytes_total"]);
    // Tensor counts per type: the numbers and the reference's.
    for (ty, n) in types {
        assert_eq!(doc["types"][ty]["tensors"], *n, "{name}: count of {ty}");
        assert_eq!(sum["tensor_types"][ty], *n, "reference count of {ty}");
    }
    assert_eq!(doc["types"].as_object().unwrap().len(), types.len());
    // Every tensor: name, type, shape, bytes and absolute offset.
    let ours = doc["tensors"].as_array().unwrap();
    let theirs = want["tensors"].as_array().unwrap();
    assert_eq!(ours.len(), theirs.len());
    let data_offset = doc["data_offset"].as_u64().unwrap();
    for t in theirs {
        let o = ours
            .iter()
            .find(|o| o["name"] == t["name"])
            .unwrap_or_else(|| panic!("{t}"));
        assert_eq!(o["type"], t["type"], "{}", t["name"]);
        assert_eq!(o["shape"], t["ne"], "{}", t["name"]);
        assert_eq!(o["bytes"], t["n_bytes"], "{}", t["name"]);
        assert_eq!(
            o["offset"].as_u64().unwrap() + data_offset,
            t["offset"].as_u64().unwrap()
        );
    }
    // Every metadata key and scalar value.
    let kv = want["kv"].as_object().unwrap();
    let meta = doc["metadata"].as_array().unwrap();
    // The reference dump leaves out the big tokenizer arrays; those are our only extra keys.
    for m in meta {
        let key = m["key"].as_str().unwrap();
        if !kv.contains_key(key) {
            assert!(
                m["len"].as_u64().unwrap_or(0) > 1000,
                "{name}: unexpected key {key}"
            );
        }
    }
    let mut scalars = 0;
    for (key, want_v) in kv {
        let m = meta
            .iter()
            .find(|m| m["key"] == *key)
            .unwrap_or_else(|| panic!("{key}"));
        if let Some(v) = m.get("value") {
            scalars += 1;
            if let (Some(a), Some(b)) = (v.as_f64(), want_v.as_f64()) {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{key}: {a} vs {b}"
                );
            } else {
                assert_eq!(v, want_v, "{key}");
            }
        }
    }
    assert!(scalars >= 20, "{name}: only {scalars} scalar keys compared");
}

#[test]
fn inspect_smollm2_matches_reference_facts() {
    check_model(
        "smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llama",
        30,
        &[("F32", 61), ("Q4_1", 210), ("Q8_0", 1)],
    );
}

#[test]
fn inspect_gemma3_matches_reference_facts() {
    check_model(
        "gemma3",
        "gemma-3-270m-q4_k_m.gguf",
        "gemma3",
        18,
        &[
            ("F32", 109),
            ("Q5_0", 81),
            ("Q4_K", 27),
            ("Q8_0", 10),
            ("Q6_K", 9),
        ],
    );
}

#[test]
fn inspect_text_names_architecture_blocks_and_types() {
    let out = common::glint(&["inspect", common::model("smollm2").to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("architecture: llama, block_count: 30"),
        "{text}"
    );
    assert!(text.contains("tokenizer.ggml.tokens"));
    assert!(
        text.contains("[string; 49152]"),
        "long arrays are summarized"
    );
    for line in [
        "Q4_1      210 tensors",
        "F32        61 tensors",
        "Q8_0        1 tensors",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
}

/// A hostile file: exit code 1, exactly one line on stderr that names the
/// problem, nothing on stdout, no panic.
fn assert_one_line_error(bytes: &[u8], tag: &str, expect: &[&str]) {
    let dir = std::env::temp_dir().join(format!("glint-inspect-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.gguf");
    std::fs::write(&path, bytes).unwrap();
    let out = common::glint(&["inspect", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{tag}: {err}");
    assert!(out.stdout.is_empty(), "{tag}: nothing on stdout");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{tag}: one line, got {err:?}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{tag}: {err}"
    );
    for e in expect {
        assert!(
            err.to_lowercase().contains(&e.to_lowercase()),
            "{tag}: `{e}` not in {err:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn smollm2_head(n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut f = std::fs::File::open(common::model("smollm2")).unwrap();
    let mut buf = vec![0u8; n];
    f.read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn inspect_truncated_file_is_a_one_line_error() {
    // The first megabyte of SmolLM2 ends inside the metadata (the tokens array).
    assert_one_line_error(&smollm2_head(1 << 20), "truncated", &["bad.gguf"]);
}

#[test]
fn inspect_bad_magic_is_a_one_line_error() {
    let mut b = smollm2_head(4096);
    b[..4].copy_from_slice(b"GGUX");
    assert_one_line_error(&b, "magic", &["magic"]);
}

#[test]
fn inspect_tensor_past_end_is_a_one_line_error() {
    let doc = inspect_json(&common::model("smollm2"));
    let data_offset = doc["data_offset"].as_u64().unwrap() as usize;
    // Keep the header, metadata and tensor table plus a little data: every
    // tensor but the first now lies (at least partly) past the end of the file.
    let b = smollm2_head(data_offset + 4096);
    assert_one_line_error(&b, "past-end", &["token_embd.weight"]);
}
