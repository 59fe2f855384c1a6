//! `glint generate` as a user runs it.

mod common;

#[test]
fn generate_prints_llama_cpps_reference_text() {
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::reference("gen_smollm2/result.json")).unwrap(),
    )
    .unwrap();
    let m = common::model("smollm2");
    let out = common::glint(&[
        "generate",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "32",
        "--temp",
        "0",
        "--backend",
        "cpu",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    // Only the generated text on stdout (plus the final newline).
    assert_eq!(text, format!("{}\n", r["generated_text"].as_str().unwrap()));
    assert!(
        err.contains("prompt 5 tokens") && err.contains("generation 32 tokens"),
        "{err}"
    );
}

#[test]
fn generate_echo_and_verbose_prompt() {
    let m = common::model("smollm2");
    let out = common::glint(&[
        "generate",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "2",
        "--temp",
        "0",
        "--echo",
        "--verbose-prompt",
        "--backend",
        "cpu",
    ]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "The capital of France is Paris.\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
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
        let out = common::glint(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].contains(needle),
            "{args:?}: `{needle}` not in {err}"
        );
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn same_seed_same_text_other_seed_other_text() {
    let m = common::model("smollm2");
    let run = |seed: &str| {
        let out = common::glint(&[
            "generate",
            "-m",
            m.to_str().unwrap(),
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
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (a, b, c) = (run("42"), run("42"), run("7"));
    assert_eq!(a, b, "--seed 42 twice");
    assert!(!a.trim().is_empty());
    assert_ne!(a, c, "another seed samples another text");
}
