//! The wgpu backend of glint: every op of [`glint_backend::Backend`] as a
//! WGSL compute kernel (files under the top-level `shaders/` folder).
//!
//! - Ops record into one compute pass of one command encoder that is
//!   submitted on `read`, `sync`, `write` (writes go through the queue,
//!   which would otherwise overtake recorded work) or after
//!   [`MAX_PENDING_OPS`] ops: a decode step is one pass and one submit. Once
//!   warm, an op creates nothing: its params go to a uniform arena (one
//!   queue write per submit, a dynamic offset per dispatch), its bind group
//!   comes from a cache keyed by the buffers it binds (dropped with them),
//!   and readbacks reuse a pool of readback buffers.
//! - A binding may not exceed `max_storage_buffer_binding_size` (128 MiB on
//!   lavapipe), so `mul_mat` weights and `get_rows` tables bigger than that
//!   are bound as windows of whole rows at aligned offsets, one dispatch per
//!   window.
//! - Optional features, each used where the device has it (and
//!   [`GpuOptions`] does not disable it), each with a path without it:
//!   `SHADER_F16`: F16 weights (`mul_mat`, `get_rows`) and F16 caches
//!   (`attention`) are bound as `array<f16>`; without it they are read as
//!   packed `u32` words with `unpack2x16float` (BF16 always is). `SUBGROUP`:
//!   the reductions of the `mul_mat` matvec, `rms_norm`, `softmax` and
//!   `attention` use `subgroupAdd`/`subgroupMax` before workgroup memory;
//!   without it, a tree in workgroup memory. [`GpuBackend::features_used`]
//!   says which. Accumulation is f32 either way. F16 caches need an even
//!   row length (a u32 word never spans two rows).
//! - Device errors (validation, out of memory) are caught by an uncaptured
//!   error handler and returned as [`glint_backend::BackendError::Device`] by the next
//!   `read`/`sync`/`alloc`, never a panic.
#![deny(unsafe_code)]

mod context;
mod counters;
mod few;
mod measure;
mod ops;
mod pipelines;
mod profile;
mod shaders;
mod submit;
mod tensor;
mod tune;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use context::Context;
pub use context::{list_adapters, AdapterSummary, GpuOptions};
pub use counters::GpuCounters;
use glint_backend::{
    AttnParams, Backend, BackendError, Glu, KqMask, MemoryReport, PostAdd, QkNorm, Result,
    RopeParams, SharedBytes, TensorDesc, Unary,
};
pub use measure::{CopyProbe, COPY_BATCH};
use pipelines::PipelineCache;
pub use profile::{KernelTime, GAPS};
use submit::Pending;
pub use submit::MAX_PENDING_OPS;
use tensor::Counters;
pub use tensor::GpuTensor;
pub use tune::{MatvecChoice, TuneReport, TuneRun, TUNE_MARGIN, TUNE_PASSES};
/// The wgpu version this backend is built on (for adapter types and backends).
pub use wgpu;

/// The optional device features the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeaturesUsed {
    /// `SHADER_F16`: F16 weights and caches are read as `f16`.
    pub f16: bool,
    /// `SUBGROUP`: reductions use subgroup operations.
    pub subgroups: bool,
    /// `IMMEDIATES`: each kernel's params are its dispatch's immediate
    /// data, not a block of the per-submit uniform arena.
    pub immediates: bool,
    /// Matvecs of the formats with an int8 path take integer dots
    /// ([`GpuOptions::int8_matvec`]).
    pub int8: bool,
}

