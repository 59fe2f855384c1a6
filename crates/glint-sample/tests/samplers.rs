//! What each sampler must and must not do, on fixed seeds.

use glint_sample::rng::Mt19937;
use glint_sample::{
    Chain, Dist, Dry, Greedy, LogitBias, MinP, Mirostat, MirostatV2, Penalties, Sampler, Temp,
    TempExt, TokenData, TokenDataArray, TopK, TopNSigma, TopP, Typical, Xtc,
};

/// Ten equal logits after DRY `s` has accepted `ctx`.
fn dry_after(s: &mut Dry, ctx: &[u32]) -> TokenDataArray {
    for &t in ctx {
        s.accept(t);
    }
    let mut cur = TokenDataArray::from_logits(&[0.0; 10]);
    s.apply(&mut cur);
    cur
}

/// n logits uniform in [-5, 5) from a seeded generator.
fn random_logits(seed: u32, n: usize) -> Vec<f32> {
    let mut r = Mt19937::new(seed);
    (0..n).map(|_| r.canonical_f32() * 10.0 - 5.0).collect()
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|x| x / z).collect()
}

fn ids(cur: &TokenDataArray) -> Vec<u32> {
    cur.data.iter().map(|t| t.id).collect()
}

#[test]
fn from_logits_is_llama_sampler_samples_array() {
    // Seed 003: 32000 entries {id, logit, 0}, selected -1, sorted false;
    // greedy then selects the index of the largest logit (token 13, "\n").
    let mut logits = random_logits(1, 32000);
    logits[13] = 100.0;
    let mut cur = TokenDataArray::from_logits(&logits);
    assert_eq!(cur.len(), 32000);
    assert_eq!(cur.selected, None);
    assert!(!cur.sorted);
    assert_eq!(
        cur.data[5],
        TokenData {
            id: 5,
            logit: logits[5],
            p: 0.0
        }
    );
    let mut g = Greedy;
    g.apply(&mut cur);
    assert_eq!(cur.selected, Some(13));
    assert_eq!(cur.selected_token(), Some(13));
    assert_eq!(g.name(), "greedy");
}

#[test]
fn greedy_takes_the_first_of_equal_maxima_and_keeps_the_array() {
    let mut cur = TokenDataArray::from_logits(&[1.0, 3.0, 3.0, 2.0]);
    Greedy.apply(&mut cur);
    assert_eq!(cur.selected, Some(1));
    assert_eq!(cur.len(), 4);
}

#[test]
fn top_k_never_returns_a_token_outside_the_k_best() {
    for seed in 0..200u32 {
        let logits = random_logits(seed, 500);
        let mut sorted = logits.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let kth = sorted[9];
        let mut chain = Chain::new().with(TopK::new(10)).with(Dist::new(seed));
        for _ in 0..5 {
            let tok = chain.sample(&logits).unwrap();
            assert!(
                logits[tok as usize] >= kth,
                "seed {seed}: token {tok} not in top 10"
            );
        }
        let mut cur = TokenDataArray::from_logits(&logits);
        TopK::new(10).apply(&mut cur);
        assert_eq!(cur.len(), 10);
        assert!(cur.sorted);
        assert!(cur.data.windows(2).all(|w| w[0].logit >= w[1].logit));
    }
}

