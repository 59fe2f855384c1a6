//! The command encoder and its submission: ops record into one compute
//! pass of one encoder, submitted on `read`, `sync`, a `write` to a buffer
//! a recorded op uses, or after [`MAX_PENDING_OPS`] ops; reads and writes
//! go through the queue and a pool of readback buffers. Small writes are
//! staged: their bytes go to the uploads buffer in one queue write a
//! submit, copied out by a command buffer submitted before the ops'.
//!
//! Per op nothing is created once warm: the params of every op recorded go
//! to one CPU-side block list, written to the params arena (a uniform
//! buffer) by one queue write at submit and picked per dispatch by a
//! dynamic offset; bind groups come from a cache keyed by their buffers;
//! pipelines are compiled once. The readback buffers are persistent.

use std::sync::atomic::Ordering::Relaxed;

use glint_backend::{BackendError, Result};

use crate::counters::Work;
use crate::pipelines::PipelineKey;
use crate::shaders::IMMEDIATES;
use crate::tensor::{Bind, BindKey, BufferSet, GpuTensor};
use crate::GpuBackend;

/// Ops recorded before the encoder is submitted without being asked: more
/// than a decode step of the models glint runs (SmolLM2: 514), so a step
/// is one submit.
pub const MAX_PENDING_OPS: usize = 2048;

/// The bytes of the uploads staging buffer: the small writes of one submit
/// together (a decode step's inputs are tens of bytes a sequence).
pub(crate) const UPLOAD_BYTES: u64 = 1 << 16;

/// The largest write that goes through the uploads staging buffer; larger
/// ones (weights, host-built masks) are queue writes of their own.
const UPLOAD_MAX_WRITE: usize = 1 << 12;

/// The largest params block an op may have (64 u32 words).
pub(crate) const PARAMS_MAX_BYTES: u64 = 256;

/// The immediate data of a kernel whose params are immediates (flag
/// [`IMMEDIATES`]): 32 words, the 128 bytes of push constants every Vulkan
/// device has, more than any kernel's params (the largest are 16 words).
/// Every dispatch sets all of them (the rest zeros), so each kernel finds
/// every word its `Params` reads set.
pub(crate) const IMMEDIATE_BYTES: u32 = 128;

/// The encoder being recorded into, its open compute pass, how many ops it
/// holds and their params blocks (in order, each at a multiple of the
/// device's dynamic-offset alignment), and the buffers its ops bind.
pub(crate) struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    n_ops: usize,
    params: Vec<u8>,
    /// The bytes of the writes staged for this submit, in order, each at a
    /// multiple of 4: written to the uploads buffer at submit, before the
    /// copies out of it run.
    uploads: Vec<u8>,
    /// The staged writes' copies out of the uploads buffer, submitted
    /// before `encoder`: they land before the submit's ops, as queue
    /// writes do.
    pre: Option<wgpu::CommandEncoder>,
    /// The buffers those copies write: a queue write to one of them waits
    /// for them (it would land first).
    staged: BufferSet,
    /// Every buffer a recorded op reads or writes ([`GpuTensor::buf_id`]):
    /// a queue write to one of them must wait for the ops (it would land
    /// before them); a write to any other buffer need not submit them.
    bound: BufferSet,
    /// Profiling: the kernel (the profiler's index) of each dispatch
    /// recorded, in order; dispatch n's timestamps are queries 2n, 2n + 1.
    profiled: Vec<usize>,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending {
            encoder: None,
            pass: None,
            n_ops: 0,
            params: Vec::new(),
            uploads: Vec::new(),
            pre: None,
            staged: Default::default(),
            bound: Default::default(),
            profiled: Vec::new(),
        }
    }
}

impl GpuBackend {
    /// Submit the recorded ops (their params first, in one queue write).
    pub(crate) fn flush(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        self.submit(&mut p);
    }

