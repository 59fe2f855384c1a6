//! Helpers shared by the cpu backend's tests: a seeded RNG and tensor I/O.
#![allow(dead_code)]

use glint_backend::{Backend, GgmlType, SharedBytes, TensorDesc, Usage};
use glint_cpu::{CpuBackend, CpuTensor, Precision};

/// The seeded test RNG (splitmix64), shared by the workspace's tests.
pub use glint_testkit::Rng;

/// The f32 backend: these tests hold ops to f64 formulas. ggml's numerics
/// (the default) have their own tests in `ggml_precision.rs`.
pub fn backend() -> CpuBackend {
    CpuBackend::with_precision(Some(2), Precision::F32).expect("thread pool")
}

/// The default backend, with ggml's numerics.
#[allow(dead_code)]
pub fn ggml_backend() -> CpuBackend {
    CpuBackend::new(Some(2)).expect("thread pool")
}

pub fn desc(ty: GgmlType, ne: [usize; 4], label: &str) -> TensorDesc {
    TensorDesc {
        ty,
        ne,
        label: label.into(),
        usage: Usage::Scratch,
    }
}

pub fn from_bytes(be: &CpuBackend, ty: GgmlType, ne: [usize; 4], bytes: &[u8]) -> CpuTensor {
    let t = be.alloc(desc(ty, ne, "t")).unwrap();
    be.write(&t, 0, bytes).unwrap();
    t
}

pub fn f32s(be: &CpuBackend, ne: [usize; 4], v: &[f32]) -> CpuTensor {
    from_bytes(be, GgmlType::F32, ne, bytemuck::cast_slice(v))
}

pub fn i32s(be: &CpuBackend, v: &[i32]) -> CpuTensor {
    from_bytes(
        be,
        GgmlType::I32,
        [v.len(), 1, 1, 1],
        bytemuck::cast_slice(v),
    )
}

pub fn zeros(be: &CpuBackend, ty: GgmlType, ne: [usize; 4]) -> CpuTensor {
    be.alloc(desc(ty, ne, "out")).unwrap()
}

/// A weight tensor over `bytes` placed at an odd offset of a shared buffer,
/// as an mmap may place it: the backend must not assume alignment.
pub fn weight(be: &CpuBackend, ty: GgmlType, ne: [usize; 4], bytes: &[u8]) -> CpuTensor {
    let mut buf = vec![0xAAu8; 1];
    buf.extend_from_slice(bytes);
    buf.push(0xAA);
    let owner: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = std::sync::Arc::new(buf);
    let sb = SharedBytes::new(owner, 1..1 + bytes.len()).unwrap();
    let mut d = desc(ty, ne, "w");
    d.usage = Usage::Weights;
    be.weight(d, sb).unwrap()
}

pub fn bytes_of(be: &CpuBackend, t: &CpuTensor) -> Vec<u8> {
    use glint_backend::Tensor;
    let mut out = vec![0u8; t.desc().n_bytes()];
    be.read(t, 0, &mut out).unwrap();
    out
}

pub fn read_f32(be: &CpuBackend, t: &CpuTensor) -> Vec<f32> {
    pods(&bytes_of(be, t))
}

pub fn read_i32(be: &CpuBackend, t: &CpuTensor) -> Vec<i32> {
    pods(&bytes_of(be, t))
}

pub fn read_f16(be: &CpuBackend, t: &CpuTensor) -> Vec<half::f16> {
    pods(&bytes_of(be, t))
}

/// `|got - want| <= tol` elementwise, with the first failure named.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let t = tol(i);
        assert!(
            ((g as f64) - w).abs() <= t,
            "{what}[{i}]: got {g}, want {w} (|diff| {} > tol {t})",
            ((g as f64) - w).abs()
        );
    }
}

fn pods<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(std::mem::size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

/// `w · x` through the backend: `w` is `[k, n]`, `xv` is `[k, m]`; the
/// `[n, m]` result.
pub fn mul_mat(be: &CpuBackend, w: &CpuTensor, xv: &[f32], [k, n, m]: [usize; 3]) -> Vec<f32> {
    let x = f32s(be, [k, m, 1, 1], xv);
    let out = zeros(be, GgmlType::F32, [n, m, 1, 1]);
    be.mul_mat(w, &x, &out).unwrap();
    read_f32(be, &out)
}

/// `w · x` through the backend (as [`mul_mat`]) against a reference:
/// `cell(r, xc)` gives output row `r` of column `xc` (`[k]`) and the
/// magnitude `sum |w_i x_i|` of its products; each result is within
/// `dot_tol` of that magnitude.
pub fn assert_mul_mat(
    what: &str,
    be: &CpuBackend,
    w: &CpuTensor,
    xv: &[f32],
    [k, n, m]: [usize; 3],
    dot_tol: f64,
    cell: impl Fn(usize, &[f32]) -> (f64, f64),
) {
    let got = mul_mat(be, w, xv, [k, n, m]);
    // want, mag: [n, m]
    let mut want = vec![0f64; n * m];
    let mut mag = vec![0f64; n * m];
    for c in 0..m {
        let xc = &xv[c * k..(c + 1) * k];
        for r in 0..n {
            (want[c * n + r], mag[c * n + r]) = cell(r, xc);
        }
    }
    assert_close(what, &got, &want, |i| dot_tol * mag[i]);
}
