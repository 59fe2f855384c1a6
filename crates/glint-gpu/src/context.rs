//! Instance, adapter and device: the long-lived wgpu state.

use std::sync::{Arc, Mutex};

use glint_backend::{BackendError, Result};

/// How to pick the adapter.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// Backends to consider; `None` = from `WGPU_BACKEND`, else all.
    pub backends: Option<wgpu::Backends>,
    /// Index into [`list_adapters`]' order (`--adapter N`); `None` = the
    /// instance's preferred high-performance adapter.
    pub adapter_index: Option<usize>,
    /// Bind at most this many bytes of a tensor at once (below the device's
    /// own limit), so tests can exercise windowing with small tensors.
    pub max_binding_bytes: Option<u64>,
    /// Do not request `SUBGROUP` even where the adapter has it: reductions
    /// take the workgroup-memory tree (tests run both paths on one adapter).
    pub disable_subgroups: bool,
    /// Do not request `SHADER_F16` even where the adapter has it: F16 data is
    /// read as packed `u32` words with `unpack2x16float`.
    pub disable_f16: bool,
    /// Do not request `IMMEDIATES` even where the adapter has it: each
    /// kernel's params go through the per-submit uniform arena at a dynamic
    /// offset instead of the dispatch's immediate data. Also when the
    /// environment has `GLINT_WGPU_NO_IMMEDIATES` set, and not to `0` (to
    /// compare the two).
    pub disable_immediates: bool,
    /// Decode attention (and a prefill batch that splits its span or
    /// whose tiles would be small) also runs attention.wgsl's `tile`, by
    /// tiles of one token, instead of `main`: on lavapipe it is 1.1-2.5x
    /// slower, on a GPU not yet measured. Also on when the environment has
    /// `GLINT_ATTN_TILE=all`.
    pub decode_tiles: bool,
    /// Keep wgpu's loop bounding in the kernels (a counter in every loop
    /// that breaks out after 2^64 iterations, injected for untrusted
    /// shaders). Off by default: every loop in `shaders/` ends by its own
    /// condition (constant or uniform bounds, strides that are constants
    /// or the subgroup size), and the counters keep a driver from
    /// unrolling the kernels' small fixed loops. Also on when the
    /// environment has `GLINT_WGPU_LOOP_BOUNDING` (to compare the two).
    pub loop_bounding: bool,
    /// Time every dispatch on the device ([`GpuBackend::take_profile`]):
    /// needs the adapter's `TIMESTAMP_QUERY_INSIDE_PASSES`, and makes each
    /// submit wait for its work. Also on when the environment has
    /// `GLINT_GPU_PROFILE`.
    ///
    /// [`GpuBackend::take_profile`]: crate::GpuBackend::take_profile
    pub profile: bool,
    /// Matvecs over the quantized formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
    /// Q2_K to Q6_K) quantize x to ggml's Q8_0/Q8_1/Q8_K blocks and take
    /// integer dot products (`dot4I8Packed`): the numerics of the cpu backend's
    /// `Precision::Ggml`, not of its `F32` oracle. Only where the instance
    /// has the integer dot and the adapter the workgroup memory. Also on
    /// when the environment has `GLINT_INT8=1`, off with `GLINT_INT8=0`
    /// (any other value is an error).
    pub int8_matvec: bool,
    /// Rows a matvec's subgroup takes at once (1, 2 or 4; 0: the default,
    /// 2): their weights dotted with one read of x, each row's sums the
    /// bits of a row alone. The environment's `GLINT_MATVEC_ROWS`, where
    /// set, overrides it (to compare them on a device). Without
    /// subgroups, or with `GLINT_MATVEC_WG_ROWS`, a matvec takes a row a
    /// workgroup.
    pub matvec_rows: usize,
    /// Float matvecs of the formats whose weights are a scale times a
    /// level (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K) multiply every weight by its scale
    /// before the dot, as the other formats do, instead of dotting the
    /// levels and scaling each group of 4's dot once (one multiply a group
    /// instead of one a weight; the sums round differently, both within
    /// the tests' tolerance of the f64 reference). The environment's
    /// `GLINT_MATVEC_SCALED` (0 or 1; anything else is an error), where
    /// set, overrides it (to compare the two on a device).
    pub disable_matvec_scaled: bool,
    /// The prefill matmul's output tile side: 64 (4 x 4 a thread) or 128
    /// (8 x 8 a thread); 0, the default, takes 128 where the rows of the
    /// weight (of its binding window) and the columns both pass 64, else 64
    /// (llama.cpp's Vulkan choice of its large tile). The environment's
    /// `GLINT_MATMUL_TILE`, where set, overrides it (to compare them on a
    /// device).
    pub matmul_tile: usize,
    /// The caller times its step (for a model, a one-token decode step) at
    /// 1, 2 and 4 matvec rows a subgroup at once
    /// ([`GpuBackend::tune_matvec`]) and keeps the fastest; no bit of a
    /// result depends on it where every pipeline gets the adapter's one
    /// subgroup size. `None` (the default): on a hardware adapter
    /// (discrete, integrated or virtual) whose subgroups have one size
    /// (NVIDIA's 32), off on a software one (lavapipe, WARP), where the
    /// seconds it would take say nothing about a GPU, and on one whose
    /// driver may size each pipeline's subgroups (AMD, Intel). The
    /// environment's `GLINT_TUNE` (1 or 0; anything else is an error), where
    /// set, overrides it. Rows set here ([`matvec_rows`](Self::matvec_rows)
    /// not 0) or by `GLINT_MATVEC_ROWS` are kept, not tuned.
    ///
    /// [`GpuBackend::tune_matvec`]: crate::GpuBackend::tune_matvec
    pub tune: Option<bool>,
}

