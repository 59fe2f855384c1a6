//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Path of a real test model; panics (failing the test) with how to fetch it.
pub fn model(name: &str) -> PathBuf {
    glint::models::test_model(name).unwrap_or_else(|e| panic!("{e}"))
}

/// `../shared/reference/<rel>` beside the project root, or a failure saying where it looked.
pub fn reference(rel: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/reference")
        .join(rel);
    assert!(
        p.exists(),
        "reference file {} is missing (shared/ must sit beside the project)",
        p.display()
    );
    p
}

/// Run the `glint` binary with `args`.
pub fn glint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glint"))
        .args(args)
        .output()
        .expect("the glint binary runs")
}
