//! Kernel microbenchmarks: `mul_mat` of every Compute weight type on each
//! backend, as a matvec (m = 1, decode) and a matmul (m > 4, prefill), set
//! side by side with the same device's memory bandwidth measured in the
//! same run. Prints one markdown table.
//!
//! ```text
//! cargo bench --bench kernels                   # everything, a few minutes on 2 cores
//! cargo bench --bench kernels -- --quick        # fewer runs, smaller matmuls
//! cargo bench --bench kernels -- --backend cpu --types Q4_0,Q8_0
//! ```
//!
//! `--backend`: `cpu` (ggml numerics: activations quantized to the weight's
//! `vec_dot_type`, integer dots), `cpu-f32` (f32 against dequantized
//! weights, the oracle), `wgpu`, or `all` (the three). Several may be
//! joined with commas.
//!
//! Why these numbers: a matvec reads every weight byte once and does little
//! arithmetic per byte, so its bound is memory bandwidth; its weight bytes
//! per second are quoted as a share of the device's own bandwidth (cpu: a
//! multi-threaded f32 sum; wgpu: the faster of `copy_buffer_to_buffer` and a
//! copy kernel, `shaders/copy.wgsl`: an H200's Vulkan copy engine moved
//! about 0.8 TB/s, less than the matvecs read). That baseline is
//! measured at the start (its own rows) and again interleaved run by run
//! with each matvec (baseline, kernel, baseline, kernel, ...), and the share
//! is of the interleaved median: on a shared machine the load changes over
//! a run, and the two sides of a ratio should see the same load. A matmul
//! reuses each weight over m columns, so it is quoted in GFLOP/s
//! (`2·k·n·m / t`).
//!
//! Method: weights are random but valid (`glint_quant::quantize_row` of
//! random f32 where a quantizer exists, else random bytes with small f16
//! scales); 64 distinct rows are repeated to fill the matrix, since speed
//! does not depend on the values and the K-quantizers are slow. Warm-up runs
//! (which also compile wgpu pipelines) are not timed; each timed run is the
//! op plus `sync()`, so queued wgpu work is counted; on wgpu a run is 16 ops
//! (and the copy baseline 16 copies) in one submit, quoted per op, so a
//! submit's fixed cost does not hide the kernel (decode records a step's
//! ops into one submit too). Medians are quoted with
//! the min–max of the runs. One output element of each kernel is checked
//! against the scalar reference so a broken kernel cannot post a fast time.
//!
//! Run without `--bench` (as `cargo test --benches` does), it makes one
//! pass at tiny sizes to show that it still works.

use std::error::Error;
use std::hint::black_box;
use std::time::{Duration, Instant};

use glint_backend::{Backend, GgmlType, SharedBytes, TensorDesc, Usage};
use glint_cpu::{CpuBackend, Precision};
use glint_gpu::{GpuBackend, GpuOptions};
use glint_quant::{kquants, Support, TYPES};

type Res<T> = Result<T, Box<dyn Error>>;

/// Sizes and repeat counts of one run.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Bytes of the bandwidth baselines' buffers.
    bw_bytes: usize,
    bw_runs: usize,
    /// Matvec weight `[k, n]`.
    matvec_kn: (usize, usize),
    matvec_runs: usize,
    /// Matmul weight `[k, n]` and activation columns `m`.
    matmul_kn: (usize, usize),
    matmul_m: usize,
    matmul_runs: usize,
    /// Ops (and baseline copies) per timed run, then one `sync`; a run's
    /// time is quoted per op. wgpu: a submit and its wait cost a fixed
    /// time (about 0.5 ms on an H100 VM, more than a 4096² matvec takes),
    /// which a batch spreads, as a decode step's one submit does; cpu: 1.
    batch: usize,
}

/// Untimed runs before the timed ones.
const WARMUP_RUNS: usize = 1;
/// Distinct random rows, repeated to fill a weight matrix.
const DISTINCT_ROWS: usize = 64;
const MIB: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Cpu,
    CpuF32,
    Wgpu,
}

impl Which {
    fn parse(s: &str) -> Option<Vec<Which>> {
        Some(match s {
            "cpu" => vec![Which::Cpu],
            "cpu-f32" => vec![Which::CpuF32],
            "wgpu" => vec![Which::Wgpu],
            "all" => vec![Which::Cpu, Which::CpuF32, Which::Wgpu],
            _ => return None,
        })
    }

