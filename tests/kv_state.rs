//! Per-sequence state: save, restore in another process and into another
//! sequence id, refuse corrupt blobs without touching the cache; and the
//! cache's bad calls (unknown sequence, `seq_div` by 0, a batch that does
//! not fit) leave it as it was. Also `--prompt-cache` across two processes.

mod common;

use glint::{Batch, Context, ContextParams, Model};

/// Restoring writes back the very bytes that were saved: the next-token
/// logits are the same computation on the same keys.
const RESTORE_TOL: f32 = 1e-5;

const PROMPT: &str = "The capital of France is Paris. The capital of Germany is";
const CHILD_ENV: &str = "GLINT_KV_STATE_CHILD";

fn load() -> Model {
    common::cpu_model("smollm2")
}

fn context(model: &Model) -> Context {
    Context::new(
        model,
        ContextParams {
            n_ctx: 256,
            n_seq_max: 3,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A context holding `PROMPT` in sequence 0, and the prompt's ids.
fn prefilled(model: &Model) -> (Context, Vec<u32>) {
    let ids = model.tokenizer().encode(PROMPT, true, true).unwrap();
    let mut ctx = context(model);
    ctx.decode(&Batch::from_tokens(&ids, 0, 0)).unwrap();
    (ctx, ids)
}

/// Logits after decoding `next` at `pos` in sequence `seq`.
fn next_logits(ctx: &mut Context, next: u32, pos: i32, seq: i32) -> Vec<f32> {
    ctx.decode(&Batch::from_tokens(&[next], pos, seq)).unwrap();
    ctx.logits(0).unwrap().to_vec()
}

fn f32s_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Run by `state_restores_in_a_new_process_and_into_another_sequence` in a
/// child process: restore the blob named by the environment into a fresh
/// context and write the next token's logits beside it. Ignored so that a
/// plain run counts it as ignored, never as a pass that tested nothing.
#[test]
#[ignore = "child process of state_restores_in_a_new_process_and_into_another_sequence, \
            which runs it with --ignored --exact"]
fn child_restore_and_decode() {
    let path = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!(
            "{CHILD_ENV} is not set: this is the child half of \
             state_restores_in_a_new_process_and_into_another_sequence; run that test"
        )
    });
    let path = std::path::PathBuf::from(path);
    let model = load();
    let mut ctx = context(&model);
    let blob = std::fs::read(&path).unwrap();
    ctx.state_seq_load(&blob, 0).unwrap();
    let ids = model.tokenizer().encode(PROMPT, true, true).unwrap();
    let l = next_logits(&mut ctx, 11, ids.len() as i32, 0);
    std::fs::write(path.with_extension("logits"), f32s_to_bytes(&l)).unwrap();
}

#[test]
fn state_restores_in_a_new_process_and_into_another_sequence() {
    let model = load();
    let (mut ctx, ids) = prefilled(&model);
    let n = ids.len() as i32;
    let blob = ctx.state_seq_save(0).unwrap();
    // Some token to decode next (its id does not matter, only that both
    // sides decode the same one).
    let original = next_logits(&mut ctx, 11, n, 0);

    // Another process.
    let tmp = common::TempDir::new("kv-state");
    let dir = tmp.path().to_path_buf();
    let path = dir.join("seq0.state");
    std::fs::write(&path, &blob).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_restore_and_decode",
            "--nocapture",
        ])
        .env(CHILD_ENV, &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The child ran the one test (a filter that matched nothing passes too).
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let bytes = std::fs::read(path.with_extension("logits")).unwrap();
    let child: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let d = common::max_abs_diff(&original, &child);
    assert!(d <= RESTORE_TOL, "new process: max-abs {d}");

    // Another sequence id of a fresh context, beside an unrelated sequence.
    let mut ctx2 = context(&model);
    let other = model.tokenizer().encode("Hello there", true, true).unwrap();
    ctx2.decode(&Batch::from_tokens(&other, 0, 0)).unwrap();
    ctx2.state_seq_load(&blob, 2).unwrap();
    assert_eq!(ctx2.seq_pos_max(2).unwrap(), n - 1);
    assert_eq!(ctx2.seq_pos_max(0).unwrap(), other.len() as i32 - 1);
    let moved = next_logits(&mut ctx2, 11, n, 2);
    let d = common::max_abs_diff(&original, &moved);
    assert!(d <= RESTORE_TOL, "into seq 2: max-abs {d}");
}

