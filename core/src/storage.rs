//! Host storage: a typed, contiguous, row-major buffer. It is the CPU backend's storage and the
//! staging form every boxing step works on.

use crate::dtype::{DType, Element};
use crate::reduce::ReduceOp;

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
}

/// Applies `$body` with `$v` bound to the inner `Vec` of any variant.
macro_rules! with_vec {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            HostData::F32($v) => $body,
            HostData::F64($v) => $body,
            HostData::I64($v) => $body,
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

    /// The bytes of the buffer (native endianness).
    pub fn as_bytes(&self) -> &[u8] {
        with_vec!(self, v => bytemuck::cast_slice(v.as_slice()))
    }

    /// The bytes of the buffer, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        with_vec!(self, v => bytemuck::cast_slice_mut(v.as_mut_slice()))
    }

    /// `n` elements all equal to `value` (converted as `as` does).
    pub fn filled(dtype: DType, n: usize, value: f64) -> HostData {
        match dtype {
            DType::F32 => HostData::F32(vec![value as f32; n]),
            DType::F64 => HostData::F64(vec![value; n]),
            DType::I64 => HostData::I64(vec![value as i64; n]),
        }
    }

    /// `n` elements equal to the identity of `op`.
    pub fn identity(dtype: DType, n: usize, op: ReduceOp) -> HostData {
        match dtype {
            DType::F32 => HostData::F32(vec![op.identity(); n]),
            DType::F64 => HostData::F64(vec![op.identity(); n]),
            DType::I64 => HostData::I64(vec![op.identity(); n]),
        }
    }

    /// A buffer of `dtype` decoded from native-endian bytes (any alignment).
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
        match dtype {
            DType::F32 => HostData::F32(bytemuck::pod_collect_to_vec(bytes)),
            DType::F64 => HostData::F64(bytemuck::pod_collect_to_vec(bytes)),
            DType::I64 => HostData::I64(bytemuck::pod_collect_to_vec(bytes)),
        }
    }

    /// Wraps a typed vector.
    pub fn from_vec<T: Element>(v: Vec<T>) -> HostData {
        // The dtype match makes each cast an identity; `pod_collect` would copy, `cast_vec` does not.
        match T::DTYPE {
            DType::F32 => HostData::F32(bytemuck::allocation::cast_vec(v)),
            DType::F64 => HostData::F64(bytemuck::allocation::cast_vec(v)),
            DType::I64 => HostData::I64(bytemuck::allocation::cast_vec(v)),
        }
    }

    /// The elements converted to `T` (a copy; values convert as `as` does).
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        if T::DTYPE == self.dtype() {
            return bytemuck::pod_collect_to_vec(self.as_bytes());
        }
        with_vec!(self, v => v.iter().map(|x| T::from_f64(Element::to_f64(*x))).collect())
    }

    /// The element at `i` as f64 (for printing).
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        with_vec!(self, v => v.get(i).map(|x| Element::to_f64(*x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
