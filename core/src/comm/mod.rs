//! The `Communicator` seam: what a transport must give (rank, world size, point-to-point sends,
//! one step of an exchange, the host of each rank), and nothing more. Every collective is a
//! `Plan` (a pure function of operation, group, sizes and [`Policy`]) run by one driver,
//! [`Collectives`], which no transport can override: every transport gets every algorithm, and
//! every member gets bit-identical results by construction (each reduced value is combined in
//! one fixed order at one member and shared).
//! Byte counts are exact: a message whose length differs from what the receiver expects is a
//! [`CommError::Desync`], as is a message of another collective.

mod counted;
mod direct;
mod driver;
mod hierarchy;
mod inproc;
mod payload;
mod plan;
mod policy;
mod ring;
mod schedule;

pub(crate) use counted::Counted;
pub use counted::{CommStats, comm_stats, reset_comm_stats};
pub use driver::Collectives;
pub use hierarchy::Grid;
pub use inproc::InProcComm;
pub use payload::Payload;
pub use policy::{
    DOUBLING_MAX_BYTES, HIERARCHY_MIN_BYTES, PIPELINE_PIECE, Policy, RING_MIN_BYTES, Schedule,
    TCP_PIPELINE_PIECE, TREE_MIN_MEMBERS,
};

use std::fmt;

use crate::dtype::DType;
use crate::reduce::{ReduceOp, combine_bytes};

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
/// order (a transport hands over its receive buffer piece by piece); with `base`, the same bytes
/// of `acc` are first taken from it (the first message of an out-of-place reduction: the copy
/// moves one piece, in cache, instead of the whole input ahead of the collective). An element
/// split between pieces waits in `carry`, which is empty at the start of a message.
pub fn combine_piece(
    (acc, base): (&mut [u8], Option<&[u8]>),
    (dtype, op): (DType, ReduceOp),
    carry: &mut Vec<u8>,
    mut at: usize,
    mut piece: &[u8],
) {
    if let Some(base) = base {
        let range = at..at + piece.len();
        acc[range.clone()].copy_from_slice(&base[range]);
    }
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

/// One send of an [`Exchange`].
pub struct Outbound<'a> {
    /// The receiver.
    pub peer: usize,
    /// The message's tag.
    pub tag: Tag,
    /// The bytes (contiguous, or runs at a stride: a transport sends them without packing).
    pub data: Payload<'a>,
}

/// One receive of an [`Exchange`], copied into `out` (the message's length).
pub struct Inbound<'a> {
    /// The sender.
    pub peer: usize,
    /// The tag the message must carry.
    pub tag: Tag,
    /// Where its bytes go.
    pub out: &'a mut [u8],
}

/// The reducing receives of an [`Exchange`]: one message from each of `from`,
/// combined into `acc` with `op` in that order (so the result does not depend on timing).
pub struct Reduction<'a> {
    /// The accumulator; every message has its length.
    pub acc: &'a mut [u8],
    /// The first message's left operand in place of `acc`'s contents (an out-of-place
    /// reduction), of `acc`'s length.
    pub base: Option<&'a [u8]>,
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

/// What a transport gives: one rank's view of the world, point-to-point sends, and one step of
/// an exchange. Groups are lists of world ranks, identical (same order) on every member; every
/// member runs the same collectives ([`Collectives`], implemented for every communicator) in the
/// same order.
pub trait Communicator: Send + Sync {
    /// This rank in the world.
    fn rank(&self) -> usize;

    /// Number of ranks in the world.
    fn world_size(&self) -> usize;

    /// Sends `data` to `peer`, tagged `tag`, without waiting for the receiver (the transport
    /// queues it): point-to-point transfers whose receives come later.
    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError>;

    /// One step of a collective: sends, copying receives, reducing receives and a local copy
    /// that proceed together; returns when all are done. Messages to or from one peer keep
    /// their order (sends queued by [`Communicator::send`] first).
    fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError>;

    /// Which host runs `rank`: ranks with equal values share memory, and collectives over
    /// several hosts use it to cross the network once per host. The default puts every rank on
    /// one host.
    fn host_of(&self, rank: usize) -> usize {
        let _ = rank;
        0
    }

    /// The schedule policy: [`Policy::from_env`] unless the transport pins one (every member
    /// of a group must see the same).
    fn policy(&self) -> Policy {
        Policy::from_env()
    }

    /// Told once per collective this member starts, before its first step (counters use it).
    fn observe(&self, op: CommOp) {
        let _ = op;
    }
}

/// One step of an exchange ([`Communicator::exchange`]).
#[derive(Default)]
pub struct Exchange<'a> {
    /// Messages to send.
    pub sends: Vec<Outbound<'a>>,
    /// Messages to receive, each copied into its buffer.
    pub copies: Vec<Inbound<'a>>,
    /// Messages to receive and combine into one accumulator.
    pub reduce: Option<Reduction<'a>>,
    /// A local copy of this member's own block, made in its place among the copies.
    pub own: Option<Own<'a>>,
}

/// This member's own block of an all-gather, copied locally in an [`Exchange`] once the first
/// `at` copies are done and before a later one takes a byte. Where receivers read straight out
/// of the senders' memory, every member then copies block k at about the same time as the
/// others, and they share its trip from memory; a transport may also copy it first.
pub struct Own<'a> {
    /// The block (an all-to-all's own block may be runs at a stride).
    pub from: Payload<'a>,
    /// Where it goes.
    pub to: &'a mut [u8],
    /// How many copies precede it.
    pub at: usize,
}

/// A transport whose receives block: [`exchange_queued`] runs an [`Exchange`] over it.
pub trait Mailbox: Communicator {
    /// Receives the next message from `peer`, which must carry `tag` and hold `len` bytes (else
    /// [`CommError::Desync`]), handing its payload to `sink` as (offset, bytes) pieces in order.
    fn fetch(
        &self,
        peer: usize,
        tag: Tag,
        len: usize,
        sink: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), CommError>;
}

/// [`Communicator::exchange`] by queued sends, then receives in order: for transports whose
/// links cannot interleave.
///
/// # Errors
/// The first failing send or receive.
pub fn exchange_queued<M: Mailbox + ?Sized>(m: &M, step: Exchange<'_>) -> Result<(), CommError> {
    if let Some(own) = step.own {
        own.from.copy_to(own.to);
    }
    for s in &step.sends {
        m.send(s.peer, s.tag, &s.data.to_bytes())?;
    }
    for c in step.copies {
        let out = c.out;
        m.fetch(c.peer, c.tag, out.len(), &mut |at, piece| {
            out[at..at + piece.len()].copy_from_slice(piece);
        })?;
    }
    if let Some(r) = step.reduce {
        let mut carry = Vec::with_capacity(r.dtype.size());
        for (i, (peer, tag)) in r.from.into_iter().enumerate() {
            let base = r.base.filter(|_| i == 0);
            m.fetch(peer, tag, r.acc.len(), &mut |at, piece| {
                combine_piece((r.acc, base), (r.dtype, r.op), &mut carry, at, piece);
            })?;
        }
    }
    Ok(())
}