    fn submit(&self, p: &mut Pending) -> Option<wgpu::SubmissionIndex> {
        p.pass = None;
        let mut index = None;
        let mut profiled = std::mem::take(&mut p.profiled);
        if p.pre.is_some() && p.encoder.is_none() {
            // Staged writes alone: their copies are the submit.
            self.encoder(p);
        }
        if let Some(mut enc) = p.encoder.take() {
            if let (Some(prof), false) = (&self.profiler, profiled.is_empty()) {
                if !prof.resolve(&mut enc, profiled.len()) {
                    profiled.clear();
                }
            }
            if !p.params.is_empty() {
                Work::add(&self.work.queue_writes, 1);
                Work::add(&self.work.queue_write_bytes, p.params.len() as u64);
                self.ctx.queue.write_buffer(&self.params, 0, &p.params);
            }
            if !p.uploads.is_empty() {
                Work::add(&self.work.queue_writes, 1);
                Work::add(&self.work.queue_write_bytes, p.uploads.len() as u64);
                self.ctx.queue.write_buffer(&self.uploads, 0, &p.uploads);
            }
            let pre = p.pre.take().map(|e| e.finish());
            let cmd = enc.finish();
            // Blocked: a driver may run the work inside the submit (lavapipe
            // does), so its time is not the host's own.
            index = Some(
                self.work
                    .blocked(|| self.ctx.queue.submit(pre.into_iter().chain([cmd]))),
            );
            Work::add(&self.work.submits, 1);
            if let (Some(prof), false) = (&self.profiler, profiled.is_empty()) {
                // A lost reading is a hole in the profile, not an error of
                // the ops: device errors surface at the next read or sync.
                // It waits for the submit: blocked, not the host's work.
                let _ = self
                    .work
                    .blocked(|| prof.collect(&self.ctx.device, &profiled));
            }
        }
        p.params.clear();
        p.uploads.clear();
        p.staged.clear();
        p.n_ops = 0;
        p.bound.clear();
        index
    }

    pub(crate) fn wait(&self) -> Result<()> {
        self.work
            .blocked(|| {
                self.ctx.device.poll(wgpu::PollType::Wait {
                    submission_index: None,
                    timeout: None,
                })
            })
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        self.ctx.take_error()
    }

    /// Run `f` on the encoder being recorded (outside any compute pass:
    /// for copies), then submit everything recorded, under one lock: the
    /// submission's index is the one that holds `f`'s commands (another
    /// thread's flush cannot take them first).
    fn record_submit(
        &self,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Option<wgpu::SubmissionIndex> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        f(self.encoder(&mut p));
        self.submit(&mut p)
    }

