//! Per-kernel device time ([`GpuOptions::profile`](crate::GpuOptions)):
//! a timestamp before and after every dispatch (`TIMESTAMP_QUERY_INSIDE_PASSES`),
//! resolved at each submit, read back at once (profiling makes every
//! submit wait for its work), and summed by kernel variant. Beside the
//! kernels, the time between them (barriers, launch gaps) is summed as its
//! own row: on a real GPU a decode step of ~200 dispatches can spend as long
//! there as in the kernels.
//!
//! Off by default: it needs an adapter feature, and it serializes submits.

use std::collections::HashMap;
use std::sync::Mutex;

use glint_backend::{BackendError, Result};

use crate::pipelines::PipelineKey;
use crate::submit::MAX_PENDING_OPS;

/// Timestamps a submit can hold: two a dispatch.
const QUERIES: u32 = 2 * MAX_PENDING_OPS as u32;

/// The name of the row that sums the time between dispatches.
pub const GAPS: &str = "(between dispatches)";

/// One kernel variant's totals (or, for [`GAPS`], the time between
/// consecutive dispatches of a submit).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelTime {
    /// `file:entry`, the weight type and the variant's flags.
    pub label: String,
    /// Dispatches timed.
    pub calls: u64,
    /// Device time, nanoseconds (end minus start timestamp, summed).
    pub ns: f64,
    /// Weight and K/V bytes the dispatches read, as the work counters model
    /// them ([`GpuCounters`](crate::GpuCounters)): 0 for other kernels.
    pub bytes: u64,
}

/// The query set, its resolve and readback buffers, and the totals.
pub(crate) struct Profiler {
    // [QUERIES] timestamps: 2i before dispatch i of a submit, 2i + 1 after
    queries: wgpu::QuerySet,
    // resolve: [QUERIES] u64 ticks, QUERY_RESOLVE | COPY_SRC
    resolve: wgpu::Buffer,
    // readback: [QUERIES] u64 ticks, MAP_READ | COPY_DST
    readback: wgpu::Buffer,
    /// Nanoseconds a tick.
    period_ns: f64,
    totals: Mutex<Totals>,
    /// A reading failed and the readback buffer may still be mapped: no
    /// submit resolves into it again (the profile stops; the ops go on).
    broken: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Totals {
    index: HashMap<PipelineKey, usize>,
    kernels: Vec<KernelTime>,
    gaps: KernelTime,
    /// The modeled bytes counter (weights + K/V) at the last dispatch.
    bytes_seen: u64,
}

impl Profiler {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Self {
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: u64::from(QUERIES) * 8,
                usage,
                mapped_at_creation: false,
            })
        };
        use wgpu::BufferUsages as U;
        Profiler {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERIES,
            }),
            resolve: buffer("profile resolve", U::QUERY_RESOLVE | U::COPY_SRC),
            readback: buffer("profile readback", U::MAP_READ | U::COPY_DST),
            period_ns: f64::from(queue.get_timestamp_period()),
            totals: Mutex::default(),
            broken: Default::default(),
        }
    }

    /// The features profiling needs.
    pub(crate) fn features() -> wgpu::Features {
        wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES
    }

    /// The totals' index of the kernel `key`, charged the modeled bytes
    /// read since the last dispatch (`bytes_now`: the counter's total).
    pub(crate) fn kernel(&self, key: &PipelineKey, bytes_now: u64) -> usize {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = bytes_now.saturating_sub(t.bytes_seen);
        t.bytes_seen = bytes_now;
        let i = match t.index.get(key) {
            Some(&i) => i,
            None => {
                let i = t.kernels.len();
                t.kernels.push(KernelTime {
                    label: label(key),
                    ..Default::default()
                });
                t.index.insert(key.clone(), i);
                i
            }
        };
        t.kernels[i].bytes += bytes;
        i
    }

    /// Record dispatch `n`'s opening (`end` false) or closing timestamp.
    pub(crate) fn stamp(&self, pass: &mut wgpu::ComputePass<'static>, n: usize, end: bool) {
        pass.write_timestamp(&self.queries, 2 * n as u32 + u32::from(end));
    }

    /// Copy the `n` dispatches' timestamps to the readback buffer (after the
    /// pass has ended); false, recording nothing, once a reading failed.
    pub(crate) fn resolve(&self, enc: &mut wgpu::CommandEncoder, n: usize) -> bool {
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let q = 2 * n as u32;
        enc.resolve_query_set(&self.queries, 0..q, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, u64::from(q) * 8);
        true
    }

    /// After the submit holding `kernels` (the totals' index of each
    /// dispatch, in order) is done: read its timestamps and add them up.
    /// A failed reading stops the profile ([`Profiler::resolve`]).
    pub(crate) fn collect(&self, device: &wgpu::Device, kernels: &[usize]) -> Result<()> {
        let r = self.read(device, kernels);
        if r.is_err() {
            self.broken
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    fn read(&self, device: &wgpu::Device, kernels: &[usize]) -> Result<()> {
        let bytes = kernels.len() as u64 * 16;
        let slice = self.readback.slice(..bytes);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|e| BackendError::Device(format!("profile poll: {e}")))?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(BackendError::Device(format!("profile map: {e}"))),
            Err(_) => return Err(BackendError::Device("profile map: no callback".into())),
        }
        let ticks: Vec<u64> = match slice.get_mapped_range() {
            Ok(view) => bytemuck::pod_collect_to_vec(&view[..]),
            Err(e) => {
                self.readback.unmap();
                return Err(BackendError::Device(format!("profile map: {e}")));
            }
        };
        self.readback.unmap();
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let ns = |a: u64, b: u64| b.saturating_sub(a) as f64 * self.period_ns;
        for (i, &k) in kernels.iter().enumerate() {
            let (start, end) = (ticks[2 * i], ticks[2 * i + 1]);
            t.kernels[k].calls += 1;
            t.kernels[k].ns += ns(start, end);
            if i > 0 {
                t.gaps.calls += 1;
                t.gaps.ns += ns(ticks[2 * i - 1], start);
            }
        }
        Ok(())
    }

    /// The totals since the last call (kernels that ran, most time first,
    /// then the gaps' row), and start again from zero.
    pub(crate) fn take(&self) -> Vec<KernelTime> {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for k in t.kernels.iter_mut() {
            if k.calls > 0 {
                out.push(k.clone());
            }
            // Every row from zero: bytes of a dispatch whose timing was
            // lost do not carry over.
            (k.calls, k.ns, k.bytes) = (0, 0.0, 0);
        }
        out.sort_by(|a, b| b.ns.total_cmp(&a.ns));
        let gaps = std::mem::take(&mut t.gaps);
        out.push(KernelTime {
            label: GAPS.into(),
            ..gaps
        });
        out
    }
}

/// `file:entry type flags`: a kernel variant, as the profile names it.
fn label(key: &PipelineKey) -> String {
    let mut s = format!("{}:{}", key.file.trim_end_matches(".wgsl"), key.entry);
    if let Some(ty) = key.ty {
        s.push_str(&format!(" {ty:?}"));
    }
    let mut tags: Vec<String> = key.flags.iter().map(|f| f.to_string()).collect();
    for (name, bits) in key.constants.iter() {
        tags.push(format!("{name}={}", f64::from_bits(*bits)));
    }
    if !tags.is_empty() {
        s.push_str(&format!(" [{}]", tags.join(",")));
    }
    s
}
