//! The command line as a hostile user meets it (the Reliability issue):
//! each case runs `glint` in a child process under a 6 GiB address-space
//! limit and asserts the exit status, one clear line naming what and why,
//! and no panic. Classes: panics reachable from outside (non-UTF-8
//! arguments, closed or full stdout), unbounded resources (threads, context
//! and batch sizes, endless files, bench sizes), flags accepted and ignored.

mod common;

use std::os::unix::fs::FileTypeExt;
use std::process::{Command, Output, Stdio};

/// `glint args...` through `sh` with `ulimit -v` (KiB) and `tail` of shell
/// (`| head -c 10`, `> /dev/full`, ...) appended to the command line.
fn sh(args: &[&str], tail: &str) -> Output {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let cmd = format!("ulimit -v 6291456; \"$0\" {} {tail}", quoted.join(" "));
    Command::new("sh")
        .args(["-c", &cmd, env!("CARGO_BIN_EXE_glint")])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn smollm2() -> String {
    common::model("smollm2").to_str().unwrap().to_string()
}

/// Exit 1 and exactly one stderr line containing every `needle`.
fn refused(out: Output, what: &str, needles: &[&str]) {
    let line = common::one_line_error(&out, what);
    for n in needles {
        assert!(line.contains(n), "{what}: `{n}` not in: {line}");
    }
}

#[test]
fn non_utf8_arguments_are_errors_not_panics() {
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"\xff\xfe");
    for args in [
        vec!["generate".as_ref(), "-p".as_ref(), bad],
        vec!["inspect".as_ref(), bad],
        vec![bad],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_glint"))
            .args(&args)
            .output()
            .unwrap();
        refused(out, &format!("{args:?}"), &["not valid UTF-8", "argument"]);
    }
}

