//! Placement: a device type and an n-d array of ranks (OneFlow's `flow.placement`). A placement is
//! a cheap handle; equality compares the device type, the hierarchy and the ranks.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The kind of device a placement's ranks compute on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The CPU backend (always available).
    Cpu,
    /// NVIDIA GPUs through CUDA.
    Cuda,
    /// Any GPU through wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// Each rank's best GPU backend: CUDA where a driver is present, else wgpu.
    Gpu,
}

impl DeviceType {
    /// The name used in `Placement::new` and in `Display`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
            DeviceType::Wgpu => "wgpu",
            DeviceType::Gpu => "gpu",
        }
    }
}

impl FromStr for DeviceType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceType::Cpu),
            "cuda" => Ok(DeviceType::Cuda),
            "wgpu" => Ok(DeviceType::Wgpu),
            "gpu" => Ok(DeviceType::Gpu),
            other => Err(Error::UnknownDeviceType {
                name: other.to_string(),
            }),
        }
    }
}

impl PartialEq<&str> for DeviceType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for DeviceType {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An n-d array of ranks: its shape (the hierarchy) and its ranks in row-major order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ranks {
    shape: Vec<usize>,
    flat: Vec<usize>,
}

impl Ranks {
    /// An array of any number of axes from its shape and its ranks in row-major order.
    ///
    /// ```
    /// # use gflow_core::{Placement, Ranks};
    /// let p = Placement::new("cpu", Ranks::nd([2, 2, 2], (0..8).collect::<Vec<_>>()))?;
    /// assert_eq!(p.hierarchy(), &[2, 2, 2]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `RanksShape` when `flat.len()` is not the product of `shape`; `EmptyPlacement` for no ranks.
    pub fn nd(shape: impl AsRef<[usize]>, flat: impl Into<Vec<usize>>) -> Result<Ranks> {
        let shape = shape.as_ref().to_vec();
        let flat = flat.into();
        if shape.is_empty() || shape.contains(&0) || flat.is_empty() {
            return Err(Error::EmptyPlacement);
        }
        if shape.iter().product::<usize>() != flat.len() {
            return Err(Error::RanksShape {
                shape,
                len: flat.len(),
            });
        }
        Ok(Ranks { shape, flat })
    }

    /// A 1-D array.
    pub fn flat(ranks: impl Into<Vec<usize>>) -> Result<Ranks> {
        let flat = ranks.into();
        Ranks::nd([flat.len()], flat)
    }

