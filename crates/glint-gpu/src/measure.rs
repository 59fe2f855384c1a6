//! What the device itself can move, for the kernel benchmarks
//! (`benches/kernels.rs`): a matvec's bytes per second mean little until set
//! side by side with the same device's copy rate, measured in the same run
//! (interleaved with the kernel's runs, so both see the same load).
//!
//! Two ways to move memory are timed: the copy engine
//! (`copy_buffer_to_buffer`) and a compute kernel (`shaders/copy.wgsl`).
//! Kernels are held to the faster: on an H200 under Vulkan the copy engine
//! moved about 0.8 TB/s while the matvec kernels read weights at up to 1.5.
//!
//! Times are wall clock from submit to the queue's work being done (a
//! blocking `poll`), the way the benches time kernels (an op plus `sync`),
//! so both include the same submit and wait overhead. The device gets no
//! `TIMESTAMP_QUERY` feature (lavapipe has it, not every adapter does), and
//! for copies of tens of MiB the overhead is small next to the copy.

use std::time::{Duration, Instant};

use glint_backend::{BackendError, Result};

use crate::pipelines::{Pipeline, PipelineKey};
use crate::GpuBackend;

/// Invocations of a workgroup of `shaders/copy.wgsl`.
const COPY_WG: u64 = 256;

/// Copies per submit when [`GpuBackend::copy_bandwidth`] times the copy
/// engine and the copy kernel: enough that one submit's fixed cost is a few
/// percent of the batch on a fast GPU, few enough that lavapipe's copies
/// stay short.
pub const COPY_BATCH: usize = 8;

/// Two device buffers of `bytes` bytes to time copies between; see
/// [`GpuBackend::copy_probe`].
pub struct CopyProbe<'a> {
    backend: &'a GpuBackend,
    // src, dst: [bytes] u8, COPY_SRC | COPY_DST | STORAGE
    src: wgpu::Buffer,
    dst: wgpu::Buffer,
    bytes: u64,
    kernel: KernelCopy,
}

/// `shaders/copy.wgsl` over the probe's buffers: its pipeline, a bind group
/// each way (src to dst, dst to src), and what one dispatch moves.
struct KernelCopy {
    pipe: std::sync::Arc<Pipeline>,
    // [0]: src -> dst, [1]: dst -> src
    groups: [wgpu::BindGroup; 2],
    // params: Params { n, stride } (16 bytes), UNIFORM
    _params: wgpu::Buffer,
    /// Bytes one dispatch copies: the whole 16-byte words of the probe's
    /// size, at most one storage binding.
    bytes: u64,
    n_workgroups: u32,
}

impl GpuBackend {
    /// Allocate two buffers of `bytes` bytes, make the copy kernel's
    /// pipeline, and copy once each way, untimed (that also pays for their
    /// lazy zeroing). Ops still pending are run first.
    ///
    /// Errors: `bytes` zero, not a multiple of 4 (`COPY_BUFFER_ALIGNMENT`),
    /// under 16 (the copy kernel's word) or over the device's max buffer
    /// size; device errors.
    pub fn copy_probe(&self, bytes: u64) -> Result<CopyProbe<'_>> {
        let max = self.ctx.limits.max_buffer_size;
        if bytes == 0 || !bytes.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT) || bytes > max {
            return Err(BackendError::Device(format!(
                "copy_probe: {bytes} bytes; need a nonzero multiple of {} up to {max}",
                wgpu::COPY_BUFFER_ALIGNMENT
            )));
        }
        self.flush();
        self.wait()?;
        let buffer = |label| {
            self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let (src, dst) = (buffer("copy src"), buffer("copy dst"));
        let kernel = self.kernel_copy(&src, &dst, bytes)?;
        let probe = CopyProbe {
            backend: self,
            src,
            dst,
            bytes,
            kernel,
        };
        self.ctx.take_error()?;
        probe.time()?;
        probe.time_kernel_batch(1)?;
        Ok(probe)
    }

    /// The copy kernel's pipeline and bindings over `src` and `dst`.
    fn kernel_copy(
        &self,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        bytes: u64,
    ) -> Result<KernelCopy> {
        let limits = &self.ctx.limits;
        let n = bytes.min(limits.max_storage_buffer_binding_size) / 16;
        if n == 0 {
            return Err(BackendError::Device(format!(
                "copy_probe: {bytes} bytes hold no 16-byte word for the copy kernel"
            )));
        }
        let max_x = u64::from(limits.max_compute_workgroups_per_dimension.max(1));
        let n_workgroups = n.div_ceil(COPY_WG).min(max_x) as u32;
        let pipe = self
            .pipelines
            .get(
                &self.ctx.device,
                &PipelineKey::new("copy.wgsl", "copy", 1, 1),
            )
            .map_err(BackendError::Device)?;
        // Params { n, stride }, padded to a uniform block's 16 bytes.
        let stride = u64::from(n_workgroups) * COPY_WG;
        let words = [n as u32, stride as u32, 0, 0];
        let params = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("copy params"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.ctx
            .queue
            .write_buffer(&params, 0, bytemuck::cast_slice(&words));
        let size = std::num::NonZeroU64::new(n * 16);
        let group = |a: &wgpu::Buffer, b: &wgpu::Buffer| {
            self.ctx
                .device
                .create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("copy"),
                    layout: &pipe.layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: a,
                                offset: 0,
                                size,
                            }),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: b,
                                offset: 0,
                                size,
                            }),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: &params,
                                offset: 0,
                                size: std::num::NonZeroU64::new(16),
                            }),
                        },
                    ],
                })
        };
        let groups = [group(src, dst), group(dst, src)];
        Ok(KernelCopy {
            pipe,
            groups,
            _params: params,
            bytes: n * 16,
            n_workgroups,
        })
    }
}

