//! The wgpu backend of glint: every op of [`glint_backend::Backend`] as a
//! WGSL compute kernel (files under the top-level `shaders/` folder).
//!
//! - Ops record into one command encoder that is submitted on `read`, `sync`,
//!   `write` (writes go through the queue, which would otherwise overtake
//!   recorded work) or after [`MAX_PENDING_OPS`] ops: few submits per token.
//! - A binding may not exceed `max_storage_buffer_binding_size` (128 MiB on
//!   lavapipe), so `mul_mat` weights and `get_rows` tables bigger than that
//!   are bound as windows of whole rows at aligned offsets, one dispatch per
//!   window.
//! - Optional features, each used where the device has it (and
//!   [`GpuOptions`] does not disable it), each with a path without it:
//!   `SHADER_F16`: F16 weights (`mul_mat`, `get_rows`) and F16 caches
//!   (`attention`) are bound as `array<f16>`; without it they are read as
//!   packed `u32` words with `unpack2x16float` (BF16 always is). `SUBGROUP`:
//!   the reductions of the `mul_mat` matvec, `rms_norm`, `softmax` and
//!   `attention` use `subgroupAdd`/`subgroupMax` before workgroup memory;
//!   without it, a tree in workgroup memory. [`GpuBackend::features_used`]
//!   says which. Accumulation is f32 either way. F16 caches need an even
//!   row length (a u32 word never spans two rows).
//! - Device errors (validation, out of memory) are caught by an uncaptured
//!   error handler and returned as [`BackendError::Device`] by the next
//!   `read`/`sync`/`alloc`, never a panic.
#![deny(unsafe_code)]

mod context;
mod kernels;
mod measure;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use context::Context;
pub use context::{list_adapters, AdapterSummary, GpuOptions};
use glint_backend::{
    AttnParams, Backend, BackendError, GgmlType, Glu, MemoryReport, Result, RopeMode, RopeParams,
    SharedBytes, Tensor, TensorDesc, Unary, Usage,
};
use kernels::{PipelineCache, PipelineKey, F16, SUBGROUPS};
pub use measure::CopyProbe;
/// The wgpu version this backend is built on (for adapter types and backends).
pub use wgpu;
use wgpu::util::DeviceExt;

/// Ops recorded before the encoder is submitted without being asked.
pub const MAX_PENDING_OPS: usize = 256;

/// `m` up to this takes the matvec path of `mul_mat`.
const MATVEC_MAX_M: usize = 4;

/// A tensor on the device: a buffer (size padded to 4 bytes) and its shape.
pub struct GpuTensor {
    buf: wgpu::Buffer,
    desc: TensorDesc,
    counters: Arc<Counters>,
    /// Bytes of `buf` this tensor may bind (a view sees a prefix).
    size: u64,
    /// Whether this handle owns the buffer for the memory report (views don't).
    counted: bool,
}

impl Tensor for GpuTensor {
    fn desc(&self) -> &TensorDesc {
        &self.desc
    }
}