#[test]
fn a_closed_stdout_ends_quietly_and_a_full_one_is_one_error() {
    let m = smollm2();
    for (args, what) in [
        (vec!["inspect", &m, "--json"], "inspect --json"),
        (vec!["inspect", &m], "inspect"),
        (vec!["--help"], "--help"),
        (vec!["generate", "--help"], "generate --help"),
        (vec!["bench", "--help"], "bench --help"),
    ] {
        // `head -c 1` closes the pipe after one byte; the shell reports
        // glint's status through PIPESTATUS-free means: run glint alone in
        // a subshell and print its status on stderr.
        let out = sh(&args, "| head -c 1 >/dev/null; echo \"status $?\" >&2");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{what} | head: {err}");
        let out = sh(&args, "> /dev/full");
        refused(out, &format!("{what} > /dev/full"), &["writing the output"]);
    }
    // glint's own status when its reader goes away after 10 bytes: 0, and
    // nothing on stderr.
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(["inspect", &m, "--json", "--full"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // the read end is dropped here: glint's next write meets a closed pipe
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

#[test]
fn sizes_from_outside_are_checked_before_anything_is_allocated() {
    let m = smollm2();
    let gen = |extra: &[&str]| {
        let mut a = vec![
            "generate",
            "-m",
            &m,
            "-p",
            "Hi",
            "-n",
            "1",
            "--backend",
            "cpu",
        ];
        a.extend_from_slice(extra);
        sh(&a, "")
    };
    // A context of 4 Gi cells: refused with the numbers, not an abort.
    let out = gen(&["-c", "4294967295"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs") && err.contains("bytes"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );

    // Threads and batch sizes above what makes sense are clamped, with a
    // notice, and the run goes on.
    let out = gen(&["-t", "100000", "-c", "64", "-b", "100000", "-ub", "100000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("--threads 100000") && err.contains("using"),
        "{err}"
    );
    assert!(
        err.contains("--batch-size 100000 is above -c 64: using 64"),
        "{err}"
    );
    assert!(
        err.contains("--ubatch-size 100000 is above -c 64: using 64"),
        "{err}"
    );
    refused(gen(&["-t", "0"]), "-t 0", &["--threads"]);

    // Files that never end, or are not files.
    let out = sh(&["generate", "-m", &m, "-f", "/dev/zero", "-n", "1"], "");
    refused(out, "-f /dev/zero", &["/dev/zero", "not a regular file"]);
    let out = sh(
        &[
            "generate",
            "-m",
            &m,
            "-f",
            "/nonexistent/prompt.txt",
            "-n",
            "1",
        ],
        "",
    );
    refused(out, "-f missing", &["/nonexistent/prompt.txt"]);

    // A prompt cache that is a device, not a file: neither read nor
    // replaced (as root, a rename over /dev/full would replace the device).
    for dev in ["/dev/full", "/dev/zero"] {
        let out = gen(&["--prompt-cache", dev]);
        refused(
            out,
            &format!("--prompt-cache {dev}"),
            &[dev, "not a regular file"],
        );
    }
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());

    // bench sizes in the millions.
    let out = sh(
        &["bench", "-m", &m, "-p", "4000000", "-n", "0", "-r", "1"],
        "",
    );
    refused(out, "bench -p 4000000", &["tokens"]);
    let out = sh(
        &["bench", "-m", &m, "-p", "8", "-n", "0", "-r", "5000000"],
        "",
    );
    refused(out, "bench -r 5000000", &["--repetitions"]);
}

#[test]
fn chat_refuses_the_flags_it_would_ignore() {
    let m = smollm2();
    for flag in [
        &["--prompt-cache", "x.cache"][..],
        &["--context-shift"],
        &["--keep", "4"],
        &["-gan", "2"],
        &["--verbose-prompt"],
        &["--ignore-eos"],
    ] {
        let mut a = vec!["chat", "-m", &m];
        a.extend_from_slice(flag);
        refused(sh(&a, ""), &format!("chat {flag:?}"), &[flag[0]]);
    }
}

/// A synthetic model whose write fails half-way (a file-size limit stands
/// in for a full disk) leaves no multi-GB `.partial` file behind.
#[test]
fn a_failed_synthetic_write_leaves_no_partial_file() {
    let tmp = common::TempDir::new("synth");
    let dir = tmp.path().to_path_buf();
    let out = Command::new("sh")
        .args([
            "-c",
            "trap '' XFSZ; ulimit -f 2048; exec \"$0\" bench --synthetic smollm2-135m:q4_1 -p 8 -n 0 -r 1 --backend cpu",
            env!("CARGO_BIN_EXE_glint"),
        ])
        .env("GLINT_MODELS", &dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The model cache's synthetic/ folder may stay; no file in it may.
    let left: Vec<_> = std::fs::read_dir(dir.join("synthetic"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The wgpu switches refuse what they do not take, by name, before a
/// model loads: `--gpu-tune` on `generate`, `serve` and `bench`, and
/// `GLINT_TUNE`, `GLINT_INT8` and `GLINT_MATVEC_SCALED` (1 or 0) and
/// `GLINT_ATTN_TILE` (1, 0 or all) wherever wgpu may be taken.
#[test]
fn gpu_tune_settings_it_does_not_take_are_refused() {
    let m = smollm2();
    for cmd in [&["generate", "-p", "Hi"][..], &["serve"], &["bench"]] {
        let mut a = cmd.to_vec();
        a.extend_from_slice(&["-m", &m, "--gpu-tune", "fast"]);
        let out = sh(&a, "");
        let cmd = cmd[0];
        refused(
            out,
            &format!("{cmd} --gpu-tune fast"),
            &["--gpu-tune fast", "on, off or auto"],
        );
    }
    // `generate` on `backend` with `var=yes` in its environment.
    let gen_with = |backend: &str, var: &str| {
        Command::new(env!("CARGO_BIN_EXE_glint"))
            .args([
                "generate",
                "-m",
                &m,
                "-p",
                "Hi",
                "-n",
                "1",
                "--backend",
                backend,
            ])
            .env(var, "yes")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The wgpu switches from the environment, under --backend wgpu and
    // under auto too (which falls back to the cpu quietly when no GPU
    // opens: a misspelt switch must not pass for a missing GPU).
    for backend in ["wgpu", "auto"] {
        for (var, needle) in [
            ("GLINT_TUNE", "1 (time"),
            ("GLINT_INT8", "1 (integer dots"),
            ("GLINT_MATVEC_SCALED", "1 (each group's dot"),
            ("GLINT_ATTN_TILE", "or all (decode"),
        ] {
            let want = format!("{var}=\"yes\"");
            refused(
                gen_with(backend, var),
                &format!("{var}=yes --backend {backend}"),
                &[&want, needle],
            );
        }
    }
    // The cpu backend reads none of them.
    let out = gen_with("cpu", "GLINT_TUNE");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