/// The wgpu backend: the device (context.rs), the pipeline cache
/// (pipelines.rs), the encoder being recorded (submit.rs) and the byte
/// counters of the tensors it holds (tensor.rs); the ops are in ops/.
pub struct GpuBackend {
    ctx: Context,
    pipelines: PipelineCache,
    pending: Mutex<Pending>,
    /// Uniform blocks of the recorded ops (room for `MAX_PENDING_OPS` of
    /// the largest), filled by one queue write per submit; blocks start at
    /// multiples of `param_align` (the device's dynamic-offset alignment).
    params: wgpu::Buffer,
    param_align: usize,
    /// Staging for a submit's small writes (`[UPLOAD_BYTES]` u8, written
    /// by one queue write a submit and copied out in its encoder): see
    /// [`GpuBackend::write_bytes`].
    uploads: wgpu::Buffer,
    /// Persistent readback buffers (MAP_READ), grown when a read needs
    /// more: as many as reads were ever in flight together (`read` takes
    /// one for its duration, `Backend::read_start` until `read_finish`;
    /// two for each context chaining greedy steps).
    readings: Arc<Mutex<Vec<submit::ReadSlot>>>,
    binds: Arc<tensor::BindCache>,
    counters: Arc<Counters>,
    /// What was asked of the device (dispatches, submits, buffers, ...).
    work: counters::Work,
    max_binding_bytes: Option<u64>,
    /// Split-KV attention's partials ([`ops::attention`]): grown to the
    /// largest split dispatch so far, counted as scratch.
    attn_partials: Mutex<Option<GpuTensor>>,
    /// Per-dispatch device time, when [`GpuOptions::profile`] asked for it.
    profiler: Option<profile::Profiler>,
    /// Matvecs take a row a subgroup (flag `SGROW`) where the device has
    /// subgroups; off when the environment has `GLINT_MATVEC_WG_ROWS` (a
    /// row a workgroup, as before: to compare the two on a device).
    matvec_sgrow: bool,
    /// Rows a matvec subgroup takes at once ([`GpuOptions::matvec_rows`]);
    /// set by [`GpuBackend::tune_matvec`] between its steps, read when an
    /// op picks its pipeline.
    matvec_rows: std::sync::atomic::AtomicUsize,
    /// Float matvecs of the formats whose weights are a scale times a
    /// level dot the levels and scale each group's dot once (flag `PS`,
    /// `ops::has_pair_scaled`); off with
    /// [`GpuOptions::disable_matvec_scaled`] or `GLINT_MATVEC_SCALED=0`.
    matvec_scaled: bool,
    /// The matmul's output tile side, 0 for the shape's
    /// ([`GpuOptions::matmul_tile`]).
    matmul_tile: usize,
    /// Prefill attention runs by tiles of tokens (`ops::attention`'s
    /// `tile` entry); off when the environment has `GLINT_ATTN_TILE=0`
    /// (a workgroup a token, as before: to compare the two on a device).
    attn_tiles: bool,
    /// Other batches run tiles of one token ([`GpuOptions::decode_tiles`]).
    decode_tiles: bool,
    /// Matvecs of the formats with an int8 path take integer dots (flag `Q8`):
    /// [`GpuOptions::int8_matvec`] where the device can.
    int8: bool,
    /// The adapter has the wide int8 matvec's workgroup memory (flag Q8W).
    int8_wide: bool,
    /// What [`GpuBackend::tune_matvec`] may change: whether it runs
    /// ([`GpuOptions::tune`]), and which of its choices were set by the
    /// options or the environment and stay.
    tune: tune::Tunable,
    /// What the tune measured and kept, once it ran.
    tuned: Mutex<Option<TuneReport>>,
}

/// A setting that is one of a few numbers: the environment's `env` where
/// set (over the option), else the option `opt` (`(value, its name)`); 0
/// from either is `default`, and only `allowed` are taken, else an error
/// naming where the number came from and what `what` takes.
fn one_of(
    env: &str,
    opt: (usize, &str),
    allowed: &[usize],
    default: usize,
    what: &str,
) -> Result<usize> {
    let list = allowed
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (n, from) = match std::env::var_os(env) {
        Some(v) => match v.to_str().and_then(|s| s.trim().parse::<usize>().ok()) {
            Some(n) => (n, env),
            None => {
                return Err(BackendError::Device(format!(
                    "{env}={v:?}: not a number of {what} ({list}, or 0 for the default)"
                )))
            }
        },
        None => opt,
    };
    match n {
        0 => Ok(default),
        n if allowed.contains(&n) => Ok(n),
        n => Err(BackendError::Device(format!(
            "{from} = {n}: {what} are {list}"
        ))),
    }
}

/// The rows a matvec subgroup takes at once: `GLINT_MATVEC_ROWS` where
/// set, else [`GpuOptions::matvec_rows`] (0: the default, 2); 1, 2 or 4
/// (at most [`ops::MATVEC_MAX_JOINT`]), else an error naming where the
/// number came from.
fn matvec_rows(opts: &GpuOptions) -> Result<usize> {
    // The list's largest is matvec_cols.wgsl's MAX_NR.
    const _: () = assert!(ops::MATVEC_MAX_JOINT == 4);
    let opt = (opts.matvec_rows, "GpuOptions::matvec_rows");
    one_of(
        "GLINT_MATVEC_ROWS",
        opt,
        &[1, 2, 4],
        2,
        "matvec rows at once",
    )
}

/// An on/off switch from the environment: `env`, the value of variable
/// `name`, is 1 (`Some(true)`), 0 (`Some(false)`) or unset (`None`); any
/// other value (a misspelt "off", non-UTF-8) is an error naming the
/// variable and what each value means (`on`, `off`), so nothing is left
/// on or off unsaid.
pub(crate) fn switch(
    name: &str,
    env: Option<&std::ffi::OsStr>,
    (on, off): (&str, &str),
) -> Result<Option<bool>> {
    match env.map(|v| (v, v.to_str().map(str::trim))) {
        None => Ok(None),
        Some((_, Some("1"))) => Ok(Some(true)),
        Some((_, Some("0"))) => Ok(Some(false)),
        Some((v, _)) => Err(BackendError::Device(format!(
            "{name}={v:?}: 1 ({on}) or 0 ({off})"
        ))),
    }
}