    /// Sizes for this backend. lavapipe runs WGSL on the cpu, 3–15× slower
    /// than the cpu backend on matmuls, so it gets smaller matmuls and fewer
    /// runs; the matvec shape is the same everywhere. Matmuls are small
    /// (k×n of 1024² and 512²) so a full run stays within minutes on two
    /// shared cores, where K-quant matmuls run near 0.3 GFLOP/s.
    fn sizes(self, mode: Mode) -> Sizes {
        let gpu = self == Which::Wgpu;
        let full = Sizes {
            bw_bytes: 256 * MIB,
            bw_runs: 9,
            matvec_kn: (4096, 4096),
            matvec_runs: if gpu { 9 } else { 15 },
            matmul_kn: if gpu { (512, 512) } else { (1024, 1024) },
            matmul_m: 512,
            matmul_runs: 3,
            batch: if gpu { 16 } else { 1 },
        };
        match mode {
            Mode::Full => full,
            // Full's matvec and matmul shapes; less data, fewer columns and runs.
            Mode::Quick => Sizes {
                bw_bytes: 64 * MIB,
                bw_runs: 5,
                matvec_runs: 5,
                matmul_m: if gpu { 128 } else { 256 },
                matmul_runs: 1,
                ..full
            },
            Mode::Smoke => Sizes {
                bw_bytes: 4 * MIB,
                bw_runs: 1,
                matvec_kn: (512, 64),
                matvec_runs: 1,
                matmul_kn: (512, 64),
                matmul_m: 16,
                matmul_runs: 1,
                batch: if gpu { 2 } else { 1 },
            },
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Full,
    Quick,
    Smoke,
}

struct Args {
    mode: Mode,
    backends: Vec<Which>,
    types: Vec<GgmlType>,
    /// `--matvec KxN`: the matvec's weight shape instead of the mode's
    /// (a weight larger than the GPU's last-level cache reads from memory).
    matvec_kn: Option<(usize, usize)>,
}

impl Args {
    fn sizes(&self, w: Which) -> Sizes {
        let sz = w.sizes(self.mode);
        Sizes {
            matvec_kn: self.matvec_kn.unwrap_or(sz.matvec_kn),
            ..sz
        }
    }
}

const USAGE: &str = "usage: cargo bench --bench kernels -- [--quick] \
[--backend cpu|cpu-f32|wgpu|all[,..]] [--types Q4_0,Q8_0,..] [--matvec KxN]";

fn parse_args() -> Res<Args> {
    let mut bench = false;
    let mut quick = false;
    let mut backends = vec![Which::Cpu, Which::Wgpu];
    let mut types: Vec<GgmlType> = TYPES
        .iter()
        .filter(|r| r.support == Support::Compute)
        .map(|r| r.ty)
        .collect();
    let mut matvec_kn = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => bench = true,
            "--matvec" => {
                let v = it.next().ok_or(USAGE)?;
                let kn = v
                    .split_once('x')
                    .and_then(|(k, n)| Some((k.parse().ok()?, n.parse().ok()?)))
                    .filter(|&(k, n): &(usize, usize)| k > 0 && n > 0 && k % 256 == 0)
                    .ok_or_else(|| format!("--matvec takes KxN, K a multiple of 256: `{v}`"))?;
                matvec_kn = Some(kn);
            }
            "--quick" => quick = true,
            "--backend" => {
                let v = it.next().ok_or(USAGE)?;
                backends.clear();
                for s in v.split(',') {
                    let w = Which::parse(s).ok_or_else(|| format!("unknown backend `{s}`"))?;
                    for b in w {
                        if !backends.contains(&b) {
                            backends.push(b);
                        }
                    }
                }
            }
            "--types" => {
                let v = it.next().ok_or(USAGE)?;
                types = v
                    .split(',')
                    .map(|s| match GgmlType::from_name(s) {
                        Some(t) if t.support() == Support::Compute => Ok(t),
                        Some(t) => Err(format!("{t} is not a weight type")),
                        None => Err(format!("unknown type `{s}`")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument `{a}`\n{USAGE}").into()),
        }
    }
    let mode = match (bench, quick) {
        (false, _) => Mode::Smoke,
        (true, true) => Mode::Quick,
        (true, false) => Mode::Full,
    };
    Ok(Args {
        mode,
        backends,
        types,
        matvec_kn,
    })
}

/// The workspace's one seeded generator.
use glint_testkit::Rng;

/// The f16 bytes of `v`.
fn f16_bytes(v: f32) -> [u8; 2] {
    let mut b = [0u8; 2];
    // One F16 element is always one whole block of two bytes.
    glint_quant::quantize_row(GgmlType::F16, &[v], &mut b).unwrap_or_default();
    b
}

/// Byte offsets of the f16 scales (`d`, and `dmin` where there is one) of
/// the types that have no quantizer.
fn scale_offsets(ty: GgmlType) -> Option<&'static [usize]> {
    use std::mem::offset_of;
    Some(match ty {
        GgmlType::Q2_K => &[
            offset_of!(kquants::BlockQ2_K, d),
            offset_of!(kquants::BlockQ2_K, dmin),
        ],
        GgmlType::Q3_K => &[offset_of!(kquants::BlockQ3_K, d)],
        GgmlType::Q5_K => &[
            offset_of!(kquants::BlockQ5_K, d),
            offset_of!(kquants::BlockQ5_K, dmin),
        ],
        _ => return None,
    })
}

/// One row of `k` elements of `ty`: quantized random f32, or random block
/// bytes with small random f16 scales (every bit pattern of the quants and
/// the 4/6-bit sub-scales is valid).
fn random_row(ty: GgmlType, k: usize, rng: &mut Rng) -> Res<Vec<u8>> {
    let row_bytes = ty.bytes_for(k as u64).ok_or("k not whole blocks")? as usize;
    let mut row = vec![0u8; row_bytes];
    match glint_quant::quantize_row(ty, &rng.vec(k), &mut row) {
        Ok(()) => Ok(row),
        Err(glint_quant::QuantError::Unsupported { .. }) => {
            let offs = scale_offsets(ty).ok_or_else(|| format!("no way to make {ty} blocks"))?;
            let mut row = rng.bytes(row_bytes);
            for block in row.chunks_exact_mut(ty.type_size()) {
                for &o in offs {
                    let s = f16_bytes(0.001 + 0.01 * rng.f32().abs());
                    block[o..o + 2].copy_from_slice(&s);
                }
            }
            Ok(row)
        }
        Err(e) => Err(e.into()),
    }
}

/// A `[k, n]` weight of `ty`: `DISTINCT_ROWS` random rows, repeated.
fn random_weight(ty: GgmlType, k: usize, n: usize, rng: &mut Rng) -> Res<Vec<u8>> {
    let rows = (0..DISTINCT_ROWS.min(n))
        .map(|_| random_row(ty, k, rng))
        .collect::<Res<Vec<_>>>()?;
    let mut w = Vec::with_capacity(rows[0].len() * n);
    for i in 0..n {
        w.extend_from_slice(&rows[i % rows.len()]);
    }
    Ok(w)
}

fn desc(ty: GgmlType, ne: [usize; 4], label: &str, usage: Usage) -> TensorDesc {
    TensorDesc {
        ty,
        ne,
        label: label.into(),
        usage,
    }
}

/// Median, min and max of some run times.
#[derive(Clone, Copy)]
struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
    runs: usize,
}

impl Stats {
    /// The figures of one op out of a run of `n`.
    fn per(self, n: usize) -> Stats {
        let n32 = n.max(1) as u32;
        Stats {
            median: self.median / n32,
            min: self.min / n32,
            max: self.max / n32,
            runs: self.runs,
        }
    }
}

fn stats(mut t: Vec<Duration>) -> Stats {
    t.sort();
    let n = t.len();
    let median = if n % 2 == 1 {
        t[n / 2]
    } else {
        (t[n / 2 - 1] + t[n / 2]) / 2
    };
    Stats {
        median,
        min: t[0],
        max: t[n - 1],
        runs: n,
    }
}

/// Times `runs` calls of `f` after `WARMUP_RUNS` untimed ones.
fn time(runs: usize, mut f: impl FnMut() -> Res<()>) -> Res<Stats> {
    for _ in 0..WARMUP_RUNS {
        f()?;
    }
    let mut t = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed());
    }
    Ok(stats(t))
}

