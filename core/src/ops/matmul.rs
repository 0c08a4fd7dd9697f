//! `matmul`: 2-D, and batched (`a` of shape (..., m, k) with `b` of shape (k, n) or (..., k, n)
//! with the same batch dims). Internally either operand may be used transposed without a copy
//! (`Linear` computes `x W^T`, and the backward products use transposes of their inputs).

use super::{Kernel, Op, Signature};
use crate::autograd::{Ctx, record};
use crate::backend::MatmulDims;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// `op(a) @ op(b)`, where `op` transposes the last two dims of an operand whose flag is set.
#[derive(Clone, Copy)]
pub(super) struct Matmul {
    pub(super) ta: bool,
    pub(super) tb: bool,
}

impl Matmul {
    /// The plain product.
    pub(super) const PLAIN: Matmul = Matmul {
        ta: false,
        tb: false,
    };
}

/// `s` with its last two dims swapped when `t`.
fn logical(s: &[usize], t: bool) -> Vec<usize> {
    let mut v = s.to_vec();
    let r = v.len();
    if t && r >= 2 {
        v.swap(r - 2, r - 1);
    }
    v
}

/// The SBP of a stored operand from that of its logical (possibly transposed) view.
fn stored(sbp: Sbp, rank: usize, t: bool) -> Sbp {
    match sbp {
        Sbp::Split(d) if t && d + 2 == rank => Sbp::Split(rank - 1),
        Sbp::Split(d) if t && d + 1 == rank => Sbp::Split(rank - 2),
        other => other,
    }
}

impl Op for Matmul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    /// Floats, and I64/I32 as PyTorch's integer products (exact, wrapping on overflow); not
    /// Bool.
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        let dtype = super::common_dtype(dtypes)?;
        if dtype == DType::Bool {
            return Err(Error::DTypeMismatch {
                expected: DType::F32,
                got: dtype,
            });
        }
        Ok(dtype)
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let (a, b) = (logical(shapes[0], self.ta), logical(shapes[1], self.tb));
        let bad = |reason: String| Error::ShapeMismatch {
            op: "matmul",
            shapes: vec![a.to_vec(), b.to_vec()],
            reason,
        };
        if a.len() < 2 || b.len() < 2 {
            return Err(bad("both operands need at least 2 dimensions".into()));
        }
        let r = a.len();
        if b.len() != 2 && b[..b.len() - 2] != a[..r - 2] {
            return Err(bad(
                "batch dimensions differ (b must be 2-D or have a's batch dims)".into(),
            ));
        }
        let (k, kb) = (a[r - 1], b[b.len() - 2]);
        if k != kb {
            return Err(bad(format!("inner dimensions differ: {k} and {kb}")));
        }
        let mut out = a.to_vec();
        out[r - 1] = b[b.len() - 1];
        Ok(out)
    }

    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let (r, rb) = (shapes[0].len(), shapes[1].len());
        let batched_b = rb > 2;
        let (m, k, kb, n) = (r - 2, r - 1, rb - 2, rb - 1);
        let (s, b, p) = (Sbp::Split, Sbp::Broadcast, Sbp::Partial(ReduceOp::Sum));
        let mut v: Vec<Signature> = (0..r - 2)
            .map(|j| Signature::new([s(j), if batched_b { s(j) } else { b }], s(j)))
            .collect();
        v.extend([
            Signature::new([s(m), b], s(m)),
            Signature::new([b, s(n)], s(r - 1)),
            Signature::new([s(k), s(kb)], p),
            Signature::new([b, b], b),
            Signature::new([p, b], p),
            Signature::new([b, p], p),
        ]);
        for sig in &mut v {
            sig.inputs[0] = stored(sig.inputs[0], r, self.ta);
            sig.inputs[1] = stored(sig.inputs[1], rb, self.tb);
        }
        v
    }

    fn compute(&self, kr: &Kernel<'_>) -> Result<Buffer> {
        kr.backend
            .matmul(kr.inputs[0], kr.inputs[1], self.dims(&kr.shapes))
    }
}

impl Matmul {
    /// The kernel's dims for the stored operand shapes `shapes[0]`, `shapes[1]`.
    fn dims(&self, shapes: &[Vec<usize>]) -> MatmulDims {
        let (a, b) = (logical(&shapes[0], self.ta), logical(&shapes[1], self.tb));
        let r = a.len();
        MatmulDims {
            batch: a[..r - 2].iter().product(),
            m: a[r - 2],
            k: a[r - 1],
            n: b[b.len() - 1],
            b_batched: b.len() > 2,
            a_trans: self.ta,
            b_trans: self.tb,
        }
    }
}

/// `x Wᵀ + b` of a linear layer (`x` (..., in), `W` (out, in), `b` (out)): the product with
/// the bias added as it is stored (PyTorch's `addmm`), so the output is written once where a
/// product and an add write it, read it and write it again. Its signatures are the product's
/// with the bias laid out as the output's last dim: split where that is split, a partial sum
/// where the output is one (each rank adds its part), broadcast otherwise.
pub(super) struct Linear;

impl Linear {
    /// The product it extends.
    const PRODUCT: Matmul = Matmul {
        ta: false,
        tb: true,
    };
}

