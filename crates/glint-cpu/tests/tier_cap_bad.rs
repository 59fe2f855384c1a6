//! A `GLINT_CPU_TIER` that names no tier stops the backend from starting,
//! with the variable and the value in the error. Alone in its test binary:
//! the cap is read once per process.

use glint_cpu::{qdot, CpuBackend};

#[test]
fn an_unknown_tier_is_refused_with_its_name() {
    std::env::set_var(qdot::TIER_VAR, "avx9000");
    let err = CpuBackend::new(Some(1))
        .err()
        .expect("an unknown tier must not start");
    let text = err.to_string();
    assert!(
        text.contains("GLINT_CPU_TIER=avx9000") && text.contains("native, avx2 or plain"),
        "{text}"
    );
}
