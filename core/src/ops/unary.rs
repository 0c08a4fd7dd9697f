//! Elementwise functions of one tensor: neg exp log sqrt square relu gelu sigmoid tanh,
//! multiplication by and addition of a scalar; with their gradients.

use super::{Kernel, Op, Signature};
use crate::autograd::record;
use crate::backend::UnaryOp;
use crate::error::Result;
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// Elementwise ops keep any split and broadcast; linear ones also keep partial sums.
pub(super) fn elementwise_signatures(ndim: usize, linear: bool) -> Vec<Signature> {
    let mut v: Vec<Signature> = (0..ndim)
        .map(|d| Signature::new([Sbp::Split(d)], Sbp::Split(d)))
        .collect();
    v.push(Signature::new([Sbp::Broadcast], Sbp::Broadcast));
    if linear {
        v.push(Signature::new(
            [Sbp::Partial(ReduceOp::Sum)],
            Sbp::Partial(ReduceOp::Sum),
        ));
    }
    v
}

pub(super) struct Unary(pub(super) UnaryOp);

impl Op for Unary {
    fn name(&self) -> &'static str {
        match self.0 {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Square => "square",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Step => "step",
            UnaryOp::GeluGrad => "gelu_grad",
            UnaryOp::Abs => "abs",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Silu => "silu",
            UnaryOp::Erf => "erf",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Sign => "sign",
            UnaryOp::SiluGrad => "silu_grad",
            UnaryOp::GeluErfGrad => "gelu_erf_grad",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Trunc => "trunc",
            UnaryOp::Log1p => "log1p",
            UnaryOp::Expm1 => "expm1",
        }
    }
    fn any_dtype(&self) -> bool {
        int_unary(self.0)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), self.0 == UnaryOp::Neg)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.unary(self.0, k.inputs[0])
    }
}

pub(super) struct Scale(pub(super) f64);

impl Op for Scale {
    fn name(&self) -> &'static str {
        "mul_scalar"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), true)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.scale(k.inputs[0], self.0)
    }
}

pub(super) struct AddScalar(pub(super) f64);

impl Op for AddScalar {
    fn name(&self) -> &'static str {
        "add_scalar"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), false)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.add_scalar(k.inputs[0], self.0)
    }
}

/// `g * d(x)` for `d` the derivative of an activation (see [`Kernels::unary_mul`]): inputs
/// (x, g), one fused kernel.
///
/// [`Kernels::unary_mul`]: crate::backend::Kernels::unary_mul
struct UnaryMul(UnaryOp);

impl Op for UnaryMul {
    fn name(&self) -> &'static str {
        "unary_mul"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        if shapes[0] != shapes[1] {
            return Err(crate::Error::ShapeMismatch {
                op: "unary_mul",
                shapes: vec![shapes[0].to_vec(), shapes[1].to_vec()],
                reason: "the input and its gradient must have one shape".into(),
            });
        }
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .map(|d| Signature::new([Sbp::Split(d), Sbp::Split(d)], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(
            [Sbp::Broadcast, Sbp::Broadcast],
            Sbp::Broadcast,
        ));
        // linear in g
        v.push(Signature::new(
            [Sbp::Broadcast, Sbp::Partial(ReduceOp::Sum)],
            Sbp::Partial(ReduceOp::Sum),
        ));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.unary_mul(self.0, k.inputs[0], k.inputs[1])
    }
}

/// `g * d(x)` for `d` the derivative `deriv` of an activation: one fused pass (the
/// derivative and then the product where `x` and `g` differ in dtype).
fn activation_grad(deriv: UnaryOp, x: &Tensor, g: &Tensor) -> Result<Tensor> {
    if x.dtype() == g.dtype() {
        return super::dispatch(&UnaryMul(deriv), &[x, g]);
    }
    g.mul(&x.unary(deriv)?)
}

