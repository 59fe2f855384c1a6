//! Compute pipelines, created on first use and cached by (file, entry point,
//! weight type, override constants, flags). Bind group layouts are explicit:
//! every kernel binds `n_in` read-only storage buffers, then `n_out`
//! read-write storage buffers, then one uniform block of parameters, or,
//! for a variant with the [`IMMEDIATES`] flag, takes its parameters as
//! immediate data ([`IMMEDIATE_BYTES`]) and binds no uniform block.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use glint_backend::GgmlType;

use crate::few::Few;
use crate::shaders::{module_source, IMMEDIATES};
use crate::submit::IMMEDIATE_BYTES;

/// A kernel variant's preprocessor flags (a fixed few, held inline: the
/// fused matvec's variants take 8 with IMMEDIATES).
pub type Flags = Few<&'static str, 12>;

/// What identifies a pipeline.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct PipelineKey {
    /// Shader file under `shaders/`.
    pub file: &'static str,
    /// Entry point.
    pub entry: &'static str,
    /// Weight format, for the weight kernels (`TYPE_FILE`, `BLOCK_SIZE`,
    /// `TYPE_SIZE` come from its row of the type table).
    pub ty: Option<GgmlType>,
    /// Override constants: name and value (as f64 bits, for hashing).
    pub constants: Few<(&'static str, u64), 8>,
    /// Preprocessor flags (`#ifdef`): the variant, e.g. [`F16`], [`SUBGROUPS`].
    pub flags: Flags,
    /// Read-only storage bindings, then read-write ones.
    pub n_in: u32,
    /// Read-write storage bindings.
    pub n_out: u32,
}

/// A compiled pipeline and its layout.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: Arc<wgpu::BindGroupLayout>,
}

/// Pipelines and bind group layouts, created on first use.
#[derive(Default)]
pub struct PipelineCache {
    /// Keep wgpu's loop bounding ([`crate::GpuOptions::loop_bounding`]).
    loop_bounding: bool,
    /// Pipelines compiled so far (cache misses), for the work counters.
    pub(crate) created: std::sync::atomic::AtomicU64,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>, foldhash::fast::RandomState>>,
    /// By (inputs, outputs, params as immediates).
    layouts: Mutex<HashMap<(u32, u32, bool), Arc<wgpu::BindGroupLayout>>>,
}

impl PipelineCache {
    /// An empty cache; `loop_bounding`: see [`crate::GpuOptions`].
    pub fn new(loop_bounding: bool) -> Self {
        PipelineCache {
            loop_bounding,
            ..Default::default()
        }
    }

    /// A shader module of our own WGSL, with wgpu's runtime checks except,
    /// unless asked for, loop bounding.
    #[allow(unsafe_code)]
    fn module(&self, device: &wgpu::Device, label: &str, text: String) -> wgpu::ShaderModule {
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(text.into()),
        };
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        checks.force_loop_bounding = self.loop_bounding;
        // SAFETY: the one check given up is loop bounding, whose contract
        // is that no loop of the module runs forever. The modules are
        // `shaders/`' own: every loop there is bounded by a constant or a
        // uniform parameter and steps by a nonzero constant (or the
        // subgroup size, at least 1, or a uniform stride held to at least
        // 1: copy.wgsl), or halves a nonzero constant. Bounds
        // checks and integer-division checks stay.
        unsafe { device.create_shader_module_trusted(desc, checks) }
    }

    fn layout(
        &self,
        device: &wgpu::Device,
        (n_in, n_out): (u32, u32),
        immediates: bool,
    ) -> Arc<wgpu::BindGroupLayout> {
        let mut layouts = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        layouts
            .entry((n_in, n_out, immediates))
            .or_insert_with(|| {
                let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                    binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                };
                let mut entries: Vec<_> = (0..n_in).map(|b| storage(b, true)).collect();
                entries.extend((n_in..n_in + n_out).map(|b| storage(b, false)));
                if !immediates {
                    entries.push(wgpu::BindGroupLayoutEntry {
                        binding: n_in + n_out,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Uniform,
                            has_dynamic_offset: true,
                            min_binding_size: None,
                        },
                        count: None,
                    });
                }
                Arc::new(
                    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                        label: Some("glint"),
                        entries: &entries,
                    }),
                )
            })
            .clone()
    }

    /// The pipeline for `key`, compiled now if it is new.
    pub fn get(&self, device: &wgpu::Device, key: &PipelineKey) -> Result<Arc<Pipeline>, String> {
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Ok(p.clone());
        }
        let text = module_source(key.file, key.ty, &key.flags)?;
        let module = self.module(device, key.file, text);
        let immediates = key.flags.contains(&IMMEDIATES);
        let layout = self.layout(device, (key.n_in, key.n_out), immediates);
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(key.file),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: if immediates { IMMEDIATE_BYTES } else { 0 },
        });
        let constants: Vec<(&str, f64)> = key
            .constants
            .iter()
            .map(|(n, v)| (*n, f64::from_bits(*v)))
            .collect();
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.entry),
            layout: Some(&pl),
            module: &module,
            entry_point: Some(key.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                // The int8 matvec writes every unit of x it reads before
                // its barrier (and `red` is written before it is read),
                // and the matmul every slot of its tiles each k-step:
                // zeroing their 8-30 KiB first would be a pass over them
                // per workgroup for nothing.
                zero_initialize_workgroup_memory: !key.flags.contains(&"Q8")
                    && key.entry != "matmul",
            },
            cache: None,
        });
        let p = Arc::new(Pipeline { pipeline, layout });
        self.created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), p.clone());
        Ok(p)
    }
}

impl PipelineKey {
    /// The plain variant of `entry` in `file` with `n_in` read-only and
    /// `n_out` read-write bindings: no weight type, constants or flags.
    pub fn new(file: &'static str, entry: &'static str, n_in: u32, n_out: u32) -> Self {
        PipelineKey {
            file,
            entry,
            ty: None,
            constants: Few::new(),
            flags: Flags::new(),
            n_in,
            n_out,
        }
    }

    /// The variant for weight format `ty`.
    pub fn with_type(self, ty: GgmlType) -> Self {
        PipelineKey {
            ty: Some(ty),
            ..self
        }
    }

    /// Override constant `name` set to `value`.
    pub fn with_constant(mut self, name: &'static str, value: f64) -> Self {
        self.constants.push((name, value.to_bits()));
        self
    }

    /// The variant with preprocessor `flags` (see [`crate::shaders`]).
    pub fn with_flags(self, flags: Flags) -> Self {
        PipelineKey { flags, ..self }
    }
}
