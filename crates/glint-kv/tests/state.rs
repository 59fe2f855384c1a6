//! Per-sequence state: round trips, and every way a blob can be wrong
//! (each leaves the cache exactly as it was).

mod common;
use common::*;
use glint_kv::*;

fn id() -> ModelIdentity {
    ModelIdentity {
        arch: "llama".into(),
        n_layer: 2,
        n_embd_k_gqa: 4,
        n_embd_v_gqa: 4,
        type_k: 1,
        type_v: 1,
        k_row_bytes: 8,
        v_row_bytes: 8,
    }
}

/// A blob of seq 0 with positions 0..5 divided by 2 (shared positions,
/// pending shifts), storage bytes appended by a fake context.
fn saved() -> (Vec<u8>, SeqStateWrite) {
    let mut c = unified(16, 2);
    decode(&mut c, 1, 0, 2);
    decode(&mut c, 0, 0, 5);
    c.seq_div(0, -1, -1, 2).unwrap();
    let w = c.state_write(0, &id()).unwrap();
    assert_eq!(w.src_rows, vec![2, 3, 4, 5, 6]);
    assert_eq!(w.storage_bytes, 5 * 2 * 16);
    let mut blob = w.bytes.clone();
    blob.extend((0..w.storage_bytes).map(|i| i as u8));
    seal_state(&mut blob);
    (blob, w)
}

/// `blob` without its seal, changed by `f`, sealed again: a well-formed
/// file that is wrong in one way, so the error must name that way.
fn resealed(blob: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = blob[..blob.len() - 8].to_vec();
    f(&mut b);
    seal_state(&mut b);
    b
}

#[test]
fn round_trip_into_another_sequence_and_layout() {
    let (blob, _) = saved();
    for mut dst in [unified(8, 3), per_seq(8, 3)] {
        decode(&mut dst, 2, 0, 1); // something already there
        decode(&mut dst, 1, 40, 3); // dst's old cells are replaced
        let r = dst.state_read(&blob, 1, &id()).unwrap();
        assert_eq!(r.storage.len(), 160);
        assert_eq!(&blob[r.storage.clone()][..3], &[0, 1, 2]);
        let st = dst.stream_of(1).unwrap();
        let got: Vec<(i32, i32)> = r
            .dst_rows
            .iter()
            .map(|&row| {
                let c = dst.cell(st, (row % 8) as u32).unwrap();
                assert!(c.seqs.contains(1));
                (c.pos, c.shift)
            })
            .collect();
        assert_eq!(got, vec![(0, 0), (0, -1), (1, -1), (1, -2), (2, -2)]);
        assert_eq!(dst.seq_n_cells(1).unwrap(), 5);
        assert_eq!(pos_range(&dst, 1), (0, 2));
        assert!(dst.has_shift());
        assert_eq!(dst.seq_pos_max(2).unwrap(), 0);
    }
}

#[test]
fn empty_sequence_round_trip() {
    let c = unified(4, 1);
    let w = c.state_write(0, &id()).unwrap();
    assert_eq!(w.storage_bytes, 0);
    let mut d = unified(4, 1);
    decode(&mut d, 0, 0, 2);
    let mut blob = w.bytes.clone();
    seal_state(&mut blob);
    d.state_read(&blob, 0, &id()).unwrap();
    assert_eq!(d.used(0), 0);
}

fn rejects(dst: &mut KvCells, blob: &[u8], identity: &ModelIdentity, what: &str) -> String {
    unchanged(dst, what, |d| d.state_read(blob, 0, identity))
        .expect_err(what)
        .to_string()
}

#[test]
fn every_truncation_and_trailing_garbage_is_rejected() {
    let (blob, _) = saved();
    let mut dst = unified(8, 1);
    decode(&mut dst, 0, 7, 2);
    for len in 0..blob.len() {
        rejects(
            &mut dst,
            &blob[..len],
            &id(),
            &format!("truncated to {len}"),
        );
    }
    let mut long = blob.clone();
    long.push(0);
    let e = rejects(&mut dst, &long, &id(), "trailing byte");
    assert!(e.contains("checksum mismatch"), "{e}");
    let long = resealed(&blob, |b| b.push(0));
    let e = rejects(&mut dst, &long, &id(), "trailing byte, resealed");
    assert!(e.contains("161 K/V bytes"), "{e}");
}