/// The gradient of `y = op(x)` from `y`'s gradient `g`.
fn unary_backward(op: UnaryOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
    Ok(Some(match op {
        UnaryOp::Neg => g.neg()?,
        UnaryOp::Exp => g.mul(y)?,
        UnaryOp::Log => g.div(x)?,
        UnaryOp::Log1p => g.div(&x.add_scalar(1.0)?)?,
        // d(e^x - 1) = e^x = y + 1.
        UnaryOp::Expm1 => g.mul(&y.add_scalar(1.0)?)?,
        UnaryOp::Sqrt => g.div(y)?.mul_scalar(0.5)?,
        UnaryOp::Square => g.mul(x)?.mul_scalar(2.0)?,
        UnaryOp::Relu => g.mul(&x.unary(UnaryOp::Step)?)?,
        UnaryOp::Gelu => activation_grad(UnaryOp::GeluGrad, x, g)?,
        UnaryOp::Sigmoid => g.mul(&y.sub(&y.square()?)?)?,
        UnaryOp::Tanh => g.sub(&g.mul(&y.square()?)?)?,
        UnaryOp::Abs => g.mul(&x.unary(UnaryOp::Sign)?)?,
        // d(x^-1/2) = -1/2 x^-3/2 = -1/2 y^3.
        UnaryOp::Rsqrt => g.mul(&y.mul(&y.square()?)?)?.mul_scalar(-0.5)?,
        UnaryOp::Sin => g.mul(&x.cos()?)?,
        UnaryOp::Cos => g.mul(&x.sin()?)?.neg()?,
        UnaryOp::Silu => activation_grad(UnaryOp::SiluGrad, x, g)?,
        // d erf = 2/sqrt(pi) e^{-x^2}.
        UnaryOp::Erf => g
            .mul(&x.square()?.neg()?.exp()?)?
            .mul_scalar(std::f64::consts::FRAC_2_SQRT_PI)?,
        UnaryOp::GeluErf => activation_grad(UnaryOp::GeluErfGrad, x, g)?,
        // Piecewise constant: PyTorch's gradient is zeros (not none).
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc | UnaryOp::Sign => {
            g.mul_scalar(0.0)?
        }
        // A step is flat almost everywhere. The derivatives' own derivatives are only used
        // inside backward passes, which record nothing, so they are never asked for.
        UnaryOp::Step | UnaryOp::GeluGrad | UnaryOp::SiluGrad | UnaryOp::GeluErfGrad => {
            return Ok(None);
        }
    }))
}

/// Whether `op` computes on integers too (others cast integer and Bool inputs to F32 first,
/// as PyTorch's int-to-float promotion of such functions).
fn int_unary(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Square | UnaryOp::Relu | UnaryOp::Sign
    )
}

impl Tensor {
    /// `op(x)` elementwise, recorded for autograd.
    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let x = match self.dtype() {
            d if d.is_float() => self.clone(),
            crate::DType::Bool => self.to_dtype(if int_unary(op) {
                crate::DType::I64
            } else {
                crate::DType::F32
            })?,
            _ if int_unary(op) => self.clone(),
            _ => self.to_dtype(crate::DType::F32)?,
        };
        record(
            super::dispatch(&Unary(op), &[&x]),
            Unary(op).name(),
            &[&x],
            move |c, g| Ok(vec![unary_backward(op, &c.inputs[0], c.out, g)?]),
        )
    }
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                ///
                /// # Errors
                /// `DTypeMismatch` for integer tensors; communication failures of boxing.
                pub fn $name(&self) -> Result<Tensor> {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_methods! {
    /// `-x`, elementwise.
    neg => Neg;
    /// `e^x`, elementwise.
    exp => Exp;
    /// Natural logarithm, elementwise.
    log => Log;
    /// Square root, elementwise.
    sqrt => Sqrt;
    /// `x * x`, elementwise.
    square => Square;
    /// `max(x, 0)`, elementwise.
    relu => Relu;
    /// GELU (tanh approximation), elementwise.
    gelu => Gelu;
    /// Logistic sigmoid, elementwise.
    sigmoid => Sigmoid;
    /// Hyperbolic tangent, elementwise.
    tanh => Tanh;
    /// `|x|`, elementwise.
    abs => Abs;
    /// `1 / sqrt(x)`, elementwise.
    rsqrt => Rsqrt;
    /// Sine, elementwise.
    sin => Sin;
    /// Cosine, elementwise.
    cos => Cos;
    /// SiLU (swish), `x * sigmoid(x)`, elementwise.
    silu => Silu;
    /// The error function, elementwise.
    erf => Erf;
    /// GELU in its exact form `x * Phi(x)` (PyTorch's default `gelu`), elementwise.
    gelu_erf => GeluErf;
    /// `ln(1 + x)`, elementwise, without the rounding of `1 + x` (exact where `x` is tiny).
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1e-10f64, -0.5], &[2], Device::Cpu)?;
    /// // ln(1 + x) = x - x^2 / 2 + ...: the naive ln(1 + 1e-10) is off in the 8th digit
    /// let y = x.log1p()?.to_vec::<f64>()?;
    /// assert!((y[0] - (1e-10 - 5e-21)).abs() < 1e-25 && (y[1] - 0.5f64.ln()).abs() < 1e-15);
    /// let z = x.expm1()?.to_vec::<f64>()?;
    /// assert!((z[0] - (1e-10 + 5e-21)).abs() < 1e-25);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    log1p => Log1p;
    /// `e^x - 1`, elementwise, without the cancellation of `exp(x) - 1` where `x` is tiny.
    expm1 => Expm1;
}

