//! What the backend asked of the device, counted: the structure of the work
//! per token, which is deterministic (unlike timings on a software driver)
//! and so can be held to budgets in tests. Read with
//! [`GpuBackend::work_counters`](crate::GpuBackend::work_counters); a step's
//! counts are the difference of two readings.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Running totals since the backend was made.
#[derive(Default)]
pub(crate) struct Work {
    pub(crate) dispatches: AtomicU64,
    pub(crate) passes: AtomicU64,
    pub(crate) submits: AtomicU64,
    pub(crate) buffers_created: AtomicU64,
    pub(crate) bind_groups_created: AtomicU64,
    pub(crate) pipelines_created: AtomicU64,
    pub(crate) queue_writes: AtomicU64,
    pub(crate) queue_write_bytes: AtomicU64,
    pub(crate) readbacks: AtomicU64,
    pub(crate) readback_bytes: AtomicU64,
    pub(crate) weight_bytes_read: AtomicU64,
    pub(crate) kv_bytes_read: AtomicU64,
    /// Nanoseconds the host spent in queue submits and in waits for the
    /// device: a clock, not a count (so not in [`GpuCounters`], which
    /// stays deterministic). The host's own cost of a step is its wall
    /// time less this ([`crate::GpuBackend::host_blocked_ns`]).
    pub(crate) blocked_ns: AtomicU64,
}

impl Work {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    /// `f`, its wall time added to [`Work::blocked_ns`].
    pub(crate) fn blocked<R>(&self, f: impl FnOnce() -> R) -> R {
        let t0 = std::time::Instant::now();
        let r = f();
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.blocked_ns.fetch_add(ns, Relaxed);
        r
    }

    pub(crate) fn snapshot(&self) -> GpuCounters {
        let g = |c: &AtomicU64| c.load(Relaxed);
        GpuCounters {
            dispatches: g(&self.dispatches),
            passes: g(&self.passes),
            submits: g(&self.submits),
            buffers_created: g(&self.buffers_created),
            bind_groups_created: g(&self.bind_groups_created),
            pipelines_created: g(&self.pipelines_created),
            queue_writes: g(&self.queue_writes),
            queue_write_bytes: g(&self.queue_write_bytes),
            readbacks: g(&self.readbacks),
            readback_bytes: g(&self.readback_bytes),
            weight_bytes_read: g(&self.weight_bytes_read),
            kv_bytes_read: g(&self.kv_bytes_read),
        }
    }
}

/// One reading of the work counters (totals, or a step's counts as the
/// difference of two readings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// Kernels dispatched.
    pub dispatches: u64,
    /// Compute passes begun.
    pub passes: u64,
    /// Command buffers submitted to the queue.
    pub submits: u64,
    /// Buffers created (tensors, uniform blocks, readback buffers).
    pub buffers_created: u64,
    /// Bind groups created.
    pub bind_groups_created: u64,
    /// Compute pipelines created (a cache miss).
    pub pipelines_created: u64,
    /// `queue.write_buffer` calls.
    pub queue_writes: u64,
    /// Bytes they wrote.
    pub queue_write_bytes: u64,
    /// Reads back to the host.
    pub readbacks: u64,
    /// Bytes read back.
    pub readback_bytes: u64,
    /// Weight bytes the dispatched kernels read, modeled from each
    /// dispatch's geometry (its workgroups and the weight rows each one
    /// reads: a matvec row once for all its columns, a matmul tile
    /// its rows for as many columns, 64 or 128). Row gathers (`get_rows`
    /// of an embedding) are not counted, as the bench's bytes formula does
    /// not count them.
    pub weight_bytes_read: u64,
    /// K/V cache bytes the attention kernels read, modeled the same way:
    /// each workgroup, one a (token, KV head) taking that head's group of
    /// query heads, reads the K and V rows of every cell of the window its
    /// mask lets through once (and the grouped K in the two-window mode).
    pub kv_bytes_read: u64,
}

impl GpuCounters {
    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &GpuCounters) -> GpuCounters {
        GpuCounters {
            dispatches: self.dispatches - earlier.dispatches,
            passes: self.passes - earlier.passes,
            submits: self.submits - earlier.submits,
            buffers_created: self.buffers_created - earlier.buffers_created,
            bind_groups_created: self.bind_groups_created - earlier.bind_groups_created,
            pipelines_created: self.pipelines_created - earlier.pipelines_created,
            queue_writes: self.queue_writes - earlier.queue_writes,
            queue_write_bytes: self.queue_write_bytes - earlier.queue_write_bytes,
            readbacks: self.readbacks - earlier.readbacks,
            readback_bytes: self.readback_bytes - earlier.readback_bytes,
            weight_bytes_read: self.weight_bytes_read - earlier.weight_bytes_read,
            kv_bytes_read: self.kv_bytes_read - earlier.kv_bytes_read,
        }
    }

    /// Each counter by name, in a fixed order (for tables and JSON).
    pub fn fields(&self) -> [(&'static str, u64); 12] {
        [
            ("dispatches", self.dispatches),
            ("passes", self.passes),
            ("submits", self.submits),
            ("buffers_created", self.buffers_created),
            ("bind_groups_created", self.bind_groups_created),
            ("pipelines_created", self.pipelines_created),
            ("queue_writes", self.queue_writes),
            ("queue_write_bytes", self.queue_write_bytes),
            ("readbacks", self.readbacks),
            ("readback_bytes", self.readback_bytes),
            ("weight_bytes_read", self.weight_bytes_read),
            ("kv_bytes_read", self.kv_bytes_read),
        ]
    }
}