/// One run of a bandwidth baseline: its wall time.
type Baseline<'a> = dyn FnMut() -> Res<Duration> + 'a;

/// Like [`time`], each timed run of `f` paired with one run of `base`
/// just before it; returns the stats of `f` and of `base`.
fn time_paired(
    runs: usize,
    mut f: impl FnMut() -> Res<()>,
    base: &mut Baseline<'_>,
) -> Res<(Stats, Stats)> {
    for _ in 0..WARMUP_RUNS {
        f()?;
    }
    let (mut t, mut tb) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        tb.push(base()?);
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed());
    }
    Ok((stats(t), stats(tb)))
}

/// One row of the table.
struct Row {
    backend: String,
    kernel: &'static str,
    ty: String,
    shape: String,
    stats: Stats,
    rate: String,
    share: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn print_table(rows: &[Row]) {
    println!(
        "| backend | kernel | type | shape | runs | median ms | min–max ms | rate | % of bw |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let s = &r.stats;
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2}–{:.2} | {} | {} |",
            r.backend,
            r.kernel,
            r.ty,
            r.shape,
            s.runs,
            ms(s.median),
            ms(s.min),
            ms(s.max),
            r.rate,
            r.share
        );
    }
}

/// Cpu memory bandwidth with all of the backend's threads, one run at a
/// time: read is an f32 sum over `bytes`; copy moves `2 * bytes` (read plus
/// write, counted like STREAM).
struct CpuBandwidth {
    n_threads: usize,
    // src, dst: [bytes / 4] f32
    src: Vec<f32>,
    dst: Vec<f32>,
}

