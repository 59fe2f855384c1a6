//! SamplerParams: llama.cpp's defaults, the chain they build, validation,
//! and the command-line parsers.

use glint_sample::{
    parse_logit_bias, parse_sampler_list, parse_sampler_seq, LogitBiasEntry, SampleError,
    SamplerParams, SamplerType, DEFAULT_SAMPLERS, DEFAULT_SEED,
};

#[test]
fn defaults_are_llama_cpps() {
    let p = SamplerParams::default();
    assert_eq!(p.seed, DEFAULT_SEED);
    assert_eq!(
        (p.temp, p.top_k, p.top_p, p.min_p, p.typ_p),
        (0.8, 40, 0.95, 0.05, 1.0)
    );
    assert_eq!(
        (
            p.penalty_last_n,
            p.penalty_repeat,
            p.penalty_freq,
            p.penalty_present
        ),
        (64, 1.0, 0.0, 0.0)
    );
    assert_eq!((p.mirostat, p.mirostat_tau, p.mirostat_eta), (0, 5.0, 0.1));
    assert_eq!((p.xtc_probability, p.xtc_threshold), (0.0, 0.1));
    assert_eq!(
        (
            p.dry_multiplier,
            p.dry_base,
            p.dry_allowed_length,
            p.dry_penalty_last_n
        ),
        (0.0, 1.75, 2, -1)
    );
    assert_eq!(
        (
            p.top_n_sigma,
            p.dynatemp_range,
            p.dynatemp_exponent,
            p.min_keep
        ),
        (-1.0, 0.0, 1.0, 0)
    );
    assert_eq!(p.samplers, DEFAULT_SAMPLERS);
    let chars: String = p.samplers.iter().map(|t| t.chr()).collect();
    assert_eq!(chars, "edskypmxt");
    p.validate().unwrap();
}

#[test]
fn default_chain_order() {
    let chain = SamplerParams::default().build_chain(32000, 4096).unwrap();
    assert_eq!(
        chain.names(),
        [
            "penalties",
            "dry",
            "top-n-sigma",
            "top-k",
            "typical",
            "top-p",
            "min-p",
            "xtc",
            "temp-ext",
            "dist"
        ]
    );
}

#[test]
fn logit_bias_goes_first_and_mirostat_replaces_the_tail() {
    let p = SamplerParams {
        logit_bias: vec![LogitBiasEntry {
            token: 2,
            bias: -1.0,
        }],
        samplers: parse_sampler_list("top_k;temperature").unwrap(),
        ..SamplerParams::default()
    };
    assert_eq!(
        p.build_chain(10, 64).unwrap().names(),
        ["logit-bias", "top-k", "temp-ext", "dist"]
    );
    let m1 = SamplerParams {
        mirostat: 1,
        ..p.clone()
    };
    assert_eq!(
        m1.build_chain(10, 64).unwrap().names(),
        ["logit-bias", "temp", "mirostat"]
    );
    let m2 = SamplerParams {
        mirostat: 2,
        logit_bias: vec![],
        ..p
    };
    assert_eq!(
        m2.build_chain(10, 64).unwrap().names(),
        ["temp", "mirostat-v2"]
    );
}

#[test]
fn temp_zero_selects_greedily() {
    let p = SamplerParams {
        temp: 0.0,
        seed: 1,
        ..SamplerParams::default()
    };
    let mut chain = p.build_chain(5, 64).unwrap();
    assert_eq!(chain.names().last(), Some(&"greedy"));
    for _ in 0..10 {
        assert_eq!(chain.sample(&[0.1, 0.3, 2.0, 1.9, -1.0]).unwrap(), 2);
    }
    let m = SamplerParams {
        temp: 0.0,
        mirostat: 2,
        ..SamplerParams::default()
    };
    assert_eq!(m.build_chain(5, 64).unwrap().names(), ["temp", "greedy"]);
}