/// Whether float matvecs scale each group's dot once (flag PS): the
/// environment's `GLINT_MATVEC_SCALED` (`env`: 1 yes, 0 no) where set, else
/// not [`GpuOptions::disable_matvec_scaled`]; any other value is an error
/// naming the variable (a misspelt "off" must not leave it on unsaid).
fn matvec_scaled(opts: &GpuOptions, env: Option<&std::ffi::OsStr>) -> Result<bool> {
    let what = ("each group's dot scaled once", "each weight scaled");
    Ok(switch("GLINT_MATVEC_SCALED", env, what)?.unwrap_or(!opts.disable_matvec_scaled))
}

/// Whether the matvecs take the int8 path, asked for: the environment's
/// `GLINT_INT8` (`env`: 1 yes, 0 no) where set, else
/// [`GpuOptions::int8_matvec`]; any other value is an error naming the
/// variable. (The device must also have what it takes.)
fn int8_asked(opts: &GpuOptions, env: Option<&std::ffi::OsStr>) -> Result<bool> {
    let what = ("integer dots in the matvecs", "float dots");
    Ok(switch("GLINT_INT8", env, what)?.unwrap_or(opts.int8_matvec))
}

/// Where prefill and decode attention run by tiles of tokens, from the
/// environment's `GLINT_ATTN_TILE` (`env`): unset or `1`, prefill by tiles
/// and decode as [`GpuOptions::decode_tiles`] says; `0`, neither; `all`,
/// both. Anything else is an error naming the variable. Returns
/// `(attn_tiles, decode_tiles)`.
fn attn_tiles(opts: &GpuOptions, env: Option<&std::ffi::OsStr>) -> Result<(bool, bool)> {
    match env.map(|v| (v, v.to_str().map(str::trim))) {
        None | Some((_, Some("1"))) => Ok((true, opts.decode_tiles)),
        Some((_, Some("0"))) => Ok((false, opts.decode_tiles)),
        Some((_, Some("all"))) => Ok((true, true)),
        Some((v, _)) => Err(BackendError::Device(format!(
            "GLINT_ATTN_TILE={v:?}: 1 (prefill attention by tiles of tokens, the default), 0 (a workgroup a token) or all (decode by tiles of one token too)"
        ))),
    }
}

/// Check the settings `opts` and the environment give the backend
/// (`GLINT_MATVEC_ROWS`, `GLINT_MATVEC_SCALED`, `GLINT_MATMUL_TILE`,
/// `GLINT_TUNE`, `GLINT_INT8`, `GLINT_ATTN_TILE`) without opening a device: the error
/// [`GpuBackend::new`] would give for a value it does not take. A caller
/// that falls back to another backend when no adapter opens (`--backend
/// auto`) checks these first, so a misspelt setting is said, not taken
/// for a missing GPU.
pub fn check_settings(opts: &GpuOptions) -> Result<()> {
    Settings::read(opts).map(drop)
}

/// What the options and the environment set, each read once
/// ([`check_settings`] says which variables).
struct Settings {
    matvec_rows: usize,
    matvec_scaled: bool,
    /// `GLINT_TUNE`, where set.
    tune: Option<bool>,
    int8_asked: bool,
    attn_tiles: bool,
    decode_tiles: bool,
}

impl Settings {
    fn read(opts: &GpuOptions) -> Result<Settings> {
        let env = |name| std::env::var_os(name);
        // The tile again once the adapter's limits are known.
        matmul_tile(opts, &wgpu::Limits::default())?;
        let (attn_tiles, decode_tiles) = attn_tiles(opts, env("GLINT_ATTN_TILE").as_deref())?;
        Ok(Settings {
            matvec_rows: matvec_rows(opts)?,
            matvec_scaled: matvec_scaled(opts, env("GLINT_MATVEC_SCALED").as_deref())?,
            tune: tune::parse_env(env("GLINT_TUNE").as_deref())?,
            int8_asked: int8_asked(opts, env("GLINT_INT8").as_deref())?,
            attn_tiles,
            decode_tiles,
        })
    }
}

/// The matmul's output tile: `GLINT_MATMUL_TILE` where set, else
/// [`GpuOptions::matmul_tile`]; 64 or 128, or 0 (the default) for the
/// shape's (ops/mul_mat.rs's `tile_for`), else an error naming where the
/// number came from. An adapter without the 128 tile's workgroup memory
/// ([`ops::TL_WORKGROUP_BYTES`], which every adapter with compute gives)
/// takes 64, or, where 128 was asked for, an error.
fn matmul_tile(opts: &GpuOptions, limits: &wgpu::Limits) -> Result<usize> {
    let opt = (opts.matmul_tile, "GpuOptions::matmul_tile");
    let tile = one_of("GLINT_MATMUL_TILE", opt, &[64, 128], 0, "matmul tile sides")?;
    let room = limits.max_compute_workgroup_storage_size;
    match tile {
        _ if room >= ops::TL_WORKGROUP_BYTES => Ok(tile),
        128 => Err(BackendError::Device(format!(
            "matmul tiles of 128 need {} bytes of workgroup memory; the adapter gives {room}",
            ops::TL_WORKGROUP_BYTES
        ))),
        _ => Ok(64),
    }
}

