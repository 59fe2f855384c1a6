//! `shaders/attention.wgsl`: a batch of queries over a window of the KV
//! cache, one workgroup per (token, KV head) taking that head's group of
//! query heads, online softmax in f32 per head; a decode over a long span
//! splits the cells among workgroups (split KV) and
//! `shaders/attention_combine.wgsl` folds their partials.

use std::sync::MutexGuard;

use glint_backend::{check, AttnParams, BackendError, GgmlType, Result, TensorDesc, Usage};

use super::{f16_cache, f32_bits, quant_cache, T};
use crate::pipelines::PipelineKey;
use crate::{GpuBackend, GpuTensor};

/// Cells of a span a split takes at least (two of attention.wgsl's
/// `CHUNK`s of 128).
const SPLIT_CELLS: usize = 256;

/// A dispatch of fewer (token, query head) rows than this splits its span:
/// with one workgroup per head a long decode ran on a handful of compute
/// units (SmolLM2's 9 heads at 4096 cells: 17 t/s against 376 at depth 0
/// on an H200). Prefill batches have rows enough. Counted in query heads,
/// not in the (fewer) grouped workgroups, so the partials buffer stays
/// bounded by a small batch's rows.
const SPLIT_BELOW_ROWS: usize = 256;

/// Most splits of one span (the combine pass reads each split's partials).
const MAX_SPLITS: usize = 64;

/// Splits for `rows` (token, query head) rows over `n_kv` cells: 1 (no
/// split) unless the rows are few and the span at least two splits' cells.
pub(crate) fn n_splits(rows: usize, n_kv: usize) -> usize {
    if rows >= SPLIT_BELOW_ROWS || n_kv < 2 * SPLIT_CELLS {
        return 1;
    }
    n_kv.div_ceil(SPLIT_CELLS).min(MAX_SPLITS)
}

/// Most query heads one workgroup takes (attention.wgsl's `G_MAX`), and the
/// f32 of queries it keeps in workgroup memory (`QS_MAX`).
const G_MAX: usize = 8;
const QS_MAX: usize = 1024;

/// How the query heads of one KV head's group are shared out: (heads a
/// workgroup takes, `HPW`; workgroups a group takes, `n_sub`). One
/// workgroup takes the whole group where its queries fit (SmolLM2's 3,
/// Gemma 3's 4), so each K/V row is read once per KV head; a larger group
/// is split evenly. `windows`: 2 for two-window SelfExtend, whose second
/// queries share the workgroup memory.
pub(crate) fn head_groups(
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
    windows: usize,
) -> (usize, usize) {
    let group = (n_head / n_head_kv.max(1)).max(1);
    let cap = G_MAX.min(QS_MAX / (head_dim.max(1) * windows)).max(1);
    let n_sub = group.div_ceil(cap);
    (group.div_ceil(n_sub), n_sub)
}

/// attention.wgsl's Params, in order, for `m` tokens and `[split_len,
/// n_split, n_sub]`.
fn wgsl_params(p: &AttnParams, m: usize, [split_len, ns, n_sub]: [usize; 3]) -> [u32; 11] {
    let shape = [p.head_dim, p.n_head, p.n_head_kv, m, p.kv_start, p.n_kv];
    let [a, b, c, d, e, f] = shape.map(|v| v as u32);
    let (scale, softcap) = (f32_bits(p.scale), f32_bits(p.softcap));
    let [g, h, i] = [split_len, ns, n_sub].map(|v| v as u32);
    [a, b, c, d, e, f, scale, softcap, g, h, i]
}

