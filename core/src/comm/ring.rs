//! Ring, tree and recursive-doubling schedules, written once as sequences of
//! [`Communicator::exchange`] steps, so every transport runs them (threads, shared memory,
//! QUIC). In a ring each step moves one block to the right neighbour and one from the left: a
//! rank talks to two peers only, which is what a network between hosts wants. Each block is
//! reduced in one fixed order (starting after its owner and going round), then shared, so every
//! member still ends with identical bits. Recursive doubling takes the fewest steps (small
//! messages); its partners combine in one order too, the lower position's value first.

use super::{CommError, Communicator, Inbound, Outbound, Reduction, Tag};
use crate::dtype::DType;
use crate::reduce::{ReduceOp, combine_bytes};

/// `slots[send]` to read and `slots[recv]` to write, two different blocks of one buffer.
fn pair<'a>(slots: &'a mut [&mut [u8]], send: usize, recv: usize) -> (&'a [u8], &'a mut [u8]) {
    debug_assert_ne!(send, recv);
    if send < recv {
        let (a, b) = slots.split_at_mut(recv);
        (&*a[send], &mut *b[0])
    } else {
        let (a, b) = slots.split_at_mut(send);
        (&*b[0], &mut *a[recv])
    }
}

/// The ring neighbours of position `me` in a group of `n`: (left, right) as world ranks.
fn neighbours(group: &[usize], me: usize) -> (usize, usize) {
    let n = group.len();
    (group[(me + n - 1) % n], group[(me + 1) % n])
}

/// One step that only sends `data` to `peer`.
fn send_step<C: Communicator + ?Sized>(
    comm: &C,
    peer: usize,
    tag: Tag,
    data: &[u8],
) -> Result<(), CommError> {
    comm.exchange(&[Outbound { peer, tag, data }], &mut [], None)
}

/// One step that only receives `out` from `peer`.
fn recv_step<C: Communicator + ?Sized>(
    comm: &C,
    peer: usize,
    tag: Tag,
    out: &mut [u8],
) -> Result<(), CommError> {
    comm.exchange(&[], &mut [Inbound { peer, tag, out }], None)
}

/// Ring all-gather over `slots` (slot i is member i's block, `slots[me]` already filled):
/// n-1 steps, step s passes block (me - s) right and takes block (me - s - 1) from the left.
pub(super) fn all_gather<C: Communicator + ?Sized>(
    comm: &C,
    group: &[usize],
    me: usize,
    tag: Tag,
    slots: &mut [&mut [u8]],
) -> Result<(), CommError> {
    let n = group.len();
    let (left, right) = neighbours(group, me);
    for s in 0..n - 1 {
        let (send, recv) = ((me + n - s) % n, (me + 2 * n - s - 1) % n);
        let (data, out) = pair(slots, send, recv);
        comm.exchange(
            &[Outbound {
                peer: right,
                tag,
                data,
            }],
            &mut [Inbound {
                peer: left,
                tag,
                out,
            }],
            None,
        )?;
    }
    Ok(())
}

/// Ring reduce-scatter in place over `slots` (each member's full input, block i for member i):
/// n-1 steps, step s passes partial block (me - s - 1) right and combines the left's partial
/// block (me - s - 2) into its own; afterwards `slots[me]` holds the reduction of block me.
pub(super) fn reduce_scatter<C: Communicator + ?Sized>(
    comm: &C,
    group: &[usize],
    me: usize,
    tag: Tag,
    slots: &mut [&mut [u8]],
    dtype: DType,
    op: ReduceOp,
) -> Result<(), CommError> {
    let n = group.len();
    let (left, right) = neighbours(group, me);
    for s in 0..n - 1 {
        let (send, recv) = ((me + 2 * n - s - 1) % n, (me + 2 * n - s - 2) % n);
        let (data, acc) = pair(slots, send, recv);
        comm.exchange(
            &[Outbound {
                peer: right,
                tag,
                data,
            }],
            &mut [],
            Some(Reduction {
                acc,
                dtype,
                op,
                from: vec![(left, tag)],
            }),
        )?;
    }
    Ok(())
}

/// Binomial-tree broadcast from position `root`: in round k the members that have the data
/// (relative positions below 2^k) send it 2^k further, so n members are reached in
/// ceil(log2 n) rounds and the root sends log2 n messages instead of n-1.
pub(super) fn broadcast<C: Communicator + ?Sized>(
    comm: &C,
    group: &[usize],
    me: usize,
    root: usize,
    tag: Tag,
    buf: &mut [u8],
) -> Result<(), CommError> {
    let n = group.len();
    let v = (me + n - root) % n;
    let at = |rel: usize| group[(rel + root) % n];
    let mut mask = 1;
    while mask < n {
        if v < mask && v + mask < n {
            send_step(comm, at(v + mask), tag, buf)?;
        } else if (mask..2 * mask).contains(&v) {
            recv_step(comm, at(v - mask), tag, buf)?;
        }
        mask *= 2;
    }
    Ok(())
}

/// Recursive-doubling all-reduce of the whole buffer. With p the largest power of two up to n
/// and r = n - p, the first 2r positions pair up and the even one of each pair hands its data to
/// the odd one; the p remaining members then take log2 p steps, swapping their partial results
/// with the partner at distance 1, 2, 4, ... (in a numbering of the p); last, each odd one of
/// the first pairs returns the result. Every combine is `lower op upper` by position, on both
/// partners, so all members end with identical bits (even for NaNs and signed zeros).
pub(super) fn all_reduce_doubling<C: Communicator + ?Sized>(
    comm: &C,
    group: &[usize],
    me: usize,
    tag: Tag,
    data: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<(), CommError> {
    let n = group.len();
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let r = n - p;
    if me < 2 * r && me.is_multiple_of(2) {
        // folded: hand the data over, get the result back
        send_step(comm, group[me + 1], tag, data)?;
        return recv_step(comm, group[me + 1], tag, data);
    }
    let mut theirs = vec![0u8; data.len()];
    if me < 2 * r {
        recv_step(comm, group[me - 1], tag, &mut theirs)?;
        combine_in_order(data, &mut theirs, false, dtype, op);
    }
    // position among the p members that double, and back
    let v = if me < 2 * r { me / 2 } else { me - r };
    let position = |v: usize| if v < r { 2 * v + 1 } else { v + r };
    let mut mask = 1;
    while mask < p {
        let partner = group[position(v ^ mask)];
        comm.exchange(
            &[Outbound {
                peer: partner,
                tag,
                data: &*data,
            }],
            &mut [Inbound {
                peer: partner,
                tag,
                out: &mut theirs,
            }],
            None,
        )?;
        combine_in_order(data, &mut theirs, v & mask == 0, dtype, op);
        mask <<= 1;
    }
    if me < 2 * r {
        send_step(comm, group[me - 1], tag, data)?;
    }
    Ok(())
}

/// `mine = lower op upper`, where `mine` is the lower value when `mine_is_lower`, else
/// `theirs` is (which this may overwrite).
fn combine_in_order(
    mine: &mut [u8],
    theirs: &mut [u8],
    mine_is_lower: bool,
    dtype: DType,
    op: ReduceOp,
) {
    if mine_is_lower {
        combine_bytes(dtype, op, mine, theirs);
    } else {
        combine_bytes(dtype, op, theirs, mine);
        mine.copy_from_slice(theirs);
    }
}
