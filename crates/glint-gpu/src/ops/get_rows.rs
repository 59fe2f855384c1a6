//! `shaders/get_rows.wgsl`: gather rows of a weight table, dequantized; the
//! table is bound in windows of whole rows, one dispatch each.

use glint_backend::{check, GgmlType, Result};

use crate::pipelines::PipelineKey;
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
    check::get_rows(table, ids, out)?;
    let (k, m) = (table.desc.ne[0], ids.desc.n_elements());
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
