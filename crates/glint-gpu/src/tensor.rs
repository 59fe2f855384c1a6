//! Buffers and tensors: a [`GpuTensor`] is a storage buffer (size padded to
//! 4 bytes) and its shape; big ones are bound as windows of whole rows.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use glint_backend::{BackendError, GgmlType, Result, SharedBytes, Tensor, TensorDesc, Usage};

use crate::GpuBackend;

/// A tensor on the device: a buffer (size padded to 4 bytes) and its shape.
pub struct GpuTensor {
    pub(crate) buf: wgpu::Buffer,
    /// `buf`'s identity ([`buffer_id`]): what bind-group keys and the
    /// buffers a submit binds are told apart by, a copy of a number where
    /// a `wgpu::Buffer` would be two reference counts to bump and drop.
    pub(crate) buf_id: u64,
    pub(crate) desc: TensorDesc,
    counters: Arc<Counters>,
    /// The backend's bind groups: those naming this buffer go with it.
    binds: Arc<BindCache>,
    /// Where the tensor starts in `buf` (0 but for the parts of a packed
    /// weight, each at a multiple of the storage offset alignment).
    pub(crate) offset: u64,
    /// Bytes of `buf` from `offset` this tensor may bind (a view sees a
    /// prefix).
    pub(crate) size: u64,
    /// Whether this handle owns the buffer for the memory report (views don't).
    counted: bool,
    /// Of an f32 tensor written whole through this handle: its entries
    /// above -inf ([`UNKNOWN`] before that or after a partial write). For
    /// a mask, the (query, cell) pairs attention reads K for: the work
    /// counters' model, not used by any kernel.
    pub(crate) finite: AtomicU64,
}

/// [`GpuTensor::finite`] not known.
pub(crate) const UNKNOWN: u64 = u64::MAX;

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
            // Cached bind groups would keep the buffer alive.
            self.binds.forget(self.buf_id);
        }
    }
}

/// A set of buffers by [`GpuTensor::buf_id`].
pub(crate) type BufferSet = std::collections::HashSet<u64, foldhash::fast::RandomState>;

/// A new buffer's identity: never given twice in a process, so a key
/// naming a dropped buffer can never name a later one.
pub(crate) fn buffer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A bind group's identity: its layout (`n_in`, `n_out`: one layout per
/// pair) and each binding's buffer ([`GpuTensor::buf_id`]), offset and
/// size. The uniform binding is always the params arena at offset 0
/// (dynamic offsets pick the block). A key is built for every dispatch to
/// look its group up: plain numbers, inline, so building, hashing and
/// dropping it touch no reference count and no heap.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    pub(crate) n_in: u32,
    pub(crate) n_out: u32,
    /// (buffer id, offset, size) of each binding.
    pub(crate) binds: [(u64, u64, u64); BindKey::MAX],
}

impl BindKey {
    /// Storage bindings a key holds: a kernel's inputs and outputs
    /// (`ops::MAX_BINDS` each).
    pub(crate) const MAX: usize = 2 * crate::ops::MAX_BINDS;
}

/// Bind groups made once and reused: a decode step binds the same
/// buffers (weights, cache, scratch views) in the same ways every token.
/// An owning tensor's drop removes the groups naming its buffer; past
/// [`BindCache::MAX`] entries the cache starts over (never reached by a
/// model's steps, which bind a fixed set).
#[derive(Default)]
pub(crate) struct BindCache {
    map: std::sync::Mutex<
        std::collections::HashMap<BindKey, wgpu::BindGroup, foldhash::fast::RandomState>,
    >,
}

impl BindCache {
    const MAX: usize = 1 << 14;

    /// The group for `key`, made by `make` on a miss (`true` then).
    pub(crate) fn get_or_make(
        &self,
        key: BindKey,
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> (wgpu::BindGroup, bool) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = m.get(&key) {
            return (g.clone(), false);
        }
        if m.len() >= Self::MAX {
            m.clear();
        }
        let g = make();
        m.insert(key, g.clone());
        (g, true)
    }

    fn forget(&self, buf_id: u64) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // Unused slots are (0, 0, 0); ids start at 1.
        m.retain(|k, _| k.binds.iter().all(|&(b, _, _)| b != buf_id));
    }
}

/// Bytes held, by usage (owning handles only).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) weights: AtomicUsize,
    pub(crate) kv_cache: AtomicUsize,
    pub(crate) scratch: AtomicUsize,
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

