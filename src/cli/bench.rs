//! `glint bench`: llama-bench's protocol and flags (`-p`, `-n`, `-pg`, `-d`,
//! `-r`, `-b`, `-ub`, `-ctk`, `-ctv`, `-t` as comma-separated lists), with
//! each row's effective GB/s set against the device's bandwidth measured in
//! the same run. Rows on stdout (md, json or csv), progress on stderr.

use std::collections::HashMap;
use std::io::IsTerminal;

use crate::bench::{self, Test, TokenRng};
use glint::{BackendKind, CacheType, Context, ContextParams, Model, ModelParams};
use serde_json::{json, Value as Json};

use super::args::{self, flag, Flag, Parsed};
use super::output;

pub const FLAGS: &[Flag] = &[
    flag!("model", ["-m"], Some("FILE"), "GGUF model (repeatable)"),
    flag!(
        "synthetic",
        [],
        Some("NAME"),
        "synthetic model, written once into <models>/synthetic/ (repeatable; see the list below)"
    ),
    flag!(
        "n-prompt",
        ["-p"],
        Some("LIST"),
        "prompt sizes, one ppN test each (default 512; 0 = none)"
    ),
    flag!(
        "n-gen",
        ["-n"],
        Some("LIST"),
        "generation lengths, one tgN test each (default 128; 0 = none)"
    ),
    flag!(
        "pg",
        ["-pg"],
        Some("PP,TG"),
        "a prompt then generation test ppPP+tgTG (repeatable)"
    ),
    flag!(
        "n-depth",
        ["-d"],
        Some("LIST"),
        "tokens in the cache before each test (default 0)"
    ),
    flag!(
        "n-parallel",
        ["-npl"],
        Some("LIST"),
        "sequences decoded together in one unified cache (llama-batched-bench's -npl; default 1): counts are per sequence, t/s is aggregate"
    ),
    flag!(
        "repetitions",
        ["-r"],
        Some("N"),
        "timed runs per test (default 5)"
    ),
    flag!(
        "batch-size",
        ["-b"],
        Some("LIST"),
        "logical batch size (default 2048)"
    ),
    flag!(
        "ubatch-size",
        ["-ub"],
        Some("LIST"),
        "physical batch size (default 512)"
    ),
    flag!(
        "cache-type-k",
        ["-ctk"],
        Some("LIST"),
        "K cache type f16|f32|q8_0|q4_0 (default f16)"
    ),
    flag!(
        "cache-type-v",
        ["-ctv"],
        Some("LIST"),
        "V cache type f16|f32|q8_0|q4_0 (default f16)"
    ),
    flag!(
        "threads",
        ["-t"],
        Some("LIST"),
        "cpu threads (default: all cores)"
    ),
    flag!(
        "backend",
        [],
        Some("LIST"),
        "backends, e.g. cpu,wgpu (default auto)"
    ),
    flag!("adapter", [], Some("N"), "wgpu adapter index"),
    super::options::GPU_INT8,
    super::options::GPU_TUNE,
    flag!(
        "counters",
        [],
        None,
        "wgpu: the work of one decode step per row (dispatches, passes, submits, creations, readbacks)"
    ),
    flag!(
        "profile",
        [],
        None,
        "wgpu: device time of each kernel over the measured runs (timestamp queries; every submit waits, so t/s drops)"
    ),
    flag!(
        "output",
        ["-o"],
        Some("md|json|csv"),
        "output format (default md)"
    ),
    flag!("grp-attn-n", ["-gan"], Some("N"), "with --grp-attn-mode window: the SelfExtend group size"),
    flag!("grp-attn-w", ["-gaw"], Some("N"), "with --grp-attn-mode window: the neighbour window (default 512)"),
    flag!("grp-attn-mode", [], Some("window"), "time two-window SelfExtend attention (-gan > 1); default plain attention"),
    flag!("help", ["-h"], None, "this text"),
];

