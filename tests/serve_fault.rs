//! `glint serve` under 1,000 malformed requests (seeded, so a failure
//! reproduces): every one must get a 4xx — never a 5xx, never a hang — with
//! OpenAI's error body, and afterwards `/health` says 200 and a valid
//! request still completes.
//!
//! Each case starts from a valid body and breaks it in one way that makes
//! it invalid by construction (truncated JSON, a wrong type, a number out
//! of range, nesting past the parser's limit, invalid UTF-8, a wrong route
//! or method, ...), so a 200 is as much a failure as a 500. Most go over
//! one keep-alive connection, the way clients talk to a server.

mod serve_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use glint_testkit::Rng;
use serde_json::{json, Value};
use serve_common::*;

/// Longest any one answer may take: every case is refused before the
/// model computes anything, at worst after tokenizing a body under the
/// limit.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);
/// The server's body limit in this test (`--max-body`).
const MAX_BODY: usize = 256 << 10;
const N_CASES: usize = 1000;
/// The whole run: about 3 s on 2 busy cores (one keep-alive connection,
/// no model compute); ten times that is a server gone slow.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// One malformed request.
struct Case {
    what: String,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
}

/// A keep-alive HTTP/1.1 connection that reads exactly one response per
/// request (Content-Length or chunked).
struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(ANSWER_LIMIT)).unwrap();
        s.set_write_timeout(Some(ANSWER_LIMIT)).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s),
        }
    }

    /// Send `c`; the status, whether the server keeps the connection, and
    /// the body.
    fn send(&mut self, c: &Case) -> Result<(u16, bool, Vec<u8>), String> {
        let mut req = format!(
            "{} {} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n",
            c.method,
            c.path,
            c.body.len()
        );
        if !c.content_type.is_empty() {
            req.push_str(&format!("Content-Type: {}\r\n", c.content_type));
        }
        req.push_str("\r\n");
        // One write: head and body in two would meet Nagle's algorithm and
        // the server's delayed ACK (40 ms a request).
        let mut msg = req.into_bytes();
        msg.extend_from_slice(&c.body);
        self.r
            .get_mut()
            .write_all(&msg)
            .map_err(|e| format!("sending: {e}"))?;
        let mut status = 0;
        let mut length = None;
        let mut chunked = false;
        let mut keep = true;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .r
                .read_line(&mut line)
                .map_err(|e| format!("reading the head: {e}"))?;
            if n == 0 {
                return Err("the connection closed without an answer".into());
            }
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if status == 0 {
                status = l
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
            } else if let Some(v) = l.strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            } else if l == "transfer-encoding: chunked" {
                chunked = true;
            } else if l == "connection: close" {
                keep = false;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.r.read_line(&mut line).map_err(|e| e.to_string())?;
                let n = usize::from_str_radix(line.trim(), 16).map_err(|e| e.to_string())?;
                let mut chunk = vec![0; n + 2];
                self.r.read_exact(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            let n = length.ok_or("an answer without a length")?;
            body.resize(n, 0);
            self.r
                .read_exact(&mut body)
                .map_err(|e| format!("reading the body: {e}"))?;
        }
        Ok((status, keep, body))
    }
}

fn valid_chat() -> Value {
    json!({
        "model": "glint",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say something about ünïcödé and 日本."},
        ],
        "max_tokens": 4,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 7,
        "stream": false,
    })
}

fn valid_completion() -> Value {
    json!({"model": "glint", "prompt": "The capital of France is", "max_tokens": 4,
        "temperature": 0})
}

