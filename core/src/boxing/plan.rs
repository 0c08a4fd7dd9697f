//! The pure boxing planner. Deterministic: the same inputs give the same plan on every rank.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

use crate::error::Result;
use crate::placement::Placement;
use crate::reduce::ReduceOp;
use crate::sbp::{NdSbp, Sbp};
use crate::shape::{Region, intersect, numel, region_shape};

/// A global layout: where a tensor lives and how it is distributed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dist {
    /// The ranks.
    pub placement: Placement,
    /// One SBP per placement axis.
    pub nd_sbp: NdSbp,
}

impl Dist {
    /// A layout from its parts.
    pub fn new(placement: Placement, nd_sbp: NdSbp) -> Dist {
        Dist { placement, nd_sbp }
    }

    /// The box held by the rank at array position `index`.
    pub fn region_of_index(&self, shape: &[usize], index: usize) -> Region {
        let coords = self.placement.coords_of_index(index);
        self.nd_sbp.local_region(shape, &coords, &self.placement)
    }

    /// If the rank at `coords` holds only a reduction identity (its coordinate on some partial
    /// axis is not 0), the reduction of the innermost such axis.
    ///
    /// The innermost, not the outermost: a value is decomposed axis by axis, the first member of
    /// a partial group taking the value and the others that axis's identity, so below a member
    /// that holds an outer identity the inner partial axes decompose that identity in turn. With
    /// (partial_max, partial_sum) on integers, the ranks off the first row hold `i64::MIN` in the
    /// first column and 0 in the others, whose sum is `i64::MIN`; filling every one of them with
    /// `i64::MIN` would wrap around to 0 when the inner sum is taken.
    pub fn identity_op(&self, coords: &[usize]) -> Option<ReduceOp> {
        identity_below(self.nd_sbp.as_slice(), coords, 0)
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.placement, self.nd_sbp)
    }
}

/// The reduction of the innermost partial axis at or below `from` on which `coords` is not 0:
/// the identity a rank holds when the subtree it belongs to must reduce to an identity.
pub(crate) fn identity_below(sbp: &[Sbp], coords: &[usize], from: usize) -> Option<ReduceOp> {
    sbp.iter()
        .zip(coords)
        .skip(from)
        .rev()
        .find_map(|(s, &c)| match s {
            Sbp::Partial(op) if c != 0 => Some(*op),
            _ => None,
        })
}

/// The 1-D conversion an axis step performs inside each group of ranks along its axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisKind {
    /// split -> broadcast.
    AllGather,
    /// partial -> broadcast.
    AllReduce,
    /// partial -> split.
    ReduceScatter,
    /// split(i) -> split(j).
    AllToAll,
    /// broadcast -> split: keep this rank's slice, no communication.
    Slice,
    /// broadcast -> partial: the first member keeps the value, the others the identity.
    KeepFirst,
    /// split -> partial: place the slice in a tensor of identities, no communication.
    PadIdentity,
    /// partial(a) -> partial(b): reduce-scatter with a, then pad with b's identity.
    ReduceScatterPad,
}

impl AxisKind {
    fn of(from: Sbp, to: Sbp) -> AxisKind {
        use Sbp::*;
        match (from, to) {
            (Split(_), Split(_)) => AxisKind::AllToAll,
            (Split(_), Broadcast) => AxisKind::AllGather,
            (Split(_), Partial(_)) => AxisKind::PadIdentity,
            (Broadcast, Split(_)) => AxisKind::Slice,
            (Broadcast, Partial(_)) | (Broadcast, Broadcast) => AxisKind::KeepFirst,
            (Partial(_), Broadcast) => AxisKind::AllReduce,
            (Partial(_), Split(_)) => AxisKind::ReduceScatter,
            (Partial(_), Partial(_)) => AxisKind::ReduceScatterPad,
        }
    }

    fn name(self) -> &'static str {
        match self {
            AxisKind::AllGather => "all_gather",
            AxisKind::AllReduce => "all_reduce",
            AxisKind::ReduceScatter => "reduce_scatter",
            AxisKind::AllToAll => "all_to_all",
            AxisKind::Slice => "slice",
            AxisKind::KeepFirst => "keep_first",
            AxisKind::PadIdentity => "pad_identity",
            AxisKind::ReduceScatterPad => "reduce_scatter+pad",
        }
    }
}

