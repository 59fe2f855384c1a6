//! The decode matvec's rows at once timed on the adapter at load, the
//! fastest kept ([`GpuBackend::tune_matvec`]).
//!
//! How many rows a subgroup dots at once (1, 2 or 4: x read once for them,
//! more registers a lane, fewer workgroups) depends on the hardware and on
//! nothing the adapter reports: lavapipe favours 4, llama.cpp's Vulkan
//! backend takes 2 for Q4_0 and the K-quants, no GPU has said yet for
//! glint. So on a hardware adapter the backend times each and keeps the
//! fastest, rather than a default guessed for one vendor.
//!
//! What is timed is the caller's step: for a model (the `glint` crate), a
//! real one-token decode step in a scratch context, the fused kernels,
//! attention and the read of the argmax included, wall clock from its
//! first op to its token. The variants take turns step by step
//! ([`TUNE_PASSES`] each after one untimed step that builds their
//! pipelines), so a clock that drifts drifts for all of them, and each is
//! judged by its median. The default stays unless another's median is more
//! than [`TUNE_MARGIN`] below it.
//!
//! Only a choice that changes no bits is tuned: each row's sums are those
//! of a row alone whatever the rows at once, so a model's logits are the
//! same to the bit whichever the tune keeps, from one load to the next and
//! with the tune off (where the driver gives every pipeline the same
//! subgroup size: WGSL cannot ask for one, and a driver that sizes each
//! pipeline's subgroups by its registers would stride a row's lanes
//! differently). Flag `PS` (each group's dot scaled once) rounds
//! differently, and the int8 path is a choice of numerics: both stay as
//! the options set them, so a noisy clock never changes an answer.

use std::fmt;
use std::time::{Duration, Instant};

use std::sync::atomic::Ordering;

use glint_backend::{BackendError, Result};

use crate::{ops, GpuBackend, GpuOptions};

/// Timed passes a variant gets (after an untimed one).
pub const TUNE_PASSES: usize = 5;

/// How much faster than the default (relative, by median) another
/// variant must be to be kept instead: below it, a difference is taken
/// for noise and the default stays.
pub const TUNE_MARGIN: f64 = 0.03;

/// One variant of the decode matvec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecChoice {
    /// Rows a subgroup dots at once ([`GpuOptions::matvec_rows`]).
    pub rows: usize,
}

impl fmt::Display for MatvecChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rows {} at once", self.rows)
    }
}

/// One variant's time.
#[derive(Clone, Debug)]
pub struct TuneRun {
    /// The variant.
    pub choice: MatvecChoice,
    /// Median wall time of its timed steps (the caller's step, from the
    /// host: recording, submit, the device's work and the wait).
    pub median: Duration,
}

/// What [`GpuBackend::tune_matvec`] measured and kept.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// Every variant timed, the default first.
    pub runs: Vec<TuneRun>,
    /// Index into `runs` of the variant kept.
    pub chosen: usize,
    /// Weight bytes a step reads (the caller's figure; for GB/s).
    pub step_bytes: u64,
    /// Timed steps each variant got.
    pub passes: usize,
}

impl TuneReport {
    /// The variant kept.
    pub fn choice(&self) -> MatvecChoice {
        self.runs[self.chosen].choice
    }
}

impl fmt::Display for TuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "matvec tune: median of {} steps each, {:.1} MB of weights a step",
            self.passes,
            self.step_bytes as f64 / 1e6
        )?;
        for (i, r) in self.runs.iter().enumerate() {
            let s = r.median.as_secs_f64();
            let gbs = self.step_bytes as f64 / s.max(1e-12) / 1e9;
            let mut tags = Vec::new();
            if i == 0 {
                tags.push("default");
            }
            if i == self.chosen {
                tags.push("kept");
            }
            let tags = match tags.is_empty() {
                true => String::new(),
                false => format!("  ({})", tags.join(", ")),
            };
            writeln!(
                f,
                "  {:<16} {:>9.3} ms {:>8.1} GB/s{tags}",
                r.choice.to_string(),
                s * 1e3,
                gbs
            )?;
        }
        Ok(())
    }
}

/// What the tune may change, from the options and the environment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tunable {
    /// Whether [`GpuBackend::tune_matvec`] runs at all.
    on: bool,
    /// The rows at once were set ([`GpuOptions::matvec_rows`] not 0, or
    /// `GLINT_MATVEC_ROWS`): kept.
    rows_set: bool,
}

