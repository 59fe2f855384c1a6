//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of a real test model; panics (failing the test) with how to fetch it.
pub fn model(name: &str) -> PathBuf {
    glint_cli::models::test_model(name).unwrap_or_else(|e| panic!("{e}"))
}

/// `fixtures/<rel>` of this repository; a missing file fails the test.
pub fn fixture(rel: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel);
    assert!(
        p.exists(),
        "fixture {} is missing: it is part of the repository",
        p.display()
    );
    p
}

/// llama.cpp's reference output `fixtures/reference/<rel>` (what each file
/// is and how it was made: `fixtures/reference/README.md`).
pub fn reference(rel: &str) -> PathBuf {
    fixture(&format!("reference/{rel}"))
}

/// Run the `glint` binary with `args`.
pub fn glint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(args)
        .output()
        .expect("the glint binary runs")
}

/// `glint generate -m <the real model `name`> args...`.
pub fn generate(name: &str, args: &[&str]) -> Output {
    let m = model(name);
    let mut all = vec!["generate", "-m", m.to_str().unwrap()];
    all.extend_from_slice(args);
    glint(&all)
}

/// `glint generate` on the real model `name`, greedy on the cpu backend
/// (`--temp 0 --backend cpu` after `args`), which must succeed: (stdout,
/// stderr).
pub fn greedy_cpu(name: &str, args: &[&str]) -> (String, String) {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--temp", "0", "--backend", "cpu"]);
    success(generate(name, &all))
}

/// (stdout, stderr) of a run that must succeed; a failure shows stderr.
pub fn success(out: Output) -> (String, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

/// The one stderr line of a run that must fail with exit code 1 and no
/// panic (the Vulkan loader's XDG_RUNTIME_DIR warning left out); `what`
/// names the case in a failure.
pub fn one_line_error(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.contains("XDG_RUNTIME_DIR"))
        .collect();
    assert_eq!(lines.len(), 1, "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    lines[0].to_string()
}

/// The real model `name` on the cpu backend.
pub fn cpu_model(name: &str) -> glint::Model {
    let p = glint::ModelParams {
        backend: glint::BackendKind::Cpu,
        ..Default::default()
    };
    glint::Model::load(model(name), &p).unwrap()
}

/// The real model `name` on `backend`, the cpu backend in f32 (the
/// arithmetic the WGSL kernels do: no quantized activations).
pub fn f32_model(name: &str, backend: glint::BackendKind) -> glint::Model {
    let p = glint::ModelParams {
        backend,
        cpu_precision: glint::CpuPrecision::F32,
        ..Default::default()
    };
    glint::Model::load(model(name), &p).unwrap()
}

/// A context of `n_ctx` cells, everything else at its default.
pub fn context(model: &glint::Model, n_ctx: u32) -> glint::Context {
    glint::Context::new(
        model,
        glint::ContextParams {
            n_ctx,
            ..Default::default()
        },
    )
    .unwrap()
}

/// An `.npy` file (version 1 or 2 header, C order, little-endian `descr`):
/// (shape, the data's bytes).
fn read_npy(path: &Path, descr: &str) -> (Vec<usize>, Vec<u8>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not an npy file", path.display());
    let (hlen, hstart) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[hstart..hstart + hlen]).unwrap();
    assert!(header.contains(&format!("'descr': '{descr}'")), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape_s = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape: Vec<usize> = shape_s
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    (shape, b[hstart + hlen..].to_vec())
}

/// Read a little-endian f32 `.npy` file: returns (shape, data).
pub fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let (shape, bytes) = read_npy(path, "<f4");
    let data: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

/// Indices of the `k` largest values, largest first (ties by index).
pub fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut i: Vec<usize> = (0..v.len()).collect();
    i.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    i.truncate(k);
    i
}

/// Pearson correlation of two equally long vectors.
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let ma = a.iter().map(|&x| x as f64).sum::<f64>() / n;
    let mb = b.iter().map(|&x| x as f64).sum::<f64>() / n;
    let (mut c, mut va, mut vb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        c += dx * dy;
        va += dx * dx;
        vb += dy * dy;
    }
    c / (va * vb).sqrt()
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// Read a little-endian i32 `.npy` file.
pub fn read_npy_i32(path: &Path) -> Vec<i32> {
    read_npy(path, "<i4")
        .1
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A JSON list of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Parsed reference `result.json`.
pub fn reference_json(rel: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(reference(rel)).unwrap()).unwrap()
}

