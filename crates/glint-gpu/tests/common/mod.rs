//! Shared pieces of the wgpu tests: two shared devices per test binary
//! (optional features on and off; `each_gpu` runs a test on both), random
//! inputs with fresh seeds, poisoned outputs, and the named tolerances.
#![allow(dead_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use glint_backend::{Backend, GgmlType, TensorDesc, Usage};
use glint_gpu::{GpuBackend, GpuOptions, GpuTensor};

/// Named tolerances: max |gpu - reference| / (1 + |reference|).
pub mod tol {
    /// add, mul, scale: exact in f32 up to rounding.
    pub const ELEMENTWISE: f64 = 1e-6;
    /// silu, gelu, swiglu, geglu: exp/tanh differ by a few ulps.
    pub const ACTIVATION: f64 = 1e-5;
    /// rms_norm, softmax: reductions in a different order.
    pub const REDUCTION: f64 = 1e-5;
    /// rope: cos/sin of angles up to a few hundred radians in f32.
    pub const ROPE: f64 = 2e-4;
    /// attention with an F32 cache.
    pub const ATTN_F32: f64 = 1e-4;
    /// attention with an F16 cache (the reference reads the same f16 values).
    pub const ATTN_F16: f64 = 1e-4;
    /// mul_mat with F32/F16/BF16 weights: f32 sums of k products.
    pub const MATMUL_FLOAT: f64 = 1e-4;
    /// mul_mat with quantized weights (reference dequantizes the same bytes).
    pub const MATMUL_QUANT: f64 = 1e-4;
    /// get_rows: dequantization is exact up to one multiply.
    pub const GET_ROWS: f64 = 1e-6;
    /// K-shift invariant with an F32 cache.
    pub const KSHIFT_F32: f64 = 2e-4;
    /// K-shift invariant with an F16 cache: each shift rounds to f16 again.
    pub const KSHIFT_F16: f64 = 4e-3;
    /// short_conv: a few products summed in one order (FMA or not).
    pub const SHORT_CONV: f64 = 1e-6;

    use glint_backend::GgmlType;

    /// Attention over a cache of type `ty`: ATTN_F16 or ATTN_F32.
    pub fn attn(ty: GgmlType) -> f64 {
        if ty == GgmlType::F16 {
            ATTN_F16
        } else {
            ATTN_F32
        }
    }

    /// The K-shift invariant on a cache of type `ty`: KSHIFT_F16 or KSHIFT_F32.
    pub fn kshift(ty: GgmlType) -> f64 {
        if ty == GgmlType::F16 {
            KSHIFT_F16
        } else {
            KSHIFT_F32
        }
    }
}

/// The two shared backends of this test binary: every optional feature the
/// adapter has (`on`), and with SHADER_F16 and SUBGROUP disabled (`off`), so
/// both kernel variants run on one adapter.
pub fn gpu_on() -> &'static GpuBackend {
    static B: OnceLock<GpuBackend> = OnceLock::new();
    B.get_or_init(|| GpuBackend::new(GpuOptions::default()).expect("a wgpu adapter"))
}

pub fn gpu_off() -> &'static GpuBackend {
    static B: OnceLock<GpuBackend> = OnceLock::new();
    B.get_or_init(|| {
        GpuBackend::new(without_features(GpuOptions::default())).expect("a wgpu adapter")
    })
}

/// `opts` with the optional features disabled.
pub fn without_features(opts: GpuOptions) -> GpuOptions {
    GpuOptions {
        disable_f16: true,
        disable_subgroups: true,
        disable_immediates: true,
        ..opts
    }
}

thread_local! {
    /// Which shared backend `gpu()` is on this (test) thread: 0 on, 1 off.
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The shared backend the current test runs on (see [`each_gpu`]); the
/// features-on one outside `each_gpu`.
pub fn gpu() -> &'static GpuBackend {
    if CURRENT.get() == 0 {
        gpu_on()
    } else {
        gpu_off()
    }
}

/// Run `f` once on each shared backend (features on, then off), with
/// `gpu()` and the helpers here bound to it; a failure names the backend.
pub fn each_gpu(mut f: impl FnMut()) {
    for i in 0..2 {
        CURRENT.set(i);
        eprintln!("on {}", gpu().name());
        f();
    }
    CURRENT.set(0);
}

