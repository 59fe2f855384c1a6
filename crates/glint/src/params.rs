//! How to load a model and how to size a context.

use glint_backend::GgmlType;

use crate::Error;

/// Which compute backend runs the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// The cpu backend (plain Rust + rayon).
    Cpu,
    /// The wgpu backend (WGSL on Vulkan, Metal or DX12).
    Wgpu,
    /// wgpu on a real GPU adapter, else cpu (a software adapter is for
    /// checking shaders, not for speed).
    #[default]
    Auto,
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "cpu" => Ok(BackendKind::Cpu),
            "wgpu" | "gpu" => Ok(BackendKind::Wgpu),
            "auto" => Ok(BackendKind::Auto),
            other => Err(Error::Invalid(format!(
                "backend `{other}` (cpu, wgpu, auto)"
            ))),
        }
    }
}

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct ModelParams {
    /// Backend choice.
    pub backend: BackendKind,
    /// wgpu adapter index (see `glint devices`); `None` = the default one.
    pub adapter: Option<usize>,
    /// cpu threads; `None` = all cores.
    pub n_threads: Option<usize>,
    /// Overrides of the file's RoPE settings (`--rope-scaling yarn
    /// --rope-scale 4`, ...), for contexts beyond the trained one.
    pub rope: glint_model::RopeOverrides,
    /// wgpu: time every kernel on the device (`glint bench --profile`;
    /// see [`Model::take_gpu_profile`](crate::Model::take_gpu_profile)).
    /// Ignored by the cpu backend.
    pub gpu_profile: bool,
    /// wgpu: matvecs over the quantized formats (Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q8_0, Q2_K to Q6_K) take integer dot products on activations
    /// quantized as ggml's cpu quantizes them (`glint_gpu::GpuOptions::int8_matvec`; `--gpu-int8`).
    /// Ignored by the cpu backend.
    pub gpu_int8: bool,
    /// wgpu: at load, time one-token decode steps at 1, 2 and 4 matvec
    /// rows at once and keep the fastest (`glint_gpu::GpuOptions::tune`;
    /// `--gpu-tune on|off`, `GLINT_TUNE`); `None`: on a hardware adapter
    /// whose subgroups have one size, else off. Ignored by the cpu backend.
    pub gpu_tune: Option<bool>,
    /// wgpu: rows a matvec subgroup takes at once (1, 2 or 4; 0: the
    /// default, or the tune's), as `GLINT_MATVEC_ROWS` (which wins where
    /// set) sets them (`glint_gpu::GpuOptions::matvec_rows`). The logits
    /// are the same to the bit at each. Ignored by the cpu backend.
    pub gpu_matvec_rows: usize,
    /// cpu numerics: ggml's (default; follows llama.cpp) or plain f32 (what
    /// the WGSL kernels compute).
    #[cfg(feature = "cpu")]
    pub cpu_precision: glint_cpu::Precision,
}

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CacheType {
    /// Half precision (llama.cpp's default).
    #[default]
    F16,
    /// Single precision.
    F32,
    /// 8-bit blocks of 32 with an f16 scale (8.5 bits a value): rows are
    /// quantized as they are written, dequantized where attention reads
    /// them, and a K-shift dequantizes, rotates and requantizes.
    Q8_0,
    /// 4-bit blocks of 32 with an f16 scale (4.5 bits a value), as Q8_0.
    Q4_0,
}

impl CacheType {
    pub(crate) fn ggml(self) -> GgmlType {
        match self {
            CacheType::F16 => GgmlType::F16,
            CacheType::F32 => GgmlType::F32,
            CacheType::Q8_0 => GgmlType::Q8_0,
            CacheType::Q4_0 => GgmlType::Q4_0,
        }
    }

    /// llama.cpp's name of the type (`-ctk`/`-ctv`).
    pub fn name(self) -> &'static str {
        match self {
            CacheType::F16 => "f16",
            CacheType::F32 => "f32",
            CacheType::Q8_0 => "q8_0",
            CacheType::Q4_0 => "q4_0",
        }
    }
}

impl std::str::FromStr for CacheType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(CacheType::F16),
            "f32" => Ok(CacheType::F32),
            "q8_0" => Ok(CacheType::Q8_0),
            "q4_0" => Ok(CacheType::Q4_0),
            other => Err(Error::Invalid(format!(
                "cache type `{other}` (f16, f32, q8_0, q4_0)"
            ))),
        }
    }
}

