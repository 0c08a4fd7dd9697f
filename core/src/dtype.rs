//! Element types. A tensor's [`DType`] is checked once in core; kernels and the communicator see
//! plain slices of a known [`Element`] type.

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit float, the default.
    F32,
    /// 64-bit float (the reference precision of tests).
    F64,
    /// 64-bit signed integer.
    I64,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// A small stable code, used on the wire.
    pub fn code(self) -> u64 {
        match self {
            DType::F32 => 1,
            DType::F64 => 2,
            DType::I64 => 3,
        }
    }

    /// Inverse of [`DType::code`].
    pub fn from_code(code: u64) -> Option<DType> {
        match code {
            1 => Some(DType::F32),
            2 => Some(DType::F64),
            3 => Some(DType::I64),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
        })
    }
}

/// A Rust type that can be a tensor element.
pub trait Element:
    bytemuck::Pod + Copy + Send + Sync + PartialOrd + fmt::Debug + fmt::Display + 'static
{
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Conversion from f64 (rounding or truncating as `as` does).
    fn from_f64(v: f64) -> Self;
    /// Conversion to f64.
    fn to_f64(self) -> f64;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

impl Element for i64 {
    const DTYPE: DType = DType::I64;
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
