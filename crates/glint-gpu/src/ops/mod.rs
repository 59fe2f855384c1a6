//! The op launchers, one module per kernel family (one WGSL file under
//! `shaders/` each): check the operands, pick the pipeline variant, bind and
//! dispatch.

mod argmax;
mod attention;
mod binary;
mod get_rows;
mod kshift;
mod mul_mat;
mod rms_norm;
mod rope;
mod set_rows;
mod softmax;
mod unary;

use glint_backend::{BackendError, GgmlType, Result};

use crate::shaders::{F16, SUBGROUPS};
use crate::tensor::GpuTensor;
use crate::GpuBackend;

/// An f32 parameter as its uniform word.
fn f32_bits(v: f32) -> u32 {
    v.to_bits()
}

fn shape_err(op: &'static str, detail: String) -> BackendError {
    BackendError::Shape { op, detail }
}

fn check(ok: bool, op: &'static str, detail: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(shape_err(op, detail()))
    }
}

fn want_type(op: &'static str, t: &GpuTensor, tys: &[GgmlType], what: &'static str) -> Result<()> {
    if tys.contains(&t.desc.ty) {
        Ok(())
    } else {
        Err(BackendError::Type {
            op,
            ty: t.desc.ty,
            what,
        })
    }
}

fn f32_same_shape(op: &'static str, a: &GpuTensor, out: &GpuTensor) -> Result<()> {
    want_type(op, a, &[GgmlType::F32], "input")?;
    want_type(op, out, &[GgmlType::F32], "output")?;
    check(a.desc.ne == out.desc.ne, op, || {
        format!("input {:?} vs output {:?}", a.desc.ne, out.desc.ne)
    })
}

/// Whether a cache (`k`, `v`, `dst`) is F16; an f16 one needs an even row
/// length (a u32 word never spans two rows).
fn kv_f16(op: &'static str, t: &GpuTensor, what: &'static str) -> Result<bool> {
    want_type(op, t, &[GgmlType::F32, GgmlType::F16], what)?;
    let f16 = t.desc.ty == GgmlType::F16;
    check(!f16 || t.desc.ne[0].is_multiple_of(2), op, || {
        format!(
            "an f16 {what} needs an even row length, got {}",
            t.desc.ne[0]
        )
    })?;
    Ok(f16)
}

impl GpuBackend {
    /// The flags of a kernel variant: `SUBGROUPS` for a kernel with
    /// reductions, `F16` for one reading F16 data, where the device has them.
    fn flags(&self, reduces: bool, reads_f16: bool) -> Vec<&'static str> {
        let used = self.features_used();
        let mut f = Vec::new();
        if reads_f16 && used.f16 {
            f.push(F16);
        }
        if reduces && used.subgroups {
            f.push(SUBGROUPS);
        }
        f
    }

    /// Rows per (row-wise) op, and check both are bindable.
    fn rowwise(&self, op: &'static str, x: &GpuTensor, out: &GpuTensor) -> Result<(usize, usize)> {
        self.check_bindable(op, &[x, out])?;
        Ok((x.desc.ne[0], x.desc.n_rows()))
    }
}

pub(crate) use argmax::argmax;
pub(crate) use attention::attention;
pub(crate) use binary::{binary, glu, BinaryOp};
pub(crate) use get_rows::get_rows;
pub(crate) use kshift::kshift;
pub(crate) use mul_mat::mul_mat;
pub(crate) use rms_norm::rms_norm;
pub(crate) use rope::rope;
pub(crate) use set_rows::set_rows;
pub(crate) use softmax::softmax;
pub(crate) use unary::{scale, unary};
