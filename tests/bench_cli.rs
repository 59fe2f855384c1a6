//! `glint bench` as a user runs it: JSON rows with every field, a markdown
//! table, one-line errors.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

fn bench(extra: &[&str]) -> std::process::Output {
    let m = common::model("smollm2");
    let mut a = vec![
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "2",
        "--backend",
        "cpu",
    ];
    a.extend_from_slice(extra);
    common::glint(&a)
}

#[test]
fn json_rows_have_the_fields() {
    let (text, err) = common::success(bench(&["-o", "json"]));
    assert!(
        err.contains("glint bench: [1/2]"),
        "progress on stderr: {err}"
    );

    // Python's json module reads it too (when python3 is there).
    if let Ok(mut py) = Command::new("python3")
        .args(["-c", "import json,sys; json.load(sys.stdin)"])
        .stdin(Stdio::piped())
        .spawn()
    {
        py.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        assert!(py.wait().unwrap().success(), "python3 rejects: {text}");
    }

    let rows: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let tests: Vec<&str> = rows.iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp8", "tg4"]);
    for r in rows {
        assert_eq!(r["model"], "SmolLM2-135M-Instruct.Q4_1.gguf");
        assert_eq!(r["backend"], "cpu");
        assert_eq!(r["n_threads"], 2);
        assert_eq!(r["n_params"].as_u64().unwrap(), 134_515_008);
        assert_eq!(r["size_bytes"].as_u64().unwrap(), 96_576_768);
        let ts = &r["tokens_per_second"];
        let (med, min, max) = (
            ts["median"].as_f64().unwrap(),
            ts["min"].as_f64().unwrap(),
            ts["max"].as_f64().unwrap(),
        );
        assert!(med > 0.0 && min <= med && med <= max, "{ts}");
        assert!(r["gb_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["device_gb_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["pct_of_bandwidth"].as_f64().unwrap() > 0.0);
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0);
        assert!(r["backend_memory"]["kv_cache_bytes"].as_u64().unwrap() > 0);
        // The cpu workers' own buffers: at least one column of n_embd 576
        // quantized to Q8_1 (36 bytes a block of 32) for the Q4_1 weights.
        let thr = r["backend_memory"]["thread_scratch_bytes"]
            .as_u64()
            .unwrap();
        assert!(thr >= 576 / 32 * 36, "thread scratch {thr} bytes");
        // The host's own time is a wgpu figure.
        assert!(r["samples_host_seconds"].is_null(), "{r}");
        assert!(r["host_us_per_step"].is_null(), "{r}");
    }
    assert_eq!(
        (rows[0]["n_prompt"].as_u64(), rows[0]["n_gen"].as_u64()),
        (Some(8), Some(0))
    );
    assert_eq!(
        (rows[1]["n_prompt"].as_u64(), rows[1]["n_gen"].as_u64()),
        (Some(0), Some(4))
    );
    // tg4 reads the weights 4 times, pp8 (one micro-batch) once: the tied
    // embedding is the head, so every tensor counts.
    let w = 96_576_768.0;
    let tg = rows[1]["bytes_read"].as_f64().unwrap();
    let pp = rows[0]["bytes_read"].as_f64().unwrap();
    assert!(tg > 4.0 * w && tg < 4.0 * w + 1e6, "{tg}");
    assert!(pp > w && pp < w + 1e6, "{pp}");
}