/// A fresh seed per call (time-based), printed so a failure can be replayed.
pub fn seed() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let s = t ^ N.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    eprintln!("seed {s:#x}");
    s | 1
}

/// The seeded test RNG (splitmix64), shared by the workspace's tests.
pub use glint_testkit::Rng;

pub fn desc(ty: GgmlType, ne: [usize; 4], usage: Usage) -> TensorDesc {
    TensorDesc {
        ty,
        ne,
        label: "test".into(),
        usage,
    }
}

pub fn f32s(ne: [usize; 4], v: &[f32]) -> GpuTensor {
    f32s_on(gpu(), ne, v)
}

/// [`f32s`] on `be`, a backend of the test's own.
pub fn f32s_on(be: &GpuBackend, ne: [usize; 4], v: &[f32]) -> GpuTensor {
    let t = be.alloc(desc(GgmlType::F32, ne, Usage::Scratch)).unwrap();
    be.write(&t, 0, bytemuck::cast_slice(v)).unwrap();
    t
}

pub fn i32s(v: &[i32]) -> GpuTensor {
    let t = gpu()
        .alloc(desc(GgmlType::I32, [v.len(), 1, 1, 1], Usage::Scratch))
        .unwrap();
    gpu().write(&t, 0, bytemuck::cast_slice(v)).unwrap();
    t
}

/// A tensor filled with 0xFF bytes (NaN as f32, -1 as i32), so an element
/// the kernel forgets to write shows.
pub fn poisoned(ty: GgmlType, ne: [usize; 4]) -> GpuTensor {
    let t = gpu().alloc(desc(ty, ne, Usage::Scratch)).unwrap();
    let n = t.desc_bytes();
    gpu().write(&t, 0, &vec![0xFF; n]).unwrap();
    t
}

pub trait Bytes {
    fn desc_bytes(&self) -> usize;
}

impl Bytes for GpuTensor {
    fn desc_bytes(&self) -> usize {
        use glint_backend::Tensor;
        self.desc().n_bytes()
    }
}

pub fn read_f32(t: &GpuTensor) -> Vec<f32> {
    let mut b = vec![0u8; t.desc_bytes()];
    gpu().read(t, 0, &mut b).unwrap();
    bytemuck::cast_slice(&b).to_vec()
}

pub fn read_i32(t: &GpuTensor) -> Vec<i32> {
    let mut b = vec![0u8; t.desc_bytes()];
    gpu().read(t, 0, &mut b).unwrap();
    bytemuck::cast_slice(&b).to_vec()
}

/// Assert `got` matches `want` to `tol` (relative to 1 + |want|).
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g as f64 - w).abs() / (1.0 + w.abs());
        // NaN (a poisoned element left unwritten) counts as the worst error.
        let e = if e.is_nan() { f64::INFINITY } else { e };
        if e > worst.0 {
            worst = (e, i);
        }
    }
    assert!(
        worst.0 <= tol,
        "{what}: element {} is {} but should be {} (error {:e} > {tol:e})",
        worst.1,
        got[worst.1],
        want[worst.1],
        worst.0
    );
}

/// Every weight format the wgpu backend has kernels for: the rows of
/// glint-quant's type table with a WGSL file.
pub fn weight_types() -> impl Iterator<Item = GgmlType> {
    glint_quant::TYPES
        .iter()
        .filter(|info| info.wgsl.is_some())
        .map(|info| info.ty)
}

/// The K-quant weight formats (256-element super-blocks).
pub fn k_types() -> impl Iterator<Item = GgmlType> {
    weight_types().filter(|ty| ty.block_size() == 256)
}

pub fn is_k_quant(ty: GgmlType) -> bool {
    k_types().any(|t| t == ty)
}

/// F32, F16, BF16: weight formats of one element per block.
pub fn is_float(ty: GgmlType) -> bool {
    weight_types().any(|t| t == ty) && ty.block_size() == 1
}

