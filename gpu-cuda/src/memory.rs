//! Typed device buffers and their allocation. Allocations go through the driver's
//! stream-ordered memory pool (`cuMemAllocAsync`), which keeps freed blocks for reuse: that is
//! the buffer pool.

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use gflow_core::{DType, Error, Result};

use crate::{CudaBackend, device_error};

/// A typed device buffer (at least one element long: the driver allocates no empty buffers).
pub(crate) enum Buf {
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    I64(CudaSlice<i64>),
    /// F16 bits, one 16-bit word per element.
    F16(CudaSlice<u16>),
    /// BF16 bits, one 16-bit word per element.
    BF16(CudaSlice<u16>),
    I32(CudaSlice<i32>),
    /// Bool, one 32-bit word per element (true when nonzero), so the word kernels move it.
    Bool(CudaSlice<u32>),
}

/// A tensor's buffer on the device.
pub struct CudaStorage {
    pub(crate) buf: Buf,
    pub(crate) len: usize,
}

impl CudaStorage {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn dtype(&self) -> DType {
        match self.buf {
            Buf::F32(_) => DType::F32,
            Buf::F64(_) => DType::F64,
            Buf::I64(_) => DType::I64,
            Buf::F16(_) => DType::F16,
            Buf::BF16(_) => DType::BF16,
            Buf::I32(_) => DType::I32,
            Buf::Bool(_) => DType::Bool,
        }
    }

    /// The suffix of the word kernels that move this buffer's elements (`w2`, `w4`, `w8`).
    pub(crate) fn words(&self) -> &'static str {
        match self.buf {
            Buf::F16(_) | Buf::BF16(_) => "w2",
            Buf::F32(_) | Buf::I32(_) | Buf::Bool(_) => "w4",
            Buf::F64(_) | Buf::I64(_) => "w8",
        }
    }
}

/// Pushes a buffer of any dtype as a kernel argument (a device pointer).
macro_rules! arg_buf {
    ($builder:expr, $buf:expr) => {
        match $buf {
            $crate::memory::Buf::F32(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::F64(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::I64(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::F16(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::BF16(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::I32(s) => cudarc::driver::PushKernelArg::arg($builder, s),
            $crate::memory::Buf::Bool(s) => cudarc::driver::PushKernelArg::arg($builder, s),
        }
    };
}

/// An element type the float kernels compute in.
pub(crate) trait Float: DeviceRepr + ValidAsZeroBits + Copy + 'static {
    /// The kernels' name suffix.
    const SUFFIX: &'static str;
    const DTYPE: DType;
    fn of(s: &CudaStorage) -> Option<&CudaSlice<Self>>;
    fn wrap(buf: CudaSlice<Self>, len: usize) -> CudaStorage;
    fn from_f64(v: f64) -> Self;
}

/// `Float` for a type, its `Buf` variant and `DType`, and its kernels' suffix.
macro_rules! float_impl {
    ($t:ty, $variant:ident, $suffix:literal) => {
        impl Float for $t {
            const SUFFIX: &'static str = $suffix;
            const DTYPE: DType = DType::$variant;
            fn of(s: &CudaStorage) -> Option<&CudaSlice<$t>> {
                match &s.buf {
                    Buf::$variant(b) => Some(b),
                    _ => None,
                }
            }
            fn wrap(buf: CudaSlice<$t>, len: usize) -> CudaStorage {
                CudaStorage {
                    buf: Buf::$variant(buf),
                    len,
                }
            }
            fn from_f64(v: f64) -> $t {
                v as $t
            }
        }
    };
}
float_impl!(f32, F32, "f32");
float_impl!(f64, F64, "f64");

/// Runs `$body` with `$T` the float type of `$x`, or errs for a dtype without arithmetic.
macro_rules! by_float {
    ($x:expr, $op:literal, $T:ident => $body:expr) => {
        match $x.dtype() {
            gflow_core::DType::F32 => {
                type $T = f32;
                $body
            }
            gflow_core::DType::F64 => {
                type $T = f64;
                $body
            }
            other => Err($crate::device_error(format!(
                "{}: CUDA kernels compute in f32 and f64, not {other}",
                $op
            ))),
        }
    };
}

impl CudaBackend {
    /// A device-to-device copy of `x`: the bandwidth peer of elementwise kernels.
    ///
    /// # Errors
    /// `Device` for allocation failures.
    pub fn copy(&self, x: &CudaStorage) -> Result<CudaStorage> {
        let s = &self.stream;
        let buf = match &x.buf {
            Buf::F32(b) => Buf::F32(s.clone_dtod(b).map_err(device_error)?),
            Buf::F64(b) => Buf::F64(s.clone_dtod(b).map_err(device_error)?),
            Buf::I64(b) => Buf::I64(s.clone_dtod(b).map_err(device_error)?),
            Buf::F16(b) => Buf::F16(s.clone_dtod(b).map_err(device_error)?),
            Buf::BF16(b) => Buf::BF16(s.clone_dtod(b).map_err(device_error)?),
            Buf::I32(b) => Buf::I32(s.clone_dtod(b).map_err(device_error)?),
            Buf::Bool(b) => Buf::Bool(s.clone_dtod(b).map_err(device_error)?),
        };
        Ok(CudaStorage { buf, len: x.len })
    }

    /// An uninitialised buffer of `len` elements (the kernels write all of them).
    pub(crate) fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<CudaSlice<T>> {
        // SAFETY: every caller launches a kernel that writes all `len` elements before any read.
        unsafe { self.stream.alloc::<T>(len.max(1)) }.map_err(device_error)
    }

    /// An uninitialised buffer of `len` elements of `dtype` (the kernels write all of them).
    pub(crate) fn alloc_like(&self, dtype: DType, len: usize) -> Result<CudaStorage> {
        self.alloc_dtype(dtype, len, false)
    }

    /// `len` elements of `dtype`, zeroed by a memset on the stream when `zeroed`, else
    /// uninitialised (the kernels write all of them).
    pub(crate) fn alloc_dtype(
        &self,
        dtype: DType,
        len: usize,
        zeroed: bool,
    ) -> Result<CudaStorage> {
        fn one<T: DeviceRepr + ValidAsZeroBits>(
            c: &CudaBackend,
            len: usize,
            zeroed: bool,
        ) -> Result<CudaSlice<T>> {
            if zeroed {
                c.stream.alloc_zeros(len.max(1)).map_err(device_error)
            } else {
                c.alloc(len)
            }
        }
        let buf = match dtype {
            DType::F32 => Buf::F32(one(self, len, zeroed)?),
            DType::F64 => Buf::F64(one(self, len, zeroed)?),
            DType::I64 => Buf::I64(one(self, len, zeroed)?),
            DType::F16 => Buf::F16(one(self, len, zeroed)?),
            DType::BF16 => Buf::BF16(one(self, len, zeroed)?),
            DType::I32 => Buf::I32(one(self, len, zeroed)?),
            DType::Bool => Buf::Bool(one(self, len, zeroed)?),
            other => return Err(device_error(format!("CUDA holds no {other}"))),
        };
        Ok(CudaStorage { buf, len })
    }

    pub(crate) fn float<'a, T: Float>(&self, s: &'a CudaStorage) -> Result<&'a CudaSlice<T>> {
        T::of(s).ok_or(Error::DTypeMismatch {
            expected: T::DTYPE,
            got: s.dtype(),
        })
    }
}
