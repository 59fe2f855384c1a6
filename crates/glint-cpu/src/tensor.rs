//! Tensor storage: owned words behind a lock (activations, KV cache), or
//! bytes shared with the model file (weights, read-only, never copied).

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use glint_backend::{BackendError, Result, SharedBytes, Tensor, TensorDesc};
use half::f16;

/// A tensor of the cpu backend.
pub struct CpuTensor {
    pub(crate) desc: TensorDesc,
    pub(crate) storage: Storage,
    /// The backend's byte counter for this tensor's usage (owned storage only).
    counter: Option<Arc<AtomicUsize>>,
}

pub(crate) enum Storage {
    /// `n_bytes` rounded up to whole `u32` words, so f32/i32/f16 views are
    /// always aligned.
    Owned(RwLock<Vec<u32>>),
    /// Bytes owned by someone else (the mmap). Read-only.
    Shared(SharedBytes),
}

impl Tensor for CpuTensor {
    fn desc(&self) -> &TensorDesc {
        &self.desc
    }
}

impl Drop for CpuTensor {
    fn drop(&mut self) {
        if let Some(c) = &self.counter {
            c.fetch_sub(self.desc.n_bytes(), Ordering::Relaxed);
        }
    }
}

/// A read view of a tensor's bytes.
pub(crate) enum ReadGuard<'a> {
    Owned(RwLockReadGuard<'a, Vec<u32>>, usize),
    Shared(&'a [u8]),
}

impl ReadGuard<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            ReadGuard::Owned(g, n) => &bytemuck::cast_slice::<u32, u8>(g)[..*n],
            ReadGuard::Shared(b) => b,
        }
    }
    /// The bytes as f32 (borrowed when aligned, which owned storage always is).
    pub(crate) fn f32s(&self) -> Cow<'_, [f32]> {
        pod_view(self.bytes())
    }
    pub(crate) fn i32s(&self) -> Cow<'_, [i32]> {
        pod_view(self.bytes())
    }
    pub(crate) fn f16s(&self) -> Cow<'_, [f16]> {
        pod_view(self.bytes())
    }
}

/// Borrow `bytes` as `[T]`, or copy when the mmap leaves them unaligned.
fn pod_view<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(
            bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        ),
    }
}

/// A write view of an owned tensor.
pub(crate) struct WriteGuard<'a> {
    guard: RwLockWriteGuard<'a, Vec<u32>>,
    n_bytes: usize,
}

impl WriteGuard<'_> {
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u32, u8>(&mut self.guard)[..self.n_bytes]
    }
    pub(crate) fn f32s_mut(&mut self) -> &mut [f32] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }
    pub(crate) fn f16s_mut(&mut self) -> &mut [f16] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }
}

impl CpuTensor {
    pub(crate) fn owned(desc: TensorDesc, counter: Arc<AtomicUsize>) -> Self {
        let n_bytes = desc.n_bytes();
        counter.fetch_add(n_bytes, Ordering::Relaxed);
        CpuTensor {
            desc,
            storage: Storage::Owned(RwLock::new(vec![0u32; n_bytes.div_ceil(4)])),
            counter: Some(counter),
        }
    }

    pub(crate) fn shared(desc: TensorDesc, bytes: SharedBytes) -> Self {
        CpuTensor {
            desc,
            storage: Storage::Shared(bytes),
            counter: None,
        }
    }

    pub(crate) fn read_guard(&self) -> Result<ReadGuard<'_>> {
        match &self.storage {
            Storage::Owned(lock) => {
                let g = lock.read().map_err(|_| poisoned(&self.desc))?;
                Ok(ReadGuard::Owned(g, self.desc.n_bytes()))
            }
            Storage::Shared(b) => Ok(ReadGuard::Shared(b.bytes())),
        }
    }

    pub(crate) fn write_guard(&self, op: &'static str) -> Result<WriteGuard<'_>> {
        match &self.storage {
            Storage::Owned(lock) => {
                let guard = lock.write().map_err(|_| poisoned(&self.desc))?;
                Ok(WriteGuard {
                    guard,
                    n_bytes: self.desc.n_bytes(),
                })
            }
            Storage::Shared(_) => Err(BackendError::Shape {
                op,
                detail: format!(
                    "tensor `{}` is read-only (weights shared with the model file)",
                    self.desc.label
                ),
            }),
        }
    }
}

fn poisoned(desc: &TensorDesc) -> BackendError {
    BackendError::Device(format!("tensor `{}`: lock poisoned by a panic", desc.label))
}