fn help() -> String {
    let names: Vec<&str> = crate::synthetic::PRESETS.iter().map(|p| p.name).collect();
    format!(
        "{}\nsynthetic models: {}\n\n\
         Each test: one untimed warm-up, then -r timed runs from a cleared cache \
         (after -d tokens, untimed). t/s = tokens / seconds: median, min, max over the runs.\n\
         GB/s: {}.\n\
         % bw: GB/s as a share of the device bandwidth measured at the start of the run \
         (cpu: -t threads summing a 512 MiB buffer; wgpu: 2 x bytes / time of a 256 MiB \
         buffer-to-buffer copy), best of 5.\n\
         RSS: the process's peak resident set (VmHWM) over the model's tests, counted from \
         the loaded model (mapped weights as resident as they are, tokenizer), not the \
         bandwidth probe's buffer; mem: what the backend holds (weights w, KV cache, scratch; \
         thr: its threads' own scratch, kept between ops).",
        args::help(
            "glint bench [options] (-m FILE | --synthetic NAME)...",
            FLAGS
        ),
        names.join(", "),
        bench::BYTES_FORMULA
    )
}

/// A comma-separated list; every item parsed, errors naming the flag.
fn list<T: std::str::FromStr>(p: &Parsed, name: &str, default: &str) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    let given = p.all(name);
    let items: Vec<&str> = if given.is_empty() {
        vec![default]
    } else {
        given.iter().map(String::as_str).collect()
    };
    for s in items {
        for item in s.split(',') {
            let v = item
                .trim()
                .parse::<T>()
                .map_err(|_| format!("--{name}: cannot parse `{item}` in `{s}`"))?;
            out.push(v);
        }
    }
    Ok(out)
}

struct Config {
    models: Vec<std::path::PathBuf>,
    backends: Vec<BackendKind>,
    threads: Vec<Option<usize>>,
    batch: Vec<u32>,
    ubatch: Vec<u32>,
    type_k: Vec<CacheType>,
    type_v: Vec<CacheType>,
    tests: Vec<Test>,
    reps: usize,
    adapter: Option<usize>,
    format: Format,
    counters: bool,
    profile: bool,
    gpu_int8: bool,
    gpu_tune: Option<bool>,
    /// `--grp-attn-mode window`: two-window SelfExtend attention.
    window: Option<glint::SelfExtendWindow>,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Md,
    Json,
    Csv,
}

/// Most tokens (depth + prompt + generated) one test may put in its context.
const MAX_TEST_TOKENS: u64 = 1 << 20;
/// Most repetitions of each test.
const MAX_REPS: usize = 1000;

/// Most sequences one test may decode together.
const MAX_PARALLEL: u32 = 256;

/// The tests the flags ask for: every parallel level with every depth and
/// every -p, -n and -pg.
fn tests(p: &Parsed) -> Result<Vec<Test>, String> {
    let depths: Vec<u32> = list(p, "n-depth", "0")?;
    let levels: Vec<u32> = list(p, "n-parallel", "1")?;
    if let Some(&l) = levels.iter().find(|&&l| l == 0 || l > MAX_PARALLEL) {
        return Err(format!(
            "--n-parallel {l}: from 1 to {MAX_PARALLEL} sequences"
        ));
    }
    let mut base = Vec::new();
    for n in list::<u32>(p, "n-prompt", "512")? {
        if n > 0 {
            base.push((n, 0));
        }
    }
    for n in list::<u32>(p, "n-gen", "128")? {
        if n > 0 {
            base.push((0, n));
        }
    }
    for pg in p.all("pg") {
        let bad = || format!("-pg: `{pg}` is not PP,TG (two numbers)");
        let (a, b) = pg.split_once(',').ok_or_else(bad)?;
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        base.push((a, b));
    }
    let mut tests = Vec::new();
    for &npl in &levels {
        for &d in &depths {
            for &(pp, tg) in &base {
                tests.push(Test {
                    n_prompt: pp,
                    n_gen: tg,
                    n_depth: d,
                    n_parallel: npl,
                });
            }
        }
    }
    if tests.is_empty() {
        return Err("bench: no tests (-p 0 and -n 0 and no -pg)".into());
    }
    let cells = |t: &Test| t.n_ctx() as u64 * t.n_seq() as u64;
    if let Some(t) = tests.iter().find(|t| cells(t) > MAX_TEST_TOKENS) {
        return Err(format!(
            "bench: {} x {} sequences needs {} tokens of context, more than the \
             {MAX_TEST_TOKENS} a test may have",
            t.name(),
            t.n_seq(),
            cells(t)
        ));
    }
    Ok(tests)
}

