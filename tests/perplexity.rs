//! `glint perplexity`: llama-perplexity's output and base-file format on a
//! committed public-domain text (fixtures/perplexity), and the KL-divergence
//! statistics held to what they must be against their own base.

mod common;

fn text() -> String {
    common::fixture("perplexity/kjv-genesis.txt")
        .to_str()
        .unwrap()
        .to_string()
}

/// The number after `key` in `s`.
fn number_after(s: &str, key: &str) -> f64 {
    let at = s
        .find(key)
        .unwrap_or_else(|| panic!("`{key}` not in:\n{s}"))
        + key.len();
    s[at..]
        .trim_start_matches([' ', ':'])
        .split(|c: char| c.is_whitespace() || c == ',')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("after `{key}`: {e}\n{s}"))
}

#[test]
fn perplexity_base_file_and_kl_divergence_against_itself() {
    let tmp = common::TempDir::new("ppl");
    let dir = tmp.path().to_path_buf();
    let base = dir.join("base.kld");
    let base = base.to_str().unwrap();
    let (n_ctx, n_chunk, n_vocab) = (128usize, 3usize, 49152usize);
    let m = common::model("smollm2");
    let (m, text) = (m.to_str().unwrap().to_string(), text());
    // glint perplexity -m M -f TEXT -c C --chunks 3 --backend cpu
    //   --kl-divergence-base BASE extra...
    let args = |c: &str, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<&str> = vec![
            "perplexity",
            "-m",
            &m,
            "-f",
            &text,
            "-c",
            c,
            "--chunks",
            "3",
            "--backend",
            "cpu",
            "--kl-divergence-base",
            base,
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect()
    };
    let glint = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        common::glint(&refs)
    };
    let run = |a: Vec<String>| common::success(glint(a));

    let (out, _) = run(args("128", &[]));
    // [1]x,[2]y,[3]z, then the final estimate, as llama-perplexity prints.
    assert!(out.starts_with("[1]") && out.contains(",[3]"), "{out}");
    let ppl = number_after(&out, "Final estimate: PPL =");
    let last = number_after(&out, "[3]");
    assert!((ppl - last).abs() < 1e-3, "{out}");
    // Genesis in King James English is well predicted by a 135M model,
    // but not trivially.
    assert!((1.5..30.0).contains(&ppl), "{out}");
    let len = std::fs::metadata(base).unwrap().len() as usize;
    let scored = n_ctx - 1 - n_ctx / 2;
    let nv = 2 * n_vocab.div_ceil(2) + 4;
    assert_eq!(len, 20 + 4 * n_chunk * n_ctx + 2 * n_chunk * scored * nv);
    let head = std::fs::read(base).unwrap();
    assert_eq!(&head[..8], b"_logits_");

    // The same model against its own base: only the base's 16-bit log-prob
    // rounding separates them.
    let (kl, _) = run(args("128", &["--kl-divergence"]));
    let mean_kld = number_after(&kl, "Mean    KLD:");
    assert!(mean_kld.abs() < 1e-4, "{kl}");
    assert_eq!(number_after(&kl, "Same top p:"), 100.0, "{kl}");
    let (q, b) = (
        number_after(&kl, "Mean PPL(Q)"),
        number_after(&kl, "Mean PPL(base)"),
    );
    assert!((q - ppl).abs() < 1e-3 && (b - ppl).abs() < 1e-2, "{kl}");

    // A base made with another -c is refused, naming both.
    let e = common::one_line_error(&glint(args("64", &["--kl-divergence"])), "-c 64 base");
    assert!(e.contains("-c 128") && e.contains("-c 64"), "{e}");
}
