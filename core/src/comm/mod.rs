//! The `Communicator` seam: point-to-point messages and collectives on any group of ranks, each
//! returning a `Result` (a peer that is gone is an error, never a hang).
//!
//! Implementations provide `send` and `recv`; the collectives have correct default
//! implementations over them (direct exchange; each reduced value is computed by one member in
//! group order and shared, so every rank gets bit-identical results). A transport may override
//! them with its own schedules.
//! Byte counts are exact: a message whose length differs from what the receiver expects is a
//! [`CommError::Desync`], as is a message of another collective.

mod counted;
mod hierarchy;
mod inproc;
mod ring;

pub(crate) use counted::Counted;
pub use counted::{CommStats, comm_stats, reset_comm_stats};
pub use hierarchy::Grid;
pub use inproc::InProcComm;

use std::fmt;

use crate::dtype::DType;
use crate::reduce::{ReduceOp, combine_bytes};
use crate::sbp::balanced_range;

/// Which operation a message belongs to, carried with every message so that ranks issuing
/// collectives in different orders get an error instead of corrupt data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CommOp {
    /// A user-level or boxing point-to-point transfer.
    P2p,
    /// Part of an all-gather.
    AllGather,
    /// Part of a reduce-scatter.
    ReduceScatter,
    /// Part of an all-to-all.
    AllToAll,
    /// Part of a broadcast.
    Broadcast,
    /// Part of an all-reduce by recursive doubling (the other all-reduces are a reduce-scatter
    /// and an all-gather).
    AllReduce,
}

impl fmt::Display for CommOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommOp::P2p => "p2p",
            CommOp::AllGather => "all_gather",
            CommOp::ReduceScatter => "reduce_scatter",
            CommOp::AllToAll => "all_to_all",
            CommOp::Broadcast => "broadcast",
            CommOp::AllReduce => "all_reduce",
        })
    }
}

/// What a message belongs to: the operation and the group (a hash of its ranks, in order).
/// Carried with every message and checked on receipt, so ranks that issue collectives in
/// different orders, or on different groups, get [`CommError::Desync`] instead of wrong data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// The operation.
    pub op: CommOp,
    /// FNV-1a hash of the group's ranks (0 for a transfer outside any group).
    pub group: u64,
}

impl Tag {
    /// The tag of `op` within `group`.
    pub fn new(op: CommOp, group: &[usize]) -> Tag {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &r in group {
            for b in (r as u64).to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        Tag { op, group: h }
    }
}

impl From<CommOp> for Tag {
    fn from(op: CommOp) -> Tag {
        Tag { op, group: 0 }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in group {:016x}", self.op, self.group)
    }
}

/// Combines the message bytes `[at, at + piece.len())` into `acc` elementwise, pieces arriving in
/// order (a transport hands over its receive buffer piece by piece). An element split between
/// pieces waits in `carry`, which is empty at the start of a message.
pub fn combine_piece(
    acc: &mut [u8],
    dtype: DType,
    op: ReduceOp,
    carry: &mut Vec<u8>,
    mut at: usize,
    mut piece: &[u8],
) {
    let elem = dtype.size();
    if !carry.is_empty() {
        let take = (elem - carry.len()).min(piece.len());
        carry.extend_from_slice(&piece[..take]);
        (at, piece) = (at + take, &piece[take..]);
        if carry.len() == elem {
            combine_bytes(dtype, op, &mut acc[at - elem..at], carry);
            carry.clear();
        }
    }
    let whole = piece.len() / elem * elem;
    combine_bytes(dtype, op, &mut acc[at..at + whole], &piece[..whole]);
    carry.extend_from_slice(&piece[whole..]);
}

/// How a collective moves its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// One step: every member exchanges with every other at once (least latency; on one host
    /// the fastest).
    Direct,
    /// n-1 steps around a ring (each member talks to two neighbours), and a binomial tree for
    /// broadcasts: what a network between hosts wants.
    Ring,
    /// All-reduces by recursive doubling: ceil(log2 n) steps (plus two when n is not a power of
    /// two) in which partners swap whole buffers; the fewest steps, so the least latency for
    /// small messages. Other collectives run direct under it.
    Doubling,
}

