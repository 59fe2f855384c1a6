//! The public API on hand-made inputs and on the real SmolLM2 GGUF.

use glint_chat::{fallback_template, ChatError, ChatTemplate, DateTime, Message, CHATML, GEMMA3};
use glint_gguf::GgufFile;
use serde_json::json;

fn fixture_template(name: &str) -> String {
    let path = glint_testkit::fixture(&format!("chat/templates/{name}.jinja"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn date(y: i16, m: i8, d: i8) -> DateTime {
    format!("{y:04}-{m:02}-{d:02}T09:05:00").parse().unwrap()
}

#[test]
fn smollm2_gguf_template_is_the_fixture_copy_and_injects_its_system_message() {
    let gguf =
        GgufFile::open(glint_testkit::test_model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let source = gguf
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("SmolLM2 has a template");
    assert_eq!(source, fixture_template("smollm2-135m-instruct"));

    let t = ChatTemplate::new(source, "<|im_start|>", "<|im_end|>").unwrap();
    let got = t
        .render(&[Message::new("user", "Hi there")], true, None)
        .unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    // With a system message of its own, no default is added.
    let got = t
        .render(
            &[
                Message::new("system", "Be brief."),
                Message::new("user", "Hi"),
            ],
            false,
            None,
        )
        .unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn raise_exception_is_an_error_carrying_the_message() {
    let t = ChatTemplate::new(
        "{% if messages|length > 1 %}{{ raise_exception('only one message, got ' ~ messages|length) }}{% endif %}ok",
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        t.render(&[Message::new("user", "a")], false, None).unwrap(),
        "ok"
    );
    let two = [Message::new("user", "a"), Message::new("user", "b")];
    match t.render(&two, false, None) {
        Err(ChatError::Template(msg)) => assert_eq!(msg, "only one message, got 2"),
        other => panic!("expected ChatError::Template, got {other:?}"),
    }
    // The real case: Mixtral refusing two user turns in a row.
    let mixtral = ChatTemplate::new(
        &fixture_template("mixtral-8x7b-instruct-v0.1"),
        "<s>",
        "</s>",
    )
    .unwrap();
    let err = mixtral.render(&two, true, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "chat template refused the conversation: After the optional system message, \
         conversation roles must alternate user/assistant/user/assistant/..."
    );
}

#[test]
fn syntax_error_is_reported_at_new_with_its_line() {
    let source = "{% for m in messages %}\n{{ m.content }}\n{% if m.role == %}\n{% endfor %}";
    match ChatTemplate::new(source, "", "") {
        Err(ChatError::Compile { line, message }) => {
            assert_eq!(line, Some(3), "{message}");
            assert!(message.contains("syntax error"), "{message}");
        }
        other => panic!("expected ChatError::Compile, got {other:?}"),
    }
    let err = ChatTemplate::new("{% if x %}never closed", "", "").unwrap_err();
    assert!(matches!(err, ChatError::Compile { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("chat template does not compile: "),
        "{err}"
    );
}

#[test]
fn render_failure_other_than_raise_is_a_render_error() {
    // `"text" + none`: jinja2 raises TypeError, we an error too.
    let t = ChatTemplate::new(
        "{% for m in messages %}\n{{ 'x' + m.content }}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let err = t
        .render(
            &[json!({"role": "assistant", "content": null})],
            false,
            None,
        )
        .unwrap_err();
    assert!(
        matches!(err, ChatError::Render { line: Some(2), .. }),
        "{err:?}"
    );
}

#[test]
fn fallback_selection_by_architecture_and_vocabulary() {
    let no_tokens = |_: &str| false;
    let llama3_vocab = |t: &str| t == "<|start_header_id|>";
    assert_eq!(fallback_template("gemma3", no_tokens).1, "gemma3");
    assert_eq!(fallback_template("gemma2", no_tokens).1, "gemma3");
    assert_eq!(fallback_template("llama", llama3_vocab).1, "llama3");
    // `llama` without Llama 3's header token: Llama 2, SmolLM, Mistral...
    assert_eq!(fallback_template("llama", no_tokens).1, "chatml");
    assert_eq!(fallback_template("qwen2", llama3_vocab).1, "chatml");
    assert_eq!(
        fallback_template("no-such-arch", no_tokens),
        (CHATML, "chatml")
    );
}

#[test]
fn gemma_fallback_is_the_official_template_and_folds_the_system_message() {
    assert_eq!(GEMMA3, fixture_template("gemma-3-it"));
    let (source, _) = fallback_template("gemma3", |_| false);
    let t = ChatTemplate::new(source, "<bos>", "<eos>").unwrap();
    let msgs = [
        Message::new("system", "Be kind."),
        Message::new("user", "Hello"),
        Message::new("assistant", "Hi!"),
        Message::new("user", "Bye"),
    ];
    assert_eq!(
        t.render(&msgs, true, None).unwrap(),
        "<bos><start_of_turn>user\nBe kind.\n\nHello<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
}

#[test]
fn gemma3_gguf_has_no_template_and_gets_the_gemma_format() {
    let path = glint_testkit::test_model("gemma-3-270m-q4_k_m.gguf");
    let gguf = GgufFile::open(&path).unwrap();
    assert_eq!(gguf.get_str("tokenizer.chat_template").unwrap(), None);
    let arch = gguf.get_str("general.architecture").unwrap().unwrap();
    assert_eq!(fallback_template(arch, |_| false).1, "gemma3");
}

#[test]
fn llama3_and_chatml_fallbacks_render_their_formats() {
    let msgs = [Message::new("system", " Sys "), Message::new("user", "Q")];
    let (llama, _) = fallback_template("llama", |t| t == "<|start_header_id|>");
    let t = ChatTemplate::new(llama, "<|begin_of_text|>", "<|eot_id|>").unwrap();
    assert_eq!(
        t.render(&msgs, true, None).unwrap(),
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let t = ChatTemplate::new(CHATML, "", "<|im_end|>").unwrap();
    assert_eq!(
        t.render(&msgs, false, None).unwrap(),
        "<|im_start|>system\n Sys <|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    );
}

#[test]
fn strftime_now_uses_the_fixed_time_or_the_clock() {
    let src = "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}";
    let t = ChatTemplate::new(src, "", "")
        .unwrap()
        .with_fixed_now(date(2024, 7, 6));
    assert_eq!(
        t.render::<Message>(&[], false, None).unwrap(),
        "06 Jul 2024|2024-07-06 09:05"
    );

    // Without a fixed time: today's local date, in the format asked for.
    let t = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", "", "").unwrap();
    let before = jiff::Zoned::now().date();
    let got = t.render::<Message>(&[], false, None).unwrap();
    let after = jiff::Zoned::now().date();
    assert!(
        got == before.to_string() || got == after.to_string(),
        "{got}"
    );

    // Llama 3.2 prints it into the system header.
    let t = ChatTemplate::new(
        &fixture_template("llama-3.2-instruct"),
        "<|begin_of_text|>",
        "<|eot_id|>",
    )
    .unwrap()
    .with_fixed_now(date(2031, 12, 1));
    let got = t
        .render(&[Message::new("user", "hi")], false, None)
        .unwrap();
    assert!(got.contains("\nToday Date: 01 Dec 2031\n"), "{got}");

    // A format it cannot do is an error, not a panic.
    let t = ChatTemplate::new("{{ strftime_now('%Q') }}", "", "").unwrap();
    let err = t.render::<Message>(&[], false, None).unwrap_err();
    assert!(matches!(err, ChatError::Render { .. }), "{err:?}");
    assert!(err.to_string().contains("strftime_now(\"%Q\")"), "{err}");
}

#[test]
fn tojson_is_pythons_json_dumps() {
    let t = ChatTemplate::new(
        "{{ tools | tojson }}\n{{ tools[0] | tojson(indent=2) }}\n{{ tools[0] | tojson(separators=(',', ':'), sort_keys=true) }}\n{{ tools[0].u | tojson(ensure_ascii=true) }}",
        "",
        "",
    )
    .unwrap();
    let tools = json!([{"z": "<&'>", "a": [1, 2.0, 1e-7, null, true], "u": "é😀", "e": {}}]);
    let got = t.render::<Message>(&[], false, Some(&tools)).unwrap();
    assert_eq!(
        got,
        "[{\"z\": \"<&'>\", \"a\": [1, 2.0, 1e-07, null, true], \"u\": \"é😀\", \"e\": {}}]\n\
         {\n  \"z\": \"<&'>\",\n  \"a\": [\n    1,\n    2.0,\n    1e-07,\n    null,\n    true\n  ],\n  \"u\": \"é😀\",\n  \"e\": {}\n}\n\
         {\"a\":[1,2.0,1e-07,null,true],\"e\":{},\"u\":\"é😀\",\"z\":\"<&'>\"}\n\
         \"\\u00e9\\ud83d\\ude00\""
    );
}

#[test]
fn python_string_methods_and_loop_controls_work() {
    let t = ChatTemplate::new(
        "{% for m in messages %}{% if m.content.startswith('skip') %}{% continue %}{% endif %}\
         {{ m.content.strip().split(' ')|join('+') }}{% for k, v in m.items() %}{% if k == 'role' %}:{{ v.upper() }}{% endif %}{% endfor %};\
         {% endfor %}",
        "",
        "",
    )
    .unwrap();
    let msgs = [
        Message::new("user", " a b "),
        Message::new("user", "skip me"),
        Message::new("assistant", "c"),
    ];
    assert_eq!(
        t.render(&msgs, false, None).unwrap(),
        "a+b:USER;c:ASSISTANT;"
    );
}

#[test]
fn a_runaway_template_runs_out_of_fuel_instead_of_hanging() {
    let t = ChatTemplate::new(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let err = t.render::<Message>(&[], false, None).unwrap_err();
    assert!(matches!(err, ChatError::Render { .. }), "{err:?}");
}