macro_rules! rounding_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                $(#[$doc])*
                /// Integer and Bool tensors are returned as they are (already whole), as
                /// PyTorch's; the gradient is zero.
                ///
                /// # Errors
                /// Communication failures of boxing.
                pub fn $name(&self) -> Result<Tensor> {
                    if self.dtype().is_float() {
                        self.unary(UnaryOp::$op)
                    } else {
                        Ok(self.clone())
                    }
                }
            )*
        }
    };
}

rounding_methods! {
    /// The largest integer not above each element (PyTorch's `floor`).
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![-1.5f32, 0.5, 2.5, 3.7], &[4], Device::Cpu)?;
    /// assert_eq!(x.floor()?.to_vec::<f32>()?, [-2.0, 0.0, 2.0, 3.0]);
    /// assert_eq!(x.ceil()?.to_vec::<f32>()?, [-1.0, 1.0, 3.0, 4.0]);
    /// assert_eq!(x.round()?.to_vec::<f32>()?, [-2.0, 0.0, 2.0, 4.0]);
    /// assert_eq!(x.trunc()?.to_vec::<f32>()?, [-1.0, 0.0, 2.0, 3.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    floor => Floor;
    /// The smallest integer not below each element (PyTorch's `ceil`).
    ceil => Ceil;
    /// The nearest integer to each element, halves to the even one (PyTorch's `round`).
    round => Round;
    /// Each element without its fraction, toward zero (PyTorch's `trunc`).
    trunc => Trunc;
}

impl Tensor {
    /// `-1`, `0` or `1` by the sign of each element (`0` for zeros and NaN), in the input's
    /// dtype, as PyTorch's `sign`; a Bool tensor is its own sign. The gradient is zero.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![-2.5f32, 0.0, 3.0, f32::NAN], &[4], Device::Cpu)?;
    /// assert_eq!(x.sign()?.to_vec::<f32>()?, [-1.0, 0.0, 1.0, 0.0]);
    /// let i = Tensor::from_vec(vec![-7i64, 0, 9], &[3], Device::Cpu)?;
    /// assert_eq!(i.sign()?.to_vec::<i64>()?, [-1, 0, 1]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Communication failures of boxing.
    pub fn sign(&self) -> Result<Tensor> {
        if self.dtype() == crate::DType::Bool {
            return Ok(self.clone());
        }
        self.unary(UnaryOp::Sign)
    }
}

/// `x^e` for a scalar exponent.
pub(super) struct PowScalar(pub(super) f64);

impl Op for PowScalar {
    fn name(&self) -> &'static str {
        "pow"
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), false)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.pow_scalar(k.inputs[0], self.0)
    }
}

/// `x` clamped to `[lo, hi]` (either bound optional).
pub(super) struct Clamp(pub(super) Option<f64>, pub(super) Option<f64>);