/// `GLINT_TUNE`'s value: `Some(true)` for 1, `Some(false)` for 0, `None`
/// unset; anything else is an error naming the variable.
pub(crate) fn parse_env(env: Option<&std::ffi::OsStr>) -> Result<Option<bool>> {
    let what = ("time the matvec's variants at load", "take the defaults");
    crate::switch("GLINT_TUNE", env, what)
}

impl Tunable {
    /// From `opts`, `GLINT_TUNE` where set (`env`, [`parse_env`]'s), and
    /// the adapter's type and subgroup sizes (`fixed_subgroups`: its least
    /// and largest subgroup size are one): unless told, on for hardware
    /// (discrete, integrated, virtual) whose subgroups have one size, off
    /// for a software adapter, one of unknown type, or one whose driver
    /// may size each pipeline's subgroups differently (AMD's wave32/wave64,
    /// Intel's SIMD8 to SIMD32), where the rows at once might change a
    /// row's bits.
    pub(crate) fn new(
        opts: &GpuOptions,
        env: Option<bool>,
        device: wgpu::DeviceType,
        fixed_subgroups: bool,
    ) -> Tunable {
        use wgpu::DeviceType as D;
        let hardware = matches!(device, D::DiscreteGpu | D::IntegratedGpu | D::VirtualGpu);
        let on = env.or(opts.tune).unwrap_or(hardware && fixed_subgroups);
        Tunable {
            on,
            rows_set: opts.matvec_rows != 0 || std::env::var_os("GLINT_MATVEC_ROWS").is_some(),
        }
    }

    /// Whether the tune runs ([`GpuOptions::tune`], `GLINT_TUNE`).
    pub(crate) fn on(&self) -> bool {
        self.on
    }
}

impl GpuBackend {
    /// Whether [`GpuBackend::tune_matvec`] would time anything: the tune
    /// is on ([`GpuOptions::tune`], `GLINT_TUNE`), subgroups take the
    /// matvec's rows, and the rows were not set (the options,
    /// `GLINT_MATVEC_ROWS`). A caller checks it before it sets up a step.
    pub fn tune_wanted(&self) -> bool {
        self.tune.on() && self.tune_choices().len() > 1
    }

