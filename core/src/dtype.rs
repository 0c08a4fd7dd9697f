//! Element types. A tensor's [`DType`] is checked once in core; kernels and the communicator see
//! plain slices of a known element type. Promotion follows PyTorch's rules for tensor-tensor
//! operators ([`DType::promote`]); casts follow PyTorch's ([`Element::from_f64`] and the CPU's
//! `cast`): to F16/BF16 rounds to nearest even, float to integer truncates toward zero, to Bool
//! is `x != 0`.

use std::fmt;

pub use half::{bf16, f16};

use crate::storage::HostData;

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
    /// 16-bit IEEE float (computed in f32 on the CPU).
    F16,
    /// bfloat16 (computed in f32 on the CPU).
    BF16,
    /// 32-bit signed integer.
    I32,
    /// Booleans (one byte each, 0 or 1).
    Bool,
}

impl DType {
    /// Every dtype, in wire-code order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::Bool,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// A small stable code, used on the wire.
    pub fn code(self) -> u64 {
        match self {
            DType::F32 => 1,
            DType::F64 => 2,
            DType::I64 => 3,
            DType::F16 => 4,
            DType::BF16 => 5,
            DType::I32 => 6,
            DType::Bool => 7,
        }
    }

    /// Inverse of [`DType::code`].
    pub fn from_code(code: u64) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.code() == code)
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is a 16-bit float (computed in f32).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// Whether this is an integer type (not Bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32)
    }

    /// The dtype of a tensor-tensor operator's result, as PyTorch promotes: bool < integers <
    /// floats; within a kind the wider wins; F16 with BF16 gives F32.
    ///
    /// ```
    /// use gflow_core::DType;
    /// assert_eq!(DType::I64.promote(DType::F16), DType::F16);
    /// assert_eq!(DType::F16.promote(DType::BF16), DType::F32);
    /// assert_eq!(DType::Bool.promote(DType::I32), DType::I32);
    /// ```
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match self.category().cmp(&other.category()) {
            std::cmp::Ordering::Greater => self,
            std::cmp::Ordering::Less => other,
            std::cmp::Ordering::Equal => match (self, other) {
                (F16, BF16) | (BF16, F16) => F32,
                _ if self.size() >= other.size() => self,
                _ => other,
            },
        }
    }

    /// The promotion category: 0 for Bool, 1 for integers, 2 for floats.
    fn category(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::I32 | DType::I64 => 1,
            _ => 2,
        }
    }

    /// The dtype of an operator's result over operands given as (dtype, number of dims), as
    /// PyTorch's `result_type`: the dimensioned operands (at least one dim) promote among
    /// themselves ([`DType::promote`]), and so do the 0-d ones; a 0-d operand changes the
    /// result only when its category (bool < integers < floats) is higher than that of every
    /// dimensioned operand. `None` for no operands.
    ///
    /// ```
    /// use gflow_core::DType;
    /// // f16[3] + f32 0-d stays F16; i32[3] + f32 0-d is F32 (a higher category).
    /// assert_eq!(DType::result_type(&[(DType::F16, 1), (DType::F32, 0)]), Some(DType::F16));
    /// assert_eq!(DType::result_type(&[(DType::I32, 1), (DType::F32, 0)]), Some(DType::F32));
    /// assert_eq!(DType::result_type(&[(DType::I32, 1), (DType::I64, 0)]), Some(DType::I32));
    /// assert_eq!(DType::result_type(&[(DType::F16, 0), (DType::F32, 0)]), Some(DType::F32));
    /// ```
    pub fn result_type(operands: &[(DType, usize)]) -> Option<DType> {
        let fold = |zero_dim: bool| {
            operands
                .iter()
                .filter(|&&(_, ndim)| (ndim == 0) == zero_dim)
                .map(|&(d, _)| d)
                .reduce(DType::promote)
        };
        match (fold(false), fold(true)) {
            (Some(d), Some(z)) if z.category() > d.category() => Some(d.promote(z)),
            (Some(d), _) => Some(d),
            (None, z) => z,
        }
    }

    /// The dtype arithmetic on this dtype computes in on the CPU (f32 for 16-bit floats).
    pub fn compute(self) -> DType {
        if self.is_half() { DType::F32 } else { self }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::Bool => "bool",
        })
    }
}

