//! Reductions used by `partial_*` SBPs and by the communicator: the operator, its identity, and an
//! elementwise combine over raw byte buffers of a known dtype.

use std::fmt;

use crate::dtype::{DType, Element};

/// How the components of a partial tensor combine into its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
    /// Elementwise minimum.
    Min,
    /// Elementwise maximum.
    Max,
}

impl ReduceOp {
    /// The identity element as f64 (`0`, `+inf`, `-inf`); integers saturate to their extremes.
    pub fn identity_f64(self) -> f64 {
        match self {
            ReduceOp::Sum => 0.0,
            ReduceOp::Min => f64::INFINITY,
            ReduceOp::Max => f64::NEG_INFINITY,
        }
    }

    /// The identity element in type `T`.
    pub fn identity<T: Element>(self) -> T {
        match (T::DTYPE, self) {
            (DType::I64, ReduceOp::Min) => T::from_f64(i64::MAX as f64),
            (DType::I64, ReduceOp::Max) => T::from_f64(i64::MIN as f64),
            (DType::I32, ReduceOp::Min) => T::from_f64(i32::MAX as f64),
            (DType::I32, ReduceOp::Max) => T::from_f64(i32::MIN as f64),
            (DType::Bool, ReduceOp::Min) => T::from_f64(1.0),
            (DType::Bool, _) => T::from_f64(0.0),
            _ => T::from_f64(self.identity_f64()),
        }
    }

    /// Combine `acc[i] = acc[i] op x[i]` for a typed slice.
    pub fn combine<T: Combine>(self, acc: &mut [T], x: &[T]) {
        T::combine(self, acc, x)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        })
    }
}

/// Element types with a vectorisable elementwise combine.
pub trait Combine: Element + bytemuck::Pod {
    /// `acc[i] = acc[i] op x[i]`.
    fn combine(op: ReduceOp, acc: &mut [Self], x: &[Self]);
}

macro_rules! float_combine {
    ($t:ty) => {
        impl Combine for $t {
            fn combine(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                // max and min propagate NaN (as the local reductions and PyTorch do), where
                // `f32::max` would drop it
                match op {
                    ReduceOp::Sum => acc.iter_mut().zip(x).for_each(|(a, b)| *a += *b),
                    ReduceOp::Min => acc.iter_mut().zip(x).for_each(|(a, &b)| {
                        if b < *a || b.is_nan() {
                            *a = b
                        }
                    }),
                    ReduceOp::Max => acc.iter_mut().zip(x).for_each(|(a, &b)| {
                        if b > *a || b.is_nan() {
                            *a = b
                        }
                    }),
                }
            }
        }
    };
}
float_combine!(f32);
float_combine!(f64);

macro_rules! int_combine {
    ($t:ty) => {
        impl Combine for $t {
            fn combine(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                match op {
                    ReduceOp::Sum => acc
                        .iter_mut()
                        .zip(x)
                        .for_each(|(a, b)| *a = a.wrapping_add(*b)),
                    ReduceOp::Min => acc.iter_mut().zip(x).for_each(|(a, b)| *a = (*a).min(*b)),
                    ReduceOp::Max => acc.iter_mut().zip(x).for_each(|(a, b)| *a = (*a).max(*b)),
                }
            }
        }
    };
}
int_combine!(i64);
int_combine!(i32);

/// 16-bit floats combine in f32, rounding each result once.
macro_rules! half_combine {
    ($t:ty) => {
        impl Combine for $t {
            fn combine(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                let f = |a: f32, b: f32| match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Min if b < a || b.is_nan() => b,
                    ReduceOp::Max if b > a || b.is_nan() => b,
                    ReduceOp::Min | ReduceOp::Max => a,
                };
                acc.iter_mut()
                    .zip(x)
                    .for_each(|(a, b)| *a = <$t>::from_f32(f(a.to_f32(), b.to_f32())));
            }
        }
    };
}
half_combine!(crate::dtype::f16);
half_combine!(crate::dtype::bf16);

