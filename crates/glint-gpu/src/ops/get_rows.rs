//! `shaders/get_rows.wgsl`: gather rows of a weight table, dequantized; the
//! table is bound in windows of whole rows, one dispatch each.

use glint_backend::{BackendError, GgmlType, Result};

use super::{check, want_type};
use crate::pipelines::PipelineKey;
use crate::shaders::weight_shader;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// table: [k, n_rows] any weight format; ids: [m] i32; out: [k, m] f32.
pub(crate) fn get_rows(
    be: &GpuBackend,
    table: &GpuTensor,
    ids: &GpuTensor,
    out: &GpuTensor,
) -> Result<()> {
    let op = "get_rows";
    if weight_shader(table.desc.ty).is_none() {
        return Err(BackendError::Type {
            op,
            ty: table.desc.ty,
            what: "table",
        });
    }
    want_type(op, ids, &[GgmlType::I32], "ids")?;
    want_type(op, out, &[GgmlType::F32], "out")?;
    let k = table.desc.ne[0];
    let m = ids.desc.n_elements();
    check(out.desc.ne[0] == k && out.desc.n_rows() == m, op, || {
        format!("out {:?}, expected [{k}, {m}]", out.desc.ne)
    })?;
    be.check_bindable(op, &[ids, out])?;
    let key = PipelineKey::new("get_rows.wgsl", "main", 2, 1)
        .with_type(table.desc.ty)
        .with_flags(be.flags(false, table.desc.ty == GgmlType::F16));
    for (i, win) in be.windows(op, table)?.iter().enumerate() {
        be.dispatch(
            key.clone(),
            &[Bind::window(table, win), Bind::whole(ids)],
            &[Bind::whole(out)],
            &[
                k as u32,
                m as u32,
                win.row0 as u32,
                win.n_rows as u32,
                table.desc.row_bytes() as u32,
                table.desc.n_rows() as u32,
                // The first window also zeroes the rows of ids out of range.
                (i == 0) as u32,
            ],
            (k * m).div_ceil(256),
        )?;
    }
    Ok(())
}