impl GpuBackend {
    /// Open the adapter `opts` picks and a device with its limits.
    pub fn new(mut opts: GpuOptions) -> Result<Self> {
        opts.profile |= std::env::var_os("GLINT_GPU_PROFILE").is_some();
        // Read before the device opens, so a bad value opens none.
        let set = Settings::read(&opts)?;
        let ctx = Context::new(&opts)?;
        let fixed_subgroups = ctx.info.subgroup_min_size == ctx.info.subgroup_max_size;
        let tune = tune::Tunable::new(&opts, set.tune, ctx.info.device_type, fixed_subgroups);
        let matmul_tile = matmul_tile(&opts, &ctx.limits)?;
        let profiler = opts
            .profile
            .then(|| profile::Profiler::new(&ctx.device, &ctx.queue));
        let int8 = set.int8_asked && ops::int8_fits(&ctx);
        let int8_wide = ops::int8_wide_fits(&ctx);
        let param_align = ctx.limits.min_uniform_buffer_offset_alignment.max(16) as usize;
        let largest = submit::PARAMS_MAX_BYTES.next_multiple_of(param_align as u64);
        let params = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params arena"),
            size: largest * MAX_PENDING_OPS as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let uploads = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("uploads"),
            size: submit::UPLOAD_BYTES,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(GpuBackend {
            ctx,
            pipelines: PipelineCache::new(
                opts.loop_bounding || std::env::var_os("GLINT_WGPU_LOOP_BOUNDING").is_some(),
            ),
            pending: Mutex::new(Pending::new()),
            params,
            param_align,
            uploads,
            readings: Arc::default(),
            binds: Arc::default(),
            counters: Arc::default(),
            work: counters::Work::default(),
            max_binding_bytes: opts.max_binding_bytes,
            attn_partials: Mutex::new(None),
            profiler,
            matvec_sgrow: std::env::var_os("GLINT_MATVEC_WG_ROWS").is_none(),
            matvec_rows: set.matvec_rows.into(),
            matvec_scaled: set.matvec_scaled,
            matmul_tile,
            attn_tiles: set.attn_tiles,
            decode_tiles: set.decode_tiles,
            int8,
            int8_wide,
            tune,
            tuned: Mutex::new(None),
        })
    }

    /// With [`GpuOptions::profile`]: the device time of every kernel
    /// variant since the last call (pending work is run first), most
    /// time first, and last the time between dispatches ([`GAPS`]).
    /// `None` without profiling.
    pub fn take_profile(&self) -> Result<Option<Vec<KernelTime>>> {
        let Some(prof) = &self.profiler else {
            return Ok(None);
        };
        self.flush();
        self.wait()?;
        Ok(Some(prof.take()))
    }

    /// Rows a matvec's subgroup takes at once ([`GpuOptions::matvec_rows`];
    /// 1 where matvecs take a row a workgroup).
    pub fn matvec_rows(&self) -> usize {
        ops::matvec_joint_rows(self)
    }

    /// The matmul's output tile side where it is forced
    /// ([`GpuOptions::matmul_tile`], `GLINT_MATMUL_TILE`): 64 or 128; 0
    /// where the shape picks it.
    pub fn matmul_tile(&self) -> usize {
        self.matmul_tile
    }

    /// The work counters so far: read before and after a step, the
    /// difference ([`GpuCounters::since`]) is the step's structure.
    pub fn work_counters(&self) -> GpuCounters {
        let mut c = self.work.snapshot();
        c.pipelines_created = self
            .pipelines
            .created
            .load(std::sync::atomic::Ordering::Relaxed);
        c
    }

    /// Nanoseconds the host has spent in queue submits and in waits for
    /// the device since the backend was made: a step's wall time less the
    /// difference of two readings is the host's own cost of the step
    /// (recording, encoding, its own logic). A clock, so not one of the
    /// deterministic [`GpuCounters`]. On a driver that runs the work
    /// inside the submit (lavapipe), the submit's own host cost counts as
    /// blocked.
    pub fn host_blocked_ns(&self) -> u64 {
        self.work
            .blocked_ns
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The adapter in use (tests assert its backend).
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.ctx.info
    }

