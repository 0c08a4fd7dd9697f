//! Comparisons (`eq ne lt le gt ge`, Bool results), selection (`where_cond`, `masked_fill`,
//! `tril`, `triu`) and casts (`to_dtype`), with their SBP signatures and gradients.

use super::binary::{broadcast_shapes, broadcast_signatures};
use super::unary::elementwise_signatures;
use super::{Kernel, Op, PARTIALS, Signature};
use crate::autograd::{record, sum_to};
use crate::backend::CmpOp;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// An elementwise comparison.
struct Compare(CmpOp);

impl Op for Compare {
    fn name(&self) -> &'static str {
        match self.0 {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
    /// Comparisons run on every device in every dtype (API.md): a backend that cannot
    /// compute a dtype (F64 on wgpu) compares on the host copy, as for I64.
    fn arithmetic(&self) -> bool {
        false
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        if dtypes[0] != dtypes[1] {
            return Err(Error::DTypeMismatch {
                expected: dtypes[0],
                got: dtypes[1],
            });
        }
        Ok(DType::Bool)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        broadcast_shapes(self.name(), shapes[0], shapes[1])
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        broadcast_signatures(shapes, out)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.compare(
            self.0,
            k.inputs[0],
            &k.shapes[0],
            k.inputs[1],
            &k.shapes[1],
            &k.out_shape,
        )
    }
}

/// `cond ? a : b` with broadcasting; inputs (cond, a, b).
struct Select;

impl Op for Select {
    fn name(&self) -> &'static str {
        "where_cond"
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        if dtypes[0] != DType::Bool {
            return Err(Error::DTypeMismatch {
                expected: DType::Bool,
                got: dtypes[0],
            });
        }
        if dtypes[1] != dtypes[2] {
            return Err(Error::DTypeMismatch {
                expected: dtypes[1],
                got: dtypes[2],
            });
        }
        Ok(dtypes[1])
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let ab = broadcast_shapes("where_cond", shapes[1], shapes[2])?;
        broadcast_shapes("where_cond", shapes[0], &ab)
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let mut v = broadcast_signatures(shapes, out);
        // Selection is linear in (a, b) for a fixed condition, and picks among operands.
        for op in PARTIALS {
            let p = Sbp::Partial(op);
            v.push(Signature::new([Sbp::Broadcast, p, p], p));
        }
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.select(
            [k.inputs[0], k.inputs[1], k.inputs[2]],
            [&k.shapes[0], &k.shapes[1], &k.shapes[2]],
            &k.out_shape,
        )
    }
}

/// The lower (or upper) triangle over the last two dims, from diagonal `k` on.
struct Triangle {
    k: i64,
    upper: bool,
}

impl Op for Triangle {
    fn name(&self) -> &'static str {
        if self.upper { "triu" } else { "tril" }
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        if shapes[0].len() < 2 {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                shapes: vec![shapes[0].to_vec()],
                reason: "needs at least 2 dimensions".into(),
            });
        }
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        // Every element knows its global (row, column) from its box's offset: any split works;
        // zeroing commutes with a partial sum.
        elementwise_signatures(shapes[0].len(), true)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let n = k.shapes[0].len();
        let off = &k.offsets[0];
        k.backend.triangle(
            k.inputs[0],
            &k.shapes[0],
            self.k,
            self.upper,
            (off[n - 2], off[n - 1]),
        )
    }
}

/// A cast to another dtype.
struct Cast(DType);

impl Op for Cast {
    fn name(&self) -> &'static str {
        "to_dtype"
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn out_dtype(&self, _: &[DType]) -> Result<DType> {
        Ok(self.0)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), false)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.cast(k.inputs[0], self.0)
    }
}

macro_rules! compare_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// The operands are promoted to a common dtype first (PyTorch's rules); the
                /// result is Bool and has no gradient.
                ///
                /// # Errors
                /// `ShapeMismatch` for shapes that do not broadcast, `PlacementMismatch`,
                /// `DeviceMismatch`; communication failures of boxing.
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    self.compare(CmpOp::$op, other)
                }
            )*
        }
    };
}

compare_methods! {
    /// `self == other` elementwise, with broadcasting.
    eq => Eq;
    /// `self != other` elementwise, with broadcasting.
    ne => Ne;
    /// `self < other` elementwise, with broadcasting.
    lt => Lt;
    /// `self <= other` elementwise, with broadcasting.
    le => Le;
    /// `self > other` elementwise, with broadcasting.
    gt => Gt;
    /// `self >= other` elementwise, with broadcasting.
    ge => Ge;
}

impl Tensor {
    fn compare(&self, op: CmpOp, other: &Tensor) -> Result<Tensor> {
        let dtype = super::result_type(&[self, other]);
        let (a, b) = (
            self.to_dtype(dtype)?.detach(),
            other.to_dtype(dtype)?.detach(),
        );
        super::dispatch(&Compare(op), &[&a, &b])
    }