/// Change the SBP of one placement axis, within every group of ranks along that axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisStep {
    /// The placement (unchanged by the step).
    pub placement: Placement,
    /// The placement axis that changes.
    pub axis: usize,
    /// The layout before the step.
    pub before: NdSbp,
    /// The new SBP of `axis`.
    pub to: Sbp,
    /// The 1-D conversion.
    pub kind: AxisKind,
    /// Bytes sent over all groups.
    pub bytes: u64,
}

/// One point-to-point copy of a box of the logical tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The sending rank.
    pub src: usize,
    /// The receiving rank (equal to `src` for a local copy).
    pub dst: usize,
    /// The box, in logical coordinates.
    pub region: Region,
}

/// A piece of a layout: a rank, the box it holds, and which summand of a partial value it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The holder.
    pub rank: usize,
    /// Its box of the logical tensor.
    pub region: Region,
    /// Index of the partial component (0 when the layout has no partial axes).
    pub summand: usize,
}

/// Move boxes between two layouts point to point. Either the source has no partial axes, or
/// each of its partial operands moves as it is to become one of the destination's. Destination
/// ranks listed in `identities` hold only a reduction identity and receive nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redistribute {
    /// The source layout.
    pub src: Dist,
    /// The destination layout.
    pub dst: Dist,
    /// The copies, in the order both sides perform them.
    pub transfers: Vec<Transfer>,
    /// Bytes sent between different ranks.
    pub bytes: u64,
    /// The destination ranks that hold only the identity of a reduction, and of which.
    pub identities: Vec<(usize, ReduceOp)>,
    /// When set, a destination rank may receive several source operands for one element:
    /// it starts from the identity and reduces every copy it receives into its box with this
    /// operation (16-bit sums in f32, rounded once), instead of storing each.
    pub combine: Option<ReduceOp>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A per-axis conversion on one placement.
    Axis(AxisStep),
    /// A point-to-point redistribution.
    Redistribute(Redistribute),
}

/// A boxing plan: steps in order, and the bytes they move between ranks in total.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Plan {
    /// The steps.
    pub steps: Vec<Step>,
    /// Total bytes sent between ranks.
    pub cost_bytes: u64,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return writeln!(f, "no-op");
        }
        for s in &self.steps {
            match s {
                Step::Axis(a) => writeln!(
                    f,
                    "axis {}: {} -> {} by {} ({} B)",
                    a.axis,
                    a.before,
                    a.before.with(a.axis, a.to),
                    a.kind.name(),
                    a.bytes
                )?,
                Step::Redistribute(r) => writeln!(
                    f,
                    "p2p: {} -> {} ({} transfers, {} remote, {} B)",
                    r.src.nd_sbp,
                    r.dst.nd_sbp,
                    r.transfers.len(),
                    r.transfers.iter().filter(|t| t.src != t.dst).count(),
                    r.bytes
                )?,
            }
        }
        writeln!(f, "total {} B", self.cost_bytes)
    }
}

/// Plans the conversion of a tensor of logical `shape` (elements of `elem` bytes) from `src` to
/// `dst`: the cheapest correct plan by bytes moved; on a tie, per-axis collectives win over
/// point-to-point redistribution.
///
/// # Errors
/// Either SBP does not fit its placement or the shape (`SbpAxesMismatch`, `SplitDimOutOfRange`).
pub fn plan(shape: &[usize], elem: usize, src: &Dist, dst: &Dist) -> Result<Plan> {
    if src == dst {
        src.nd_sbp.check(&src.placement, shape.len())?;
        return Ok(Plan::default());
    }
    let key = (shape.to_vec(), elem, src.clone(), dst.clone());
    if let Some(p) = PLANS.with(|c| c.borrow().get(&key).cloned()) {
        return Ok(p);
    }
    let p = search(shape, elem, src, dst)?;
    PLANS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= PLAN_CACHE_ENTRIES {
            c.clear();
        }
        c.insert(key, p.clone());
    });
    Ok(p)
}