impl CpuBandwidth {
    fn new(n_threads: usize, bytes: usize) -> Self {
        CpuBandwidth {
            n_threads,
            // Nonzero so no page stays the shared zero page.
            src: vec![1.0f32; bytes / 4],
            dst: vec![0.0f32; bytes / 4],
        }
    }

    fn chunk(&self) -> usize {
        self.src.len().div_ceil(self.n_threads).max(1)
    }

    fn read(&self) -> Duration {
        let chunk = self.chunk();
        let t0 = Instant::now();
        let total: f32 = std::thread::scope(|s| {
            let hs: Vec<_> = self
                .src
                .chunks(chunk)
                .map(|c| s.spawn(move || sum(c)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(f32::NAN)).sum()
        });
        let t = t0.elapsed();
        black_box(total);
        t
    }

    fn copy(&mut self) -> Duration {
        let chunk = self.chunk();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for (d, c) in self.dst.chunks_mut(chunk).zip(self.src.chunks(chunk)) {
                s.spawn(move || d.copy_from_slice(c));
            }
        });
        let t = t0.elapsed();
        black_box(&mut self.dst);
        t
    }
}

/// `runs` timed calls of `f` (which times itself) after the warm-up ones.
fn time_self(runs: usize, mut f: impl FnMut() -> Res<Duration>) -> Res<Stats> {
    for _ in 0..WARMUP_RUNS {
        f()?;
    }
    Ok(stats((0..runs).map(|_| f()).collect::<Res<_>>()?))
}

/// Sum with 16 independent accumulators so it vectorizes and is bound by
/// memory, not by the latency of one chain of adds.
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut it = x.chunks_exact(16);
    for c in &mut it {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + it.remainder().iter().sum::<f32>()
}

fn gbps(bytes: f64, d: Duration) -> f64 {
    bytes / d.as_secs_f64() / 1e9
}

/// The scalar reference of `out[row, col]` and a scale for its tolerance
/// (`Σ|w·x|` of the dequantized row).
fn reference(
    ty: GgmlType,
    w: &[u8],
    x: &[f32],
    k: usize,
    row: usize,
    col: usize,
) -> Res<(f32, f32)> {
    let rb = ty.bytes_for(k as u64).ok_or("k not whole blocks")? as usize;
    let wr = &w[row * rb..(row + 1) * rb];
    let xc = &x[col * k..(col + 1) * k];
    let mut deq = vec![0.0f32; k];
    glint_quant::dequantize_row(ty, wr, &mut deq)?;
    let mag = deq.iter().zip(xc).map(|(a, b)| (a * b).abs()).sum();
    Ok((glint_quant::dot_f32(ty, wr, xc)?, mag))
}

