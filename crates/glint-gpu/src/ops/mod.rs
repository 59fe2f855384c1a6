//! The op launchers, one module per kernel family (one WGSL file under
//! `shaders/` each): check the operands, pick the pipeline variant, bind and
//! dispatch.

mod argmax;
mod attention;
mod binary;
mod fused;
mod get_rows;
mod kq_mask;
mod kshift;
mod mul_mat;
mod rms_norm;
mod rope;
mod rope_store;
mod set_rows;
mod short_conv;
mod softmax;
mod top_k;
mod unary;

use glint_backend::{BackendError, GgmlType, Result};

use crate::pipelines::{Flags, PipelineKey};
use crate::shaders::{F16, SUBGROUPS};
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// The launchers' tensor type, short so their signatures fit one line.
type T = GpuTensor;

/// An f32 parameter as its uniform word.
fn f32_bits(v: f32) -> u32 {
    v.to_bits()
}

/// Whether a cache (`k`, `v`, `dst`; F32 or F16, checked by
/// `glint_backend::check`) is F16. The kernels read an F16 cache as u32
/// words of two halves, so its rows must have an even length (a word never
/// spans two rows): a limit of these kernels, not of the op.
fn f16_cache(op: &'static str, t: &GpuTensor, what: &'static str) -> Result<bool> {
    let f16 = t.desc.ty == GgmlType::F16;
    if f16 && !t.desc.ne[0].is_multiple_of(2) {
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "an f16 {what} needs an even row length, got {}",
                t.desc.ne[0]
            ),
        });
    }
    Ok(f16)
}

/// The `KV_Q` constant of a cache operand (kv_quant.wgsl): 0 for F32 and
/// F16, 1 for Q8_0, 2 for Q4_0. The kernels write a quantized row word by
/// word, so its bytes must be whole u32 words (an even number of blocks).
fn quant_cache(op: &'static str, t: &GpuTensor, what: &'static str) -> Result<u32> {
    let q = match t.desc.ty {
        GgmlType::Q8_0 => 1,
        GgmlType::Q4_0 => 2,
        _ => return Ok(0),
    };
    let rb = t.desc.row_bytes();
    if !rb.is_multiple_of(4) {
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "a {} {what} needs rows of whole u32 words on this backend (an even \
                 number of blocks of 32), got {} elements ({rb} bytes)",
                t.desc.ty, t.desc.ne[0]
            ),
        });
    }
    Ok(q)
}

/// Most inputs (and most outputs) of one kernel ([`GpuBackend::launch`]):
/// attention's two-window variant binds 7.
pub(crate) const MAX_BINDS: usize = 8;

impl GpuBackend {
    /// The flags of a kernel variant: `SUBGROUPS` for a kernel with
    /// reductions, `F16` for one reading F16 data, where the device has them.
    fn flags(&self, reduces: bool, reads_f16: bool) -> Flags {
        let used = self.features_used();
        let mut f = Flags::new();
        if reads_f16 && used.f16 {
            f.push(F16);
        }
        if reduces && used.subgroups {
            f.push(SUBGROUPS);
        }
        f
    }

    /// Counts `bytes` of weight reads when `w` is a weight (a product of
    /// activations, as attention's on some paths, is not).
    fn weight_read(&self, w: &T, bytes: u64) {
        if w.desc.usage == glint_backend::Usage::Weights {
            crate::counters::Work::add(&self.work.weight_bytes_read, bytes);
        }
    }

    /// Check that `inputs` and `outputs` each fit one binding, then record
    /// the kernel with them bound whole (see [`GpuBackend::dispatch`]).
    fn launch(
        &self,
        op: &'static str,
        key: PipelineKey,
        [inputs, outputs]: [&[&T]; 2],
        params: &[u32],
        n_workgroups: usize,
    ) -> Result<()> {
        self.check_bindable(op, inputs)?;
        self.check_bindable(op, outputs)?;
        if inputs.len().max(outputs.len()) > MAX_BINDS {
            return Err(BackendError::Device(format!(
                "{op}: {} inputs and {} outputs, over the {MAX_BINDS} a kernel binds",
                inputs.len(),
                outputs.len()
            )));
        }
        let Some(first) = inputs.first().or(outputs.first()) else {
            return self.dispatch(key, &[], &[], params, n_workgroups);
        };
        // On the stack, not in Vecs: this runs for every kernel of a step.
        // The slots past each list's length repeat `first`, unbound.
        let mut ins = [Bind::whole(first); MAX_BINDS];
        let mut outs = ins;
        for (b, t) in ins.iter_mut().zip(inputs) {
            *b = Bind::whole(t);
        }
        for (b, t) in outs.iter_mut().zip(outputs) {
            *b = Bind::whole(t);
        }
        let (ins, outs) = (&ins[..inputs.len()], &outs[..outputs.len()]);
        self.dispatch(key, ins, outs, params, n_workgroups)
    }
}

pub(crate) use argmax::argmax;
pub(crate) use attention::{attention, attention_window};
pub(crate) use binary::{add, glu, mul};
pub(crate) use fused::{mul_mats, mul_mats_glu};
pub(crate) use get_rows::get_rows;
pub(crate) use kq_mask::kq_mask;
pub(crate) use kshift::kshift;
#[cfg(test)]
pub(crate) use mul_mat::{has_int8, has_pair_scaled, tile_for};
pub(crate) use mul_mat::{
    int8_fits, int8_wide_fits, matvec_joint_rows, matvec_rows_per_group, mul_mat, mul_mat_add,
    mul_mat_normed, Norm, MATVEC_MAX_JOINT, MATVEC_MAX_M, TL_WORKGROUP_BYTES,
};
pub(crate) use rms_norm::{rms_norm, rms_norm_add};
pub(crate) use rope::rope;
pub(crate) use rope_store::rope_store;
pub(crate) use set_rows::set_rows;
pub(crate) use short_conv::short_conv;
pub(crate) use softmax::softmax;
pub(crate) use top_k::top_k;
pub(crate) use unary::{scale, unary};
