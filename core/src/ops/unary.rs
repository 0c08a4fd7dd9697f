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
fn elementwise_signatures(ndim: usize, linear: bool) -> Vec<Signature> {
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
        }
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

/// The gradient of `y = op(x)` from `y`'s gradient `g`.
fn unary_backward(op: UnaryOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
    Ok(Some(match op {
        UnaryOp::Neg => g.neg()?,
        UnaryOp::Exp => g.mul(y)?,
        UnaryOp::Log => g.div(x)?,
        UnaryOp::Sqrt => g.div(y)?.mul_scalar(0.5)?,
        UnaryOp::Square => g.mul(x)?.mul_scalar(2.0)?,
        UnaryOp::Relu => g.mul(&x.unary(UnaryOp::Step)?)?,
        UnaryOp::Gelu => g.mul(&x.unary(UnaryOp::GeluGrad)?)?,
        UnaryOp::Sigmoid => g.mul(&y.sub(&y.square()?)?)?,
        UnaryOp::Tanh => g.sub(&g.mul(&y.square()?)?)?,
        // A step is flat almost everywhere. The GELU derivative is only used inside backward
        // passes, which record nothing, so its own derivative is never asked for.
        UnaryOp::Step | UnaryOp::GeluGrad => return Ok(None),
    }))
}

impl Tensor {
    /// `op(x)` elementwise, recorded for autograd.
    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        record(
            super::dispatch(&Unary(op), &[self]),
            Unary(op).name(),
            &[self],
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