/// A weight `[k, n]` of `ty` times `m` random columns: `batch` ops and one
/// `sync` as one timed run, quoted per op (`base` is timed per copy the
/// same way by its caller); then two output elements checked against the
/// reference.
/// The cpu backend's ggml numerics quantize activations (errors near 1% of
/// `Σ|w·x|`), hence the loose tolerance: it catches garbage, not ulps.
fn bench_mul_mat<B: Backend>(
    b: &B,
    ty: GgmlType,
    (k, n): (usize, usize),
    m: usize,
    (runs, batch): (usize, usize),
    rng: &mut Rng,
    base: Option<&mut Baseline<'_>>,
) -> Res<(Stats, Option<Stats>)> {
    let wb = random_weight(ty, k, n, rng)?;
    let x = rng.vec(k * m);
    let w = b.weight(
        desc(ty, [k, n, 1, 1], "w", Usage::Weights),
        SharedBytes::from_vec(wb.clone()),
    )?;
    let xt = b.alloc(desc(GgmlType::F32, [k, m, 1, 1], "x", Usage::Scratch))?;
    b.write(&xt, 0, bytemuck::cast_slice(&x))?;
    let out = b.alloc(desc(GgmlType::F32, [n, m, 1, 1], "out", Usage::Scratch))?;
    let run = || {
        for _ in 0..batch {
            b.mul_mat(&w, &xt, &out)?;
        }
        b.sync()?;
        Ok(())
    };
    let (st, st_base) = match base {
        Some(base) => {
            let (st, sb) = time_paired(runs, run, base)?;
            (st.per(batch), Some(sb))
        }
        None => (time(runs, run)?.per(batch), None),
    };
    for (row, col) in [(0, 0), (n - 1, m - 1)] {
        let (want, mag) = reference(ty, &wb, &x, k, row, col)?;
        let mut got = [0u8; 4];
        b.read(&out, (col * n + row) * 4, &mut got)?;
        let got = f32::from_le_bytes(got);
        // Written so a NaN fails too.
        let close = (got - want).abs() <= 0.05 * mag + 1e-3;
        if !close {
            return Err(format!(
                "{} {ty} mul_mat [{k}, {n}] x {m}: out[{row}, {col}] = {got}, reference {want}",
                b.name()
            )
            .into());
        }
    }
    Ok((st, st_base))
}

/// The matvec and matmul rows of every type on one backend. `base` is one
/// run of the bandwidth baseline, moving `base_bytes`; each matvec's weight
/// bytes per second are quoted as a share of it, run interleaved.
fn bench_types<B: Backend>(
    b: &B,
    label: &str,
    sz: Sizes,
    types: &[GgmlType],
    base: &mut Baseline<'_>,
    base_bytes: f64,
    rows: &mut Vec<Row>,
) -> Res<()> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for &ty in types {
        let (k, n) = sz.matvec_kn;
        eprintln!("{label}: {ty} matvec [{k}, {n}]");
        let (st, sb) = bench_mul_mat(
            b,
            ty,
            sz.matvec_kn,
            1,
            (sz.matvec_runs, sz.batch),
            &mut rng,
            Some(base),
        )?;
        let bytes = ty.bytes_for(k as u64).unwrap_or(0) as f64 * n as f64;
        let rate = gbps(bytes, st.median);
        let share = match sb {
            Some(sb) => {
                let bw = gbps(base_bytes, sb.median);
                format!("{:.0}% of {bw:.2}", 100.0 * rate / bw)
            }
            None => String::new(),
        };
        rows.push(Row {
            backend: label.into(),
            kernel: "matvec",
            ty: ty.to_string(),
            shape: format!("{k}×{n}, m=1 ({:.1} MiB)", bytes / MIB as f64),
            stats: st,
            rate: format!("{rate:.2} GB/s"),
            share,
        });
        let ((k, n), m) = (sz.matmul_kn, sz.matmul_m);
        eprintln!("{label}: {ty} matmul [{k}, {n}] x {m}");
        let (st, _) = bench_mul_mat(
            b,
            ty,
            sz.matmul_kn,
            m,
            (sz.matmul_runs, sz.batch),
            &mut rng,
            None,
        )?;
        let flops = 2.0 * (k * n * m) as f64;
        rows.push(Row {
            backend: label.into(),
            kernel: "matmul",
            ty: ty.to_string(),
            shape: format!("{k}×{n}, m={m}"),
            stats: st,
            rate: format!("{:.2} GFLOP/s", flops / st.median.as_secs_f64() / 1e9),
            share: String::new(),
        });
    }
    Ok(())
}

fn baseline_row(label: &str, kernel: &'static str, bytes: usize, moved: f64, st: Stats) -> Row {
    Row {
        backend: label.into(),
        kernel,
        ty: "—".into(),
        shape: format!("{} MiB", bytes / MIB),
        stats: st,
        rate: format!("{:.2} GB/s", gbps(moved, st.median)),
        share: "100%".into(),
    }
}

