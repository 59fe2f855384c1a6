//! Every case in `fixtures/chat/expected.json` (rendered by Python jinja2
//! the way transformers does; see `fixtures/chat/make_fixtures.py`) renders
//! byte for byte the same here.

use glint_chat::{ChatError, ChatTemplate, DateTime};
use serde_json::Value;

fn expected() -> Value {
    let path = glint_testkit::fixture("chat/expected.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The `strftime_now` instant make_fixtures.py pinned, read from the file.
fn fixture_now(doc: &Value) -> DateTime {
    doc["strftime_now"].as_str().unwrap().parse().unwrap()
}

/// The first byte offset where `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> usize {
    a.bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// Both texts around their first difference, escaped, for a failure message.
fn show_difference(want: &str, got: &str) -> String {
    let at = first_difference(want, got);
    let window = |s: &str| {
        let mut start = at.saturating_sub(40);
        while !s.is_char_boundary(start.min(s.len())) {
            start -= 1;
        }
        let mut end = (at + 40).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        format!("{:?}", &s[start.min(s.len())..end])
    };
    format!(
        "first difference at byte {at} (lengths: want {}, got {})\n  jinja2:    {}\n  glint-chat: {}\n\
         full jinja2 output:\n{want:?}\nfull glint-chat output:\n{got:?}",
        want.len(),
        got.len(),
        window(want),
        window(got),
    )
}

#[test]
fn every_fixture_case_renders_as_jinja2_does() {
    let doc = expected();
    let now = fixture_now(&doc);
    let cases = doc["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut n_text = 0;
    let mut n_raise = 0;
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let conv_id = case["conversation"].as_str().unwrap();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let info = &doc["templates"][name];
        let source_path = glint_testkit::fixture("chat").join(info["file"].as_str().unwrap());
        let source = std::fs::read_to_string(&source_path).unwrap();
        let template = ChatTemplate::new(
            &source,
            info["bos_token"].as_str().unwrap(),
            info["eos_token"].as_str().unwrap(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .with_fixed_now(now);
        let conv = &doc["conversations"][conv_id];
        let messages = conv["messages"].as_array().unwrap();
        let tools = conv.get("tools");
        let got = template.render(messages, agp, tools);
        let label = format!("{name} / {conv_id} / add_generation_prompt={agp}");

        if let Some(want) = case.get("expected") {
            n_text += 1;
            let want = want.as_str().unwrap();
            match got {
                Ok(got) if got == want => {}
                Ok(got) => failures.push(format!("{label}: {}", show_difference(want, &got))),
                Err(e) => {
                    failures.push(format!("{label}: jinja2 rendered {want:?}, we failed: {e}"))
                }
            }
        } else {
            let kind = case["error"]["kind"].as_str().unwrap();
            let message = case["error"]["message"].as_str().unwrap();
            match (kind, got) {
                ("raise_exception", Err(ChatError::Template(m))) if m == message => n_raise += 1,
                ("other", Err(ChatError::Render { .. })) => {}
                (_, got) => failures.push(format!(
                    "{label}: jinja2 failed ({kind}: {message}), we gave {got:?}"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    // The fixture covers what it claims to: texts and template refusals.
    assert!(n_text >= 70, "only {n_text} text cases");
    assert!(n_raise >= 6, "only {n_raise} raise_exception cases");
}

#[test]
fn fixture_templates_cover_the_families_asked_for() {
    let doc = expected();
    let names: Vec<&str> = doc["templates"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    for want in [
        "smollm2",
        "qwen2.5",
        "llama-3.3",
        "llama-3.2",
        "mixtral",
        "gemma-3",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(want)),
            "no {want} template in {names:?}"
        );
    }
}
