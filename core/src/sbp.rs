//! SBP: how a global tensor maps onto the ranks of one placement axis (split, broadcast, partial),
//! the n-d [`NdSbp`] (one entry per placement axis), and OneFlow's balanced splitter, from which
//! every rank's box of the logical tensor follows.

use std::fmt;
use std::ops::Range;

use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::reduce::ReduceOp;
use crate::shape::Region;

/// The distribution of a tensor over one placement axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sbp {
    /// Each rank holds one balanced slice along the dimension.
    Split(usize),
    /// Each rank holds the whole tensor.
    Broadcast,
    /// Each rank holds a full-shape component; the value is their sum, min or max.
    Partial(ReduceOp),
}

impl Sbp {
    /// `split(dim)`.
    pub fn split(dim: usize) -> Sbp {
        Sbp::Split(dim)
    }
    /// `broadcast`.
    pub fn broadcast() -> Sbp {
        Sbp::Broadcast
    }
    /// `partial_sum`.
    pub fn partial_sum() -> Sbp {
        Sbp::Partial(ReduceOp::Sum)
    }
    /// `partial_min`.
    pub fn partial_min() -> Sbp {
        Sbp::Partial(ReduceOp::Min)
    }
    /// `partial_max`.
    pub fn partial_max() -> Sbp {
        Sbp::Partial(ReduceOp::Max)
    }
    /// The split dimension, if this is a split.
    pub fn split_dim(self) -> Option<usize> {
        match self {
            Sbp::Split(d) => Some(d),
            _ => None,
        }
    }
    /// The reduction, if this is a partial.
    pub fn partial_op(self) -> Option<ReduceOp> {
        match self {
            Sbp::Partial(op) => Some(op),
            _ => None,
        }
    }
}

impl fmt::Display for Sbp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sbp::Split(d) => write!(f, "split(dim={d})"),
            Sbp::Broadcast => f.write_str("broadcast"),
            Sbp::Partial(op) => write!(f, "partial_{op}"),
        }
    }
}

/// One [`Sbp`] per placement axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NdSbp(Vec<Sbp>);

impl NdSbp {
    /// The entries, one per placement axis.
    pub fn as_slice(&self) -> &[Sbp] {
        &self.0
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True for no entries (never valid on a placement).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// A copy with entry `axis` replaced.
    pub fn with(&self, axis: usize, sbp: Sbp) -> NdSbp {
        let mut v = self.0.clone();
        v[axis] = sbp;
        NdSbp(v)
    }
    /// All entries broadcast, for `n` axes.
    pub fn broadcast(n: usize) -> NdSbp {
        NdSbp(vec![Sbp::Broadcast; n])
    }
    /// Whether any entry is partial.
    pub fn has_partial(&self) -> bool {
        self.0.iter().any(|s| matches!(s, Sbp::Partial(_)))
    }

    /// Checks this SBP against a placement and a tensor rank.
    ///
    /// # Errors
    /// `SbpAxesMismatch` when the entry count differs from the placement's axes;
    /// `SplitDimOutOfRange` when a split names a dimension the tensor lacks.
    pub fn check(&self, placement: &Placement, ndim: usize) -> Result<()> {
        if self.0.len() != placement.ndim() {
            return Err(Error::SbpAxesMismatch {
                sbp: self.to_string(),
                sbp_axes: self.0.len(),
                placement_axes: placement.ndim(),
            });
        }
        for s in &self.0 {
            if let Sbp::Split(dim) = *s
                && dim >= ndim
            {
                return Err(Error::SplitDimOutOfRange { dim, ndim });
            }
        }
        Ok(())
    }

    /// The box of the logical tensor held by the rank at `coords` of `placement`: splits nest
    /// in axis order, each taking its part of what the outer axes left (balanced, or
    /// proportional to the weights of [`Placement::with_weights`]).
    pub fn local_region(&self, shape: &[usize], coords: &[usize], placement: &Placement) -> Region {
        let mut region: Region = shape.iter().map(|&d| 0..d).collect();
        for (a, s) in self.0.iter().enumerate() {
            if let Sbp::Split(d) = *s {
                let r = &region[d];
                let part = placement.split_range(a, r.len(), coords[a]);
                region[d] = r.start + part.start..r.start + part.end;
            }
        }
        region
    }
}

impl From<Sbp> for NdSbp {
    fn from(s: Sbp) -> Self {
        NdSbp(vec![s])
    }
}
impl<const N: usize> From<[Sbp; N]> for NdSbp {
    fn from(s: [Sbp; N]) -> Self {
        NdSbp(s.to_vec())
    }
}
impl From<Vec<Sbp>> for NdSbp {
    fn from(s: Vec<Sbp>) -> Self {
        NdSbp(s)
    }
}
impl From<&[Sbp]> for NdSbp {
    fn from(s: &[Sbp]) -> Self {
        NdSbp(s.to_vec())
    }
}
impl From<&NdSbp> for NdSbp {
    fn from(s: &NdSbp) -> Self {
        s.clone()
    }
}

impl fmt::Display for NdSbp {
    /// `(broadcast, split(dim=0))`; one entry prints as a 1-tuple, `(split(dim=0),)`, as OneFlow.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}")?;
        }
        if self.0.len() == 1 {
            f.write_str(",")?;
        }
        f.write_str(")")
    }
}

/// OneFlow's balanced splitter: part `index` of `len` elements over `parts` parts. The first
/// `len % parts` parts get one more element; parts may be empty when `len < parts`.
///
/// ```
/// # use gflow_core::sbp::balanced_range;
/// let sizes: Vec<usize> = (0..3).map(|i| balanced_range(5, 3, i).len()).collect();
/// assert_eq!(sizes, vec![2, 2, 1]);
/// ```
pub fn balanced_range(len: usize, parts: usize, index: usize) -> Range<usize> {
    let base = len / parts;
    let rem = len % parts;
    let start = index * base + index.min(rem);
    start..start + base + usize::from(index < rem)
}

