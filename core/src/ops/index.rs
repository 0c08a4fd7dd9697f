//! Indexing along a dim: `gather` (PyTorch's `torch.gather`), `scatter_add`, `index_select`.
//! Indices (I64 or I32) are checked once, here in core (`IndexOutOfRange`), before any kernel.

use super::gather::check_indices;
use super::{Kernel, Op, Signature, check_dim};
use crate::autograd::record;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// `torch.gather(x, dim, idx)`: inputs (x, idx).
struct GatherDim(usize);

/// Checks the index shape against `x` for gather/scatter: same rank, and no larger than `x`
/// on the dims other than `dim`.
fn check_index_shape(op: &'static str, x: &[usize], idx: &[usize], dim: usize) -> Result<()> {
    check_dim(op, dim, x.len())?;
    if idx.len() != x.len() || (0..x.len()).any(|d| d != dim && idx[d] > x[d]) {
        return Err(Error::ShapeMismatch {
            op,
            shapes: vec![x.to_vec(), idx.to_vec()],
            reason: format!(
                "the index must have the tensor's rank and be no larger than it on dims other than {dim}"
            ),
        });
    }
    Ok(())
}

/// Splits along the dims other than `dim` where both operands have the same size.
fn aligned_splits(a: &[usize], b: &[usize], dim: usize, n: usize) -> Vec<Signature> {
    let mut v: Vec<Signature> = (0..a.len())
        .filter(|&d| d != dim && a[d] == b[d])
        .map(|d| Signature::new(vec![Sbp::Split(d); n], Sbp::Split(d)))
        .collect();
    v.push(Signature::new(vec![Sbp::Broadcast; n], Sbp::Broadcast));
    v
}

impl Op for GatherDim {
    fn name(&self) -> &'static str {
        "gather"
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        index_dtype(dtypes[1])?;
        Ok(dtypes[0])
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_index_shape("gather", shapes[0], shapes[1], self.0)?;
        Ok(shapes[1].to_vec())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        aligned_splits(shapes[0], shapes[1], self.0, 2)
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        check_indices("gather", k.inputs[1], k.shapes[0][self.0])?;
        k.backend
            .gather_dim(k.inputs[0], &k.shapes[0], self.0, k.inputs[1], &k.shapes[1])
    }
}

/// `zeros(out).scatter_add_(dim, idx, src)`: inputs (idx, src).
struct ScatterDim {
    dim: usize,
    out: Vec<usize>,
}

impl Op for ScatterDim {
    fn name(&self) -> &'static str {
        "scatter_add"
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        index_dtype(dtypes[0])?;
        Ok(dtypes[1])
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_index_shape("scatter_add", &self.out, shapes[0], self.dim)?;
        if shapes[1].len() != shapes[0].len() || shapes[0].iter().zip(shapes[1]).any(|(i, s)| i > s)
        {
            return Err(Error::ShapeMismatch {
                op: "scatter_add",
                shapes: vec![shapes[0].to_vec(), shapes[1].to_vec()],
                reason: "the source must cover the index".into(),
            });
        }
        Ok(self.out.clone())
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let mut v = aligned_splits(out, shapes[0], self.dim, 2);
        v.retain(|s| match s.output {
            Sbp::Split(d) => shapes[1][d] == shapes[0][d],
            _ => true,
        });
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        check_indices("scatter_add", k.inputs[0], k.out_shape[self.dim])?;
        // The source may be larger than the index: only its leading box is scattered.
        let src = if k.shapes[1] == k.shapes[0] {
            k.inputs[1].clone()
        } else {
            let zero = vec![0; k.shapes[0].len()];
            k.backend
                .slice(k.inputs[1], &k.shapes[1], &zero, &k.shapes[0])?
        };
        k.backend
            .scatter_add_dim(&src, &k.out_shape, self.dim, k.inputs[0], &k.shapes[0])
    }
}

fn index_dtype(d: DType) -> Result<()> {
    if d.is_int() {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            expected: DType::I64,
            got: d,
        })
    }
}