/// Record attention.wgsl over `ins` (its inputs, in binding order) for `m`
/// tokens into `out`, split over the span where [`n_splits`] says so: then
/// the kernel writes partials and a second dispatch combines them.
fn launch_split(
    be: &GpuBackend,
    (op, key): (&'static str, PipelineKey),
    ins: &[&T],
    out: &T,
    p: &AttnParams,
    (m, n_sub): (usize, usize),
) -> Result<()> {
    let rows = m * p.n_head;
    let groups = m * p.n_head_kv * n_sub;
    let ns = n_splits(rows, p.n_kv);
    let split_len = p.n_kv.div_ceil(ns);
    let params = wgsl_params(p, m, [split_len, ns, n_sub]);
    if ns == 1 {
        return be.launch(op, key, [ins, &[out]], &params, groups);
    }
    let part = be.attn_partials(rows * ns * (p.head_dim + 2))?;
    let part = part.as_ref().expect("made by attn_partials");
    be.launch(op, key, [ins, &[part]], &params, groups * ns)?;
    let combine = PipelineKey::new("attention_combine.wgsl", "main", 1, 1);
    let cp = [p.head_dim, ns, rows].map(|v| v as u32);
    be.launch(op, combine, [&[part], &[out]], &cp, rows)
}

impl GpuBackend {
    /// The split partials buffer, at least `n` f32: made on first use and
    /// made again larger when a dispatch needs more (a recorded dispatch
    /// keeps the old buffer alive until it has run).
    fn attn_partials(&self, n: usize) -> Result<MutexGuard<'_, Option<GpuTensor>>> {
        let mut g = self.attn_partials.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|t| t.desc.n_elements() < n) {
            *g = Some(self.new_tensor(TensorDesc {
                ty: GgmlType::F32,
                ne: [n, 1, 1, 1],
                label: "attention split partials".into(),
                usage: Usage::Scratch,
            })?);
        }
        Ok(g)
    }
}

/// q: [head_dim, n_head, m] f32; k, v: [head_dim * n_head_kv, n_rows] f32
/// or f16; mask: [n_kv, m] f32; out: [head_dim * n_head, m] f32. One
/// workgroup per (token, KV head) taking the head's group of query heads
/// ([`head_groups`]), or per (token, KV head, split) and a combine pass
/// ([`n_splits`]).
pub(crate) fn attention(be: &GpuBackend, qkvm: [&T; 4], p: &AttnParams, out: &T) -> Result<()> {
    let (m, f16, kv_q) = check_attention("attention", qkvm, p, out)?;
    let (hpw, n_sub) = head_groups(p.n_head, p.n_head_kv, p.head_dim, 1);
    match be.attn_tile(m, p, hpw, let_through(qkvm[3], m, p.n_kv)) {
        Some((1, ct)) => {
            // Tiles of one token: `main`'s workgroups, splits and reads.
            let key = tile_key(be, (f16, kv_q), hpw, (1, ct));
            be.kv_read(&qkvm, None, p, (m, n_sub));
            return launch_split(be, ("attention", key), &qkvm, out, p, (m, n_sub));
        }
        Some((tq, ct)) => {
            let shape = [m, hpw, n_sub, tq, ct];
            return attention_tiled(be, qkvm, p, out, (f16, kv_q), shape);
        }
        None => {}
    }
    let key = PipelineKey::new("attention.wgsl", "main", 4, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64)
        .with_constant("HPW", hpw as f64)
        .with_flags(be.flags(true, f16));
    be.kv_read(&qkvm, None, p, (m, n_sub));
    launch_split(be, ("attention", key), &qkvm, out, p, (m, n_sub))
}

/// A prefill batch of at least this many tokens runs attention.wgsl's
/// `tile` entry ([`GpuBackend::attn_tile`]). Decode steps (up to
/// [`crate::ops::MATVEC_MAX_M`] sequences a step) keep `main`, which reads
/// only the cells each token's mask lets through: a tile reads every chunk
/// of the span, the other sequences' cells too.
const TILE_MIN_TOKENS: usize = 16;

/// attention.wgsl's tile room, in f32: the queries (`T_QS`: rows x
/// head_dim), a K or V chunk (`T_KV`: (CT + 1) x head_dim), the scores
/// (`T_SS`: rows x CT) and three per-row values (`T_ROWS` rows).
const T_QS: usize = 2048;
const T_KV: usize = 4352;
const T_SS: usize = 1024;
const T_ROWS: usize = 64;
/// The workgroup memory the `tile` entry takes, in bytes: within the
/// 32 KiB of lavapipe, Metal and DX12 adapters.
pub(crate) const TILE_WORKGROUP_BYTES: u32 = ((T_QS + T_KV + T_SS + 3 * T_ROWS) * 4) as u32;
const _: () = assert!(TILE_WORKGROUP_BYTES <= 32768);

/// The tile's shape for `head_dim` and `hpw` heads a workgroup: (tokens a
/// tile, `TQ`; cells a chunk, `CT`), or `None` where no tile of at least
/// [`MIN_TILE`] tokens fits (a head over 256, or rows for fewer tokens).
/// SmolLM2 (64, 3 heads): 10 tokens (30 rows) over chunks of 32 cells; a
/// 7B (128, 1): 16 tokens over 32; Llama 3 8B (128, 4): 4 over 32. Gemma 3
/// (256, 4) would have 2 tokens (8 rows) and keeps a workgroup a token.
pub(crate) fn tile_shape(head_dim: usize, hpw: usize) -> Option<(usize, usize)> {
    if head_dim == 0 || head_dim > 256 {
        return None;
    }
    let ct = chunk_cells(head_dim);
    let rows = (T_QS / head_dim).min(T_SS / ct).min(T_ROWS);
    let tq = rows / hpw.max(1);
    (tq >= MIN_TILE).then_some((tq, ct))
}