impl Drop for GpuTensor {
    fn drop(&mut self) {
        if self.counted {
            self.counters
                .of(self.desc.usage)
                .fetch_sub(self.buf.size() as usize, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct Counters {
    weights: AtomicUsize,
    kv_cache: AtomicUsize,
    scratch: AtomicUsize,
}

impl Counters {
    fn of(&self, u: Usage) -> &AtomicUsize {
        match u {
            Usage::Weights => &self.weights,
            Usage::KvCache => &self.kv_cache,
            Usage::Scratch => &self.scratch,
        }
    }
}

struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    n_ops: usize,
}

/// The optional device features the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeaturesUsed {
    /// `SHADER_F16`: F16 weights and caches are read as `f16`.
    pub f16: bool,
    /// `SUBGROUP`: reductions use subgroup operations.
    pub subgroups: bool,
}

/// The wgpu backend.
pub struct GpuBackend {
    ctx: Context,
    pipelines: PipelineCache,
    pending: Mutex<Pending>,
    counters: Arc<Counters>,
    max_binding_bytes: Option<u64>,
}

/// One buffer binding: the whole buffer or a window of it.
struct Bind<'a> {
    buf: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl<'a> Bind<'a> {
    fn whole(t: &'a GpuTensor) -> Self {
        Bind {
            buf: &t.buf,
            offset: 0,
            size: t.size,
        }
    }
}

/// A window of whole rows of a tensor: rows `row0 .. row0 + n_rows`.
struct Window {
    row0: usize,
    n_rows: usize,
    offset: u64,
    size: u64,
}

fn pad4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
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

fn f32_bits(v: f32) -> u32 {
    v.to_bits()
}

fn rope_mode(m: RopeMode) -> u32 {
    match m {
        RopeMode::Norm => 0,
        RopeMode::Neox => 1,
    }
}

impl GpuBackend {
    /// Open the adapter `opts` picks and a device with its limits.
    pub fn new(opts: GpuOptions) -> Result<Self> {
        Ok(GpuBackend {
            ctx: Context::new(&opts)?,
            pipelines: PipelineCache::default(),
            pending: Mutex::new(Pending {
                encoder: None,
                n_ops: 0,
            }),
            counters: Arc::default(),
            max_binding_bytes: opts.max_binding_bytes,
        })
    }

    /// The adapter in use (tests assert its backend).
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.ctx.info
    }

    /// The device limits requested (the adapter's own).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.ctx.limits
    }

    /// Optional features the device got (SHADER_F16, SUBGROUP when present
    /// and not disabled in [`GpuOptions`]).
    pub fn features(&self) -> wgpu::Features {
        self.ctx.features
    }

    /// Which optional features the kernels use: every one the device got.
    pub fn features_used(&self) -> FeaturesUsed {
        FeaturesUsed {
            f16: self.ctx.features.contains(wgpu::Features::SHADER_F16),
            subgroups: self.ctx.features.contains(wgpu::Features::SUBGROUP),
        }
    }

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

    fn max_binding(&self) -> u64 {
        // Window sizes stay below 2 GiB so byte offsets fit a u32 in WGSL.
        let max = self.ctx.limits.max_storage_buffer_binding_size.min(1 << 31);
        self.max_binding_bytes.map_or(max, |m| m.min(max))
    }

    /// Split `t` into windows of whole rows, each under the binding limit and
    /// starting at an offset aligned to `min_storage_buffer_offset_alignment`.
    fn windows(&self, op: &'static str, t: &GpuTensor) -> Result<Vec<Window>> {
        let row_bytes = t.desc.row_bytes() as u64;
        let n_rows = t.desc.n_rows();
        let max = self.max_binding();
        if t.size <= max || row_bytes == 0 {
            return Ok(vec![Window {
                row0: 0,
                n_rows,
                offset: 0,
                size: t.size,
            }]);
        }
        let align = self.ctx.limits.min_storage_buffer_offset_alignment.max(4) as u64;
        // row0 must be a multiple of `step` for row0 * row_bytes to be aligned.
        let step = align / gcd(row_bytes, align);
        let per = ((max - 4) / row_bytes) / step * step;
        if per == 0 {
            return Err(BackendError::Device(format!(
                "{op}: a row of `{}` ({row_bytes} bytes) does not fit a binding of {max} bytes",
                t.desc.label
            )));
        }
        let mut out = Vec::new();
        let mut row0 = 0usize;
        while row0 < n_rows {
            let n = (per as usize).min(n_rows - row0);
            let offset = row0 as u64 * row_bytes;
            out.push(Window {
                row0,
                n_rows: n,
                offset,
                size: pad4(n as u64 * row_bytes),
            });
            row0 += n;
        }
        Ok(out)
    }

    fn check_bindable(&self, op: &'static str, t: &GpuTensor) -> Result<()> {
        let max = self.ctx.limits.max_storage_buffer_binding_size;
        if t.size > max {
            return Err(BackendError::Device(format!(
                "{op}: `{}` is {} bytes, over the binding limit of {} bytes",
                t.desc.label, t.size, max
            )));
        }
        Ok(())
    }