/// All part sizes of the balanced splitter.
pub fn balanced_sizes(len: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| balanced_range(len, parts, i).len())
        .collect()
}

/// The weighted splitter: part `index` of `len` elements over parts proportional to `weights`
/// (positive), by the largest remainder method: each part gets the floor of its quota
/// `len * w / sum(w)`, and the elements left over go one each to the parts with the largest
/// fractional remainders, ties to the lower index. Equal weights give [`balanced_range`].
///
/// ```
/// # use gflow_core::sbp::weighted_range;
/// // quotas 2.5 and 7.5: the tie on the remainder goes to the first part
/// assert_eq!(weighted_range(10, &[1.0, 3.0], 0), 0..3);
/// assert_eq!(weighted_range(10, &[1.0, 3.0], 1), 3..10);
/// ```
pub fn weighted_range(len: usize, weights: &[f64], index: usize) -> Range<usize> {
    let sizes = weighted_sizes(len, weights);
    let start: usize = sizes[..index].iter().sum();
    start..start + sizes[index]
}

/// All part sizes of the weighted splitter (see [`weighted_range`]).
pub fn weighted_sizes(len: usize, weights: &[f64]) -> Vec<usize> {
    // Scaled by the largest first, so neither the total nor `len x weight` can overflow to
    // infinity whatever the weights' magnitudes (1e308 and 1e-308 included).
    let top = weights.iter().copied().fold(0.0f64, f64::max);
    let scaled: Vec<f64> = weights.iter().map(|w| w / top).collect();
    let total: f64 = scaled.iter().sum();
    let quotas: Vec<f64> = scaled.iter().map(|w| len as f64 * (w / total)).collect();
    let mut sizes: Vec<usize> = quotas.iter().map(|q| q.floor() as usize).collect();
    // Remainders compared at a fixed resolution, so rounding noise cannot break a tie that
    // exact arithmetic would have (every rank computes the same sizes).
    let mut order: Vec<(u64, usize)> = quotas
        .iter()
        .enumerate()
        .map(|(i, q)| (((q - q.floor()) * 1e9).round() as u64, i))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let given: usize = sizes.iter().sum();
    for &(_, i) in order.iter().take(len.saturating_sub(given)) {
        sizes[i] += 1;
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights of any magnitude split exactly `len` elements (they overflowed to infinity,
    /// and the parts to `usize::MAX`), in proportion.
    #[test]
    fn weights_of_extreme_magnitude_split_exactly() {
        for (w, want) in [
            (vec![1e308, 1e-308], vec![5, 0]),
            (vec![1e308, 1e308], vec![3, 2]),
            (vec![1e-300, 3e-300], vec![1, 4]),
        ] {
            assert_eq!(weighted_sizes(5, &w), want, "weights {w:?}");
        }
    }

    #[test]
    fn display_matches_api() {
        assert_eq!(Sbp::split(0).to_string(), "split(dim=0)");
        assert_eq!(Sbp::broadcast().to_string(), "broadcast");
        assert_eq!(Sbp::partial_sum().to_string(), "partial_sum");
        assert_eq!(Sbp::partial_min().to_string(), "partial_min");
        assert_eq!(Sbp::partial_max().to_string(), "partial_max");
        let nd: NdSbp = [Sbp::broadcast(), Sbp::split(0)].into();
        assert_eq!(nd.to_string(), "(broadcast, split(dim=0))");
        assert_eq!(NdSbp::from(Sbp::split(1)).to_string(), "(split(dim=1),)");
    }

    #[test]
    fn balanced_splitter() {
        assert_eq!(balanced_sizes(5, 3), vec![2, 2, 1]);
        assert_eq!(balanced_sizes(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(balanced_range(10, 4, 3), 8..10);
    }

    #[test]
    fn weighted_splitter() {
        assert_eq!(weighted_sizes(10, &[1.0, 3.0]), vec![3, 7]);
        assert_eq!(weighted_sizes(7, &[1.0, 1.0, 2.0]), vec![2, 2, 3]);
        assert_eq!(weighted_sizes(1, &[1.0, 1.0]), vec![1, 0]);
        assert_eq!(weighted_sizes(0, &[2.0, 5.0]), vec![0, 0]);
        // equal weights are the balanced splitter, whatever their scale
        for len in 0..40 {
            for n in 1..6 {
                assert_eq!(weighted_sizes(len, &vec![0.3; n]), balanced_sizes(len, n));
            }
        }
        assert_eq!(weighted_range(10, &[1.0, 3.0], 1), 3..10);
    }

    #[test]
    fn nested_split_regions() -> Result<()> {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let nd: NdSbp = [Sbp::split(0), Sbp::split(0)].into();
        // 7 rows: axis 0 gives 4 | 3, axis 1 halves those: 2,2 | 2,1.
        let r: Vec<_> = (0..4)
            .map(|i| nd.local_region(&[7], &p.coords_of_index(i), &p)[0].clone())
            .collect();
        assert_eq!(r, vec![0..2, 2..4, 4..6, 6..7]);
        assert!(matches!(
            nd.check(&p, 0),
            Err(Error::SplitDimOutOfRange { dim: 0, ndim: 0 })
        ));
        assert!(matches!(
            NdSbp::from(Sbp::split(0)).check(&p, 1),
            Err(Error::SbpAxesMismatch { .. })
        ));
        Ok(())
    }
}