    /// The encoder being recorded (made if there is none), its compute
    /// pass ended.
    fn encoder<'p>(&self, p: &'p mut Pending) -> &'p mut wgpu::CommandEncoder {
        p.pass = None;
        p.encoder.get_or_insert_with(|| {
            self.ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ops") })
        })
    }

    /// The bind group of one dispatch, `inputs`, `outputs`, then (unless
    /// the params are immediates) the params arena (one block, picked by the
    /// dynamic offset): from the cache, or made now.
    fn bind_group(
        &self,
        key: &PipelineKey,
        layout: &wgpu::BindGroupLayout,
        (inputs, outputs): (&[Bind<'_>], &[Bind<'_>]),
    ) -> wgpu::BindGroup {
        let binds = || inputs.iter().chain(outputs);
        let mut bkey = BindKey {
            n_in: key.n_in,
            n_out: key.n_out,
            binds: [(0, 0, 0); BindKey::MAX],
        };
        // `dispatch` refused more than BindKey::MAX.
        for (slot, b) in bkey.binds.iter_mut().zip(binds()) {
            *slot = (b.id, b.offset, b.size);
        }
        let (bg, made) = self.binds.get_or_make(bkey, || {
            let mut entries = Vec::new();
            for (i, b) in binds().enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buf,
                        offset: b.offset,
                        size: std::num::NonZeroU64::new(b.size),
                    }),
                });
            }
            if !key.flags.contains(&IMMEDIATES) {
                entries.push(wgpu::BindGroupEntry {
                    binding: (inputs.len() + outputs.len()) as u32,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &self.params,
                        offset: 0,
                        size: std::num::NonZeroU64::new(PARAMS_MAX_BYTES),
                    }),
                });
            }
            self.ctx
                .device
                .create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(key.entry),
                    layout,
                    entries: &entries,
                })
        });
        if made {
            Work::add(&self.work.bind_groups_created, 1);
        }
        bg
    }

    /// Record one kernel: `inputs` read-only, `outputs` read-write, then the
    /// params (u32 words, f32 as bits; at most [`PARAMS_MAX_BYTES`]) as a
    /// uniform block, or as the dispatch's immediate data where the device
    /// has immediates (at most [`IMMEDIATE_BYTES`]). `n_workgroups` are
    /// spread over x and y (x at most
    /// `max_compute_workgroups_per_dimension`). Every kernel of a submit
    /// runs in one compute pass; wgpu orders a dispatch after the ones
    /// whose outputs it reads.
    pub(crate) fn dispatch(
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
        if params.len() * 4 > PARAMS_MAX_BYTES as usize {
            return Err(BackendError::Device(format!(
                "{}: {} params words, over the {} of a params block",
                key.entry,
                params.len(),
                PARAMS_MAX_BYTES / 4
            )));
        }
        if inputs.len() + outputs.len() > BindKey::MAX {
            return Err(BackendError::Device(format!(
                "{}: {} bindings, over the {} of a bind group key",
                key.entry,
                inputs.len() + outputs.len(),
                BindKey::MAX
            )));
        }
        let immediates = self.features_used().immediates;
        if immediates && params.len() * 4 > IMMEDIATE_BYTES as usize {
            return Err(BackendError::Device(format!(
                "{}: {} params words, over the {} of immediate data",
                key.entry,
                params.len(),
                IMMEDIATE_BYTES / 4
            )));
        }
        let owners = inputs.iter().chain(outputs).map(|b| b.owner);
        self.check_owners(owners, || format!("{} ({})", key.entry, key.file))?;
        let mut key = key;
        if immediates {
            key.flags.push(IMMEDIATES);
        }
        let pipe = self
            .pipelines
            .get(&self.ctx.device, &key)
            .map_err(BackendError::Device)?;
        let bg = self.bind_group(&key, &pipe.layout, (inputs, outputs));
        let max_x = self.ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let x = n_workgroups.min(max_x);
        let y = n_workgroups.div_ceil(x);
        Work::add(&self.work.dispatches, 1);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut offset = p.params.len().next_multiple_of(self.param_align);
        if p.n_ops >= MAX_PENDING_OPS
            || (!immediates && offset as u64 + PARAMS_MAX_BYTES > self.params.size())
        {
            // The arena (or the ops a submit holds) is full: run what it
            // holds first.
            self.submit(&mut p);
            offset = 0;
        }
        if !immediates {
            // The block: at least 16 words, whole 16-byte rows (WGSL's
            // uniform layout), at the next dynamic-offset boundary.
            let words = params.len().max(16).next_multiple_of(4);
            p.params.resize(offset + words * 4, 0);
            p.params[offset..offset + params.len() * 4]
                .copy_from_slice(bytemuck::cast_slice(params));
        }
        p.n_ops += 1;
        for b in inputs.iter().chain(outputs) {
            p.bound.insert(b.id);
        }
        if p.pass.is_none() {
            let pass = self
                .encoder(&mut p)
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("ops"),
                    timestamp_writes: None,
                })
                .forget_lifetime();
            p.pass = Some(pass);
            Work::add(&self.work.passes, 1);
        }
        let n = p.profiled.len();
        if let Some(prof) = &self.profiler {
            let bytes =
                self.work.weight_bytes_read.load(Relaxed) + self.work.kv_bytes_read.load(Relaxed);
            let k = prof.kernel(&key, bytes);
            p.profiled.push(k);
        }
        let pass = p.pass.as_mut().expect("a pass was just opened");
        pass.set_pipeline(&pipe.pipeline);
        if immediates {
            let mut words = [0u32; IMMEDIATE_BYTES as usize / 4];
            words[..params.len()].copy_from_slice(params);
            pass.set_bind_group(0, &bg, &[]);
            pass.set_immediates(0, bytemuck::cast_slice(&words));
        } else {
            pass.set_bind_group(0, &bg, &[offset as u32]);
        }
        if let Some(prof) = &self.profiler {
            prof.stamp(pass, n, false);
        }
        pass.dispatch_workgroups(x as u32, y as u32, 1);
        if let Some(prof) = &self.profiler {
            prof.stamp(pass, n, true);
        }
        Ok(())
    }

    /// `Backend::write`: `data` at byte `offset` of `t`, after the ops
    /// recorded so far.
    ///
    /// A small write (at most [`UPLOAD_MAX_WRITE`] bytes, whole words) is
    /// staged: its bytes join the submit's others, written to the uploads
    /// buffer by one queue write at submit, and a copy into `t` is
    /// recorded in a command buffer submitted before the ops' (so it lands
    /// where a queue write would). A decode step's inputs (ids, positions,
    /// rows, sequences, the cells that changed) are such writes: one queue
    /// write a step, where each was one (wgpu stages every queue write in
    /// a buffer of its own, made and freed per write). Any other write is
    /// a queue write of its own.
    pub(crate) fn write_bytes(&self, t: &GpuTensor, offset: usize, data: &[u8]) -> Result<()> {
        self.check_owner("write", t)?;
        let end = in_range("write", t, offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        t.finite.store(finite_f32(t, offset, data), Relaxed);
        let start4 = offset / 4 * 4;
        let end4 = end.div_ceil(4) * 4;
        let aligned = start4 == offset && end4 == end;
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            // Queue writes (and staged copies) land before the ops of the
            // submit they go with: when a recorded op touches this buffer,
            // submit what was recorded so far first, so the order is the
            // call order. Ops that do not touch it cannot tell, and stay
            // recorded (one submit a decode step).
            if p.bound.contains(&t.buf_id) {
                self.submit(&mut p);
            }
            let at = p.uploads.len();
            if aligned && data.len() <= UPLOAD_MAX_WRITE && (at + data.len()) as u64 <= UPLOAD_BYTES
            {
                p.uploads.extend_from_slice(data);
                p.staged.insert(t.buf_id);
                let pre = p.pre.get_or_insert_with(|| {
                    self.ctx
                        .device
                        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                            label: Some("staged writes"),
                        })
                });
                pre.copy_buffer_to_buffer(
                    &self.uploads,
                    at as u64,
                    &t.buf,
                    t.offset + offset as u64,
                    data.len() as u64,
                );
                return self.ctx.take_error();
            }
            // A queue write would land before the copies staged for it.
            if p.staged.contains(&t.buf_id) {
                self.submit(&mut p);
            }
        }
        Work::add(&self.work.queue_writes, 1);
        Work::add(&self.work.queue_write_bytes, data.len() as u64);
        // t.offset: where t starts in its buffer (a packed weight's part).
        if aligned {
            self.ctx
                .queue
                .write_buffer(&t.buf, t.offset + offset as u64, data);
        } else {
            // Unaligned edges: merge with the bytes already there.
            let mut words = vec![0u8; end4 - start4];
            self.read_raw(&t.buf, t.offset + start4 as u64, &mut words)?;
            words[offset - start4..end - start4].copy_from_slice(data);
            self.ctx
                .queue
                .write_buffer(&t.buf, t.offset + start4 as u64, &words);
        }
        self.ctx.take_error()
    }

    /// `Backend::read`: `out.len()` bytes at byte `offset` of `t`, after all
    /// recorded work.
    pub(crate) fn read_bytes(&self, t: &GpuTensor, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_owner("read", t)?;
        let end = in_range("read", t, offset, out.len())?;
        if out.is_empty() {
            self.flush();
            return self.wait();
        }
        let start4 = offset / 4 * 4;
        let end4 = end.div_ceil(4) * 4;
        let mut words = vec![0u8; end4 - start4];
        self.read_raw(&t.buf, t.offset + start4 as u64, &mut words)?;
        out.copy_from_slice(&words[offset - start4..end - start4]);
        Ok(())
    }

    /// Copy `out.len()` bytes (multiple of 4) at `offset` (multiple of 4)
    /// out of `buf`, after all recorded work: a read started and finished
    /// at once, in a readback buffer of the reads' pool.
    pub(crate) fn read_raw(&self, buf: &wgpu::Buffer, offset: u64, out: &mut [u8]) -> Result<()> {
        let r = self.read_begin_raw(buf, offset, out.len() as u64, 0, out.len())?;
        self.read_end(r, out)
    }
}

