//! [`Model`]: a mapped GGUF file with its weights on a backend.

use std::path::Path;
use std::sync::Arc;

use glint_backend::MemoryReport;
use glint_gguf::GgufFile;
use glint_model::HParams;

use crate::backend::LoadedBackend;
use crate::{Error, ModelParams};

/// A loaded model: the mapped GGUF file, its hyperparameters and its weights
/// on a backend.
///
/// A `Model` is a handle: cloning it is cheap (an `Arc`) and every clone
/// shares the one copy of the weights. It is `Send + Sync`, so an
/// application can keep it beside the [`Context`](crate::Context)s made from
/// it, or hand it to a thread that owns them.
#[derive(Clone)]
pub struct Model {
    inner: Arc<Inner>,
}

struct Inner {
    file: GgufFile,
    hparams: HParams,
    tokenizer: glint_tokenizer::Tokenizer,
    backend: LoadedBackend,
    /// Where `--backend auto` passed over wgpu: why.
    passed_over: Option<String>,
}

// The engine and the server hand a model to other threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Model>();
};

impl Model {
    /// Map `path`, read its hyperparameters and hand its weights to the
    /// backend. An unsupported architecture or tensor type is an error
    /// naming it.
    pub fn load(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model, Error> {
        let path = path.as_ref();
        let file = GgufFile::open(path).map_err(|e| Error::Load {
            path: path.display().to_string(),
            err: Box::new(e.into()),
        })?;
        Model::from_gguf(file, params).map_err(|e| Error::Load {
            path: path.display().to_string(),
            err: Box::new(e),
        })
    }

    /// A model from an already opened GGUF file.
    pub fn from_gguf(file: GgufFile, params: &ModelParams) -> Result<Model, Error> {
        let mut hparams = HParams::from_gguf(&file)?;
        hparams.apply_rope_overrides(&params.rope)?;
        let tokenizer = glint_tokenizer::Tokenizer::from_gguf(&file)?;
        if tokenizer.n_vocab() != hparams.n_vocab {
            return Err(Error::Invalid(format!(
                "the tokenizer has {} tokens, the output head {}",
                tokenizer.n_vocab(),
                hparams.n_vocab
            )));
        }
        let (backend, passed_over) = LoadedBackend::load(&file, &hparams, params)?;
        let model = Model {
            inner: Arc::new(Inner {
                file,
                hparams,
                tokenizer,
                backend,
                passed_over,
            }),
        };
        #[cfg(feature = "wgpu")]
        model.tune_gpu()?;
        Ok(model)
    }

    /// On wgpu, where the backend's tune is wanted
    /// ([`ModelParams::gpu_tune`](crate::ModelParams::gpu_tune)): time
    /// one-token decode steps (position 0 of a scratch context of 16
    /// cells, its argmax read back) at each matvec variant and keep the
    /// fastest ([`glint_gpu::GpuBackend::tune_matvec`]).
    #[cfg(feature = "wgpu")]
    fn tune_gpu(&self) -> Result<(), Error> {
        // Irrefutable in a build without the cpu backend.
        #[allow(irrefutable_let_patterns)]
        let LoadedBackend::Gpu(l) = &self.inner.backend
        else {
            return Ok(());
        };
        if !l.be.tune_wanted() {
            return Ok(());
        }
        use glint_backend::Tensor;
        let bytes =
            l.w.matvec_weights()
                .iter()
                .map(|t| t.desc().n_bytes() as u64)
                .sum();
        let mut ctx = crate::Context::new(
            self,
            crate::ContextParams {
                n_ctx: 16,
                n_batch: 1,
                n_ubatch: 1,
                n_seq_max: 1,
                ..Default::default()
            },
        )
        .map_err(|e| Error::Tune(Box::new(e)))?;
        let token = self.tokenizer().bos().unwrap_or(0);
        let batch = crate::Batch::from_tokens(&[token], 0, 0);
        l.be.tune_matvec(bytes, || -> Result<(), Error> {
            ctx.clear();
            ctx.decode(&batch)?;
            ctx.argmax(0)?;
            Ok(())
        })
        .map_err(|e| Error::Tune(Box::new(e)))?;
        Ok(())
    }

    /// The tokenizer built from the file's metadata.
    pub fn tokenizer(&self) -> &glint_tokenizer::Tokenizer {
        &self.inner.tokenizer
    }

    /// Hyperparameters.
    pub fn hparams(&self) -> &HParams {
        &self.inner.hparams
    }

    /// The GGUF file (metadata, tokenizer data).
    pub fn gguf(&self) -> &GgufFile {
        &self.inner.file
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.inner.hparams.n_vocab
    }

    /// The backend's name, e.g. `cpu (2 threads)`.
    pub fn backend_name(&self) -> String {
        self.inner.backend.name()
    }

    /// What the backend holds now (weights, KV caches, scratch of live contexts).
    pub fn memory(&self) -> MemoryReport {
        self.inner.backend.memory()
    }

    /// The backend's measured bandwidth in bytes/s: on wgpu the adapter's
    /// buffer-to-buffer copy rate (`n_bytes` copied `reps` times, best run),
    /// on the cpu the read bandwidth of all its threads. The yardstick the
    /// bench sets its figures against.
    pub fn measure_bandwidth(&self, n_bytes: usize, reps: usize) -> Result<f64, Error> {
        self.inner.backend.measure_bandwidth(n_bytes, reps)
    }

    /// The wgpu backend's work counters so far (dispatches, passes,
    /// submits, buffers / bind groups / pipelines created, queue writes,
    /// readbacks); `None` on the cpu backend. Read before and after a step:
    /// the difference is the step's structure.
    #[cfg(feature = "wgpu")]
    pub fn gpu_counters(&self) -> Option<glint_gpu::GpuCounters> {
        match &self.inner.backend {
            LoadedBackend::Gpu(l) => Some(l.be.work_counters()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// On wgpu: nanoseconds the host has spent blocked on the device (in
    /// queue submits and waits) since the model was loaded
    /// ([`glint_gpu::GpuBackend::host_blocked_ns`]); `None` on the cpu.
    /// A step's wall time less the difference of two readings is the
    /// host's own cost of it.
    #[cfg(feature = "wgpu")]
    pub fn gpu_host_blocked_ns(&self) -> Option<u64> {
        match &self.inner.backend {
            LoadedBackend::Gpu(l) => Some(l.be.host_blocked_ns()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Loaded with [`ModelParams::gpu_profile`] on wgpu: each kernel
    /// variant's device time since the last call, most first, then the
    /// time between dispatches; `None` otherwise.
    #[cfg(feature = "wgpu")]
    pub fn take_gpu_profile(&self) -> Result<Option<Vec<glint_gpu::KernelTime>>, Error> {
        match &self.inner.backend {
            LoadedBackend::Gpu(l) => Ok(l.be.take_profile()?),
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// Where the model was loaded with [`BackendKind::Auto`] and wgpu was
    /// not taken: why (no adapter or device opened, and the error; or the
    /// adapter is a software one, which the cpu backend outruns). `None`
    /// where wgpu runs the model or was not asked about.
    ///
    /// [`BackendKind::Auto`]: crate::BackendKind::Auto
    pub fn backend_passed_over(&self) -> Option<&str> {
        self.inner.passed_over.as_deref()
    }

    /// On wgpu, where the matvec was tuned at load
    /// ([`ModelParams::gpu_tune`](crate::ModelParams::gpu_tune)): a table
    /// of each variant's time, saying which was kept
    /// (`glint_gpu::TuneReport`'s); `None` otherwise.
    pub fn gpu_tune_report(&self) -> Option<String> {
        match &self.inner.backend {
            #[cfg(feature = "wgpu")]
            LoadedBackend::Gpu(l) => l.be.tune_report().map(|t| t.to_string()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    pub(crate) fn backend(&self) -> &LoadedBackend {
        &self.inner.backend
    }
}
