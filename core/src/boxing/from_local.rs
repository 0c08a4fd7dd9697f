//! Local -> global: the local tensors of a placement's ranks become the components of one global
//! tensor. Splits concatenate (sizes may differ per rank; they are exchanged and the result is
//! rebalanced to the placement's splitter), broadcast takes the first rank of each broadcast group,
//! partial treats the components as summands (or min/max operands).

use crate::comm::{Collectives, Communicator};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::sbp::Sbp;
use crate::storage::HostData;

use super::exec::{DstRole, run_transfers};
use super::plan::{Dist, Piece, plan_transfers};

/// What each rank reports before `to_global`: whether it is in the placement, its dtype and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Meta {
    member: bool,
    dtype: u64,
    shape: Vec<usize>,
}

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut w: Vec<u64> = vec![u64::from(self.member), self.dtype, self.shape.len() as u64];
        w.extend(self.shape.iter().map(|&d| d as u64));
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn decode(b: &[u8]) -> Option<Meta> {
        let w: Vec<u64> = b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let n = usize::try_from(*w.get(2)?).ok()?;
        let shape = w
            .get(3..3 + n)?
            .iter()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(Meta {
            member: w[0] == 1,
            dtype: w[1],
            shape,
        })
    }
}

/// Exchanges every rank's local metadata with the whole world (every rank calls `to_global`,
/// members or not, so that all of them learn the global shape).
fn exchange(comm: &dyn Communicator, mine: &Meta) -> Result<Vec<Meta>> {
    let world: Vec<usize> = (0..comm.world_size()).collect();
    let enc = mine.encode();
    let lens = comm.all_gather(
        &world,
        &(enc.len() as u64).to_le_bytes(),
        &vec![8; world.len()],
    )?;
    let counts: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
        .collect();
    let all = comm.all_gather(&world, &enc, &counts)?;
    let mut out = Vec::with_capacity(world.len());
    let mut off = 0;
    for (rank, c) in counts.iter().enumerate() {
        let m = Meta::decode(&all[off..off + c]).ok_or_else(|| Error::Environment {
            reason: format!("rank {rank} sent malformed tensor metadata"),
        })?;
        out.push(m);
        off += c;
    }
    Ok(out)
}

/// The layout the components describe: global shape and the source piece of every
/// representative rank (first in each broadcast group).
struct Components<'a> {
    dist: &'a Dist,
    /// Local shape by array position.
    shapes: Vec<Vec<usize>>,
}

impl Components<'_> {
    fn sbp(&self, axis: usize) -> Sbp {
        self.dist.nd_sbp.as_slice()[axis]
    }

    /// Shape of the intermediate tensor at the array prefix `prefix`.
    fn extent(&self, prefix: &mut Vec<usize>) -> Result<Vec<usize>> {
        let p = &self.dist.placement;
        let a = prefix.len();
        if a == p.ndim() {
            let idx = prefix
                .iter()
                .zip(p.hierarchy())
                .fold(0, |acc, (&c, &n)| acc * n + c);
            return Ok(self.shapes[idx].clone());
        }
        let n = p.hierarchy()[a];
        let sbp = self.sbp(a);
        // Every child, broadcast too: its data comes from the first, but a rank whose local
        // shape differs would get gradients of the wrong shape.
        let mut children = Vec::with_capacity(n);
        for c in 0..n {
            prefix.push(c);
            children.push(self.extent(prefix)?);
            prefix.pop();
        }
        let first = children[0].clone();
        let mut out = first.clone();
        for (c, child) in children.iter().enumerate().skip(1) {
            let fits = match sbp {
                Sbp::Split(d) => child
                    .iter()
                    .zip(&first)
                    .enumerate()
                    .all(|(i, (x, y))| i == d || x == y),
                _ => child == &first,
            };
            if !fits {
                let mut at = prefix.clone();
                at.push(c);
                at.resize(p.ndim(), 0);
                return Err(Error::LocalShapeMismatch {
                    rank: p.rank_at(&at),
                    got: child.clone(),
                    expected: format!(
                        "{} on placement axis {a}: the same shape as {first:?}{}",
                        sbp,
                        if let Sbp::Split(d) = sbp {
                            format!(" except dimension {d}")
                        } else {
                            String::new()
                        }
                    ),
                });
            }
            if let Sbp::Split(d) = sbp {
                out[d] += child[d];
            }
        }
        Ok(out)
    }

    /// Source pieces under `prefix`, whose intermediate tensor starts at `origin`.
    fn pieces(
        &self,
        prefix: &mut Vec<usize>,
        origin: Vec<usize>,
        summand: usize,
        out: &mut Vec<Piece>,
    ) -> Result<()> {
        let p = &self.dist.placement;
        let a = prefix.len();
        if a == p.ndim() {
            let shape = self.extent(prefix)?;
            out.push(Piece {
                rank: p.rank_at(prefix),
                region: origin.iter().zip(&shape).map(|(&o, &s)| o..o + s).collect(),
                summand,
            });
            return Ok(());
        }
        let n = p.hierarchy()[a];
        match self.sbp(a) {
            Sbp::Broadcast => {
                prefix.push(0);
                self.pieces(prefix, origin, summand, out)?;
                prefix.pop();
            }
            Sbp::Partial(_) => {
                for c in 0..n {
                    prefix.push(c);
                    self.pieces(prefix, origin.clone(), summand * n + c, out)?;
                    prefix.pop();
                }
            }
            Sbp::Split(d) => {
                let mut o = origin;
                for c in 0..n {
                    prefix.push(c);
                    let len = self.extent(prefix)?[d];
                    self.pieces(prefix, o.clone(), summand, out)?;
                    prefix.pop();
                    o[d] += len;
                }
            }
        }
        Ok(())
    }
}