/// How to size a context.
#[derive(Clone, Debug)]
pub struct ContextParams {
    /// The context size: KV cells in total, over every stream (llama.cpp's
    /// `-c`). One stream shared by all sequences (`kv_unified`) has them
    /// all; one stream per sequence has `n_ctx / n_seq_max` each.
    pub n_ctx: u32,
    /// Most tokens one `decode` may carry.
    pub n_batch: u32,
    /// Most tokens one forward pass carries (a batch is split into these).
    pub n_ubatch: u32,
    /// Sequence ids are `0..n_seq_max`.
    pub n_seq_max: u32,
    /// K cache type.
    pub type_k: CacheType,
    /// V cache type.
    pub type_v: CacheType,
    /// One stream shared by all sequences (true), or one per sequence.
    pub kv_unified: bool,
    /// Keep the output rows' hidden states (after the output norm) beside
    /// their logits, for [`crate::Context::embeddings`]: `n_embd` more
    /// floats read back per output row.
    pub embeddings: bool,
    /// Two-window SelfExtend (Jin et al. 2024; `--grp-attn-mode window`):
    /// a (query, key) pair closer than the window `w` attends as usual,
    /// a farther one at grouped positions (keys at `⌊pos/n⌋`, queries at
    /// `⌊pos/n⌋ + w − w/n`), one softmax over both. The cache keeps a
    /// second K per layer, rotated at the grouped positions when written
    /// (no extra attention work; one more K cache of memory); positions
    /// never move, so `seq_add`/`seq_div` (context shift, the shift mode
    /// of self-extend) are refused. `None`: plain attention.
    pub self_extend_window: Option<SelfExtendWindow>,
    /// Keep the sliding-window layers' K/V in the full-size cache
    /// (llama.cpp's `--swa-full`). Off: they get a cache of their own, a
    /// ring of `n_swa + n_ubatch` cells per stream (`n_swa` per sequence
    /// sharing the stream), which drops cells as the window moves on: far
    /// less memory, but positions cannot move (`seq_add`/`seq_div`,
    /// context shift and self-extend's shift mode are refused) and a
    /// sequence can be cut back only within the window (prefix reuse
    /// beyond it goes through checkpoints).
    pub swa_full: bool,
}

/// Two-window SelfExtend's sizes (see
/// [`ContextParams::self_extend_window`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfExtendWindow {
    /// Group size G (`-gan`, > 1).
    pub n: u32,
    /// Neighbour window W (`-gaw`, a positive multiple of G).
    pub w: u32,
}

impl SelfExtendWindow {
    /// A window of `w` with groups of `n`; an error naming the rule unless
    /// `n > 1` and `w` is a positive multiple of `n`.
    pub fn new(n: u32, w: u32) -> Result<SelfExtendWindow, crate::Error> {
        if n < 2 || w == 0 || !w.is_multiple_of(n) {
            return Err(crate::Error::Invalid(format!(
                "self-extend window: the group size ({n}) must be at least 2 and the window ({w}) a positive multiple of it"
            )));
        }
        Ok(SelfExtendWindow { n, w })
    }

    /// Where a query at `pos` sits for distant keys: `⌊pos/n⌋ + w − w/n`.
    pub fn query_pos(self, pos: i32) -> i32 {
        let (n, w) = (self.n as i32, self.w as i32);
        pos.div_euclid(n) + w - w / n
    }

    /// Where a key at `pos` sits for distant queries: `⌊pos/n⌋`.
    pub fn key_pos(self, pos: i32) -> i32 {
        pos.div_euclid(self.n as i32)
    }

    /// Whether a query at `qpos` sees a key at `kpos` as a neighbour.
    pub fn near(self, qpos: i32, kpos: i32) -> bool {
        qpos - kpos < self.w as i32
    }
}

impl Default for ContextParams {
    fn default() -> Self {
        ContextParams {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch: 512,
            n_seq_max: 1,
            type_k: CacheType::F16,
            type_v: CacheType::F16,
            kv_unified: true,
            embeddings: false,
            self_extend_window: None,
            swa_full: false,
        }
    }
}
