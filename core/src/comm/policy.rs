//! The schedule policy: which schedule each collective runs and whether it runs hierarchically.
//! One value, read from the environment once ([`Policy::from_env`]); a transport may pin a
//! schedule or prefer direct exchanges ([`Communicator::policy`](super::Communicator::policy)).

use std::sync::OnceLock;

use super::CommOp;
use super::hierarchy::Grid;

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

/// All-reduces up to this many bytes use recursive doubling unless forced.
pub const DOUBLING_MAX_BYTES: usize = 64 << 10;
/// All-gathers and all-reduces smaller than this use direct exchanges unless forced.
pub const RING_MIN_BYTES: usize = 1 << 20;
/// Broadcasts to fewer members than this use direct exchanges unless forced.
pub const TREE_MIN_MEMBERS: usize = 8;
/// All-reduces, all-gathers and reduce-scatters of at least this many bytes over several hosts
/// run hierarchically (below it, the fewer steps of the flat schedules win).
pub const HIERARCHY_MIN_BYTES: usize = 64 << 10;

/// Which schedules collectives run. Every rank of a job must hold the same policy (the launcher
/// passes every rank the same environment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A schedule forced for every collective (`GFLOW_COLLECTIVES=direct|ring|doubling`).
    pub forced: Option<Schedule>,
    /// Collectives over several hosts may run hierarchically (`GFLOW_HIERARCHY=0` turns it off).
    pub hierarchy: bool,
    /// Direct exchanges where the choice by size would run rings: every rank shares this host
    /// and sends payloads by reference, so a payload costs one copy however many peers read it.
    /// A forced schedule stays.
    pub prefer_direct: bool,
    /// Direct all-reduces cut each member's slot into pieces of about this many bytes (when it
    /// holds at least two) and interleave their reduce-scatters and all-gathers: set by
    /// transports that copy or encrypt each message they send ([`PIPELINE_PIECE`],
    /// [`TCP_PIPELINE_PIECE`]), so a reduced piece is sealed while it is in cache.
    pub pipeline: Option<usize>,
}

/// The piece of a pipelined direct all-reduce ([`Policy::pipeline`]) over QUIC: 2 hosts x 1
/// rank, all_reduce 16 and 128 MiB, CPU of both ranks 5.93-6.11 s with whole slots, 5.06-5.18
/// with 1 MiB pieces, 5.25-5.38 with 4 MiB, 6.92-6.94 with 256 KiB.
pub const PIPELINE_PIECE: usize = 1 << 20;

/// The piece of a pipelined direct all-reduce over TLS on TCP: 2 hosts x 1 rank (MTU 9000),
/// all_reduce 128 MiB busbw 0.94-0.98 GB/s with whole slots, 1.09-1.11 with 1 MiB pieces, 1.09
/// with 2 MiB, 1.14-1.18 with 4 MiB, 1.07-1.14 with 8 MiB (Gloo 0.88-0.92 in the same runs).
pub const TCP_PIPELINE_PIECE: usize = 4 << 20;

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            forced: None,
            hierarchy: true,
            prefer_direct: false,
            pipeline: None,
        }
    }
}

impl Policy {
    /// The policy the environment asks for, read once per process: `GFLOW_COLLECTIVES=direct`,
    /// `=ring` or `=doubling` forces a schedule, `GFLOW_HIERARCHY=0` turns hierarchies off.
    pub fn from_env() -> Policy {
        static POLICY: OnceLock<Policy> = OnceLock::new();
        *POLICY.get_or_init(|| Policy {
            forced: std::env::var("GFLOW_COLLECTIVES")
                .ok()
                .as_deref()
                .and_then(Schedule::parse),
            hierarchy: std::env::var("GFLOW_HIERARCHY").map_or(true, |v| v != "0"),
            prefer_direct: false,
            pipeline: None,
        })
    }

    /// Into how many pieces a direct all-reduce cuts a member's slot of `slot` bytes (1: not
    /// pipelined).
    pub fn pieces(&self, slot: usize) -> usize {
        self.pipeline
            .map_or(1, |piece| (slot / piece.max(1)).max(1))
    }

    /// The schedule of collective `op` over `n` members moving `bytes` in all. Unless forced,
    /// measured on one host (2 cores): recursive doubling for all-reduces up to
    /// [`DOUBLING_MAX_BYTES`], rings for all-gathers and all-reduces from 3 members and
    /// [`RING_MIN_BYTES`] (all_gather 1.3 -> 1.9 GB/s at 16 MiB), direct reduce-scatters (a ring
    /// needs a working copy of the input: 1.46 -> 1.03), trees for broadcasts from
    /// [`TREE_MIN_MEMBERS`].
    ///
    /// ```
    /// use gflow_core::comm::{CommOp, Policy, Schedule};
    /// let p = Policy::default();
    /// assert_eq!(p.schedule(CommOp::AllReduce, 4, 1024), Schedule::Doubling);
    /// assert_eq!(p.schedule(CommOp::AllGather, 4, 16 << 20), Schedule::Ring);
    /// let forced = Policy { forced: Some(Schedule::Direct), ..p };
    /// assert_eq!(forced.schedule(CommOp::AllGather, 4, 16 << 20), Schedule::Direct);
    /// ```
    pub fn schedule(&self, op: CommOp, n: usize, bytes: usize) -> Schedule {
        let chosen = self.forced.unwrap_or(match op {
            CommOp::AllReduce if bytes <= DOUBLING_MAX_BYTES => Schedule::Doubling,
            CommOp::AllReduce | CommOp::AllGather
                if n >= 3 && bytes >= RING_MIN_BYTES && !self.prefer_direct =>
            {
                Schedule::Ring
            }
            CommOp::Broadcast if n >= TREE_MIN_MEMBERS && !self.prefer_direct => Schedule::Ring,
            _ => Schedule::Direct,
        });
        tracing::debug!(?op, members = n, bytes, schedule = ?chosen, forced = self.forced.is_some(), "collective schedule");
        chosen
    }

    /// The host layout on which a collective moving `bytes` over `group` runs hierarchically
    /// ([`Grid`]: several hosts with equally many members each; rank `r` runs on host
    /// `host_of(r)`), or `None` for the flat schedules: the policy's topology half.
    pub fn grid(
        &self,
        group: &[usize],
        bytes: usize,
        host_of: impl Fn(usize) -> usize,
    ) -> Option<Grid> {
        if !self.hierarchy || bytes < HIERARCHY_MIN_BYTES {
            return None;
        }
        let grid = Grid::of(group, host_of)?;
        tracing::debug!(
            hosts = grid.hosts(),
            per_host = grid.per_host(),
            bytes,
            "hierarchical collective"
        );
        Some(grid)
    }
}

impl Schedule {
    /// Reads a `GFLOW_COLLECTIVES` value (`direct`, `ring`, `doubling`); `None` for others.
    pub fn parse(value: &str) -> Option<Schedule> {
        match value {
            "direct" => Some(Schedule::Direct),
            "ring" => Some(Schedule::Ring),
            "doubling" => Some(Schedule::Doubling),
            _ => None,
        }
    }
}
