//! `glint passkey`: prompts put the key where asked, the scorer reads the
//! first integer, and a short prompt, well inside SmolLM2's trained
//! context, is answered.

mod common;

use glint_cli::cli::passkey::{first_integer, prompt};

#[test]
fn the_key_sits_at_its_depth_and_the_scorer_reads_the_first_integer() {
    let model = common::cpu_model("smollm2");
    for depth in [0.0, 0.5, 1.0] {
        let text = prompt(&model, 1024, depth, 12345).unwrap();
        let n = model.tokenizer().encode(&text, true, true).unwrap().len();
        assert!((800..=1024).contains(&n), "{n} tokens");
        let at = text.find("The pass key is 12345").unwrap() as f64 / text.len() as f64;
        assert!((at - depth).abs() < 0.1, "depth {depth}: key at {at}");
        assert!(text.ends_with("What is the pass key? The pass key is"));
    }
    assert_eq!(first_integer(" 71195. The"), Some(71195));
    assert_eq!(first_integer("none, then 12 and 34"), Some(12));
    assert_eq!(first_integer("no digits"), None);
}

/// `glint passkey` on SmolLM2, one prompt of `length` tokens with the key
/// at depth 0.5 on the cpu, plus `extra`: its stdout (it must succeed).
fn passkey(length: &str, extra: &[&str]) -> String {
    let m = common::model("smollm2");
    let mut args = vec![
        "passkey",
        "-m",
        m.to_str().unwrap(),
        "--lengths",
        length,
        "--depths",
        "0.5",
        "--backend",
        "cpu",
    ];
    args.extend_from_slice(extra);
    common::success(common::glint(&args)).0
}

#[test]
fn a_short_prompt_is_answered() {
    let out = passkey("512", &[]);
    assert!(out.contains("| 512 | 1/1 | 1/1 |"), "{out}");
    assert!(out.contains("retrieved 1 of 1"), "{out}");
    assert!(out.starts_with("mode: none\n"), "{out}");
}

#[test]
fn the_table_names_the_rope_scaling() {
    let out = passkey("256", &["--rope-scaling", "yarn", "--rope-scale", "4"]);
    assert!(
        out.starts_with("mode: none, RoPE YaRN x4 (trained context 8192)\n"),
        "{out}"
    );
}