    fn from_rows(rows: Vec<Vec<usize>>) -> Result<Ranks> {
        let cols = rows.first().map_or(0, Vec::len);
        for (row, r) in rows.iter().enumerate() {
            if r.len() != cols {
                return Err(Error::RaggedRanks {
                    row,
                    expected: cols,
                    got: r.len(),
                });
            }
        }
        let n = rows.len();
        Ranks::nd([n, cols], rows.concat())
    }
}

/// Anything that names an array of ranks: `[usize; N]`, `Vec<usize>`, `&[usize]`,
/// `[[usize; M]; N]`, `Vec<Vec<usize>>`, `[[[usize; L]; M]; N]`, or a [`Ranks`].
pub trait IntoRanks {
    /// The validated rank array.
    fn into_ranks(self) -> Result<Ranks>;
}

impl IntoRanks for Ranks {
    fn into_ranks(self) -> Result<Ranks> {
        Ok(self)
    }
}
impl IntoRanks for Result<Ranks> {
    fn into_ranks(self) -> Result<Ranks> {
        self
    }
}
impl<const N: usize> IntoRanks for [usize; N] {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::flat(self.to_vec())
    }
}
impl IntoRanks for Vec<usize> {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::flat(self)
    }
}
impl IntoRanks for &[usize] {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::flat(self.to_vec())
    }
}
impl IntoRanks for std::ops::Range<usize> {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::flat(self.collect::<Vec<_>>())
    }
}
impl<const M: usize, const N: usize> IntoRanks for [[usize; M]; N] {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::from_rows(self.iter().map(|r| r.to_vec()).collect())
    }
}
impl IntoRanks for Vec<Vec<usize>> {
    fn into_ranks(self) -> Result<Ranks> {
        Ranks::from_rows(self)
    }
}
impl<const L: usize, const M: usize, const N: usize> IntoRanks for [[[usize; L]; M]; N] {
    fn into_ranks(self) -> Result<Ranks> {
        let flat: Vec<usize> = self.iter().flatten().flatten().copied().collect();
        Ranks::nd([N, M, L], flat)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PlacementInner {
    device: DeviceType,
    ranks: Ranks,
    /// One positive weight per rank (row-major), set by [`Placement::with_weights`].
    weights: Option<Weights>,
}

/// Split weights, compared and hashed by their bits (they are finite and positive).
#[derive(Clone, Debug)]
struct Weights(Vec<f64>);

impl PartialEq for Weights {
    fn eq(&self, other: &Weights) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}
impl Eq for Weights {}
impl std::hash::Hash for Weights {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.iter().for_each(|w| w.to_bits().hash(h));
    }
}

/// Where a global tensor lives: a device type and an n-d array of distinct ranks.
///
/// ```
/// # use gflow_core::Placement;
/// let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
/// assert_eq!(p.hierarchy(), &[2, 2]);
/// assert_eq!(p.ranks(), &[0, 1, 2, 3]);
/// assert!(Placement::new("tpu", [0]).is_err());
/// # Ok::<(), gflow_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Placement(Arc<PlacementInner>);

impl Placement {
    /// A placement on `device` ("cpu", "cuda", "wgpu" or "gpu") over `ranks`.
    ///
    /// # Errors
    /// `UnknownDeviceType`, `EmptyPlacement`, `DuplicateRank`, `RaggedRanks`, `RanksShape`.
    pub fn new(device: &str, ranks: impl IntoRanks) -> Result<Placement> {
        let device = device.parse::<DeviceType>()?;
        let ranks = ranks.into_ranks()?;
        let mut seen = ranks.flat.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::DuplicateRank { rank: w[0] });
        }
        Ok(Placement(Arc::new(PlacementInner {
            device,
            ranks,
            weights: None,
        })))
    }

    /// This placement with uneven splits: every `split` on it gives each rank a part
    /// proportional to its weight (one positive weight per rank, in the row-major order of
    /// [`Placement::ranks`]) instead of a balanced one, by the largest remainder method with
    /// ties to the lower rank ([`crate::sbp::weighted_range`]). On an n-d placement each axis
    /// splits by its marginal weights (the sum of the weights of the ranks at each coordinate),
    /// so a split along an axis has the same bounds in every group along it; the parts are
    /// exactly proportional when the weights are a product of per-axis weights
    /// (`[[1, 2], [2, 4]]`). A weighted placement differs from the balanced one over the same
    /// ranks; `to_global` between them moves only the boxes that change owner.
    ///
    /// ```
    /// # use gflow_core::Placement;
    /// let p = Placement::new("cpu", [0, 1])?.with_weights(&[1.0, 3.0])?;
    /// assert_eq!(p.weights(), Some(&[1.0, 3.0][..]));
    /// assert_eq!(p.split_range(0, 8, 1), 2..8);
    /// assert!(Placement::new("cpu", [0, 1])?.with_weights(&[1, 0]).is_err());
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` when the count differs from the number of ranks, or a weight is zero,
    /// negative, infinite or NaN.
    pub fn with_weights<W: Into<f64> + Copy>(&self, weights: &[W]) -> Result<Placement> {
        let weights: Vec<f64> = weights.iter().map(|&w| w.into()).collect();
        let bad = |reason: String| Error::InvalidArgument {
            op: "Placement::with_weights",
            reason,
        };
        if weights.len() != self.size() {
            return Err(bad(format!(
                "weights: expected one per rank ({} for {self}), got {}",
                self.size(),
                weights.len()
            )));
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !(w.is_finite() && **w > 0.0))
        {
            return Err(bad(format!(
                "weights[{i}] (rank {}): expected a positive finite number, got {w}",
                self.ranks()[i]
            )));
        }
        Ok(Placement(Arc::new(PlacementInner {
            device: self.0.device,
            ranks: self.0.ranks.clone(),
            weights: Some(Weights(weights)),
        })))
    }

    /// The split weights of [`Placement::with_weights`] (row-major), `None` when splits are
    /// balanced.
    pub fn weights(&self) -> Option<&[f64]> {
        self.0.weights.as_ref().map(|w| w.0.as_slice())
    }

    /// This placement with balanced splits (its weights dropped).
    pub fn balanced(&self) -> Placement {
        Placement(Arc::new(PlacementInner {
            device: self.0.device,
            ranks: self.0.ranks.clone(),
            weights: None,
        }))
    }

    /// Part `index` of `len` elements split along placement `axis`: OneFlow's balanced
    /// splitter, or proportional to the axis's marginal weights on a weighted placement.
    pub fn split_range(&self, axis: usize, len: usize, index: usize) -> std::ops::Range<usize> {
        match self.axis_weights(axis) {
            None => crate::sbp::balanced_range(len, self.hierarchy()[axis], index),
            Some(w) => crate::sbp::weighted_range(len, &w, index),
        }
    }

    /// The weight of each coordinate along `axis`: the sum over the ranks at that coordinate.
    fn axis_weights(&self, axis: usize) -> Option<Vec<f64>> {
        let w = self.weights()?;
        let mut out = vec![0.0; self.hierarchy()[axis]];
        for (i, x) in w.iter().enumerate() {
            out[self.coords_of_index(i)[axis]] += x;
        }
        Some(out)
    }

    /// The device type.
    pub fn device_type(&self) -> DeviceType {
        self.0.device
    }

    /// All ranks, row-major.
    pub fn ranks(&self) -> &[usize] {
        &self.0.ranks.flat
    }

    /// The shape of the rank array.
    pub fn hierarchy(&self) -> &[usize] {
        &self.0.ranks.shape
    }

    /// Number of axes of the rank array.
    pub fn ndim(&self) -> usize {
        self.0.ranks.shape.len()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.0.ranks.flat.len()
    }

    /// Whether `rank` is one of this placement's ranks.
    pub fn contains(&self, rank: usize) -> bool {
        self.0.ranks.flat.contains(&rank)
    }

    /// Row-major position of `rank` in the array.
    pub fn index_of(&self, rank: usize) -> Option<usize> {
        self.0.ranks.flat.iter().position(|&r| r == rank)
    }

    /// Coordinates of the array position `index`.
    pub fn coords_of_index(&self, mut index: usize) -> Vec<usize> {
        let shape = self.hierarchy();
        let mut c = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            c[a] = index % shape[a];
            index /= shape[a];
        }
        c
    }

    /// Coordinates of `rank` in the array.
    pub fn coords_of(&self, rank: usize) -> Option<Vec<usize>> {
        self.index_of(rank).map(|i| self.coords_of_index(i))
    }

    /// The rank at `coords`.
    pub fn rank_at(&self, coords: &[usize]) -> usize {
        let shape = self.hierarchy();
        let idx = coords
            .iter()
            .zip(shape)
            .fold(0, |acc, (&c, &n)| acc * n + c);
        self.0.ranks.flat[idx]
    }

    /// The ranks along `axis` through `coords` (the other coordinates fixed), in axis order.
    pub fn axis_group(&self, coords: &[usize], axis: usize) -> Vec<usize> {
        let mut c = coords.to_vec();
        (0..self.hierarchy()[axis])
            .map(|i| {
                c[axis] = i;
                self.rank_at(&c)
            })
            .collect()
    }

    /// Checks that every rank exists in a world of `world_size` ranks.
    ///
    /// # Errors
    /// `RankOutOfWorld` naming the first rank that does not.
    pub fn check_world(&self, world_size: usize) -> Result<()> {
        match self.ranks().iter().find(|&&r| r >= world_size) {
            Some(&rank) => Err(Error::RankOutOfWorld { rank, world_size }),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Placement {
    /// `placement(type="cpu", ranks=[[0, 1], [2, 3]])`, as OneFlow prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn nested(f: &mut fmt::Formatter<'_>, shape: &[usize], flat: &[usize]) -> fmt::Result {
            f.write_str("[")?;
            if shape.len() == 1 {
                for (i, r) in flat.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{r}")?;
                }
            } else {
                let inner = flat.len() / shape[0];
                for (i, chunk) in flat.chunks(inner).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    nested(f, &shape[1..], chunk)?;
                }
            }
            f.write_str("]")
        }
        write!(f, "placement(type=\"{}\", ranks=", self.device_type())?;
        nested(f, self.hierarchy(), self.ranks())?;
        if let Some(w) = self.weights() {
            write!(f, ", weights={w:?}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_rank_form() -> Result<()> {
        let a = Placement::new("cpu", [0, 1])?;
        let b = Placement::new("cpu", vec![0, 1])?;
        let c = Placement::new("cpu", &[0usize, 1][..])?;
        let d = Placement::new("cpu", 0..2)?;
        assert!(a == b && b == c && c == d);
        let e = Placement::new("cuda", [[0, 1], [2, 3]])?;
        let f = Placement::new("cuda", vec![vec![0, 1], vec![2, 3]])?;
        let g = Placement::new("cuda", Ranks::nd([2, 2], vec![0, 1, 2, 3]))?;
        assert!(e == f && f == g);
        let h = Placement::new("wgpu", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]])?;
        assert_eq!(h.hierarchy(), &[2, 2, 2]);
        assert_eq!(h.coords_of(6), Some(vec![1, 1, 0]));
        assert_eq!(h.axis_group(&[1, 0, 1], 1), vec![5, 7]);
        assert_eq!(
            e.to_string(),
            "placement(type=\"cuda\", ranks=[[0, 1], [2, 3]])"
        );
        Ok(())
    }

    #[test]
    fn rejects_bad_arrays() {
        assert!(matches!(
            Placement::new("cpu", Vec::<usize>::new()),
            Err(Error::EmptyPlacement)
        ));
        assert!(matches!(
            Placement::new("cpu", [0, 1, 0]),
            Err(Error::DuplicateRank { rank: 0 })
        ));
        assert!(matches!(
            Placement::new("cpu", vec![vec![0, 1], vec![2]]),
            Err(Error::RaggedRanks {
                row: 1,
                expected: 2,
                got: 1
            })
        ));
        assert!(matches!(
            Placement::new("npu", [0]),
            Err(Error::UnknownDeviceType { .. })
        ));
        assert!(matches!(
            Placement::new("cpu", Ranks::nd([2, 3], vec![0, 1, 2])),
            Err(Error::RanksShape { .. })
        ));
        assert!(matches!(
            Placement::new("cpu", vec![Vec::<usize>::new()]),
            Err(Error::EmptyPlacement)
        ));
        let p = Placement::new("cpu", [0, 5]).ok();
        assert!(matches!(
            p.map(|p| p.check_world(4)),
            Some(Err(Error::RankOutOfWorld {
                rank: 5,
                world_size: 4
            }))
        ));
    }
}
