//! The compiled-in backends behind one non-generic type: every call that
//! touches tensors is written once, generic over [`Backend`], and
//! [`LoadedBackend`] picks the instantiation.

use glint_backend::{Backend, MemoryReport};
#[cfg(feature = "cpu")]
use glint_cpu::CpuBackend;
use glint_gguf::GgufFile;
#[cfg(feature = "wgpu")]
use glint_gpu::GpuBackend;
use glint_model::{HParams, Scratch, Weights};

use crate::memory::{KvCacheParams, Memory};
use crate::{BackendKind, Error, ModelParams};

/// A backend with the model's weights on it.
// One per model, never moved on a hot path: the variants' sizes don't matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum LoadedBackend {
    #[cfg(feature = "cpu")]
    Cpu(Loaded<CpuBackend>),
    #[cfg(feature = "wgpu")]
    Gpu(Loaded<GpuBackend>),
}

/// Weights on one backend.
pub(crate) struct Loaded<B: Backend> {
    pub(crate) be: B,
    pub(crate) w: Weights<B::Tensor>,
}

/// A context's device state on one backend: its memory, the forward pass's
/// scratch, and the logits of the last micro-batch.
pub(crate) struct Exec<B: Backend> {
    pub(crate) mem: Memory<B>,
    pub(crate) scratch: Scratch<B::Tensor>,
    /// Output of the last micro-batch, not read back yet: `[n_vocab, n_out]`.
    pub(crate) pending: Option<glint_model::Output<B::Tensor>>,
    /// The read of `pending`'s first greedy tokens (one a sequence of the
    /// chained step), started by `Context::decode_greedy_seqs` as it
    /// submitted the step that made them.
    pub(crate) reading: Option<B::Reading>,
}

// One per context, never moved on a hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ExecState {
    #[cfg(feature = "cpu")]
    Cpu(Exec<CpuBackend>),
    #[cfg(feature = "wgpu")]
    Gpu(Exec<GpuBackend>),
}

/// Run `$body` with `$l` bound to the backend's `Loaded<B>` and `$x` to the
/// matching `Exec<B>`, for whichever backend it is.
macro_rules! with_exec {
    ($backend:expr, $state:expr, |$l:ident, $x:ident| $body:expr) => {
        match ($backend, $state) {
            #[cfg(feature = "cpu")]
            (crate::backend::LoadedBackend::Cpu($l), crate::backend::ExecState::Cpu($x)) => $body,
            #[cfg(feature = "wgpu")]
            (crate::backend::LoadedBackend::Gpu($l), crate::backend::ExecState::Gpu($x)) => $body,
            #[allow(unreachable_patterns)]
            _ => Err(crate::Error::Internal(
                "backend and context state are of different backends".into(),
            )),
        }
    };
}
pub(crate) use with_exec;

/// Run `$body` with `$x` bound to the `Exec<B>` of a context, whichever
/// backend it is (for what needs no backend calls).
macro_rules! on_exec {
    ($state:expr, |$x:ident| $body:expr) => {
        match $state {
            #[cfg(feature = "cpu")]
            crate::backend::ExecState::Cpu($x) => $body,
            #[cfg(feature = "wgpu")]
            crate::backend::ExecState::Gpu($x) => $body,
        }
    };
}
pub(crate) use on_exec;

