//! Each collective's [`Plan`] for one member: the [`Policy`]'s schedule (direct, ring, tree,
//! doubling), or the hierarchical composition of those over a [`Grid`]. Pure functions of
//! (operation, group, member, sizes, policy, grid).

use super::hierarchy::{self, Grid};
use super::plan::{Buf, Plan, Span, Step};
use super::{CommOp, Policy, Schedule, Tag, direct, ring};
use crate::sbp::balanced_range;

/// All-gather: member i gives `counts[i]` bytes (`Input(0)`); the output holds them all in
/// group order.
pub(super) fn all_gather(policy: &Policy, grid: Option<&Grid>, group: &[usize], me: usize, counts: &[usize]) -> Plan {
    let mut p = Plan::default();
    let mine = Span::whole(Buf::Input(0), counts[me]);
    let out = Span::whole(Buf::Output, counts.iter().sum());
    match grid {
        Some(g) => hierarchy::all_gather(&mut p, policy, group, g, me, counts, mine, out),
        None => all_gather_flat(&mut p, policy, group, me, counts, mine, out),
    }
    p
}

/// Reduce-scatter: `Input(0)` holds one chunk per member (`counts[i]` bytes for member i); the
/// output gets this member's chunk reduced over the group.
pub(super) fn reduce_scatter(policy: &Policy, grid: Option<&Grid>, group: &[usize], me: usize, counts: &[usize]) -> Plan {
    let mut p = Plan::default();
    let data = Span::whole(Buf::Input(0), counts.iter().sum());
    let out = Span::whole(Buf::Output, counts[me]);
    match grid {
        Some(g) => hierarchy::reduce_scatter(&mut p, policy, group, g, me, counts, data, out),
        None => reduce_scatter_flat(&mut p, policy, group, me, counts, data, out),
    }
    p
}

/// All-reduce of the output (`bytes` long, elements of `elem` bytes) in place.
pub(super) fn all_reduce(policy: &Policy, grid: Option<&Grid>, group: &[usize], me: usize, bytes: usize, elem: usize) -> Plan {
    let mut p = Plan::default();
    let data = Span::whole(Buf::Output, bytes);
    match grid {
        Some(g) => hierarchy::all_reduce(&mut p, policy, group, g, me, data, elem),
        None => all_reduce_flat(&mut p, policy, group, me, data, elem),
    }
    p
}

/// All-to-all: `Input(i)` (`send_counts[i]` bytes) goes to member i; member i's message lands at
/// `recv_counts[..i].sum()` of the output.
pub(super) fn all_to_all(group: &[usize], me: usize, send_counts: &[usize], recv_counts: &[usize]) -> Plan {
    let mut p = Plan::default();
    let sends: Vec<Span> = send_counts
        .iter()
        .enumerate()
        .map(|(i, &len)| Span::whole(Buf::Input(i), len))
        .collect();
    let slots = Span::whole(Buf::Output, recv_counts.iter().sum()).split(recv_counts);
    direct::all_to_all(&mut p, Tag::new(CommOp::AllToAll, group), group, me, &sends, &slots);
    p
}

/// Broadcast of `len` bytes from position `root` (its `Input(0)`) into every member's output.
pub(super) fn broadcast(policy: &Policy, group: &[usize], me: usize, root: usize, len: usize) -> Plan {
    let mut p = Plan::default();
    let tag = Tag::new(CommOp::Broadcast, group);
    let (data, out) = (Span::whole(Buf::Input(0), len), Span::whole(Buf::Output, len));
    if policy.schedule(CommOp::Broadcast, group.len(), len) == Schedule::Ring {
        if me == root {
            p.push(Step::Copy { from: data, to: out });
        }
        ring::broadcast(&mut p, tag, group, (me, root), out);
    } else {
        direct::broadcast(&mut p, tag, group, (me, root), data, out);
    }
    p
}

/// [`all_gather`] without a hierarchy, from `mine` into `out`.
pub(super) fn all_gather_flat(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    me: usize,
    counts: &[usize],
    mine: Span,
    out: Span,
) {
    let tag = Tag::new(CommOp::AllGather, group);
    let slots = out.split(counts);
    if policy.schedule(CommOp::AllGather, group.len(), out.len) == Schedule::Ring {
        p.push(Step::Copy {
            from: mine,
            to: slots[me],
        });
        ring::all_gather(p, tag, group, me, &slots);
    } else {
        direct::all_gather(p, tag, group, me, mine, &slots);
    }
}

/// [`reduce_scatter`] without a hierarchy, from `data` into `out`. A ring works on a copy of
/// the input.
pub(super) fn reduce_scatter_flat(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    me: usize,
    counts: &[usize],
    data: Span,
    out: Span,
) {
    let tag = Tag::new(CommOp::ReduceScatter, group);
    if policy.schedule(CommOp::ReduceScatter, group.len(), data.len) == Schedule::Ring {
        let work = p.alloc(data.len);
        p.push(Step::Copy { from: data, to: work });
        let slots = work.split(counts);
        ring::reduce_scatter(p, tag, group, me, &slots);
        p.push(Step::Copy {
            from: slots[me],
            to: out,
        });
    } else {
        direct::reduce_scatter(p, tag, group, me, &data.split(counts), out);
    }
}

/// [`all_reduce`] without a hierarchy, of `data` in place.
pub(super) fn all_reduce_flat(p: &mut Plan, policy: &Policy, group: &[usize], me: usize, data: Span, elem: usize) {
    let n = group.len();
    if n == 1 {
        return;
    }
    let counts = balanced_counts(data.len, elem, n);
    match policy.schedule(CommOp::AllReduce, n, data.len) {
        Schedule::Doubling => {
            ring::all_reduce_doubling(p, Tag::new(CommOp::AllReduce, group), group, me, data);
        }
        Schedule::Ring => {
            let slots = data.split(&counts);
            ring::reduce_scatter(p, Tag::new(CommOp::ReduceScatter, group), group, me, &slots);
            ring::all_gather(p, Tag::new(CommOp::AllGather, group), group, me, &slots);
        }
        Schedule::Direct => direct::all_reduce(p, group, me, &data.split(&counts)),
    }
}

/// Bytes of each of `n` members' balanced shares of `bytes` in elements of `elem` bytes.
pub(super) fn balanced_counts(bytes: usize, elem: usize, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| balanced_range(bytes / elem, n, i).len() * elem)
        .collect()
}