/// The schedule of collective `op` over `n` members moving `bytes` in all.
/// `GFLOW_COLLECTIVES=direct`, `=ring` or `=doubling` forces one (every rank of a job must see
/// the same value, as the launcher ensures). Otherwise, measured on one host (2 cores):
/// recursive doubling for all-reduces up to [`DOUBLING_MAX_BYTES`], rings for all-gathers and
/// all-reduces from 3 members and [`RING_MIN_BYTES`] (all_gather 1.3 -> 1.9 GB/s at 16 MiB),
/// direct reduce-scatters (a ring needs a working copy of the input: 1.46 -> 1.03), trees for
/// broadcasts from [`TREE_MIN_MEMBERS`].
pub fn schedule(op: CommOp, n: usize, bytes: usize) -> Schedule {
    static FORCED: std::sync::OnceLock<Option<Schedule>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(
        || match std::env::var("GFLOW_COLLECTIVES").ok().as_deref() {
            Some("ring") => Some(Schedule::Ring),
            Some("direct") => Some(Schedule::Direct),
            Some("doubling") => Some(Schedule::Doubling),
            _ => None,
        },
    );
    let chosen = forced.unwrap_or(match op {
        CommOp::AllReduce if bytes <= DOUBLING_MAX_BYTES => Schedule::Doubling,
        CommOp::AllReduce | CommOp::AllGather if n >= 3 && bytes >= RING_MIN_BYTES => {
            Schedule::Ring
        }
        CommOp::Broadcast if n >= TREE_MIN_MEMBERS => Schedule::Ring,
        _ => Schedule::Direct,
    });
    tracing::debug!(?op, members = n, bytes, schedule = ?chosen, forced = forced.is_some(), "collective schedule");
    chosen
}

/// All-reduces up to this many bytes use recursive doubling unless forced.
pub const DOUBLING_MAX_BYTES: usize = 64 << 10;
/// All-gathers and all-reduces smaller than this use direct exchanges unless forced.
pub const RING_MIN_BYTES: usize = 1 << 20;
/// Broadcasts to fewer members than this use direct exchanges unless forced.
pub const TREE_MIN_MEMBERS: usize = 8;
/// All-reduces, all-gathers and reduce-scatters of at least this many bytes over several hosts
/// run hierarchically (below it, the fewer steps of the flat schedules win).
pub const HIERARCHY_MIN_BYTES: usize = 64 << 10;

/// The host layout on which a collective moving `bytes` over `group` runs hierarchically
/// ([`Grid`]: several hosts with equally many members each), or `None` for the flat schedules:
/// the schedule policy's topology half. `GFLOW_HIERARCHY=0` turns it off (every rank of a job
/// must see the same value, as the launcher ensures).
pub fn hierarchy<C: Communicator + ?Sized>(
    comm: &C,
    group: &[usize],
    bytes: usize,
) -> Option<Grid> {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off = *OFF.get_or_init(|| std::env::var("GFLOW_HIERARCHY").is_ok_and(|v| v == "0"));
    if off || bytes < HIERARCHY_MIN_BYTES {
        return None;
    }
    let grid = Grid::of(group, |r| comm.host_of(r))?;
    tracing::debug!(
        hosts = grid.hosts(),
        per_host = grid.per_host(),
        bytes,
        "hierarchical collective"
    );
    Some(grid)
}

/// One send of an [`Communicator::exchange`].
pub struct Outbound<'a> {
    /// The receiver.
    pub peer: usize,
    /// The message's tag.
    pub tag: Tag,
    /// The bytes.
    pub data: &'a [u8],
}

