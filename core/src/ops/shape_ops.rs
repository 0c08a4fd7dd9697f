//! Data movement: `reshape`, `transpose`, `cat`, `narrow`, `expand`. They commute with every
//! partial reduction, and work on every dtype.

use super::{Kernel, Op, PARTIALS, Signature, check_dim};
use crate::autograd::{record, sum_to, target_like};
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::sbp::Sbp;
use crate::shape::{checked_numel, numel};
use crate::storage::Buffer;
use crate::tensor::Tensor;

fn keep_partials(n_inputs: usize, v: &mut Vec<Signature>) {
    v.push(Signature::new(
        vec![Sbp::Broadcast; n_inputs],
        Sbp::Broadcast,
    ));
    for op in PARTIALS {
        v.push(Signature::new(
            vec![Sbp::Partial(op); n_inputs],
            Sbp::Partial(op),
        ));
    }
}

pub(super) struct Reshape(pub(super) Vec<usize>);

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let (from, to) = (numel(shapes[0]), checked_numel(&self.0)?);
        if from != to {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                shapes: vec![shapes[0].to_vec(), self.0.clone()],
                reason: format!("{from} elements cannot take a shape of {to}"),
            });
        }
        Ok(self.0.clone())
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        self.signatures_on(shapes, out, None)
    }
    fn signatures_on(
        &self,
        shapes: &[&[usize]],
        out: &[usize],
        placement: Option<&Placement>,
    ) -> Vec<Signature> {
        // A split survives when its dim maps to an output dim of the same size with the same
        // number of elements before it: then every local slice reshapes on its own. It also
        // survives a dim cut into (outer, inner...) when it falls on the outer factor, and
        // (outer, inner...) merged into one dim when it was on the outer one, provided the
        // outer size is a multiple of the ranks (then the balanced splits coincide), as
        // (B, T, H*D) split on the last dim <-> (B, T, H, D) split on heads. Weighted splits
        // of the two need not coincide, so a weighted placement boxes instead.
        let s = shapes[0];
        let hierarchy = placement
            .filter(|p| p.weights().is_none())
            .map_or(&[][..], Placement::hierarchy);
        let parts: usize = hierarchy.iter().product::<usize>().max(1);
        let mut v = vec![];
        let prefix = |x: &[usize], k: usize| x[..k].iter().product::<usize>();
        for d in 0..s.len() {
            let before = prefix(s, d);
            for e in 0..out.len() {
                if prefix(out, e) != before || out[e] == s[d] || hierarchy.is_empty() {
                    continue;
                }
                // Cut: s[d] = out[e] * out[e+1] * ... * out[f].
                let cut = (e + 1..=out.len()).any(|f| prefix(out, f) == before * s[d] && f > e + 1);
                // Merge: out[e] = s[d] * s[d+1] * ... * s[g].
                let merge = (d + 1..=s.len()).any(|g| prefix(s, g) == before * out[e] && g > d + 1);
                let outer = if cut { out[e] } else { s[d] };
                if (cut || merge) && outer % parts == 0 {
                    v.push(Signature::new([Sbp::Split(d)], Sbp::Split(e)));
                }
            }
        }
        for d in 0..s.len() {
            let before: usize = s[..d].iter().product();
            if let Some(e) = (0..out.len())
                .find(|&e| out[e] == s[d] && out[..e].iter().product::<usize>() == before)
            {
                v.push(Signature::new([Sbp::Split(d)], Sbp::Split(e)));
            }
        }
        keep_partials(1, &mut v);
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        Ok(k.inputs[0].clone())
    }
}

pub(super) struct Transpose(pub(super) usize, pub(super) usize);

impl Op for Transpose {
    fn name(&self) -> &'static str {
        "transpose"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        check_dim("transpose", self.0, shapes[0].len())?;
        check_dim("transpose", self.1, shapes[0].len())?;
        let mut s = shapes[0].to_vec();
        s.swap(self.0, self.1);
        Ok(s)
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let swap = |d: usize| {
            if d == self.0 {
                self.1
            } else if d == self.1 {
                self.0
            } else {
                d
            }
        };
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .map(|d| Signature::new([Sbp::Split(d)], Sbp::Split(swap(d))))
            .collect();
        keep_partials(1, &mut v);
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let mut perm: Vec<usize> = (0..k.shapes[0].len()).collect();
        perm.swap(self.0, self.1);
        k.backend.permute(k.inputs[0], &k.shapes[0], &perm)
    }
}

pub(super) struct Cat(pub(super) usize);