/// Lines of `glint generate --verbose` stderr that are cache events or the
/// final cell dump (they start with `kv: `).
pub fn kv_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("kv: "))
        .map(str::to_string)
        .collect()
}

/// The cache events of a `glint generate --verbose` run's stderr (its `kv: `
/// lines but the cell dump) and the final cell positions the dump lists.
pub fn kv_events_and_cells(stderr: &str) -> (Vec<String>, Vec<i32>) {
    let (dump, events): (Vec<String>, Vec<String>) = kv_lines(stderr)
        .into_iter()
        .partition(|l| l.starts_with("kv: cells"));
    let cells = dump
        .first()
        .expect("the cell dump")
        .rsplit_once(": ")
        .unwrap()
        .1
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    (events, cells)
}

/// llama.cpp's final cell positions of a reference run, sorted.
pub fn reference_cells(run: &str) -> Vec<i32> {
    let mut cells = read_npy_i32(&reference(&format!("{run}/cells_final.npy")));
    cells.sort_unstable();
    cells
}

/// The event lines llama.cpp's run would print, from a reference `events` list
/// (`calls` as `[name, seq, p0, p1, arg]`): one line per call.
pub fn reference_calls(events: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for ev in events.as_array().unwrap() {
        for c in ev["calls"].as_array().unwrap() {
            let c = c.as_array().unwrap();
            let name = c[0].as_str().unwrap();
            let args: Vec<String> = c[1..].iter().map(|v| v.to_string()).collect();
            out.push(format!("kv: {name}({})", args.join(", ")));
        }
    }
    out
}

/// A fresh folder under the system's temp dir, removed when dropped (also
/// when the test fails).
pub struct TempDir(PathBuf);

impl TempDir {
    /// `glint-<tag>-<pid>`, empty.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("glint-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The wgpu counters of one greedy decode step after `warm` steps (a
/// 64-token context, one sequence, "The capital of France is" first).
pub fn one_gpu_step(model: &glint::Model, warm: usize) -> glint::GpuCounters {
    gpu_step(model, warm, 1)
}

/// [`one_gpu_step`] with `n_seq` sequences in one unified cache of 64
/// cells each: each decodes the prompt, then every step is one batch of
/// one token per sequence, their greedy tokens read after it.
pub fn gpu_step(model: &glint::Model, warm: usize, n_seq: usize) -> glint::GpuCounters {
    gpu_step_in(model, warm, n_seq, &mut |step| step())
}

/// The context of [`gpu_step`] (64 cells a sequence, one unified stream,
/// masks built on the device whatever GLINT_HOST_MASKS says) and the
/// prompt's ids.
pub fn step_context(model: &glint::Model, n_seq: usize) -> (glint::Context, Vec<u32>) {
    let mut ctx = glint::Context::new(
        model,
        glint::ContextParams {
            n_ctx: 64 * n_seq as u32,
            n_seq_max: n_seq as u32,
            kv_unified: true,
            ..Default::default()
        },
    )
    .unwrap();
    ctx.set_host_masks(false);
    let ids = model
        .tokenizer()
        .encode("The capital of France is", true, true)
        .unwrap();
    (ctx, ids)
}

/// [`gpu_step`] with the counted step run inside `around` (which must call
/// it once): for measuring what else the step does, its heap allocations.
pub fn gpu_step_in(
    model: &glint::Model,
    warm: usize,
    n_seq: usize,
    around: &mut dyn FnMut(&mut dyn FnMut()),
) -> glint::GpuCounters {
    let (mut ctx, ids) = step_context(model, n_seq);
    let mut next = Vec::new();
    for s in 0..n_seq {
        ctx.decode(&glint::Batch::from_tokens(&ids, 0, s as i32))
            .unwrap();
        next.push(ctx.argmax(ids.len() - 1).unwrap());
    }
    let mut pos = ids.len() as i32;
    let mut step = |ctx: &mut glint::Context| {
        let mut b = glint::Batch::new();
        for (s, &t) in next.iter().enumerate() {
            b.add(t, pos, &[s as i32], true);
        }
        ctx.decode(&b).unwrap();
        for (s, t) in next.iter_mut().enumerate() {
            *t = ctx.argmax(s).unwrap();
        }
        pos += 1;
    };
    for _ in 0..warm {
        step(&mut ctx);
    }
    let before = model.gpu_counters().unwrap();
    around(&mut || step(&mut ctx));
    model.gpu_counters().unwrap().since(&before)
}
