//! glint-quant against gguf-py 0.19.0 (llama.cpp's own numpy code, itself
//! bit-identical to ggml's C reference): the golden files in
//! `fixtures/quant/`, written by `fixtures/quant/make_golden.py`.

mod common;

use common::{f32s, fixture};
use glint_quant::{dequantize_row, quantize_row, GgmlType, Support, TYPES};

/// Types whose quantizer gguf-py has, so their output bytes are fixtures.
const QUANTIZE_FIXTURES: &[GgmlType] = &[
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
];

fn manifest() -> serde_json::Value {
    let text = String::from_utf8(fixture("manifest.json")).expect("manifest.json is utf-8");
    serde_json::from_str(&text).expect("manifest.json parses")
}

/// Dequantizes `{T}.blocks.bin` and compares f32 bits with `{T}.dequant.f32`.
/// Returns the number of values compared.
fn check_dequantize(ty: GgmlType) -> usize {
    let name = ty.name();
    let src = fixture(&format!("{name}.blocks.bin"));
    let want = f32s(&fixture(&format!("{name}.dequant.f32")));
    assert!(!want.is_empty(), "{name}: empty fixture");
    let mut got = vec![0.0f32; want.len()];
    dequantize_row(ty, &src, &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
    let bs = ty.block_size();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{name}: block {} element {}: got {g:e} ({:#010x}), gguf-py {w:e} ({:#010x})",
            i / bs,
            i % bs,
            g.to_bits(),
            w.to_bits()
        );
    }
    want.len()
}

/// Every Compute type has a dequantize fixture and matches it bit for bit:
/// a type added to the table without oracle data fails here.
#[test]
fn dequantize_is_bit_identical_to_gguf_py_for_every_compute_type() {
    let m = manifest();
    let mut n_types = 0;
    for row in TYPES.iter().filter(|r| r.support == Support::Compute) {
        assert!(
            m["dequantize"][row.name].is_object(),
            "{}: no dequantize entry in manifest.json",
            row.name
        );
        let n = check_dequantize(row.ty);
        assert_eq!(
            m["dequantize"][row.name]["n_elements"].as_u64(),
            Some(n as u64)
        );
        n_types += 1;
    }
    assert_eq!(n_types, 13);
}

#[test]
fn quantize_is_byte_identical_to_gguf_py() {
    let m = manifest();
    for &ty in QUANTIZE_FIXTURES {
        let name = ty.name();
        assert!(
            m["quantize"][name].is_object(),
            "{name}: no quantize entry in manifest.json"
        );
        let x = f32s(&fixture(&format!("{name}.qin.f32")));
        let want = fixture(&format!("{name}.qout.bin"));
        let mut got = vec![0u8; want.len()];
        quantize_row(ty, &x, &mut got).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ts = ty.type_size();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let b = i / ts;
            assert_eq!(
                g,
                w,
                "{name}: block {b} byte {}: got {g:#04x}, gguf-py {w:#04x}; input {:?}",
                i % ts,
                &x[b * ty.block_size()..(b + 1) * ty.block_size()]
            );
        }
    }
}

/// The manifest lists exactly the files the tests read, and says which
/// gguf-py produced them.
#[test]
fn manifest_describes_the_fixtures() {
    let m = manifest();
    assert_eq!(m["gguf_py_version"].as_str(), Some("0.19.0"));
    let deq = m["dequantize"].as_object().expect("dequantize map");
    for (name, entry) in deq {
        let ty = GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"));
        let bytes = fixture(entry["blocks"].as_str().expect("blocks file"));
        let n = entry["n_elements"].as_u64().expect("n_elements");
        assert_eq!(ty.bytes_for(n), Some(bytes.len() as u64), "{name}");
    }
    let q = m["quantize"].as_object().expect("quantize map");
    assert_eq!(q.len(), QUANTIZE_FIXTURES.len());
}

/// The real-model golden file is well formed (the test that reads the models
/// lives in the root crate, which has the GGUF reader).
#[test]
fn real_models_golden_is_well_formed() {
    let text = String::from_utf8(fixture("real_models.json")).expect("utf-8");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parses");
    let tensors = doc["tensors"].as_array().expect("tensors");
    assert!(tensors.len() >= 10);
    for t in tensors {
        let ty = GgmlType::from_name(t["type"].as_str().expect("type")).expect("known type");
        let ne: Vec<u64> = t["ne"]
            .as_array()
            .expect("ne")
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let n: u64 = ne.iter().product();
        assert_eq!(t["n_elements"].as_u64(), Some(n));
        assert_eq!(t["n_bytes"].as_u64(), ty.bytes_for(n), "{}", t["tensor"]);
        assert_eq!(t["sha256_f32"].as_str().map(str::len), Some(64));
        assert_eq!(t["first8"].as_array().map(Vec::len), Some(8));
    }
}
