//! The two backends behind one non-generic type: every call that touches
//! tensors is written once, generic over [`Backend`], and [`Engine`] picks
//! the instantiation.

use glint_backend::{Backend, MemoryReport};
use glint_cpu::CpuBackend;
use glint_gpu::GpuBackend;
use glint_model::{HParams, KvStorage, Scratch, Weights};

/// A backend with the model's weights on it.
// One per model, never moved in a loop: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine {
    Cpu(Loaded<CpuBackend>),
    Gpu(Loaded<GpuBackend>),
}

/// Weights on one backend.
pub(crate) struct Loaded<B: Backend> {
    pub(crate) be: B,
    pub(crate) w: Weights<B::Tensor>,
}

/// A context's device state on one backend.
pub(crate) struct Exec<B: Backend> {
    pub(crate) kv: KvStorage<B::Tensor>,
    pub(crate) scratch: Scratch<B::Tensor>,
    /// Output of the last micro-batch, not read back yet: `[n_vocab, n_out]`.
    pub(crate) pending: Option<glint_model::Output<B::Tensor>>,
    /// `[n_rows]` i32, the K-shift per cache row.
    pub(crate) shifts: B::Tensor,
}

/// A context's device state, on the model's backend.
// One per context, as for `Engine`.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ExecState {
    Cpu(Exec<CpuBackend>),
    Gpu(Exec<GpuBackend>),
}

/// Run `$body` with `$l` bound to the engine's `Loaded<B>` and `$x` to the
/// matching `Exec<B>`, for whichever backend it is.
macro_rules! with_exec {
    ($engine:expr, $state:expr, |$l:ident, $x:ident| $body:expr) => {
        match ($engine, $state) {
            (crate::engine::Engine::Cpu($l), crate::engine::ExecState::Cpu($x)) => $body,
            (crate::engine::Engine::Gpu($l), crate::engine::ExecState::Gpu($x)) => $body,
            #[allow(unreachable_patterns)]
            _ => Err(crate::Error::Internal(
                "engine and context state are of different backends".into(),
            )),
        }
    };
}
pub(crate) use with_exec;

impl Engine {
    pub(crate) fn name(&self) -> String {
        match self {
            Engine::Cpu(l) => l.be.name(),
            Engine::Gpu(l) => l.be.name(),
        }
    }

    pub(crate) fn memory(&self) -> MemoryReport {
        match self {
            Engine::Cpu(l) => l.be.memory(),
            Engine::Gpu(l) => l.be.memory(),
        }
    }

    pub(crate) fn new_exec(
        &self,
        hp: &HParams,
        n_rows: usize,
        n_ubatch: usize,
        n_kv_max: usize,
        type_k: glint_backend::GgmlType,
        type_v: glint_backend::GgmlType,
    ) -> Result<ExecState, crate::Error> {
        match self {
            Engine::Cpu(l) => Ok(ExecState::Cpu(new_exec(
                &l.be, hp, n_rows, n_ubatch, n_kv_max, type_k, type_v,
            )?)),
            Engine::Gpu(l) => Ok(ExecState::Gpu(new_exec(
                &l.be, hp, n_rows, n_ubatch, n_kv_max, type_k, type_v,
            )?)),
        }
    }
}

fn new_exec<B: Backend>(
    be: &B,
    hp: &HParams,
    n_rows: usize,
    n_ubatch: usize,
    n_kv_max: usize,
    type_k: glint_backend::GgmlType,
    type_v: glint_backend::GgmlType,
) -> Result<Exec<B>, crate::Error> {
    let kv = KvStorage::new(be, hp, n_rows, type_k, type_v)?;
    let scratch = Scratch::new(be, hp, n_ubatch, n_kv_max)?;
    let shifts = be.alloc(glint_backend::TensorDesc {
        ty: glint_backend::GgmlType::I32,
        ne: [n_rows, 1, 1, 1],
        label: "kshift".into(),
        usage: glint_backend::Usage::Scratch,
    })?;
    Ok(Exec {
        kv,
        scratch,
        pending: None,
        shifts,
    })
}
