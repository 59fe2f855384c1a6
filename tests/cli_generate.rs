//! `glint generate` as a user runs it.

mod common;

#[test]
fn generate_prints_llama_cpps_reference_text() {
    let r = common::reference_json("gen_smollm2/result.json");
    let (text, err) =
        common::greedy_cpu("smollm2", &["-p", "The capital of France is", "-n", "32"]);
    // Only the generated text on stdout (plus the final newline).
    assert_eq!(text, format!("{}\n", r["generated_text"].as_str().unwrap()));
    assert!(
        err.contains("prompt 5 tokens") && err.contains("generation 32 tokens"),
        "{err}"
    );
}

#[test]
fn generate_echo_and_verbose_prompt() {
    let (text, err) = common::greedy_cpu(
        "smollm2",
        &[
            "-p",
            "The capital of France is",
            "-n",
            "2",
            "--echo",
            "--verbose-prompt",
        ],
    );
    assert_eq!(text, "The capital of France is Paris.\n");
    assert!(err.contains("   504 -> \"The\""), "{err}");
}

#[test]
fn generate_errors_are_one_line() {
    let m = common::model("smollm2");
    let m = m.to_str().unwrap();
    for (args, needle) in [
        (vec!["generate", "-m", m, "-p", "x", "--temp", "-1"], "temp"),
        (
            vec!["generate", "-m", m, "-p", "x", "--top-p", "1.5"],
            "top_p",
        ),
        (
            vec!["generate", "-m", m, "-p", "x", "--backend", "tpu"],
            "tpu",
        ),
        (
            vec!["generate", "-m", "/nonexistent.gguf", "-p", "x"],
            "/nonexistent.gguf",
        ),
        (
            vec!["generate", "-m", m, "-p", "hello world", "-c", "2"],
            "context",
        ),
        (vec!["generate", "-m", m], "no prompt"),
        (
            vec!["generate", "-m", m, "-p", "x", "--frobnicate"],
            "--frobnicate",
        ),
    ] {
        let line = common::one_line_error(&common::glint(&args), &format!("{args:?}"));
        assert!(line.contains(needle), "{args:?}: `{needle}` not in {line}");
    }
}

#[test]
fn same_seed_same_text_other_seed_other_text() {
    let run = |seed: &str| {
        common::success(common::generate(
            "smollm2",
            &[
                "-p",
                "Once upon a time",
                "-n",
                "24",
                "--temp",
                "1.0",
                "--seed",
                seed,
                "--backend",
                "cpu",
            ],
        ))
        .0
    };
    let (a, b, c) = (run("42"), run("42"), run("7"));
    assert_eq!(a, b, "--seed 42 twice");
    assert!(!a.trim().is_empty());
    assert_ne!(a, c, "another seed samples another text");
}

/// `-m NAME` takes a known model by name (from the model cache, fetched on
/// first use), and an unknown name is a missing file.
#[test]
fn a_known_model_is_taken_by_name() {
    common::model("gemma3"); // fails with how to fetch it, if absent
    let (_, err) = common::success(common::glint(&[
        "generate",
        "-m",
        "gemma3",
        "-p",
        "Hi",
        "-n",
        "1",
        "--backend",
        "cpu",
        "-v",
    ]));
    assert!(err.contains("gemma-3-270m-q4_k_m.gguf (gemma3,"), "{err}");
    let out = common::glint(&["generate", "-m", "no-such-model", "-p", "Hi", "-n", "1"]);
    let e = common::one_line_error(&out, "-m no-such-model");
    assert!(e.contains("no-such-model"), "{e}");
}
