//! `CpuBackend::enter`: `f` runs on a worker while the others spin for
//! the work its ops share out. It must return `f`'s value, carry a panic
//! out without leaving a spinner behind, and let nested and concurrent
//! forward passes on one pool finish. Each case runs in a thread with a
//! deadline, so a hang fails the test instead of stalling the suite.

use glint_backend::Backend;
use glint_cpu::CpuBackend;
use rayon::prelude::*;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// `case()` in its own thread; its value, or a failure after `secs`.
fn within<T: Send + 'static>(secs: u64, case: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(case());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the case did not finish in time: a spinner was left running")
}

/// Work the pool shares out: the sum of `i * i` over `0..n`.
fn shared_sum(n: u64) -> u64 {
    (0..n).into_par_iter().map(|i| i * i).sum()
}

fn want(n: u64) -> u64 {
    (0..n).map(|i| i * i).sum()
}

#[test]
fn enter_returns_the_value_of_work_shared_by_the_pool() {
    let got = within(60, || {
        let be = CpuBackend::new(Some(3)).unwrap();
        (0..200u64)
            .map(|i| be.enter(|| shared_sum(1000 + i)))
            .collect::<Vec<_>>()
    });
    let expected: Vec<u64> = (0..200u64).map(|i| want(1000 + i)).collect();
    assert_eq!(got, expected);
}

#[test]
fn a_panic_in_enter_reaches_the_caller_and_the_pool_still_works() {
    let (caught, after) = within(60, || {
        let be = CpuBackend::new(Some(2)).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            be.enter(|| {
                let _ = shared_sum(10_000);
                panic!("a forward pass failed");
            })
        }));
        let message = caught
            .err()
            .and_then(|e| e.downcast_ref::<&str>().map(|s| s.to_string()));
        (message, be.enter(|| shared_sum(5000)))
    });
    assert_eq!(caught.as_deref(), Some("a forward pass failed"));
    assert_eq!(after, want(5000));
}

#[test]
fn nested_and_concurrent_enters_finish() {
    let (nested, concurrent) = within(120, || {
        let be = Arc::new(CpuBackend::new(Some(2)).unwrap());
        let nested = be.enter(|| be.enter(|| shared_sum(3000)) + shared_sum(10));
        // Two callers, each a stream of forward passes on the one pool.
        let callers: Vec<_> = (0..2u64)
            .map(|c| {
                let be = Arc::clone(&be);
                std::thread::spawn(move || {
                    (0..100u64)
                        .map(|i| be.enter(|| shared_sum(2000 + 7 * i + c)))
                        .sum::<u64>()
                })
            })
            .collect();
        let sums: Vec<u64> = callers.into_iter().map(|h| h.join().unwrap()).collect();
        (nested, sums)
    });
    assert_eq!(nested, want(3000) + want(10));
    let expected: Vec<u64> = (0..2u64)
        .map(|c| (0..100u64).map(|i| want(2000 + 7 * i + c)).sum())
        .collect();
    assert_eq!(concurrent, expected);
}