impl CopyProbe<'_> {
    /// Bytes per copy. A copy reads them and writes them: the device moves
    /// twice as many.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Wall time of one `copy_buffer_to_buffer` of [`CopyProbe::bytes`],
    /// submitted alone, from submit until the device is done with it.
    pub fn time(&self) -> Result<Duration> {
        self.time_batch(1)
    }

    /// Wall time of one copy out of `n` recorded into one command buffer
    /// and submitted together (the total over `n`), back and forth between
    /// the two buffers. A lone submit and its wait cost a fixed time (about
    /// half a millisecond on an H100 under Firecracker, where a 256 MiB
    /// copy takes 0.2): batching spreads it, so the figure approaches what
    /// the copy engine moves, the ceiling a kernel's reads are held to.
    pub fn time_batch(&self, n: usize) -> Result<Duration> {
        let n = n.max(1);
        let ctx = &self.backend.ctx;
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("copy"),
            });
        for i in 0..n {
            let (a, b) = if i % 2 == 0 {
                (&self.src, &self.dst)
            } else {
                (&self.dst, &self.src)
            };
            enc.copy_buffer_to_buffer(a, 0, b, 0, self.bytes);
        }
        self.submit_timed(enc, n)
    }

    /// Bytes one copy of the copy kernel moves each way:
    /// [`CopyProbe::bytes`] rounded down to 16, at most one storage
    /// binding.
    pub fn kernel_bytes(&self) -> u64 {
        self.kernel.bytes
    }

    /// Copy a pattern from the source buffer to the destination with the
    /// copy kernel and check the destination holds it (the kernel's twin
    /// is a memcpy), so a broken kernel cannot post a fast time. Writes
    /// both buffers and reads [`CopyProbe::kernel_bytes`] back: for tests
    /// and small probes.
    pub fn check_kernel(&self) -> Result<()> {
        let ctx = &self.backend.ctx;
        let n = self.kernel.bytes as usize;
        let want: Vec<u8> = (0..n / 4)
            .flat_map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ 0x5bd1_e995).to_le_bytes())
            .collect();
        ctx.queue.write_buffer(&self.src, 0, &want);
        ctx.queue.write_buffer(&self.dst, 0, &vec![0u8; n]);
        self.time_kernel_batch(1)?;
        let mut got = vec![0u8; n];
        self.backend.read_raw(&self.dst, 0, &mut got)?;
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(BackendError::Device(format!(
                "copy kernel: byte {i} of {n} is {}, the source's {}",
                got[i], want[i]
            ))),
        }
    }

    /// [`CopyProbe::time_batch`] with the copy kernel (`shaders/copy.wgsl`)
    /// in place of `copy_buffer_to_buffer`: `n` dispatches in one compute
    /// pass, back and forth, one submit; the time per dispatch.
    pub fn time_kernel_batch(&self, n: usize) -> Result<Duration> {
        let n = n.max(1);
        let ctx = &self.backend.ctx;
        let k = &self.kernel;
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("copy kernel"),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("copy kernel"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&k.pipe.pipeline);
            for i in 0..n {
                pass.set_bind_group(0, &k.groups[i % 2], &[0]);
                pass.dispatch_workgroups(k.n_workgroups, 1, 1);
            }
        }
        self.submit_timed(enc, n)
    }
}

impl CopyProbe<'_> {
    /// Submit `enc` alone and wait for it: the wall time over `n` ops.
    fn submit_timed(&self, enc: wgpu::CommandEncoder, n: usize) -> Result<Duration> {
        let ctx = &self.backend.ctx;
        let cmd = enc.finish();
        let t0 = Instant::now();
        let index = ctx.queue.submit([cmd]);
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        let t = t0.elapsed();
        ctx.take_error()?;
        Ok(t / n as u32)
    }
}

impl GpuBackend {
    /// Bytes per second moved by a copy of `n_bytes` (rounded down to a
    /// multiple of 4, at most `max_buffer_size`): the faster of
    /// `copy_buffer_to_buffer` and the copy kernel, each the best of `reps`
    /// timed batches of [`COPY_BATCH`] copies of one [`CopyProbe`] (whose
    /// creation is the warm-up). A copy reads `n` and writes `n` bytes: the
    /// figure counts both (`2 n / t`), the traffic a memory-bound kernel
    /// also sees. Use a buffer large enough (≥ 64 MiB) that the submit and
    /// wait, spread over the batch, are noise.
    pub fn copy_bandwidth(&self, n_bytes: u64, reps: usize) -> Result<f64> {
        let align = wgpu::COPY_BUFFER_ALIGNMENT;
        let n = n_bytes.min(self.ctx.limits.max_buffer_size) / align * align;
        let probe = self.copy_probe(n)?;
        let (mut engine, mut kernel) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..reps.max(1) {
            engine = engine.min(probe.time_batch(COPY_BATCH)?.as_secs_f64());
            kernel = kernel.min(probe.time_kernel_batch(COPY_BATCH)?.as_secs_f64());
        }
        let engine = 2.0 * probe.bytes() as f64 / engine;
        let kernel = 2.0 * probe.kernel_bytes() as f64 / kernel;
        Ok(engine.max(kernel))
    }
}
