//! Row lookups (`gather_rows`, the embedding lookup) and their transpose, the scatter-add of
//! rows, which is the lookup's gradient.

use super::{Kernel, Op, Signature};
use crate::autograd::record;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// Checks for integer indices (I64 or I32); the output has the table's dtype (a scatter-add
/// needs a float source).
fn index_dtypes(op: &'static str, index: DType, values: DType, float: bool) -> Result<DType> {
    if !index.is_int() {
        return Err(Error::DTypeMismatch {
            expected: DType::I64,
            got: index,
        });
    }
    if float && !values.is_float() {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("the source must hold floating-point values, got {values}"),
        });
    }
    Ok(values)
}

/// Checks integer indices (a local component's) against a dimension of `size`, once, in core:
/// `IndexOutOfRange` on every backend alike. Negative indices are out of range.
pub(super) fn check_indices(op: &'static str, idx: &Buffer, size: usize) -> Result<()> {
    let v = crate::cpu::select::indices(idx.host()?)?;
    match v.iter().find(|&&i| i < 0 || i as u64 >= size as u64) {
        Some(&index) => Err(Error::IndexOutOfRange { op, index, size }),
        None => Ok(()),
    }
}

/// `table[indices]`: inputs (table (rows, ...), indices (any shape, I64)).
pub(super) struct Gather;

impl Op for Gather {
    fn name(&self) -> &'static str {
        "gather_rows"
    }
    fn arithmetic(&self) -> bool {
        false
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        index_dtypes(self.name(), dtypes[1], dtypes[0], false)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let (table, idx) = (shapes[0], shapes[1]);
        if table.is_empty() {
            return Err(Error::ShapeMismatch {
                op: "gather_rows",
                shapes: vec![table.to_vec(), idx.to_vec()],
                reason: "the table needs at least one dimension (its rows)".into(),
            });
        }
        Ok(idx.iter().chain(&table[1..]).copied().collect())
    }
    fn signatures(&self, shapes: &[&[usize]], _: &[usize]) -> Vec<Signature> {
        let (nt, ni) = (shapes[0].len(), shapes[1].len());
        let (b, p) = (Sbp::Broadcast, Sbp::Partial(ReduceOp::Sum));
        let mut v: Vec<Signature> = (0..ni)
            .map(|d| Signature::new([b, Sbp::Split(d)], Sbp::Split(d)))
            .collect();
        v.extend((1..nt).map(|j| Signature::new([Sbp::Split(j), b], Sbp::Split(ni + j - 1))));
        v.push(Signature::new([b, b], b));
        v.push(Signature::new([p, b], p));
        // A table split over its rows (vocabulary parallel): each rank looks up the rows it
        // holds and gives zeros for the others, so the parts sum to the lookup.
        v.push(Signature::new([Sbp::Split(0), b], p));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let t = &k.shapes[0];
        check_indices("gather_rows", k.inputs[1], k.global_shapes[0][0])?;
        let row_len = t[1..].iter().product();
        if t[0] == k.global_shapes[0][0] {
            return k
                .backend
                .gather_rows(k.inputs[0], t[0], row_len, k.inputs[1]);
        }
        k.backend
            .gather_rows_partial(k.inputs[0], t[0], row_len, k.inputs[1], k.offsets[0][0])
    }
}

/// The transpose of [`Gather`]: inputs (indices, src), output (rows, ...) of zeros plus the
/// rows of `src` added at their indices.
pub(super) struct ScatterRows {
    pub(super) rows: usize,
}

impl Op for ScatterRows {
    fn name(&self) -> &'static str {
        "scatter_add_rows"
    }
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        index_dtypes(self.name(), dtypes[0], dtypes[1], true)
    }
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let (idx, src) = (shapes[0], shapes[1]);
        if src.len() < idx.len() || src[..idx.len()] != *idx {
            return Err(Error::ShapeMismatch {
                op: "scatter_add_rows",
                shapes: vec![idx.to_vec(), src.to_vec()],
                reason: "the source must start with the indices' shape".into(),
            });
        }
        Ok(std::iter::once(self.rows)
            .chain(src[idx.len()..].iter().copied())
            .collect())
    }
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature> {
        let ni = shapes[0].len();
        let (b, p) = (Sbp::Broadcast, Sbp::Partial(ReduceOp::Sum));
        let mut v: Vec<Signature> = (0..ni)
            .map(|d| Signature::new([Sbp::Split(d), Sbp::Split(d)], p))
            .collect();
        v.extend(
            (1..out.len()).map(|j| Signature::new([b, Sbp::Split(ni + j - 1)], Sbp::Split(j))),
        );
        v.push(Signature::new([b, b], b));
        v.push(Signature::new([b, p], p));
        v
    }
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer> {
        let o = &k.out_shape;
        check_indices("scatter_add_rows", k.inputs[0], self.rows)?;
        k.backend
            .scatter_add_rows(k.inputs[1], o[0], o[1..].iter().product(), k.inputs[0])
    }
}

impl Tensor {
    /// Rows of this table (shape `(rows, ...)`) picked by integer `indices` (I64, any shape):
    /// the output has shape `indices.shape() ++ self.shape()[1..]`. This is the embedding
    /// lookup; its gradient adds the output gradient's rows back at their indices.
    ///
    /// # Errors
    /// `DTypeMismatch` for non-integer indices, `IndexOutOfRange` for an index outside the
    /// table, `PlacementMismatch`.
    pub fn gather_rows(&self, indices: &Tensor) -> Result<Tensor> {
        let indices = &indices.detach();
        record(
            super::dispatch(&Gather, &[self, indices]),
            "gather_rows",
            &[self, indices],
            |c, g| {
                let rows = c.inputs[0].shape()[0];
                let table = super::dispatch(&ScatterRows { rows }, &[&c.inputs[1], g])?;
                Ok(vec![Some(table), None])
            },
        )
    }
}