/// One buffer binding: the whole buffer or a window of it.
#[derive(Clone, Copy)]
pub(crate) struct Bind<'a> {
    pub(crate) buf: &'a wgpu::Buffer,
    /// `buf`'s [`GpuTensor::buf_id`].
    pub(crate) id: u64,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    /// The backend that made the tensor (its counters' address): a buffer
    /// of another device in a bind group is a wgpu panic, so
    /// [`GpuBackend::dispatch`] turns it into an error first.
    pub(crate) owner: usize,
}

impl<'a> Bind<'a> {
    pub(crate) fn whole(t: &'a GpuTensor) -> Self {
        Bind {
            buf: &t.buf,
            id: t.buf_id,
            offset: t.offset,
            size: t.size,
            owner: t.owner(),
        }
    }

    /// The rows of `t` that `win` covers.
    pub(crate) fn window(t: &'a GpuTensor, win: &Window) -> Self {
        Bind {
            buf: &t.buf,
            id: t.buf_id,
            offset: t.offset + win.offset,
            size: win.size,
            owner: t.owner(),
        }
    }

    /// The whole buffer `t` lives in (a packed weight's parts together).
    pub(crate) fn buffer(t: &'a GpuTensor) -> Self {
        Bind {
            buf: &t.buf,
            id: t.buf_id,
            offset: 0,
            size: t.buf.size(),
            owner: t.owner(),
        }
    }
}

impl GpuTensor {
    /// Which backend made this tensor: the address of its byte counters.
    pub(crate) fn owner(&self) -> usize {
        Arc::as_ptr(&self.counters) as usize
    }
}

impl GpuBackend {
    /// `Ok` when every one of `owners` ([`Bind::owner`], [`GpuTensor::owner`])
    /// is this backend; else an error naming `what()` (an op, or an op and
    /// its tensor): another device's buffers cannot be bound or copied here.
    pub(crate) fn check_owners(
        &self,
        mut owners: impl Iterator<Item = usize>,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        let me = Arc::as_ptr(&self.counters) as usize;
        if owners.all(|o| o == me) {
            return Ok(());
        }
        Err(BackendError::Device(format!(
            "{}: a tensor of another wgpu backend (another device) was given; \
             tensors cannot move between backends",
            what()
        )))
    }

    /// [`GpuBackend::check_owners`] for one tensor of `op`.
    pub(crate) fn check_owner(&self, op: &str, t: &GpuTensor) -> Result<()> {
        self.check_owners(std::iter::once(t.owner()), || {
            format!("{op} `{}`", t.desc.label)
        })
    }
}

/// A window of whole rows of a tensor: rows `row0 .. row0 + n_rows`.
pub(crate) struct Window {
    pub(crate) row0: usize,
    pub(crate) n_rows: usize,
    offset: u64,
    size: u64,
}

/// The windows of a tensor: one (every tensor under the binding limit,
/// looked up on every dispatch with no heap allocation) or several.
pub(crate) enum Windows {
    One(Window),
    Many(Vec<Window>),
}

impl std::ops::Deref for Windows {
    type Target = [Window];
    fn deref(&self) -> &[Window] {
        match self {
            Windows::One(w) => std::slice::from_ref(w),
            Windows::Many(ws) => ws,
        }
    }
}

