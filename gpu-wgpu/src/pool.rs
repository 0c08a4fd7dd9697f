//! Device buffers: a tensor's storage, and the pool that keeps freed buffers for reuse.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use gflow_core::{DType, Result};

use crate::{WgpuBackend, device_error, storage_bytes};

/// Bytes of freed buffers the pool keeps at most.
pub(crate) const POOL_BYTES: u64 = 512 << 20;

/// A tensor's buffer on the device (back to the pool when dropped).
pub struct WgpuStorage {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
    pub(crate) pool: Arc<Pool>,
}

impl Drop for WgpuStorage {
    fn drop(&mut self) {
        self.pool.put(self.buf.clone());
    }
}

/// Freed device buffers kept for reuse, by size class: creating a buffer is a driver
/// allocation plus wgpu's zero-fill, reusing one is a lookup. At most `limit` bytes are kept.
pub(crate) struct Pool {
    pub(crate) free: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    pub(crate) kept: AtomicU64,
    pub(crate) limit: u64,
}

impl Pool {
    pub(crate) fn take(&self, size: u64) -> Option<wgpu::Buffer> {
        let buf = self.free.lock().ok()?.get_mut(&size)?.pop()?;
        self.kept.fetch_sub(size, Ordering::Relaxed);
        Some(buf)
    }

    pub(crate) fn put(&self, buf: wgpu::Buffer) {
        let size = buf.size();
        if self.kept.load(Ordering::Relaxed) + size > self.limit {
            return;
        }
        if let Ok(mut free) = self.free.lock() {
            free.entry(size).or_default().push(buf);
            self.kept.fetch_add(size, Ordering::Relaxed);
        }
    }
}

/// The size class of a buffer of `bytes`: a power of two up to 4 KiB, above that the next
/// multiple of a quarter of the largest power of two below (at most 25 % unused), so freed
/// buffers fit later tensors of similar sizes.
fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(4).div_ceil(4) * 4;
    if b <= 4096 {
        return b.next_power_of_two();
    }
    let step = 1u64 << (63 - b.leading_zeros() - 2);
    b.div_ceil(step) * step
}

impl WgpuStorage {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl WgpuBackend {
    /// A device-to-device copy of `x`: the bandwidth peer of elementwise kernels.
    ///
    /// # Errors
    /// `Device` for allocation or validation failures.
    pub fn copy(&self, x: &WgpuStorage) -> Result<WgpuStorage> {
        let out = self.new_storage(x.len, x.dtype)?;
        let bytes = storage_bytes(x.len, x.dtype) as u64;
        if bytes > 0 {
            let copy = self.scoped(|| {
                let mut enc = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                enc.copy_buffer_to_buffer(&x.buf, 0, &out.buf, 0, bytes.div_ceil(4) * 4);
                enc.finish()
            })?;
            self.submit(copy)?;
        }
        Ok(out)
    }

    /// A storage buffer of at least `bytes` (at least 4: WebGPU has no empty bindings), from
    /// the pool when one of its size class is free. Kernels address only the elements they
    /// are told of, so a larger buffer is fine; one that must fit a binding still does.
    pub(crate) fn buffer(&self, bytes: usize) -> Result<wgpu::Buffer> {
        let exact = (bytes.max(4) as u64).div_ceil(4) * 4;
        if exact > self.max_buffer {
            return Err(device_error(format!(
                "a tensor of {exact} bytes exceeds this adapter's buffer limit of {} bytes",
                self.max_buffer
            )));
        }
        let class = size_class(exact);
        let size =
            if class > self.max_buffer || (class > self.max_binding && exact <= self.max_binding) {
                exact
            } else {
                class
            };
        if let Some(buf) = self.pool.take(size) {
            return Ok(buf);
        }
        self.scoped(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Bytes of freed buffers the pool holds for reuse (for tests and reports).
    pub fn pooled_bytes(&self) -> u64 {
        self.pool.kept.load(Ordering::Relaxed)
    }

    pub(crate) fn new_storage(&self, len: usize, dtype: DType) -> Result<WgpuStorage> {
        Ok(WgpuStorage {
            buf: self.buffer(storage_bytes(len, dtype))?,
            len,
            dtype,
            pool: self.pool.clone(),
        })
    }
}