/// The readback buffer of a read in flight ([`Reading`]), kept between
/// reads; `None` until one is needed, or after a read was dropped
/// unfinished (its buffer may still be mapping).
#[derive(Default)]
pub(crate) struct ReadSlot {
    buf: Option<wgpu::Buffer>,
    busy: bool,
}

/// A read in flight (`Backend::read_start`): the copy into its slot's
/// buffer was submitted with every op before it, and the buffer's mapping
/// asked for.
pub struct Reading {
    slots: std::sync::Arc<std::sync::Mutex<Vec<ReadSlot>>>,
    device: wgpu::Device,
    slot: usize,
    buf: wgpu::Buffer,
    /// Bytes mapped (whole multiples of MAP_ALIGNMENT) and where the
    /// asked-for bytes start in them, and how many.
    mapped: u64,
    skip: usize,
    len: usize,
    /// The submission that copies the bytes (`None`: there was none, an
    /// error when finished).
    index: Option<wgpu::SubmissionIndex>,
    mapping: std::sync::mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    done: bool,
}

impl Drop for Reading {
    fn drop(&mut self) {
        if !self.done {
            // Mapped by now (its step done, the callback run by this poll):
            // unmapped and kept; else still mapping, and the next read in
            // this slot makes a new buffer.
            let _ = self.device.poll(wgpu::PollType::Poll);
            if matches!(self.mapping.try_recv(), Ok(Ok(()))) {
                self.buf.unmap();
                self.done = true;
            }
        }
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut slots[self.slot];
        if !self.done {
            s.buf = None;
        }
        s.busy = false;
    }
}

