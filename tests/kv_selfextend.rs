//! Self-extend in `glint generate`, held to llama.cpp's passkey run with the
//! K-shift rotating the right way (`fixtures/reference/selfextend_smollm2_divadd`):
//! the same cache calls in the same order, the same final cell positions,
//! the same text.

mod common;

use std::time::Instant;

#[test]
fn self_extend_matches_the_divadd_reference() {
    let r = common::reference_json("selfextend_smollm2_divadd/result.json");
    let prompt = common::reference("selfextend_prompt.txt");
    let t0 = Instant::now();
    let (text, err) = common::greedy_cpu(
        "smollm2",
        &[
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
            "--verbose",
        ],
    );
    eprintln!("self-extend run: {:.1} s", t0.elapsed().as_secs_f64());
    assert!(err.contains("prompt 1491 tokens"), "{err}");

    // The events: a summary line per pass (n_past, ga_i before and after),
    // then its three calls, in llama.cpp's order.
    let (events, got) = common::kv_events_and_cells(&err);
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
    assert_eq!(events, want);

    // Final cell positions, sorted.
    let want_cells = common::reference_cells("selfextend_smollm2_divadd");
    assert_eq!(got.len(), r["n_cells_final"].as_u64().unwrap() as usize);
    assert_eq!(got, want_cells);

    // The passkey, as the reference answers it.
    assert_eq!(text, " 71432.\nThe grass is green. The sky is\n");
    assert_eq!(format!("{}\n", r["generated_text"].as_str().unwrap()), text);
}

/// `glint generate` on a missing model: the flags are checked first.
fn without_model(flags: &[&str]) -> std::process::Output {
    let mut args = vec!["generate", "-m", "/nonexistent.gguf", "-p", "x"];
    args.extend_from_slice(flags);
    common::glint(&args)
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
        let out = without_model(&["-gan", gan, "-gaw", gaw]);
        let line = common::one_line_error(&out, &format!("{gan} {gaw}"));
        assert!(
            line.contains(needle),
            "{gan} {gaw}: `{needle}` not in {line}"
        );
    }
    let out = without_model(&["-gan", "4", "--context-shift"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be combined"), "{err}");
}
