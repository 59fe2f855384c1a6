//! Self-extend in `glint generate`, held to llama.cpp's passkey run with the
//! K-shift rotating the right way (`fixtures/reference/selfextend_smollm2_divadd`):
//! the same cache calls in the same order, the same final cell positions,
//! the same text.

mod common;

use std::time::Instant;

#[test]
fn self_extend_matches_the_divadd_reference() {
    let r = common::reference_json("selfextend_smollm2_divadd/result.json");
    let m = common::model("smollm2");
    let prompt = common::reference("selfextend_prompt.txt");
    let t0 = Instant::now();
    let out = common::glint(&[
        "generate",
        "--model",
        m.to_str().unwrap(),
        "--ctx-size",
        "4096",
        "--batch-size",
        "512",
        "--grp-attn-n",
        "4",
        "--grp-attn-w",
        "512",
        "--file",
        prompt.to_str().unwrap(),
        "--n-predict",
        "16",
        "--temp",
        "0",
        "--backend",
        "cpu",
        "--verbose",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    eprintln!("self-extend run: {:.1} s", t0.elapsed().as_secs_f64());
    assert!(err.contains("prompt 1491 tokens"), "{err}");

    // The events: a summary line per pass (n_past, ga_i before and after),
    // then its three calls, in llama.cpp's order.
    let lines = common::kv_lines(&err);
    let mut want = Vec::new();
    let calls = common::reference_calls(&r["events"]);
    for (k, ev) in r["events"].as_array().unwrap().iter().enumerate() {
        want.push(format!(
            "kv: self-extend n_past {} ga_i {} ib {} bd {} dd {} -> n_past {} ga_i {}",
            ev["n_past_before"],
            ev["ga_i_before"],
            ev["ib"],
            ev["bd"],
            ev["dd"],
            ev["n_past_after"],
            ev["ga_i_after"]
        ));
        want.extend(calls[3 * k..3 * k + 3].iter().cloned());
    }
    let events: Vec<String> = lines
        .iter()
        .filter(|l| !l.starts_with("kv: cells"))
        .cloned()
        .collect();
    assert_eq!(events, want);

    // Final cell positions, sorted.
    let cells_line = lines
        .iter()
        .find(|l| l.starts_with("kv: cells"))
        .expect("the cell dump");
    let got: Vec<i32> = cells_line
        .rsplit_once(": ")
        .unwrap()
        .1
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let mut want_cells = common::read_npy_i32(&common::reference(
        "selfextend_smollm2_divadd/cells_final.npy",
    ));
    want_cells.sort_unstable();
    assert_eq!(got.len(), r["n_cells_final"].as_u64().unwrap() as usize);
    assert_eq!(got, want_cells);

    // The passkey, as the reference answers it.
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, " 71432.\nThe grass is green. The sky is\n");
    assert_eq!(format!("{}\n", r["generated_text"].as_str().unwrap()), text);
}

#[test]
fn self_extend_flags_are_checked() {
    for (gan, gaw, needle) in [
        ("0", "512", "--grp-attn-n must be >= 1"),
        ("-2", "512", "--grp-attn-n must be >= 1"),
        ("4", "510", "multiple of --grp-attn-n"),
        ("4", "2", "must be >= --grp-attn-n"),
        ("4", "0", "must be >= --grp-attn-n"),
    ] {
        let out = common::glint(&[
            "generate",
            "-m",
            "/nonexistent.gguf",
            "-p",
            "x",
            "-gan",
            gan,
            "-gaw",
            gaw,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{gan} {gaw}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{gan} {gaw}: `{needle}` not in {err}");
    }
    let out = common::glint(&[
        "generate",
        "-m",
        "/nonexistent.gguf",
        "-p",
        "x",
        "-gan",
        "4",
        "--context-shift",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be combined"), "{err}");
}