impl GpuBackend {
    /// `Backend::read_start`: copy the bytes into a free slot's buffer
    /// after all recorded work, submit, and ask for the mapping.
    pub(crate) fn read_begin(&self, t: &GpuTensor, offset: usize, len: usize) -> Result<Reading> {
        self.check_owner("read_start", t)?;
        let end = in_range("read_start", t, offset, len)?;
        if len == 0 {
            return Err(BackendError::Shape {
                op: "read_start",
                detail: "a read of 0 bytes".into(),
            });
        }
        let start4 = offset / 4 * 4;
        let size = (end.div_ceil(4) * 4 - start4) as u64;
        let at = t.offset + start4 as u64;
        self.read_begin_raw(&t.buf, at, size, offset - start4, len)
    }

    /// Copy `size` bytes (a multiple of 4) at `offset` (a multiple of 4)
    /// of `src` into a free slot's buffer after all recorded work, submit,
    /// and ask for the mapping; the read's bytes are `len` of them from
    /// `skip`.
    fn read_begin_raw(
        &self,
        src: &wgpu::Buffer,
        offset: u64,
        size: u64,
        skip: usize,
        len: usize,
    ) -> Result<Reading> {
        let mapped = size.next_multiple_of(wgpu::MAP_ALIGNMENT);
        let (slot, buf) = {
            let mut slots = self.readings.lock().unwrap_or_else(|e| e.into_inner());
            let slot = match slots.iter().position(|s| !s.busy) {
                Some(slot) => slot,
                None => {
                    slots.push(ReadSlot::default());
                    slots.len() - 1
                }
            };
            let s = &mut slots[slot];
            if s.buf.as_ref().is_none_or(|b| b.size() < mapped) {
                Work::add(&self.work.buffers_created, 1);
                s.buf = Some(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("reading"),
                    size: mapped.max(READING_MIN_BYTES),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }));
            }
            s.busy = true;
            (slot, s.buf.clone().expect("made above"))
        };
        Work::add(&self.work.readbacks, 1);
        Work::add(&self.work.readback_bytes, size);
        let index = self.record_submit(|enc| enc.copy_buffer_to_buffer(src, offset, &buf, 0, size));
        let (tx, rx) = std::sync::mpsc::channel();
        // From here the slot is released when the reading drops.
        let r = Reading {
            slots: self.readings.clone(),
            device: self.ctx.device.clone(),
            slot,
            buf,
            mapped,
            skip,
            len,
            index,
            mapping: rx,
            done: false,
        };
        r.buf
            .slice(..mapped)
            .map_async(wgpu::MapMode::Read, move |m| {
                let _ = tx.send(m);
            });
        self.ctx.take_error()?;
        Ok(r)
    }

    /// `Backend::read_finish`: wait for the read's submission, copy the
    /// bytes out of the mapping and unmap.
    pub(crate) fn read_end(&self, mut r: Reading, out: &mut [u8]) -> Result<()> {
        if out.len() != r.len {
            return Err(BackendError::Shape {
                op: "read_finish",
                detail: format!("{} bytes were read, {} asked for", r.len, out.len()),
            });
        }
        let index = r.index.clone().ok_or_else(|| {
            BackendError::Device("read_finish: the copy was never submitted".into())
        })?;
        self.work
            .blocked(|| {
                self.ctx.device.poll(wgpu::PollType::Wait {
                    submission_index: Some(index),
                    timeout: None,
                })
            })
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        self.ctx.take_error()?;
        match r.mapping.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(BackendError::Device(format!("map: {e}"))),
            Err(_) => return Err(BackendError::Device("map: callback never ran".into())),
        }
        {
            let view = r
                .buf
                .slice(..r.mapped)
                .get_mapped_range()
                .map_err(|e| BackendError::Device(format!("map: {e}")))?;
            out.copy_from_slice(&view[r.skip..r.skip + r.len]);
        }
        r.buf.unmap();
        r.done = true;
        Ok(())
    }
}

/// A readback buffer's smallest size: a greedy token, a row of logits.
const READING_MIN_BYTES: u64 = 1 << 16;

/// The end of bytes `offset .. offset + len` of `t`, if they are inside it.
fn in_range(op: &'static str, t: &GpuTensor, offset: usize, len: usize) -> Result<usize> {
    let size = t.desc.n_bytes();
    let end = offset.saturating_add(len);
    if end > size {
        return Err(BackendError::Range {
            op,
            label: t.desc.label.to_string(),
            start: offset,
            end,
            size,
        });
    }
    Ok(end)
}

/// [`GpuTensor::finite`] after `data` lands at byte `offset` of `t`: the
/// f32 entries above -inf when `data` is all of an f32 tensor, else
/// unknown. One pass over bytes the queue copies anyway.
fn finite_f32(t: &GpuTensor, offset: usize, data: &[u8]) -> u64 {
    if t.desc.ty != glint_backend::GgmlType::F32 || offset != 0 || data.len() != t.desc.n_bytes() {
        return crate::tensor::UNKNOWN;
    }
    data.chunks_exact(4)
        .filter(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) > f32::NEG_INFINITY)
        .count() as u64
}