impl Tensor {
    /// PyTorch's `torch.gather(self, dim, index)`: `out[i][j][k] = self[index[i][j][k]][j][k]`
    /// for `dim == 0`, and so on; the output has the index's shape.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    /// let i = Tensor::from_vec(vec![1i64, 0, 0, 0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![2.0, 1.0, 3.0, 3.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `IndexOutOfRange`, `DTypeMismatch` for non-integer indices, `ShapeMismatch`,
    /// `DimOutOfRange`.
    pub fn gather(&self, dim: usize, index: &Tensor) -> Result<Tensor> {
        let index = &index.detach();
        record(
            super::dispatch(&GatherDim(dim), &[self, index]),
            "gather",
            &[self, index],
            move |c, g| {
                let x = &c.inputs[0];
                Ok(vec![
                    Some(Tensor::scatter_into(x.shape(), dim, &c.inputs[1], g)?),
                    None,
                ])
            },
        )
    }

    /// PyTorch's `self.scatter_add(dim, index, src)` (not in place): `src`'s elements added to
    /// a copy of `self` at `index` along `dim`.
    ///
    /// # Errors
    /// As [`Tensor::gather`].
    pub fn scatter_add(&self, dim: usize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        check_dim("scatter_add", dim, self.ndim())?;
        let added = Tensor::scatter_into(self.shape(), dim, index, &src.to_dtype(self.dtype())?)?;
        self.add(&added)
    }

    /// `zeros(shape).scatter_add_(dim, index, src)`, differentiable in `src`.
    fn scatter_into(shape: &[usize], dim: usize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let index = &index.detach();
        let op = ScatterDim {
            dim,
            out: shape.to_vec(),
        };
        record(
            super::dispatch(&op, &[index, src]),
            "scatter_add",
            &[index, src],
            move |c, g| {
                let picked = g.gather(dim, &c.inputs[0])?;
                // Pad back to the source's shape where it was larger than the index.
                let src_shape = c.inputs[1].shape();
                let mut out = picked;
                for d in 0..src_shape.len() {
                    let have = out.shape()[d];
                    if have < src_shape[d] {
                        let mut s = out.shape().to_vec();
                        s[d] = src_shape[d] - have;
                        let pad = Tensor::full_dtype(
                            &s,
                            0.0,
                            g.dtype(),
                            crate::autograd::target_like(g),
                        )?;
                        out = Tensor::cat(&[out, pad], d)?;
                    }
                }
                Ok(vec![None, Some(out)])
            },
        )
    }

    /// The entries of `self` at `index` (1-D, or 0-d as one index; I64 or I32) along `dim`
    /// (PyTorch's `index_select`).
    ///
    /// # Errors
    /// `IndexOutOfRange`, `DTypeMismatch`, `ShapeMismatch` for an index of 2 or more dims,
    /// `DimOutOfRange`.
    pub fn index_select(&self, dim: usize, index: &Tensor) -> Result<Tensor> {
        check_dim("index_select", dim, self.ndim())?;
        if index.ndim() == 0 {
            // a 0-d index is one index (PyTorch): the dim stays, of length 1
            return self.index_select(dim, &index.reshape(&[1])?);
        }
        if index.ndim() != 1 {
            return Err(Error::ShapeMismatch {
                op: "index_select",
                shapes: vec![self.shape().to_vec(), index.shape().to_vec()],
                reason: "the index must be 1-D".into(),
            });
        }
        // Move `dim` first, look its rows up, and move it back.
        let n = self.ndim();
        let mut perm: Vec<usize> = (0..n).collect();
        perm.remove(dim);
        perm.insert(0, dim);
        let mut inv = vec![0; n];
        for (i, &d) in perm.iter().enumerate() {
            inv[d] = i;
        }
        // Errors of the inner ops (an index out of range above all) name `index_select`.
        self.permute(&perm)
            .and_then(|t| t.gather_rows(index))
            .and_then(|t| t.permute(&inv))
            .map_err(super::renamed("index_select"))
    }
}
