//! `shaders/get_rows.wgsl`: gather rows of a weight table, dequantized; the
//! table is bound in windows of whole rows, one dispatch each.

use glint_backend::{check, GgmlType, Result};

use super::T;
use crate::pipelines::PipelineKey;
use crate::tensor::Bind;
use crate::GpuBackend;

/// table: [k, n_rows] any weight format; ids: [m] i32; out: [k, m] f32.
/// One invocation per element of out; each window's dispatch writes the ids
/// inside it, the first also zero rows for ids out of range.
pub(crate) fn get_rows(be: &GpuBackend, table: &T, ids: &T, out: &T) -> Result<()> {
    let op = "get_rows";
    check::get_rows(table, ids, out)?;
    let (k, m) = (table.desc.ne[0], ids.desc.n_elements());
    be.check_bindable(op, &[ids, out])?;
    let key = PipelineKey::new("get_rows.wgsl", "main", 2, 1)
        .with_type(table.desc.ty)
        .with_flags(be.flags(false, table.desc.ty == GgmlType::F16));
    let d = &table.desc;
    for (i, win) in be.windows(op, table)?.iter().enumerate() {
        let (row0, n_local) = (win.row0 as u32, win.n_rows as u32);
        let first = (i == 0) as u32;
        let params = [
            k as u32,
            m as u32,
            row0,
            n_local,
            d.row_bytes() as u32,
            d.n_rows() as u32,
            first,
        ];
        let ins = [Bind::window(table, win), Bind::whole(ids)];
        be.dispatch(
            key.clone(),
            &ins,
            &[Bind::whole(out)],
            &params,
            (k * m).div_ceil(256),
        )?;
    }
    Ok(())
}
