//! The device's copy bandwidth, for benchmarks to put their effective GB/s
//! next to: `glint bench` reports each test's bytes per second as a share of
//! what the device moves in a plain buffer-to-buffer copy, measured in the
//! same run.

use glint_backend::{BackendError, Result};

use crate::GpuBackend;

impl GpuBackend {
    /// Bytes per second moved by `copy_buffer_to_buffer` of `n_bytes`
    /// (rounded down to a multiple of 4, at most `max_buffer_size`), best of
    /// `reps` timed copies after one warm-up. A copy reads `n` and writes `n`
    /// bytes: the figure counts both (`2 n / t`), the traffic a memory-bound
    /// kernel would also see. Includes one submit and wait per copy, so use a
    /// buffer large enough (≥ 64 MiB) that those are noise.
    pub fn copy_bandwidth(&self, n_bytes: u64, reps: usize) -> Result<f64> {
        let n = (n_bytes.min(self.ctx.limits.max_buffer_size) / 4) * 4;
        if n == 0 {
            return Err(BackendError::Device("copy_bandwidth: empty buffer".into()));
        }
        let make = |usage| {
            self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("glint bandwidth"),
                size: n,
                usage,
                mapped_at_creation: false,
            })
        };
        let src = make(wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST);
        let dst = make(wgpu::BufferUsages::COPY_DST);
        let mut best = f64::INFINITY;
        for i in 0..reps.max(1) + 1 {
            let mut enc = self
                .ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, n);
            let t0 = std::time::Instant::now();
            self.ctx.queue.submit([enc.finish()]);
            self.wait()?;
            let t = t0.elapsed().as_secs_f64();
            // The first copy also pays for first-touch allocation.
            if i > 0 {
                best = best.min(t);
            }
        }
        Ok(2.0 * n as f64 / best)
    }
}
