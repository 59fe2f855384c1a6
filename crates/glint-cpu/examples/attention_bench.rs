//! Prefill attention at depth: a batch of `m` causal queries after `depth`
//! cached tokens, the fast (blocked) path against the plain loops, in one
//! run. SmolLM2-135M's heads by default (9 query heads over 3 kv heads of
//! 64), F16 cache with ggml's rounding (what `glint` runs), on a rayon
//! pool of `threads`.
//!
//! `cargo run --release -p glint-cpu --example attention_bench [runs] [m]
//! [depth] [threads] [plain] [avx2]` (default 5 runs, m = 512, depth =
//! 4096, 2 threads; `plain` = 1 also times the plain loops, `avx2` = 1 the
//! AVX2 tier, what a cpu without AVX-512 runs). Prints the median
//! milliseconds of each path and GFLOP/s (one multiply-add of `Q·K` and one
//! of `P·V` per element of a head per visible key).

use std::time::Instant;

use glint_backend::AttnParams;
use glint_cpu::{attention_with, Cache, Kernels};
use glint_testkit::Rng;
use half::f16;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map(|a| a.parse().expect("a whole number"))
        .unwrap_or(default)
}

fn main() {
    let (runs, m, depth, threads, plain, avx2) = (
        arg(1, 5),
        arg(2, 512),
        arg(3, 4096),
        arg(4, 2),
        arg(5, 0),
        arg(6, 0),
    );
    let (n_head, n_head_kv, hd) = (9, 3, 64);
    let n_kv = depth + m;
    let row = hd * n_head_kv;
    let mut rng = Rng(7);
    // q: [hd, n_head, m]; k, v: [row, n_kv] f16; mask: [n_kv, m] causal.
    let q: Vec<f32> = (0..hd * n_head * m).map(|_| rng.f32() * 2.0).collect();
    let k: Vec<f16> = (0..row * n_kv).map(|_| f16::from_f32(rng.f32())).collect();
    let v: Vec<f16> = (0..row * n_kv).map(|_| f16::from_f32(rng.f32())).collect();
    let mut mask = vec![0f32; n_kv * m];
    for (i, r) in mask.chunks_mut(n_kv).enumerate() {
        r[depth + i + 1..].fill(f32::NEG_INFINITY);
    }
    let p = AttnParams::new(n_head, n_head_kv, hd, n_kv);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool");
    // Visible (query, key) pairs times heads times head_dim, two FLOPs a
    // multiply-add, two products.
    let pairs: usize = (0..m).map(|i| depth + i + 1).sum();
    let flops = (pairs * n_head * hd * 4) as f64;
    let time = |kernels: Kernels| {
        let mut out = vec![0f32; hd * n_head * m];
        let mut ms: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                pool.install(|| {
                    attention_with(
                        kernels,
                        true,
                        &q,
                        Cache::F16(&k),
                        Cache::F16(&v),
                        &mask,
                        &p,
                        &mut out,
                        true,
                    )
                });
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        let med = ms[ms.len() / 2];
        println!(
            "{kernels:?}: m {m} at depth {depth}, {threads} threads: median {med:.2} ms \
             (min {:.2}, max {:.2}), {:.1} GFLOP/s",
            ms[0],
            ms[ms.len() - 1],
            flops / med / 1e6
        );
    };
    time(Kernels::Fast);
    if avx2 != 0 {
        time(Kernels::Avx2);
    }
    if plain != 0 {
        time(Kernels::Plain);
    }
}