fn config(p: &Parsed) -> Result<Config, String> {
    if !p.positional.is_empty() {
        return Err(format!(
            "bench: unexpected argument `{}` (models go after -m)",
            p.positional[0]
        ));
    }
    let format = match p.get("output").unwrap_or("md") {
        "md" => Format::Md,
        "json" => Format::Json,
        "csv" => Format::Csv,
        other => return Err(format!("--output: `{other}` (md, json, csv)")),
    };
    let cache = |name: &str| -> Result<Vec<CacheType>, String> {
        list::<String>(p, name, "f16")?
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|e: glint::Error| format!("--{name}: {e}"))
            })
            .collect()
    };
    let backends = list::<String>(p, "backend", "auto")?
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|e: glint::Error| format!("--backend: {e}"))
        })
        .collect::<Result<Vec<BackendKind>, String>>()?;
    let threads = if p.has("threads") {
        list::<usize>(p, "threads", "")?
            .into_iter()
            .map(|t| match t {
                0 => Ok(None),
                t => super::options::clamp_threads(t).map(Some),
            })
            .collect::<Result<_, _>>()?
    } else {
        vec![None]
    };
    let tests = tests(p)?;
    let reps = p.parse::<usize>("repetitions")?.unwrap_or(5).max(1);
    if reps > MAX_REPS {
        return Err(format!(
            "--repetitions {reps}: at most {MAX_REPS} (medians settle long before)"
        ));
    }
    let positive = |name: &str, default: &str| -> Result<Vec<u32>, String> {
        let v: Vec<u32> = list(p, name, default)?;
        if v.contains(&0) {
            return Err(format!("--{name}: sizes must be > 0"));
        }
        Ok(v)
    };
    let mut models: Vec<std::path::PathBuf> = p
        .all("model")
        .iter()
        .map(|m| super::options::resolve_model(Some(m)))
        .collect::<Result<_, _>>()?;
    // Check every synthetic name before writing any (writing takes minutes).
    for name in p.all("synthetic") {
        crate::synthetic::preset(name).map_err(|e| e.to_string())?;
    }
    for name in p.all("synthetic") {
        let path = crate::synthetic::ensure(name, &mut |l| eprintln!("glint bench: {l}"))
            .map_err(|e| e.to_string())?;
        models.push(path);
    }
    if models.is_empty() {
        return Err("bench: no model (give -m FILE or --synthetic NAME)".into());
    }
    Ok(Config {
        models,
        backends,
        threads,
        batch: positive("batch-size", "2048")?,
        ubatch: positive("ubatch-size", "512")?,
        type_k: cache("cache-type-k")?,
        type_v: cache("cache-type-v")?,
        tests,
        reps,
        adapter: p.parse("adapter")?,
        format,
        counters: p.has("counters"),
        profile: p.has("profile"),
        gpu_int8: p.has("gpu-int8"),
        gpu_tune: super::options::gpu_tune(p)?,
        window: super::options::self_extend_window(p)?,
    })
}

fn cache_name(t: CacheType) -> &'static str {
    t.name()
}

/// The device bandwidth (bytes/s) for a loaded model's backend, measured
/// once per backend and thread count.
fn bandwidth(
    cache: &mut HashMap<String, f64>,
    model: &Model,
    n_threads: Option<usize>,
    adapter: Option<usize>,
) -> Result<f64, String> {
    let is_cpu = model.backend_name().starts_with("cpu");
    let threads = n_threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let key = if is_cpu {
        format!("cpu:{threads}")
    } else {
        format!("wgpu:{adapter:?}")
    };
    if let Some(&b) = cache.get(&key) {
        return Ok(b);
    }
    let n_bytes = if is_cpu { 512 << 20 } else { 256 << 20 };
    let b = model
        .measure_bandwidth(n_bytes, 5)
        .map_err(|e| format!("measuring the {key} bandwidth: {e}"))?;
    eprintln!(
        "glint bench: {key} bandwidth {:.1} GB/s (measured)",
        b / 1e9
    );
    cache.insert(key, b);
    Ok(b)
}

