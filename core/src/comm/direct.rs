//! Direct schedules: one step in which every member exchanges with every other at once (least
//! latency). Each reduced block is combined at its owner (its own value, then the others' in
//! group order) and shared, so every member ends with identical bits.

use super::plan::{Buf, Combining, Plan, Span, Step};
use super::schedule::balanced_counts;
use super::{CommOp, Tag};

/// (position, world rank) of every member but the one at `me`, in group order.
fn others(group: &[usize], me: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    group
        .iter()
        .copied()
        .enumerate()
        .filter(move |&(i, _)| i != me)
}

/// All-gather: `mine` to every other member, member i's block into `slots[i]`, and `mine`
/// copied into `slots[me]` in its place among the receives.
pub(super) fn all_gather(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    me: usize,
    mine: Span,
    slots: &[Span],
) {
    p.push(Step::Exchange {
        tag,
        sends: others(group, me).map(|(_, r)| (r, mine)).collect(),
        copies: others(group, me).map(|(i, r)| (r, slots[i])).collect(),
        reduce: None,
        own: Some((mine, slots[me], me)),
    });
}

/// Reduce-scatter of `chunks` (member i's in `chunks[i]`) into `out`.
pub(super) fn reduce_scatter(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    me: usize,
    chunks: &[Span],
    out: Span,
) {
    p.push(Step::Copy {
        from: chunks[me],
        to: out,
    });
    p.push(Step::Exchange {
        tag,
        sends: others(group, me).map(|(i, r)| (r, chunks[i])).collect(),
        copies: vec![],
        reduce: Some(Combining::in_place(
            out,
            others(group, me).map(|(_, r)| r).collect(),
        )),
        own: None,
    });
}

/// All-reduce over `slots` (member i reduces `slots[i]`): a reduce-scatter into each member's
/// own slot, then an all-gather of the slots. In place (`input` None), or out of place from the
/// same offsets of `input`: its blocks are sent and this member's own block is the first
/// combine's left operand, so the output is written, never copied into first. With `pieces` > 1
/// every slot is cut into that many element-aligned pieces (`elem` bytes each element) and the
/// two halves are interleaved, piece c's all-gather right after piece c+1's reduce-scatter: a
/// reduced piece goes out while it is still in cache, and no step waits for a whole slot.
pub(super) fn all_reduce(
    p: &mut Plan,
    group: &[usize],
    me: usize,
    (slots, input): (&[Span], Option<Buf>),
    elem: usize,
    pieces: usize,
) {
    let cut: Vec<Vec<Span>> = slots
        .iter()
        .map(|s| s.split(&balanced_counts(s.len, elem, pieces.max(1))))
        .collect();
    let piece = |c: usize| -> Vec<Span> { cut.iter().map(|s| s[c]).collect() };
    let (rs, ag) = (
        Tag::new(CommOp::ReduceScatter, group),
        Tag::new(CommOp::AllGather, group),
    );
    let reduce = |p: &mut Plan, part: &[Span]| {
        let read = |s: Span| input.map_or(s, |b| s.with_buf(b));
        p.push(Step::Exchange {
            tag: rs,
            sends: others(group, me).map(|(i, r)| (r, read(part[i]))).collect(),
            copies: vec![],
            reduce: Some(Combining::onto(
                part[me],
                input.map(|b| part[me].with_buf(b)),
                others(group, me).map(|(_, r)| r).collect(),
            )),
            own: None,
        });
    };
    let gather = |p: &mut Plan, part: &[Span]| {
        p.exchange(
            ag,
            others(group, me).map(|(_, r)| (r, part[me])).collect(),
            others(group, me).map(|(i, r)| (r, part[i])).collect(),
        );
    };
    let n = pieces.max(1);
    reduce(p, &piece(0));
    for c in 1..n {
        reduce(p, &piece(c));
        gather(p, &piece(c - 1));
    }
    gather(p, &piece(n - 1));
}

/// All-to-all: `sends[i]` to member i, member i's message into `slots[i]`, and this member's
/// own block copied in its place among the receives (as the all-gather's): where receivers read
/// straight out of the senders' memory, every member then reads member k's buffer at about the
/// same time, and the lines one fetches (a strided block's neighbours too) serve the others.
pub(super) fn all_to_all(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    me: usize,
    sends: &[Span],
    slots: &[Span],
) {
    p.push(Step::Exchange {
        tag,
        sends: others(group, me).map(|(i, r)| (r, sends[i])).collect(),
        copies: others(group, me).map(|(i, r)| (r, slots[i])).collect(),
        reduce: None,
        own: Some((sends[me], slots[me], me)),
    });
}

/// Broadcast from position `root`: the root sends `data` to every member and copies it into
/// `out`; the others receive into `out`.
pub(super) fn broadcast(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    (me, root): (usize, usize),
    data: Span,
    out: Span,
) {
    if me == root {
        p.push(Step::Copy {
            from: data,
            to: out,
        });
        p.exchange(
            tag,
            others(group, me).map(|(_, r)| (r, data)).collect(),
            vec![],
        );
    } else {
        p.exchange(tag, vec![], vec![(group[root], out)]);
    }
}