#[test]
fn same_seed_same_tokens_through_the_default_chain() {
    let logits: Vec<f32> = (0..50).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
    let run = |seed| {
        let p = SamplerParams {
            seed,
            ..SamplerParams::default()
        };
        let mut c = p.build_chain(50, 64).unwrap();
        (0..30)
            .map(|_| c.sample(&logits).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn penalty_last_n_minus_one_means_context_size() {
    // With n_ctx = 2 the window holds 2 tokens: token 0 accepted 3 steps ago
    // is no longer penalized.
    let p = SamplerParams {
        temp: 0.0,
        penalty_last_n: -1,
        penalty_repeat: 10.0,
        samplers: vec![SamplerType::Penalties],
        ..SamplerParams::default()
    };
    let mut c = p.build_chain(4, 2).unwrap();
    let logits = [3.0f32, 2.9, 2.8, 2.7];
    assert_eq!(c.sample(&logits).unwrap(), 0);
    assert_eq!(c.sample(&logits).unwrap(), 1);
    assert_eq!(c.sample(&logits).unwrap(), 2); // window {0, 1}
    assert_eq!(c.sample(&logits).unwrap(), 0); // window {1, 2}
}

/// Makes one parameter of valid params invalid.
type Break = fn(&mut SamplerParams);

fn bias(token: u32, bias: f32) -> LogitBiasEntry {
    LogitBiasEntry { token, bias }
}

fn rejects(p: SamplerParams, name: &str) {
    match p.validate() {
        Err(SampleError::InvalidParam { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: expected InvalidParam, got {other:?}"),
    }
    let msg = p.validate().unwrap_err().to_string();
    assert!(msg.contains(name), "{msg}");
}

#[test]
fn every_invalid_parameter_is_named() {
    let d = SamplerParams::default;
    // (the parameter the error must name, how to break it)
    let invalid: [(&str, Break); 31] = [
        ("temp", |p| p.temp = -0.1),
        ("temp", |p| p.temp = f32::NAN),
        ("temp", |p| p.temp = f32::INFINITY),
        ("top_k", |p| p.top_k = -1),
        ("top_p", |p| p.top_p = 0.0),
        ("top_p", |p| p.top_p = 1.01),
        ("top_p", |p| p.top_p = f32::NAN),
        ("min_p", |p| p.min_p = -0.01),
        ("min_p", |p| p.min_p = 1.5),
        ("typ_p", |p| p.typ_p = 0.0),
        ("typ_p", |p| p.typ_p = f32::NAN),
        ("xtc_probability", |p| p.xtc_probability = 1.1),
        ("xtc_threshold", |p| p.xtc_threshold = -0.1),
        ("dynatemp_range", |p| p.dynatemp_range = -1.0),
        ("dynatemp_exponent", |p| p.dynatemp_exponent = f32::NAN),
        ("penalty_last_n", |p| p.penalty_last_n = -2),
        ("penalty_repeat", |p| p.penalty_repeat = 0.0),
        ("penalty_freq", |p| p.penalty_freq = f32::NAN),
        ("penalty_present", |p| p.penalty_present = f32::INFINITY),
        ("dry_multiplier", |p| p.dry_multiplier = -1.0),
        ("dry_base", |p| p.dry_base = f32::NAN),
        ("dry_allowed_length", |p| p.dry_allowed_length = -1),
        ("dry_penalty_last_n", |p| p.dry_penalty_last_n = -5),
        ("dry_sequence_breakers", |p| {
            p.dry_sequence_breakers = vec![vec![1], vec![]]
        }),
        ("mirostat", |p| p.mirostat = 3),
        ("mirostat", |p| p.mirostat = -1),
        ("mirostat_tau", |p| p.mirostat_tau = f32::NAN),
        ("mirostat_eta", |p| p.mirostat_eta = -0.1),
        ("top_n_sigma", |p| p.top_n_sigma = f32::NAN),
        ("logit_bias", |p| p.logit_bias = vec![bias(1, f32::NAN)]),
        ("logit_bias", |p| {
            p.logit_bias = vec![bias(1, f32::INFINITY)]
        }),
    ];
    for (name, break_it) in invalid {
        let mut p = d();
        break_it(&mut p);
        rejects(p, name);
    }
    // Boundaries that are valid.
    for ok in [
        SamplerParams {
            temp: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            top_k: 0,
            ..d()
        },
        SamplerParams {
            min_p: 1.0,
            penalty_last_n: -1,
            dry_penalty_last_n: 0,
            mirostat: 2,
            ..d()
        },
        SamplerParams {
            logit_bias: vec![LogitBiasEntry {
                token: 1,
                bias: f32::NEG_INFINITY,
            }],
            ..d()
        },
    ] {
        ok.validate().unwrap();
    }
}

#[test]
fn build_chain_rejects_logit_bias_outside_the_vocab() {
    let p = SamplerParams {
        logit_bias: vec![LogitBiasEntry {
            token: 10,
            bias: 1.0,
        }],
        ..SamplerParams::default()
    };
    assert!(matches!(
        p.build_chain(10, 64),
        Err(SampleError::TokenOutOfRange {
            token: 10,
            n_vocab: 10,
            ..
        })
    ));
    assert!(p.build_chain(11, 64).is_ok());
}

#[test]
fn sampler_list_parses_llama_cpp_names() {
    assert_eq!(
        parse_sampler_list("top_k;top_p;min_p;temperature").unwrap(),
        [
            SamplerType::TopK,
            SamplerType::TopP,
            SamplerType::MinP,
            SamplerType::Temperature
        ]
    );
    assert_eq!(
        parse_sampler_list("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature")
            .unwrap(),
        DEFAULT_SAMPLERS
    );
    assert_eq!(
        parse_sampler_list("top-k;nucleus;typical;min-p;temp;top-n-sigma").unwrap(),
        [
            SamplerType::TopK,
            SamplerType::TopP,
            SamplerType::TypicalP,
            SamplerType::MinP,
            SamplerType::Temperature,
            SamplerType::TopNSigma
        ]
    );
    assert_eq!(
        parse_sampler_list("top_k;mirostat"),
        Err(SampleError::UnknownSampler {
            name: "mirostat".into()
        })
    );
    assert!(parse_sampler_list("").is_err());
    assert!(parse_sampler_list("top_k;;top_p").is_err());
}

#[test]
fn sampler_seq_parses_llama_cpp_letters() {
    assert_eq!(parse_sampler_seq("edskypmxt").unwrap(), DEFAULT_SAMPLERS);
    assert_eq!(
        parse_sampler_seq("kt").unwrap(),
        [SamplerType::TopK, SamplerType::Temperature]
    );
    assert_eq!(
        parse_sampler_seq("kq"),
        Err(SampleError::UnknownSampler { name: "q".into() })
    );
    for t in SamplerType::ALL {
        assert_eq!(SamplerType::from_chr(t.chr()), Some(t));
        assert_eq!(SamplerType::from_name(t.name()), Some(t));
    }
}

#[test]
fn logit_bias_parses_token_sign_bias() {
    assert_eq!(
        parse_logit_bias("15043+1,2-inf").unwrap(),
        [
            LogitBiasEntry {
                token: 15043,
                bias: 1.0
            },
            LogitBiasEntry {
                token: 2,
                bias: f32::NEG_INFINITY
            }
        ]
    );
    assert_eq!(
        parse_logit_bias("7-0.5").unwrap(),
        [LogitBiasEntry {
            token: 7,
            bias: -0.5
        }]
    );
    for bad in [
        "",
        "+1",
        "15043",
        "15043*1",
        "15043+",
        "15043+x",
        "15043+inf",
        "15043+nan",
        "1+-1",
        "99999999999+1",
    ] {
        match parse_logit_bias(bad) {
            Err(SampleError::BadLogitBias { entry, .. }) => assert_eq!(entry, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// `leading_top_k`: llama.cpp's default chain starts with its top-k (the
/// penalties, DRY and top-n-sigma before it are off by default); a sampler
/// that changes logits first, a bias, mirostat, greedy or top-k 0 do not.
#[test]
fn the_default_chain_leads_with_its_top_k() {
    let p = SamplerParams::default();
    assert_eq!(p.leading_top_k(), Some(40));
    let with = |f: &dyn Fn(&mut SamplerParams)| {
        let mut q = SamplerParams::default();
        f(&mut q);
        q.leading_top_k()
    };
    assert_eq!(with(&|q| q.penalty_repeat = 1.1), None);
    assert_eq!(with(&|q| q.dry_multiplier = 0.8), None);
    assert_eq!(with(&|q| q.top_n_sigma = 1.0), None);
    assert_eq!(with(&|q| q.top_k = 0), None);
    assert_eq!(with(&|q| q.temp = 0.0), None);
    assert_eq!(with(&|q| q.mirostat = 2), None);
    assert_eq!(
        with(&|q| q.logit_bias.push(LogitBiasEntry {
            token: 3,
            bias: 1.0
        })),
        None
    );
    assert_eq!(
        with(&|q| q.samplers = vec![SamplerType::TopP, SamplerType::TopK]),
        None
    );
    assert_eq!(
        with(&|q| q.samplers = vec![SamplerType::MinP, SamplerType::TopK]),
        None
    );
    assert_eq!(
        with(&|q| q.samplers = vec![SamplerType::Temperature, SamplerType::TopK]),
        None
    );
    assert_eq!(
        with(&|q| {
            q.xtc_probability = 0.5;
            q.samplers = vec![SamplerType::Xtc, SamplerType::TopK];
        }),
        None
    );
    // Penalties over an empty window change nothing either.
    assert_eq!(
        with(&|q| {
            q.penalty_repeat = 1.3;
            q.penalty_last_n = 0;
        }),
        Some(40)
    );
}

/// `Chain::sample_sorted` from the k best candidates picks, draw for draw,
/// what `Chain::sample` picks from the full logits, over a run of steps
/// (the chains' random states move together), for chains that lead with
/// their top-k: the default at a few temperatures and k, and with the
/// samplers after the top-k that count the candidates or draw (XTC,
/// dynamic temperature, typical).
#[test]
fn sampling_the_top_k_alone_picks_what_the_full_logits_pick() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let n_vocab = 3000;
    let cases = [
        (0.8f32, 40i32, 0.0f32, 0.0f32, 1.0f32),
        (1.5, 40, 0.0, 0.0, 1.0),
        (2.0, 7, 0.0, 0.0, 1.0),
        (1.0, 128, 0.0, 0.0, 1.0),
        (1.2, 40, 0.5, 0.0, 1.0),
        (1.2, 40, 0.0, 0.5, 0.9),
    ];
    for (temp, k, xtc, dynatemp, typ_p) in cases {
        let p = SamplerParams {
            temp,
            top_k: k,
            seed: 1234,
            xtc_probability: xtc,
            dynatemp_range: dynatemp,
            typ_p,
            ..Default::default()
        };
        let k = p.leading_top_k().unwrap();
        let mut full = p.build_chain(n_vocab, 4096).unwrap();
        let mut top = p.build_chain(n_vocab, 4096).unwrap();
        for step in 0..200 {
            // Coarse logits: ties, the k-th among them.
            let logits: Vec<f32> = (0..n_vocab)
                .map(|_| (next() * 40.0).round() / 4.0)
                .collect();
            let mut c: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u32, v))
                .collect();
            c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            c.truncate(k);
            let a = full.sample(&logits).unwrap();
            let b = top.sample_sorted(&c).unwrap();
            assert_eq!(a, b, "temp {temp} k {k} step {step}");
        }
    }
}