/// `(field, value)` pairs each request.rs must refuse: wrong types, values
/// out of range, numbers no integer or float holds.
fn bad_fields(chat: bool) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("max_tokens", r#""5""#),
        ("max_tokens", "[]"),
        ("max_tokens", "true"),
        ("max_tokens", "1.5"),
        ("max_tokens", "0"),
        ("max_tokens", "-1"),
        ("max_tokens", "-9223372036854775809"),
        ("max_tokens", "18446744073709551616"),
        ("max_tokens", "1e400"),
        ("max_tokens", "4294967296"),
        ("max_completion_tokens", "-5"),
        ("n_predict", r#"{}"#),
        ("n", "65"),
        ("n", "0"),
        ("n", "-1"),
        ("n", "18446744073709551616"),
        ("n", "1e400"),
        ("n", r#""1""#),
        ("temperature", r#""hot""#),
        ("temperature", "-1"),
        ("temperature", "1e400"),
        ("temperature", "-1e400"),
        ("temperature", "1e39"),
        ("temperature", "18446744073709551616e300"),
        ("top_p", "0"),
        ("top_p", "-0.5"),
        ("top_p", "1.5"),
        ("min_p", "2"),
        ("typical_p", "0"),
        ("top_k", "-1"),
        ("top_k", "18446744073709551616"),
        ("repeat_penalty", "0"),
        ("repeat_penalty", "-1"),
        ("repeat_last_n", "-2"),
        ("presence_penalty", "1e400"),
        ("frequency_penalty", "[1]"),
        ("dynatemp_range", "-1"),
        ("seed", r#""x""#),
        ("seed", "1.5"),
        ("seed", "-2"),
        ("seed", "18446744073709551616"),
        ("seed", "1e400"),
        ("seed", "4294967296"),
        ("stop", "5"),
        ("stop", "[1]"),
        ("stop", r#"[""]"#),
        ("stop", r#""""#),
        ("stop", r#"{"a": 1}"#),
        ("stream", "1"),
        ("stream", r#""yes""#),
        ("stream_options", "5"),
        ("stream_options", r#"{"include_usage": "x"}"#),
        ("logit_bias", r#""x""#),
        // (a text key, {"abc": 1}, is llama-server's bias by text: valid)
        ("logit_bias", r#"{"abc": true}"#),
        ("logit_bias", r#"{"1": "x"}"#),
        ("logit_bias", r#"{"-1": 1}"#),
        ("logit_bias", r#"{"1": 1e400}"#),
        ("logit_bias", r#"{"99999999": 1}"#),
        ("logit_bias", r#"{"4294967296": 1}"#),
        ("logit_bias", r#"[[1]]"#),
        ("logit_bias", r#"[[99999999, -1]]"#),
        ("ignore_eos", "0"),
        ("model", "5"),
        ("echo", "true"),
    ];
    if chat {
        v.extend([
            ("messages", r#""hi""#),
            ("messages", "[]"),
            ("messages", "{}"),
            ("messages", "[1]"),
            ("messages", r#"[{"content": "x"}]"#),
            ("messages", r#"[{"role": 5, "content": "x"}]"#),
            ("messages", r#"[{"role": "user", "content": 5}]"#),
            (
                "messages",
                r#"[{"role": "user", "content": [{"type": "image_url"}]}]"#,
            ),
            ("messages", r#"[{"role": "user", "content": [5]}]"#),
            ("logprobs", "5"),
            ("top_logprobs", "2"),
            ("top_logprobs", "-1"),
        ]);
    } else {
        v.extend([
            ("prompt", "5"),
            ("prompt", "{}"),
            ("prompt", "[]"),
            ("prompt", "[-1]"),
            ("prompt", "[1.5]"),
            ("prompt", "[99999999]"),
            ("prompt", "[4294967296]"),
            ("prompt", r#"["a", "b"]"#),
            ("prompt", "null"),
            ("logprobs", "6"),
            ("logprobs", "-1"),
            ("logprobs", "true"),
        ]);
    }
    v
}

/// `body` with `field` set to the raw JSON `value` (spliced as text, so
/// numbers serde_json would not hold go through untouched).
fn with_field(body: &Value, field: &str, value: &str) -> Vec<u8> {
    let mut b = body.clone();
    b[field] = json!("@@HOLE@@");
    b.to_string().replace("\"@@HOLE@@\"", value).into_bytes()
}

/// Case `i`: an endpoint, a valid body, and one way to break it.
fn case(rng: &mut Rng, i: usize) -> Case {
    let chat = rng.chance(60);
    let (path, valid) = if chat {
        ("/v1/chat/completions", valid_chat())
    } else {
        ("/v1/completions", valid_completion())
    };
    let mut c = Case {
        what: String::new(),
        method: "POST",
        path: path.to_string(),
        content_type: "application/json",
        body: Vec::new(),
    };
    let json = valid.to_string().into_bytes();
    match rng.below(11) {
        0 => {
            // Truncated: an object without its closing brace never parses.
            let at = rng.below(json.len() - 1);
            c.body = json[..at].to_vec();
            c.what = format!("truncated at {at}");
        }
        1..=3 => {
            let bad = bad_fields(chat);
            let (f, v) = bad[rng.below(bad.len())];
            c.body = with_field(&valid, f, v);
            c.what = format!("{f}: {v}");
        }
        4 => {
            // Nesting past serde_json's recursion limit (128), in a field
            // nothing reads.
            let depth = 129 + rng.below(20_000);
            let open = if rng.chance(50) { "[" } else { "{\"a\":" };
            let close = if open == "[" { "]" } else { "}" };
            let deep = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            c.body = with_field(&valid, "deep", &deep);
            c.what = format!("nesting {depth} deep");
        }
        5 => {
            // Invalid UTF-8: inside a string, or between tokens.
            let bad = [0xff, 0xfe, 0xc0, 0x80, 0xed][rng.below(5)];
            let mut b = json.clone();
            if rng.chance(50) {
                let at = b.windows(7).position(|w| w == b"\"model\"").unwrap() + 10;
                b.insert(at, bad);
                c.what = format!("byte {bad:#x} in a string");
            } else {
                let at = b.iter().position(|&x| x == b',').unwrap() + 1;
                b.insert(at, bad);
                c.what = format!("byte {bad:#x} between tokens");
            }
            c.body = b;
        }
        6 => {
            // A wrong content type on a body that is broken anyway
            // (glint, as llama-server, reads the body whatever the type).
            c.content_type = [
                "text/plain",
                "application/x-www-form-urlencoded",
                "",
                "multipart/form-data; boundary=x",
            ][rng.below(4)];
            c.body = match rng.below(3) {
                0 => b"messages=hi&max_tokens=5".to_vec(),
                1 => Vec::new(),
                _ => json[..json.len() / 2].to_vec(),
            };
            c.what = format!("content type {:?}", c.content_type);
        }
        7 => {
            c.body = [
                &b""[..],
                b" ",
                b"\n",
                b"null",
                b"[]",
                b"42",
                b"\"s\"",
                b"{}",
            ][rng.below(8)]
            .to_vec();
            c.what = format!("body {:?}", String::from_utf8_lossy(&c.body));
        }
        8 => {
            // A giant string under the body limit, beside a broken field
            // (checked before anything is tokenized), or as the whole
            // prompt: longer than the context, so refused after
            // tokenizing.
            let n = MAX_BODY / 2 + rng.below(MAX_BODY / 3);
            if rng.chance(50) {
                let field = ["model", "stop", "junk"][rng.below(3)];
                let mut b = valid.clone();
                b[field] = json!("y".repeat(n));
                b["max_tokens"] = json!(-1);
                c.body = b.to_string().into_bytes();
                c.what = format!("{n}-byte {field} and max_tokens -1");
            } else {
                let text = "lorem ipsum dolor ".repeat(n / 18);
                let mut b = valid.clone();
                if chat {
                    b["messages"][1]["content"] = json!(text);
                } else {
                    b["prompt"] = json!(text);
                }
                c.body = b.to_string().into_bytes();
                c.what = format!("{n}-byte prompt");
            }
        }
        9 => {
            // Routes and methods that do not exist.
            let (m, p) = [
                ("GET", "/v1/chat/completions"),
                ("PUT", "/v1/completions"),
                ("DELETE", "/v1/models"),
                ("POST", "/v1/models"),
                ("POST", "/health"),
                ("PATCH", "/health"),
                ("POST", "/v2/chat/completions"),
                ("GET", "/v1/chat/completions/x"),
                ("GET", "/v1/embeddings"),
                ("GET", "/%ff%fe"),
                ("POST", "/v1//completions"),
                ("GET", "/metrics/../v1/models"),
                ("BREW", "/v1/completions"),
            ][rng.below(13)];
            c.method = m;
            c.path = format!("{p}{}", if rng.chance(30) { "?x=1" } else { "" });
            c.body = json.clone();
            c.what = format!("{m} {}", c.path);
        }
        _ => {
            // Two breaks at once: a bad field in a truncated body.
            let bad = bad_fields(chat);
            let (f, v) = bad[rng.below(bad.len())];
            let b = with_field(&valid, f, v);
            let at = b.len() - 1 - rng.below(b.len() / 2);
            c.body = b[..at].to_vec();
            c.what = format!("{f}: {v}, truncated at {at}");
        }
    }
    c.what = format!("case {i}: {}", c.what);
    c
}

#[test]
fn a_thousand_malformed_requests_get_4xx_and_the_server_stays_up() {
    let _t = turn();
    let s = Server::start(&["-np", "2", "-c", "512", "--max-body", &MAX_BODY.to_string()]);
    let mut rng = Rng::new(0x5eed_fa17);
    let t0 = Instant::now();
    let mut conn = Conn::open(&s.addr);
    let mut n_reconnect = 0;
    for i in 0..N_CASES {
        let c = case(&mut rng, i);
        let asked = Instant::now();
        let (status, keep, body) = conn.send(&c).unwrap_or_else(|e| panic!("{}: {e}", c.what));
        assert!(
            asked.elapsed() < ANSWER_LIMIT,
            "{}: {:?}",
            c.what,
            asked.elapsed()
        );
        let text = String::from_utf8_lossy(&body);
        assert!(
            (400..500).contains(&status),
            "{}: {status} {}",
            c.what,
            &text[..text.len().min(300)]
        );
        let v: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{}: {status} {e}: {text}", c.what));
        let e = &v["error"];
        assert_eq!(e["code"], status, "{}: {v}", c.what);
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()) && e["type"].is_string(),
            "{}: {v}",
            c.what
        );
        if !keep {
            conn = Conn::open(&s.addr);
            n_reconnect += 1;
        }
    }
    // Bodies over the limit, each on a connection of its own (the server
    // may answer before reading them, then close).
    for n in [MAX_BODY + 1, 4 * MAX_BODY] {
        let mut b = valid_completion();
        b["prompt"] = json!("z".repeat(n));
        let (status, body) = http(
            &s.addr,
            "POST",
            "/v1/completions",
            b.to_string().as_bytes(),
            &[],
        );
        assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
    }
    // A broken request line or header: hyper answers 400 itself.
    for raw in [
        &b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nBad Header\r\n\r\n",
        b"\x00\x01\x02\r\n\r\n",
    ] {
        let mut t = TcpStream::connect(&s.addr).unwrap();
        t.set_read_timeout(Some(ANSWER_LIMIT)).unwrap();
        t.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out);
        let status: u16 = String::from_utf8_lossy(&out)
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        assert!(
            (400..500).contains(&status),
            "{:?}: {}",
            String::from_utf8_lossy(raw),
            String::from_utf8_lossy(&out)
        );
    }
    let took = t0.elapsed();
    assert_eq!(s.get("/health").0, 200);
    let mut ok = chat_body("Hi", 4);
    ok["ignore_eos"] = json!(true);
    let (status, v) = s.post("/v1/chat/completions", &ok);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    // Keep-alive held for nearly all of them; the whole run is quick.
    assert!(n_reconnect < N_CASES / 10, "{n_reconnect} reconnects");
    assert!(took < RUN_LIMIT, "{took:?}");
}
