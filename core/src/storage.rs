//! Storage. [`HostData`] is a typed, contiguous, row-major host buffer: the CPU backend's storage
//! and the staging form every boxing step works on. [`Buffer`] is what a tensor holds: host data,
//! a device-resident buffer, or both, so that chains of GPU operators never leave the device and
//! the host copies data only where it reads it (boxing, printing, `to_vec`, optimizer updates).

use std::any::Any;
use std::sync::{Arc, OnceLock};

use crate::dtype::{DType, Element, bf16, f16};
use crate::error::Result;
use crate::reduce::ReduceOp;

/// A type stored in a [`HostData`] variant (the elements' types, with Bool stored as `u8`).
pub trait Stored: bytemuck::Pod + Send + Sync + 'static {
    /// From f64, as PyTorch casts.
    fn from_f64(v: f64) -> Self;
    /// To f64.
    fn to_f64(self) -> f64;
}

macro_rules! stored {
    ($($t:ty),*) => {$(
        impl Stored for $t {
            fn from_f64(v: f64) -> Self {
                <$t as Element>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t as Element>::to_f64(self)
            }
        }
    )*};
}
stored!(f32, f64, i64, i32, f16, bf16);

impl Stored for u8 {
    fn from_f64(v: f64) -> Self {
        u8::from(v != 0.0)
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// A typed host buffer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum HostData {
    /// f32 elements.
    F32(Vec<f32>),
    /// f64 elements.
    F64(Vec<f64>),
    /// i64 elements.
    I64(Vec<i64>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i32 elements.
    I32(Vec<i32>),
    /// Booleans, one byte each (0 or 1).
    Bool(Vec<u8>),
}

/// Applies `$body` with `$v` bound to the inner `Vec` of any variant.
macro_rules! with_vec {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            HostData::F32($v) => $body,
            HostData::F64($v) => $body,
            HostData::I64($v) => $body,
            HostData::F16($v) => $body,
            HostData::BF16($v) => $body,
            HostData::I32($v) => $body,
            HostData::Bool($v) => $body,
        }
    };
}

pub(crate) use with_vec;

/// Maps the vector inside any variant to a vector of the same type, kept in the same variant.
macro_rules! map_same {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            HostData::F32($v) => HostData::F32($body),
            HostData::F64($v) => HostData::F64($body),
            HostData::I64($v) => HostData::I64($body),
            HostData::F16($v) => HostData::F16($body),
            HostData::BF16($v) => HostData::BF16($body),
            HostData::I32($v) => HostData::I32($body),
            HostData::Bool($v) => HostData::Bool($body),
        }
    };
}
pub(crate) use map_same;

/// Builds the variant of `$dtype` from `$body`, with `$T` the element type stored.
macro_rules! by_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                HostData::F32($body)
            }
            DType::F64 => {
                type $T = f64;
                HostData::F64($body)
            }
            DType::I64 => {
                type $T = i64;
                HostData::I64($body)
            }
            DType::F16 => {
                type $T = f16;
                HostData::F16($body)
            }
            DType::BF16 => {
                type $T = bf16;
                HostData::BF16($body)
            }
            DType::I32 => {
                type $T = i32;
                HostData::I32($body)
            }
            DType::Bool => {
                type $T = u8;
                HostData::Bool($body)
            }
        }
    };
}