#[test]
fn top_p_keeps_the_minimal_prefix_reaching_p_and_min_keep() {
    for seed in 0..50u32 {
        let logits = random_logits(seed, 200);
        let probs = softmax(&logits);
        let mut order: Vec<usize> = (0..200).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        for &(p, min_keep) in &[(0.5f32, 0usize), (0.9, 0), (0.3, 40)] {
            let mut cur = TokenDataArray::from_logits(&logits);
            TopP::new(p, min_keep).apply(&mut cur);
            let n = cur.len();
            let mass = |k: usize| order[..k].iter().map(|&i| probs[i]).sum::<f64>();
            assert!(n >= min_keep);
            assert!(
                mass(n) >= p as f64 - 1e-5,
                "seed {seed} p {p}: kept {n}, mass {}",
                mass(n)
            );
            if n > min_keep.max(1) {
                assert!(
                    mass(n - 1) < p as f64 + 1e-5,
                    "seed {seed} p {p}: {n} is not minimal"
                );
            }
            assert_eq!(
                ids(&cur),
                order[..n].iter().map(|&i| i as u32).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn min_p_threshold_is_min_p_times_p_max() {
    for seed in 0..50u32 {
        let logits = random_logits(seed, 300);
        let probs = softmax(&logits);
        let p_max = probs.iter().copied().fold(0.0, f64::max);
        let mut cur = TokenDataArray::from_logits(&logits);
        MinP::new(0.2, 0).apply(&mut cur);
        let kept: Vec<u32> = ids(&cur);
        let want: Vec<u32> = (0..300u32)
            .filter(|&i| probs[i as usize] >= 0.2 * p_max)
            .collect();
        // Unsorted input keeps its order.
        assert_eq!(kept, want, "seed {seed}");
        assert!(!cur.sorted);
    }
    // min_keep wins over the threshold: sorted fallback keeps the best 5.
    let logits = [10.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5];
    let mut cur = TokenDataArray::from_logits(&logits);
    MinP::new(0.5, 5).apply(&mut cur);
    assert_eq!(ids(&cur), [0, 6, 5, 4, 3]);
}

#[test]
fn typical_keeps_tokens_closest_to_the_entropy() {
    let logits = random_logits(11, 64);
    let probs = softmax(&logits);
    let h: f64 = probs.iter().map(|p| -p * p.ln()).sum();
    let mut by_score: Vec<usize> = (0..64).collect();
    by_score.sort_by(|&a, &b| {
        (-probs[a].ln() - h)
            .abs()
            .total_cmp(&(-probs[b].ln() - h).abs())
    });
    let mut cur = TokenDataArray::from_logits(&logits);
    Typical::new(0.6, 0).apply(&mut cur);
    let n = cur.len();
    // Kept: the first n by |−ln p − H|, with mass just over 0.6.
    assert_eq!(
        ids(&cur),
        by_score[..n].iter().map(|&i| i as u32).collect::<Vec<_>>()
    );
    let mass: f64 = by_score[..n].iter().map(|&i| probs[i]).sum();
    let mass_less: f64 = by_score[..n - 1].iter().map(|&i| probs[i]).sum();
    assert!(mass > 0.6 - 1e-5 && mass_less <= 0.6 + 1e-5);
    // The most probable token is not the most typical here.
    assert_ne!(
        by_score[0],
        (0..64)
            .max_by(|&a, &b| probs[a].total_cmp(&probs[b]))
            .unwrap()
    );
}

#[test]
fn temperature_divides_logits_and_zero_keeps_only_the_best() {
    let logits = [1.0f32, -2.0, 4.0, 0.5];
    let mut cur = TokenDataArray::from_logits(&logits);
    Temp::new(2.0).apply(&mut cur);
    let got: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
    assert_eq!(got, [0.5, -1.0, 2.0, 0.25]);

    let mut cur = TokenDataArray::from_logits(&logits);
    Temp::new(0.0).apply(&mut cur);
    let got: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
    assert_eq!(
        got,
        [f32::NEG_INFINITY, f32::NEG_INFINITY, 4.0, f32::NEG_INFINITY]
    );
    // Any seed now draws token 2.
    for seed in 0..20 {
        let mut c = cur.clone();
        Dist::new(seed).apply(&mut c);
        assert_eq!(c.selected_token(), Some(2));
    }
}

#[test]
fn dynatemp_follows_the_entropy_formula() {
    // Uniform over 4: normalized entropy 1 -> max temp = temp + range.
    let s = TempExt::new(1.0, 0.5, 1.0);
    let t = s.dyn_temp(&TokenDataArray::from_logits(&[0.0; 4])).unwrap();
    assert!((t - 1.5).abs() < 1e-6);
    // p = {0.7, 0.1, 0.1, 0.1}: H = 0.940 nats, H / ln 4 = 0.6783;
    // exponent 2: 0.5 + 1.0 * 0.6783^2 = 0.9601.
    let logits: Vec<f32> = [0.7f32, 0.1, 0.1, 0.1].iter().map(|p| p.ln()).collect();
    let cur = TokenDataArray::from_logits(&logits);
    let h: f64 = [0.7f64, 0.1, 0.1, 0.1].iter().map(|p| -p * p.ln()).sum();
    let want = 0.5 + (h / 4f64.ln()).powi(2);
    let t = TempExt::new(1.0, 0.5, 2.0).dyn_temp(&cur).unwrap() as f64;
    assert!(
        (t - want).abs() < 1e-5 && (want - 0.9601).abs() < 1e-3,
        "{t} vs {want}"
    );
    // Applying scales the (sorted) logits by that temperature.
    let mut c = cur.clone();
    TempExt::new(1.0, 0.5, 2.0).apply(&mut c);
    assert!((c.data[0].logit as f64 - 0.7f64.ln() / want).abs() < 1e-4);
    let psum: f32 = c.data.iter().map(|t| t.p).sum();
    assert!((psum - 1.0).abs() < 1e-6);
    // range 0: plain temperature.
    assert_eq!(TempExt::new(0.7, 0.0, 1.0).dyn_temp(&cur), Some(0.7));
    // min temp clamps at 0: temp 0.2, range 0.5, one-hot-ish -> near 0.
    let peaked = TokenDataArray::from_logits(&[50.0, 0.0, 0.0]);
    assert!(TempExt::new(0.2, 0.5, 1.0).dyn_temp(&peaked).unwrap() < 1e-3);
}

/// Twenty draws from mirostat sampler `s` (either version): after each,
/// `mu` has moved by `eta` times the selected token's surprise error
/// against `tau`. `check(cur, mu)` sees each draw with the `mu` it ran with.
fn mu_steps<S: Sampler>(
    s: &mut S,
    mu_of: fn(&S) -> f32,
    logits: &[f32],
    (tau, eta): (f32, f32),
    check: impl Fn(&TokenDataArray, f32),
) {
    let mut mu = mu_of(s);
    for step in 0..20 {
        let mut cur = TokenDataArray::from_logits(logits);
        s.apply(&mut cur);
        let idx = cur.selected.unwrap();
        check(&cur, mu);
        let surprise = -cur.data[idx].p.log2();
        let want = mu - eta * (surprise - tau);
        assert!(
            (mu_of(s) - want).abs() < 1e-6,
            "step {step}: mu {} vs {want}",
            mu_of(s)
        );
        mu = mu_of(s);
    }
}

#[test]
fn mirostat_v2_updates_mu_by_eta_times_surprise_error() {
    let logits = random_logits(3, 100);
    let (tau, eta) = (3.0f32, 0.1f32);
    let mut s = MirostatV2::new(1234, tau, eta);
    assert_eq!(s.mu(), 2.0 * tau);
    mu_steps(&mut s, MirostatV2::mu, &logits, (tau, eta), |cur, mu| {
        // Everything kept has surprise <= mu (or only the best is left).
        assert!(cur.len() == 1 || cur.data.iter().all(|t| -t.p.log2() <= mu + 1e-4));
    });
    s.reset();
    assert_eq!(s.mu(), 6.0);
}

#[test]
fn mirostat_v1_updates_mu_by_eta_times_surprise_error() {
    let logits = random_logits(4, 1000);
    let (tau, eta) = (5.0f32, 0.1f32);
    let mut s = Mirostat::new(1000, 99, tau, eta, 100);
    assert_eq!(s.mu(), 10.0);
    mu_steps(&mut s, Mirostat::mu, &logits, (tau, eta), |cur, _| {
        assert!(cur.sorted && cur.len() < 1000, "v1 truncates to k");
    });
}

#[test]
fn penalties_touch_exactly_the_tokens_in_the_window() {
    // Window of 3: accepted 1 2 2 5 -> window {2, 2, 5}; 1 fell out.
    let mut s = Penalties::new(3, 2.0, 0.5, 0.25);
    for t in [1, 2, 2, 5] {
        s.accept(t);
    }
    assert_eq!((s.count(1), s.count(2), s.count(5)), (0, 2, 1));
    let logits = [1.0f32, 3.0, 4.0, -1.0, 0.0, -2.0, 7.0];
    let mut cur = TokenDataArray::from_logits(&logits);
    s.apply(&mut cur);
    let got: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
    // token 2: positive, divided by 2, minus 2*0.5 + 0.25 -> 2 - 1.25
    // token 5: negative, multiplied by 2, minus 1*0.5 + 0.25 -> -4 - 0.75
    assert_eq!(got, [1.0, 3.0, 0.75, -1.0, 0.0, -4.75, 7.0]);
    s.reset();
    let mut cur = TokenDataArray::from_logits(&logits);
    s.apply(&mut cur);
    assert_eq!(cur.data.iter().map(|t| t.logit).collect::<Vec<_>>(), logits);
}

#[test]
fn penalties_with_window_zero_or_neutral_values_do_nothing() {
    let logits = [1.0f32, -1.0];
    for mut s in [
        Penalties::new(0, 2.0, 1.0, 1.0),
        Penalties::new(8, 1.0, 0.0, 0.0),
    ] {
        s.accept(0);
        s.accept(1);
        let mut cur = TokenDataArray::from_logits(&logits);
        s.apply(&mut cur);
        assert_eq!(cur.data.iter().map(|t| t.logit).collect::<Vec<_>>(), logits);
    }
}

#[test]
fn logit_bias_adds_to_listed_tokens_only() {
    let mut s = LogitBias::new(vec![(1, 2.5), (3, f32::NEG_INFINITY), (9, 1.0)]);
    let mut cur = TokenDataArray::from_logits(&[0.0, 1.0, 2.0, 3.0]);
    s.apply(&mut cur);
    let got: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
    assert_eq!(got, [0.0, 3.5, 2.0, f32::NEG_INFINITY]);
    // Shuffled arrays are searched by id.
    let mut cur = TokenDataArray::from_logits(&[0.0, 1.0, 2.0, 3.0]);
    cur.data.reverse();
    s.apply(&mut cur);
    assert_eq!(
        cur.data[2],
        TokenData {
            id: 1,
            logit: 3.5,
            p: 0.0
        }
    );
}

#[test]
fn xtc_removes_all_top_tokens_above_threshold_but_the_last() {
    // p = softmax: 0.5, 0.3, 0.15, 0.05 -> threshold 0.1: above are 0.5 0.3 0.15;
    // keep 0.15 (the last above) and 0.05.
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let mut cur = TokenDataArray::from_logits(&logits);
    Xtc::new(1.0, 0.1, 1, 7).apply(&mut cur);
    assert_eq!(ids(&cur), [2, 3]);
    // probability 0 never triggers; threshold > 0.5 disables.
    for s in [Xtc::new(0.0, 0.1, 1, 7), Xtc::new(1.0, 0.51, 1, 7)] {
        let mut s = s;
        let mut cur = TokenDataArray::from_logits(&logits);
        s.apply(&mut cur);
        assert_eq!(ids(&cur), [0, 1, 2, 3]);
    }
    // min_keep 3 would be violated (only 2 left): nothing removed.
    let mut cur = TokenDataArray::from_logits(&logits);
    Xtc::new(1.0, 0.1, 3, 7).apply(&mut cur);
    assert_eq!(cur.len(), 4);
    // Only one token above the threshold: nothing to exclude.
    let mut cur = TokenDataArray::from_logits(&logits);
    Xtc::new(1.0, 0.4, 1, 7).apply(&mut cur);
    assert_eq!(cur.len(), 4);
}

#[test]
fn xtc_triggers_at_about_its_probability() {
    let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
    let mut s = Xtc::new(0.3, 0.1, 1, 42);
    let n = 10_000;
    let triggered = (0..n)
        .filter(|_| {
            let mut cur = TokenDataArray::from_logits(&logits);
            s.apply(&mut cur);
            cur.len() == 2
        })
        .count();
    let rate = triggered as f64 / n as f64;
    assert!((rate - 0.3).abs() < 0.02, "rate {rate}");
}

#[test]
fn top_n_sigma_masks_below_max_minus_n_sigma() {
    // logits 0, 1, 2, 3, 10: mean 3.2, sigma = sqrt(((3.2^2+2.2^2+1.2^2+0.2^2+6.8^2)/5)) = 3.487
    // n = 1: cutoff 10 - 3.487 = 6.51 -> only token 4 survives.
    let logits = [0.0f32, 1.0, 2.0, 3.0, 10.0];
    let mut cur = TokenDataArray::from_logits(&logits);
    TopNSigma::new(1.0).apply(&mut cur);
    let finite: Vec<u32> = cur
        .data
        .iter()
        .filter(|t| t.logit.is_finite())
        .map(|t| t.id)
        .collect();
    assert_eq!(finite, [4]);
    // n = 2.5: cutoff 10 - 8.72 = 1.28 -> tokens 2, 3, 4.
    let mut cur = TokenDataArray::from_logits(&logits);
    TopNSigma::new(2.5).apply(&mut cur);
    let mut finite: Vec<u32> = cur
        .data
        .iter()
        .filter(|t| t.logit.is_finite())
        .map(|t| t.id)
        .collect();
    finite.sort();
    assert_eq!(finite, [2, 3, 4]);
    // -inf logits are left out of mean and sigma: over 0, 1, 2 mean 1,
    // sigma 0.816; n = 1.5: cutoff 0.775 -> tokens 2 and 3.
    let mut cur = TokenDataArray::from_logits(&[f32::NEG_INFINITY, 0.0, 1.0, 2.0]);
    TopNSigma::new(1.5).apply(&mut cur);
    assert_eq!(cur.data.iter().filter(|t| t.logit.is_finite()).count(), 2);
}

#[test]
fn dry_penalizes_continuing_a_repeat_by_multiplier_times_base_pow() {
    // Context: 7 8 9 4 5 6 1 7 8 9 4 5 — the suffix "7 8 9 4 5" (length 5)
    // occurred before, followed by 6. Emitting 6 would extend it:
    // penalty = 0.8 * 1.75^(5 - 2).
    let ctx = [7u32, 8, 9, 4, 5, 6, 1, 7, 8, 9, 4, 5];
    let mut s = Dry::new(4096, 0.8, 1.75, 2, -1, &[]);
    let cur = dry_after(&mut s, &ctx);
    let want6 = -0.8 * 1.75f32.powi(3);
    for t in &cur.data {
        let want = if t.id == 6 { want6 } else { 0.0 };
        assert!(
            (t.logit - want).abs() < 1e-5,
            "token {}: {} vs {want}",
            t.id,
            t.logit
        );
    }
    // A breaker (token 9) inside the repeat cuts it to "4 5" (length 2):
    // penalty 0.8 * 1.75^0.
    let mut s = Dry::new(4096, 0.8, 1.75, 2, -1, &[vec![9]]);
    let cur = dry_after(&mut s, &ctx);
    assert!((cur.data[6].logit + 0.8).abs() < 1e-6);
    // A window shorter than the repeat sees less of it.
    let mut s = Dry::new(4096, 0.8, 1.75, 2, 4, &[]);
    let cur = dry_after(&mut s, &ctx);
    assert!(cur.data.iter().all(|t| t.logit == 0.0));
}

#[test]
fn dry_multi_token_breaker_and_disabled_cases() {
    let ctx = [7u32, 8, 9, 4, 5, 6, 1, 7, 8, 9, 4, 5];
    // Breaker "9 4" (multi-token) cuts the repeat to "5"... shorter than 2.
    let mut s = Dry::new(4096, 0.8, 1.75, 2, -1, &[vec![9, 4]]);
    let cur = dry_after(&mut s, &ctx);
    assert!(cur.data.iter().all(|t| t.logit == 0.0));
    // multiplier 0 or base < 1: no-op.
    for mut s in [
        Dry::new(4096, 0.0, 1.75, 2, -1, &[]),
        Dry::new(4096, 0.8, 0.9, 2, -1, &[]),
    ] {
        let cur = dry_after(&mut s, &ctx);
        assert!(cur.data.iter().all(|t| t.logit == 0.0));
    }
}

#[test]
fn chain_applies_in_order_and_accepts_to_all() {
    // Penalties then greedy: token 3 wins, is accepted, then penalized away.
    let logits = [0.0f32, 1.0, 2.0, 2.5];
    let mut chain = Chain::new()
        .with(Penalties::new(64, 2.0, 0.0, 0.0))
        .with(Greedy);
    assert_eq!(chain.sample(&logits).unwrap(), 3);
    assert_eq!(chain.sample(&logits).unwrap(), 2); // 2.5 / 2 < 2
    assert_eq!(chain.n_sample(), 2);
    assert_eq!(chain.names(), ["penalties", "greedy"]);
    assert_eq!(chain.describe(), "logits -> penalties -> greedy");
    // Order matters: top-k(1) before temperature 0 vs XTC-like effects.
    let mut a = Chain::new()
        .with(TopK::new(2))
        .with(MinP::new(0.9, 0))
        .with(Greedy);
    let cur = a.apply_logits(&[0.0, 5.0, 4.99, 1.0]).unwrap();
    assert_eq!(ids(&cur), [1, 2]);
    // A cloned chain carries the history.
    let mut b = chain.clone();
    assert_eq!(b.sample(&logits).unwrap(), chain.sample(&logits).unwrap());
    chain.reset();
    assert_eq!(chain.sample(&logits).unwrap(), 3);
}

#[test]
fn chain_errors_instead_of_panicking() {
    use glint_sample::SampleError;
    let mut chain = Chain::new().with(Greedy);
    assert_eq!(chain.sample(&[]), Err(SampleError::EmptyLogits));
    assert!(matches!(
        chain.sample(&[0.0, f32::NAN]),
        Err(SampleError::BadLogit { token: 1, .. })
    ));
    assert!(matches!(
        chain.sample(&[f32::INFINITY]),
        Err(SampleError::BadLogit { token: 0, .. })
    ));
    let mut no_selector = Chain::new().with(TopK::new(3));
    let e = no_selector.sample(&[0.0, 1.0]).unwrap_err();
    assert!(e.to_string().contains("logits -> top-k"), "{e}");
    // -inf is a legal mask.
    assert_eq!(chain.sample(&[f32::NEG_INFINITY, 0.0]).unwrap(), 1);
}

#[test]
fn samplers_survive_degenerate_inputs() {
    // No panics on empty arrays, single candidates, all -inf.
    let mut all: Vec<Box<dyn Sampler>> = vec![
        Box::new(Greedy),
        Box::new(Dist::new(1)),
        Box::new(TopK::new(5)),
        Box::new(TopP::new(0.5, 1)),
        Box::new(MinP::new(0.1, 1)),
        Box::new(Typical::new(0.5, 1)),
        Box::new(Temp::new(0.0)),
        Box::new(TempExt::new(1.0, 0.5, 1.0)),
        Box::new(Xtc::new(1.0, 0.1, 1, 1)),
        Box::new(TopNSigma::new(1.0)),
        Box::new(Mirostat::new(10, 1, 5.0, 0.1, 100)),
        Box::new(MirostatV2::new(1, 5.0, 0.1)),
        Box::new(Penalties::new(4, 1.1, 0.1, 0.1)),
        Box::new(Dry::new(16, 0.8, 1.75, 2, -1, &[vec![0]])),
        Box::new(LogitBias::new(vec![(0, 1.0)])),
    ];
    for s in &mut all {
        for logits in [
            vec![],
            vec![1.0],
            vec![f32::NEG_INFINITY; 3],
            vec![2.0, 2.0],
        ] {
            let mut cur = TokenDataArray::from_logits(&logits);
            s.apply(&mut cur);
            s.accept(0);
            if let Some(i) = cur.selected {
                assert!(i < cur.len(), "{}", s.name());
            }
        }
    }
}

/// A positive temperature so small that logit / temp overflows (1e-38) is
/// greedy: with llama.cpp's default chain every seed picks the argmax.
#[test]
fn a_vanishing_temperature_acts_greedy() {
    for seed in 0..20u32 {
        let logits = random_logits(seed, 50);
        let best = logits
            .iter()
            .enumerate()
            .fold(0, |b, (i, &l)| if l > logits[b] { i } else { b }) as u32;
        let mut chain = glint_sample::SamplerParams {
            temp: 1e-38,
            seed,
            ..Default::default()
        }
        .build_chain(50, 64)
        .unwrap();
        assert_eq!(chain.sample(&logits).unwrap(), best, "seed {seed}");
    }
}

/// A logit bias that bans every token is an error, never a token.
#[test]
fn a_logit_bias_banning_every_token_is_an_error() {
    let n = 8;
    let params = glint_sample::SamplerParams {
        logit_bias: (0..n as u32)
            .map(|token| glint_sample::LogitBiasEntry {
                token,
                bias: f32::NEG_INFINITY,
            })
            .collect(),
        ..Default::default()
    };
    for temp in [0.0, 0.8] {
        let mut chain = glint_sample::SamplerParams {
            temp,
            ..params.clone()
        }
        .build_chain(n, 64)
        .unwrap();
        let e = chain.sample(&random_logits(3, n)).unwrap_err();
        assert_eq!(e, glint_sample::SampleError::AllMasked, "temp {temp}");
    }
}
