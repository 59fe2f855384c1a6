//! Measurements of the machine the bench sets its figures against.

use std::time::Instant;

/// The host's read bandwidth in bytes/s: `n_threads` threads summing their
/// share of a `n_bytes` buffer (filled first, so every page is real), best
/// of `reps` after one warm-up.
pub fn cpu_read_bandwidth(n_bytes: usize, n_threads: usize, reps: usize) -> f64 {
    let n = (n_bytes / 8).max(1024);
    let buf: Vec<u64> = (0..n as u64).collect();
    let n_threads = n_threads.max(1);
    let chunk = n.div_ceil(n_threads);
    let mut best = f64::INFINITY;
    let mut sink = 0u64;
    for i in 0..reps.max(1) + 1 {
        let t0 = Instant::now();
        let s: u64 = std::thread::scope(|sc| {
            let hs: Vec<_> = buf
                .chunks(chunk)
                .map(|c| sc.spawn(move || c.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        let t = t0.elapsed().as_secs_f64();
        sink = sink.wrapping_add(s);
        if i > 0 {
            best = best.min(t);
        }
    }
    std::hint::black_box(sink);
    (n * 8) as f64 / best
}

/// The most memory this process may still take, in bytes: the lowest of
/// the memory the system has available (`MemAvailable`), the cgroup's limit
/// less what the cgroup uses, and the address-space limit (`ulimit -v`).
/// `None` where none of them can be read (not Linux).
pub fn memory_limit() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut limits = Vec::new();
    // "MemAvailable:   123 kB"
    if let Some(kb) = read("/proc/meminfo").and_then(|s| field(&s, "MemAvailable:", 1)) {
        limits.push(kb * 1024);
    }
    // cgroup v2, then v1; "max" (or a huge v1 number) means no limit.
    for (max, cur) in [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ] {
        if let Some(m) = read(max).and_then(|s| s.trim().parse::<u64>().ok()) {
            let used = read(cur)
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0);
            limits.push(m.saturating_sub(used));
            break;
        }
    }
    // "Max address space   <soft> <hard> bytes" ("unlimited" parses to none)
    if let Some(v) = read("/proc/self/limits").and_then(|s| field(&s, "Max address space", 3)) {
        limits.push(v);
    }
    limits.into_iter().min()
}

/// The `n`-th whitespace-separated field, as a number, of the first line of
/// `text` that starts with `prefix`.
fn field(text: &str, prefix: &str, n: usize) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_whitespace().nth(n))
        .and_then(|v| v.parse().ok())
}

/// One compute device glint can run on (`glint devices`).
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Index for [`crate::ModelParams::adapter`] (`--adapter`); `None` for the cpu.
    pub adapter: Option<usize>,
    /// The adapter's or the cpu's name.
    pub name: String,
    /// Vulkan, Metal, Dx12, Gl, or cpu.
    pub api: String,
    /// DiscreteGpu, IntegratedGpu, Cpu (a software adapter), ...
    pub kind: String,
    /// Optional features the kernels use that the device has.
    pub features: Vec<&'static str>,
    /// Limits the kernels size themselves by: (name, value).
    pub limits: Vec<(&'static str, u64)>,
}

/// The devices this build can run on: the cpu backend, then every wgpu
/// adapter (opened, to read its limits and features; one that fails to open
/// is listed with no limits).
pub fn devices() -> Vec<DeviceInfo> {
    let mut out = Vec::new();
    #[cfg(feature = "cpu")]
    out.push(DeviceInfo {
        adapter: None,
        name: format!(
            "cpu ({} threads)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        api: "cpu".into(),
        kind: "Cpu".into(),
        features: cpu_features(),
        limits: vec![],
    });
    #[cfg(feature = "wgpu")]
    for a in glint_gpu::list_adapters() {
        let opened = glint_gpu::GpuBackend::new(glint_gpu::GpuOptions {
            adapter_index: Some(a.index),
            ..Default::default()
        });
        let (features, limits) = match &opened {
            Ok(g) => {
                let l = g.limits();
                let mut f = Vec::new();
                if g.features().contains(glint_gpu::wgpu::Features::SHADER_F16) {
                    f.push("shader-f16");
                }
                if g.features().contains(glint_gpu::wgpu::Features::SUBGROUP) {
                    f.push("subgroup");
                }
                if g.features().contains(glint_gpu::wgpu::Features::IMMEDIATES) {
                    f.push("immediates");
                }
                let limits = vec![
                    ("max_buffer_size", l.max_buffer_size),
                    (
                        "max_storage_buffer_binding_size",
                        l.max_storage_buffer_binding_size,
                    ),
                    (
                        "max_compute_workgroup_storage_size",
                        l.max_compute_workgroup_storage_size as u64,
                    ),
                    (
                        "max_compute_invocations_per_workgroup",
                        l.max_compute_invocations_per_workgroup as u64,
                    ),
                    (
                        "max_compute_workgroups_per_dimension",
                        l.max_compute_workgroups_per_dimension as u64,
                    ),
                    ("max_immediate_size", l.max_immediate_size as u64),
                ];
                (f, limits)
            }
            Err(_) => (vec![], vec![]),
        };
        out.push(DeviceInfo {
            adapter: Some(a.index),
            name: a.name,
            api: format!("{:?}", a.backend),
            kind: format!("{:?}", a.device_type),
            features,
            limits,
        });
    }
    out
}

/// The x86 instruction sets the cpu kernels pick from at run time.
#[cfg(feature = "cpu")]
fn cpu_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            f.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("fma") {
            f.push("fma");
        }
        if std::arch::is_x86_feature_detected!("f16c") {
            f.push("f16c");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            f.push("avx512f");
        }
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            f.push("avx512vnni");
        }
    }
    f
}