/// One adapter, as `--list-adapters` shows it.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Index for [`GpuOptions::adapter_index`].
    pub index: usize,
    /// Adapter name (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// Vulkan, Metal, Dx12, Gl.
    pub backend: wgpu::Backend,
    /// DiscreteGpu, IntegratedGpu, Cpu, ...
    pub device_type: wgpu::DeviceType,
}

fn instance(backends: Option<wgpu::Backends>) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if let Some(b) = backends {
        desc.backends = b;
    }
    wgpu::Instance::new(desc)
}

/// Every adapter the instance sees (honouring `WGPU_BACKEND`).
pub fn list_adapters() -> Vec<AdapterSummary> {
    let inst = instance(None);
    let adapters = pollster::block_on(inst.enumerate_adapters(inst_backends()));
    adapters
        .iter()
        .enumerate()
        .map(|(index, a)| {
            let info = a.get_info();
            AdapterSummary {
                index,
                name: info.name,
                backend: info.backend,
                device_type: info.device_type,
            }
        })
        .collect()
}

fn inst_backends() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all())
}

/// Device, queue and what they offer.
pub struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// The instance's WGSL has `dot4I8Packed` and `pack4xI8` (the
    /// `packed_4x8_integer_dot_product` extension): the int8 matvec can
    /// compile. naga writes the native instruction where the device has it
    /// (Vulkan's `shaderIntegerDotProduct`, HLSL's `dot4add_i8packed`) and
    /// four byte products where it does not.
    pub int8_dot: bool,
    /// Validation and out-of-memory errors not yet reported to a caller.
    pub error: Arc<Mutex<Option<String>>>,
}

impl Context {
    pub fn new(opts: &GpuOptions) -> Result<Self> {
        let inst = instance(opts.backends);
        let backends = opts.backends.unwrap_or_else(inst_backends);
        let adapter = match opts.adapter_index {
            Some(i) => {
                let mut all = pollster::block_on(inst.enumerate_adapters(backends));
                if i >= all.len() {
                    return Err(BackendError::Device(format!(
                        "adapter {i} does not exist ({} adapters)",
                        all.len()
                    )));
                }
                all.swap_remove(i)
            }
            None => pollster::block_on(inst.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            }))
            .map_err(|e| BackendError::Device(format!("no adapter: {e}")))?,
        };
        let info = adapter.get_info();
        let limits = adapter.limits();
        let int8_dot = inst
            .wgsl_language_features()
            .contains(wgpu::WgslLanguageFeatures::Packed4x8IntegerDotProduct);
        // Optional: kernels have variants with and without each one, and a
        // feature left out is not requested, so its variant cannot compile.
        let mut wanted = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
        if opts.disable_f16 {
            wanted.remove(wgpu::Features::SHADER_F16);
        }
        if opts.disable_subgroups {
            wanted.remove(wgpu::Features::SUBGROUP);
        }
        // Immediates where the adapter holds a whole params block of them
        // (Vulkan guarantees 128 bytes of push constants).
        let no_immediates = opts.disable_immediates
            || std::env::var_os("GLINT_WGPU_NO_IMMEDIATES").is_some_and(|v| v != "0");
        if !no_immediates && limits.max_immediate_size >= crate::submit::IMMEDIATE_BYTES {
            wanted |= wgpu::Features::IMMEDIATES;
        }
        if opts.profile {
            let need = crate::profile::Profiler::features();
            if !adapter.features().contains(need) {
                return Err(BackendError::Device(format!(
                    "profiling needs {need:?}, which {} lacks",
                    info.name
                )));
            }
            wanted |= need;
        }
        let features = adapter.features() & wanted;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("glint"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| BackendError::Device(format!("request_device on {}: {e}", info.name)))?;
        let error: Arc<Mutex<Option<String>>> = Arc::default();
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_none() {
                *s = Some(e.to_string());
            }
        }));
        Ok(Context {
            device,
            queue,
            info,
            limits,
            features,
            int8_dot,
            error,
        })
    }

    /// The first device error since the last call, as a `BackendError`.
    pub fn take_error(&self) -> Result<()> {
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(BackendError::Device(e)),
            None => Ok(()),
        }
    }
}