impl Op for Clamp {
    fn name(&self) -> &'static str {
        "clamp"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let mut v = elementwise_signatures(shapes[0].len(), false);
        // Clamping is monotone: it commutes with a partial max or min.
        for r in [ReduceOp::Max, ReduceOp::Min] {
            v.push(Signature::new([Sbp::Partial(r)], Sbp::Partial(r)));
        }
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.clamp(k.inputs[0], self.0, self.1)
    }
}

impl Tensor {
    /// `x^e` elementwise for a scalar exponent (integer inputs compute as F32).
    ///
    /// # Errors
    /// Communication failures of boxing.
    pub fn pow(&self, e: f64) -> Result<Tensor> {
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.to_dtype(crate::DType::F32)?
        };
        record(
            super::dispatch(&PowScalar(e), &[&x]),
            "pow",
            &[&x],
            move |c, g| {
                if e == 0.0 {
                    return Ok(vec![Some(g.mul_scalar(0.0)?)]);
                }
                Ok(vec![Some(
                    g.mul(&c.inputs[0].pow(e - 1.0)?)?.mul_scalar(e)?,
                )])
            },
        )
    }

    /// `x` clamped to `[min, max]`; either bound may be `None`. The gradient passes where the
    /// input lies strictly inside the bounds (a value on a bound gets none, as PyTorch).
    ///
    /// The result's dtype is PyTorch's for a tensor and Python scalars: a float tensor keeps
    /// its dtype; an integer or Bool tensor with integral bounds gives its own dtype (I64 for
    /// Bool), and with a fractional, infinite or NaN bound the default float F32 (so
    /// `[0, 1, 2, 3]` clamped to `[1.5, 2.5]` is `[1.5, 1.5, 2, 2.5]`). A NaN bound makes every
    /// element NaN, as PyTorch.
    ///
    /// # Errors
    /// `InvalidArgument` when both bounds are `None`; communication failures of boxing.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        if min.is_none() && max.is_none() {
            return Err(crate::Error::InvalidArgument {
                op: "clamp",
                reason: "at least one of min and max must be given".into(),
            });
        }
        let bounds = || min.into_iter().chain(max);
        let integral = bounds().all(|b| b.is_finite() && b.fract() == 0.0);
        let x = match self.dtype() {
            d if d.is_float() => self.clone(),
            crate::DType::Bool if integral => self.to_dtype(crate::DType::I64)?,
            _ if integral => self.clone(),
            _ => self.to_dtype(crate::DType::F32)?,
        };
        if bounds().any(f64::is_nan) {
            // NaN everywhere (and no gradient, as PyTorch's), on every backend alike.
            return x.mul_scalar(0.0)?.add_scalar(f64::NAN);
        }
        let x = &x;
        record(
            super::dispatch(&Clamp(min, max), &[x]),
            "clamp",
            &[x],
            move |c, g| {
                // Strictly inside the bounds, as PyTorch: a value on a bound gets no gradient.
                let x = &c.inputs[0];
                let mut pass = g.clone();
                if let Some(lo) = min {
                    pass = pass.mul(&x.gt(&x.scalar_like(lo)?)?.to_dtype(g.dtype())?)?;
                }
                if let Some(hi) = max {
                    pass = pass.mul(&x.lt(&x.scalar_like(hi)?)?.to_dtype(g.dtype())?)?;
                }
                Ok(vec![Some(pass)])
            },
        )
    }
}

impl Tensor {
    /// `x * s` for a scalar `s`.
    ///
    /// # Errors
    /// `DTypeMismatch` for integer tensors.
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        record(
            super::dispatch(&Scale(s), &[self]),
            "mul_scalar",
            &[self],
            move |_, g| Ok(vec![Some(g.mul_scalar(s)?)]),
        )
    }

    /// `x + s` for a scalar `s`.
    ///
    /// # Errors
    /// `DTypeMismatch` for integer tensors.
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        record(
            super::dispatch(&AddScalar(s), &[self]),
            "add_scalar",
            &[self],
            |_, g| Ok(vec![Some(g.clone())]),
        )
    }
}

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