impl Op for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let out = Linear::PRODUCT.infer(&shapes[..2])?;
        let n = out[out.len() - 1];
        if shapes[2] != [n] {
            return Err(Error::ShapeMismatch {
                op: "linear",
                shapes: vec![out, shapes[2].to_vec()],
                reason: format!("the bias must be ({n}), one value per output feature"),
            });
        }
        Ok(out)
    }

    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let last = shapes[0].len() - 1;
        Linear::PRODUCT
            .signatures(&shapes[..2], out)
            .into_iter()
            .map(|mut sig| {
                let bias = match sig.output {
                    Sbp::Split(d) if d == last => Sbp::Split(0),
                    Sbp::Split(_) | Sbp::Broadcast => Sbp::Broadcast,
                    p @ Sbp::Partial(_) => p,
                };
                sig.inputs.push(bias);
                sig
            })
            .collect()
    }

    fn compute(&self, kr: &Kernel<'_>) -> Result<Buffer> {
        let dims = Linear::PRODUCT.dims(&kr.shapes);
        kr.backend
            .linear(kr.inputs[0], kr.inputs[1], kr.inputs[2], dims)
    }
}

impl Tensor {
    /// `self Wᵀ + bias` with `self` (..., in), `weight` (out, in) and `bias` (out): a linear
    /// layer in one product that adds the bias as it stores (fused on the CPU in f32 and f64;
    /// a product and an add elsewhere).
    ///
    /// # Errors
    /// As [`Tensor::matmul`]; `ShapeMismatch` for a bias that is not (out).
    pub(crate) fn linear(&self, weight: &Tensor, bias: &Tensor) -> Result<Tensor> {
        // Fused where the parameters are whole on each rank (one device, data parallel). With
        // them sharded (FSDP, tensor parallel) the product and the add each choose their own
        // layouts, as before: the fused op's cheapest signature by bytes moved gathered the
        // activations rather than the weights under FSDP (2 ranks: 7392-7550 -> 6718-6762
        // tokens/s).
        let whole = |t: &Tensor| {
            t.sbp()
                .is_none_or(|s| s.as_slice().iter().all(|x| *x == Sbp::Broadcast))
        };
        let fused = [self, weight, bias].iter().all(|t| {
            t.computes_on_cpu()
                && matches!(
                    t.dtype(),
                    crate::dtype::DType::F32 | crate::dtype::DType::F64
                )
                && t.dtype() == self.dtype()
        }) && self.ndim() >= 2
            && whole(weight)
            && whole(bias);
        if !fused {
            return self.matmul_nt(weight)?.add(bias);
        }
        record(
            super::dispatch(&Linear, &[self, weight, bias]),
            "linear",
            &[self, weight, bias],
            move |c, g| {
                let mut grads = matmul_backward(Linear::PRODUCT, c, g)?;
                let db = if c.needs[2] {
                    Some(crate::autograd::sum_to(g, c.inputs[2].shape())?)
                } else {
                    None
                };
                grads.push(db);
                Ok(grads)
            },
        )
    }

    /// Matrix product `self @ other`: (m, k) x (k, n) -> (m, n), batched over leading dims.
    ///
    /// On global tensors the output SBP follows the cheapest signature, e.g.
    /// `split(0) x broadcast -> split(0)`, `broadcast x split(1) -> split(1)`,
    /// `split(1) x split(0) -> partial_sum`.
    ///
    /// # Errors
    /// `ShapeMismatch`, `PlacementMismatch`, `DTypeMismatch`; communication failures of boxing.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_t(other, Matmul::PLAIN)
    }

    /// `self @ other^T` (the last two dims of `other` swapped) without copying the transpose:
    /// the product of a linear layer with its (out, in) weight.
    ///
    /// # Errors
    /// As [`Tensor::matmul`].
    pub fn matmul_nt(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_t(
            other,
            Matmul {
                ta: false,
                tb: true,
            },
        )
    }

    fn matmul_t(&self, other: &Tensor, op: Matmul) -> Result<Tensor> {
        record(
            super::dispatch(&op, &[self, other]),
            "matmul",
            &[self, other],
            move |c, g| matmul_backward(op, c, g),
        )
    }
}

/// `op(a)^T @ g` summed over the batch when `b` is shared (2-D) by a batched `a`: the gradient of
/// the (logical) right operand, (k, n).
fn right_grad(a: &Tensor, g: &Tensor, shared: bool) -> Result<Tensor> {
    if !shared {
        return a.matmul_t(
            g,
            Matmul {
                ta: true,
                tb: false,
            },
        );
    }
    let r = a.ndim();
    let rows: usize = a.shape()[..r - 1].iter().product();
    let a2 = a.reshape(&[rows, a.shape()[r - 1]])?;
    let g2 = g.reshape(&[rows, g.shape()[r - 1]])?;
    a2.matmul_t(
        &g2,
        Matmul {
            ta: true,
            tb: false,
        },
    )
}

/// For `out = a @ op(b)`: `ga = g @ op(b)^T`, and the gradient of `op(b)` is `a^T @ g`
/// (transposed back when `b` is stored transposed). Transposed left operands only occur inside
/// backward passes, which record nothing.
fn matmul_backward(op: Matmul, c: &Ctx<'_>, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    if op.ta {
        return Err(Error::Internal(
            "backward of a product with a transposed left operand".into(),
        ));
    }
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    let shared = b.ndim() == 2 && a.ndim() > 2;
    let ga = if c.needs[0] {
        Some(g.matmul_t(
            b,
            Matmul {
                ta: false,
                tb: !op.tb,
            },
        )?)
    } else {
        None
    };
    let gb = if !c.needs[1] {
        None
    } else if op.tb {
        // d(op(b)) = a^T g, so db = (a^T g)^T = g^T a.
        Some(right_grad(g, a, shared)?)
    } else {
        Some(right_grad(a, g, shared)?)
    };
    Ok(vec![ga, gb])
}
