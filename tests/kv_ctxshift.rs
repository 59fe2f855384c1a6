//! Context shift in `glint generate`, held to llama.cpp's run
//! (`fixtures/reference/ctxshift_smollm2`: n_ctx 256, n_keep 16, a
//! 191-token prompt, 120 tokens, one shift), and the clean stop without it.

mod common;

#[test]
fn context_shift_matches_the_reference() {
    let r = common::reference_json("ctxshift_smollm2/result.json");
    let prompt = common::reference("ctxshift_prompt.txt");
    let (text, err) = common::greedy_cpu(
        "smollm2",
        &[
            "--ctx-size",
            "256",
            "--keep",
            "16",
            "--context-shift",
            "--file",
            prompt.to_str().unwrap(),
            "--n-predict",
            "120",
            "--verbose",
        ],
    );
    assert!(
        err.contains("prompt 191 tokens") && err.contains("generation 120 tokens"),
        "{err}"
    );

    // One shift: n_past 255, n_keep 16, n_discard 119.
    let (events, cells) = common::kv_events_and_cells(&err);
    let ev = &r["events"][0];
    let mut want = vec![format!(
        "kv: context-shift n_past {} n_keep {} n_discard {} -> n_past {}",
        ev["n_past_before"], ev["n_keep"], ev["n_discard"], ev["n_past_after"]
    )];
    want.extend(common::reference_calls(&r["events"]));
    assert_eq!(events, want);
    assert_eq!(
        want[1..],
        ["kv: seq_rm(0, 16, 135)", "kv: seq_add(0, 135, 255, -119)"]
    );

    // Final positions: 0..16 kept, the rest slid down (191 slots in use).
    let want_cells = common::reference_cells("ctxshift_smollm2");
    assert_eq!(cells, want_cells);

    // The text and ids (the tokenizer round-trips them: compare the text).
    let want_text = format!("{}\n", r["generated_text"].as_str().unwrap());
    assert_eq!(common::ids(&r["generated_ids"]).len(), 120);
    assert_eq!(text, want_text);
}

#[test]
fn a_full_context_stops_cleanly_without_shift() {
    let (_, err) = common::greedy_cpu(
        "smollm2",
        &[
            "-c",
            "16",
            "-p",
            "The capital of France is",
            "-n",
            "100",
            "--ignore-eos",
        ],
    );
    // 5 prompt tokens + 11 decoded tokens fill 16 slots; the 12th token is
    // sampled from the last decode and printed.
    assert!(err.contains("generation 12 tokens"), "{err}");
    assert!(err.contains("context full"), "{err}");
    assert!(
        err.contains("the context is full (16 tokens): stopped"),
        "{err}"
    );
}
