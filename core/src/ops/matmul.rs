//! `matmul`: 2-D, and batched (`a` of shape (..., m, k) with `b` of shape (k, n) or (..., k, n)
//! with the same batch dims).

use super::{Kernel, Op, Signature};
use crate::autograd::{Ctx, record};
use crate::backend::{Backend, MatmulDims};
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::HostData;
use crate::tensor::Tensor;

pub(super) struct Matmul;

impl Op for Matmul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let (a, b) = (shapes[0], shapes[1]);
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
        v
    }

    fn compute(&self, kr: &Kernel<'_>) -> Result<HostData> {
        let (a, b) = (&kr.shapes[0], &kr.shapes[1]);
        let r = a.len();
        let dims = MatmulDims {
            batch: a[..r - 2].iter().product(),
            m: a[r - 2],
            k: a[r - 1],
            n: b[b.len() - 1],
            b_batched: b.len() > 2,
        };
        kr.backend.matmul(kr.inputs[0], kr.inputs[1], dims)
    }
}

impl Tensor {
    /// Matrix product `self @ other`: (m, k) x (k, n) -> (m, n), batched over leading dims.
    ///
    /// On global tensors the output SBP follows the cheapest signature, e.g.
    /// `split(0) x broadcast -> split(0)`, `broadcast x split(1) -> split(1)`,
    /// `split(1) x split(0) -> partial_sum`.
    ///
    /// # Errors
    /// `ShapeMismatch`, `PlacementMismatch`, `DTypeMismatch`; communication failures of boxing.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        record(
            super::dispatch(&Matmul, &[self, other]),
            "matmul",
            &[self, other],
            matmul_backward,
        )
    }
}

/// `ga = g @ b^T`, `gb = a^T @ g` (for a 2-D `b` under a batched `a`, summed over the batch by
/// folding the batch into the rows).
fn matmul_backward(c: &Ctx<'_>, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    let (r, rb) = (a.ndim(), b.ndim());
    let ga = if c.needs[0] {
        Some(g.matmul(&b.transpose(rb - 2, rb - 1)?)?)
    } else {
        None
    };
    let gb = if !c.needs[1] {
        None
    } else if rb == 2 && r > 2 {
        let rows: usize = a.shape()[..r - 1].iter().product();
        let a2 = a.reshape(&[rows, a.shape()[r - 1]])?;
        let g2 = g.reshape(&[rows, g.shape()[r - 1]])?;
        Some(a2.transpose(0, 1)?.matmul(&g2)?)
    } else {
        Some(a.transpose(r - 2, r - 1)?.matmul(g)?)
    };
    Ok(vec![ga, gb])
}
