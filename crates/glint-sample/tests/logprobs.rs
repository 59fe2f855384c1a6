//! Logprobs from the raw logits.

use glint_sample::{logprobs, SampleError, MAX_TOP_LOGPROBS};

#[test]
fn logprobs_match_a_hand_computation() {
    // logits 1, 2, 3: log Z = 3 + ln(e^-2 + e^-1 + 1) = 3.40760596
    let l = logprobs(&[1.0, 2.0, 3.0], 1, 2).unwrap();
    let log_z = 3.0f64 + ((-2.0f64).exp() + (-1.0f64).exp() + 1.0).ln();
    assert!((log_z - 3.407_605_96).abs() < 1e-8);
    assert_eq!(l.token, 1);
    assert!((l.logprob as f64 - (2.0 - log_z)).abs() < 1e-6);
    assert_eq!(l.top.len(), 2);
    assert_eq!(l.top[0].0, 2);
    assert!((l.top[0].1 as f64 - (3.0 - log_z)).abs() < 1e-6);
    assert_eq!(l.top[1].0, 1);
}

#[test]
fn logprobs_sum_to_one_in_probability_space() {
    let logits: Vec<f32> = (0..1000)
        .map(|i| ((i * 7919) % 1000) as f32 / 50.0 - 10.0)
        .collect();
    let total: f64 = (0..1000u32)
        .map(|t| (logprobs(&logits, t, 0).unwrap().logprob as f64).exp())
        .sum();
    assert!((total - 1.0).abs() < 1e-4, "{total}");
    // Large logits do not overflow.
    let l = logprobs(&[1000.0, 999.0], 0, 0).unwrap();
    assert!((l.logprob as f64 - (-(1.0 + (-1.0f64).exp()).ln())).abs() < 1e-6);
}

#[test]
fn top_is_sorted_with_ties_by_id_and_capped() {
    let l = logprobs(&[0.5, 2.0, 0.5, 2.0, 1.0, 0.5], 0, 5).unwrap();
    let ids: Vec<u32> = l.top.iter().map(|t| t.0).collect();
    assert_eq!(ids, [1, 3, 4, 0, 2]);
    assert!(l.top.windows(2).all(|w| w[0].1 >= w[1].1));
    // More alternatives asked than tokens: all of them.
    assert_eq!(logprobs(&[0.0, 1.0], 0, 20).unwrap().top.len(), 2);
    assert!(matches!(
        logprobs(&[0.0; 30], 0, MAX_TOP_LOGPROBS + 1),
        Err(SampleError::InvalidParam { name: "n_top", .. })
    ));
}

#[test]
fn logprobs_reject_bad_input() {
    assert_eq!(logprobs(&[], 0, 0), Err(SampleError::EmptyLogits));
    assert!(matches!(
        logprobs(&[0.0, 1.0], 2, 0),
        Err(SampleError::TokenOutOfRange { token: 2, .. })
    ));
    assert!(matches!(
        logprobs(&[0.0, f32::NAN], 0, 0),
        Err(SampleError::BadLogit { token: 1, .. })
    ));
    assert_eq!(
        logprobs(&[f32::NEG_INFINITY; 3], 0, 0),
        Err(SampleError::AllMasked)
    );
    // A masked token has logprob -inf, and is not preferred over real ones.
    let l = logprobs(&[f32::NEG_INFINITY, 0.0], 0, 2).unwrap();
    assert_eq!(l.logprob, f32::NEG_INFINITY);
    assert_eq!(l.top[0], (1, 0.0));
}
