//! The command encoder and its submission: ops record into one encoder,
//! submitted on `read`, `sync`, `write` or after [`MAX_PENDING_OPS`] ops;
//! reads and writes go through a staging buffer and the queue.

use glint_backend::{BackendError, Result};
use wgpu::util::DeviceExt;

use crate::counters::Work;
use crate::pipelines::PipelineKey;
use crate::tensor::{Bind, GpuTensor};
use crate::GpuBackend;

/// Ops recorded before the encoder is submitted without being asked.
pub const MAX_PENDING_OPS: usize = 256;

/// The encoder being recorded into, and how many ops it holds.
pub(crate) struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    n_ops: usize,
}

impl Pending {
    pub(crate) fn new() -> Self {
        Pending {
            encoder: None,
            n_ops: 0,
        }
    }
}

impl GpuBackend {
    /// Submit the recorded ops.
    pub(crate) fn flush(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(enc) = p.encoder.take() {
            self.ctx.queue.submit([enc.finish()]);
            Work::add(&self.work.submits, 1);
        }
        p.n_ops = 0;
    }

    pub(crate) fn wait(&self) -> Result<()> {
        self.ctx
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        self.ctx.take_error()
    }

    /// Run `f` on the encoder being recorded (created if there is none). An
    /// op (`is_op`) counts towards [`MAX_PENDING_OPS`]; the one that reaches
    /// it submits the encoder.
    fn record<R>(&self, is_op: bool, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let enc = p.encoder.get_or_insert_with(|| {
            self.ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ops") })
        });
        let r = f(enc);
        if is_op {
            p.n_ops += 1;
        }
        let full = p.n_ops >= MAX_PENDING_OPS;
        drop(p);
        if full {
            self.flush();
        }
        r
    }

    /// The bind group of one dispatch: `inputs`, `outputs`, then `params`
    /// (u32 words, padded to at least 16) as a uniform block.
    fn bind_group(
        &self,
        key: &PipelineKey,
        layout: &wgpu::BindGroupLayout,
        binds: &[&Bind<'_>],
        params: &[u32],
    ) -> wgpu::BindGroup {
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
        Work::add(&self.work.buffers_created, 1);
        Work::add(&self.work.bind_groups_created, 1);
        let mut entries = Vec::new();
        for (i, b) in binds.iter().enumerate() {
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
            binding: binds.len() as u32,
            resource: ubuf.as_entire_binding(),
        });
        self.ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(key.entry),
                layout,
                entries: &entries,
            })
    }

    /// Record one kernel: `inputs` read-only, `outputs` read-write, then the
    /// params (u32 words; f32 as bits) as a uniform block. `n_workgroups`
    /// are spread over x and y (x at most `max_compute_workgroups_per_dimension`).
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
        let pipe = self
            .pipelines
            .get(&self.ctx.device, &key)
            .map_err(BackendError::Device)?;
        let binds: Vec<&Bind<'_>> = inputs.iter().chain(outputs).collect();
        let bg = self.bind_group(&key, &pipe.layout, &binds, params);
        let max_x = self.ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let x = n_workgroups.min(max_x);
        let y = n_workgroups.div_ceil(x);
        Work::add(&self.work.dispatches, 1);
        Work::add(&self.work.passes, 1);
        self.record(true, |enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(key.entry),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipe.pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(x as u32, y as u32, 1);
        });
        Ok(())
    }

    /// `Backend::write`: `data` at byte `offset` of `t`, after the ops
    /// recorded so far.
    pub(crate) fn write_bytes(&self, t: &GpuTensor, offset: usize, data: &[u8]) -> Result<()> {
        let end = in_range("write", t, offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        // Queue writes land before any work submitted after them: submit
        // what was recorded so far first, so the order is the call order.
        self.flush();
        Work::add(&self.work.queue_writes, 1);
        Work::add(&self.work.queue_write_bytes, data.len() as u64);
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

    /// `Backend::read`: `out.len()` bytes at byte `offset` of `t`, after all
    /// recorded work.
    pub(crate) fn read_bytes(&self, t: &GpuTensor, offset: usize, out: &mut [u8]) -> Result<()> {
        let end = in_range("read", t, offset, out.len())?;
        if out.is_empty() {
            self.flush();
            return self.wait();
        }
        let start4 = offset / 4 * 4;
        let end4 = end.div_ceil(4) * 4;
        let mut words = vec![0u8; end4 - start4];
        self.read_raw(&t.buf, start4 as u64, &mut words)?;
        out.copy_from_slice(&words[offset - start4..end - start4]);
        Ok(())
    }

    /// Copy `out.len()` bytes (multiple of 4) at `offset` (multiple of 4)
    /// out of `buf`, after all recorded work.
    fn read_raw(&self, buf: &wgpu::Buffer, offset: u64, out: &mut [u8]) -> Result<()> {
        let size = out.len() as u64;
        Work::add(&self.work.readbacks, 1);
        Work::add(&self.work.readback_bytes, size);
        Work::add(&self.work.buffers_created, 1);
        let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.record(false, |enc| {
            enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size)
        });
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

/// The end of bytes `offset .. offset + len` of `t`, if they are inside it.
fn in_range(op: &'static str, t: &GpuTensor, offset: usize, len: usize) -> Result<usize> {
    let size = t.desc.n_bytes();
    let end = offset.saturating_add(len);
    if end > size {
        return Err(BackendError::Range {
            op,
            label: t.desc.label.clone(),
            start: offset,
            end,
            size,
        });
    }
    Ok(end)
}