/// A row length for `ty` by its kind: `[float, K-quant, other block format]`.
pub fn row_len(ty: GgmlType, [float, k_quant, block]: [usize; 3]) -> usize {
    if is_float(ty) {
        float
    } else if is_k_quant(ty) {
        k_quant
    } else {
        block
    }
}

/// A positive f16 scale of about `1 / max_level`: random levels and
/// sub-block scales under it give weights of magnitude about 1, as real
/// quantized weights are (and as the quantized test rows are). Scales like
/// 0.05 would give Q5_K/Q6_K weights in the hundreds, whose dot products
/// cancel from ~1e3 to ~1 and leave f32 summation-order noise above the
/// tolerance, which is relative to the result.
fn k_scale(r: &mut Rng, max_level: f32) -> half::f16 {
    half::f16::from_f32((0.2 + 0.8 * r.f32().abs()) / max_level)
}

/// Random bytes for `n_blocks` super-blocks of a K-quant type, with the f16
/// `d` (and `dmin`) of each block set to positive finite values sized by
/// `k_scale` (the rest, sub-block scales and levels, is random). Works for the types glint-quant has
/// no quantizer for (Q2_K, Q3_K, Q5_K) as well as Q4_K and Q6_K.
pub fn random_k_blocks(r: &mut Rng, ty: GgmlType, n_blocks: usize) -> Vec<u8> {
    use glint_quant::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K};
    fn fix<B: bytemuck::Pod>(blk: &mut [u8], f: impl FnOnce(&mut B)) {
        let mut b: B = bytemuck::pod_read_unaligned(blk);
        f(&mut b);
        blk.copy_from_slice(bytemuck::bytes_of(&b));
    }
    let size = ty.type_size();
    let mut out: Vec<u8> = (0..n_blocks * size).map(|_| r.next_u64() as u8).collect();
    for blk in out.chunks_mut(size) {
        // Largest |sub-block scale * level| and sub-block min of each type.
        match ty {
            GgmlType::Q2_K => {
                let (d, dmin) = (k_scale(r, 15.0 * 3.0), k_scale(r, 15.0));
                fix(blk, |b: &mut BlockQ2_K| (b.d, b.dmin) = (d, dmin))
            }
            GgmlType::Q3_K => {
                let d = k_scale(r, 32.0 * 4.0);
                fix(blk, |b: &mut BlockQ3_K| b.d = d)
            }
            GgmlType::Q4_K => {
                let (d, dmin) = (k_scale(r, 63.0 * 15.0), k_scale(r, 63.0));
                fix(blk, |b: &mut BlockQ4_K| (b.d, b.dmin) = (d, dmin))
            }
            GgmlType::Q5_K => {
                let (d, dmin) = (k_scale(r, 63.0 * 31.0), k_scale(r, 63.0));
                fix(blk, |b: &mut BlockQ5_K| (b.d, b.dmin) = (d, dmin))
            }
            GgmlType::Q6_K => {
                let d = k_scale(r, 128.0 * 32.0);
                fix(blk, |b: &mut BlockQ6_K| b.d = d)
            }
            _ => panic!("{ty:?} is not a K-quant"),
        }
    }
    out
}

/// Weight part `i`: `n` rows of `ty` of length `k`, random values
/// quantized (random super-blocks with sized scales for the K-quants
/// glint-quant has no quantizer for: Q2_K, Q3_K, Q5_K).
pub fn random_part(
    r: &mut Rng,
    ty: GgmlType,
    k: usize,
    n: usize,
    i: usize,
) -> (TensorDesc, glint_backend::SharedBytes) {
    let b = if matches!(ty, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q5_K) {
        random_k_blocks(r, ty, n * k / 256)
    } else {
        let rb = ty.bytes_for(k as u64).unwrap() as usize;
        let vals = r.vec_scaled(k * n, 1.0);
        let mut b = vec![0u8; rb * n];
        for (row, dst) in vals.chunks(k).zip(b.chunks_mut(rb)) {
            glint_quant::quantize_row(ty, row, dst).unwrap();
        }
        b
    };
    let d = TensorDesc {
        ty,
        ne: [k, n, 1, 1],
        label: format!("w{i}").into(),
        usage: Usage::Weights,
    };
    (d, glint_backend::SharedBytes::from_vec(b))
}