#[test]
fn markdown_table_has_a_header_row() {
    let (text, _) = common::success(bench(&["-o", "md", "-pg", "4,2"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("| model | size | params | backend |"),
        "{text}"
    );
    assert!(lines[1].starts_with("| --- |"), "{text}");
    let tests: Vec<&str> = lines[2..5]
        .iter()
        .map(|l| l.split('|').nth(6).unwrap().trim())
        .collect();
    assert_eq!(tests, ["pp8", "tg4", "pp4+tg2"]);
    assert!(
        text.contains("device bandwidth (measured in this run)"),
        "{text}"
    );
}

#[test]
fn csv_has_a_header_and_one_line_per_test() {
    let (text, _) = common::success(bench(&["-o", "csv"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("model,size_bytes,n_params,"));
    assert_eq!(
        lines[0].split(',').count(),
        lines[1].split(',').count(),
        "{text}"
    );
}

fn one_line_error(args: &[&str], want: &str) {
    let out = common::glint(args);
    let err = common::one_line_error(&out, &format!("{args:?}"));
    assert!(err.contains(want), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn errors_are_one_line() {
    one_line_error(
        &["bench", "--synthetic", "llama9-1t:q1"],
        "no synthetic model `llama9-1t:q1` (known: llama2-7b:q4_0",
    );
    one_line_error(
        &["bench", "-m", "x.gguf", "-p", "512,abc"],
        "--n-prompt: cannot parse `abc` in `512,abc`",
    );
    one_line_error(
        &["bench", "-m", "x.gguf", "-pg", "512"],
        "-pg: `512` is not PP,TG",
    );
    one_line_error(&["bench", "-m", "x.gguf", "-o", "xml"], "--output: `xml`");
    one_line_error(&["bench"], "no model");
    one_line_error(
        &["bench", "-m", "x.gguf", "-ub", "0"],
        "--ubatch-size: sizes must be > 0",
    );
    one_line_error(
        &["bench", "-m", "x.gguf", "-npl", "0"],
        "--n-parallel 0: from 1 to 256",
    );
}

/// `--counters` on wgpu: the work of one decode step after each test, with
/// the modeled reads over what the step must read. A pp test's context has
/// room for that step too (it used to run out of cells after pp8).
#[test]
fn counters_give_the_steps_work_and_read_ratios() {
    let m = common::model("smollm2");
    let (text, err) = common::success(common::glint(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "-npl",
        "1,4",
        "--backend",
        "wgpu",
        "--counters",
        "-o",
        "json",
    ]));
    let rows: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {err}"));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let npl = r["n_parallel"].as_u64().unwrap();
        let c = &r["counters"];
        assert_eq!(
            (c["passes"].as_u64(), c["submits"].as_u64()),
            (Some(1), Some(1)),
            "{c}"
        );
        // Every matrix once (the norm vectors are not counted).
        let w = c["weight_bytes_ratio"].as_f64().unwrap();
        assert!((0.99..=1.0).contains(&w), "{c}");
        // The K/V of the cells each token attends, read once: SmolLM2's 9
        // query heads share their 3 KV heads' rows (one workgroup a KV
        // head), with 4 sequences too: the span's masked cells (the
        // others') are skipped.
        assert_eq!(c["kv_bytes_ratio"].as_f64(), Some(1.0), "{c}");
        assert!(c["weight_bytes_read"].as_u64().unwrap() > 90_000_000, "{c}");
        // 4 bytes back per sequence, in one read.
        assert_eq!(c["readback_bytes"].as_u64(), Some(4 * npl), "{c}");
        assert_eq!(c["readbacks"].as_u64(), Some(1), "{c}");
        // The run's host time: part of its wall time, not all of it (the
        // device's work on the software driver is the larger part), and
        // per step for the generation test only.
        let wall = r["samples_seconds"][0].as_f64().unwrap();
        let host = r["samples_host_seconds"][0].as_f64().unwrap();
        assert!(host > 0.0 && host < wall, "host {host} s of {wall} s");
        match r["n_gen"].as_u64().unwrap() {
            0 => assert!(r["host_us_per_step"].is_null(), "{r}"),
            // Within a few ulps: serde_json's parser (without its
            // float_roundtrip feature) may read a printed f64 one ulp off.
            n => {
                let us = r["host_us_per_step"].as_f64().unwrap();
                let want = host / n as f64 * 1e6;
                assert!((us - want).abs() <= want * 1e-12, "{us} vs {want}: {r}");
            }
        }
    }
    let npl: Vec<u64> = rows
        .iter()
        .map(|r| r["n_parallel"].as_u64().unwrap())
        .collect();
    assert_eq!(npl, [1, 1, 4, 4]);
}

/// `--profile` on wgpu: each kernel's device time over the measured runs,
/// most first, then the time between dispatches; the bytes the kernels
/// read add up to the step's modeled reads (`--counters`) once a token.
#[test]
fn profile_gives_each_kernels_time_and_reads() {
    let m = common::model("smollm2");
    let (text, err) = common::success(common::glint(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
        "--backend",
        "wgpu",
        "--counters",
        "--profile",
        "-o",
        "json",
    ]));
    let rows: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {err}"));
    let r = &rows.as_array().unwrap()[0];
    let p = r["profile"].as_array().unwrap_or_else(|| panic!("{r}"));
    let names: Vec<&str> = p.iter().map(|k| k["kernel"].as_str().unwrap()).collect();
    assert_eq!(names.last(), Some(&"(between dispatches)"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("attention:main")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("matvec_fused:glu Q4_1")),
        "{names:?}"
    );
    let us: Vec<f64> = p.iter().map(|k| k["us"].as_f64().unwrap()).collect();
    assert!(
        us[..us.len() - 1].windows(2).all(|w| w[0] >= w[1]),
        "{us:?}"
    );
    assert!(us.iter().all(|&t| t > 0.0), "{us:?}");
    // Two tokens a run, each a step of the counted dispatches.
    let c = &r["counters"];
    let calls: f64 = p[..p.len() - 1]
        .iter()
        .map(|k| k["calls"].as_f64().unwrap())
        .sum();
    assert_eq!(calls, 2.0 * c["dispatches"].as_f64().unwrap(), "{p:?} {c}");
    let bytes: f64 = p.iter().map(|k| k["bytes"].as_f64().unwrap()).sum();
    let step = c["weight_bytes_read"].as_f64().unwrap();
    assert!((bytes / step - 2.0).abs() < 0.01, "{bytes} {step}");
}

/// `-npl`: every test at each parallel level, its sequences decoded
/// together; t/s counts the tokens of all of them, and the bytes a step
/// must read count the weights once and each sequence's K/V.
#[test]
fn parallel_levels_decode_sequences_together() {
    let (text, err) = common::success(bench(&["-npl", "1,3", "-o", "json"]));
    let rows: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {err}"));
    let rows = rows.as_array().unwrap();
    let names: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["test"].as_str().unwrap().to_string(),
                r["n_parallel"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [("pp8", 1), ("tg4", 1), ("pp8", 3), ("tg4", 3)];
    assert_eq!(names, want.map(|(t, n)| (t.to_string(), n)));
    // SmolLM2 ties its output to token_embd: a pass reads every tensor.
    let w = rows[0]["size_bytes"].as_f64().unwrap();
    for (one, three) in [(&rows[0], &rows[2]), (&rows[1], &rows[3])] {
        // pp8: one pass either way (8 or 24 tokens in a micro-batch);
        // tg4: 4 passes (steps). The rest is K/V, 3 times one sequence's.
        let passes = if one["test"] == "pp8" { 1.0 } else { 4.0 };
        let kv1 = one["bytes_read"].as_f64().unwrap() - passes * w;
        let kv3 = three["bytes_read"].as_f64().unwrap() - passes * w;
        assert!(kv1 > 0.0, "{one}");
        assert!((kv3 - 3.0 * kv1).abs() < 1e-6 * kv3, "{kv3} vs 3 x {kv1}");
        // t/s = all the sequences' tokens over the run's seconds.
        let tokens = (three["n_prompt"].as_f64().unwrap() + three["n_gen"].as_f64().unwrap()) * 3.0;
        let s = three["samples_seconds"][0].as_f64().unwrap();
        let ts = three["samples_ts"][0].as_f64().unwrap();
        assert!((ts * s - tokens).abs() < 1e-6 * tokens, "{three}");
    }
    // The markdown table names the level where a row has one above 1.
    let (md, _) = common::success(bench(&["-npl", "2", "-n", "0"]));
    assert!(md.lines().next().unwrap().contains("| npl |"), "{md}");
    assert!(md.contains("| 2 | pp8 |"), "{md}");
}