/// Fewest tokens a tile takes. Tiles share each K/V chunk among their
/// tokens; with fewer than 4 the workgroup memory's round trips cost what
/// the shared reads save. On lavapipe, one call of 512 tokens over 2560
/// cells, a workgroup a token against tiles: head_dim 64 with 3 heads a
/// KV head (tiles of 10) 8.2 -> 3.5 s; 128 without GQA (16) 19.1 -> 5.8 s;
/// 128 with 4 heads (4) 8.3 -> 6.1 s; 256 with 4 heads (2) 5.5 -> 6.0 s.
const MIN_TILE: usize = 4;

/// The cells `mask` (`[n_kv, m]`) lets through, as counted when it was
/// written ([`GpuTensor::finite`]); all of them when that is not known.
fn let_through(mask: &T, m: usize, n_kv: usize) -> u64 {
    match mask.finite.load(std::sync::atomic::Ordering::Relaxed) {
        crate::tensor::UNKNOWN => (m * n_kv) as u64,
        n => n,
    }
}

/// The bytes of one KV head's part of a cache row of `t` (K or V).
fn head_bytes(t: &T, p: &AttnParams) -> u64 {
    (t.desc.row_bytes() / p.n_head_kv.max(1)) as u64
}

/// Cells a chunk of a tile takes for `head_dim` (`CT`: K's transposed
/// chunk, (CT + 1) x head_dim f32, within `T_KV`).
fn chunk_cells(head_dim: usize) -> usize {
    (4096 / head_dim.max(1)).min(32)
}

impl GpuBackend {
    /// The tile shape (tokens a tile, cells a chunk) attention runs with,
    /// or `None` for `main`: a prefill batch ([`TILE_MIN_TOKENS`]) whose
    /// rows do not split the span ([`n_splits`]) takes [`tile_shape`]'s
    /// tiles where they hold 4 tokens or more and read no more cells than
    /// `main` would (`cells`, the mask's let-through cells: a batch of
    /// several sequences over a span of all of theirs, each token seeing
    /// its own, can read less a token than a tile reads). With
    /// [`GpuOptions::decode_tiles`](crate::GpuOptions::decode_tiles) any
    /// other batch takes tiles of one token (K/V loaded a chunk at a time by
    /// the whole workgroup, the masked cells' rows not read, split as `main`
    /// splits). `main` keeps heads over 256, adapters without room for the
    /// tile's workgroup memory, and every batch when `GLINT_ATTN_TILE=0`.
    fn attn_tile(
        &self,
        m: usize,
        p: &AttnParams,
        hpw: usize,
        cells: u64,
    ) -> Option<(usize, usize)> {
        let room = self.ctx.limits.max_compute_workgroup_storage_size;
        if !self.attn_tiles || room < TILE_WORKGROUP_BYTES || p.head_dim > 256 {
            return None;
        }
        let prefill = (m >= TILE_MIN_TOKENS && n_splits(m * p.n_head, p.n_kv) == 1)
            .then(|| tile_shape(p.head_dim, hpw))
            .flatten()
            .filter(|&(tq, _)| (m.div_ceil(tq) * p.n_kv) as u64 <= cells);
        let one = self.decode_tiles.then(|| (1, chunk_cells(p.head_dim)));
        prefill.or(one)
    }
}

/// The `tile` pipeline for a cache (`KV_F16`, `KV_Q`), `hpw` heads a
/// workgroup and tiles of `tq` tokens over chunks of `ct` cells.
fn tile_key(
    be: &GpuBackend,
    (f16, kv_q): (bool, u32),
    hpw: usize,
    (tq, ct): (usize, usize),
) -> PipelineKey {
    PipelineKey::new("attention.wgsl", "tile", 4, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64)
        .with_constant("HPW", hpw as f64)
        .with_constant("TQ", tq as f64)
        .with_constant("CT", ct as f64)
        .with_flags(be.flags(false, f16))
}