/// `acc = acc op x` over raw bytes holding elements of `dtype` (the communicator's wire form),
/// whole elements only. Buffers that are not aligned for the element type (a TLS record's
/// plaintext in a receive buffer never is) go through aligned scratch on the stack, a block at
/// a time: no allocation per piece.
pub fn combine_bytes(dtype: DType, op: ReduceOp, acc: &mut [u8], x: &[u8]) {
    fn typed<T: Combine>(op: ReduceOp, acc: &mut [u8], x: &[u8]) {
        let size = std::mem::size_of::<T>();
        let n = acc.len().min(x.len()) / size * size;
        let (acc, x) = (&mut acc[..n], &x[..n]);
        if let (Ok(a), Ok(b)) = (
            bytemuck::try_cast_slice_mut::<u8, T>(acc),
            bytemuck::try_cast_slice::<u8, T>(x),
        ) {
            return T::combine(op, a, b);
        }
        // Blocks of SCRATCH bytes (a multiple of every element size), aligned to 8.
        const SCRATCH: usize = 4096;
        let (mut xs, mut accs) = ([0u64; SCRATCH / 8], [0u64; SCRATCH / 8]);
        for (a, b) in acc.chunks_mut(SCRATCH).zip(x.chunks(SCRATCH)) {
            let len = a.len();
            let xb = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut xs)[..len];
            xb.copy_from_slice(b);
            let xt: &[T] = bytemuck::cast_slice(xb);
            match bytemuck::try_cast_slice_mut::<u8, T>(a) {
                Ok(at) => T::combine(op, at, xt),
                Err(_) => {
                    let ab = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut accs)[..len];
                    ab.copy_from_slice(a);
                    T::combine(op, bytemuck::cast_slice_mut(ab), xt);
                    a.copy_from_slice(ab);
                }
            }
        }
    }
    match dtype {
        DType::F32 => typed::<f32>(op, acc, x),
        DType::F64 => typed::<f64>(op, acc, x),
        DType::I64 => typed::<i64>(op, acc, x),
        DType::I32 => typed::<i32>(op, acc, x),
        DType::F16 => typed::<crate::dtype::f16>(op, acc, x),
        DType::BF16 => typed::<crate::dtype::bf16>(op, acc, x),
        // Booleans: a sum or max is "any", a min is "all".
        DType::Bool => {
            let n = acc.len().min(x.len());
            acc[..n].iter_mut().zip(&x[..n]).for_each(|(a, b)| {
                *a = match op {
                    ReduceOp::Min => *a & *b,
                    _ => *a | *b,
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_neutral() {
        for op in [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max] {
            let mut a = vec![3.5f32, -2.0];
            op.combine(&mut a, &[op.identity(), op.identity()]);
            assert_eq!(a, vec![3.5, -2.0]);
            let mut b = vec![7i64, -9];
            op.combine(&mut b, &[op.identity(), op.identity()]);
            assert_eq!(b, vec![7, -9]);
        }
    }

    #[test]
    fn max_and_min_propagate_nan_from_either_side() {
        let nan = f32::NAN;
        for op in [ReduceOp::Max, ReduceOp::Min] {
            let mut a = vec![nan, 1.0, 2.0];
            op.combine(&mut a, &[1.0, nan, 3.0]);
            assert!(a[0].is_nan() && a[1].is_nan(), "{op}: {a:?}");
            let mut h = vec![crate::dtype::bf16::from_f32(1.0)];
            op.combine(&mut h, &[crate::dtype::bf16::from_f32(nan)]);
            assert!(h[0].is_nan(), "{op} bf16");
        }
    }

    #[test]
    fn combine_bytes_handles_misaligned_buffers() {
        let a = [1.0f64, 5.0];
        let b = [4.0f64, 2.0];
        let mut raw = [0u8; 17];
        raw[1..].copy_from_slice(bytemuck::cast_slice(&a));
        let mut xb = [0u8; 17];
        xb[1..].copy_from_slice(bytemuck::cast_slice(&b));
        combine_bytes(DType::F64, ReduceOp::Max, &mut raw[1..], &xb[1..]);
        let out: Vec<f64> = bytemuck::pod_collect_to_vec(&raw[1..]);
        assert_eq!(out, vec![4.0, 5.0]);
    }

    /// Misaligned inputs longer than a scratch block, of every width, with the accumulator
    /// aligned or not, give what aligned ones give.
    #[test]
    fn combine_bytes_misaligned_across_scratch_blocks() {
        let n = 3000usize;
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut want = a.clone();
        ReduceOp::Sum.combine(&mut want, &b);
        let want: &[u8] = bytemuck::cast_slice(&want);
        for (sa, sb) in [(0, 1), (3, 0), (1, 5), (4, 4)] {
            let mut raw = vec![0u8; n * 4 + 8];
            raw[sa..sa + n * 4].copy_from_slice(bytemuck::cast_slice(&a));
            let mut xb = vec![0u8; n * 4 + 8];
            xb[sb..sb + n * 4].copy_from_slice(bytemuck::cast_slice(&b));
            combine_bytes(
                DType::F32,
                ReduceOp::Sum,
                &mut raw[sa..sa + n * 4],
                &xb[sb..sb + n * 4],
            );
            assert_eq!(&raw[sa..sa + n * 4], want, "offsets {sa}, {sb}");
        }
        let (a16, b16) = ([1i64, -2, 3], [10i64, 20, -30]);
        let mut raw = [0u8; 25];
        raw[1..].copy_from_slice(bytemuck::cast_slice(&a16));
        combine_bytes(
            DType::I64,
            ReduceOp::Sum,
            &mut raw[1..],
            bytemuck::cast_slice(&b16),
        );
        let out: Vec<i64> = bytemuck::pod_collect_to_vec(&raw[1..]);
        assert_eq!(out, vec![11, 18, -27]);
    }
}