#[test]
fn corrupt_or_foreign_state_is_refused_and_changes_nothing() {
    let model = load();
    let (mut ctx, _) = prefilled(&model);
    let blob = ctx.state_seq_save(0).unwrap();
    let other = model.tokenizer().encode("Hello there", true, true).unwrap();
    ctx.decode(&Batch::from_tokens(&other, 0, 1)).unwrap();
    let before = ctx.cells().clone();

    let mut flipped = blob.clone();
    flipped[40] ^= 0xff;
    let mut wrong_magic = blob.clone();
    wrong_magic[0] = b'X';
    let mut longer = blob.clone();
    longer.push(0);
    // The seal covers every byte: a K/V row flipped deep in the payload is
    // caught like a header byte (it once loaded and answered wrongly).
    let mut flipped_row = blob.clone();
    let deep = blob.len() - 100;
    flipped_row[deep] ^= 0x01;
    for (what, bad, needle) in [
        ("truncated header", blob[..30].to_vec(), "truncated"),
        (
            "truncated storage",
            blob[..blob.len() - 1].to_vec(),
            "checksum mismatch",
        ),
        ("one byte too many", longer, "checksum mismatch"),
        ("flipped header byte", flipped, "checksum mismatch"),
        ("flipped K/V byte", flipped_row, "checksum mismatch"),
        ("wrong magic", wrong_magic, "checksum mismatch"),
        ("empty", Vec::new(), "truncated"),
    ] {
        let e = ctx.state_seq_load(&bad, 1).unwrap_err().to_string();
        assert!(e.contains(needle), "{what}: {e}");
        assert_eq!(ctx.cells(), &before, "{what} changed the cache");
    }

    // Another cache type is another identity.
    let mut f32ctx = Context::new(
        &model,
        ContextParams {
            n_ctx: 256,
            type_k: glint::CacheType::F32,
            ..Default::default()
        },
    )
    .unwrap();
    let snap = f32ctx.cells().clone();
    let e = f32ctx.state_seq_load(&blob, 0).unwrap_err().to_string();
    assert!(e.contains("different model") && e.contains("type_k"), "{e}");
    assert_eq!(f32ctx.cells(), &snap);

    // Unknown sequence ids.
    assert!(ctx
        .state_seq_load(&blob, 7)
        .unwrap_err()
        .to_string()
        .contains("unknown sequence id 7"));
    assert!(ctx.state_seq_save(-1).is_err());
    assert_eq!(ctx.cells(), &before);
}

#[test]
fn bad_cache_calls_are_errors_that_change_nothing() {
    let model = load();
    let (mut ctx, ids) = prefilled(&model);
    let before = ctx.cells().clone();

    let e = ctx.seq_rm(5, 0, -1).unwrap_err().to_string();
    assert!(e.contains("unknown sequence id 5"), "{e}");
    let e = ctx.seq_add(3, 0, -1, 2).unwrap_err().to_string();
    assert!(e.contains("unknown sequence id 3"), "{e}");
    let e = ctx.seq_div(0, 0, -1, 0).unwrap_err().to_string();
    assert!(e.contains("divisor must be >= 1"), "{e}");
    let e = ctx.seq_div(0, 0, -1, -3).unwrap_err().to_string();
    assert!(e.contains("divisor"), "{e}");
    assert!(ctx.seq_cp(0, 9, 0, -1).is_err());
    assert!(ctx.seq_pos_max(4).is_err());
    let e = ctx.self_extend(0, 100, 0, 4, 510).unwrap_err().to_string();
    assert!(e.contains("multiple"), "{e}");
    assert_eq!(ctx.cells(), &before);

    // A batch that does not fit: 256 slots, some in use.
    let big: Vec<u32> = vec![11; 250];
    let e = ctx
        .decode(&Batch::from_tokens(&big, ids.len() as i32, 1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("250 cells needed"), "{e}");
    // A token of an unknown sequence.
    let e = ctx
        .decode(&Batch::from_tokens(&[11], 0, 3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sequence id 3"), "{e}");
    assert_eq!(ctx.cells(), &before);
    // And the cache still works.
    ctx.decode(&Batch::from_tokens(&[11], ids.len() as i32, 0))
        .unwrap();
}

#[test]
fn prompt_cache_is_reused_by_a_second_process() {
    let tmp = common::TempDir::new("kv-pcache");
    let dir = tmp.path().to_path_buf();
    let cache = dir.join("prompt.cache");
    let run = |prompt: &str| {
        common::greedy_cpu(
            "smollm2",
            &[
                "-p",
                prompt,
                "-n",
                "8",
                "--prompt-cache",
                cache.to_str().unwrap(),
            ],
        )
    };
    let (first, err) = run(PROMPT);
    assert!(err.contains("reused 0 of"), "{err}");
    assert!(cache.exists());
    let (second, err) = run(PROMPT);
    let n = load().tokenizer().encode(PROMPT, true, true).unwrap().len();
    // All but the last prompt token come from the file.
    assert!(err.contains(&format!("reused {} of {n}", n - 1)), "{err}");
    assert_eq!(first, second);
    // A longer prompt reuses the saved one as its prefix.
    let longer = format!("{PROMPT} Berlin. The capital of Italy is");
    let (third, err) = run(&longer);
    assert!(err.contains(&format!("reused {n} of")), "{err}");
    let fresh = common::generate(
        "smollm2",
        &["-p", &longer, "-n", "8", "--temp", "0", "--backend", "cpu"],
    );
    assert_eq!(third, String::from_utf8(fresh.stdout).unwrap());
    // A corrupt file is a clear error.
    std::fs::write(&cache, b"GLINTPC\0garbage").unwrap();
    let out = common::generate(
        "smollm2",
        &[
            "-p",
            PROMPT,
            "-n",
            "2",
            "--backend",
            "cpu",
            "--prompt-cache",
            cache.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("prompt cache"), "{err}");
}