/// One receive of an [`Communicator::exchange`], copied into `out` (the message's length).
pub struct Inbound<'a> {
    /// The sender.
    pub peer: usize,
    /// The tag the message must carry.
    pub tag: Tag,
    /// Where its bytes go.
    pub out: &'a mut [u8],
}

/// The reducing receives of an [`Communicator::exchange`]: one message from each of `from`,
/// combined into `acc` with `op` in that order (so the result does not depend on timing).
pub struct Reduction<'a> {
    /// The accumulator; every message has its length.
    pub acc: &'a mut [u8],
    /// Element type.
    pub dtype: DType,
    /// The reduction.
    pub op: ReduceOp,
    /// (sender, tag) of each message, in combining order.
    pub from: Vec<(usize, Tag)>,
}

/// Failures of communication.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// The peer went away (its process or thread ended) before the transfer completed.
    #[error("rank {rank}: peer rank {peer} is gone")]
    PeerGone {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
    },
    /// The peer's process ended (killed, crashed or exited) before the transfer completed.
    #[error("rank {rank}: rank {peer} (pid {pid}, host {host}) exited")]
    PeerExited {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// The peer's process id.
        pid: u32,
        /// The peer's host.
        host: String,
    },
    /// Nothing at all (not even a keep-alive) came from the peer for `secs`: the network path
    /// to it went silent (a partition), or its host stopped; its process was not seen to end.
    #[error("rank {rank}: no packets from rank {peer} at {addr} for {secs} s")]
    PeerSilent {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// The peer's address.
        addr: String,
        /// How long nothing came, in seconds.
        secs: u64,
    },
    /// No message from the peer within the deadline.
    #[error("rank {rank}: timed out after {secs:.1} s waiting for rank {peer}")]
    Timeout {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// The deadline in seconds.
        secs: f64,
    },
    /// The peer sent a message of another operation or size: ranks issued collectives in
    /// different orders or with different arguments.
    #[error("rank {rank}: desync with rank {peer}: expected {expected}, got {got}")]
    Desync {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// What this rank expected.
        expected: String,
        /// What arrived.
        got: String,
    },
    /// The group or counts passed to a collective are inconsistent.
    #[error("rank {rank}: bad collective arguments: {reason}")]
    BadGroup {
        /// This rank.
        rank: usize,
        /// What is wrong.
        reason: String,
    },
    /// The transport failed (I/O, TLS, protocol).
    #[error("rank {rank}: transport failure: {reason}")]
    Transport {
        /// This rank.
        rank: usize,
        /// What failed.
        reason: String,
    },
}

impl CommError {
    /// The error for a peer this rank has no link to (out of the world, or itself).
    pub fn no_link(rank: usize, peer: usize, world: usize) -> CommError {
        CommError::BadGroup {
            rank,
            reason: format!("no link to rank {peer} in a world of {world}"),
        }
    }
}

/// Collectives for boxing. Groups are lists of world ranks, identical (same order) on every
/// member; every member calls the same collectives in the same order. Implementations provide
/// `send` and `recv_into`; every collective has a default built on them.
pub trait Communicator: Send + Sync {
    /// This rank in the world.
    fn rank(&self) -> usize;

    /// Number of ranks in the world.
    fn world_size(&self) -> usize;

    /// Sends `data` to `peer`, tagged with `op`. Does not wait for the receiver.
    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError>;

    /// Receives the next message from `peer` into `out`; it must be tagged `op` and hold exactly
    /// `out.len()` bytes (else [`CommError::Desync`]).
    fn recv_into(&self, peer: usize, tag: Tag, out: &mut [u8]) -> Result<(), CommError>;