/// The summand index of the rank at `coords`: its coordinates on the partial axes, flattened.
fn summand_of(dist: &Dist, coords: &[usize]) -> usize {
    dist.nd_sbp
        .as_slice()
        .iter()
        .zip(coords.iter().zip(dist.placement.hierarchy()))
        .filter(|(s, _)| matches!(s, Sbp::Partial(_)))
        .fold(0, |acc, (_, (&c, &n))| acc * n + c)
}

/// Builds this rank's component of the global tensor whose components are the ranks' local
/// tensors (`local`: this rank's data and shape). Every rank of the world must call it. Returns
/// the global shape, the dtype, this rank's component (`None` outside the placement) and the
/// box of the global tensor this rank's local tensor stands for (on broadcast axes, that of the
/// group's first rank; `None` outside the placement).
///
/// # Errors
/// `DTypeMismatch`, `LocalShapeMismatch` or `SplitDimOutOfRange` when the components do not fit
/// together (the same error on every rank); communication failures.
pub fn from_local(
    local: (&HostData, &[usize]),
    dist: &Dist,
    comm: &dyn Communicator,
) -> Result<FromLocal> {
    let me = comm.rank();
    let p = &dist.placement;
    let mine = Meta {
        member: p.contains(me),
        dtype: local.0.dtype().code(),
        shape: local.1.to_vec(),
    };
    let metas = exchange(comm, &mine)?;
    let member_meta = |i: usize| &metas[p.ranks()[i]];
    let first = member_meta(0).clone();
    let dtype = DType::from_code(first.dtype).ok_or_else(|| Error::Environment {
        reason: format!(
            "rank {} sent an unknown dtype code {}",
            p.ranks()[0],
            first.dtype
        ),
    })?;
    for (i, &rank) in p.ranks().iter().enumerate() {
        let m = member_meta(i);
        if m.dtype != first.dtype {
            return Err(Error::DTypeMismatch {
                expected: dtype,
                got: DType::from_code(m.dtype).unwrap_or(dtype),
            });
        }
        if m.shape.len() != first.shape.len() {
            return Err(Error::LocalShapeMismatch {
                rank,
                got: m.shape.clone(),
                expected: format!(
                    "{} dimensions, as rank {} has",
                    first.shape.len(),
                    p.ranks()[0]
                ),
            });
        }
    }
    dist.nd_sbp.check(p, first.shape.len())?;
    let comps = Components {
        dist,
        shapes: (0..p.size())
            .map(|i| member_meta(i).shape.clone())
            .collect(),
    };
    let shape = comps.extent(&mut vec![])?;
    let mut src = vec![];
    comps.pieces(&mut vec![], vec![0; shape.len()], 0, &mut src)?;
    let dst: Vec<Piece> = (0..p.size())
        .map(|i| Piece {
            rank: p.ranks()[i],
            region: dist.region_of_index(&shape, i),
            summand: summand_of(dist, &p.coords_of_index(i)),
        })
        .collect();
    let transfers = plan_transfers(&src, &dst);
    let my_src = src
        .iter()
        .find(|s| s.rank == me)
        .map(|s| (local.0, &s.region));
    let my_dst = dst
        .iter()
        .find(|d| d.rank == me)
        .map(|d| DstRole::Data(d.region.clone()));
    let data = run_transfers(&transfers, dtype, my_src, my_dst, comm)?;
    let source = p.index_of(me).and_then(|i| {
        let mut coords = p.coords_of_index(i);
        for (c, s) in coords.iter_mut().zip(dist.nd_sbp.as_slice()) {
            if *s == Sbp::Broadcast {
                *c = 0;
            }
        }
        let rep = p.rank_at(&coords);
        src.iter().find(|s| s.rank == rep).map(|s| s.region.clone())
    });
    let balanced = src
        .iter()
        .all(|s| dst.iter().any(|d| d.rank == s.rank && d.region == s.region));
    Ok(FromLocal {
        shape,
        dtype,
        component: data,
        source,
        balanced,
    })
}

/// What [`from_local`] returns.
#[derive(Debug)]
pub struct FromLocal {
    /// The global shape.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
    /// This rank's component (`None` outside the placement).
    pub component: Option<HostData>,
    /// The box of the global tensor this rank's local tensor stands for.
    pub source: Option<crate::shape::Region>,
    /// Whether every contributing rank's box is its balanced component (the same on every
    /// rank): then the inverse is plain boxing, else it needs the sizes.
    pub balanced: bool,
}