pub fn run(rest: &[String]) -> Result<(), String> {
    let p = args::parse(rest, FLAGS)?;
    if p.has("help") {
        return output::println(&help());
    }
    let c = config(&p)?;
    let per_model = c.batch.len() * c.ubatch.len() * c.type_k.len() * c.type_v.len();
    let n_total = c.models.len() * c.backends.len() * c.threads.len() * per_model * c.tests.len();
    let tty = std::io::stderr().is_terminal();
    let mut bw_cache = HashMap::new();
    let mut rows: Vec<Json> = Vec::new();
    let mut i_test = 0;
    for path in &c.models {
        for &backend in &c.backends {
            for &n_threads in &c.threads {
                let mp = ModelParams {
                    backend,
                    adapter: c.adapter,
                    n_threads,
                    gpu_profile: c.profile && backend != BackendKind::Cpu,
                    gpu_int8: c.gpu_int8,
                    gpu_tune: c.gpu_tune,
                    ..Default::default()
                };
                let model = Model::load(path, &mp).map_err(|e| e.to_string())?;
                if let Some(why) = model.backend_passed_over() {
                    eprintln!("glint bench: {why}");
                }
                if let Some(t) = model.gpu_tune_report() {
                    eprint!("glint bench: {t}");
                }
                let bw = bandwidth(&mut bw_cache, &model, n_threads, c.adapter)?;
                // The peak from here: the loaded model (its mapped pages as
                // resident as they are) and the tests, not the bandwidth
                // probe's 512 MiB buffer (freed by now).
                bench::reset_peak_rss();
                let file = path
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                for &n_batch in &c.batch {
                    for &n_ubatch in &c.ubatch {
                        for &type_k in &c.type_k {
                            for &type_v in &c.type_v {
                                for test in &c.tests {
                                    i_test += 1;
                                    let label = format!(
                                        "[{i_test}/{n_total}] {file} {} {}",
                                        model.backend_name(),
                                        test.name()
                                    );
                                    // --counters measures a step after the
                                    // test's tokens: room for it too.
                                    let depth = test.n_depth + test.n_prompt;
                                    let per_seq = match c.counters {
                                        true => test.n_ctx().max(bench::step_cells(depth)),
                                        false => test.n_ctx(),
                                    };
                                    let cp = ContextParams {
                                        n_ctx: per_seq * test.n_seq(),
                                        n_seq_max: test.n_seq(),
                                        kv_unified: true,
                                        n_batch,
                                        n_ubatch,
                                        type_k,
                                        type_v,
                                        self_extend_window: c.window,
                                        ..Default::default()
                                    };
                                    let r =
                                        run_test(&model, cp, test, c.reps, &label, tty, c.counters)
                                            .map_err(|e| format!("{label}: {e}"))?;
                                    let bytes = bench::bytes_read(
                                        &model, test, n_batch, n_ubatch, type_k, type_v,
                                    );
                                    rows.push(row(
                                        &model, path, &file, backend, n_threads, n_batch, n_ubatch,
                                        type_k, type_v, test, &r, bytes, bw,
                                    ));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    match c.format {
        Format::Json => output::println(&format!("{:#}", Json::Array(rows)))?,
        Format::Csv => output::print(&csv(&rows))?,
        Format::Md => output::print(&markdown(&rows))?,
    }
    Ok(())
}

struct Measured {
    seconds: Vec<f64>,
    /// On wgpu: each run's host time ([`bench::RunTime::host_seconds`]).
    host_seconds: Vec<f64>,
    memory: glint::MemoryReport,
    peak_rss: Option<u64>,
    /// With `--counters` on wgpu: the work of one decode step.
    counters: Option<glint::GpuCounters>,
    /// With `--profile` on wgpu: each kernel's device time over the runs.
    profile: Option<Vec<glint::KernelTime>>,
}

fn run_test(
    model: &Model,
    cp: ContextParams,
    test: &Test,
    reps: usize,
    label: &str,
    tty: bool,
    counters: bool,
) -> Result<Measured, glint::Error> {
    let mut ctx = Context::new(model, cp)?;
    let mut rng = TokenRng::new(0x5eed);
    eprint!("glint bench: {label}: warm-up");
    if !tty {
        eprintln!();
    }
    bench::warm_up(&mut ctx, test, &mut rng)?;
    // The warm-up's kernels are not the runs'.
    model.take_gpu_profile()?;
    let mut seconds = Vec::with_capacity(reps);
    let mut host_seconds = Vec::new();
    for r in 0..reps {
        let run = bench::run_once(&mut ctx, test, &mut rng)?;
        let s = run.seconds;
        seconds.push(s);
        host_seconds.extend(run.host_seconds);
        let line = format!(
            "glint bench: {label}: run {}/{reps} {:.2} t/s",
            r + 1,
            test.n_tokens() as f64 / s
        );
        if tty {
            eprint!("\r\x1b[K{line}");
        } else {
            eprintln!("{line}");
        }
    }
    if tty {
        eprintln!();
    }
    let profile = model.take_gpu_profile()?;
    let counters = if counters {
        // A step at the test's depth: prompt and depth tokens in the cache.
        bench::step_counters(
            &mut ctx,
            test.n_depth + test.n_prompt,
            test.n_seq(),
            &mut rng,
        )?
    } else {
        None
    };
    Ok(Measured {
        seconds,
        host_seconds,
        memory: model.memory(),
        peak_rss: bench::peak_rss_bytes(),
        counters,
        profile,
    })
}

#[allow(clippy::too_many_arguments)]
fn row(
    model: &Model,
    path: &std::path::Path,
    file: &str,
    backend: BackendKind,
    n_threads: Option<usize>,
    n_batch: u32,
    n_ubatch: u32,
    type_k: CacheType,
    type_v: CacheType,
    test: &Test,
    r: &Measured,
    bytes: f64,
    bw: f64,
) -> Json {
    let n = test.n_tokens() as f64;
    let ts: Vec<f64> = r.seconds.iter().map(|s| n / s).collect();
    let (ts_med, ts_min, ts_max) = bench::median_min_max(&ts);
    let (s_med, _, _) = bench::median_min_max(&r.seconds);
    let gbs = bytes / s_med / 1e9;
    let size = bench::model_bytes(model);
    json!({
        "model": file,
        "model_path": path.display().to_string(),
        "size_bytes": size,
        "size_gib": size as f64 / (1u64 << 30) as f64,
        "n_params": bench::n_params(model),
        "arch": model.hparams().arch.name,
        "backend": match backend {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Auto => "auto",
        },
        "backend_name": model.backend_name(),
        "n_threads": n_threads,
        "n_batch": n_batch,
        "n_ubatch": n_ubatch,
        "type_k": cache_name(type_k),
        "type_v": cache_name(type_v),
        "test": test.name(),
        "n_prompt": test.n_prompt,
        "n_gen": test.n_gen,
        "n_depth": test.n_depth,
        "n_parallel": test.n_seq(),
        "repetitions": r.seconds.len(),
        "samples_seconds": r.seconds,
        "samples_ts": ts,
        // wgpu: each run's wall time less its time blocked on the device.
        "samples_host_seconds": (!r.host_seconds.is_empty()).then_some(&r.host_seconds),
        // A generation test's run is its decode steps: the median of the
        // runs' host times, per step.
        "host_us_per_step": match (test.n_prompt, r.host_seconds.is_empty()) {
            (0, false) if test.n_gen > 0 => {
                Some(bench::median_min_max(&r.host_seconds).0 / test.n_gen as f64 * 1e6)
            }
            _ => None,
        },
        "tokens_per_second": {"median": ts_med, "min": ts_min, "max": ts_max},
        "bytes_read": bytes,
        "gb_per_s": gbs,
        "device_gb_per_s": bw / 1e9,
        "pct_of_bandwidth": 100.0 * gbs / (bw / 1e9),
        "peak_rss_bytes": r.peak_rss,
        "backend_memory": {
            "weights_bytes": r.memory.weights,
            "kv_cache_bytes": r.memory.kv_cache,
            "scratch_bytes": r.memory.scratch,
            "thread_scratch_bytes": r.memory.thread_scratch,
        },
        "counters": r.counters.map(|c| {
            let mut o = c
                .fields()
                .iter()
                .map(|&(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>();
            // The modeled reads over what the step must read (1.0: each
            // weight byte and each attended K/V byte read once).
            let depth = test.n_depth + test.n_prompt;
            let (w, kv) = bench::step_bytes(model, depth, test.n_seq(), type_k, type_v);
            let ratio = |read: u64, need: f64| json!((read as f64 / need * 1000.0).round() / 1000.0);
            o.insert("weight_bytes_ratio".into(), ratio(c.weight_bytes_read, w));
            o.insert("kv_bytes_ratio".into(), ratio(c.kv_bytes_read, kv));
            o
        }),
        // Per run (a test's tokens), over the measured runs.
        "profile": r.profile.as_ref().map(|p| {
            let runs = r.seconds.len().max(1) as f64;
            p.iter()
                .map(|k| json!({
                    "kernel": k.label,
                    "calls": k.calls as f64 / runs,
                    "us": k.ns / runs / 1e3,
                    "bytes": k.bytes as f64 / runs,
                }))
                .collect::<Vec<_>>()
        }),
    })
}

fn mib(v: &Json) -> String {
    v.as_f64()
        .map(|b| format!("{:.0}", b / 1048576.0))
        .unwrap_or_else(|| "-".into())
}

fn params_label(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else {
        format!("{:.2} M", n / 1e6)
    }
}

/// Settings that get a markdown column, as llama-bench gives them one, when
/// a row of the run has them other than the default: (json key, column,
/// default).
const MD_OPTIONAL: [(&str, &str, &str); 5] = [
    ("n_parallel", "npl", "1"),
    ("n_batch", "n_batch", "2048"),
    ("n_ubatch", "n_ubatch", "512"),
    ("type_k", "type_k", "f16"),
    ("type_v", "type_v", "f16"),
];

fn markdown(rows: &[Json]) -> String {
    let text = |v: &Json| match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    };
    let optional: Vec<(&str, &str)> = MD_OPTIONAL
        .iter()
        .filter(|(key, _, default)| {
            rows.iter()
                .any(|r| !r[*key].is_null() && text(&r[*key]) != *default)
        })
        .map(|&(key, col, _)| (key, col))
        .collect();
    let mut head = vec!["model", "size", "params", "backend", "threads"];
    head.extend(optional.iter().map(|&(_, col)| col));
    let n_left = head.len() + 1;
    head.extend([
        "test",
        "t/s",
        "min",
        "max",
        "GB/s",
        "% bw",
        "RSS MiB",
        "mem w/kv/scratch/thr MiB",
    ]);
    let mut s = format!("| {} |\n", head.join(" | "));
    s.push_str(&format!(
        "|{}\n",
        head.iter()
            .enumerate()
            .map(|(i, _)| if i < n_left { " --- |" } else { " ---: |" })
            .collect::<String>()
    ));
    let mut devices: Vec<String> = Vec::new();
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let ts = &r["tokens_per_second"];
        let m = &r["backend_memory"];
        let mut cells = vec![
            r["model"].as_str().unwrap_or("").to_string(),
            format!("{:.2} GiB", f("size_gib")),
            params_label(f("n_params")),
            r["backend_name"].as_str().unwrap_or("").to_string(),
            r["n_threads"]
                .as_u64()
                .map(|t| t.to_string())
                .unwrap_or_else(|| "all".into()),
        ];
        cells.extend(optional.iter().map(|&(key, _)| text(&r[key])));
        cells.extend([
            r["test"].as_str().unwrap_or("").to_string(),
            format!("{:.2}", ts["median"].as_f64().unwrap_or(f64::NAN)),
            format!("{:.2}", ts["min"].as_f64().unwrap_or(f64::NAN)),
            format!("{:.2}", ts["max"].as_f64().unwrap_or(f64::NAN)),
            format!("{:.1}", f("gb_per_s")),
            format!("{:.0}%", f("pct_of_bandwidth")),
            mib(&r["peak_rss_bytes"]),
            format!(
                "{}/{}/{}/{}",
                mib(&m["weights_bytes"]),
                mib(&m["kv_cache_bytes"]),
                mib(&m["scratch_bytes"]),
                mib(&m["thread_scratch_bytes"])
            ),
        ]);
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
        let dev = format!(
            "{}: {:.1} GB/s",
            r["backend_name"].as_str().unwrap_or(""),
            f("device_gb_per_s")
        );
        if !devices.contains(&dev) {
            devices.push(dev);
        }
    }
    s.push_str(&format!(
        "\ndevice bandwidth (measured in this run): {}\nt/s: median, min, max over the runs. {}.\n",
        devices.join("; "),
        bench::BYTES_FORMULA
    ));
    s.push_str(&host_markdown(rows));
    s.push_str(&counters_markdown(rows));
    s.push_str(&profile_markdown(rows));
    s
}

/// The wgpu generation rows' host time per decode step, on one line.
fn host_markdown(rows: &[Json]) -> String {
    let each: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let us = r["host_us_per_step"].as_f64()?;
            Some(format!(
                "{} {} npl {}: {us:.0} us",
                r["model"].as_str().unwrap_or(""),
                r["test"].as_str().unwrap_or(""),
                r["n_parallel"]
            ))
        })
        .collect();
    if each.is_empty() {
        return String::new();
    }
    format!(
        "host time per decode step (wgpu: the run's wall time less its time blocked in queue \
         submits and device waits, over its steps, median over the runs; once a step is recorded while \
         the device runs the one before, a step takes the longer of this and the device's \
         time): {}\n",
        each.join("; ")
    )
}

/// With `--profile`: each row's kernels, by device time per run.
fn profile_markdown(rows: &[Json]) -> String {
    let mut s = String::new();
    for r in rows {
        let Some(kernels) = r["profile"].as_array() else {
            continue;
        };
        // A generation test's run is n_gen decode steps: shown per step.
        // (A run at a depth also fills the depth: shown per run.)
        let steps = match (
            r["n_prompt"].as_u64(),
            r["n_depth"].as_u64(),
            r["n_gen"].as_u64(),
        ) {
            (Some(0), Some(0), Some(n)) if n > 0 => n as f64,
            _ => 1.0,
        };
        let per = if steps > 1.0 { "decode step" } else { "run" };
        let us = |k: &Json| k["us"].as_f64().unwrap_or(0.0) / steps;
        let total: f64 = kernels.iter().map(us).sum();
        s.push_str(&format!(
            "\ndevice time of {} {} (npl {}), per {per}, {:.1} us in all:\n\n| kernel | calls | us | % | GB/s |\n| --- | ---: | ---: | ---: | ---: |\n",
            r["model"].as_str().unwrap_or(""),
            r["test"].as_str().unwrap_or(""),
            r["n_parallel"],
            total
        ));
        for k in kernels {
            let bytes = k["bytes"].as_f64().unwrap_or(0.0) / steps;
            let gbs = match bytes > 0.0 && us(k) > 0.0 {
                true => format!("{:.1}", bytes / (us(k) * 1e3)),
                false => "-".into(),
            };
            s.push_str(&format!(
                "| {} | {:.0} | {:.1} | {:.1}% | {gbs} |\n",
                k["kernel"].as_str().unwrap_or(""),
                k["calls"].as_f64().unwrap_or(0.0) / steps,
                us(k),
                100.0 * us(k) / total.max(1e-9),
            ));
        }
    }
    s
}

/// With `--counters`: the work of one decode step per row, as a table.
fn counters_markdown(rows: &[Json]) -> String {
    let with: Vec<&Json> = rows.iter().filter(|r| r["counters"].is_object()).collect();
    let Some(first) = with.first() else {
        return String::new();
    };
    let names: Vec<&String> = first["counters"]
        .as_object()
        .map_or(vec![], |o| o.keys().collect());
    let mut s =
        format!(
        "\nwork of one decode step (wgpu counters; npl: sequences in the step):\n\n| model | test | npl | {} |\n| --- | --- | ---: |{}\n",
        names.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" | "),
        " ---: |".repeat(names.len())
    );
    for r in with {
        let cells: Vec<String> = names
            .iter()
            .map(|n| r["counters"][n.as_str()].to_string())
            .collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r["model"].as_str().unwrap_or(""),
            r["test"].as_str().unwrap_or(""),
            r["n_parallel"].as_u64().unwrap_or(1),
            cells.join(" | ")
        ));
    }
    s
}

const CSV_FIELDS: &[&str] = &[
    "model",
    "size_bytes",
    "n_params",
    "backend",
    "backend_name",
    "n_threads",
    "n_batch",
    "n_ubatch",
    "type_k",
    "type_v",
    "test",
    "n_prompt",
    "n_gen",
    "n_depth",
    "n_parallel",
    "repetitions",
    "ts_median",
    "ts_min",
    "ts_max",
    "bytes_read",
    "gb_per_s",
    "device_gb_per_s",
    "pct_of_bandwidth",
    "peak_rss_bytes",
    "weights_bytes",
    "kv_cache_bytes",
    "scratch_bytes",
    "thread_scratch_bytes",
];

fn csv(rows: &[Json]) -> String {
    let mut s = CSV_FIELDS.join(",");
    s.push('\n');
    for r in rows {
        let cell = |k: &str| -> Json {
            match k {
                "ts_median" => r["tokens_per_second"]["median"].clone(),
                "ts_min" => r["tokens_per_second"]["min"].clone(),
                "ts_max" => r["tokens_per_second"]["max"].clone(),
                "weights_bytes" | "kv_cache_bytes" | "scratch_bytes" | "thread_scratch_bytes" => {
                    r["backend_memory"][k].clone()
                }
                _ => r[k].clone(),
            }
        };
        let line: Vec<String> = CSV_FIELDS
            .iter()
            .map(|k| match cell(k) {
                Json::String(t) => format!("\"{}\"", t.replace('"', "\"\"")),
                Json::Null => String::new(),
                v => v.to_string(),
            })
            .collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(type_k: &str, test: &str) -> Json {
        json!({
            "model": "m.gguf", "size_gib": 0.1, "n_params": 1e6, "backend_name": "cpu",
            "n_threads": 2, "n_parallel": 1, "n_batch": 2048, "n_ubatch": 512, "type_k": type_k,
            "type_v": "f16", "test": test,
            "tokens_per_second": {"median": 1.0, "min": 1.0, "max": 1.0},
            "gb_per_s": 1.0, "device_gb_per_s": 2.0, "pct_of_bandwidth": 50.0,
            "peak_rss_bytes": 0, "backend_memory": {}
        })
    }

    /// A setting gets a column when some row has it off its default, as
    /// llama-bench's tables do; the rows' cells line up with the header.
    #[test]
    fn markdown_names_the_settings_that_differ() {
        let plain = markdown(&[row("f16", "pp8")]);
        assert!(plain.starts_with("| model | size | params | backend | threads | test |"));
        let md = markdown(&[row("f16", "pp8"), row("q8_0", "pp8")]);
        let lines: Vec<&str> = md.lines().collect();
        assert!(
            lines[0].starts_with("| model | size | params | backend | threads | type_k | test |"),
            "{md}"
        );
        assert!(lines[3].contains("| 2 | q8_0 | pp8 |"), "{md}");
        let n = |l: &str| l.matches('|').count();
        assert_eq!(n(lines[0]), n(lines[1]));
        assert_eq!(n(lines[0]), n(lines[3]));
    }
}