    /// The device limits requested (the adapter's own).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.ctx.limits
    }

    /// Optional features the device got (SHADER_F16, SUBGROUP when present
    /// and not disabled in [`GpuOptions`]).
    pub fn features(&self) -> wgpu::Features {
        self.ctx.features
    }

    /// Whether [`Backend::norm_mul_mats`] folds the norm into its matvecs:
    /// a decode-sized `x` (at most [`ops::MATVEC_MAX_M`] columns), after
    /// the norm's own checks (`h` is where it would go otherwise).
    fn folds_norm(&self, x: &GpuTensor, (nw, _): (&GpuTensor, f32), h: &GpuTensor) -> Result<bool> {
        glint_backend::check::rms_norm(x, Some(nw), h)?;
        Ok(x.desc.n_rows() <= ops::MATVEC_MAX_M)
    }

    /// `outs[i] = ws[i] · x` (with `norm`: of `rms_norm(x) * norm.0`), the
    /// weights taken in runs of parts packed together in one type: a run of
    /// 2 or 3 is one fused dispatch, a part alone its own matvec (Gemma 3's
    /// Q/K of one type and V of another: two dispatches, not three). With
    /// `add`, the first fused run adds the pending post-norm as it reads x
    /// and stores the sum (`add.out`), which the later runs read; where the
    /// first run cannot, `rms_norm_add` first.
    fn mul_mats_in_runs<'a>(
        &self,
        ws: &[&GpuTensor],
        mut x: &'a GpuTensor,
        norm: ops::Norm,
        mut add: Option<PostAdd<'a, GpuTensor>>,
        outs: &[&GpuTensor],
    ) -> Result<()> {
        if ws.len() != outs.len() {
            return Err(BackendError::Shape {
                op: "mul_mats",
                detail: format!("{} weights for {} outputs", ws.len(), outs.len()),
            });
        }
        let mut i = 0;
        while i < ws.len() {
            let mut j = i + 1;
            while j < ws.len()
                && j - i < 3
                && ws[j].buf_id == ws[i].buf_id
                && ws[j].desc.ty == ws[i].desc.ty
                && ws[j].desc.ne[0] == ws[i].desc.ne[0]
            {
                j += 1;
            }
            let (run, ro) = (&ws[i..j], &outs[i..j]);
            let fused = run.len() >= 2 && ops::mul_mats(self, run, x, norm, add, ro)?;
            // Refused with the add: added apart, then the run fused without
            // it (refused without one, a second try would be refused too).
            let mut retry = false;
            if let Some(a) = add.take() {
                if !fused {
                    ops::rms_norm_add(self, a.y, a.w, a.eps, x, a.out)?;
                    retry = run.len() >= 2;
                }
                x = a.out;
            }
            let done = fused || (retry && ops::mul_mats(self, run, x, norm, None, ro)?);
            if !done {
                for (w, o) in run.iter().zip(ro) {
                    ops::mul_mat_normed(self, w, x, norm, o)?;
                }
            }
            i = j;
        }
        if let Some(a) = add {
            // No weights: the stream is still owed.
            ops::rms_norm_add(self, a.y, a.w, a.eps, x, a.out)?;
        }
        Ok(())
    }

    /// Which optional features the kernels use: every one the device got.
    pub fn features_used(&self) -> FeaturesUsed {
        FeaturesUsed {
            f16: self.ctx.features.contains(wgpu::Features::SHADER_F16),
            subgroups: self.ctx.features.contains(wgpu::Features::SUBGROUP),
            immediates: self.ctx.features.contains(wgpu::Features::IMMEDIATES),
            int8: self.int8,
        }
    }
}

impl Backend for GpuBackend {
    type Tensor = GpuTensor;

    fn name(&self) -> String {
        let used = self.features_used();
        let mut feats: Vec<&str> = Vec::new();
        if used.f16 {
            feats.push("f16");
        }
        let rows = format!("subgroups, matvec rows {} at once", self.matvec_rows());
        if used.subgroups {
            feats.push(&rows);
        }
        if used.immediates {
            feats.push("immediates");
        }
        if used.int8 {
            feats.push("int8 matvec");
        }
        if !self.matvec_scaled {
            feats.push("matvec scales each weight");
        }
        if self.tune_report().is_some() {
            feats.push("matvec tuned at load");
        }
        let tile = format!("matmul tile {}", self.matmul_tile);
        if self.matmul_tile != 0 {
            feats.push(&tile);
        }
        if feats.is_empty() {
            feats.push("no optional features");
        }
        format!(
            "wgpu: {} ({:?}; {})",
            self.ctx.info.name,
            self.ctx.info.backend,
            feats.join(", ")
        )
    }

    fn alloc(&self, desc: TensorDesc) -> Result<GpuTensor> {
        self.new_tensor(desc)
    }

    fn weight(&self, desc: TensorDesc, bytes: SharedBytes) -> Result<GpuTensor> {
        let t = self.new_tensor(desc)?;
        let data = bytes.bytes();
        if data.len() != t.desc.n_bytes() {
            return Err(BackendError::Shape {
                op: "weight",
                detail: format!(
                    "`{}`: {} bytes given, {:?} {} needs {}",
                    t.desc.label,
                    data.len(),
                    t.desc.ne,
                    t.desc.ty.name(),
                    t.desc.n_bytes()
                ),
            });
        }
        self.write(&t, 0, data)?;
        Ok(t)
    }

