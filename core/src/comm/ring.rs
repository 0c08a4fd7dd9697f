//! Ring, tree and recursive-doubling schedules. In a ring each step moves one block to the right
//! neighbour and one from the left: a rank talks to two peers only, which is what a network
//! between hosts wants. Each block is reduced in one fixed order (starting after its owner and
//! going round), then shared, so every member still ends with identical bits. Recursive
//! doubling takes the fewest steps (small messages); its partners combine in one order too, the
//! lower position's value first.

use super::Tag;
use super::plan::{Buf, Combining, Plan, Span, Step};

/// The ring neighbours of position `me` in a group of `n`: (left, right) as world ranks.
fn neighbours(group: &[usize], me: usize) -> (usize, usize) {
    let n = group.len();
    (group[(me + n - 1) % n], group[(me + 1) % n])
}

/// Ring all-gather over `slots` (slot i is member i's block, `slots[me]` already filled):
/// n-1 steps, step s passes block (me - s) right and takes block (me - s - 1) from the left.
pub(super) fn all_gather(p: &mut Plan, tag: Tag, group: &[usize], me: usize, slots: &[Span]) {
    let n = group.len();
    let (left, right) = neighbours(group, me);
    for s in 0..n - 1 {
        let (send, recv) = ((me + n - s) % n, (me + 2 * n - s - 1) % n);
        p.exchange(tag, vec![(right, slots[send])], vec![(left, slots[recv])]);
    }
}

/// Ring reduce-scatter over `slots` (block i for member i): n-1 steps, step s passes partial
/// block (me - s - 1) right and combines the left's partial block (me - s - 2) with its own;
/// afterwards `slots[me]` holds the reduction of block me. In place (`input` None: `slots`
/// hold this member's input), or out of place from the same offsets of `input`: each block is
/// combined here once, so its own value is always the input's, and the first send (a block not
/// yet combined) reads the input too.
pub(super) fn reduce_scatter(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    me: usize,
    slots: &[Span],
    input: Option<Buf>,
) {
    let n = group.len();
    let (left, right) = neighbours(group, me);
    for s in 0..n - 1 {
        let (send, recv) = ((me + 2 * n - s - 1) % n, (me + 2 * n - s - 2) % n);
        let from = match input {
            Some(b) if s == 0 => slots[send].with_buf(b),
            _ => slots[send],
        };
        p.push(Step::Exchange {
            tag,
            sends: vec![(right, from)],
            copies: vec![],
            reduce: Some(Combining::onto(
                slots[recv],
                input.map(|b| slots[recv].with_buf(b)),
                vec![left],
            )),
            own: None,
        });
    }
}

/// Binomial-tree broadcast from position `root` in place in `buf`: in round k the members that
/// have the data (relative positions below 2^k) send it 2^k further, so n members are reached
/// in ceil(log2 n) rounds and the root sends log2 n messages instead of n-1.
pub(super) fn broadcast(
    p: &mut Plan,
    tag: Tag,
    group: &[usize],
    (me, root): (usize, usize),
    buf: Span,
) {
    let n = group.len();
    let v = (me + n - root) % n;
    let at = |rel: usize| group[(rel + root) % n];
    let mut mask = 1;
    while mask < n {
        if v < mask && v + mask < n {
            p.exchange(tag, vec![(at(v + mask), buf)], vec![]);
        } else if (mask..2 * mask).contains(&v) {
            p.exchange(tag, vec![], vec![(at(v - mask), buf)]);
        }
        mask *= 2;
    }
}

/// Recursive-doubling all-reduce of the whole buffer. With p the largest power of two up to n
/// and r = n - p, the first 2r positions pair up and the even one of each pair hands its data to
/// the odd one; the p remaining members then take log2 p steps, swapping their partial results
/// with the partner at distance 1, 2, 4, ... (in a numbering of the p); last, each odd one of
/// the first pairs returns the result. Every combine is `lower op upper` by position, on both
/// partners, so all members end with identical bits (even for NaNs and signed zeros).
pub(super) fn all_reduce_doubling(p: &mut Plan, tag: Tag, group: &[usize], me: usize, data: Span) {
    let n = group.len();
    let pow = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let r = n - pow;
    if me < 2 * r && me.is_multiple_of(2) {
        // folded: hand the data over, get the result back
        p.exchange(tag, vec![(group[me + 1], data)], vec![]);
        p.exchange(tag, vec![], vec![(group[me + 1], data)]);
        return;
    }
    let theirs = p.alloc(data.len);
    if me < 2 * r {
        p.exchange(tag, vec![], vec![(group[me - 1], theirs)]);
        combine_in_order(p, data, theirs, false);
    }
    // position among the pow members that double, and back
    let v = if me < 2 * r { me / 2 } else { me - r };
    let position = |v: usize| if v < r { 2 * v + 1 } else { v + r };
    let mut mask = 1;
    while mask < pow {
        let partner = group[position(v ^ mask)];
        p.exchange(tag, vec![(partner, data)], vec![(partner, theirs)]);
        combine_in_order(p, data, theirs, v & mask == 0);
        mask <<= 1;
    }
    if me < 2 * r {
        p.exchange(tag, vec![(group[me - 1], data)], vec![]);
    }
}

/// `mine = lower op upper`, where `mine` is the lower value when `mine_is_lower`, else
/// `theirs` is (which this overwrites).
fn combine_in_order(p: &mut Plan, mine: Span, theirs: Span, mine_is_lower: bool) {
    if mine_is_lower {
        p.push(Step::Combine {
            acc: mine,
            with: theirs,
        });
    } else {
        p.push(Step::Combine {
            acc: theirs,
            with: mine,
        });
        p.push(Step::Copy {
            from: theirs,
            to: mine,
        });
    }
}
