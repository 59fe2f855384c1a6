//! The expected probabilities of llama.cpp's own `tests/test-sampling.cpp`
//! (ggml-org/llama.cpp), ported: candidates built from probabilities
//! (`logit = ln p`), the sampler applied, then `dist` (which normalizes `p`),
//! every `p` within 1e-5 of llama.cpp's expectation, in array order.

use glint_sample::{
    Dist, Dry, MinP, Penalties, Sampler, Temp, TempExt, TokenData, TokenDataArray, TopK, TopNSigma,
    TopP, Typical, Xtc,
};

fn from_probs(probs: &[f32]) -> TokenDataArray {
    TokenDataArray {
        data: probs
            .iter()
            .enumerate()
            .map(|(i, &p)| TokenData {
                id: i as u32,
                logit: p.ln(),
                p,
            })
            .collect(),
        selected: None,
        sorted: false,
    }
}

fn check(cur: &TokenDataArray, expected: &[f32]) {
    let got: Vec<f32> = cur.data.iter().map(|t| t.p).collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "size: got {got:?}, want {expected:?}"
    );
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() < 1e-5, "got {got:?}, want {expected:?}");
    }
}

/// Apply `smpl`, then dist(0), compare.
fn run(probs: &[f32], mut smpl: impl Sampler, expected: &[f32]) {
    let mut cur = from_probs(probs);
    smpl.apply(&mut cur);
    Dist::new(0).apply(&mut cur);
    check(&cur, expected);
}

const P4: [f32; 4] = [0.1, 0.2, 0.3, 0.4];