    /// Receives the next message from `peer` (as [`Communicator::recv_into`]) and combines it
    /// into `acc` with `reduce` elementwise. A transport may combine straight from its receive
    /// buffer instead of copying the message out first.
    fn recv_combine(
        &self,
        peer: usize,
        tag: Tag,
        acc: &mut [u8],
        dtype: DType,
        reduce: ReduceOp,
    ) -> Result<(), CommError> {
        let mut tmp = vec![0u8; acc.len()];
        self.recv_into(peer, tag, &mut tmp)?;
        combine_bytes(dtype, reduce, acc, &tmp);
        Ok(())
    }

    /// Which host runs `rank`: ranks with equal values share memory, and collectives over
    /// several hosts use it to cross the network once per host ([`hierarchy`]). The default
    /// puts every rank on one host.
    fn host_of(&self, rank: usize) -> usize {
        let _ = rank;
        0
    }

    /// The schedule of collective `op` over `n` members moving `bytes` (see [`schedule`]); a
    /// transport may pin one.
    fn schedule(&self, op: CommOp, n: usize, bytes: usize) -> Schedule {
        schedule(op, n, bytes)
    }

    /// One step of a collective: sends, copying receives and reducing receives that proceed
    /// together. The default queues every send, then receives in order; a transport with
    /// non-blocking links interleaves them all, with no queue and no copy of the sent bytes.
    fn exchange(
        &self,
        sends: &[Outbound<'_>],
        copies: &mut [Inbound<'_>],
        reduce: Option<Reduction<'_>>,
    ) -> Result<(), CommError> {
        exchange_queued(self, sends, copies, reduce)
    }

    /// [`Communicator::exchange`] (copies only) that also copies this member's own block
    /// `own.0` into `own.1`, in its place among the copies: after the first `at` of them. Where
    /// receivers read straight out of the senders' memory, every member then copies block k at
    /// about the same time as the others, and they share its trip from memory. The default
    /// copies it first.
    fn exchange_with_own(
        &self,
        sends: &[Outbound<'_>],
        copies: &mut [Inbound<'_>],
        own: (&[u8], &mut [u8]),
        at: usize,
    ) -> Result<(), CommError> {
        let _ = at;
        own.1.copy_from_slice(own.0);
        self.exchange(sends, copies, None)
    }

    /// Sends the same bytes to several peers (an implementation may share one buffer).
    fn send_to_all(&self, peers: &[usize], tag: Tag, data: &[u8]) -> Result<(), CommError> {
        peers.iter().try_for_each(|&p| self.send(p, tag, data))
    }

    /// Receives `len` bytes from `peer` into a new buffer (see [`Communicator::recv_into`]).
    fn recv_exact(&self, peer: usize, tag: Tag, len: usize) -> Result<Vec<u8>, CommError> {
        let mut v = vec![0; len];
        self.recv_into(peer, tag, &mut v)?;
        Ok(v)
    }

    /// Every member's `mine` (member i contributes `counts[i]` bytes), concatenated in group
    /// order into `out` (which holds the sum of `counts`).
    fn all_gather_into(
        &self,
        group: &[usize],
        mine: &[u8],
        counts: &[usize],
        out: &mut [u8],
    ) -> Result<(), CommError> {
        let me = position(self.rank(), group, counts)?;
        check_len(self.rank(), mine.len(), counts[me], "all_gather input")?;
        check_len(
            self.rank(),
            out.len(),
            counts.iter().sum(),
            "all_gather output",
        )?;
        if let Some(grid) = hierarchy(self, group, out.len()) {
            return hierarchy::all_gather_into(self, group, &grid, me, mine, counts, out);
        }
        let tag = Tag::new(CommOp::AllGather, group);
        let schedule = self.schedule(CommOp::AllGather, group.len(), out.len());
        let mut slots = split_mut(out, counts);
        if schedule == Schedule::Ring {
            slots[me].copy_from_slice(mine);
            return ring::all_gather(self, group, me, tag, &mut slots);
        }
        let own = std::mem::take(&mut slots[me]);
        let sends = to_others(group, me, tag, |_| mine);
        let mut copies = from_others(group, me, tag, slots);
        self.exchange_with_own(&sends, &mut copies, (mine, own), me)
    }

    /// [`Communicator::all_gather_into`] into a new buffer.
    fn all_gather(
        &self,
        group: &[usize],
        mine: &[u8],
        counts: &[usize],
    ) -> Result<Vec<u8>, CommError> {
        let mut out = vec![0; counts.iter().sum()];
        self.all_gather_into(group, mine, counts, &mut out)?;
        Ok(out)
    }

    /// `data` holds one chunk per member (member i's chunk has `counts[i]` bytes, in group order);
    /// writes this member's chunk reduced with `op` over all members (its own, then the others'
    /// in group order) into `out`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_into(
        &self,
        group: &[usize],
        data: &[u8],
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
        out: &mut [u8],
    ) -> Result<(), CommError> {
        let me = position(self.rank(), group, counts)?;
        check_len(
            self.rank(),
            data.len(),
            counts.iter().sum(),
            "reduce_scatter input",
        )?;
        check_len(self.rank(), out.len(), counts[me], "reduce_scatter output")?;
        if let Some(grid) = hierarchy(self, group, data.len()) {
            return hierarchy::reduce_scatter_into(
                self, group, &grid, me, data, counts, dtype, op, out,
            );
        }
        let tag = Tag::new(CommOp::ReduceScatter, group);
        if self.schedule(CommOp::ReduceScatter, group.len(), data.len()) == Schedule::Ring {
            let mut work = data.to_vec();
            let mut slots = split_mut(&mut work, counts);
            ring::reduce_scatter(self, group, me, tag, &mut slots, dtype, op)?;
            out.copy_from_slice(slots[me]);
            return Ok(());
        }
        let offsets = prefix(counts);
        let chunk = |i: usize| &data[offsets[i]..offsets[i + 1]];
        out.copy_from_slice(chunk(me));
        let sends = to_others(group, me, tag, chunk);
        let reduce = reduction(group, me, tag, out, dtype, op);
        self.exchange(&sends, &mut [], Some(reduce))
    }

    /// [`Communicator::reduce_scatter_into`] into a new buffer.
    fn reduce_scatter(
        &self,
        group: &[usize],
        data: &[u8],
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<Vec<u8>, CommError> {
        let me = position(self.rank(), group, counts)?;
        let mut out = vec![0; counts[me]];
        self.reduce_scatter_into(group, data, counts, dtype, op, &mut out)?;
        Ok(out)
    }

    /// Reduces `data` with `op` over the group, in place, with the same result on every member.
    fn all_reduce(
        &self,
        group: &[usize],
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        if group == [self.rank()] {
            return Ok(());
        }
        let elems = data.len() / dtype.size();
        let counts: Vec<usize> = (0..group.len())
            .map(|i| balanced_range(elems, group.len(), i).len() * dtype.size())
            .collect();
        let me = position(self.rank(), group, &counts)?;
        if let Some(grid) = hierarchy(self, group, data.len()) {
            return hierarchy::all_reduce(self, group, &grid, me, data, dtype, op);
        }
        let schedule = self.schedule(CommOp::AllReduce, group.len(), data.len());
        if schedule == Schedule::Doubling {
            let tag = Tag::new(CommOp::AllReduce, group);
            return ring::all_reduce_doubling(self, group, me, tag, data, dtype, op);
        }
        if schedule == Schedule::Ring {
            let mut slots = split_mut(data, &counts);
            let tag = Tag::new(CommOp::ReduceScatter, group);
            ring::reduce_scatter(self, group, me, tag, &mut slots, dtype, op)?;
            let tag = Tag::new(CommOp::AllGather, group);
            return ring::all_gather(self, group, me, tag, &mut slots);
        }
        // In place: each member reduces its own segment (its value, then the others' in group
        // order) and shares it, so every member ends with bit-identical data.
        let mut slots = split_mut(data, &counts);
        let own = std::mem::take(&mut slots[me]);
        let tag = Tag::new(CommOp::ReduceScatter, group);
        let sends = to_others(group, me, tag, |i| &*slots[i]);
        self.exchange(
            &sends,
            &mut [],
            Some(reduction(group, me, tag, &mut *own, dtype, op)),
        )?;
        let tag = Tag::new(CommOp::AllGather, group);
        let own = &*own;
        let sends = to_others(group, me, tag, |_| own);
        let mut copies = from_others(group, me, tag, slots);
        self.exchange(&sends, &mut copies, None)
    }

    /// Sends `sends[i]` to member i and returns what each member sent here (`recv_counts[i]` bytes
    /// from member i).
    fn all_to_all(
        &self,
        group: &[usize],
        sends: &[&[u8]],
        recv_counts: &[usize],
    ) -> Result<Vec<Vec<u8>>, CommError> {
        let mut out = vec![0; recv_counts.iter().sum()];
        self.all_to_all_into(group, sends, recv_counts, &mut out)?;
        let mut rest = &out[..];
        Ok(recv_counts
            .iter()
            .map(|&n| {
                let (head, tail) = rest.split_at(n);
                rest = tail;
                head.to_vec()
            })
            .collect())
    }

    /// [`Communicator::all_to_all`] into one buffer: member i's bytes at offset
    /// `recv_counts[..i].sum()` of `out` (which holds the sum of `recv_counts`), as MPI's
    /// `Alltoallv` into a preallocated buffer.
    fn all_to_all_into(
        &self,
        group: &[usize],
        sends: &[&[u8]],
        recv_counts: &[usize],
        out: &mut [u8],
    ) -> Result<(), CommError> {
        let me = position(self.rank(), group, recv_counts)?;
        check_len(
            self.rank(),
            sends.len(),
            group.len(),
            "all_to_all send list",
        )?;
        check_len(
            self.rank(),
            sends[me].len(),
            recv_counts[me],
            "all_to_all self part",
        )?;
        check_len(
            self.rank(),
            out.len(),
            recv_counts.iter().sum(),
            "all_to_all output",
        )?;
        let tag = Tag::new(CommOp::AllToAll, group);
        let mut slots = split_mut(out, recv_counts);
        slots[me].copy_from_slice(sends[me]);
        let outbound = to_others(group, me, tag, |i| sends[i]);
        let mut copies = from_others(group, me, tag, slots);
        self.exchange(&outbound, &mut copies, None)
    }

    /// Copies `len` bytes from the member at group position `root` to every member.
    fn broadcast(
        &self,
        group: &[usize],
        root: usize,
        data: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, CommError> {
        let me = position(self.rank(), group, group)?;
        if root >= group.len() {
            return Err(CommError::BadGroup {
                rank: self.rank(),
                reason: format!("broadcast root {root} outside a group of {}", group.len()),
            });
        }
        let tag = Tag::new(CommOp::Broadcast, group);
        if self.schedule(CommOp::Broadcast, group.len(), len) == Schedule::Ring {
            let mut buf = if me == root {
                check_len(self.rank(), data.len(), len, "broadcast input")?;
                data.to_vec()
            } else {
                vec![0; len]
            };
            ring::broadcast(self, group, me, root, tag, &mut buf)?;
            return Ok(buf);
        }
        if me == root {
            check_len(self.rank(), data.len(), len, "broadcast input")?;
            self.exchange(&to_others(group, me, tag, |_| data), &mut [], None)?;
            Ok(data.to_vec())
        } else {
            let mut out = vec![0; len];
            let mut copies = [Inbound {
                peer: group[root],
                tag,
                out: &mut out,
            }];
            self.exchange(&[], &mut copies, None)?;
            Ok(out)
        }
    }

    /// Waits until every member of `group` has arrived.
    fn barrier(&self, group: &[usize]) -> Result<(), CommError> {
        self.all_gather_into(group, &[], &vec![0; group.len()], &mut [])
            .map(|_| ())
    }
}

/// [`Communicator::exchange`] by queued sends, then receives in order: the default, and the
/// fallback of a transport whose links cannot interleave.
///
/// # Errors
/// The first failing send or receive.
pub fn exchange_queued<C: Communicator + ?Sized>(
    comm: &C,
    sends: &[Outbound<'_>],
    copies: &mut [Inbound<'_>],
    reduce: Option<Reduction<'_>>,
) -> Result<(), CommError> {
    for s in sends {
        comm.send(s.peer, s.tag, s.data)?;
    }
    for c in copies {
        comm.recv_into(c.peer, c.tag, c.out)?;
    }
    if let Some(r) = reduce {
        for (peer, tag) in r.from {
            comm.recv_combine(peer, tag, r.acc, r.dtype, r.op)?;
        }
    }
    Ok(())
}

/// `buf` cut into consecutive pieces of `counts` bytes.
fn split_mut<'a>(mut buf: &'a mut [u8], counts: &[usize]) -> Vec<&'a mut [u8]> {
    counts
        .iter()
        .map(|&n| {
            let (head, tail) = std::mem::take(&mut buf).split_at_mut(n);
            buf = tail;
            head
        })
        .collect()
}

/// A send of `data(i)` to every member i but `me`.
fn to_others<'a>(
    group: &[usize],
    me: usize,
    tag: Tag,
    data: impl Fn(usize) -> &'a [u8],
) -> Vec<Outbound<'a>> {
    (0..group.len())
        .filter(|&i| i != me)
        .map(|i| Outbound {
            peer: group[i],
            tag,
            data: data(i),
        })
        .collect()
}

/// A receive from every member i but `me` into `slots[i]`.
fn from_others<'a>(
    group: &[usize],
    me: usize,
    tag: Tag,
    slots: Vec<&'a mut [u8]>,
) -> Vec<Inbound<'a>> {
    slots
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i != me)
        .map(|(i, out)| Inbound {
            peer: group[i],
            tag,
            out,
        })
        .collect()
}

