//! Runs a boxing [`Plan`] over a [`Communicator`]: every rank runs the same plan and does its own
//! part (ranks outside both placements do nothing).

use std::borrow::Cow;
use std::ops::Range;

use crate::comm::{Collectives, CommOp, Communicator, Payload, Tag};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::recycle;
use crate::reduce::ReduceOp;
use crate::sbp::Sbp;
use crate::shape::{Region, copy_region, extract, numel, region_shape, relative};
use crate::storage::HostData;

use super::plan::{AxisKind, AxisStep, Plan, Redistribute, Step, Transfer};

/// Runs `plan` for a tensor of logical `shape`. `data` is this rank's component under the plan's
/// source layout (`None` outside the source placement); returns its component under the
/// destination layout (`None` outside the destination placement). Owned data is reduced in
/// place where the plan allows (no copy).
///
/// # Errors
/// Communication failures (a peer gone, a timeout, a desync).
pub fn execute(
    plan: &Plan,
    shape: &[usize],
    dtype: DType,
    data: Option<Cow<'_, HostData>>,
    comm: &dyn Communicator,
) -> Result<Option<HostData>> {
    if !plan.steps.is_empty() {
        tracing::debug!(
            rank = comm.rank(),
            ?shape,
            ?dtype,
            plan = %plan.to_string().trim_end().replace('\n', "; "),
            "boxing plan"
        );
    }
    let mut cur: Option<Cow<'_, HostData>> = data;
    // A 16-bit sum resolved over more than one axis stays in f32 from the first reduction to the
    // last, so that it rounds once (as one axis's reduction does), not once per axis.
    let sums: Vec<usize> = (0..plan.steps.len())
        .filter(|&i| dtype.is_half() && reduces_sum(&plan.steps[i]))
        .collect();
    let wide = match (sums.first(), sums.last()) {
        (Some(&first), Some(&last)) if first < last => Some(first..=last),
        _ => None,
    };
    let (given, mut dtype_now) = (dtype, dtype);
    for (i, step) in plan.steps.iter().enumerate() {
        if wide.as_ref().is_some_and(|w| *w.start() == i) {
            dtype_now = DType::F32;
            cur = cur.map(|d| Cow::Owned(d.cast(DType::F32)));
        }
        let dtype = dtype_now;
        cur = match step {
            Step::Axis(s) => match (cur, s.placement.coords_of(comm.rank())) {
                (Some(d), Some(coords)) => Some(Cow::Owned(axis_step(s, shape, &coords, d, comm)?)),
                (other, _) => other,
            },
            Step::Redistribute(r) => {
                redistribute(r, shape, dtype, cur.as_deref(), comm)?.map(Cow::Owned)
            }
        };
        if wide.as_ref().is_some_and(|w| *w.end() == i) {
            dtype_now = given;
            cur = cur.map(|d| Cow::Owned(d.cast(given)));
        }
    }
    Ok(cur.map(Cow::into_owned))
}

/// Whether `step` reduces a `partial_sum` (an all-reduce or a reduce-scatter of sums).
fn reduces_sum(step: &Step) -> bool {
    match step {
        Step::Axis(a) => {
            a.before.as_slice()[a.axis] == Sbp::Partial(ReduceOp::Sum)
                && matches!(
                    a.kind,
                    AxisKind::AllReduce | AxisKind::ReduceScatter | AxisKind::ReduceScatterPad
                )
        }
        Step::Redistribute(_) => false,
    }
}

/// The data layout of one axis group: the group's logical box and the members' parts of it.
#[derive(Clone)]
struct Group<'a> {
    /// The placement and the axis the group runs along (its split bounds).
    placement: &'a Placement,
    axis: usize,
    ranks: Vec<usize>,
    me: usize,
    /// Shape of the tensor the group holds (the box with this axis not split).
    shape: Vec<usize>,
    elem: usize,
    comm: &'a dyn Communicator,
}

