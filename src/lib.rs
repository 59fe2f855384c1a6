//! The `glint` command line's library: the commands, and the tooling that is
//! not part of the engine — the model fetcher, the bench harness, synthetic
//! models and `inspect`'s rendering. The engine itself is the `glint` crate
//! (crates/glint), used here only through its public API.

pub mod bench;
pub mod cli;
pub mod inspect;
pub mod models;
pub mod synthetic;