/// Every other member's message combined into `acc`, in group order.
fn reduction<'a>(
    group: &[usize],
    me: usize,
    tag: Tag,
    acc: &'a mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Reduction<'a> {
    Reduction {
        acc,
        dtype,
        op,
        from: others(group, me).into_iter().map(|p| (p, tag)).collect(),
    }
}

/// This rank's position in `group`, after checking the group and a per-member list agree.
fn position<T>(rank: usize, group: &[usize], per_member: &[T]) -> Result<usize, CommError> {
    if group.len() != per_member.len() {
        return Err(CommError::BadGroup {
            rank,
            reason: format!("{} members but {} counts", group.len(), per_member.len()),
        });
    }
    group
        .iter()
        .position(|&r| r == rank)
        .ok_or_else(|| CommError::BadGroup {
            rank,
            reason: format!("rank {rank} is not in the group {group:?}"),
        })
}

/// The group's members other than the one at position `me`.
fn others(group: &[usize], me: usize) -> Vec<usize> {
    group
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != me)
        .map(|(_, &p)| p)
        .collect()
}

fn check_len(rank: usize, got: usize, want: usize, what: &str) -> Result<(), CommError> {
    if got == want {
        Ok(())
    } else {
        Err(CommError::BadGroup {
            rank,
            reason: format!("{what} has {got} bytes, expected {want}"),
        })
    }
}

/// Offsets of consecutive chunks of the given sizes, with the total last.
fn prefix(counts: &[usize]) -> Vec<usize> {
    let mut v = Vec::with_capacity(counts.len() + 1);
    let mut acc = 0;
    v.push(0);
    for c in counts {
        acc += c;
        v.push(acc);
    }
    v
}
