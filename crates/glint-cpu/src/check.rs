//! Shape and type checks shared by the ops. Every failure names the op, the
//! operand and the values.

use glint_backend::{BackendError, GgmlType, Result, TensorDesc};
use glint_quant::Support;

use crate::tensor::CpuTensor;

pub(crate) fn shape_err(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

/// `t` must have type `ty`.
pub(crate) fn ty(op: &'static str, what: &'static str, t: &CpuTensor, ty: GgmlType) -> Result<()> {
    if t.desc.ty != ty {
        return Err(BackendError::Type {
            op,
            ty: t.desc.ty,
            what,
        });
    }
    Ok(())
}

/// `t` must be a weight type glint computes with.
pub(crate) fn compute_ty(op: &'static str, what: &'static str, t: &CpuTensor) -> Result<()> {
    if t.desc.ty.support() != Support::Compute {
        return Err(BackendError::Type {
            op,
            ty: t.desc.ty,
            what,
        });
    }
    Ok(())
}

/// `t` must be an F32 or F16 cache.
pub(crate) fn cache_ty(op: &'static str, what: &'static str, t: &CpuTensor) -> Result<()> {
    match t.desc.ty {
        GgmlType::F32 | GgmlType::F16 => Ok(()),
        ty => Err(BackendError::Type { op, ty, what }),
    }
}

/// View `d` as a matrix `[n, m]`: its leading dims must multiply to exactly
/// `n` (so `[head_dim, n_head, m]` is also `[head_dim * n_head, m]`, the
/// reshape ggml gets for free). Returns `m`.
pub(crate) fn cols(op: &'static str, what: &str, d: &TensorDesc, n: usize) -> Result<usize> {
    let mut lead = 1usize;
    for i in 0..4 {
        if lead == n {
            return Ok(d.ne[i..].iter().product());
        }
        lead = lead.saturating_mul(d.ne[i]);
    }
    if lead == n {
        return Ok(1);
    }
    Err(shape_err(
        op,
        format!(
            "{what} `{}` has ne {:?}: leading dims do not make rows of {n}",
            d.label, d.ne
        ),
    ))
}

/// `t` must hold exactly `n` elements (a vector of ids, positions, shifts).
pub(crate) fn len(op: &'static str, what: &str, t: &CpuTensor, n: usize) -> Result<()> {
    if t.desc.n_elements() != n {
        return Err(shape_err(
            op,
            format!(
                "{what} `{}` has ne {:?} ({} elements), expected {n}",
                t.desc.label,
                t.desc.ne,
                t.desc.n_elements()
            ),
        ));
    }
    Ok(())
}

/// Same shape as `a`, elementwise ops.
pub(crate) fn same(op: &'static str, a: &CpuTensor, b: &CpuTensor) -> Result<()> {
    if a.desc.ne != b.desc.ne {
        return Err(shape_err(
            op,
            format!(
                "`{}` has ne {:?}, `{}` has ne {:?}",
                a.desc.label, a.desc.ne, b.desc.label, b.desc.ne
            ),
        ));
    }
    Ok(())
}

/// An op's output must not be one of its inputs (nor a read lock would
/// deadlock against the write lock).
pub(crate) fn distinct(op: &'static str, out: &CpuTensor, inputs: &[&CpuTensor]) -> Result<()> {
    if inputs.iter().any(|i| std::ptr::eq(*i, out)) {
        return Err(shape_err(
            op,
            format!("output `{}` is also an input", out.desc.label),
        ));
    }
    Ok(())
}
