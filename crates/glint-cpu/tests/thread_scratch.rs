//! The memory report counts the scratch each worker thread keeps between
//! ops (quantized activations, prepared tile columns) and stops counting it
//! when the thread ends. Alone in its test binary: the count is the
//! process's, so no other test's threads may move it.

mod common;

use common::*;
use glint_backend::{Backend, GgmlType};
use std::time::{Duration, Instant};

/// `[k, n]` Q4_0 weights with scale 1 and seeded nibbles.
fn q4_0_weights(k: usize, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..k / 32 * n {
        bytes.extend_from_slice(&half::f16::from_f32(1.0).to_bits().to_le_bytes());
        bytes.extend((0..16).map(|_| (rng.next_u64() & 0xff) as u8));
    }
    bytes
}

#[test]
fn threads_scratch_is_counted_while_the_threads_live() {
    assert_eq!(glint_cpu::thread_scratch_bytes(), 0, "nothing ran yet");
    let (k, n, m) = (256, 128, 64);
    // Q4_0 takes Q8_0 activations: 34 bytes a block of 32, one row a column.
    let act = m * k / 32 * 34;
    let held = std::thread::spawn(move || {
        // One worker, so both ops run on the same thread.
        let be = glint_cpu::CpuBackend::new(Some(1)).unwrap();
        let mut rng = Rng(7);
        let w = weight(
            &be,
            GgmlType::Q4_0,
            [k, n, 1, 1],
            &q4_0_weights(k, n, &mut rng),
        );
        let out = mul_mat(&be, &w, &rng.vec(k * m), [k, n, m]);
        assert!(out.iter().all(|v| v.is_finite()));
        let first = be.memory().thread_scratch;
        // The same op again reuses the buffers: nothing more is held.
        mul_mat(&be, &w, &rng.vec(k * m), [k, n, m]);
        assert_eq!(be.memory().thread_scratch, first);
        first
        // The backend (its pool's threads) is dropped here.
    })
    .join()
    .unwrap();
    assert!(
        held >= act,
        "{held} bytes counted, the quantized activations alone are {act}"
    );
    // The pool's threads end after the pool is dropped: their buffers go.
    let start = Instant::now();
    while glint_cpu::thread_scratch_bytes() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} bytes still counted after the threads ended",
            glint_cpu::thread_scratch_bytes()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
