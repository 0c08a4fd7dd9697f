//! `add sub mul div` with NumPy broadcasting, and the `&a + &b` operators.

use super::{Kernel, Op, Signature};
use crate::DType;
use crate::autograd::{Ctx, record_broadcasting, sum_broadcast_to};
use crate::backend::BinaryOp;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// The broadcast shape of `a` and `b` (NumPy rules: right-aligned, sizes equal or 1).
///
/// # Errors
/// `ShapeMismatch` when a pair of sizes is neither equal nor 1.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let y = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            match (x, y) {
                _ if x == y => Ok(x),
                (1, _) => Ok(y),
                (_, 1) => Ok(x),
                _ => Err(Error::ShapeMismatch {
                    op,
                    shapes: vec![a.to_vec(), b.to_vec()],
                    reason: format!("sizes {x} and {y} do not broadcast"),
                }),
            }
        })
        .collect()
}

/// The split and broadcast signatures of an elementwise operator on broadcasting inputs:
/// splitting output dim d splits each input along its aligned dim when it has the full size
/// there; an input that broadcasts along d (size 1 or absent) must be whole.
pub(super) fn broadcast_signatures(shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
    let along = |s: &[usize], d: usize| -> Sbp {
        let pad = out.len() - s.len();
        if d >= pad && s[d - pad] == out[d] {
            Sbp::Split(d - pad)
        } else {
            Sbp::Broadcast
        }
    };
    let mut v: Vec<Signature> = (0..out.len())
        .map(|d| {
            Signature::new(
                shapes.iter().map(|s| along(s, d)).collect::<Vec<_>>(),
                Sbp::Split(d),
            )
        })
        .collect();
    v.push(Signature::new(
        vec![Sbp::Broadcast; shapes.len()],
        Sbp::Broadcast,
    ));
    v
}

pub(super) struct Binary(pub(super) BinaryOp);

impl Op for Binary {
    fn name(&self) -> &'static str {
        match self.0 {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Fmod => "fmod",
            BinaryOp::Remainder => "remainder",
            BinaryOp::FloorDivide => "floor_divide",
        }
    }

    fn any_dtype(&self) -> bool {
        true
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        broadcast_shapes(self.name(), shapes[0], shapes[1])
    }

    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let mut v = broadcast_signatures(shapes, out);
        let p = Sbp::Partial(ReduceOp::Sum);
        match self.0 {
            BinaryOp::Add | BinaryOp::Sub => v.push(Signature::new([p, p], p)),
            BinaryOp::Mul => {
                v.push(Signature::new([p, Sbp::Broadcast], p));
                v.push(Signature::new([Sbp::Broadcast, p], p));
            }
            BinaryOp::Div => v.push(Signature::new([p, Sbp::Broadcast], p)),
            // max(a1, a2, b1, b2) = max(max(a1, b1), max(a2, b2)): a partial of the same
            // reduction passes through.
            BinaryOp::Maximum => {
                let p = Sbp::Partial(ReduceOp::Max);
                v.push(Signature::new([p, p], p));
            }
            BinaryOp::Minimum => {
                let p = Sbp::Partial(ReduceOp::Min);
                v.push(Signature::new([p, p], p));
            }
            BinaryOp::Fmod | BinaryOp::Remainder | BinaryOp::FloorDivide => {}
        }
        v
    }

    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.binary(
            self.0,
            k.inputs[0],
            &k.shapes[0],
            k.inputs[1],
            &k.shapes[1],
            &k.out_shape,
        )
    }
}