impl HostData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::I64(_) => DType::I64,
            HostData::F16(_) => DType::F16,
            HostData::BF16(_) => DType::BF16,
            HostData::I32(_) => DType::I32,
            HostData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements from `at` on, moved out into a buffer of their own (this one keeps the
    /// first `at` without moving them): a kernel's second result appended to its first.
    pub(crate) fn split_off(&mut self, at: usize) -> HostData {
        map_same!(self, v => v.split_off(at.min(v.len())))
    }

    /// The bytes of the buffer (native endianness).
    pub fn as_bytes(&self) -> &[u8] {
        with_vec!(self, v => bytemuck::cast_slice(v.as_slice()))
    }

    /// The bytes of the buffer, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        with_vec!(self, v => bytemuck::cast_slice_mut(v.as_mut_slice()))
    }

    /// `n` elements all equal to `value` (converted as PyTorch casts).
    pub fn filled(dtype: DType, n: usize, value: f64) -> HostData {
        by_dtype!(dtype, T => vec![<T as Stored>::from_f64(value); n])
    }

    /// `n` elements equal to the identity of `op`.
    pub fn identity(dtype: DType, n: usize, op: ReduceOp) -> HostData {
        match dtype {
            DType::I64 => HostData::I64(vec![op.identity(); n]),
            DType::I32 => HostData::I32(vec![op.identity(); n]),
            DType::Bool => HostData::Bool(vec![u8::from(op == ReduceOp::Min); n]),
            _ => HostData::filled(dtype, n, op.identity_f64()),
        }
    }

    /// A buffer of `dtype` decoded from native-endian bytes (any alignment).
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
        by_dtype!(dtype, T => bytemuck::pod_collect_to_vec::<u8, T>(bytes))
    }

    /// Wraps a typed vector.
    pub fn from_vec<T: Element>(v: Vec<T>) -> HostData {
        T::into_host(v)
    }

    /// The elements converted to `T` (a copy; values convert as PyTorch casts).
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        if let Some(v) = T::as_slice(self) {
            return v.to_vec();
        }
        with_vec!(self, v => v.iter().map(|x| T::from_f64(Stored::to_f64(*x))).collect())
    }

    /// The elements as f64 (a copy).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_vec!(self, v => v.iter().map(|x| Stored::to_f64(*x)).collect())
    }

    /// [`HostData::cast`] taking the data, so that a cast to its own dtype moves it instead of
    /// copying it.
    pub fn into_dtype(self, dtype: DType) -> HostData {
        if dtype == self.dtype() {
            self
        } else {
            self.cast(dtype)
        }
    }

    /// This data cast to `dtype` (as PyTorch casts: to 16-bit floats rounding to nearest even,
    /// float to integer truncating toward zero, to Bool `x != 0`).
    pub fn cast(&self, dtype: DType) -> HostData {
        if dtype == self.dtype() {
            return self.clone();
        }
        // f32 -> 16-bit goes straight (one rounding), as PyTorch does.
        match (self, dtype) {
            (HostData::F32(v), DType::F16) => {
                return HostData::F16(v.iter().map(|&x| f16::from_f32(x)).collect());
            }
            (HostData::F32(v), DType::BF16) => {
                return HostData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect());
            }
            // PyTorch's CPU casts f64 to 16-bit through f32 (two roundings); so does gflow.
            (HostData::F64(v), DType::F16 | DType::BF16) => {
                return HostData::F32(v.iter().map(|&x| x as f32).collect()).cast(dtype);
            }
            // Integers to 16-bit floats also go through f32, as PyTorch casts them.
            (HostData::I32(v), DType::F16 | DType::BF16) => {
                return HostData::F32(v.iter().map(|&x| x as f32).collect()).cast(dtype);
            }
            (HostData::I64(v), DType::F16 | DType::BF16) => {
                return HostData::F32(v.iter().map(|&x| x as f32).collect()).cast(dtype);
            }
            // One rounding, straight from the integer (through f64 would round twice above
            // 2^53: (1 << 60) + (1 << 36) + 1 would give 2^60, not 2^60 + 2^37).
            (HostData::I64(v), DType::F32) => {
                return HostData::F32(v.iter().map(|&x| x as f32).collect());
            }
            (HostData::I64(v), DType::I32) => {
                return HostData::I32(v.iter().map(|&x| x as i32).collect());
            }
            _ => {}
        }
        with_vec!(self, v => by_dtype!(dtype, T => v.iter().map(|x| <T as Stored>::from_f64(Stored::to_f64(*x))).collect()))
    }

    /// The element at `i` as f64 (for printing).
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        with_vec!(self, v => v.get(i).map(|x| Stored::to_f64(*x)))
    }
}