    /// `self ? on_true : on_false` elementwise (PyTorch's `torch.where(cond, a, b)`), with
    /// broadcasting over all three; `self` is the condition (Bool; other dtypes mean `!= 0`).
    /// The result's dtype is the promotion of the two branches' (PyTorch's `result_type`: a 0-d
    /// branch changes it only by a higher category). Gradients flow to the branch
    /// that was taken.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
    /// let c = Tensor::from_vec(vec![true, false], &[2], Device::Cpu)?;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?;
    /// let b = Tensor::from_vec(vec![-1.0f32], &[1], Device::Cpu)?;
    /// assert_eq!(c.where_cond(&a, &b)?.to_vec::<f32>()?, vec![1.0, -1.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `ShapeMismatch` for shapes that do not broadcast, `PlacementMismatch`,
    /// `DeviceMismatch`; communication failures of boxing.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        let cond = self.to_dtype(DType::Bool)?.detach();
        let dtype = super::result_type(&[on_true, on_false]);
        let (a, b) = (on_true.to_dtype(dtype)?, on_false.to_dtype(dtype)?);
        record(
            super::dispatch(&Select, &[&cond, &a, &b]),
            "where_cond",
            &[&cond, &a, &b],
            |c, g| {
                let zero = g.zeros_like()?;
                let cond = &c.inputs[0];
                let pick =
                    |i: usize, taken: &dyn Fn() -> Result<Tensor>| -> Result<Option<Tensor>> {
                        if c.needs[i] {
                            Ok(Some(sum_to(&taken()?, c.inputs[i].shape())?))
                        } else {
                            Ok(None)
                        }
                    };
                Ok(vec![
                    None,
                    pick(1, &|| cond.where_cond(g, &zero))?,
                    pick(2, &|| cond.where_cond(&zero, g))?,
                ])
            },
        )
    }

    /// `value` where `mask` is true, else `self` (PyTorch's out-of-place `masked_fill`): `mask`
    /// and `self` broadcast together, so a wider mask gives a wider result.
    ///
    /// # Errors
    /// `ShapeMismatch` when `mask` and `self` do not broadcast; as [`Tensor::where_cond`].
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        broadcast_shapes("masked_fill", mask.shape(), self.shape())?;
        let fill = self.scalar_like(value)?;
        mask.where_cond(&fill, self)
    }

    /// The lower triangle of the last two dims: elements with `col - row <= k` are kept, the
    /// others zeroed (PyTorch's `tril`).
    ///
    /// # Errors
    /// `ShapeMismatch` for fewer than 2 dims; communication failures of boxing.
    pub fn tril(&self, k: i64) -> Result<Tensor> {
        self.triangle(k, false)
    }

    /// The upper triangle of the last two dims: elements with `col - row >= k` are kept, the
    /// others zeroed (PyTorch's `triu`).
    ///
    /// # Errors
    /// As [`Tensor::tril`].
    pub fn triu(&self, k: i64) -> Result<Tensor> {
        self.triangle(k, true)
    }

    fn triangle(&self, k: i64, upper: bool) -> Result<Tensor> {
        record(
            super::dispatch(&Triangle { k, upper }, &[self]),
            if upper { "triu" } else { "tril" },
            &[self],
            move |_, g| Ok(vec![Some(g.triangle(k, upper)?)]),
        )
    }

    /// This tensor cast to `dtype`, as PyTorch casts: to F16/BF16 rounding to nearest even,
    /// float to integer truncating toward zero, to Bool `x != 0`. The gradient of a cast
    /// between floats is cast back; casts to integers and Bool have none. A cast to the
    /// tensor's own dtype returns the same tensor.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
    /// let x = Tensor::from_vec(vec![-1.7f32, 0.0, 2.5], &[3], Device::Cpu)?;
    /// assert_eq!(x.to_dtype(DType::I64)?.to_vec::<i64>()?, vec![-1, 0, 2]);
    /// assert_eq!(x.to_dtype(DType::Bool)?.to_vec::<bool>()?, vec![true, false, true]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Communication failures of boxing.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let from = self.dtype();
        let out = super::dispatch(&Cast(dtype), &[self]);
        if !(dtype.is_float() && from.is_float()) {
            return out;
        }
        record(out, "to_dtype", &[self], move |_, g| {
            Ok(vec![Some(g.to_dtype(from)?)])
        })
    }

    /// A tensor of this one's shape, placement (broadcast) and dtype holding zeros.
    pub(crate) fn zeros_like(&self) -> Result<Tensor> {
        Tensor::full_dtype(
            self.shape(),
            0.0,
            self.dtype(),
            crate::autograd::target_like(self),
        )
    }

    /// A 0-d tensor holding `value` in this tensor's dtype, on its device or placement
    /// (broadcast).
    pub(crate) fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full_dtype(&[], value, self.dtype(), crate::autograd::target_like(self))
    }
}
