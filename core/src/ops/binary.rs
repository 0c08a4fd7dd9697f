//! `add sub mul div` with NumPy broadcasting, and the `&a + &b` operators.

use super::{Kernel, Op, Signature};
use crate::autograd::{Ctx, record, sum_to};
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

pub(super) struct Binary(pub(super) BinaryOp);

impl Op for Binary {
    fn name(&self) -> &'static str {
        match self.0 {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        }
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        broadcast_shapes(self.name(), shapes[0], shapes[1])
    }

    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        // Splitting output dim d splits each input along its aligned dim when it has the full
        // size there; an input that broadcasts along d (size 1 or absent) must be whole.
        let along = |s: &[usize], d: usize| -> Sbp {
            let pad = out.len() - s.len();
            if d >= pad && s[d - pad] == out[d] {
                Sbp::Split(d - pad)
            } else {
                Sbp::Broadcast
            }
        };
        let mut v: Vec<Signature> = (0..out.len())
            .map(|d| Signature::new([along(shapes[0], d), along(shapes[1], d)], Sbp::Split(d)))
            .collect();
        v.push(Signature::new(
            [Sbp::Broadcast, Sbp::Broadcast],
            Sbp::Broadcast,
        ));
        let p = Sbp::Partial(ReduceOp::Sum);
        match self.0 {
            BinaryOp::Add | BinaryOp::Sub => v.push(Signature::new([p, p], p)),
            BinaryOp::Mul => {
                v.push(Signature::new([p, Sbp::Broadcast], p));
                v.push(Signature::new([Sbp::Broadcast, p], p));
            }
            BinaryOp::Div => v.push(Signature::new([p, Sbp::Broadcast], p)),
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

/// The gradients of `out = op(a, b)`, summed back over broadcast dims.
fn binary_backward(op: BinaryOp, c: &Ctx<'_>, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    // Input i's gradient from f, when needed, summed back to the input's shape.
    let grad = |i: usize, f: &dyn Fn() -> Result<Tensor>| -> Result<Option<Tensor>> {
        if c.needs[i] {
            Ok(Some(sum_to(&f()?, c.inputs[i].shape())?))
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
                    let op = Binary(BinaryOp::$op);
                    record(
                        super::dispatch(&op, &[self, other]),
                        op.name(),
                        &[self, other],
                        |c, g| binary_backward(BinaryOp::$op, c, g),
                    )
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
    /// `self / other` elementwise, with broadcasting.
    div, Div, div => Div;
}
