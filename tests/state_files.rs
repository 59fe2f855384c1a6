//! Saved state under attack (the Reliability issue's class 3): mutated
//! prompt caches never load with a payload other than the one saved, a save
//! that fails half-way (a full disk) leaves the old file byte for byte, and
//! a cache made by a larger context restores the prefix a new prompt reuses.

mod common;

use glint::state::PromptCache;
use glint::{Batch, Context, ContextParams, Model};
use glint_testkit::Rng;

const PROMPT: &str = "The capital of France is Paris. The capital of Germany is";

fn load() -> Model {
    common::cpu_model("smollm2")
}

fn context(model: &Model, n_ctx: u32) -> Context {
    Context::new(
        model,
        ContextParams {
            n_ctx,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A context of `n_ctx` cells holding `PROMPT` in sequence 0, its ids, and
/// its prompt cache.
fn prefilled(model: &Model, n_ctx: u32) -> (Context, Vec<u32>, PromptCache) {
    let ids = model.tokenizer().encode(PROMPT, true, true).unwrap();
    let mut ctx = context(model, n_ctx);
    ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
    let cache = PromptCache::capture(&mut ctx, 0, &ids).unwrap();
    (ctx, ids, cache)
}

/// One way of breaking a file: flips, overwrites, truncations, extensions,
/// NaN-filled runs, an edited token id.
fn mutate(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let mut b = good.to_vec();
    let at = |rng: &mut Rng, len: usize| (rng.next_u64() % len.max(1) as u64) as usize;
    match rng.next_u64() % 6 {
        0 => {
            let i = at(rng, b.len());
            b[i] ^= 1 << (rng.next_u64() % 8);
        }
        1 => {
            for _ in 0..1 + rng.next_u64() % 8 {
                let i = at(rng, b.len());
                b[i] = rng.next_u64() as u8;
            }
        }
        2 => b.truncate(at(rng, b.len())),
        3 => {
            let n = 1 + at(rng, 64);
            b.extend(rng.bytes(n));
        }
        4 => {
            // a run of f32 NaNs somewhere in the K/V payload
            let i = at(rng, b.len() - 64) & !3;
            for k in (i..i + 64).step_by(4) {
                b[k..k + 4].copy_from_slice(&f32::NAN.to_le_bytes());
            }
        }
        _ => {
            // another token id in the token list (bytes 24..)
            let i = 24 + 4 * at(rng, 8);
            b[i] = b[i].wrapping_add(1);
        }
    }
    b
}

#[test]
fn ten_thousand_mutated_prompt_caches_never_load_a_different_payload() {
    let model = load();
    let (mut ctx, ids, cache) = prefilled(&model, 64);
    let good = cache.to_bytes();

    let mut rng = Rng::new(0x5eed);
    let (mut tried, mut refused, mut same, mut different) = (0, 0, 0, 0);
    for _ in 0..10_000 {
        let bad = mutate(&mut rng, &good);
        tried += 1;
        let Ok(cache) = PromptCache::from_bytes(&bad) else {
            refused += 1;
            continue;
        };
        ctx.clear();
        match ctx.state_seq_load(&cache.state, 0) {
            Err(_) => refused += 1,
            // Accepted: only the very bytes that were saved may load.
            Ok(()) if bad == good => same += 1,
            Ok(()) => different += 1,
        }
    }
    eprintln!("{tried} mutated caches: {refused} refused, {same} unchanged, {different} different");
    assert_eq!(tried, 10_000);
    assert_eq!(different, 0, "a mutated cache loaded");
    assert_eq!(refused + same, tried);
    // The context still works after 10,000 refusals.
    ctx.clear();
    ctx.state_seq_load(&PromptCache::from_bytes(&good).unwrap().state, 0)
        .unwrap();
    assert_eq!(ctx.seq_pos_max(0).unwrap(), ids.len() as i32 - 1);
}

#[test]
fn a_save_that_fails_half_way_leaves_the_old_cache_byte_for_byte() {
    let tmp = common::TempDir::new("state-files");
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("prompt.cache");
    let m = common::model("smollm2");
    let m = m.to_str().unwrap();
    let run = |limit: Option<u32>, prompt: &str| {
        let glint = env!("CARGO_BIN_EXE_glint");
        let cmd = format!(
            "{}exec \"$0\" generate -m \"$1\" -p \"$2\" -n 1 --temp 0 --backend cpu -c 256 --prompt-cache \"$3\"",
            // A file-size limit makes the write fail as a full disk would
            // (EFBIG instead of ENOSPC); the signal it raises is ignored so
            // the write returns the error.
            limit.map_or(String::new(), |l| format!("trap '' XFSZ; ulimit -f {l}; "))
        );
        std::process::Command::new("sh")
            .args(["-c", &cmd, glint, m, prompt, cache.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let first = run(None, "Hello");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let old = std::fs::read(&cache).unwrap();
    assert!(old.len() > 8 * 1024, "{} bytes", old.len());

    // A longer prompt's cache needs more than 16 blocks: its save fails.
    let second = run(Some(16), PROMPT);
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("prompt.cache"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read(&cache).unwrap(), old, "the old cache changed");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "temporary files left: {leftovers:?}");
}

#[test]
fn a_cache_from_a_larger_context_restores_the_reused_prefix() {
    let model = load();
    let (_, ids, cache) = prefilled(&model, 256);

    // A context with fewer cells than the saved sequence has.
    let n_reuse = 4;
    let mut small = context(&model, 8);
    assert!(small.state_seq_load(&cache.state, 0).is_err());
    small
        .state_seq_load_prefix(&cache.state, 0, n_reuse)
        .unwrap();
    assert_eq!(small.seq_pos_max(0).unwrap(), n_reuse - 1);

    // The restored prefix is the prefix: the next token's logits equal a
    // cold run's over the same tokens.
    let next = ids[n_reuse as usize];
    small
        .decode(&Batch::from_tokens(&[next], n_reuse, 0))
        .unwrap();
    let restored = small.logits(0).unwrap().to_vec();
    let mut cold = context(&model, 8);
    cold.decode(&Batch::from_tokens(&ids[..=n_reuse as usize], 0, 0))
        .unwrap();
    let d = common::max_abs_diff(&restored, cold.logits(n_reuse as usize).unwrap());
    assert!(d <= 1e-3, "max-abs {d}");
}

/// A prompt cache made by another model is refused, even when no token of
/// it would be reused, and left as it was (it was once overwritten).
#[test]
fn a_cache_from_another_model_is_refused_and_kept() {
    let tmp = common::TempDir::new("foreign");
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("p.cache");
    let cache = cache.to_str().unwrap();
    let run = |model: &str| {
        let m = common::model(model);
        #[rustfmt::skip]
        let args = ["generate", "-m", m.to_str().unwrap(), "-p", "Hello", "-n", "1", "--temp", "0",
            "--backend", "cpu", "-c", "128", "--prompt-cache", cache];
        common::glint(&args)
    };
    common::success(run("smollm2"));
    let before = std::fs::read(cache).unwrap();
    let e = common::one_line_error(&run("gemma3"), "gemma3 with smollm2's cache");
    assert!(e.contains("different model"), "{e}");
    assert_eq!(std::fs::read(cache).unwrap(), before);
}