    fn rope_store(
        &self,
        [q, k, v]: [&GpuTensor; 3],
        norm: Option<QkNorm<'_, GpuTensor>>,
        pos: &GpuTensor,
        [pq, pk]: [&RopeParams; 2],
        [qr, kr]: [&GpuTensor; 2],
        rows: &GpuTensor,
        [kc, vc]: [&GpuTensor; 2],
    ) -> Result<()> {
        let norm_w = norm.map(|n| (n.w, n.eps));
        if ops::rope_store(self, [q, k, v], norm_w, pos, [pq, pk], qr, rows, [kc, vc])? {
            return Ok(());
        }
        if let Some(n) = norm {
            // Normed apart, then this op without its norm (the fused kernel
            // where it applies, else the four ops).
            self.rms_norm(q, Some(n.w[0]), n.eps, n.out[0])?;
            self.rms_norm(k, Some(n.w[1]), n.eps, n.out[1])?;
            let qkv = [n.out[0], n.out[1], v];
            return self.rope_store(qkv, None, pos, [pq, pk], [qr, kr], rows, [kc, vc]);
        }
        self.rope(q, pos, pq, qr)?;
        self.rope(k, pos, pk, kr)?;
        let n = pk.head_dim * pk.n_head;
        let m = kr.desc.n_elements() / n.max(1);
        self.set_rows(&self.view(kr, [n, m, 1, 1])?, rows, kc)?;
        self.set_rows(v, rows, vc)
    }

    fn weights(&self, parts: Vec<(TensorDesc, SharedBytes)>) -> Result<Vec<GpuTensor>> {
        match self.pack_weights(&parts)? {
            Some(ts) => Ok(ts),
            None => parts.into_iter().map(|(d, b)| self.weight(d, b)).collect(),
        }
    }

    fn mul_mats(&self, ws: &[&GpuTensor], x: &GpuTensor, outs: &[&GpuTensor]) -> Result<()> {
        self.mul_mats_in_runs(ws, x, None, None, outs)
    }

    fn mul_mats_glu(
        &self,
        op: Glu,
        wg: &GpuTensor,
        wu: &GpuTensor,
        x: &GpuTensor,
        gate: &GpuTensor,
        up: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        if ops::mul_mats_glu(self, op, wg, wu, x, None, None, out)? {
            return Ok(());
        }
        self.mul_mats(&[wg, wu], x, &[gate, up])?;
        self.glu(op, gate, up, out)
    }

    fn norm_mul_mats(
        &self,
        x: &GpuTensor,
        add: Option<PostAdd<'_, GpuTensor>>,
        norm: (&GpuTensor, f32),
        h: &GpuTensor,
        ws: &[&GpuTensor],
        outs: &[&GpuTensor],
    ) -> Result<()> {
        if !self.folds_norm(x, norm, h)? {
            let x = self.post_add(x, add)?;
            self.rms_norm(x, Some(norm.0), norm.1, h)?;
            return self.mul_mats(ws, h, outs);
        }
        self.mul_mats_in_runs(ws, x, Some(norm), add, outs)
    }

    fn norm_mul_mats_glu(
        &self,
        op: Glu,
        x: &GpuTensor,
        add: Option<PostAdd<'_, GpuTensor>>,
        norm: (&GpuTensor, f32),
        h: &GpuTensor,
        [wg, wu]: [&GpuTensor; 2],
        [gate, up]: [&GpuTensor; 2],
        out: &GpuTensor,
    ) -> Result<()> {
        if !self.folds_norm(x, norm, h)? {
            let x = self.post_add(x, add)?;
            self.rms_norm(x, Some(norm.0), norm.1, h)?;
            return self.mul_mats_glu(op, wg, wu, h, gate, up, out);
        }
        if ops::mul_mats_glu(self, op, wg, wu, x, Some(norm), add, out)? {
            return Ok(());
        }
        let x = self.post_add(x, add)?;
        if ops::mul_mats_glu(self, op, wg, wu, x, Some(norm), None, out)? {
            return Ok(());
        }
        ops::mul_mat_normed(self, wg, x, Some(norm), gate)?;
        ops::mul_mat_normed(self, wu, x, Some(norm), up)?;
        self.glu(op, gate, up, out)
    }

    fn view(&self, t: &GpuTensor, ne: [usize; 4]) -> Result<GpuTensor> {
        self.view_of(t, ne)
    }

    fn write(&self, t: &GpuTensor, offset: usize, data: &[u8]) -> Result<()> {
        self.write_bytes(t, offset, data)
    }

    fn read(&self, t: &GpuTensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.read_bytes(t, offset, out)
    }

    fn sync(&self) -> Result<()> {
        self.flush();
        self.wait()
    }

    type Reading = submit::Reading;

    fn read_start(&self, t: &GpuTensor, offset: usize, len: usize) -> Result<submit::Reading> {
        self.read_begin(t, offset, len)
    }