    fn new_tensor(&self, desc: TensorDesc) -> Result<GpuTensor> {
        let bytes = desc
            .ty
            .bytes_for(desc.ne[0] as u64)
            .and_then(|r| r.checked_mul(desc.n_rows() as u64))
            .ok_or_else(|| {
                shape_err(
                    "alloc",
                    format!(
                        "`{}`: {:?} is not whole blocks of {}",
                        desc.label,
                        desc.ne,
                        desc.ty.name()
                    ),
                )
            })?;
        let size = pad4(bytes.max(4));
        if size > self.ctx.limits.max_buffer_size {
            return Err(BackendError::Device(format!(
                "alloc `{}`: {size} bytes over the device's max buffer size {}",
                desc.label, self.ctx.limits.max_buffer_size
            )));
        }
        let buf = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&desc.label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.ctx.take_error()?;
        self.counters
            .of(desc.usage)
            .fetch_add(size as usize, Ordering::Relaxed);
        Ok(GpuTensor {
            buf,
            desc,
            counters: self.counters.clone(),
            size,
            counted: true,
        })
    }

    /// Submit the recorded ops.
    fn flush(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(enc) = p.encoder.take() {
            self.ctx.queue.submit([enc.finish()]);
        }
        p.n_ops = 0;
    }

    fn wait(&self) -> Result<()> {
        self.ctx
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        self.ctx.take_error()
    }