impl LoadedBackend {
    /// Pick the backend `params` asks for and hand it the weights; with
    /// it, where `--backend auto` passed over wgpu, why (no adapter
    /// opened, or only a software one).
    pub(crate) fn load(
        file: &GgufFile,
        hp: &HParams,
        params: &ModelParams,
    ) -> Result<(LoadedBackend, Option<String>), Error> {
        #[allow(unused_mut)]
        let mut passed_over = None;
        #[cfg(feature = "wgpu")]
        {
            let opts = glint_gpu::GpuOptions {
                adapter_index: params.adapter,
                profile: params.gpu_profile,
                int8_matvec: params.gpu_int8,
                tune: params.gpu_tune,
                matvec_rows: params.gpu_matvec_rows,
                ..Default::default()
            };
            if params.backend != BackendKind::Cpu {
                // A setting wgpu does not take is said, under auto too
                // (where a device that does not open falls back quietly).
                glint_gpu::check_settings(&opts)?;
            }
            let gpu = || GpuBackend::new(opts.clone());
            let gpu = match params.backend {
                BackendKind::Cpu => None,
                BackendKind::Wgpu => Some(gpu()?),
                // A software adapter (lavapipe, WARP) is slower than the cpu
                // backend: auto takes wgpu only on a real GPU (or when there
                // is no cpu backend).
                BackendKind::Auto => match gpu() {
                    Ok(g)
                        if cfg!(feature = "cpu")
                            && g.adapter_info().device_type == glint_gpu::wgpu::DeviceType::Cpu =>
                    {
                        passed_over = Some(format!(
                            "wgpu passed over: {} is a software adapter (the cpu backend is faster; --backend wgpu takes it)",
                            g.adapter_info().name
                        ));
                        None
                    }
                    Ok(g) => Some(g),
                    Err(e) => {
                        passed_over = Some(format!("wgpu passed over: {e}"));
                        None
                    }
                },
            };
            if let Some(be) = gpu {
                let w = Weights::load(file, hp, &be)?;
                return Ok((LoadedBackend::Gpu(Loaded { be, w }), None));
            }
        }
        #[cfg(not(feature = "wgpu"))]
        if params.backend == BackendKind::Wgpu {
            return Err(Error::BackendUnavailable("wgpu"));
        }
        #[cfg(feature = "cpu")]
        {
            let be = CpuBackend::with_precision(params.n_threads, params.cpu_precision)?;
            let w = Weights::load(file, hp, &be)?;
            Ok((LoadedBackend::Cpu(Loaded { be, w }), passed_over))
        }
        #[cfg(not(feature = "cpu"))]
        {
            // Set only where a cpu backend takes over.
            let _ = passed_over;
            Err(Error::BackendUnavailable("cpu"))
        }
    }

    pub(crate) fn name(&self) -> String {
        match self {
            #[cfg(feature = "cpu")]
            LoadedBackend::Cpu(l) => l.be.name(),
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => l.be.name(),
        }
    }

    pub(crate) fn memory(&self) -> MemoryReport {
        match self {
            #[cfg(feature = "cpu")]
            LoadedBackend::Cpu(l) => l.be.memory(),
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => l.be.memory(),
        }
    }

    /// True when the backend's buffers live in this process's memory (the
    /// cpu backend, a software GPU adapter), so host limits apply to them.
    pub(crate) fn uses_host_memory(&self) -> bool {
        match self {
            #[cfg(feature = "cpu")]
            LoadedBackend::Cpu(_) => true,
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => {
                l.be.adapter_info().device_type == glint_gpu::wgpu::DeviceType::Cpu
            }
        }
    }

    pub(crate) fn measure_bandwidth(&self, n_bytes: usize, reps: usize) -> Result<f64, Error> {
        match self {
            #[cfg(feature = "cpu")]
            LoadedBackend::Cpu(l) => Ok(crate::measure::cpu_read_bandwidth(
                n_bytes,
                l.be.n_threads(),
                reps,
            )),
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => Ok(l.be.copy_bandwidth(n_bytes as u64, reps)?),
        }
    }

    /// A context's device state: a KV cache of `p`'s size and the scratch
    /// for micro-batches of `n_ubatch` tokens.
    pub(crate) fn new_exec(
        &self,
        hp: &HParams,
        p: &KvCacheParams,
        n_ubatch: usize,
    ) -> Result<ExecState, Error> {
        match self {
            #[cfg(feature = "cpu")]
            LoadedBackend::Cpu(l) => Ok(ExecState::Cpu(new_exec(&l.be, hp, p, n_ubatch)?)),
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => Ok(ExecState::Gpu(new_exec(&l.be, hp, p, n_ubatch)?)),
        }
    }
}

fn new_exec<B: Backend>(
    be: &B,
    hp: &HParams,
    p: &KvCacheParams,
    n_ubatch: usize,
) -> Result<Exec<B>, Error> {
    let mem = Memory::new(be, hp, p)?;
    let scratch = Scratch::new(
        be,
        hp,
        n_ubatch,
        p.cells.kv_size as usize,
        p.window.is_some(),
    )?;
    Ok(Exec {
        mem,
        scratch,
        pending: None,
        reading: None,
    })
}
