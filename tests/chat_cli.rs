//! `generate --logprobs`, `generate --chat` and `glint chat`, run as a user
//! runs them; `glint chat` through a real pseudo-terminal (util-linux
//! `script`).

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use glint::chat::{message, Chat};
use glint::gguf::GgufFile;
use glint::Tokenizer;

/// SmolLM2's greedy next token after "The capital of France is" (llama.cpp's
/// reference run, `fixtures/reference/gen_smollm2`): " Paris".
const PARIS: u64 = 7042;

#[test]
fn logprobs_lines_are_json_from_the_raw_distribution() {
    let (stdout, _) = common::greedy_cpu(
        "smollm2",
        &[
            "-p",
            "The capital of France is",
            "-n",
            "4",
            "--logprobs",
            "5",
        ],
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for v in &lines {
        let top = v["top"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{v}");
        let lp: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(lp.iter().all(|&x| x <= 0.0), "{v}");
        assert!(lp.windows(2).all(|w| w[0] >= w[1]), "not sorted: {v}");
        let mass: f64 = lp.iter().map(|x| x.exp()).sum();
        assert!(mass <= 1.0 + 1e-6, "{mass}: {v}");
        // Greedy: the chosen token is the most likely one.
        assert_eq!(v["token"], top[0]["token"], "{v}");
        assert_eq!(v["logprob"], top[0]["logprob"], "{v}");
        assert!(v["text"].is_string() && top[0]["text"] == v["text"], "{v}");
    }
    assert_eq!(lines[0]["token"].as_u64(), Some(PARIS), "{}", lines[0]);
    assert_eq!(lines[0]["text"], " Paris");
}

#[test]
fn logprobs_out_of_range_is_a_one_line_error() {
    for n in ["21", "-3", "many"] {
        let out = common::generate("smollm2", &["-p", "x", "--logprobs", n]);
        let line = common::one_line_error(&out, n);
        assert!(line.contains("--logprobs") && line.contains("20"), "{line}");
    }
}

#[test]
fn chat_smollm2_renders_chatml_with_its_default_system_and_stops_at_im_end() {
    let (stdout, err) = common::greedy_cpu(
        "smollm2",
        &[
            "--chat",
            "-p",
            "Hi",
            "--verbose-prompt",
            "--verbose",
            "-n",
            "64",
        ],
    );
    assert!(err.contains("chat template: the model's"), "{err}");
    assert!(
        err.contains(
            "glint: chat prompt:\n<|im_start|>system\nYou are a helpful AI assistant named SmolLM, \
             trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        ),
        "{err}"
    );
    // Control tokens parsed, not spelled out in pieces: `<|im_start|>` is id 1.
    assert!(err.contains("     1 -> \"<|im_start|>\""), "{err}");
    assert!(err.contains("end of generation"), "{err}");
    let reply = stdout;
    assert!(
        !reply.trim().is_empty() && !reply.contains("<|im_end|>"),
        "{reply}"
    );
}

#[test]
fn chat_gemma3_uses_the_fallback_template_with_exactly_one_bos() {
    let (_, err) = common::greedy_cpu(
        "gemma3",
        &[
            "--chat",
            "--system",
            "Be brief.",
            "-p",
            "Hi",
            "--verbose-prompt",
            "--verbose",
            "-n",
            "8",
            // gemma-3-270m is the base model, which rarely ends a turn by
            // itself: push it to, to see that `<end_of_turn>` stops generation.
            "--logit-bias",
            "106+100",
        ],
    );
    assert!(err.contains("chat template: built-in `gemma3`"), "{err}");
    // The template writes `<bos>` itself; the tokenizer adds it too.
    assert!(
        err.contains(
            "glint: chat prompt:\n<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        ),
        "{err}"
    );
    let ids: Vec<&str> = err.lines().filter(|l| l.contains(" -> ")).collect();
    assert!(ids[0].ends_with("-> \"<bos>\""), "{err}");
    assert_eq!(
        ids.iter().filter(|l| l.ends_with("\"<bos>\"")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("generation 1 tokens") && err.contains("end of generation"),
        "{err}"
    );
    let gguf = GgufFile::open(common::model("gemma3")).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    assert_eq!(tok.token_text(106), Some("<end_of_turn>"));
    assert!(tok.is_eog(106));
}

/// Lines like `glint: turn 3: 14 new prompt tokens (cached 212), 41
/// generated, 35.2 tokens/s` as (turn, new, cached, generated).
fn turn_lines(err: &str) -> Vec<(usize, usize, usize, usize)> {
    err.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("glint: turn ")?;
            let num = |s: &str| s.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok();
            let w: Vec<&str> = rest.split_whitespace().collect();
            Some((num(w[0])?, num(w[1])?, num(w[6])?, num(w[7])?))
        })
        .collect()
}

/// `glint chat` under `script`, so its stdin and stdout are a terminal:
/// send a line once the previous reply is done (its turn line is in the
/// stderr file and `> ` is back), return what the terminal showed for it.
struct PtyChat {
    child: std::process::Child,
    screen: Arc<Mutex<String>>,
    seen: usize,
    err_path: std::path::PathBuf,
}

impl PtyChat {
    fn start(args: &[&str], name: &str) -> PtyChat {
        let err_path =
            std::env::temp_dir().join(format!("glint-chat-{name}-{}.err", std::process::id()));
        let mut cmd = format!("exec '{}' chat", env!("CARGO_BIN_EXE_glint"));
        for a in args {
            cmd.push_str(&format!(" '{a}'"));
        }
        cmd.push_str(&format!(" 2>'{}'", err_path.display()));
        let mut child = Command::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("util-linux `script` runs");
        let mut stdout = child.stdout.take().unwrap();
        let screen = Arc::new(Mutex::new(String::new()));
        let s = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut c = PtyChat {
            child,
            screen,
            seen: 0,
            err_path,
        };
        c.wait_for(|screen, _| screen.ends_with("> "));
        c
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err_path).unwrap_or_default()
    }

    fn wait_for(&mut self, done: impl Fn(&str, &str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let screen = self.screen.lock().unwrap().clone();
            let err = self.stderr();
            if done(&screen, &err) {
                let new = screen[self.seen..].to_string();
                self.seen = screen.len();
                return new;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "glint chat stalled.\nscreen: {screen:?}\nstderr: {err}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Send a user line, wait for turn `n`'s report, return the reply text.
    fn turn(&mut self, line: &str, n: usize) -> String {
        let before = turn_lines(&self.stderr()).len();
        self.send(line);
        let shown = self.wait_for(|screen, err| {
            let turns = turn_lines(err);
            screen.ends_with("> ") && turns.len() > before && turns[turns.len() - 1].0 == n
        });
        // The terminal echoes the line, then the reply, a newline, `> `; it
        // writes every "\n" as "\r\n".
        let shown = shown.replace("\r\n", "\n");
        let reply = shown
            .strip_prefix(&format!("{line}\n"))
            .and_then(|s| s.strip_suffix("\n> "))
            .unwrap_or_else(|| panic!("unexpected screen for `{line}`: {shown:?}"));
        reply.to_string()
    }
}

#[test]
fn chat_in_a_terminal_decodes_only_each_turns_new_tokens() {
    let m = common::model("smollm2");
    let args = [
        "-m",
        m.to_str().unwrap(),
        "--temp",
        "0",
        "-n",
        "16",
        "--backend",
        "cpu",
    ];
    let mut chat = PtyChat::start(&args, "turns");
    let users = [
        "Hi! What is the capital of France?",
        "And of Italy?",
        "Name a famous dish from there.",
    ];
    let mut replies = Vec::new();
    for (i, u) in users.iter().enumerate() {
        let r = chat.turn(u, i + 1);
        assert!(!r.trim().is_empty(), "turn {}: empty reply", i + 1);
        replies.push(r);
    }
    chat.send("/reset");
    // Both the notice and the terminal's echo of `/reset` and the new
    // prompt: the next turn's screen must start at its own line.
    let seen = chat.seen;
    chat.wait_for(|screen, err| {
        err.contains("conversation cleared")
            && screen[seen..].contains("/reset")
            && screen.ends_with("> ")
    });
    chat.turn("Hello again", 1);
    chat.send("/exit");
    let status = chat.child.wait().unwrap();
    let err = chat.stderr();
    let _ = std::fs::remove_file(&chat.err_path);
    assert!(status.success(), "{err}");

    // What each turn's prompt is, computed here from the template and the
    // replies as shown, independently of the cache bookkeeping in glint.
    let gguf = GgufFile::open(&m).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let tmpl = Chat::new(&gguf, &tok).unwrap();
    let prompt_len = |turns: usize| {
        let mut msgs = Vec::new();
        for t in 0..turns {
            msgs.push(message("user", users[t]));
            if t + 1 < turns {
                msgs.push(message("assistant", &replies[t]));
            }
        }
        tmpl.prompt(&tok, &msgs, true).unwrap().1.len()
    };

    let turns = turn_lines(&err);
    assert_eq!(turns.len(), 4, "{err}");
    // Turn 1: nothing cached yet.
    assert_eq!(
        (turns[0].0, turns[0].1, turns[0].2),
        (1, prompt_len(1), 0),
        "{err}"
    );
    for (t, &(n, new, cached, generated)) in turns.iter().enumerate().take(3).skip(1) {
        assert_eq!(n, t + 1);
        let total = prompt_len(t + 1);
        assert_eq!(new + cached, total, "turn {n}: {err}");
        // The whole previous prompt was reused; at most the previous reply's
        // tokens (16 generated, the last never decoded) on top of it.
        let previous = prompt_len(t);
        assert!(
            cached >= previous,
            "turn {n}: cached {cached} < {previous}: {err}"
        );
        assert!(cached < previous + 16, "turn {n}: {err}");
        assert!(new < total / 2, "turn {n}: {new} of {total} new: {err}");
        assert!(generated > 0 && generated <= 16, "{err}");
    }
    // After /reset nothing is cached.
    assert_eq!((turns[3].0, turns[3].2), (1, 0), "{err}");
}

#[test]
fn chat_reads_a_pipe_and_system_restarts() {
    let m = common::model("smollm2");
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
        .args([
            "chat",
            "-m",
            m.to_str().unwrap(),
            "--temp",
            "0",
            "-n",
            "8",
            "--backend",
            "cpu",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hi\n/nope\n/system Answer in French.\nHi\nHow are you?\n")
        .unwrap();
    let (stdout, err) = common::success(child.wait_with_output().unwrap());
    assert!(
        !stdout.contains("> "),
        "no prompt when stdin is a pipe: {stdout:?}"
    );
    assert!(!stdout.trim().is_empty(), "{stdout:?}");
    assert!(err.contains("unknown command `/nope`"), "{err}");
    let turns = turn_lines(&err);
    let numbered: Vec<(usize, usize)> = turns.iter().map(|t| (t.0, t.2)).collect();
    assert_eq!(numbered.len(), 3, "{err}");
    // The system message started a new conversation: nothing cached at its
    // first turn, the rest reused at the next.
    assert_eq!(numbered[..2], [(1, 0), (1, 0)], "{err}");
    assert_eq!(numbered[2].0, 2);
    assert!(numbered[2].1 > 0, "{err}");
}