    /// Record one kernel: `inputs` read-only, `outputs` read-write, then the
    /// params (u32 words; f32 as bits) as a uniform block.
    fn dispatch(
        &self,
        key: PipelineKey,
        inputs: &[Bind<'_>],
        outputs: &[Bind<'_>],
        params: &[u32],
        n_workgroups: usize,
    ) -> Result<()> {
        if n_workgroups == 0 {
            return Ok(());
        }
        let pipe = self
            .pipelines
            .get(&self.ctx.device, &key)
            .map_err(BackendError::Device)?;
        let mut words = params.to_vec();
        words.resize(words.len().max(16).next_multiple_of(4), 0);
        let ubuf = self
            .ctx
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::cast_slice(&words),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        let mut entries = Vec::new();
        for (i, b) in inputs.iter().chain(outputs).enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: b.buf,
                    offset: b.offset,
                    size: std::num::NonZeroU64::new(b.size),
                }),
            });
        }
        entries.push(wgpu::BindGroupEntry {
            binding: (inputs.len() + outputs.len()) as u32,
            resource: ubuf.as_entire_binding(),
        });
        let bg = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(key.entry),
                layout: &pipe.layout,
                entries: &entries,
            });
        let max_x = self.ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let x = n_workgroups.min(max_x);
        let y = n_workgroups.div_ceil(x);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let enc = p.encoder.get_or_insert_with(|| {
            self.ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ops") })
        });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(key.entry),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipe.pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(x as u32, y as u32, 1);
        }
        p.n_ops += 1;
        let full = p.n_ops >= MAX_PENDING_OPS;
        drop(p);
        if full {
            self.flush();
        }
        Ok(())
    }

    fn key(
        file: &'static str,
        entry: &'static str,
        ty: Option<GgmlType>,
        constants: &[(&'static str, f64)],
        n_in: u32,
        n_out: u32,
    ) -> PipelineKey {
        PipelineKey {
            file,
            entry,
            ty,
            constants: constants.iter().map(|(n, v)| (*n, v.to_bits())).collect(),
            flags: Vec::new(),
            n_in,
            n_out,
        }
    }

    fn f32_same_shape(op: &'static str, a: &GpuTensor, out: &GpuTensor) -> Result<()> {
        want_type(op, a, &[GgmlType::F32], "input")?;
        want_type(op, out, &[GgmlType::F32], "output")?;
        check(a.desc.ne == out.desc.ne, op, || {
            format!("input {:?} vs output {:?}", a.desc.ne, out.desc.ne)
        })
    }

    fn binary(
        &self,
        op: &'static str,
        code: u32,
        a: &GpuTensor,
        b: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        Self::f32_same_shape(op, a, out)?;
        want_type(op, b, &[GgmlType::F32], "b")?;
        let n = a.desc.ne[0];
        let nb = b.desc.n_elements();
        check(
            b.desc.ne == a.desc.ne || (nb == n && b.desc.ne[0] == n),
            op,
            || format!("b {:?} is neither {:?} nor [{n}]", b.desc.ne, a.desc.ne),
        )?;
        let total = a.desc.n_elements();
        for t in [a, b, out] {
            self.check_bindable(op, t)?;
        }
        self.dispatch(
            Self::key("binary.wgsl", "main", None, &[("OP", code as f64)], 2, 1),
            &[Bind::whole(a), Bind::whole(b)],
            &[Bind::whole(out)],
            &[total as u32, nb as u32],
            total.div_ceil(256),
        )
    }

    fn unary_op(
        &self,
        op: &'static str,
        code: u32,
        s: f32,
        x: &GpuTensor,
        out: &GpuTensor,
    ) -> Result<()> {
        Self::f32_same_shape(op, x, out)?;
        let total = x.desc.n_elements();
        self.check_bindable(op, x)?;
        self.check_bindable(op, out)?;
        self.dispatch(
            Self::key("unary.wgsl", "main", None, &[("OP", code as f64)], 1, 1),
            &[Bind::whole(x)],
            &[Bind::whole(out)],
            &[total as u32, f32_bits(s)],
            total.div_ceil(256),
        )
    }

    /// Rows per (row-wise) op and check all are bindable.
    fn rowwise(&self, op: &'static str, x: &GpuTensor, out: &GpuTensor) -> Result<(usize, usize)> {
        self.check_bindable(op, x)?;
        self.check_bindable(op, out)?;
        Ok((x.desc.ne[0], x.desc.n_rows()))
    }

    fn rope_params(p: &RopeParams, rows: usize) -> Vec<u32> {
        let [lo, hi] = if p.ext_factor != 0.0 {
            p.yarn_corr_dims()
        } else {
            [0.0, 0.0]
        };
        let theta_scale = p.freq_base.powf(-2.0 / p.n_rot as f32);
        vec![
            p.head_dim as u32,
            p.n_head as u32,
            rows as u32,
            p.n_rot as u32,
            rope_mode(p.mode),
            f32_bits(theta_scale),
            f32_bits(p.freq_scale),
            f32_bits(p.ext_factor),
            f32_bits(p.attn_factor),
            f32_bits(lo),
            f32_bits(hi),
        ]
    }

    fn check_rope(op: &'static str, p: &RopeParams) -> Result<()> {
        check(
            p.n_rot.is_multiple_of(2)
                && p.n_rot <= p.head_dim
                && p.head_dim.is_multiple_of(2)
                && p.n_rot > 0,
            op,
            || {
                format!(
                    "n_rot {} / head_dim {}: both even, n_rot <= head_dim",
                    p.n_rot, p.head_dim
                )
            },
        )
    }

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
}

impl Backend for GpuBackend {
    type Tensor = GpuTensor;

    fn name(&self) -> String {
        let used = self.features_used();
        let mut feats: Vec<&str> = Vec::new();
        if used.f16 {
            feats.push("f16");
        }
        if used.subgroups {
            feats.push("subgroups");
        }
        if feats.is_empty() {
            feats.push("no optional features");
        }
        format!(
            "wgpu: {} ({:?}; {})",
            self.ctx.info.name,
            self.ctx.info.backend,
            feats.join(", ")
        )
    }

    fn alloc(&self, desc: TensorDesc) -> Result<GpuTensor> {
        self.new_tensor(desc)
    }

    fn weight(&self, desc: TensorDesc, bytes: SharedBytes) -> Result<GpuTensor> {
        let t = self.new_tensor(desc)?;
        let data = bytes.bytes();
        check(data.len() == t.desc.n_bytes(), "weight", || {
            format!(
                "`{}`: {} bytes given, {:?} {} needs {}",
                t.desc.label,
                data.len(),
                t.desc.ne,
                t.desc.ty.name(),
                t.desc.n_bytes()
            )
        })?;
        self.write(&t, 0, data)?;
        Ok(t)
    }

    fn view(&self, t: &GpuTensor, ne: [usize; 4]) -> Result<GpuTensor> {
        let desc = TensorDesc {
            ne,
            ..t.desc.clone()
        };
        if desc.n_bytes() > t.desc.n_bytes() || desc.n_elements() == 0 {
            return Err(shape_err(
                "view",
                format!(
                    "view {ne:?} of `{}` needs {} bytes, the tensor has {}",
                    t.desc.label,
                    desc.n_bytes(),
                    t.desc.n_bytes()
                ),
            ));
        }
        Ok(GpuTensor {
            buf: t.buf.clone(),
            size: pad4(desc.n_bytes() as u64).min(t.size),
            desc,
            counters: Arc::clone(&t.counters),
            counted: false,
        })
    }

    fn write(&self, t: &GpuTensor, offset: usize, data: &[u8]) -> Result<()> {
        let size = t.desc.n_bytes();
        let end = offset.saturating_add(data.len());
        if end > size {
            return Err(BackendError::Range {
                op: "write",
                label: t.desc.label.clone(),
                start: offset,
                end,
                size,
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        // Queue writes land before any work submitted after them: submit
        // what was recorded so far first, so the order is the call order.
        self.flush();
        let start4 = offset / 4 * 4;
        let end4 = end.div_ceil(4) * 4;
        if start4 == offset && end4 == end {
            self.ctx.queue.write_buffer(&t.buf, offset as u64, data);
        } else {
            // Unaligned edges: merge with the bytes already there.
            let mut words = vec![0u8; end4 - start4];
            self.read_raw(&t.buf, start4 as u64, &mut words)?;
            words[offset - start4..end - start4].copy_from_slice(data);
            self.ctx.queue.write_buffer(&t.buf, start4 as u64, &words);
        }
        self.ctx.take_error()
    }

    fn read(&self, t: &GpuTensor, offset: usize, out: &mut [u8]) -> Result<()> {
        let size = t.desc.n_bytes();
        let end = offset.saturating_add(out.len());
        if end > size {
            return Err(BackendError::Range {
                op: "read",
                label: t.desc.label.clone(),
                start: offset,
                end,
                size,
            });
        }
        if out.is_empty() {
            return self.sync();
        }
        let start4 = offset / 4 * 4;
        let end4 = end.div_ceil(4) * 4;
        let mut words = vec![0u8; end4 - start4];
        self.read_raw(&t.buf, start4 as u64, &mut words)?;
        out.copy_from_slice(&words[offset - start4..end - start4]);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.flush();
        self.wait()
    }

    fn memory(&self) -> MemoryReport {
        MemoryReport {
            weights: self.counters.weights.load(Ordering::Relaxed),
            kv_cache: self.counters.kv_cache.load(Ordering::Relaxed),
            scratch: self.counters.scratch.load(Ordering::Relaxed),
        }
    }

    fn mul_mat(&self, w: &GpuTensor, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let op = "mul_mat";
        if kernels::weight_shader(w.desc.ty).is_none() {
            return Err(BackendError::Type {
                op,
                ty: w.desc.ty,
                what: "weight",
            });
        }
        want_type(op, x, &[GgmlType::F32], "x")?;
        want_type(op, out, &[GgmlType::F32], "out")?;
        let (k, n) = (w.desc.ne[0], w.desc.n_rows());
        let m = x.desc.n_rows();
        check(x.desc.ne[0] == k, op, || {
            format!("w {:?} vs x {:?}: k differs", w.desc.ne, x.desc.ne)
        })?;
        check(out.desc.ne[0] == n && out.desc.n_rows() == m, op, || {
            format!("out {:?}, expected [{n}, {m}]", out.desc.ne)
        })?;
        self.check_bindable(op, x)?;
        self.check_bindable(op, out)?;
        let matvec = m <= MATVEC_MAX_M;
        let mut key = Self::key(
            "mul_mat.wgsl",
            if matvec { "matvec" } else { "matmul" },
            Some(w.desc.ty),
            &[],
            2,
            1,
        );
        key.flags = self.flags(matvec, w.desc.ty == GgmlType::F16);
        for win in self.windows(op, w)? {
            let n_wg = if matvec {
                win.n_rows * m
            } else {
                win.n_rows.div_ceil(64) * m.div_ceil(64)
            };
            self.dispatch(
                key.clone(),
                &[
                    Bind {
                        buf: &w.buf,
                        offset: win.offset,
                        size: win.size,
                    },
                    Bind::whole(x),
                ],
                &[Bind::whole(out)],
                &[
                    k as u32,
                    n as u32,
                    m as u32,
                    win.row0 as u32,
                    win.n_rows as u32,
                    w.desc.row_bytes() as u32,
                ],
                n_wg,
            )?;
        }
        Ok(())
    }

    fn get_rows(&self, table: &GpuTensor, ids: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let op = "get_rows";
        if kernels::weight_shader(table.desc.ty).is_none() {
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
        self.check_bindable(op, ids)?;
        self.check_bindable(op, out)?;
        let mut key = Self::key("get_rows.wgsl", "main", Some(table.desc.ty), &[], 2, 1);
        key.flags = self.flags(false, table.desc.ty == GgmlType::F16);
        for (i, win) in self.windows(op, table)?.iter().enumerate() {
            self.dispatch(
                key.clone(),
                &[
                    Bind {
                        buf: &table.buf,
                        offset: win.offset,
                        size: win.size,
                    },
                    Bind::whole(ids),
                ],
                &[Bind::whole(out)],
                &[
                    k as u32,
                    m as u32,
                    win.row0 as u32,
                    win.n_rows as u32,
                    table.desc.row_bytes() as u32,
                    table.desc.n_rows() as u32,
                    (i == 0) as u32,
                ],
                (k * m).div_ceil(256),
            )?;
        }
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &GpuTensor,
        w: Option<&GpuTensor>,
        eps: f32,
        out: &GpuTensor,
    ) -> Result<()> {
        let op = "rms_norm";
        Self::f32_same_shape(op, x, out)?;
        let (n, m) = self.rowwise(op, x, out)?;
        if let Some(w) = w {
            want_type(op, w, &[GgmlType::F32], "w")?;
            check(w.desc.n_elements() == n, op, || {
                format!("w {:?}, expected [{n}]", w.desc.ne)
            })?;
        }
        self.dispatch(
            PipelineKey {
                flags: self.flags(true, false),
                ..Self::key("rms_norm.wgsl", "main", None, &[], 2, 1)
            },
            &[Bind::whole(x), Bind::whole(w.unwrap_or(x))],
            &[Bind::whole(out)],
            &[n as u32, m as u32, f32_bits(eps), w.is_some() as u32],
            m,
        )
    }

    fn add(&self, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
        self.binary("add", 0, a, b, out)
    }

    fn mul(&self, a: &GpuTensor, b: &GpuTensor, out: &GpuTensor) -> Result<()> {
        self.binary("mul", 1, a, b, out)
    }

    fn scale(&self, x: &GpuTensor, s: f32, out: &GpuTensor) -> Result<()> {
        self.unary_op("scale", 0, s, x, out)
    }

    fn unary(&self, op: Unary, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let code = match op {
            Unary::Silu => 1,
            Unary::Gelu => 2,
        };
        self.unary_op("unary", code, 1.0, x, out)
    }

    fn glu(&self, op: Glu, gate: &GpuTensor, up: &GpuTensor, out: &GpuTensor) -> Result<()> {
        check(gate.desc.ne == up.desc.ne, "glu", || {
            format!("gate {:?} vs up {:?}", gate.desc.ne, up.desc.ne)
        })?;
        let code = match op {
            Glu::SwiGlu => 2,
            Glu::GeGlu => 3,
        };
        self.binary("glu", code, gate, up, out)
    }

    fn softmax(&self, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let op = "softmax";
        Self::f32_same_shape(op, x, out)?;
        let (n, m) = self.rowwise(op, x, out)?;
        self.dispatch(
            PipelineKey {
                flags: self.flags(true, false),
                ..Self::key("softmax.wgsl", "main", None, &[], 1, 1)
            },
            &[Bind::whole(x)],
            &[Bind::whole(out)],
            &[n as u32, m as u32],
            m,
        )
    }

    fn argmax(&self, x: &GpuTensor, out: &GpuTensor) -> Result<()> {
        let op = "argmax";
        want_type(op, x, &[GgmlType::F32], "x")?;
        want_type(op, out, &[GgmlType::I32], "out")?;
        let (n, m) = self.rowwise(op, x, out)?;
        check(out.desc.n_elements() == m && n > 0, op, || {
            format!("x {:?}, out {:?}: expected [{m}]", x.desc.ne, out.desc.ne)
        })?;
        self.dispatch(
            Self::key("argmax.wgsl", "main", None, &[], 1, 1),
            &[Bind::whole(x)],
            &[Bind::whole(out)],
            &[n as u32, m as u32],
            m,
        )
    }

    fn rope(&self, x: &GpuTensor, pos: &GpuTensor, p: &RopeParams, out: &GpuTensor) -> Result<()> {
        let op = "rope";
        Self::f32_same_shape(op, x, out)?;
        want_type(op, pos, &[GgmlType::I32], "pos")?;
        Self::check_rope(op, p)?;
        let m = x.desc.ne[2] * x.desc.ne[3];
        check(
            x.desc.ne[0] == p.head_dim && x.desc.ne[1] == p.n_head && pos.desc.n_elements() == m,
            op,
            || {
                format!(
                    "x {:?}, pos {:?}, head_dim {}, n_head {}",
                    x.desc.ne, pos.desc.ne, p.head_dim, p.n_head
                )
            },
        )?;
        self.check_bindable(op, x)?;
        self.check_bindable(op, out)?;
        let total = p.head_dim / 2 * p.n_head * m;
        self.dispatch(
            Self::key("rope.wgsl", "main", None, &[], 2, 1),
            &[Bind::whole(x), Bind::whole(pos)],
            &[Bind::whole(out)],
            &Self::rope_params(p, m),
            total.div_ceil(256),
        )
    }

    fn set_rows(&self, src: &GpuTensor, idx: &GpuTensor, dst: &GpuTensor) -> Result<()> {
        let op = "set_rows";
        want_type(op, src, &[GgmlType::F32], "src")?;
        want_type(op, idx, &[GgmlType::I32], "idx")?;
        let f16 = Self::kv_f16(op, dst, "dst")?;
        let (n, m) = (src.desc.ne[0], src.desc.n_rows());
        check(
            dst.desc.ne[0] == n && idx.desc.n_elements() == m,
            op,
            || {
                format!(
                    "src {:?}, idx {:?}, dst {:?}",
                    src.desc.ne, idx.desc.ne, dst.desc.ne
                )
            },
        )?;
        for t in [src, idx, dst] {
            self.check_bindable(op, t)?;
        }
        let per_row = if f16 { n / 2 } else { n };
        self.dispatch(
            Self::key(
                "set_rows.wgsl",
                "main",
                None,
                &[("KV_F16", f16 as u32 as f64)],
                2,
                1,
            ),
            &[Bind::whole(src), Bind::whole(idx)],
            &[Bind::whole(dst)],
            &[n as u32, m as u32, dst.desc.n_rows() as u32],
            (per_row * m).div_ceil(256),
        )
    }

    fn attention(
        &self,
        q: &GpuTensor,
        k: &GpuTensor,
        v: &GpuTensor,
        mask: &GpuTensor,
        p: &AttnParams,
        out: &GpuTensor,
    ) -> Result<()> {
        let op = "attention";
        want_type(op, q, &[GgmlType::F32], "q")?;
        want_type(op, mask, &[GgmlType::F32], "mask")?;
        want_type(op, out, &[GgmlType::F32], "out")?;
        let f16 = Self::kv_f16(op, k, "k")?;
        check(v.desc.ty == k.desc.ty, op, || {
            format!("k is {} but v is {}", k.desc.ty.name(), v.desc.ty.name())
        })?;
        let (hd, nh, nkv) = (p.head_dim, p.n_head, p.n_head_kv);
        let m = q.desc.ne[2] * q.desc.ne[3];
        check(
            nkv > 0 && nh % nkv == 0 && (1..=512).contains(&hd),
            op,
            || format!("n_head {nh}, n_head_kv {nkv}, head_dim {hd} (<= 512)"),
        )?;
        check(q.desc.ne[0] == hd && q.desc.ne[1] == nh, op, || {
            format!("q {:?}, expected [{hd}, {nh}, m]", q.desc.ne)
        })?;
        for t in [k, v] {
            check(
                t.desc.ne[0] == hd * nkv && p.kv_start + p.n_kv <= t.desc.n_rows(),
                op,
                || {
                    format!(
                        "cache {:?}: rows {}..{} of [{}, n_rows]",
                        t.desc.ne,
                        p.kv_start,
                        p.kv_start + p.n_kv,
                        hd * nkv
                    )
                },
            )?;
        }
        check(
            mask.desc.ne[0] == p.n_kv && mask.desc.n_rows() == m,
            op,
            || format!("mask {:?}, expected [{}, {m}]", mask.desc.ne, p.n_kv),
        )?;
        check(
            out.desc.ne[0] == hd * nh && out.desc.n_rows() == m,
            op,
            || format!("out {:?}, expected [{}, {m}]", out.desc.ne, hd * nh),
        )?;
        for t in [q, k, v, mask, out] {
            self.check_bindable(op, t)?;
        }
        self.dispatch(
            PipelineKey {
                flags: self.flags(true, f16),
                ..Self::key(
                    "attention.wgsl",
                    "main",
                    None,
                    &[("KV_F16", f16 as u32 as f64)],
                    4,
                    1,
                )
            },
            &[
                Bind::whole(q),
                Bind::whole(k),
                Bind::whole(v),
                Bind::whole(mask),
            ],
            &[Bind::whole(out)],
            &[
                hd as u32,
                nh as u32,
                nkv as u32,
                m as u32,
                p.kv_start as u32,
                p.n_kv as u32,
                f32_bits(p.scale),
                f32_bits(p.softcap),
            ],
            m * nh,
        )
    }

    fn kshift(&self, k: &GpuTensor, shift: &GpuTensor, p: &RopeParams) -> Result<()> {
        let op = "kshift";
        let f16 = Self::kv_f16(op, k, "k")?;
        want_type(op, shift, &[GgmlType::I32], "shift")?;
        Self::check_rope(op, p)?;
        let rows = k.desc.n_rows();
        check(
            k.desc.ne[0] == p.head_dim * p.n_head && shift.desc.n_elements() == rows,
            op,
            || {
                format!(
                    "k {:?}, shift {:?}, head_dim {} x n_head {}",
                    k.desc.ne, shift.desc.ne, p.head_dim, p.n_head
                )
            },
        )?;
        self.check_bindable(op, k)?;
        self.check_bindable(op, shift)?;
        self.dispatch(
            Self::key(
                "kshift.wgsl",
                "main",
                None,
                &[("KV_F16", f16 as u32 as f64)],
                1,
                1,
            ),
            &[Bind::whole(shift)],
            &[Bind::whole(k)],
            &Self::rope_params(p, rows),
            (rows * p.n_head).div_ceil(64),
        )
    }
}

impl GpuBackend {
    /// Copy `out.len()` bytes (multiple of 4) at `offset` (multiple of 4)
    /// out of `buf`, after all recorded work.
    fn read_raw(&self, buf: &wgpu::Buffer, offset: u64, out: &mut [u8]) -> Result<()> {
        let size = out.len() as u64;
        let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let enc = p.encoder.get_or_insert_with(|| {
                self.ctx
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ops") })
            });
            enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size);
        }
        self.flush();
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(BackendError::Device(format!("map: {e}"))),
            Err(_) => return Err(BackendError::Device("map: callback never ran".into())),
        }
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| BackendError::Device(format!("map: {e}")))?;
        out.copy_from_slice(&view);
        drop(view);
        staging.unmap();
        Ok(())
    }
}