/// A buffer resident on a device, held by the backend that made it.
pub trait DeviceBuffer: Send + Sync {
    /// The name of the backend holding it (`wgpu`, `cuda`).
    fn backend(&self) -> &'static str;
    /// Copies the buffer to the host.
    fn download(&self) -> Result<HostData>;
    /// The concrete type, for the owning backend to recover its storage.
    fn as_any(&self) -> &dyn Any;
    /// The same, for writing in place.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A tensor component's data: a host copy, a device copy, or both (never neither). A device
/// result gets its host copy the first time the host reads it; a host write drops the device
/// copy; a host buffer fed to a device kernel keeps the uploaded copy for the next kernel.
pub struct Buffer {
    dtype: DType,
    len: usize,
    /// Shared by clones (a reshape or a detach copies nothing); written copy-on-write.
    host: OnceLock<Arc<HostData>>,
    device: OnceLock<Arc<dyn DeviceBuffer>>,
}

/// A dropped buffer's host data goes back to `recycle.rs` (which keeps it only where a
/// boxing output of its dtype and length will want it).
impl Drop for Buffer {
    fn drop(&mut self) {
        if self.len.saturating_mul(self.dtype.size()) >= crate::recycle::MIN_BYTES
            && let Some(host) = self.host.take()
            && let Ok(data) = Arc::try_unwrap(host)
        {
            crate::recycle::give(data);
        }
    }
}

impl Buffer {
    /// A buffer resident on a device only: `len` elements of `dtype`.
    pub fn on_device(dtype: DType, len: usize, device: Arc<dyn DeviceBuffer>) -> Buffer {
        Buffer {
            dtype,
            len,
            host: OnceLock::new(),
            device: OnceLock::from(device),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host copy, downloaded (once) when there is only a device copy.
    ///
    /// # Errors
    /// The device's error when the download fails.
    pub fn host(&self) -> Result<&HostData> {
        if let Some(h) = self.host.get() {
            return Ok(&**h);
        }
        let device = self
            .device
            .get()
            .ok_or_else(|| crate::Error::Internal("a buffer with neither copy".into()))?;
        let data = device.download()?;
        Ok(&**self.host.get_or_init(|| Arc::new(data)))
    }

    /// The host copy for writing: the device copy, now stale, is dropped; a host copy shared
    /// with clones is copied first.
    ///
    /// # Errors
    /// As [`Buffer::host`].
    pub fn host_mut(&mut self) -> Result<&mut HostData> {
        self.host()?;
        self.device.take();
        self.host
            .get_mut()
            .map(Arc::make_mut)
            .ok_or_else(|| crate::Error::Internal("host copy vanished".into()))
    }

    /// The host data, taken out of the buffer (downloaded when only on a device).
    ///
    /// # Errors
    /// As [`Buffer::host`].
    pub fn into_host(mut self) -> Result<HostData> {
        self.host()?;
        self.host
            .take()
            .map(Arc::unwrap_or_clone)
            .ok_or_else(|| crate::Error::Internal("host copy vanished".into()))
    }

    /// The device copy, if there is one.
    pub fn device_copy(&self) -> Option<&Arc<dyn DeviceBuffer>> {
        self.device.get()
    }

    /// The device copy for writing in place, where no other buffer shares it (a clone, a
    /// reshape or a detach would see the write); the host copy, stale after it, is dropped.
    /// `None` for a buffer on the host only or shared.
    pub fn device_mut(&mut self) -> Option<&mut (dyn DeviceBuffer + 'static)> {
        Arc::get_mut(self.device.get_mut()?)?;
        self.host.take();
        Arc::get_mut(self.device.get_mut()?)
    }

    /// Keeps `device` as the device copy of a buffer that has none (an upload made for a
    /// kernel, reused by the next one); a buffer that already has one keeps its own.
    pub fn keep_device_copy(&self, device: Arc<dyn DeviceBuffer>) {
        let _ = self.device.set(device);
    }

    /// The backend holding a device copy (`None`: host only).
    pub fn resident_on(&self) -> Option<&'static str> {
        self.device.get().map(|d| d.backend())
    }

    /// Whether a host copy exists (no download needed to read it).
    pub fn has_host_copy(&self) -> bool {
        self.host.get().is_some()
    }
}

impl From<HostData> for Buffer {
    fn from(data: HostData) -> Buffer {
        Buffer {
            dtype: data.dtype(),
            len: data.len(),
            host: OnceLock::from(Arc::new(data)),
            device: OnceLock::new(),
        }
    }
}

impl Clone for Buffer {
    /// Shares both copies (buffers are never written on the device in place, and a host write
    /// copies a shared host copy first).
    fn clone(&self) -> Buffer {
        Buffer {
            dtype: self.dtype,
            len: self.len,
            host: self.host.clone(),
            device: self.device.clone(),
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("dtype", &self.dtype)
            .field("len", &self.len)
            .field("host", &self.host.get().is_some())
            .field("device", &self.resident_on())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device buffer kept in host memory, counting downloads.
    struct Fake(HostData, std::sync::atomic::AtomicUsize);

    impl DeviceBuffer for Fake {
        fn backend(&self) -> &'static str {
            "fake"
        }
        fn download(&self) -> Result<HostData> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(self.0.clone())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn Any {
            self
        }
    }

    #[test]
    fn buffers_download_once_and_drop_stale_device_copies() -> Result<()> {
        let fake = Arc::new(Fake(HostData::from_vec(vec![1.0f32, 2.0]), 0.into()));
        let mut b = Buffer::on_device(DType::F32, 2, fake.clone());
        assert!(!b.has_host_copy());
        assert_eq!(b.resident_on(), Some("fake"));
        assert_eq!(b.host()?.to_vec::<f32>(), vec![1.0, 2.0]);
        assert_eq!(b.host()?.to_vec::<f32>(), vec![1.0, 2.0]);
        assert_eq!(fake.1.load(std::sync::atomic::Ordering::Relaxed), 1);
        if let HostData::F32(v) = b.host_mut()? {
            v[0] = 5.0;
        }
        assert_eq!(b.resident_on(), None);
        b.keep_device_copy(fake.clone());
        assert_eq!(b.clone().into_host()?.to_vec::<f32>(), vec![5.0, 2.0]);
        Ok(())
    }

    #[test]
    fn round_trips_and_converts() {
        let d = HostData::from_vec(vec![1.5f32, -2.0]);
        assert_eq!(d.dtype(), DType::F32);
        assert_eq!(d.to_vec::<f32>(), vec![1.5, -2.0]);
        assert_eq!(d.to_vec::<f64>(), vec![1.5, -2.0]);
        assert_eq!(d.to_vec::<i64>(), vec![1, -2]);
        assert_eq!(HostData::from_bytes(DType::F32, d.as_bytes()), d);
        assert_eq!(
            HostData::identity(DType::F64, 1, ReduceOp::Max).get_f64(0),
            Some(f64::NEG_INFINITY)
        );
    }
}