/// Prefill attention by tiles of `tq` tokens (attention.wgsl's `tile`): one
/// workgroup per (tile, KV head, sub-group of `hpw` heads), the span read in
/// chunks of `ct` cells once a tile.
fn attention_tiled(
    be: &GpuBackend,
    qkvm: [&T; 4],
    p: &AttnParams,
    out: &T,
    (f16, kv_q): (bool, u32),
    [m, hpw, n_sub, tq, ct]: [usize; 5],
) -> Result<()> {
    let key = tile_key(be, (f16, kv_q), hpw, (tq, ct));
    let workgroups = m.div_ceil(tq) * p.n_head_kv * n_sub;
    let [_, k, v, _] = qkvm;
    let bytes = (workgroups * p.n_kv) as u64 * (head_bytes(k, p) + head_bytes(v, p));
    crate::counters::Work::add(&be.work.kv_bytes_read, bytes);
    let params = wgsl_params(p, m, [p.n_kv, 1, n_sub]);
    be.launch("attention", key, [&qkvm, &[out]], &params, workgroups)
}

/// Two-window SelfExtend: [`attention`] with the distant half (`q2`, `k2`,
/// `mask_far`, shaped as q, k, mask) bound after the mask (the `WINDOW`
/// variant of the same kernel).
pub(crate) fn attention_window(
    be: &GpuBackend,
    qkvm: [&T; 4],
    far: [&T; 3],
    p: &AttnParams,
    out: &T,
) -> Result<()> {
    check::attention_window(qkvm, far, p, out)?;
    let (m, f16, kv_q) = check_attention("attention_window", qkvm, p, out)?;
    let mut flags = be.flags(true, f16);
    flags.push(WINDOW);
    let (hpw, n_sub) = head_groups(p.n_head, p.n_head_kv, p.head_dim, 2);
    let key = PipelineKey::new("attention.wgsl", "main", 7, 1)
        .with_constant("KV_F16", f16 as u32 as f64)
        .with_constant("KV_Q", kv_q as f64)
        .with_constant("HPW", hpw as f64)
        .with_flags(flags);
    let [q, k, v, mask] = qkvm;
    let [q2, k2, mf] = far;
    be.kv_read(&qkvm, Some([k2, mf]), p, (m, n_sub));
    let ins = [q, k, v, mask, q2, k2, mf];
    launch_split(be, ("attention_window", key), &ins, out, p, (m, n_sub))
}

impl GpuBackend {
    /// Counts the K/V bytes an attention dispatch reads: each of its `m *
    /// n_head_kv * n_sub` workgroups (one a token's KV head where its group
    /// of query heads fits one workgroup, [`head_groups`]) reads its KV
    /// head's part of the K row (or of `far`'s grouped K row,
    /// [`attention_window`]) and of the V row of each cell its mask lets
    /// through, once for all its query heads: the kernel skips masked cells,
    /// whose logit is -inf whatever the dot. The let-through cells are
    /// counted when the mask is written ([`GpuTensor::finite`]); a mask
    /// not written whole from the host counts every cell of the span. With
    /// two windows, a cell both masks let through (the model never makes
    /// one) is counted twice.
    fn kv_read(
        &self,
        [_, k, v, mask]: &[&T; 4],
        far: Option<[&T; 2]>,
        p: &AttnParams,
        (m, n_sub): (usize, usize),
    ) {
        let cells = |mask: &T| let_through(mask, m, p.n_kv);
        let near = cells(mask);
        let mut bytes = near * (head_bytes(k, p) + head_bytes(v, p));
        if let Some([k2, mask_far]) = far {
            bytes += cells(mask_far) * (head_bytes(k2, p) + head_bytes(v, p));
        }
        let workgroups = (p.n_head_kv * n_sub) as u64;
        crate::counters::Work::add(&self.work.kv_bytes_read, workgroups * bytes);
    }
}

/// Flag: the two-window SelfExtend variant of attention.wgsl.
const WINDOW: &str = "WINDOW";

/// The kernel's per-invocation accumulators cover a head of at most this
/// many f32 (`MAX_HEAD_DIM` in attention.wgsl; its queries are kept in
/// `QS_MAX`): a limit of this kernel, not of the op.
const MAX_HEAD_DIM: usize = 512;