#[test]
fn temp() {
    run(&P4, Temp::new(1.0), &P4);
    run(&P4, Temp::new(0.0), &[0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn temp_ext() {
    run(&P4, TempExt::new(1.0, 0.0, 1.0), &P4);
    run(&P4, TempExt::new(0.0, 0.0, 1.0), &[0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn top_k() {
    run(&P4, TopK::new(1), &[1.0]);
    run(&P4, TopK::new(3), &[0.44444, 0.33333, 0.22222]);
    run(&P4, TopK::new(4), &[0.4, 0.3, 0.2, 0.1]);
    run(&P4, TopK::new(0), &P4);
}

#[test]
fn top_p() {
    run(&P4, TopP::new(0.0, 0), &[1.0]);
    run(&P4, TopP::new(0.7, 0), &[0.571429, 0.428571]);
    run(&P4, TopP::new(0.8, 0), &[0.44444, 0.33333, 0.22222]);
    run(&P4, TopP::new(1.0, 0), &P4);
}

#[test]
fn min_p() {
    run(&P4, MinP::new(0.00, 0), &P4);
    run(&P4, MinP::new(0.24, 0), &P4);
    run(&P4, MinP::new(0.26, 0), &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]);
    run(&P4, MinP::new(0.49, 0), &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]);
    run(&P4, MinP::new(0.51, 0), &[0.3 / 0.7, 0.4 / 0.7]);
    run(&P4, MinP::new(0.74, 0), &[0.3 / 0.7, 0.4 / 0.7]);
    run(&P4, MinP::new(0.76, 0), &[1.0]);
    run(&P4, MinP::new(1.00, 0), &[1.0]);
    run(&P4, MinP::new(1.05, 0), &[1.0]);
}

fn run_xtc(p: f32, t: f32, expected: &[f32]) {
    // llama.cpp: llama_sampler_init_xtc(p, t, 0, 0), no dist afterwards.
    let mut cur = from_probs(&[0.4, 0.3, 0.2, 0.1]);
    Xtc::new(p, t, 0, 0).apply(&mut cur);
    check(&cur, expected);
}

#[test]
fn xtc_should() {
    run_xtc(0.99, 0.09, &[0.1]);
    run_xtc(0.99, 0.19, &[0.2, 0.1]);
    run_xtc(0.99, 0.29, &[0.3, 0.2, 0.1]);
}

#[test]
fn xtc_should_not() {
    run_xtc(0.99, 0.39, &[0.4, 0.3, 0.2, 0.1]);
}

#[test]
fn typical() {
    // No dist after typical in llama.cpp's test.
    let mut cur = from_probs(&[0.97, 0.01, 0.01, 0.01]);
    Typical::new(0.5, 0).apply(&mut cur);
    check(&cur, &[0.97]);
    let mut cur = from_probs(&[0.4, 0.2, 0.2, 0.2]);
    Typical::new(0.5, 0).apply(&mut cur);
    check(&cur, &[0.2, 0.2, 0.2]);
}

fn run_penalties(last: &[u32], expected: &[f32], repeat: f32, freq: f32, present: f32) {
    let mut s = Penalties::new(last.len(), repeat, freq, present);
    for &t in last {
        s.accept(t);
    }
    run(&[0.2; 5], s, expected);
}

#[test]
fn penalties() {
    run_penalties(&[0], &[0.0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0);
    run_penalties(&[0, 1, 2], &[0.0, 0.0, 0.0, 0.5, 0.5], 50.0, 0.0, 0.0);
    run_penalties(&[0, 1, 2, 0, 0], &[0.0, 0.0, 0.0, 0.5, 0.5], 50.0, 0.0, 0.0);

    run_penalties(
        &[0],
        &[0.000011, 0.249997, 0.249997, 0.249997, 0.249997],
        1.0,
        5.0,
        5.0,
    );
    run_penalties(
        &[0, 1, 2],
        &[0.000023, 0.000023, 0.000023, 0.499966, 0.499966],
        1.0,
        5.0,
        5.0,
    );
    run_penalties(
        &[0, 1, 2, 0, 0],
        &[0.000000, 0.000023, 0.000023, 0.499977, 0.499977],
        1.0,
        5.0,
        5.0,
    );
}

#[allow(clippy::too_many_arguments)] // llama.cpp's test_dry signature
fn run_dry(
    probs: &[f32],
    last: &[u32],
    expected: &[f32],
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    last_n: i32,
    breakers: &[Vec<u32>],
) {
    // llama_sampler_init_dry_testing: context size = 1024 in current llama.cpp.
    let mut s = Dry::new(1024, multiplier, base, allowed_length, last_n, breakers);
    for &t in last {
        s.accept(t);
    }
    run(probs, s, expected);
}

#[test]
fn dry() {
    let p4 = [0.25; 4];
    let p5 = [0.2; 5];
    run_dry(&p4, &[0, 1], &p4, 1.0, 1.1, 2, 4, &[]);
    run_dry(
        &p4,
        &[0, 1, 2, 0, 1],
        &[0.296923, 0.296923, 0.109232, 0.296923],
        1.0,
        1.1,
        2,
        5,
        &[],
    );
    run_dry(&p5, &[0, 1, 3, 4, 0, 1], &p5, 1.0, 1.1, 2, 6, &[vec![3]]);
    run_dry(
        &p5,
        &[0, 1, 2, 0, 1],
        &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
        2.0,
        1.1,
        2,
        5,
        &[],
    );
    run_dry(&p5, &[0, 1, 2, 3, 4, 0, 1], &p5, 1.0, 1.1, 4, 7, &[]);
}

#[test]
fn top_n_sigma() {
    // Current llama.cpp ends top-n-sigma with a sorting softmax, and its
    // test expects sorted output; older versions expected {0, 0, .43, .57}.
    run(&P4, TopNSigma::new(1.0), &[0.571429, 0.428571, 0.0, 0.0]);
    // n == 0 is a no-op (llama.cpp PR #13345), not greedy.
    run(&P4, TopNSigma::new(0.0), &P4);
    run(&P4, TopNSigma::new(3.0), &[0.4, 0.3, 0.2, 0.1]);
}

/// llama.cpp's `test_sampler_queue`: n_vocab tokens with logit ln(id), a
/// sequence of k/p/m samplers (min_keep 1), checking sizes and end tokens.
fn sampler_queue(n_vocab: usize, seq: &str, top_k: i32, top_p: f32, min_p: f32) {
    let logits: Vec<f32> = (0..n_vocab).map(|i| (i as f32).ln()).collect();
    let mut cur = TokenDataArray::from_logits(&logits);
    let n_vocab = n_vocab as i32;
    let mut min_token_id: i32 = 0;
    let max_token_id = n_vocab - 1;
    for s in seq.chars() {
        match s {
            'k' => TopK::new(top_k).apply(&mut cur),
            'p' => TopP::new(top_p, 1).apply(&mut cur),
            'm' => MinP::new(min_p, 1).apply(&mut cur),
            _ => unreachable!("test input"),
        }
        Dist::new(0).apply(&mut cur);
        let size = cur.data.len() as i32;
        let id = |i: i32| cur.data[i as usize].id as i32;
        match s {
            'k' => {
                let expected_size = size.min(top_k);
                min_token_id = min_token_id.max(n_vocab - top_k);
                assert_eq!(size, expected_size, "{seq}");
                assert_eq!(id(0), max_token_id);
                assert_eq!(id(expected_size - 1), min_token_id);
            }
            'p' => {
                let softmax_divisor =
                    n_vocab * (n_vocab - 1) / 2 - min_token_id * (min_token_id - 1) / 2;
                let target = (top_p * softmax_divisor as f32).ceil() as i32;
                min_token_id = n_vocab;
                let mut expected_size = 0;
                let mut cumsum = 0;
                loop {
                    min_token_id -= 1;
                    expected_size += 1;
                    cumsum += min_token_id;
                    if cumsum >= target {
                        break;
                    }
                }
                if min_token_id == 1 {
                    min_token_id -= 1;
                    expected_size += 1;
                }
                assert_eq!(size, expected_size, "{seq} top_p {top_p}");
                assert!(!cur.sorted || id(0) == max_token_id);
                assert!(!cur.sorted || id(expected_size - 1) == min_token_id);
            }
            _ => {
                let mut expected_size = ((1.0 - min_p) * n_vocab as f32).ceil() as i32;
                expected_size = expected_size.max(1).min(size);
                min_token_id = ((min_p * n_vocab as f32).floor() as i32).max(1);
                min_token_id = min_token_id.max(n_vocab - size).min(n_vocab - 1);
                assert_eq!(size, expected_size, "{seq} min_p {min_p}");
                assert!(!cur.sorted || id(0) == max_token_id);
                assert!(!cur.sorted || id(expected_size - 1) == min_token_id);
            }
        }
    }
}

#[test]
fn sampler_queue_single() {
    sampler_queue(10000, "k", 10000, 1.0, 1.0);
    sampler_queue(10000, "k", 1, 1.0, 1.0);
    sampler_queue(10000, "p", 10000, 1.0, 1.0);
    sampler_queue(10000, "p", 10000, 0.0, 1.0);
    sampler_queue(10000, "m", 10000, 1.0, 1.0);
    sampler_queue(10000, "m", 10000, 1.0, 1e-12);
    sampler_queue(10000, "k", 100, 1.0, 1.0);
    sampler_queue(10000, "p", 10000, 0.0003, 1.0);
    sampler_queue(10000, "p", 10000, 0.8, 1.0);
    sampler_queue(10000, "m", 10000, 1.0, 9997.9 / 9999.0);
    sampler_queue(10000, "m", 10000, 1.0, 0.1);
}

#[test]
fn sampler_queue_combined() {
    for seq in [
        "kp", "km", "pk", "pm", "mk", "mp", "kpm", "kmp", "pkm", "pmk", "mkp", "mpk",
    ] {
        sampler_queue(10000, seq, 100, 0.8, 0.1);
    }
    sampler_queue(10000, "mp", 100, 0.8, 9997.9 / 9999.0);
}