    /// Where [`tune_wanted`](Self::tune_wanted): time `step` at each
    /// number of rows at once ([`MatvecChoice`]) and keep the fastest (the
    /// module's doc says how; no bit of any result depends on it where
    /// every pipeline gets the adapter's one subgroup size). `step`
    /// runs whatever work is to be timed and waits for it (a model's
    /// one-token decode step and the read of its token); `step_bytes`, the
    /// weight bytes it reads, only labels the report. `None` where there
    /// is nothing to tune; else what was measured, also kept for
    /// [`GpuBackend::tune_report`] (the backend's name then says "matvec
    /// tuned at load"). Call it once, before the work it tunes for, with
    /// nothing else recording on the backend meanwhile (an op reads the
    /// rows more than once as it picks its pipeline and workgroups): the
    /// variants' pipelines are built here (and stay cached). On an error
    /// (the step's, or the device's) the default is restored.
    pub fn tune_matvec<E: From<BackendError>>(
        &self,
        step_bytes: u64,
        mut step: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<TuneReport>, E> {
        if !self.tune_wanted() {
            return Ok(None);
        }
        let choices = self.tune_choices();
        let start = choices[0];
        let timed = self.time_choices(&choices, &mut step);
        self.set_choice(start);
        let medians = timed?;
        let chosen = keep(&medians);
        self.set_choice(choices[chosen]);
        if self.profiler.is_some() {
            // The tune's dispatches are not the model's: dropped.
            self.take_profile()?;
        }
        let report = TuneReport {
            runs: choices
                .iter()
                .zip(&medians)
                .map(|(&choice, &median)| TuneRun { choice, median })
                .collect(),
            chosen,
            step_bytes,
            passes: TUNE_PASSES,
        };
        *self.tuned.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
        Ok(Some(report))
    }

    /// What [`GpuBackend::tune_matvec`] measured and kept, once it ran.
    pub fn tune_report(&self) -> Option<TuneReport> {
        self.tuned.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The matvec variant in force (the rows a subgroup takes at once: 1
    /// where a row is a workgroup's, [`GpuBackend::matvec_rows`]).
    pub fn matvec_choice(&self) -> MatvecChoice {
        MatvecChoice {
            rows: self.matvec_rows(),
        }
    }

    fn set_choice(&self, c: MatvecChoice) {
        self.matvec_rows.store(c.rows, Ordering::Relaxed);
    }

    /// The variants to time, the one in force first: rows 1, 2 and 4
    /// (those `GLINT_MATVEC_ROWS` takes) where subgroups take rows and the
    /// rows were not set; else only the one in force.
    fn tune_choices(&self) -> Vec<MatvecChoice> {
        let now = self.matvec_choice();
        if self.tune.rows_set || ops::matvec_rows_per_group(self) == 0 {
            return vec![now];
        }
        std::iter::once(now.rows)
            .chain([1, 2, 4].into_iter().filter(|&r| r != now.rows))
            .map(|rows| MatvecChoice { rows })
            .collect()
    }

    /// Each choice's median step time, in `choices`' order.
    fn time_choices<E>(
        &self,
        choices: &[MatvecChoice],
        step: &mut impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Vec<Duration>, E> {
        for &c in choices {
            self.set_choice(c);
            step()?;
        }
        let mut times = vec![Vec::with_capacity(TUNE_PASSES); choices.len()];
        for _ in 0..TUNE_PASSES {
            for (i, &c) in choices.iter().enumerate() {
                self.set_choice(c);
                let t = Instant::now();
                step()?;
                times[i].push(t.elapsed());
            }
        }
        Ok(times
            .into_iter()
            .map(|mut t| {
                t.sort();
                t[t.len() / 2]
            })
            .collect())
    }
}

/// The index kept of `medians` (the default's first): the fastest,
/// unless it is no more than [`TUNE_MARGIN`] below the default.
pub(crate) fn keep(medians: &[Duration]) -> usize {
    let Some(best) = (0..medians.len()).min_by_key(|&i| medians[i]) else {
        return 0;
    };
    let default = medians[0].as_secs_f64();
    if medians[best].as_secs_f64() < default * (1.0 - TUNE_MARGIN) {
        best
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_micros(m)).collect()
    }

    #[test]
    fn the_default_stays_unless_beaten_by_the_margin() {
        // 3% of 1000 µs: 970 is not below it, 969 is.
        assert_eq!(keep(&ms(&[1000, 980, 1200])), 0);
        assert_eq!(keep(&ms(&[1000, 970, 1200])), 0);
        assert_eq!(keep(&ms(&[1000, 969, 1200])), 1);
        assert_eq!(keep(&ms(&[1000, 1100, 500])), 2);
        assert_eq!(keep(&ms(&[1000])), 0);
    }

    #[test]
    fn glint_tune_takes_1_or_0() {
        use std::ffi::OsStr;
        assert_eq!(parse_env(None).unwrap(), None);
        assert_eq!(parse_env(Some(OsStr::new("1"))).unwrap(), Some(true));
        assert_eq!(parse_env(Some(OsStr::new(" 0 "))).unwrap(), Some(false));
        for bad in ["on", "", "2"] {
            let e = parse_env(Some(OsStr::new(bad))).unwrap_err().to_string();
            assert!(e.contains("GLINT_TUNE"), "{e}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let e = parse_env(Some(OsStr::from_bytes(b"\xff"))).unwrap_err();
            assert!(e.to_string().contains("GLINT_TUNE"), "{e}");
        }
    }

    #[test]
    fn the_tune_is_on_for_hardware_unless_told() {
        use wgpu::DeviceType as D;
        if std::env::var_os("GLINT_MATVEC_ROWS").is_some() {
            return;
        }
        let o = GpuOptions::default();
        let env = |v: Option<&str>| parse_env(v.map(std::ffi::OsStr::new)).unwrap();
        let on = |o: &GpuOptions, v: Option<&str>, d| Tunable::new(o, env(v), d, true).on();
        assert!(on(&o, None, D::DiscreteGpu));
        assert!(on(&o, None, D::IntegratedGpu));
        assert!(on(&o, None, D::VirtualGpu));
        assert!(!on(&o, None, D::Cpu));
        assert!(!on(&o, None, D::Other));
        assert!(!on(&o, Some("0"), D::DiscreteGpu));
        assert!(on(&o, Some("1"), D::Cpu));
        // Subgroups of more than one size: off unless asked for.
        let mixed =
            |o: &GpuOptions, v: Option<&str>| Tunable::new(o, env(v), D::DiscreteGpu, false).on();
        assert!(!mixed(&o, None));
        assert!(mixed(&o, Some("1")));
        let off = GpuOptions {
            tune: Some(false),
            ..Default::default()
        };
        assert!(!on(&off, None, D::DiscreteGpu));
        assert!(on(&off, Some("1"), D::DiscreteGpu));
        let forced = GpuOptions {
            tune: Some(true),
            ..Default::default()
        };
        assert!(mixed(&forced, None));
        let t = Tunable::new(
            &GpuOptions {
                matvec_rows: 4,
                ..Default::default()
            },
            None,
            D::Cpu,
            true,
        );
        assert!(t.rows_set);
    }
}
