//! Elementwise functions of one tensor: neg exp log sqrt square relu gelu sigmoid tanh, and
//! multiplication by a scalar.

use super::{Kernel, Op, Signature};
use crate::backend::{Backend, UnaryOp};
use crate::error::Result;
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::HostData;
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
        }
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        Ok(shapes[0].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        elementwise_signatures(shapes[0].len(), self.0 == UnaryOp::Neg)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<HostData> {
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
    fn compute(&self, k: &Kernel<'_>) -> Result<HostData> {
        k.backend.scale(k.inputs[0], self.0)
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
                    super::dispatch(&Unary(UnaryOp::$op), &[self])
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
        super::dispatch(&Scale(s), &[self])
    }
}

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
