//! The `glint serve` end-to-end tests' helpers: a real server on a loopback
//! port with SmolLM2, spoken to over plain HTTP/1.1 (a small client on
//! `TcpStream`, so a test can also send broken bodies and hang up
//! mid-stream).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub static TURN: Mutex<()> = Mutex::new(());

pub fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A `glint serve` child on an ephemeral port; killed on drop.
pub struct Server {
    child: Child,
    pub addr: String,
}

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let model = glint_cli::models::test_model("smollm2").unwrap_or_else(|e| panic!("{e}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
            .args(["serve", "-m", model.to_str().unwrap(), "--port", "0"])
            .args(["--backend", "cpu", "-t", "2"])
            .args(args)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("glint serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("glint serve prints its address")
                .unwrap();
            if let Some(a) = line.split("listening on http://").nth(1) {
                break a.trim().to_string();
            }
        };
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let s = Server { child, addr };
        let t0 = Instant::now();
        while s.get("/health").0 != 200 {
            assert!(t0.elapsed() < Duration::from_secs(60), "never healthy");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    /// Poll `/health` until `slots_processing` is `n`; fail after `limit`.
    pub fn wait_processing(&self, n: u64, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let (status, h) = self.get("/health");
            assert_eq!(status, 200);
            let h: Value = serde_json::from_slice(&h).unwrap();
            if h["slots_processing"] == n {
                return;
            }
            assert!(t0.elapsed() < limit, "not {n} busy after {limit:?}: {h}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn get(&self, path: &str) -> (u16, Vec<u8>) {
        http(&self.addr, "GET", path, b"", &[])
    }

    /// POST JSON; the status and the body as JSON.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, b) = http(&self.addr, "POST", path, body.to_string().as_bytes(), &[]);
        let v = serde_json::from_slice(&b)
            .unwrap_or_else(|e| panic!("{status} {e}: {}", String::from_utf8_lossy(&b)));
        (status, v)
    }

    /// POST with `"stream": true`; the `data:` payloads in order.
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let (status, b) = http(&self.addr, "POST", path, body.to_string().as_bytes(), &[]);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&b));
        String::from_utf8(b)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a fresh connection: status and (de-chunked) body.
pub fn http(addr: &str, method: &str, path: &str, body: &[u8], headers: &[&str]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

/// A connection that has sent `POST /v1/completions` with `body` and not
/// read the answer (dropping it hangs up).
pub fn post_completion(addr: &str, body: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    c
}

pub fn parse_response(raw: &[u8]) -> (u16, Vec<u8>) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = &raw[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        (status, dechunk(body))
    } else {
        (status, body.to_vec())
    }
}

pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

pub fn chat_body(user: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [{"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

pub fn chat_text(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The text of a stream's chunks (chat deltas or completion texts).
pub fn stream_text(data: &[String]) -> String {
    data.iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|v| {
            let c = &v["choices"][0];
            c["delta"]["content"]
                .as_str()
                .or(c["text"].as_str())
                .map(str::to_string)
        })
        .collect()
}

/// Two greedy runs of one prompt whose batches differed (alone vs beside
/// other slots, cold vs from a cached prefix) are not bit-identical on the
/// cpu backend: where another slot's cells sit between a slot's own in a
/// unified cache, attention sums its rows in other groups, and the 8-bit
/// quantization of activations turns those last bits into visible logit
/// changes (one such run moved the same tokens' logprobs by up to 0.13 over
/// 57 steps; llama.cpp's own configurations differ by up to 1.4 in logits).
/// A greedy step may flip only where its two best tokens lie this close (in
/// log-probability, in both runs).
pub const NEAR_TIE: f64 = 0.5;

/// One generated token: its text, its logprob, the top alternatives.
pub type Step = (String, f64, Vec<(String, f64)>);

/// One response's steps, from a chat
/// (`logprobs.content`) or a completion (`tokens`, `token_logprobs`,
/// `top_logprobs`) asked with logprobs and at least 2 top logprobs.
pub fn steps(v: &Value) -> Vec<Step> {
    let lp = &v["choices"][0]["logprobs"];
    if let Some(content) = lp["content"].as_array() {
        return content
            .iter()
            .map(|s| {
                let top = s["top_logprobs"].as_array().unwrap();
                let top = top
                    .iter()
                    .map(|t| {
                        (
                            t["token"].as_str().unwrap().to_string(),
                            t["logprob"].as_f64().unwrap(),
                        )
                    })
                    .collect();
                (
                    s["token"].as_str().unwrap().to_string(),
                    s["logprob"].as_f64().unwrap(),
                    top,
                )
            })
            .collect();
    }
    let tokens = lp["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no logprobs: {v}"));
    tokens
        .iter()
        .zip(lp["token_logprobs"].as_array().unwrap())
        .zip(lp["top_logprobs"].as_array().unwrap())
        .map(|((t, l), top)| {
            let top = top
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, x)| (k.clone(), x.as_f64().unwrap()))
                .collect();
            (t.as_str().unwrap().to_string(), l.as_f64().unwrap(), top)
        })
        .collect()
}

/// How many leading tokens two greedy runs share, after asserting that they
/// part (if they do) only at a near-tie: each run's token is within
/// `NEAR_TIE` of the other's in both runs' top logprobs.
pub fn agree_up_to_near_tie(a: &Value, b: &Value, what: &str) -> usize {
    let (sa, sb) = (steps(a), steps(b));
    let same = sa.iter().zip(&sb).take_while(|(x, y)| x.0 == y.0).count();
    if same < sa.len().min(sb.len()) {
        let (x, y) = (&sa[same], &sb[same]);
        for (run, mine, other) in [("first", x, &y.0), ("second", y, &x.0)] {
            let alt = mine.2.iter().find(|(t, _)| t == other).map(|p| p.1);
            let gap = alt.map(|l| mine.1 - l);
            assert!(
                gap.is_some_and(|g| g.abs() <= NEAR_TIE),
                "{what}: the runs part at token {same} ({:?} vs {:?}), no near-tie in the {run} run: \
                 its token {:.4}, the other's {alt:?}",
                x.0,
                y.0,
                mine.1,
            );
        }
    }
    same
}

/// One raw request (`head` without the final blank line; no body) on a
/// fresh connection: the response's head, as sent (header case kept).
pub fn raw_head(addr: &str, head: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "{head}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.split("\r\n\r\n").next().unwrap_or("").to_string()
}