fn run_cpu(precision: Precision, args: &Args, rows: &mut Vec<Row>) -> Res<()> {
    let b = CpuBackend::with_precision(None, precision)?;
    let label = match precision {
        Precision::Ggml => format!("cpu ggml, {} thr", b.n_threads()),
        Precision::F32 => format!("cpu f32, {} thr", b.n_threads()),
    };
    let sz = args.sizes(Which::Cpu);
    eprintln!("{label}: bandwidth");
    let mut bw = CpuBandwidth::new(b.n_threads(), sz.bw_bytes);
    let read = time_self(sz.bw_runs, || Ok(bw.read()))?;
    let copy = time_self(sz.bw_runs, || Ok(bw.copy()))?;
    let bytes = sz.bw_bytes as f64;
    let mut copy_row = baseline_row(&label, "copy (2×bytes)", sz.bw_bytes, 2.0 * bytes, copy);
    copy_row.share = format!(
        "{:.0}% of read",
        100.0 * gbps(2.0 * bytes, copy.median) / gbps(bytes, read.median)
    );
    rows.push(baseline_row(
        &label,
        "read (f32 sum)",
        sz.bw_bytes,
        bytes,
        read,
    ));
    rows.push(copy_row);
    let mut base = || Ok(bw.read());
    bench_types(&b, &label, sz, &args.types, &mut base, bytes, rows)
}

fn run_wgpu(b: &GpuBackend, args: &Args, rows: &mut Vec<Row>) -> Res<()> {
    let info = b.adapter_info();
    // `llvmpipe (LLVM 15.0.6, 256 bits)` -> `llvmpipe`: the table stays narrow.
    let name = info.name.split(" (").next().unwrap_or(&info.name);
    let label = format!("wgpu {name} ({:?})", info.backend);
    let sz = args.sizes(Which::Wgpu);
    eprintln!("{label}: copy bandwidth");
    let probe = b.copy_probe(sz.bw_bytes as u64)?;
    let engine = time_self(sz.bw_runs, || Ok(probe.time_batch(sz.batch)?))?;
    let kernel = time_self(sz.bw_runs, || Ok(probe.time_kernel_batch(sz.batch)?))?;
    let moved = 2.0 * sz.bw_bytes as f64;
    let moved_k = 2.0 * probe.kernel_bytes() as f64;
    rows.push(baseline_row(
        &label,
        "copy (2×bytes)",
        sz.bw_bytes,
        moved,
        engine,
    ));
    rows.push(baseline_row(
        &label,
        "copy kernel (2×bytes)",
        probe.kernel_bytes() as usize,
        moved_k,
        kernel,
    ));
    // The matvecs' share is of the faster way to move memory, timed
    // between their runs.
    let use_kernel = gbps(moved_k, kernel.median) > gbps(moved, engine.median);
    let mut base = || {
        Ok(if use_kernel {
            probe.time_kernel_batch(sz.batch)?
        } else {
            probe.time_batch(sz.batch)?
        })
    };
    let moved = if use_kernel { moved_k } else { moved };
    bench_types(b, &label, sz, &args.types, &mut base, moved, rows)
}

fn main() -> Res<()> {
    let args = parse_args()?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &w in &args.backends {
        let sz = args.sizes(w);
        let (mk, mn) = sz.matmul_kn;
        notes.push(format!(
            "{w:?}: bandwidth buffers {} MiB × {} runs; matvec {}×{} (k×n), m=1, {} runs; \
             matmul {mk}×{mn}, m={}, {} runs; {} op(s) or copies per run and sync, \
             times per op; {WARMUP_RUNS} warm-up run(s) untimed",
            sz.bw_bytes / MIB,
            sz.bw_runs,
            sz.matvec_kn.0,
            sz.matvec_kn.1,
            sz.matvec_runs,
            sz.matmul_m,
            sz.matmul_runs,
            sz.batch
        ));
        match w {
            Which::Cpu => run_cpu(Precision::Ggml, &args, &mut rows)?,
            Which::CpuF32 => run_cpu(Precision::F32, &args, &mut rows)?,
            // No adapter is a note, not a failure: the cpu rows still stand.
            Which::Wgpu => match GpuBackend::new(GpuOptions::default()) {
                Ok(b) => run_wgpu(&b, &args, &mut rows)?,
                Err(e) => notes.push(format!("wgpu skipped, no device: {e}")),
            },
        }
    }
    println!("kernels bench ({:?} mode)", args.mode);
    for n in &notes {
        println!("- {n}");
    }
    println!(
        "- matvec rate: weight bytes / median time. % of bw: of the same device's \
         cpu read (f32 sum) or the faster wgpu copy, engine or kernel (2×bytes / t), in GB/s, median of \
         runs interleaved with the matvec's. matmul rate: 2·k·n·m / median time."
    );
    println!();
    print_table(&rows);
    Ok(())
}
