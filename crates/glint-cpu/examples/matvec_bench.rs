//! Matvec throughput of `mul_mat_ggml` per weight type, in GB/s of weight
//! bytes (G multiply-adds/s for m > 1): ggml's reference dots (what the cpu backend used before
//! `qdot`), the plain kernels, the fast ones without AMX, and the fast ones
//! (AMX tiles from `AMX_MIN_M` columns where the cpu has them), side by side
//! in one run.
//!
//! `cargo run --release -p glint-cpu --example matvec_bench [runs] [m] [k] [n]
//! [types] [fast]` (default 15 runs, m = 1, k = n = 4096, every type;
//! median of the runs). `types`: names to time, comma-separated (`q5_0,q4_1`);
//! `fast`: time only the vector kernels: the AVX2 tier, and the fast ones with and without AMX (a prefill's
//! m = 512 takes the reference loops minutes).

use std::time::Instant;

use glint_backend::GgmlType as T;
use glint_cpu::{mul_mat_ggml_with, Kernels, WeightRows};
use glint_quant::{Support, TYPES};

/// The workspace's one seeded generator: deterministic inputs.
use glint_testkit::Rng;

/// Random rows of `ty`: quantized from random data where glint_quant has a
/// quantizer, else random bytes (the speed does not depend on the values).
fn weights(ty: T, k: usize, n: usize, rng: &mut Rng) -> (Vec<u8>, usize) {
    let row_bytes = ty.bytes_for(k as u64).unwrap() as usize;
    let mut w = vec![0u8; row_bytes * n];
    let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
    for row in w.chunks_mut(row_bytes) {
        if glint_quant::quantize_row(ty, &x, row).is_err() {
            row.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
        }
    }
    (w, row_bytes)
}

/// The columns of the table, per pool: the reference loops, the plain
/// kernels, the AVX2 tier (what a cpu without AVX-512 runs), the fast ones
/// without the AMX tiles, the fast ones.
const KERNELS: [Kernels; 5] = [
    Kernels::Reference,
    Kernels::Plain,
    Kernels::Avx2,
    Kernels::NoAmx,
    Kernels::Fast,
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(15);
    let m: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let k: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let n: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let only: Option<Vec<String>> = args
        .get(5)
        .filter(|s| *s != "all")
        .map(|s| s.split(',').map(|t| t.trim().to_lowercase()).collect());
    let fast_only = args.get(6).is_some_and(|s| s == "fast");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let x: Vec<f32> = (0..k * m).map(|_| rng.f32()).collect();
    let mut out = vec![0f32; n * m];
    let unit = if m == 1 {
        "GB/s of weight bytes"
    } else {
        "G multiply-adds/s"
    };
    println!("k = {k}, n = {n}, m = {m}, median of {runs} runs; {unit}");
    println!(
        "{:6} {:>8} | {:>9} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} {:>9} | fast/ref",
        "type",
        "MiB",
        "ref 1t",
        "plain 1t",
        "avx2 1t",
        "no-amx 1t",
        "fast 1t",
        "ref 2t",
        "plain 2t",
        "avx2 2t",
        "no-amx 2t",
        "fast 2t"
    );
    let pools: Vec<rayon::ThreadPool> = [1, 2]
        .iter()
        .map(|&t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        })
        .collect();
    // Every block-quantized weight type, from glint_quant's table.
    let quantized = TYPES
        .iter()
        .filter(|t| t.support == Support::Compute && t.block_size > 1)
        .map(|t| t.ty)
        .filter(|ty| {
            only.as_ref()
                .is_none_or(|o| o.contains(&ty.to_string().to_lowercase()))
        });
    for ty in quantized {
        let (bytes, row_bytes) = weights(ty, k, n, &mut rng);
        let w = WeightRows {
            ty,
            bytes: &bytes,
            row_bytes,
            k,
            n,
        };
        let gbs = |pool: &rayon::ThreadPool, kern: Kernels, out: &mut [f32]| {
            let times: Vec<f64> = (0..runs + 1)
                .map(|_| {
                    let t = Instant::now();
                    pool.install(|| mul_mat_ggml_with(kern, w, &x, m, out))
                        .unwrap();
                    t.elapsed().as_secs_f64()
                })
                .skip(1)
                .collect();
            // One column: weight bytes a second; more: multiply-adds.
            let work = if m == 1 { bytes.len() } else { k * n * m };
            work as f64 / median(times) / 1e9
        };
        let mut row = Vec::new();
        for pool in &pools {
            for kern in KERNELS {
                let timed =
                    !fast_only || matches!(kern, Kernels::Fast | Kernels::NoAmx | Kernels::Avx2);
                row.push(if timed {
                    gbs(pool, kern, &mut out)
                } else {
                    f64::NAN
                });
            }
        }
        println!(
            "{:6} {:8.2} | {:9.2} {:9.2} {:9.2} {:9.2} {:9.2} | {:9.2} {:9.2} {:9.2} {:9.2} {:9.2} | {:.1}x",
            ty.to_string(),
            bytes.len() as f64 / (1 << 20) as f64,
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            row[8],
            row[9],
            row[9] / row[5]
        );
    }
}