impl Op for Cat {
    fn name(&self) -> &'static str {
        "cat"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let first = shapes.first().ok_or(Error::InvalidArgument {
            op: "cat",
            reason: "no tensors".into(),
        })?;
        check_dim("cat", self.0, first.len())?;
        for s in shapes {
            let fits = s.len() == first.len()
                && s.iter()
                    .zip(first.iter())
                    .enumerate()
                    .all(|(i, (x, y))| i == self.0 || x == y);
            if !fits {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    shapes: shapes.iter().map(|s| s.to_vec()).collect(),
                    reason: format!("shapes must match except in dimension {}", self.0),
                });
            }
        }
        let mut out = first.to_vec();
        out[self.0] = shapes.iter().map(|s| s[self.0]).sum();
        Ok(out)
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let n = shapes.len();
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .filter(|&d| d != self.0)
            .map(|d| Signature::new(vec![Sbp::Split(d); n], Sbp::Split(d)))
            .collect();
        keep_partials(n, &mut v);
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let shapes: Vec<&[usize]> = k.shapes.iter().map(Vec::as_slice).collect();
        k.backend.cat(&k.inputs, &shapes, self.0)
    }
}

pub(super) struct Narrow {
    pub(super) dim: usize,
    pub(super) start: usize,
    pub(super) len: usize,
}

impl Op for Narrow {
    fn name(&self) -> &'static str {
        "narrow"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        check_dim("narrow", self.dim, s.len())?;
        if self
            .start
            .checked_add(self.len)
            .is_none_or(|e| e > s[self.dim])
        {
            return Err(Error::InvalidArgument {
                op: "narrow",
                reason: format!(
                    "range {}..{}+{} exceeds dimension {} of size {}",
                    self.start, self.start, self.len, self.dim, s[self.dim]
                ),
            });
        }
        let mut out = s.to_vec();
        out[self.dim] = self.len;
        Ok(out)
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..shapes[0].len())
            .filter(|&d| d != self.dim)
            .map(|d| Signature::new([Sbp::Split(d)], Sbp::Split(d)))
            .collect();
        keep_partials(1, &mut v);
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let mut start = vec![0; k.shapes[0].len()];
        start[self.dim] = self.start;
        k.backend
            .slice(k.inputs[0], &k.shapes[0], &start, &k.out_shape)
    }
}

pub(super) struct Expand(pub(super) Vec<usize>);

impl Op for Expand {
    fn name(&self) -> &'static str {
        "expand"
    }
    fn any_dtype(&self) -> bool {
        true
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let s = shapes[0];
        checked_numel(&self.0)?;
        let fits =
            s.len() == self.0.len() && s.iter().zip(&self.0).all(|(&a, &b)| a == b || a == 1);
        if !fits {
            return Err(Error::ShapeMismatch {
                op: "expand",
                shapes: vec![s.to_vec(), self.0.clone()],
                reason: "expand repeats size-1 dims of a tensor with as many dims".into(),
            });
        }
        Ok(self.0.clone())
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let mut v: Vec<Signature> = (0..out.len())
            .filter(|&d| shapes[0][d] == out[d])
            .map(|d| Signature::new([Sbp::Split(d)], Sbp::Split(d)))
            .collect();
        keep_partials(1, &mut v);
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        // Selecting the input on both sides of a true scalar condition repeats the size-1
        // dims: data movement, so every dtype (integers, Bool) expands on every backend.
        let cond = Buffer::from(crate::storage::HostData::Bool(vec![1]));
        k.backend.select(
            [&cond, k.inputs[0], k.inputs[0]],
            [&[], &k.shapes[0], &k.shapes[0]],
            &k.out_shape,
        )
    }
}

impl Tensor {
    /// The elements reversed along each of `dims`, as PyTorch's `flip`: an `index_select` with
    /// the reversed indices per dim, so any layout and dtype, differentiable.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<i64>()?, [3, 2, 1, 6, 5, 4]);
    /// assert_eq!(x.flip(&[0, 1])?.to_vec::<i64>()?, [6, 5, 4, 3, 2, 1]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `DimOutOfRange`; `InvalidArgument` for a dim given twice.
    pub fn flip(&self, dims: &[usize]) -> Result<Tensor> {
        let mut out = self.clone();
        for (i, &d) in dims.iter().enumerate() {
            check_dim("flip", d, self.ndim())?;
            if dims[..i].contains(&d) {
                return Err(Error::InvalidArgument {
                    op: "flip",
                    reason: format!("dim {d} appears more than once in {dims:?}"),
                });
            }
            let n = self.shape()[d];
            let rev: Vec<i64> = (0..n as i64).rev().collect();
            out = out.index_select(d, &Tensor::from_vec(rev, &[n], target_like(self))?)?;
        }
        Ok(out)
    }