/// A Rust type that can be a tensor element: `f32 f64 i64 i32 bool`, `half::f16`, `half::bf16`.
pub trait Element: Copy + Send + Sync + PartialOrd + fmt::Debug + fmt::Display + 'static {
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Conversion from f64, as PyTorch casts: rounding to nearest for floats, truncation toward
    /// zero (saturating) for integers, `v != 0` for bool.
    fn from_f64(v: f64) -> Self;
    /// Conversion to f64.
    fn to_f64(self) -> f64;
    /// Wraps a vector as host data (no copy where the layouts agree).
    fn into_host(v: Vec<Self>) -> HostData;
    /// The elements of `h` when it holds this type.
    fn as_slice(h: &HostData) -> Option<&[Self]>;
}

macro_rules! element {
    ($t:ty, $d:ident, |$x:ident| $from:expr, |$y:ident| $to:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn from_f64($x: f64) -> Self {
                $from
            }
            fn to_f64(self) -> f64 {
                let $y = self;
                $to
            }
            fn into_host(v: Vec<Self>) -> HostData {
                HostData::$d(v)
            }
            fn as_slice(h: &HostData) -> Option<&[Self]> {
                match h {
                    HostData::$d(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

element!(f32, F32, |v| v as f32, |x| x as f64);
element!(f64, F64, |v| v, |x| x);
element!(i64, I64, |v| v as i64, |x| x as f64);
element!(i32, I32, |v| v as i32, |x| x as f64);
element!(f16, F16, |v| f16::from_f64(v), |x| x.to_f64());
element!(bf16, BF16, |v| bf16::from_f64(v), |x| x.to_f64());

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
    fn into_host(v: Vec<Self>) -> HostData {
        HostData::Bool(v.into_iter().map(u8::from).collect())
    }
    fn as_slice(_: &HostData) -> Option<&[Self]> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        use DType::*;
        let cases = [
            (Bool, Bool, Bool),
            (Bool, I32, I32),
            (I32, I64, I64),
            (I64, F16, F16),
            (I64, BF16, BF16),
            (F16, BF16, F32),
            (F16, F32, F32),
            (BF16, F64, F64),
            (F32, F64, F64),
            (Bool, F32, F32),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.promote(b), want, "{a} with {b}");
            assert_eq!(b.promote(a), want, "{b} with {a}");
        }
    }

    #[test]
    fn zero_dim_operands_promote_by_category_only() {
        use DType::*;
        // (dimensioned, 0-d, want), each checked against torch 2.x's result_type.
        let cases = [
            (F16, F32, F16),
            (I32, I64, I32),
            (F32, F64, F32),
            (BF16, F32, BF16),
            (F16, BF16, F16),
            (I32, F32, F32),
            (I32, F64, F64),
            (I32, F16, F16),
            (Bool, I64, I64),
            (Bool, F64, F64),
            (I32, Bool, I32),
            (F32, I64, F32),
        ];
        for (d, z, want) in cases {
            assert_eq!(
                DType::result_type(&[(d, 1), (z, 0)]),
                Some(want),
                "{d}[3] with {z} 0-d"
            );
            assert_eq!(
                DType::result_type(&[(z, 0), (d, 2)]),
                Some(want),
                "{z} 0-d with {d}"
            );
        }
        // Only 0-d operands, or only dimensioned ones: plain promotion.
        assert_eq!(DType::result_type(&[(F16, 0), (F32, 0)]), Some(F32));
        assert_eq!(DType::result_type(&[(I32, 0), (F16, 0)]), Some(F16));
        assert_eq!(DType::result_type(&[(F32, 1), (F64, 3)]), Some(F64));
        // Dimensioned operands promote among themselves first.
        assert_eq!(
            DType::result_type(&[(I32, 1), (I64, 1), (F64, 0)]),
            Some(F64)
        );
        assert_eq!(
            DType::result_type(&[(F16, 1), (BF16, 1), (F64, 0)]),
            Some(F32)
        );
        assert_eq!(DType::result_type(&[]), None);
    }

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
    }

    #[test]
    fn half_casts_round_to_nearest_even() {
        // 1 + 2^-11 lies halfway between f16's 1 and 1 + 2^-10: ties go to the even (1).
        assert_eq!(f16::from_f64(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        assert_eq!(
            f16::from_f64(1.0 + 3.0 * 2f64.powi(-11)).to_f64(),
            1.0 + 2.0 * 2f64.powi(-10)
        );
        assert_eq!(bf16::from_f64(1.0 + 2f64.powi(-8)).to_f64(), 1.0);
    }
}
