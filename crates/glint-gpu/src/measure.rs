//! What the device itself can move, for the kernel benchmarks
//! (`benches/kernels.rs`): a matvec's bytes per second mean little until set
//! side by side with the same device's copy rate, measured in the same run
//! (interleaved with the kernel's runs, so both see the same load).
//!
//! Times are wall clock from submit to the queue's work being done (a
//! blocking `poll`), the way the benches time kernels (an op plus `sync`),
//! so both include the same submit and wait overhead. The device gets no
//! `TIMESTAMP_QUERY` feature (lavapipe has it, not every adapter does), and
//! for copies of tens of MiB the overhead is small next to the copy.

use std::time::{Duration, Instant};

use glint_backend::{BackendError, Result};

use crate::GpuBackend;

/// Copies per submit when [`GpuBackend::copy_bandwidth`] times the copy
/// engine: enough that one submit's fixed cost is a few percent of the
/// batch on a fast GPU, few enough that lavapipe's copies stay short.
pub const COPY_BATCH: usize = 8;

/// Two device buffers of `bytes` bytes to time copies between; see
/// [`GpuBackend::copy_probe`].
pub struct CopyProbe<'a> {
    backend: &'a GpuBackend,
    // src, dst: [bytes] u8, COPY_SRC | COPY_DST
    src: wgpu::Buffer,
    dst: wgpu::Buffer,
    bytes: u64,
}

impl GpuBackend {
    /// Allocate two buffers of `bytes` bytes and copy once, untimed (that
    /// also pays for their lazy zeroing). Ops still pending are run first.
    ///
    /// Errors: `bytes` zero, not a multiple of 4 (`COPY_BUFFER_ALIGNMENT`) or
    /// over the device's max buffer size; device errors.
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
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let probe = CopyProbe {
            backend: self,
            src: buffer("copy src"),
            dst: buffer("copy dst"),
            bytes,
        };
        self.ctx.take_error()?;
        probe.time()?;
        Ok(probe)
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
    /// Bytes per second moved by `copy_buffer_to_buffer` of `n_bytes`
    /// (rounded down to a multiple of 4, at most `max_buffer_size`), best of
    /// `reps` timed batches of [`COPY_BATCH`] copies of one [`CopyProbe`]
    /// (whose creation is the warm-up). A copy reads `n` and writes `n`
    /// bytes: the figure counts both (`2 n / t`), the traffic a
    /// memory-bound kernel also sees. Use a buffer large enough (≥ 64 MiB)
    /// that the submit and wait, spread over the batch, are noise.
    pub fn copy_bandwidth(&self, n_bytes: u64, reps: usize) -> Result<f64> {
        let align = wgpu::COPY_BUFFER_ALIGNMENT;
        let n = n_bytes.min(self.ctx.limits.max_buffer_size) / align * align;
        let probe = self.copy_probe(n)?;
        let mut best = f64::INFINITY;
        for _ in 0..reps.max(1) {
            best = best.min(probe.time_batch(COPY_BATCH)?.as_secs_f64());
        }
        Ok(2.0 * probe.bytes() as f64 / best)
    }
}
