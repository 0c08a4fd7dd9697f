//! Layout operators of round 2: `permute` (one strided copy), and `squeeze`, `unsqueeze`,
//! `flatten`, `stack`, `split`, `chunk`, composed of reshape, cat and narrow (so they keep
//! whatever split those keep, and their gradients come from those ops').

use super::{Kernel, Op, PARTIALS, Signature, check_dim};
use crate::autograd::record;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// `out.shape[i] = in.shape[perm[i]]`.
struct Permute(Vec<usize>);

impl Op for Permute {
    fn name(&self) -> &'static str {
        "permute"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let n = shapes[0].len();
        let mut seen = vec![false; n];
        if self.0.len() != n {
            return Err(Error::InvalidArgument {
                op: "permute",
                reason: format!(
                    "{:?} has {} entries for a tensor of {n} dims",
                    self.0,
                    self.0.len()
                ),
            });
        }
        for &p in &self.0 {
            check_dim("permute", p, n)?;
            if std::mem::replace(&mut seen[p], true) {
                return Err(Error::InvalidArgument {
                    op: "permute",
                    reason: format!("dim {p} appears twice in {:?}", self.0),
                });
            }
        }
        Ok(self.0.iter().map(|&p| shapes[0][p]).collect())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .map(|d| {
                let to = self.0.iter().position(|&p| p == d).unwrap_or(d);
                Signature::new([Sbp::Split(d)], Sbp::Split(to))
            })
            .collect();
        v.push(Signature::new([Sbp::Broadcast], Sbp::Broadcast));
        for op in PARTIALS {
            v.push(Signature::new([Sbp::Partial(op)], Sbp::Partial(op)));
        }
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        k.backend.permute(k.inputs[0], &k.shapes[0], &self.0)
    }
}

impl Tensor {
    /// The dims reordered: dim `i` of the result is dim `perm[i]` of this tensor (PyTorch's
    /// `permute`). A split dim stays split (wherever it moves to).
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
    /// let x = Tensor::zeros(&[2, 3, 4], Device::Cpu)?;
    /// assert_eq!(x.permute(&[2, 0, 1])?.shape(), &[4, 2, 3]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` when `perm` is not a permutation of the dims; `DimOutOfRange`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let p = perm.to_vec();
        record(
            super::dispatch(&Permute(p.clone()), &[self]),
            "permute",
            &[self],
            move |_, g| {
                let mut inv = vec![0; p.len()];
                for (i, &d) in p.iter().enumerate() {
                    inv[d] = i;
                }
                Ok(vec![Some(g.permute(&inv)?)])
            },
        )
    }

    /// Removes dim `dim` when its size is 1 (as PyTorch, a dim of another size is kept, and a
    /// 0-d tensor squeezes to itself).
    ///
    /// # Errors
    /// `DimOutOfRange`.
    pub fn squeeze(&self, dim: usize) -> Result<Tensor> {
        if self.ndim() == 0 && dim == 0 {
            // a 0-d tensor squeezes to itself (PyTorch takes dim 0 of a scalar)
            return Ok(self.clone());
        }
        check_dim("squeeze", dim, self.ndim())?;
        if self.shape()[dim] != 1 {
            return Ok(self.clone());
        }
        let mut s = self.shape().to_vec();
        s.remove(dim);
        self.reshape(&s)
    }

    /// Inserts a dim of size 1 at `dim` (`0..=ndim`).
    ///
    /// # Errors
    /// `DimOutOfRange` for `dim > ndim`.
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        check_dim("unsqueeze", dim, self.ndim() + 1)?;
        let mut s = self.shape().to_vec();
        s.insert(dim, 1);
        self.reshape(&s)
    }

    /// Dims `start..=end` merged into one (PyTorch's `flatten(start_dim, end_dim)`).
    ///
    /// # Errors
    /// `DimOutOfRange`; `InvalidArgument` when `start > end`.
    pub fn flatten(&self, start: usize, end: usize) -> Result<Tensor> {
        if self.ndim() == 0 {
            return self.reshape(&[1]);
        }
        check_dim("flatten", start, self.ndim())?;
        check_dim("flatten", end, self.ndim())?;
        if start > end {
            return Err(Error::InvalidArgument {
                op: "flatten",
                reason: format!("start dim {start} is after end dim {end}"),
            });
        }
        let s = self.shape();
        let merged: usize = s[start..=end].iter().product();
        let shape: Vec<usize> = s[..start]
            .iter()
            .copied()
            .chain(std::iter::once(merged))
            .chain(s[end + 1..].iter().copied())
            .collect();
        self.reshape(&shape)
    }

    /// Joins tensors of one shape along a new dim `dim` (`0..=ndim`); different dtypes are
    /// promoted to a common one first, as [`Tensor::cat`].
    ///
    /// # Errors
    /// `InvalidArgument` for no tensors; `ShapeMismatch` for different shapes; `DimOutOfRange`.
    pub fn stack<T: std::borrow::Borrow<Tensor>>(tensors: &[T], dim: usize) -> Result<Tensor> {
        let first = tensors.first().ok_or(Error::InvalidArgument {
            op: "stack",
            reason: "no tensors".into(),
        })?;
        let shape = first.borrow().shape().to_vec();
        if let Some(t) = tensors.iter().find(|t| t.borrow().shape() != shape) {
            return Err(Error::ShapeMismatch {
                op: "stack",
                shapes: vec![shape, t.borrow().shape().to_vec()],
                reason: "stacked tensors must share one shape".into(),
            });
        }
        let parts: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.borrow().unsqueeze(dim))
            .collect::<Result<_>>()?;
        Tensor::cat(&parts, dim)
    }

    /// Pieces of `size` along `dim`, the last one shorter when `size` does not divide the dim
    /// (PyTorch's `split` with an int).
    ///
    /// # Errors
    /// `InvalidArgument` for `size == 0`; `DimOutOfRange`.
    pub fn split(&self, size: usize, dim: usize) -> Result<Vec<Tensor>> {
        check_dim("split", dim, self.ndim())?;
        if size == 0 {
            return Err(Error::InvalidArgument {
                op: "split",
                reason: "the piece size must be positive".into(),
            });
        }
        let len = self.shape()[dim];
        (0..len.div_ceil(size).max(1))
            .map(|i| self.narrow(dim, i * size, size.min(len - (i * size).min(len))))
            .collect()
    }

    /// `n` pieces along `dim` as PyTorch's `chunk`: `ceil(len / n)` each, the last shorter
    /// (so there may be fewer than `n`); an empty dim gives `n` empty pieces.
    ///
    /// # Errors
    /// `InvalidArgument` for `n == 0`; `DimOutOfRange`.
    pub fn chunk(&self, n: usize, dim: usize) -> Result<Vec<Tensor>> {
        check_dim("chunk", dim, self.ndim())?;
        if n == 0 {
            return Err(Error::InvalidArgument {
                op: "chunk",
                reason: "the number of chunks must be positive".into(),
            });
        }
        let len = self.shape()[dim];
        if len == 0 {
            // As PyTorch: an empty dim gives `n` empty pieces.
            return (0..n).map(|_| self.narrow(dim, 0, 0)).collect();
        }
        self.split(len.div_ceil(n), dim)
    }
}
