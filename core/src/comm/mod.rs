//! The `Communicator` seam: point-to-point messages and collectives on any group of ranks, each
//! returning a `Result` (a peer that is gone is an error, never a hang).
//!
//! Implementations provide `send` and `recv`; the collectives have correct default
//! implementations over them (direct exchange, reductions in group order so every rank gets
//! bit-identical results). The network transport overrides them with ring and tree schedules.
//! Byte counts are exact: a message whose length differs from what the receiver expects is a
//! [`CommError::Desync`], as is a message of another collective.

mod inproc;

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
}

impl fmt::Display for CommOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommOp::P2p => "p2p",
            CommOp::AllGather => "all_gather",
            CommOp::ReduceScatter => "reduce_scatter",
            CommOp::AllToAll => "all_to_all",
            CommOp::Broadcast => "broadcast",
        })
    }
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

/// Collectives for boxing. Groups are lists of world ranks, identical (same order) on every
/// member; every member calls the same collectives in the same order.
pub trait Communicator: Send + Sync {
    /// This rank in the world.
    fn rank(&self) -> usize;

    /// Number of ranks in the world.
    fn world_size(&self) -> usize;

    /// Sends `data` to `peer`, tagged with `op`. Does not wait for the receiver.
    fn send(&self, peer: usize, op: CommOp, data: &[u8]) -> Result<(), CommError>;

    /// Receives the next message from `peer`, which must be tagged `op`.
    fn recv(&self, peer: usize, op: CommOp) -> Result<Vec<u8>, CommError>;

    /// Receives the next message from `peer`, which must be tagged `op` and hold `len` bytes.
    fn recv_exact(&self, peer: usize, op: CommOp, len: usize) -> Result<Vec<u8>, CommError> {
        let m = self.recv(peer, op)?;
        if m.len() != len {
            return Err(CommError::Desync {
                rank: self.rank(),
                peer,
                expected: format!("{op} of {len} bytes"),
                got: format!("{op} of {} bytes", m.len()),
            });
        }
        Ok(m)
    }

    /// Every member's `mine` (member i contributes `counts[i]` bytes), concatenated in group order.
    fn all_gather(&self, group: &[usize], mine: &[u8], counts: &[usize]) -> Result<Vec<u8>, CommError> {
        let me = position(self.rank(), group, counts)?;
        check_len(self.rank(), mine.len(), counts[me], "all_gather input")?;
        for (i, &p) in group.iter().enumerate() {
            if i != me {
                self.send(p, CommOp::AllGather, mine)?;
            }
        }
        let mut out = Vec::with_capacity(counts.iter().sum());
        for (i, &p) in group.iter().enumerate() {
            if i == me {
                out.extend_from_slice(mine);
            } else {
                out.extend_from_slice(&self.recv_exact(p, CommOp::AllGather, counts[i])?);
            }
        }
        Ok(out)
    }

    /// `data` holds one chunk per member (member i's chunk has `counts[i]` bytes, in group order);
    /// returns this member's chunk reduced with `op` over all members.
    fn reduce_scatter(
        &self,
        group: &[usize],
        data: &[u8],
        counts: &[usize],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<Vec<u8>, CommError> {
        let me = position(self.rank(), group, counts)?;
        check_len(self.rank(), data.len(), counts.iter().sum(), "reduce_scatter input")?;
        let offsets = prefix(counts);
        for (i, &p) in group.iter().enumerate() {
            if i != me {
                self.send(p, CommOp::ReduceScatter, &data[offsets[i]..offsets[i + 1]])?;
            }
        }
        let own = &data[offsets[me]..offsets[me + 1]];
        // Reduce in group order, so the result does not depend on which member computes it.
        let mut acc: Option<Vec<u8>> = None;
        for (i, &p) in group.iter().enumerate() {
            let part = if i == me {
                own.to_vec()
            } else {
                self.recv_exact(p, CommOp::ReduceScatter, counts[me])?
            };
            match acc.as_mut() {
                None => acc = Some(part),
                Some(a) => combine_bytes(dtype, op, a, &part),
            }
        }
        Ok(acc.unwrap_or_default())
    }

    /// Reduces `data` with `op` over the group, in place, with the same result on every member.
    fn all_reduce(
        &self,
        group: &[usize],
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let elems = data.len() / dtype.size();
        let counts: Vec<usize> = (0..group.len())
            .map(|i| balanced_range(elems, group.len(), i).len() * dtype.size())
            .collect();
        let mine = self.reduce_scatter(group, data, &counts, dtype, op)?;
        let all = self.all_gather(group, &mine, &counts)?;
        data.copy_from_slice(&all);
        Ok(())
    }

    /// Sends `sends[i]` to member i and returns what each member sent here (`recv_counts[i]` bytes
    /// from member i).
    fn all_to_all(
        &self,
        group: &[usize],
        sends: &[&[u8]],
        recv_counts: &[usize],
    ) -> Result<Vec<Vec<u8>>, CommError> {
        let me = position(self.rank(), group, recv_counts)?;
        check_len(self.rank(), sends.len(), group.len(), "all_to_all send list")?;
        for (i, &p) in group.iter().enumerate() {
            if i != me {
                self.send(p, CommOp::AllToAll, sends[i])?;
            }
        }
        group
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                if i == me {
                    check_len(self.rank(), sends[i].len(), recv_counts[i], "all_to_all self part")?;
                    Ok(sends[i].to_vec())
                } else {
                    self.recv_exact(p, CommOp::AllToAll, recv_counts[i])
                }
            })
            .collect()
    }

    /// Copies `len` bytes from the member at group position `root` to every member.
    fn broadcast(&self, group: &[usize], root: usize, data: &[u8], len: usize) -> Result<Vec<u8>, CommError> {
        let me = position(self.rank(), group, group)?;
        if root >= group.len() {
            return Err(CommError::BadGroup {
                rank: self.rank(),
                reason: format!("broadcast root {root} outside a group of {}", group.len()),
            });
        }
        if me == root {
            check_len(self.rank(), data.len(), len, "broadcast input")?;
            for (i, &p) in group.iter().enumerate() {
                if i != me {
                    self.send(p, CommOp::Broadcast, data)?;
                }
            }
            Ok(data.to_vec())
        } else {
            self.recv_exact(group[root], CommOp::Broadcast, len)
        }
    }

    /// Waits until every member of `group` has arrived.
    fn barrier(&self, group: &[usize]) -> Result<(), CommError> {
        self.all_gather(group, &[], &vec![0; group.len()]).map(|_| ())
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
    group.iter().position(|&r| r == rank).ok_or_else(|| CommError::BadGroup {
        rank,
        reason: format!("rank {rank} is not in the group {group:?}"),
    })
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