/// The op's checks (shared with the cpu backend), then this kernel's
/// limits (one cache type, head_dim); `m`, whether the cache is F16 and
/// its `KV_Q` (quantized type) constant.
fn check_attention(
    op: &'static str,
    qkvm: [&T; 4],
    p: &AttnParams,
    out: &T,
) -> Result<(usize, bool, u32)> {
    let m = check::attention(qkvm, p, out)?;
    let [_, k, v, _] = qkvm;
    if v.desc.ty != k.desc.ty {
        // One KV_F16 constant and one binding type serve both.
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "k is {} but v is {}: this kernel takes one cache type",
                k.desc.ty, v.desc.ty
            ),
        });
    }
    if p.head_dim > MAX_HEAD_DIM {
        return Err(BackendError::Shape {
            op,
            detail: format!(
                "head_dim {} is over this kernel's {MAX_HEAD_DIM}",
                p.head_dim
            ),
        });
    }
    Ok((m, f16_cache(op, k, "k")?, quant_cache(op, k, "k")?))
}

#[cfg(test)]
mod tests {
    use super::{head_groups, n_splits, tile_shape, T_KV, T_QS, T_ROWS, T_SS};

    #[test]
    fn the_tile_room_is_the_kernels() {
        let src = crate::shaders::module_source("attention.wgsl", None, &[]).unwrap();
        for (name, v) in [
            ("T_QS", T_QS),
            ("T_KV", T_KV),
            ("T_SS", T_SS),
            ("T_ROWS", T_ROWS),
        ] {
            let line = format!("const {name}: u32 = {v}u;");
            assert!(src.contains(&line), "attention.wgsl lacks `{line}`");
        }
    }

    #[test]
    fn prefill_tiles_take_four_tokens_or_more_and_fit_their_room() {
        // (head_dim, heads a workgroup) -> (tokens a tile, cells a chunk).
        assert_eq!(tile_shape(64, 3), Some((10, 32))); // SmolLM2
        assert_eq!(tile_shape(128, 1), Some((16, 32))); // a 7B
        assert_eq!(tile_shape(128, 4), Some((4, 32))); // Llama 3 8B
        assert_eq!(tile_shape(96, 5), Some((4, 32)));
        assert_eq!(tile_shape(256, 1), Some((8, 16)));
        assert_eq!(tile_shape(256, 4), None); // Gemma 3: 2 tokens
        assert_eq!(tile_shape(512, 1), None);
        // Every shape's arrays within attention.wgsl's (T_QS, T_KV, T_SS,
        // T_ROWS).
        for hd in 1..=256 {
            for hpw in 1..=8 {
                if let Some((tq, ct)) = tile_shape(hd, hpw) {
                    let rows = tq * hpw;
                    assert!(rows * hd <= T_QS && (ct + 1) * hd <= T_KV, "{hd} {hpw}");
                    assert!(rows * ct <= T_SS && rows <= T_ROWS, "{hd} {hpw}");
                }
            }
        }
    }

    #[test]
    fn a_group_of_query_heads_shares_one_workgroup_where_it_fits() {
        // SmolLM2 (9 heads over 3, head_dim 64), Gemma 3 270M (4 over 1,
        // 256): one workgroup a KV head.
        assert_eq!(head_groups(9, 3, 64, 1), (3, 1));
        assert_eq!(head_groups(4, 1, 256, 1), (4, 1));
        // No GQA.
        assert_eq!(head_groups(32, 32, 128, 1), (1, 1));
        // A group over G_MAX, split evenly: 10 -> 5 + 5; 12 at head_dim
        // 256 (4 fit) -> 4 + 4 + 4; 7 at 256 -> 4 + 3 (the last short).
        assert_eq!(head_groups(20, 2, 64, 1), (5, 2));
        assert_eq!(head_groups(12, 1, 256, 1), (4, 3));
        assert_eq!(head_groups(7, 1, 256, 1), (4, 2));
        // Two windows halve the room; head_dim 512 leaves one head.
        assert_eq!(head_groups(4, 1, 256, 2), (2, 2));
        assert_eq!(head_groups(4, 1, 512, 2), (1, 4));
    }

    #[test]
    fn only_few_rows_over_a_long_span_split() {
        // tests/ops.rs's attention shapes: 30 rows.
        assert_eq!(n_splits(30, 600), 3);
        assert_eq!(n_splits(30, 663), 3);
        assert_eq!(n_splits(30, 300), 1);
        // A decode of SmolLM2 (9 heads) and a 7B (32) at 4096 cells.
        assert_eq!(n_splits(9, 4096), 16);
        assert_eq!(n_splits(32, 4096), 16);
        // Four sequences of a 7B: 128 rows, still split; a prefill is not.
        assert_eq!(n_splits(128, 4096), 16);
        assert_eq!(n_splits(512 * 32, 4096), 1);
        assert_eq!(n_splits(1, 1 << 20), 64);
    }
}