#[test]
fn a_prefix_restores_only_the_cells_before_it() {
    let (blob, _) = saved();
    // positions after seq_div: 0 0 1 1 2; below 2: the first four cells
    let mut dst = unified(4, 1);
    let r = dst.state_read_prefix(&blob, 0, &id(), 2).unwrap();
    assert_eq!((r.n_saved, r.kept.clone()), (5, vec![0, 1, 2, 3]));
    assert_eq!(dst.seq_n_cells(0).unwrap(), 4);
    assert_eq!(pos_range(&dst, 0), (0, 1));
    // the whole sequence does not fit in 4 cells
    let mut dst = unified(4, 1);
    let e = rejects(&mut dst, &blob, &id(), "room");
    assert!(e.contains("5 cells needed"), "{e}");
}

#[test]
fn wrong_magic_version_checksum() {
    let (blob, w) = saved();
    let mut dst = unified(8, 1);
    let b = resealed(&blob, |b| b[0] = b'X');
    assert!(rejects(&mut dst, &b, &id(), "magic").contains("magic"));
    let b = resealed(&blob, |b| b[8] = 1);
    assert!(rejects(&mut dst, &b, &id(), "version").contains("version 1"));
    // flip one bit in every byte, K/V rows and seal included: always caught
    for i in 0..blob.len() {
        let mut b = blob.clone();
        b[i] ^= 0x10;
        let e = rejects(&mut dst, &b, &id(), &format!("bit flip at {i}"));
        assert!(e.contains("checksum mismatch"), "bit flip at {i}: {e}");
    }
    // resealed, a flip in the header or cells is still caught by the
    // header's own checksum (or a check after it)
    for i in 12..w.bytes.len() {
        let b = resealed(&blob, |b| b[i] ^= 0x10);
        rejects(&mut dst, &b, &id(), &format!("resealed bit flip at {i}"));
    }
}

#[test]
fn identity_mismatches_are_named() {
    let (blob, _) = saved();
    let mut dst = unified(8, 1);
    let cases: Vec<(&str, ModelIdentity)> = vec![
        (
            "arch",
            ModelIdentity {
                arch: "gemma3".into(),
                ..id()
            },
        ),
        ("n_layer", ModelIdentity { n_layer: 3, ..id() }),
        (
            "n_embd_k_gqa",
            ModelIdentity {
                n_embd_k_gqa: 5,
                ..id()
            },
        ),
        (
            "n_embd_v_gqa",
            ModelIdentity {
                n_embd_v_gqa: 5,
                ..id()
            },
        ),
        ("type_k", ModelIdentity { type_k: 0, ..id() }),
        ("type_v", ModelIdentity { type_v: 8, ..id() }),
        (
            "k_row_bytes",
            ModelIdentity {
                k_row_bytes: 16,
                ..id()
            },
        ),
        (
            "v_row_bytes",
            ModelIdentity {
                v_row_bytes: 4,
                ..id()
            },
        ),
    ];
    for (field, other) in cases {
        let e = rejects(&mut dst, &blob, &other, field);
        assert!(e.contains(field), "{field}: {e}");
    }
}

#[test]
fn no_room_or_bad_sequence_changes_nothing() {
    let (blob, _) = saved();
    let mut small = unified(4, 2);
    decode(&mut small, 0, 0, 1); // freed by the restore, still not enough
    let e = rejects(&mut small, &blob, &id(), "room");
    assert!(e.contains("5 cells needed, 4 free"), "{e}");
    let mut dst = unified(8, 1);
    let before = dst.clone();
    assert!(matches!(
        dst.state_read(&blob, 1, &id()),
        Err(KvError::UnknownSeq { .. })
    ));
    assert!(dst.state_write(-1, &id()).is_err());
    assert_eq!(dst, before);
}