pub(crate) fn pad4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl GpuBackend {
    pub(crate) fn max_binding(&self) -> u64 {
        // Window sizes stay below 2 GiB so byte offsets fit a u32 in WGSL.
        let max = self.ctx.limits.max_storage_buffer_binding_size.min(1 << 31);
        self.max_binding_bytes.map_or(max, |m| m.min(max))
    }

    /// Split `t` into windows of whole rows, each under the binding limit and
    /// starting at an offset aligned to `min_storage_buffer_offset_alignment`.
    pub(crate) fn windows(&self, op: &'static str, t: &GpuTensor) -> Result<Windows> {
        let row_bytes = t.desc.row_bytes() as u64;
        let n_rows = t.desc.n_rows();
        let max = self.max_binding();
        if t.size <= max || row_bytes == 0 {
            return Ok(Windows::One(Window {
                row0: 0,
                n_rows,
                offset: 0,
                size: t.size,
            }));
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
        Ok(Windows::Many(out))
    }

    /// Every one of `ts` fits one binding (the tensors ops bind whole).
    pub(crate) fn check_bindable(&self, op: &'static str, ts: &[&GpuTensor]) -> Result<()> {
        let max = self.ctx.limits.max_storage_buffer_binding_size;
        for t in ts {
            if t.size > max {
                return Err(BackendError::Device(format!(
                    "{op}: `{}` is {} bytes, over the binding limit of {} bytes",
                    t.desc.label, t.size, max
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn new_tensor(&self, desc: TensorDesc) -> Result<GpuTensor> {
        let bytes = desc
            .ty
            .bytes_for(desc.ne[0] as u64)
            .and_then(|r| r.checked_mul(desc.n_rows() as u64))
            .ok_or_else(|| BackendError::Shape {
                op: "alloc",
                detail: format!(
                    "`{}`: {:?} is not whole blocks of {}",
                    desc.label,
                    desc.ne,
                    desc.ty.name()
                ),
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
        crate::counters::Work::add(&self.work.buffers_created, 1);
        self.counters
            .of(desc.usage)
            .fetch_add(size as usize, Ordering::Relaxed);
        Ok(GpuTensor {
            buf,
            buf_id: buffer_id(),
            desc,
            counters: self.counters.clone(),
            binds: self.binds.clone(),
            offset: 0,
            size,
            counted: true,
            finite: AtomicU64::new(UNKNOWN),
        })
    }

    /// Weights used together, uploaded into one buffer, part `i` at an
    /// offset aligned to `min_storage_buffer_offset_alignment`, so the fused
    /// matvecs can bind them as one. `None` (nothing made) for fewer than
    /// two parts, parts of different row lengths, or a total over one
    /// binding. Parts of different types pack too (Gemma 3's Q and K of one
    /// type, V of another): the matvecs take the runs of one type. The
    /// first part's handle owns the buffer in the memory report; the
    /// padding between parts is under 256 bytes a part.
    pub(crate) fn pack_weights(
        &self,
        parts: &[(TensorDesc, SharedBytes)],
    ) -> Result<Option<Vec<GpuTensor>>> {
        let Some((d0, _)) = parts.first() else {
            return Ok(None);
        };
        let same = parts.iter().all(|(d, _)| d.ne[0] == d0.ne[0]);
        if parts.len() < 2 || !same {
            return Ok(None);
        }
        let align = self.ctx.limits.min_storage_buffer_offset_alignment.max(4) as u64;
        // offsets[i], sizes[i]: where part i sits and the bytes it may bind.
        let (mut offsets, mut sizes, mut total) = (Vec::new(), Vec::new(), 0u64);
        for (d, b) in parts {
            let n = d.n_bytes() as u64;
            if b.bytes().len() as u64 != n {
                return Err(BackendError::Shape {
                    op: "weights",
                    detail: format!(
                        "`{}`: {} bytes given, {:?} {} needs {n}",
                        d.label,
                        b.bytes().len(),
                        d.ne,
                        d.ty.name()
                    ),
                });
            }
            total = total.next_multiple_of(align);
            offsets.push(total);
            sizes.push(pad4(n.max(4)));
            total += pad4(n.max(4));
        }
        if total > self.max_binding() || total >= 1 << 31 {
            return Ok(None);
        }
        let label = parts
            .iter()
            .map(|(d, _)| &*d.label)
            .collect::<Vec<_>>()
            .join("+");
        let whole = self.new_tensor(TensorDesc {
            ty: GgmlType::I8,
            ne: [total as usize, 1, 1, 1],
            label: label.into(),
            usage: Usage::Weights,
        })?;
        let mut out = Vec::with_capacity(parts.len());
        for (i, (d, b)) in parts.iter().enumerate() {
            let t = GpuTensor {
                buf: whole.buf.clone(),
                buf_id: whole.buf_id,
                desc: d.clone(),
                counters: Arc::clone(&self.counters),
                binds: Arc::clone(&self.binds),
                offset: offsets[i],
                size: sizes[i],
                counted: false,
                finite: AtomicU64::new(UNKNOWN),
            };
            self.write_bytes(&t, 0, b.bytes())?;
            out.push(t);
        }
        // The first part takes over the buffer's ownership (its bytes in the
        // report, its bind groups forgotten on drop).
        let mut whole = whole;
        whole.counted = false;
        drop(whole);
        out[0].counted = true;
        Ok(Some(out))
    }

    /// A handle on `t`'s buffer with shape `ne` (a reshape or a prefix).
    pub(crate) fn view_of(&self, t: &GpuTensor, ne: [usize; 4]) -> Result<GpuTensor> {
        let desc = glint_backend::check::view(&t.desc, ne)?;
        Ok(GpuTensor {
            buf: t.buf.clone(),
            buf_id: t.buf_id,
            offset: t.offset,
            size: pad4(desc.n_bytes() as u64).min(t.size),
            desc,
            counters: Arc::clone(&t.counters),
            binds: Arc::clone(&t.binds),
            counted: false,
            finite: AtomicU64::new(UNKNOWN),
        })
    }
}
