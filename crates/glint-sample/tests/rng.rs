//! The random stream must be llama.cpp's. Golden values below were printed
//! by a C++ program compiled with g++ 12.2 (libstdc++, Debian 12): the
//! program and the exact lines are quoted next to each test.

// The golden values are pasted as printed (%.17g / %.9g), digits beyond the type.
#![allow(clippy::excessive_precision)]

use glint_sample::rng::Mt19937;
use glint_sample::{Dist, Sampler, TokenDataArray};

/// The first `n` values `draw` takes from `std::mt19937 r(seed)`.
fn draws<T>(seed: u32, n: usize, mut draw: impl FnMut(&mut Mt19937) -> T) -> Vec<T> {
    let mut r = Mt19937::new(seed);
    (0..n).map(|_| draw(&mut r)).collect()
}

#[test]
fn mt19937_10000th_output_of_default_seed_is_the_standards_value() {
    // [rand.predef]: the 10000th consecutive invocation of a
    // default-constructed mt19937 (seed 5489) produces 4123659995.
    let mut r = Mt19937::new(5489);
    for _ in 0..9999 {
        r.next_u32();
    }
    assert_eq!(r.next_u32(), 4_123_659_995);
}

#[test]
fn mt19937_seed_0_matches_libstdcxx() {
    // std::mt19937 r(0); r() x5
    assert_eq!(
        draws(0, 5, Mt19937::next_u32),
        [2357136044, 2546248239, 3071714933, 3626093760, 2588848963]
    );
}

#[test]
fn uniform_double_matches_libstdcxx() {
    // std::mt19937 r(42); std::uniform_real_distribution<double> d(0.0f, 1.0f); d(r) x5, %.17g
    assert_eq!(
        draws(42, 5, Mt19937::canonical_f64),
        [
            0.796_542_984_287_845_98,
            0.183_434_787_893_368_48,
            0.779_690_997_612_661_25,
            0.596_850_161_580_056_55,
            0.445_832_757_548_433_43,
        ]
    );
}

#[test]
fn uniform_float_matches_libstdcxx() {
    // std::mt19937 r(42); std::uniform_real_distribution<float> d(0.0f, 1.0f); d(r) x5, %.9g
    assert_eq!(
        draws(42, 5, Mt19937::canonical_f32),
        [
            0.374_540_12f32,
            0.796_543_002,
            0.950_714_29,
            0.183_434_784,
            0.731_993_914,
        ]
    );
}

#[test]
fn discrete_distribution_matches_libstdcxx() {
    // std::mt19937 r(1234); std::discrete_distribution<int> d({0.1f, 0.2f, 0.3f, 0.4f}); d(r) x20
    let w = [0.1f32, 0.2, 0.3, 0.4];
    assert_eq!(
        draws(1234, 20, |r| r.discrete(w.iter().copied())),
        [2, 3, 3, 3, 3, 1, 1, 3, 1, 1, 0, 2, 2, 3, 0, 0, 2, 0, 1, 1]
    );

    // std::mt19937 r(7); weights {0.5, 0.25, 0.125, 0.0625, 0.0625}
    let w = [0.5f32, 0.25, 0.125, 0.0625, 0.0625];
    assert_eq!(
        draws(7, 20, |r| r.discrete(w.iter().copied())),
        [0, 0, 4, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 1, 1, 1, 0, 3, 0, 2]
    );
}

#[test]
fn discrete_with_one_weight_returns_zero_without_drawing() {
    let mut a = Mt19937::new(3);
    let mut b = Mt19937::new(3);
    assert_eq!(a.discrete([1.0f32].into_iter()), 0);
    assert_eq!(a.next_u32(), b.next_u32());
}

const LOGITS: [f32; 8] = [1.0, 2.5, -0.5, 3.0, 0.0, 2.9, -2.0, 1.5];

fn draw(d: &mut Dist) -> usize {
    let mut cur = TokenDataArray::from_logits(&LOGITS);
    d.apply(&mut cur);
    cur.selected.unwrap()
}

#[test]
fn dist_matches_llama_cpp_dist_apply_compiled_with_gcc() {
    // A transcription of llama_sampler_dist_apply (expf softmax, double sums,
    // uniform_real_distribution<double> on mt19937(42)), g++ 12:
    // dist42: 5 1 5 3 3 1 3 3 1 5 1 5 7 0 7 5 4 0 0 3 3 1 7 1
    let mut d = Dist::new(42);
    let got: Vec<usize> = (0..24).map(|_| draw(&mut d)).collect();
    assert_eq!(
        got,
        [5, 1, 5, 3, 3, 1, 3, 3, 1, 5, 1, 5, 7, 0, 7, 5, 4, 0, 0, 3, 3, 1, 7, 1]
    );
}

#[test]
fn dist_same_seed_same_sequence_different_seed_differs() {
    let run = |seed| {
        let mut d = Dist::new(seed);
        (0..64).map(|_| draw(&mut d)).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
    assert_ne!(run(1), run(2));
}

#[test]
fn dist_reset_restarts_the_stream_and_clone_copies_it() {
    let mut d = Dist::new(99);
    let first: Vec<usize> = (0..10).map(|_| draw(&mut d)).collect();
    d.reset();
    let again: Vec<usize> = (0..10).map(|_| draw(&mut d)).collect();
    assert_eq!(first, again);

    let mut c = d.clone();
    let a: Vec<usize> = (0..10).map(|_| draw(&mut d)).collect();
    let b: Vec<usize> = (0..10).map(|_| draw(&mut c)).collect();
    assert_eq!(a, b);
}

#[test]
fn dist_frequencies_follow_the_softmax() {
    // 20000 draws: each token's share within 0.015 of its probability.
    let mut d = Dist::new(5);
    let mut counts = [0usize; 8];
    let n = 20_000;
    for _ in 0..n {
        counts[draw(&mut d)] += 1;
    }
    let max = LOGITS.iter().copied().fold(f32::MIN, f32::max);
    let z: f64 = LOGITS.iter().map(|&l| f64::from(l - max).exp()).sum();
    for (i, &l) in LOGITS.iter().enumerate() {
        let p = f64::from(l - max).exp() / z;
        let share = counts[i] as f64 / n as f64;
        assert!(
            (share - p).abs() < 0.015,
            "token {i}: share {share} vs p {p}"
        );
    }
}

#[test]
fn default_seed_resolves_to_a_random_seed() {
    // Two dist samplers with DEFAULT_SEED get (almost surely) different seeds.
    let a = Dist::new(glint_sample::DEFAULT_SEED).seed_cur();
    let b = Dist::new(glint_sample::DEFAULT_SEED).seed_cur();
    let c = Dist::new(glint_sample::DEFAULT_SEED).seed_cur();
    assert!(a != b || b != c);
    assert_eq!(Dist::new(17).seed_cur(), 17);
}