/// The gradients of `out = op(a, b)`, summed back over broadcast dims (`g` may only broadcast
/// to `out`, see `record_broadcasting`).
fn binary_backward(op: BinaryOp, c: &Ctx<'_>, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    // Input i's gradient from f, when needed, summed back to the input's shape.
    let grad = |i: usize, f: &dyn Fn() -> Result<Tensor>| -> Result<Option<Tensor>> {
        if c.needs[i] {
            Ok(Some(sum_broadcast_to(
                &f()?,
                c.out.shape(),
                c.inputs[i].shape(),
            )?))
        } else {
            Ok(None)
        }
    };
    Ok(match op {
        BinaryOp::Add => vec![grad(0, &|| Ok(g.clone()))?, grad(1, &|| Ok(g.clone()))?],
        BinaryOp::Sub => vec![grad(0, &|| Ok(g.clone()))?, grad(1, &|| g.neg())?],
        BinaryOp::Mul => vec![grad(0, &|| g.mul(b))?, grad(1, &|| g.mul(a))?],
        // d(a/b)/db = -(a/b)/b.
        BinaryOp::Div => vec![
            grad(0, &|| g.div(b))?,
            grad(1, &|| g.mul(c.out)?.div(b)?.neg())?,
        ],
        // As PyTorch: the gradient goes to the larger (smaller) input, split in half on ties;
        // where either input is NaN (no order), both get all of it.
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let wins = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
                let worse = if op == BinaryOp::Maximum {
                    x.lt(y)?
                } else {
                    x.gt(y)?
                };
                let tie = x.eq(y)?.to_dtype(g.dtype())?.mul_scalar(0.5)?;
                let lost = worse.to_dtype(g.dtype())?.add(&tie)?;
                g.mul(&lost.neg()?.add_scalar(1.0)?)
            };
            vec![grad(0, &|| wins(a, b))?, grad(1, &|| wins(b, a))?]
        }
        // As PyTorch: a - q b with q = trunc(a / b) (fmod) or floor(a / b) (remainder), q
        // held constant.
        BinaryOp::Fmod | BinaryOp::Remainder => {
            let q = |x: &Tensor| {
                let q = a.div(b)?;
                if op == BinaryOp::Fmod {
                    q.trunc()
                } else {
                    q.floor()
                }
                .and_then(|q| x.mul(&q)?.neg())
            };
            vec![grad(0, &|| Ok(g.clone()))?, grad(1, &|| q(g))?]
        }
        // A step function: zero almost everywhere, as PyTorch's.
        BinaryOp::FloorDivide => {
            vec![
                grad(0, &|| g.mul_scalar(0.0))?,
                grad(1, &|| g.mul_scalar(0.0))?,
            ]
        }
    })
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident, $trait:ident, $method:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// # Errors
                /// `ShapeMismatch` for shapes that do not broadcast, `PlacementMismatch`,
                /// `DTypeMismatch`; communication failures of boxing.
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    self.binary(BinaryOp::$op, other)
                }
            )*
        }
        $(
            impl std::ops::$trait<&Tensor> for &Tensor {
                type Output = Result<Tensor>;
                fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                    self.$name(rhs)
                }
            }
        )*
    };
}

binary_methods! {
    /// `self + other`, with broadcasting.
    add, Add, add => Add;
    /// `self - other`, with broadcasting.
    sub, Sub, sub => Sub;
    /// `self * other` elementwise, with broadcasting.
    mul, Mul, mul => Mul;
    /// `self / other` elementwise, with broadcasting (integers divide as floats, as PyTorch's
    /// true division).
    div, Div, div => Div;
}