impl Group<'_> {
    fn n(&self) -> usize {
        self.ranks.len()
    }

    /// Member i's part along dimension `d`.
    fn part(&self, d: usize, i: usize) -> Range<usize> {
        self.placement.split_range(self.axis, self.shape[d], i)
    }

    /// The shape of member i's slice along `d`.
    fn part_shape(&self, d: usize, i: usize) -> Vec<usize> {
        let mut s = self.shape.clone();
        s[d] = self.part(d, i).len();
        s
    }

    /// The region of member i's slice along `d`, in group coordinates.
    fn part_region(&self, d: usize, i: usize) -> Region {
        let mut r: Region = self.shape.iter().map(|&x| 0..x).collect();
        r[d] = self.part(d, i);
        r
    }

    /// Copies member i's slice along `d` (contiguous bytes) into the group tensor `full`.
    fn place(&self, d: usize, i: usize, part: &[u8], full: &mut [u8]) {
        let ps = self.part_shape(d, i);
        let mut at = vec![0; ps.len()];
        at[d] = self.part(d, i).start;
        copy_region(
            self.elem,
            part,
            &ps,
            &vec![0; ps.len()],
            full,
            &self.shape,
            &at,
            &ps,
        );
    }

    /// Whether slices along `d` are contiguous runs of the row-major buffer.
    fn contiguous(&self, d: usize) -> bool {
        self.shape[..d].iter().all(|&x| x == 1)
    }

    fn all_gather(&self, d: usize, mine: &HostData) -> Result<HostData> {
        let counts: Vec<usize> = (0..self.n())
            .map(|i| numel(&self.part_shape(d, i)) * self.elem)
            .collect();
        let mut out = recycle::for_overwrite(mine.dtype(), numel(&self.shape));
        if self.contiguous(d) {
            self.comm
                .all_gather_into(&self.ranks, mine.as_bytes(), &counts, out.as_bytes_mut())?;
            return Ok(out);
        }
        let all = self
            .comm
            .all_gather(&self.ranks, mine.as_bytes(), &counts)?;
        let mut off = 0;
        for (i, c) in counts.iter().enumerate() {
            self.place(d, i, &all[off..off + c], out.as_bytes_mut());
            off += c;
        }
        Ok(out)
    }

    /// Packs the full tensor into one contiguous chunk per member along `d`.
    fn chunks<'d>(&self, d: usize, full: &'d HostData) -> (Vec<usize>, Cow<'d, [u8]>) {
        let counts: Vec<usize> = (0..self.n())
            .map(|i| numel(&self.part_shape(d, i)) * self.elem)
            .collect();
        if self.contiguous(d) {
            return (counts, Cow::Borrowed(full.as_bytes()));
        }
        let mut packed = Vec::with_capacity(full.as_bytes().len());
        for i in 0..self.n() {
            packed.extend_from_slice(&extract(
                self.elem,
                full.as_bytes(),
                &self.shape,
                &self.part_region(d, i),
            ));
        }
        (counts, Cow::Owned(packed))
    }

    /// This group moving f32 elements: the sums of 16-bit floats reduce in f32 and round once
    /// (as their matmuls and local reductions), whatever the number of members.
    fn widened(&self, dtype: DType, op: ReduceOp) -> Option<Group<'_>> {
        (dtype.is_half() && op == ReduceOp::Sum).then(|| Group {
            elem: DType::F32.size(),
            ..self.clone()
        })
    }

    fn reduce_scatter(&self, d: usize, full: &HostData, op: ReduceOp) -> Result<HostData> {
        let dtype = full.dtype();
        if let Some(wide) = self.widened(dtype, op) {
            return Ok(wide
                .reduce_scatter(d, &full.cast(DType::F32), op)?
                .cast(dtype));
        }
        let mut out = recycle::for_overwrite(dtype, numel(&self.part_shape(d, self.me)));
        let (counts, packed) = self.chunks(d, full);
        self.comm.reduce_scatter_into(
            &self.ranks,
            &packed,
            &counts,
            dtype,
            op,
            out.as_bytes_mut(),
        )?;
        Ok(out)
    }

    /// From split(i) to split(j): member q gets this member's slice along `j` of q's part,
    /// sent as it lies in `mine` (runs at a stride where the dims before `j` are not 1: the
    /// transport writes the runs, or the receiver copies them out of this rank's memory), and
    /// where each member's block is one run of the output (the dims before `i` are 1), the
    /// blocks are received straight into it.
    fn all_to_all(&self, i: usize, j: usize, mine: &HostData) -> Result<HostData> {
        let my_shape = self.part_shape(i, self.me);
        let runs = |shape: &[usize], d: usize| {
            shape[..d]
                .iter()
                .all(|&x| x == 1)
                .then(|| numel(&shape[d + 1..]) * self.elem)
        };
        let inner = numel(&my_shape[j + 1..]) * self.elem;
        let sends = (0..self.n())
            .map(|q| {
                let cols = self.part(j, q);
                Payload::strided(
                    mine.as_bytes(),
                    cols.start * inner,
                    cols.len() * inner,
                    my_shape[j] * inner,
                    numel(&my_shape[..j]),
                )
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "all_to_all: columns {cols:?} of a part of shape {my_shape:?}"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let block_shape = |q: usize| {
            let mut s = self.shape.clone();
            s[i] = self.part(i, q).len();
            s[j] = self.part(j, self.me).len();
            s
        };
        let counts: Vec<usize> = (0..self.n())
            .map(|q| numel(&block_shape(q)) * self.elem)
            .collect();
        let out_shape = self.part_shape(j, self.me);
        let mut out = recycle::for_overwrite(mine.dtype(), numel(&out_shape));
        if runs(&out_shape, i).is_some() {
            self.comm
                .all_to_all_payloads_into(&self.ranks, &sends, &counts, out.as_bytes_mut())?;
            return Ok(out);
        }
        let mut got = vec![0u8; counts.iter().sum()];
        self.comm
            .all_to_all_payloads_into(&self.ranks, &sends, &counts, &mut got)?;
        let mut rest = &got[..];
        for (q, &count) in counts.iter().enumerate() {
            let (block, tail) = rest.split_at(count);
            rest = tail;
            let bs = block_shape(q);
            let mut at = vec![0; bs.len()];
            at[i] = self.part(i, q).start;
            copy_region(
                self.elem,
                block,
                &bs,
                &vec![0; bs.len()],
                out.as_bytes_mut(),
                &out_shape,
                &at,
                &bs,
            );
        }
        Ok(out)
    }

    fn slice(&self, d: usize, full: &HostData) -> HostData {
        let bytes = extract(
            self.elem,
            full.as_bytes(),
            &self.shape,
            &self.part_region(d, self.me),
        );
        HostData::from_bytes(full.dtype(), &bytes)
    }

    fn pad(&self, d: usize, mine: &HostData, op: ReduceOp) -> HostData {
        let mut out = HostData::identity(mine.dtype(), numel(&self.shape), op);
        self.place(d, self.me, mine.as_bytes(), out.as_bytes_mut());
        out
    }

    fn keep_first(&self, full: Cow<'_, HostData>, op: ReduceOp) -> HostData {
        if self.me == 0 {
            full.into_owned()
        } else {
            HostData::identity(full.dtype(), numel(&self.shape), op)
        }
    }

    fn all_reduce(&self, full: Cow<'_, HostData>, op: ReduceOp) -> Result<HostData> {
        if self.widened(full.dtype(), op).is_some() {
            let wide = self.all_reduce(Cow::Owned(full.cast(DType::F32)), op)?;
            return Ok(wide.cast(full.dtype()));
        }
        let dtype = full.dtype();
        match full {
            Cow::Owned(mut data) => {
                self.comm
                    .all_reduce(&self.ranks, data.as_bytes_mut(), dtype, op)?;
                Ok(data)
            }
            // Borrowed: reduced straight out of the input, no copy of it first.
            Cow::Borrowed(data) => {
                let mut out = recycle::for_overwrite(dtype, data.len());
                let (from, to) = (data.as_bytes(), out.as_bytes_mut());
                self.comm
                    .all_reduce_into(&self.ranks, from, to, dtype, op)?;
                Ok(out)
            }
        }
    }
}

fn axis_step(
    s: &AxisStep,
    shape: &[usize],
    coords: &[usize],
    data: Cow<'_, HostData>,
    comm: &dyn Communicator,
) -> Result<HostData> {
    let p = &s.placement;
    let whole = s.before.with(s.axis, Sbp::Broadcast);
    let g = Group {
        placement: p,
        axis: s.axis,
        ranks: p.axis_group(coords, s.axis),
        me: coords[s.axis],
        shape: region_shape(&whole.local_region(shape, coords, p)),
        elem: data.dtype().size(),
        comm,
    };
    let from = s.before.as_slice()[s.axis];
    let (fd, td) = (from.split_dim().unwrap_or(0), s.to.split_dim().unwrap_or(0));
    let fop = from.partial_op().unwrap_or(ReduceOp::Sum);
    // The identity a member fills in where its group's new partial value must reduce to the
    // identity: that of `to`, unless an inner partial axis decomposes it further (see
    // `Dist::identity_op`), then that of the innermost one on which this rank is not first.
    let top = super::plan::identity_below(s.before.as_slice(), coords, s.axis + 1)
        .or(s.to.partial_op())
        .unwrap_or(ReduceOp::Sum);
    Ok(match s.kind {
        AxisKind::AllGather => g.all_gather(fd, &data)?,
        AxisKind::AllReduce => g.all_reduce(data, fop)?,
        AxisKind::ReduceScatter => g.reduce_scatter(td, &data, fop)?,
        AxisKind::AllToAll => g.all_to_all(fd, td, &data)?,
        AxisKind::Slice => g.slice(td, &data),
        AxisKind::KeepFirst => g.keep_first(data, top),
        AxisKind::PadIdentity => g.pad(fd, &data, top),
        AxisKind::ReduceScatterPad if g.shape.is_empty() => {
            let reduced = g.all_reduce(data, fop)?;
            g.keep_first(Cow::Owned(reduced), top)
        }
        AxisKind::ReduceScatterPad => {
            let part = g.reduce_scatter(0, &data, fop)?;
            g.pad(0, &part, top)
        }
    })
}

/// What this rank must end up with in a redistribution.
pub enum DstRole {
    /// The box `Region` of summand data, filled by transfers.
    Data(Region),
    /// A box of the reduction identity; receives nothing.
    Identity(Region, ReduceOp),
    /// The box `Region`, starting from the reduction's identity, into which every transfer is
    /// reduced (several operands arrive for one element).
    Combine(Region, ReduceOp),
}

/// Runs the point-to-point copies of `transfers`: sends the boxes this rank holds (its source
/// box is `src`), then fills its destination box in transfer order.
///
/// # Errors
/// Communication failures.
pub fn run_transfers(
    transfers: &[Transfer],
    dtype: DType,
    src: Option<(&HostData, &Region)>,
    dst: Option<DstRole>,
    comm: &dyn Communicator,
) -> Result<Option<HostData>> {
    let me = comm.rank();
    let elem = dtype.size();
    if let Some((data, held)) = src {
        let held_shape = region_shape(held);
        for t in transfers.iter().filter(|t| t.src == me && t.dst != me) {
            let rel: Region = relative(&t.region, held)
                .into_iter()
                .zip(&t.region)
                .map(|(s, r)| s..s + r.len())
                .collect();
            comm.send(
                t.dst,
                Tag::new(CommOp::P2p, &[t.src, t.dst]),
                &extract(elem, data.as_bytes(), &held_shape, &rel),
            )?;
        }
    }
    let region = match dst {
        None => return Ok(None),
        Some(DstRole::Identity(region, op)) => {
            return Ok(Some(HostData::identity(
                dtype,
                numel(&region_shape(&region)),
                op,
            )));
        }
        Some(DstRole::Combine(region, op)) => {
            return combine_transfers(transfers, dtype, src, region, op, comm).map(Some);
        }
        Some(DstRole::Data(region)) => region,
    };
    let out_shape = region_shape(&region);
    let mut out = HostData::filled(dtype, numel(&out_shape), 0.0);
    for t in transfers.iter().filter(|t| t.dst == me) {
        let ext = region_shape(&t.region);
        let at = relative(&t.region, &region);
        if t.src == me {
            if let Some((data, held)) = src {
                let from = relative(&t.region, held);
                copy_region(
                    elem,
                    data.as_bytes(),
                    &region_shape(held),
                    &from,
                    out.as_bytes_mut(),
                    &out_shape,
                    &at,
                    &ext,
                );
            }
        } else {
            if ext == out_shape {
                comm.recv_into(
                    t.src,
                    Tag::new(CommOp::P2p, &[t.src, t.dst]),
                    out.as_bytes_mut(),
                )?;
            } else {
                let bytes = comm.recv_exact(
                    t.src,
                    Tag::new(CommOp::P2p, &[t.src, t.dst]),
                    numel(&ext) * elem,
                )?;
                copy_region(
                    elem,
                    &bytes,
                    &ext,
                    &vec![0; ext.len()],
                    out.as_bytes_mut(),
                    &out_shape,
                    &at,
                    &ext,
                );
            }
        }
    }
    Ok(Some(out))
}

/// The receiving side of [`run_transfers`] for [`DstRole::Combine`]: every box addressed to
/// this rank (its own or received) is reduced into `region` with `op`, in transfer order; a
/// 16-bit sum accumulates in f32 and rounds once.
fn combine_transfers(
    transfers: &[Transfer],
    dtype: DType,
    src: Option<(&HostData, &Region)>,
    region: Region,
    op: ReduceOp,
    comm: &dyn Communicator,
) -> Result<HostData> {
    let me = comm.rank();
    let elem = dtype.size();
    let wide = if dtype.is_half() && op == ReduceOp::Sum {
        DType::F32
    } else {
        dtype
    };
    let out_shape = region_shape(&region);
    let mut out = HostData::identity(wide, numel(&out_shape), op);
    for t in transfers.iter().filter(|t| t.dst == me) {
        let ext = region_shape(&t.region);
        let block = if t.src == me {
            let Some((data, held)) = src else { continue };
            let rel: Region = relative(&t.region, held)
                .into_iter()
                .zip(&ext)
                .map(|(s, &n)| s..s + n)
                .collect();
            extract(elem, data.as_bytes(), &region_shape(held), &rel)
        } else {
            comm.recv_exact(
                t.src,
                Tag::new(CommOp::P2p, &[t.src, t.dst]),
                numel(&ext) * elem,
            )?
        };
        let block = HostData::from_bytes(dtype, &block).into_dtype(wide);
        let at: Region = relative(&t.region, &region)
            .into_iter()
            .zip(&ext)
            .map(|(s, &n)| s..s + n)
            .collect();
        let mut acc = extract(wide.size(), out.as_bytes(), &out_shape, &at);
        crate::reduce::combine_bytes(wide, op, &mut acc, block.as_bytes());
        copy_region(
            wide.size(),
            &acc,
            &ext,
            &vec![0; ext.len()],
            out.as_bytes_mut(),
            &out_shape,
            &relative(&t.region, &region),
            &ext,
        );
    }
    Ok(out.into_dtype(dtype))
}

fn redistribute(
    r: &Redistribute,
    shape: &[usize],
    dtype: DType,
    data: Option<&HostData>,
    comm: &dyn Communicator,
) -> Result<Option<HostData>> {
    let me = comm.rank();
    let src_region = r
        .src
        .placement
        .index_of(me)
        .map(|i| r.src.region_of_index(shape, i));
    let src = data.zip(src_region.as_ref());
    let dst = r.dst.placement.index_of(me).map(|i| {
        let region = r.dst.region_of_index(shape, i);
        match (r.identities.iter().find(|(rank, _)| *rank == me), r.combine) {
            (Some(&(_, op)), _) => DstRole::Identity(region, op),
            (None, Some(op)) => DstRole::Combine(region, op),
            (None, None) => DstRole::Data(region),
        }
    });
    run_transfers(&r.transfers, dtype, src, dst, comm)
}