/// Plans remembered per thread: a program converts the same few layouts every step, and the
/// operators' signature choice costs every candidate's conversions (on a 2-D placement the
/// search dominated a tensor-parallel GPT's step). Cleared when full.
const PLAN_CACHE_ENTRIES: usize = 4096;

type PlanKey = (Vec<usize>, usize, Dist, Dist);

thread_local! {
    static PLANS: std::cell::RefCell<std::collections::HashMap<PlanKey, Plan>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// [`plan`] without the cache.
fn search(shape: &[usize], elem: usize, src: &Dist, dst: &Dist) -> Result<Plan> {
    src.nd_sbp.check(&src.placement, shape.len())?;
    dst.nd_sbp.check(&dst.placement, shape.len())?;
    if src == dst {
        return Ok(Plan::default());
    }
    let axis = if src.placement == dst.placement {
        axis_search(shape, elem, &src.placement, &src.nd_sbp, &dst.nd_sbp)
    } else {
        None
    };
    if let Some(p) = axis.as_ref().filter(|p| p.cost_bytes == 0) {
        return Ok(p.clone());
    }
    let fallback = via_redistribution(shape, elem, src, dst);
    Ok(match axis {
        Some(a) if a.cost_bytes <= fallback.cost_bytes => a,
        _ => fallback,
    })
}

/// Whether changing `axis` of `state` to `to` by a 1-D conversion inside each axis group gives
/// exactly that layout. It does unless an inner axis splits a dimension that the old or new SBP
/// of `axis` splits (a nested split must be undone first), or an inner axis is partial with a
/// reduction other than the one being resolved.
fn axis_step_valid(state: &NdSbp, axis: usize, to: Sbp) -> bool {
    let from = state.as_slice()[axis];
    state.as_slice()[axis + 1..]
        .iter()
        .all(|inner| match *inner {
            Sbp::Split(d) => from.split_dim() != Some(d) && to.split_dim() != Some(d),
            Sbp::Partial(op) => from.partial_op().is_none_or(|f| f == op),
            Sbp::Broadcast => true,
        })
}

/// Bytes a 1-D conversion of `axis` sends, summed over all groups along that axis.
fn axis_step_bytes(
    shape: &[usize],
    elem: usize,
    p: &Placement,
    state: &NdSbp,
    axis: usize,
    to: Sbp,
) -> u64 {
    let n = p.hierarchy()[axis] as u64;
    let from = state.as_slice()[axis];
    let kind = AxisKind::of(from, to);
    let whole = state.with(axis, Sbp::Broadcast);
    let mut total = 0u64;
    for index in 0..p.size() {
        let coords = p.coords_of_index(index);
        if coords[axis] != 0 {
            continue;
        }
        let g = region_shape(&whole.local_region(shape, &coords, p));
        let ng = numel(&g) as u64;
        total += match kind {
            AxisKind::AllGather | AxisKind::ReduceScatter => (n - 1) * ng,
            AxisKind::ReduceScatterPad if !g.is_empty() => (n - 1) * ng,
            AxisKind::AllReduce | AxisKind::ReduceScatterPad => 2 * (n - 1) * ng,
            AxisKind::AllToAll => {
                let (i, j) = (from.split_dim().unwrap_or(0), to.split_dim().unwrap_or(0));
                let (li, lj) = (g[i] as u64, g[j] as u64);
                let stay: u64 = if li * lj == 0 {
                    0
                } else {
                    (0..n as usize)
                        .map(|r| {
                            let a = p.split_range(axis, g[i], r).len() as u64;
                            let b = p.split_range(axis, g[j], r).len() as u64;
                            ng / (li * lj) * a * b
                        })
                        .sum()
                };
                ng - stay
            }
            AxisKind::Slice | AxisKind::KeepFirst | AxisKind::PadIdentity => 0,
        };
    }
    total * elem as u64
}

/// Cheapest sequence of valid axis steps from `src` to `dst` on one placement (Dijkstra over the
/// states whose axes take their source SBP, their destination SBP or broadcast). `None` only if
/// the SBPs do not fit the placement.
pub fn axis_search(
    shape: &[usize],
    elem: usize,
    p: &Placement,
    src: &NdSbp,
    dst: &NdSbp,
) -> Option<Plan> {
    let k = src.len();
    let candidates: Vec<Vec<Sbp>> = (0..k)
        .map(|a| {
            let mut c = vec![src.as_slice()[a], dst.as_slice()[a], Sbp::Broadcast];
            c.dedup();
            if c.len() == 3 && c[0] == c[2] {
                c.pop();
            }
            c
        })
        .collect();
    // state -> (cost, steps, predecessor step)
    let mut best: BTreeMap<NdSbp, (u64, usize, Option<AxisStep>)> = BTreeMap::new();
    let mut heap = BinaryHeap::new();
    best.insert(src.clone(), (0, 0, None));
    heap.push(Reverse((0u64, 0usize, src.clone())));
    while let Some(Reverse((cost, nsteps, state))) = heap.pop() {
        if best
            .get(&state)
            .is_some_and(|b| (b.0, b.1) < (cost, nsteps))
        {
            continue;
        }
        if &state == dst {
            let mut steps = vec![];
            let mut cur = state;
            while let Some((_, _, Some(step))) = best.get(&cur) {
                cur = step.before.clone();
                steps.push(Step::Axis(step.clone()));
            }
            steps.reverse();
            return Some(Plan {
                steps,
                cost_bytes: cost,
            });
        }
        for (axis, cands) in candidates.iter().enumerate() {
            for &to in cands {
                if to == state.as_slice()[axis] || !axis_step_valid(&state, axis, to) {
                    continue;
                }
                let bytes = axis_step_bytes(shape, elem, p, &state, axis, to);
                let next = state.with(axis, to);
                let key = (cost + bytes, nsteps + 1);
                if best.get(&next).is_none_or(|b| key < (b.0, b.1)) {
                    let step = AxisStep {
                        placement: p.clone(),
                        axis,
                        before: state.clone(),
                        to,
                        kind: AxisKind::of(state.as_slice()[axis], to),
                        bytes,
                    };
                    best.insert(next.clone(), (key.0, key.1, Some(step)));
                    heap.push(Reverse((key.0, key.1, next)));
                }
            }
        }
    }
    None
}

/// Pieces of a layout without partial axes: every rank's box, summand 0.
fn pieces(shape: &[usize], d: &Dist) -> Vec<Piece> {
    d.placement
        .ranks()
        .iter()
        .enumerate()
        .map(|(i, &rank)| Piece {
            rank,
            region: d.region_of_index(shape, i),
            summand: 0,
        })
        .collect()
}

/// Pieces a destination layout must receive: ranks holding only a reduction identity need none.
fn wanted_pieces(shape: &[usize], d: &Dist) -> Vec<Piece> {
    d.placement
        .ranks()
        .iter()
        .enumerate()
        .filter(|(i, _)| d.identity_op(&d.placement.coords_of_index(*i)).is_none())
        .map(|(i, &rank)| Piece {
            rank,
            region: d.region_of_index(shape, i),
            summand: 0,
        })
        .collect()
}

/// The ranks of a layout that hold only a reduction identity (see [`Dist::identity_op`]).
fn identities(d: &Dist) -> Vec<(usize, ReduceOp)> {
    d.placement
        .ranks()
        .iter()
        .enumerate()
        .filter_map(|(i, &rank)| Some((rank, d.identity_op(&d.placement.coords_of_index(i))?)))
        .collect()
}

/// Point-to-point copies that fill every destination piece from source pieces of the same
/// summand. Among replicas of a source box, a destination takes its own copy when it has one,
/// else spreads its requests over the replicas.
pub fn plan_transfers(src: &[Piece], dst: &[Piece]) -> Vec<Transfer> {
    let mut groups: Vec<(usize, &Region, Vec<usize>)> = vec![];
    for s in src {
        match groups
            .iter_mut()
            .find(|g| g.0 == s.summand && g.1 == &s.region)
        {
            Some(g) => g.2.push(s.rank),
            None => groups.push((s.summand, &s.region, vec![s.rank])),
        }
    }
    let mut out = vec![];
    for (di, d) in dst.iter().enumerate() {
        for (summand, region, replicas) in &groups {
            if *summand != d.summand {
                continue;
            }
            if let Some(region) = intersect(region, &d.region) {
                let src = if replicas.contains(&d.rank) {
                    d.rank
                } else {
                    replicas[di % replicas.len()]
                };
                out.push(Transfer {
                    src,
                    dst: d.rank,
                    region,
                });
            }
        }
    }
    out
}

/// Bytes the transfers send between different ranks.
pub fn transfer_bytes(transfers: &[Transfer], elem: usize) -> u64 {
    transfers
        .iter()
        .filter(|t| t.src != t.dst)
        .map(|t| numel(&region_shape(&t.region)) as u64 * elem as u64)
        .sum()
}

/// The general plan: resolve the source's partial axes on its own placement (to broadcast or to
/// a split, whichever makes the whole cheapest), then move boxes point to point.
fn via_redistribution(shape: &[usize], elem: usize, src: &Dist, dst: &Dist) -> Plan {
    let partial_axes: Vec<usize> = (0..src.nd_sbp.len())
        .filter(|&a| matches!(src.nd_sbp.as_slice()[a], Sbp::Partial(_)))
        .collect();
    let mut options: Vec<Sbp> = vec![Sbp::Broadcast];
    options.extend((0..shape.len()).map(Sbp::Split));
    let combos = options.len().pow(partial_axes.len() as u32).min(4096);
    let wanted = wanted_pieces(shape, dst);
    let mut best: Option<Plan> = None;
    for mut c in 0..combos {
        let mut mid = src.nd_sbp.clone();
        for &a in &partial_axes {
            mid = mid.with(a, options[c % options.len()]);
            c /= options.len();
        }
        let Some(mut pre) = axis_search(shape, elem, &src.placement, &src.nd_sbp, &mid) else {
            continue;
        };
        let mid = Dist::new(src.placement.clone(), mid);
        let transfers = plan_transfers(&pieces(shape, &mid), &wanted);
        let bytes = transfer_bytes(&transfers, elem);
        pre.cost_bytes += bytes;
        pre.steps.push(Step::Redistribute(Redistribute {
            src: mid,
            dst: dst.clone(),
            transfers,
            bytes,
            identities: identities(dst),
            combine: None,
        }));
        if best.as_ref().is_none_or(|b| pre.cost_bytes < b.cost_bytes) {
            best = Some(pre);
        }
    }
    // On a tie, moving the operands wins: no reduction, no collective.
    if let Some(moved) = moving_operands(shape, elem, src, dst)
        && best
            .as_ref()
            .is_none_or(|b| moved.cost_bytes <= b.cost_bytes)
    {
        best = Some(moved);
    }
    // All-broadcast (combo 0) is always reachable, so `best` is set.
    best.unwrap_or_default()
}

/// The one reduction of every partial axis of `nd`, if it has partial axes and they agree.
fn single_partial_op(nd: &NdSbp) -> Option<ReduceOp> {
    let mut ops = nd.as_slice().iter().filter_map(|s| s.partial_op());
    let first = ops.next()?;
    ops.all(|op| op == first).then_some(first)
}

/// Every rank's piece of a layout, labelled with the operand it holds (its coordinates on the
/// partial axes, flattened; 0 without partial axes), and the number of operands.
fn operand_pieces(shape: &[usize], d: &Dist) -> (Vec<Piece>, usize) {
    let p = &d.placement;
    let partial = |a: usize| matches!(d.nd_sbp.as_slice()[a], Sbp::Partial(_));
    let count = (0..p.ndim())
        .filter(|&a| partial(a))
        .map(|a| p.hierarchy()[a])
        .product();
    let pieces = (0..p.size())
        .map(|i| {
            let coords = p.coords_of_index(i);
            let summand = (0..p.ndim())
                .filter(|&a| partial(a))
                .fold(0, |acc, a| acc * p.hierarchy()[a] + coords[a]);
            Piece {
                rank: p.ranks()[i],
                region: d.region_of_index(shape, i),
                summand,
            }
        })
        .collect();
    (pieces, count)
}

/// To a partial layout whose partial axes share one reduction, from a layout of operands of
/// that reduction (a layout without partial axes is one operand): the operands move as they
/// are, and the destination's operands that receive none are the identity (a partial value
/// does not depend on which rank holds which operand). Each source operand becomes the
/// destination operand that most of its ranks already hold, so that reordering the ranks of a
/// partial placement, seeing it in another hierarchy, or widening it to more ranks moves
/// nothing. With more source operands than destination ones (or when it is cheaper), several
/// become one destination operand, reduced where they arrive. `None` when the layouts do not
/// qualify.
fn moving_operands(shape: &[usize], elem: usize, src: &Dist, dst: &Dist) -> Option<Plan> {
    let op = single_partial_op(&dst.nd_sbp)?;
    if src.nd_sbp.has_partial() && single_partial_op(&src.nd_sbp)? != op {
        return None;
    }
    let (from, n) = operand_pieces(shape, src);
    let (to, m) = operand_pieces(shape, dst);
    if n > 64 || m > 64 {
        return None;
    }
    // kept[k][j]: elements destination operand k finds on its own ranks in source operand j;
    // size[k]: the elements destination operand k holds over all its ranks.
    let mut kept = vec![vec![0usize; n]; m];
    let mut size = vec![0usize; m];
    for d in &to {
        size[d.summand] += numel(&region_shape(&d.region));
        for s in from.iter().filter(|s| s.rank == d.rank) {
            if let Some(r) = intersect(&s.region, &d.region) {
                kept[d.summand][s.summand] += numel(&region_shape(&r));
            }
        }
    }
    // One to one where there are enough destination operands: greedy by what stays in place.
    let one_to_one = (n <= m).then(|| {
        let mut pairs: Vec<(usize, usize)> =
            (0..m).flat_map(|k| (0..n).map(move |j| (k, j))).collect();
        pairs.sort_by_key(|&(k, j)| (Reverse(kept[k][j]), k, j));
        let (mut label, mut taken) = (vec![usize::MAX; n], vec![false; m]);
        for (k, j) in pairs {
            if label[j] == usize::MAX && !taken[k] {
                label[j] = k;
                taken[k] = true;
            }
        }
        label
    });
    // Many to one: each source operand where it costs least (what the destination operand's
    // ranks lack of it), reduced on arrival.
    let many_to_one: Vec<usize> = (0..n)
        .map(|j| {
            (0..m)
                .min_by_key(|&k| (size[k] - kept[k][j], k))
                .unwrap_or(0)
        })
        .collect();
    let cost = |label: &[usize]| -> usize {
        label
            .iter()
            .enumerate()
            .map(|(j, &k)| size[k] - kept[k][j])
            .sum()
    };
    let (label, combine) = match one_to_one {
        Some(l) if cost(&l) <= cost(&many_to_one) => (l, None),
        _ => (many_to_one, Some(op)),
    };
    let mut used = vec![false; m];
    label.iter().for_each(|&k| used[k] = true);
    let (filled, idle): (Vec<Piece>, Vec<Piece>) = to.into_iter().partition(|d| used[d.summand]);
    // Operand by operand: two operands that become one are distinct data, not replicas.
    let mut transfers = vec![];
    for (j, &k) in label.iter().enumerate() {
        let pieces: Vec<Piece> = from
            .iter()
            .filter(|p| p.summand == j)
            .map(|p| Piece {
                summand: k,
                ..p.clone()
            })
            .collect();
        transfers.extend(plan_transfers(&pieces, &filled));
    }
    let bytes = transfer_bytes(&transfers, elem);
    Some(Plan {
        steps: vec![Step::Redistribute(Redistribute {
            src: src.clone(),
            dst: dst.clone(),
            transfers,
            bytes,
            identities: idle.into_iter().map(|d| (d.rank, op)).collect(),
            combine,
        })],
        cost_bytes: bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn check(shape: &[usize], src: (&str, NdSbp), dst: (&str, NdSbp), want: Expect) {
        let pl = |s: &str| -> Placement {
            let v: Vec<Vec<usize>> = s
                .split('|')
                .map(|row| row.split(',').map(|x| x.trim().parse().unwrap()).collect())
                .collect();
            if v.len() == 1 {
                Placement::new("cpu", v[0].clone()).unwrap()
            } else {
                Placement::new("cpu", v).unwrap()
            }
        };
        let p = plan(
            shape,
            4,
            &Dist::new(pl(src.0), src.1),
            &Dist::new(pl(dst.0), dst.1),
        )
        .unwrap();
        want.assert_eq(&p.to_string());
    }

    fn nd(v: &[Sbp]) -> NdSbp {
        v.into()
    }

    use Sbp::{Broadcast as B, Split as S};
    const PS: Sbp = Sbp::Partial(ReduceOp::Sum);
    const PM: Sbp = Sbp::Partial(ReduceOp::Max);

    #[test]
    fn one_d_plans() {
        let p = "0,1,2,3";
        check(
            &[8, 4],
            (p, nd(&[S(0)])),
            (p, nd(&[B])),
            expect![[r#"
            axis 0: (split(dim=0),) -> (broadcast,) by all_gather (384 B)
            total 384 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[PS])),
            (p, nd(&[B])),
            expect![[r#"
            axis 0: (partial_sum,) -> (broadcast,) by all_reduce (768 B)
            total 768 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[PS])),
            (p, nd(&[S(1)])),
            expect![[r#"
            axis 0: (partial_sum,) -> (split(dim=1),) by reduce_scatter (384 B)
            total 384 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[S(0)])),
            (p, nd(&[S(1)])),
            expect![[r#"
            axis 0: (split(dim=0),) -> (split(dim=1),) by all_to_all (96 B)
            total 96 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[B])),
            (p, nd(&[PM])),
            expect![[r#"
            axis 0: (broadcast,) -> (partial_max,) by keep_first (0 B)
            total 0 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[S(0)])),
            (p, nd(&[PS])),
            expect![[r#"
            axis 0: (split(dim=0),) -> (partial_sum,) by pad_identity (0 B)
            total 0 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[PS])),
            (p, nd(&[PM])),
            expect![[r#"
            axis 0: (partial_sum,) -> (partial_max,) by reduce_scatter+pad (384 B)
            total 384 B
        "#]],
        );
    }

    #[test]
    fn two_d_plans_pick_the_cheapest_route() {
        // p2p (96 B) beats undoing the nested split per axis (128 B).
        let p = "0,1|2,3";
        check(
            &[8, 4],
            (p, nd(&[S(0), S(0)])),
            (p, nd(&[S(1), S(0)])),
            expect![[r#"
            p2p: (split(dim=0), split(dim=0)) -> (split(dim=1), split(dim=0)) (8 transfers, 6 remote, 96 B)
            total 96 B
        "#]],
        );
        check(
            &[8, 4],
            (p, nd(&[B, S(0)])),
            (p, nd(&[B, B])),
            expect![[r#"
            axis 1: (broadcast, split(dim=0)) -> (broadcast, broadcast) by all_gather (256 B)
            total 256 B
        "#]],
        );
    }

    #[test]
    fn cross_placement_moves_only_what_must_move() {
        // [0,1] S0 -> [1,2] S0 on 4 rows: rank 1 sends rows 2..4 to rank 2, receives rows 0..2.
        check(
            &[4, 2],
            ("0,1", nd(&[S(0)])),
            ("1,2", nd(&[S(0)])),
            expect![[r#"
            p2p: (split(dim=0),) -> (split(dim=0),) (2 transfers, 2 remote, 32 B)
            total 32 B
        "#]],
        );
        // Same ranks, same data layout in another hierarchy: nothing moves.
        check(
            &[4, 2],
            ("0,1,2,3", nd(&[S(0)])),
            ("0,1|2,3", nd(&[S(0), S(0)])),
            expect![[r#"
            p2p: (split(dim=0),) -> (split(dim=0), split(dim=0)) (4 transfers, 0 remote, 0 B)
            total 0 B
        "#]],
        );
        // Partial source on other ranks: reduce-scatter first, then send the slices.
        check(
            &[4, 2],
            ("0,1", nd(&[PS])),
            ("2,3", nd(&[B])),
            expect![[r#"
            axis 0: (partial_sum,) -> (split(dim=0),) by reduce_scatter (32 B)
            p2p: (split(dim=0),) -> (broadcast,) (4 transfers, 4 remote, 64 B)
            total 96 B
        "#]],
        );
    }
}