impl Tensor {
    /// `op(self, other)` after PyTorch's type promotion, recorded for autograd.
    pub(crate) fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        // As PyTorch's result_type: a 0-d operand changes the dtype only by a higher category.
        let mut dtype = super::result_type(&[self, other]);
        if op == BinaryOp::Div && !dtype.is_float() {
            dtype = DType::F32;
        }
        if dtype == crate::DType::Bool {
            // As PyTorch: `+` and `maximum` of booleans are a logical or, `*` and `minimum` a
            // logical and (computed in i64, then `!= 0`); `-` of booleans is refused.
            if op == BinaryOp::Sub {
                return Err(Error::InvalidArgument {
                    op: "sub",
                    reason: "subtraction of two Bool tensors is not supported (use logical \
                             operators, or cast an input first)"
                        .into(),
                });
            }
            let (a, b) = (self.to_dtype(DType::I64)?, other.to_dtype(DType::I64)?);
            return super::dispatch(&Binary(op), &[&a, &b])?.to_dtype(DType::Bool);
        }
        let (a, b) = (self.to_dtype(dtype)?, other.to_dtype(dtype)?);
        let k = Binary(op);
        // the backward is made of broadcasting ops: it takes a broadcasting gradient as is
        record_broadcasting(
            super::dispatch(&k, &[&a, &b]),
            k.name(),
            &[&a, &b],
            move |c, g| binary_backward(op, c, g),
        )
    }

    /// `max(self, other)` elementwise, with broadcasting (NaN if either is NaN); on ties the
    /// gradient is split in half, as PyTorch's.
    ///
    /// # Errors
    /// As [`Tensor::add`].
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Maximum, other)
    }

    /// `min(self, other)` elementwise, with broadcasting (see [`Tensor::maximum`]).
    ///
    /// # Errors
    /// As [`Tensor::add`].
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Minimum, other)
    }

    /// The remainder of `self / other` with the dividend's sign, computed exactly (C's `fmod`,
    /// `torch.fmod`), with broadcasting; NaN for a zero divisor or an infinite dividend,
    /// `self` for an infinite divisor. Integers divide exactly (a zero divisor gives 0: check
    /// divisors first where that matters).
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![-7.5f32, 123456789.0], &[2], Device::Cpu)?;
    /// let b = Tensor::from_vec(vec![2.0f32, 7.0], &[2], Device::Cpu)?;
    /// assert_eq!(a.fmod(&b)?.to_vec::<f32>()?, vec![-1.5, 4.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::add`].
    pub fn fmod(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Fmod, other)
    }

    /// The remainder of `self / other` with the divisor's sign, computed exactly (Python's
    /// `%`, `torch.remainder`), with broadcasting: `fmod`, plus `other` where the signs differ.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![-7.5f32, 1e8], &[2], Device::Cpu)?;
    /// let b = Tensor::from_vec(vec![2.0f32, -3.0], &[2], Device::Cpu)?;
    /// assert_eq!(a.remainder(&b)?.to_vec::<f32>()?, vec![0.5, -2.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::add`].
    pub fn remainder(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Remainder, other)
    }

    /// `floor(self / other)` from the exact remainder (Python's `//`, `torch.floor_divide`),
    /// with broadcasting: `(self - fmod) / other`, less one where the remainder's sign differs
    /// from the divisor's, rounded to the nearest integer; `self / other` for a zero divisor.
    /// Its gradient is zero.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let a = Tensor::from_vec(vec![-7.5f32, -5.0], &[2], Device::Cpu)?;
    /// let b = Tensor::from_vec(vec![2.0f32, f32::INFINITY], &[2], Device::Cpu)?;
    /// assert_eq!(a.floor_divide(&b)?.to_vec::<f32>()?, vec![-4.0, -1.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Tensor::add`].
    pub fn floor_divide(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::FloorDivide, other)
    }
}

/// Whether every device `t` computes on computes F64 (so an F32 `pow` can work in F64 there).
fn computes_f64(t: &Tensor) -> bool {
    use crate::backend::device_computes;
    match t.placement() {
        None => device_computes(t.device().device_type(), DType::F64),
        Some(p) => p
            .ranks()
            .iter()
            .all(|&r| device_computes(crate::env::device_type_of(r, p.device_type()), DType::F64)),
    }
}

/// `a ** b` elementwise with broadcasting, `a` and `b` of one float dtype, not recorded:
/// `|a|^b = exp(b ln|a|)`, negated for a negative base and an odd integer exponent, NaN for a
/// negative base and a non-integer exponent, 1 for a zero exponent or a base of 1 (as C's
/// `pow`, which PyTorch follows).
fn pow_values(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let dtype = a.dtype();
    let zero = a.scalar_like(0.0)?;
    let one = a.scalar_like(1.0)?;
    let mag = b.mul(&a.abs()?.log()?)?.exp()?;
    // b truncated toward zero (through I64), and b / 2 truncated: b is an integer where the
    // first equals b, an odd one where twice the second differs from it.
    let trunc = |x: &Tensor| x.to_dtype(DType::I64)?.to_dtype(dtype);
    let bi = trunc(b)?;
    let integral = bi.eq(b)?;
    let odd = trunc(&b.mul_scalar(0.5)?)?.mul_scalar(2.0)?.ne(&bi)?;
    let negative = a.lt(&zero)?;
    let flip = negative.mul(&integral.mul(&odd)?)?;
    let r = flip.where_cond(&mag.neg()?, &mag)?;
    let undefined = negative.mul(&integral.eq(&integral.scalar_like(0.0)?)?)?;
    let r = undefined.where_cond(&a.scalar_like(f64::NAN)?, &r)?;
    let unit = b.eq(&zero)?.add(&a.eq(&one)?)?;
    unit.where_cond(&one, &r)
}