    fn read_finish(&self, r: submit::Reading, out: &mut [u8]) -> Result<()> {
        self.read_end(r, out)
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            weights: self.counters.weights.load(Ordering::Relaxed),
            kv_cache: self.counters.kv_cache.load(Ordering::Relaxed),
            scratch: self.counters.scratch.load(Ordering::Relaxed),
            thread_scratch: 0,
        }
    }

    fn mul_mat(&self, w: &GpuTensor, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::mul_mat(self, w, x, out)
    }

    fn get_rows(&self, table: &GpuTensor, ids: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::get_rows(self, table, ids, out)
    }

    fn rms_norm(
        &self,
        x: &GpuTensor,
        w: Option<&GpuTensor>,
        eps: f32,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::rms_norm(self, x, w, eps, out)
    }

    fn norm_add(
        &self,
        x: &GpuTensor,
        (nw, eps): (&GpuTensor, f32),
        res: &GpuTensor,
        _tmp: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::rms_norm_add(self, x, nw, eps, res, out)
    }

    fn mul_mat_add(
        &self,
        w: &GpuTensor,
        x: &GpuTensor,
        res: &GpuTensor,
        tmp: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        if ops::mul_mat_add(self, w, x, res, out)? {
            return Ok(());
        }
        self.mul_mat(w, x, tmp)?;
        self.add(res, tmp, out)
    }

    fn top_k(&self, x: &GpuTensor, k: usize, out: &GpuTensor) -> Result<()> {
        ops::top_k(self, x, k, out)
    }

    fn add(&self, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::add(self, a, b, out)
    }

    fn mul(&self, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::mul(self, a, b, out)
    }

    fn scale(&self, x: &GpuTensor, s: f32, out: &GpuTensor) -> Result<()> {
        ops::scale(self, x, s, out)
    }

    fn unary(&self, op: Unary, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::unary(self, op, x, out)
    }

    fn glu(&self, op: Glu, gate: &GpuTensor, up: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::glu(self, op, gate, up, out)
    }

    fn softmax(&self, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::softmax(self, x, out)
    }

    fn argmax(&self, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        ops::argmax(self, x, out)
    }

    fn kq_mask(
        &self,
        cells: &GpuTensor,
        pos: &GpuTensor,
        seqs: &GpuTensor,
        p: &KqMask,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::kq_mask(self, cells, pos, seqs, p, out)
    }

    fn rope(&self, x: &GpuTensor, pos: &GpuTensor, p: &RopeParams, out: &GpuTensor) -> Result<()> {
        ops::rope(self, x, pos, p, out)
    }

    fn set_rows(&self, src: &GpuTensor, idx: &GpuTensor, dst: &GpuTensor) -> Result<()> {
        ops::set_rows(self, src, idx, dst)
    }

    fn attention(
        &self,
        q: &GpuTensor,
        k: &GpuTensor,
        v: &GpuTensor,
        mask: &GpuTensor,
        p: &AttnParams,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::attention(self, [q, k, v, mask], p, out)
    }

    fn attention_window(
        &self,
        q: &GpuTensor,
        k: &GpuTensor,
        v: &GpuTensor,
        mask: &GpuTensor,
        far: [&GpuTensor; 3],
        p: &AttnParams,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::attention_window(self, [q, k, v, mask], far, p, out)
    }

    fn kshift(&self, k: &GpuTensor, shift: &GpuTensor, p: &RopeParams) -> Result<()> {
        ops::kshift(self, k, shift, p)
    }

    fn short_conv(
        &self,
        x: &GpuTensor,
        kernel: &GpuTensor,
        state: &GpuTensor,
        slots: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        ops::short_conv(self, [x, kernel, state, slots], out)
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    /// The option's values (the environment's variable unset, as in the
    /// tests' runs): 0 is the default, 1, 2 and 4 are taken, any other
    /// number is an error that names the option.
    #[test]
    fn matvec_rows_takes_1_2_or_4() {
        if std::env::var_os("GLINT_MATVEC_ROWS").is_some() {
            // The variable decides, whatever the options say.
            return;
        }
        let rows = |n| {
            matvec_rows(&GpuOptions {
                matvec_rows: n,
                ..Default::default()
            })
        };
        let ok: Vec<usize> = [0, 1, 2, 4].into_iter().map(|n| rows(n).unwrap()).collect();
        assert_eq!(ok, [2, 1, 2, 4]);
        for n in [3, 5, 8, usize::MAX] {
            let e = rows(n).unwrap_err().to_string();
            assert!(e.contains(&format!("GpuOptions::matvec_rows = {n}")), "{e}");
            assert!(e.contains("1, 2, 4"), "{e}");
        }
    }

    /// `GLINT_MATVEC_SCALED` takes 1 and 0 (over the option), nothing else:
    /// an unknown or non-UTF-8 value is an error that names the variable.
    #[test]
    fn matvec_scaled_takes_1_or_0() {
        use std::ffi::OsStr;
        let on = GpuOptions::default();
        let off = GpuOptions {
            disable_matvec_scaled: true,
            ..Default::default()
        };
        assert!(matvec_scaled(&on, None).unwrap());
        assert!(!matvec_scaled(&off, None).unwrap());
        assert!(matvec_scaled(&off, Some(OsStr::new("1"))).unwrap());
        assert!(!matvec_scaled(&on, Some(OsStr::new("0"))).unwrap());
        assert!(!matvec_scaled(&on, Some(OsStr::new(" 0\n"))).unwrap());
        #[cfg(unix)]
        let bad_utf8 = {
            use std::os::unix::ffi::OsStrExt;
            OsStr::from_bytes(b"\xff").to_owned()
        };
        #[cfg(not(unix))]
        let bad_utf8 = OsStr::new("?").to_owned();
        for v in [
            OsStr::new("off"),
            OsStr::new(""),
            OsStr::new("2"),
            &bad_utf8,
        ] {
            let e = matvec_scaled(&on, Some(v)).unwrap_err().to_string();
            assert!(e.contains("GLINT_MATVEC_SCALED="), "{e}");
            assert!(e.contains("1 (each group's dot scaled once) or 0"), "{e}");
        }
    }

    /// `GLINT_INT8` takes 1 and 0 (over the option), nothing else: "yes"
    /// was the option's value before, unsaid.
    #[test]
    fn int8_takes_1_or_0() {
        use std::ffi::OsStr;
        let off = GpuOptions::default();
        let on = GpuOptions {
            int8_matvec: true,
            ..Default::default()
        };
        assert!(!int8_asked(&off, None).unwrap());
        assert!(int8_asked(&on, None).unwrap());
        assert!(int8_asked(&off, Some(OsStr::new("1"))).unwrap());
        assert!(!int8_asked(&on, Some(OsStr::new("0"))).unwrap());
        for v in ["yes", "", "true"] {
            let e = int8_asked(&off, Some(OsStr::new(v)))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("GLINT_INT8=") && e.contains("1 (integer dots"),
                "{e}"
            );
        }
    }

    /// `GLINT_ATTN_TILE` takes 1, 0 and all; anything else is an error.
    #[test]
    fn attn_tile_takes_1_0_or_all() {
        use std::ffi::OsStr;
        let o = GpuOptions::default();
        let d = GpuOptions {
            decode_tiles: true,
            ..Default::default()
        };
        let t = |o: &GpuOptions, v: Option<&str>| attn_tiles(o, v.map(OsStr::new));
        assert_eq!(t(&o, None).unwrap(), (true, false));
        assert_eq!(t(&d, None).unwrap(), (true, true));
        assert_eq!(t(&o, Some("1")).unwrap(), (true, false));
        assert_eq!(t(&o, Some("0")).unwrap(), (false, false));
        assert_eq!(t(&o, Some("all")).unwrap(), (true, true));
        for v in ["yes", "", "2", "ALL"] {
            let e = t(&o, Some(v)).unwrap_err().to_string();
            assert!(
                e.contains("GLINT_ATTN_TILE=") && e.contains("or all"),
                "{e}"
            );
        }
    }

    /// The tile option: 0 (the shape's), 64 and 128 are taken, any other
    /// number is an error that names the option.
    #[test]
    fn matmul_tile_takes_64_or_128() {
        if std::env::var_os("GLINT_MATMUL_TILE").is_some() {
            return;
        }
        let tile = |n, room| {
            let limits = wgpu::Limits {
                max_compute_workgroup_storage_size: room,
                ..Default::default()
            };
            let opts = GpuOptions {
                matmul_tile: n,
                ..Default::default()
            };
            matmul_tile(&opts, &limits)
        };
        let ok: Vec<usize> = [0, 64, 128]
            .into_iter()
            .map(|n| tile(n, 16384).unwrap())
            .collect();
        assert_eq!(ok, [0, 64, 128]);
        for n in [1, 32, 65, 256, usize::MAX] {
            let e = tile(n, 16384).unwrap_err().to_string();
            assert!(e.contains(&format!("GpuOptions::matmul_tile = {n}")), "{e}");
            assert!(e.contains("64, 128"), "{e}");
        }
        // Under the 128 tile's workgroup memory: the shape's rule takes
        // 64, a forced 128 is an error that says why.
        assert_eq!(tile(0, 16383).unwrap(), 64);
        assert_eq!(tile(64, 16383).unwrap(), 64);
        let e = tile(128, 16383).unwrap_err().to_string();
        assert!(e.contains("16384 bytes of workgroup memory"), "{e}");
    }

    /// By the shape, 128 where the rows and the columns both pass 64.
    #[test]
    fn the_shape_takes_128_where_both_sides_pass_64() {
        let t = |rows, m| ops::tile_for(0, rows, m);
        assert_eq!([t(65, 65), t(4096, 512), t(576, 65)], [128; 3]);
        assert_eq!([t(64, 512), t(4096, 64), t(64, 64), t(9, 9)], [64; 4]);
        assert_eq!(
            [ops::tile_for(128, 9, 9), ops::tile_for(64, 4096, 512)],
            [128, 64]
        );
    }
}