    /// The tensor tiled `repeats[i]` times along dim `i`, as PyTorch's `repeat` (more repeats
    /// than dims add leading dims): a size-1 dim before each dim, expanded and merged, so any
    /// layout and dtype, differentiable.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?;
    /// let y = x.repeat(&[2, 2])?;
    /// assert_eq!(y.shape(), &[2, 4]);
    /// assert_eq!(y.to_vec::<f32>()?, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` for fewer repeats than dims; `ShapeOverflow` for a result too large.
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        if repeats.len() < self.ndim() {
            return Err(Error::InvalidArgument {
                op: "repeat",
                reason: format!(
                    "repeats {repeats:?}: expected at least one per dim of a tensor of shape {:?}",
                    self.shape()
                ),
            });
        }
        let lead = repeats.len() - self.ndim();
        let shape: Vec<usize> = (0..repeats.len())
            .map(|i| if i < lead { 1 } else { self.shape()[i - lead] })
            .collect();
        let spaced: Vec<usize> = shape.iter().flat_map(|&s| [1, s]).collect();
        let tiled: Vec<usize> = shape
            .iter()
            .zip(repeats)
            .flat_map(|(&s, &r)| [r, s])
            .collect();
        let out: Vec<usize> = shape.iter().zip(repeats).map(|(&s, &r)| s * r).collect();
        checked_numel(&out)?;
        self.reshape(&spaced)?.expand(&tiled)?.reshape(&out)
    }

    /// Repeats the size-1 dimensions of this tensor to reach `shape`, any dtype; as PyTorch's
    /// `expand`, `shape` may have more dims than the tensor (new leading dims).
    ///
    /// # Errors
    /// `ShapeMismatch` when a dim of size other than 1 would change or `shape` has fewer dims.
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        if shape.len() > self.ndim() {
            let mut lead = vec![1; shape.len() - self.ndim()];
            lead.extend_from_slice(self.shape());
            return self.reshape(&lead)?.expand(shape);
        }
        record(
            super::dispatch(&Expand(shape.to_vec()), &[self]),
            "expand",
            &[self],
            |c, g| Ok(vec![Some(sum_to(g, c.inputs[0].shape())?)]),
        )
    }

    /// The same data with another shape of the same element count.
    ///
    /// # Errors
    /// `ShapeMismatch` when the element counts differ.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        record(
            super::dispatch(&Reshape(shape.to_vec()), &[self]),
            "reshape",
            &[self],
            |c, g| Ok(vec![Some(g.reshape(c.inputs[0].shape())?)]),
        )
    }

    /// Swaps dimensions `d0` and `d1`.
    ///
    /// # Errors
    /// `DimOutOfRange`.
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Tensor> {
        record(
            super::dispatch(&Transpose(d0, d1), &[self]),
            "transpose",
            &[self],
            move |_, g| Ok(vec![Some(g.transpose(d0, d1)?)]),
        )
    }

    /// Concatenates `tensors` (`&[Tensor]` or `&[&Tensor]`) along `dim`. Tensors of different
    /// dtypes are promoted to a common one first, as PyTorch's `cat` (F32 with F64 gives F64,
    /// I32 with I64 gives I64).
    ///
    /// # Errors
    /// `ShapeMismatch` when the other dims differ, `DimOutOfRange`, `InvalidArgument` for none.
    pub fn cat<T: std::borrow::Borrow<Tensor>>(tensors: &[T], dim: usize) -> Result<Tensor> {
        let refs: Vec<&Tensor> = tensors.iter().map(|t| t.borrow()).collect();
        let dtype = super::result_type(&refs);
        let cast: Vec<Tensor>;
        let refs: Vec<&Tensor> = if refs.iter().all(|t| t.dtype() == dtype) {
            refs
        } else {
            cast = refs
                .iter()
                .map(|t| t.to_dtype(dtype))
                .collect::<Result<_>>()?;
            cast.iter().collect()
        };
        record(
            super::dispatch(&Cat(dim), &refs),
            "cat",
            &refs,
            move |c, g| {
                let mut start = 0;
                c.inputs
                    .iter()
                    .zip(&c.needs)
                    .map(|(t, &need)| {
                        let len = t.shape()[dim];
                        start += len;
                        need.then(|| g.narrow(dim, start - len, len)).transpose()
                    })
                    .collect()
            },
        )
    }

    /// `len` elements of dimension `dim` starting at `start`.
    ///
    /// # Errors
    /// `DimOutOfRange`, `InvalidArgument` for a range past the end.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        record(
            super::dispatch(&Narrow { dim, start, len }, &[self]),
            "narrow",
            &[self],
            move |c, g| {
                // Pad the gradient with zeros back to the input's extent.
                let x = &c.inputs[0];
                let zeros = |n: usize| {
                    let mut s = x.shape().to_vec();
                    s[dim] = n;
                    Tensor::full_dtype(&s, 0.0, g.dtype(), target_like(x))
                };
                let after = x.shape()[dim] - start - len;
                let parts = [zeros(start)?, g.clone(), zeros(after)?];
                Ok(vec![Some(Tensor::cat(&parts, dim)?)])
            },
        )
    }
}