impl Tensor {
    /// `self ** exponent` elementwise with broadcasting, as `torch.pow(tensor, tensor)`: the
    /// dtype is PyTorch's result type of the two (0-d operands as in [`Tensor::add`]); floats
    /// follow C's `pow` (a negative base with an integer exponent has a sign, with another
    /// exponent NaN; `x ** 0` is 1), computed in F64 where the device can (so F32 results are
    /// correctly rounded); integers are exact while the result fits an f64's 53-bit mantissa,
    /// a negative exponent giving 0 unless the base is 1 or -1. Differentiable in both inputs
    /// (PyTorch's formulas: `b * a^(b-1)`, zero where `b == 0`; `a^b * ln a`, zero where
    /// `a == 0` and `b >= 0`).
    ///
    /// # Errors
    /// `InvalidArgument` for two Bool operands (as PyTorch); as [`Tensor::add`].
    pub fn pow_tensor(&self, exponent: &Tensor) -> Result<Tensor> {
        let dtype = super::result_type(&[self, exponent]);
        if dtype == DType::Bool {
            return Err(Error::InvalidArgument {
                op: "pow",
                reason: "pow of Bool tensors is not supported (cast an input first)".into(),
            });
        }
        broadcast_shapes("pow", self.shape(), exponent.shape())?;
        let (a, b) = (self.to_dtype(dtype)?, exponent.to_dtype(dtype)?);
        if !dtype.is_float() {
            let work = if computes_f64(&a) {
                DType::F64
            } else {
                DType::F32
            };
            return crate::autograd::no_grad(|| {
                let (x, e) = (a.to_dtype(work)?, b.to_dtype(work)?);
                let r = pow_values(&x, &e)?;
                // round to nearest (away from zero on halves) before the cast truncates
                let half = r
                    .lt(&r.scalar_like(0.0)?)?
                    .where_cond(&r.scalar_like(-0.5)?, &r.scalar_like(0.5)?)?;
                let r = r.add(&half)?;
                // a negative exponent: 1 / x^|e| truncates to 0 unless |x| is 1
                let vanish = e
                    .lt(&e.scalar_like(0.0)?)?
                    .mul(&x.abs()?.ne(&x.scalar_like(1.0)?)?)?;
                vanish.where_cond(&r.scalar_like(0.0)?, &r)?.to_dtype(dtype)
            });
        }
        let work = if dtype != DType::F64 && computes_f64(&a) {
            DType::F64
        } else {
            dtype
        };
        let out = crate::autograd::no_grad(|| {
            pow_values(&a.detach().to_dtype(work)?, &b.detach().to_dtype(work)?)?.to_dtype(dtype)
        });
        crate::autograd::record(out, "pow", &[&a, &b], move |c, g| {
            let (a, b, r) = (&c.inputs[0], &c.inputs[1], c.out);
            let zero = a.scalar_like(0.0)?;
            let ga = if c.needs[0] {
                // a^(b-1) in F64 where the device computes it, as the forward
                let (aw, bw) = (a.to_dtype(work)?, b.to_dtype(work)?);
                let d = bw
                    .mul(&pow_values(&aw, &bw.add_scalar(-1.0)?)?)?
                    .to_dtype(a.dtype())?;
                let d = b.eq(&zero)?.where_cond(&zero, &d)?;
                Some(crate::autograd::sum_to(&g.mul(&d)?, a.shape())?)
            } else {
                None
            };
            let gb = if c.needs[1] {
                let d = r.mul(&a.log()?)?;
                let skip = a.eq(&zero)?.mul(&b.ge(&zero)?)?;
                let d = skip.where_cond(&zero, &d)?;
                Some(crate::autograd::sum_to(&g.mul(&d)?, b.shape())?)
            } else {
                None
            };
            Ok(vec![ga, gb])
        })
    }
}
