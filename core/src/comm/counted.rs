//! What a rank's communication costs, as DTensor's `CommDebugMode`: every communicator an
//! [`Env`](crate::env::Env) holds is wrapped in [`Counted`], which counts the payload bytes of
//! each message to or from another rank and each collective run, then forwards to the transport.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{CommError, CommOp, Communicator, Exchange, Policy, Tag};

/// This rank's communication since its start or the last [`reset_comm_stats`]: what
/// [`comm_stats`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// Payload bytes sent to other ranks.
    pub bytes_sent: u64,
    /// Payload bytes received from other ranks.
    pub bytes_received: u64,
    /// The part of `bytes_sent` that went to ranks on other hosts (over the network).
    pub bytes_sent_off_host: u64,
    /// Collective operations run (all-gather, reduce-scatter, all-reduce, all-to-all, broadcast).
    pub collectives: u64,
}

/// The live counters behind [`CommStats`].
#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    off_host: AtomicU64,
    collectives: AtomicU64,
}

/// A communicator that counts what passes through it (see the module docs).
pub(crate) struct Counted {
    inner: Arc<dyn Communicator>,
    counts: Counters,
    /// Serialises a read-and-reset against itself (the counters themselves are atomics).
    reset: Mutex<()>,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn Communicator>) -> Counted {
        Counted {
            inner,
            counts: Counters::default(),
            reset: Mutex::new(()),
        }
    }

    /// The counts so far.
    pub(crate) fn stats(&self) -> CommStats {
        CommStats {
            bytes_sent: self.counts.sent.load(Ordering::Relaxed),
            bytes_received: self.counts.received.load(Ordering::Relaxed),
            bytes_sent_off_host: self.counts.off_host.load(Ordering::Relaxed),
            collectives: self.counts.collectives.load(Ordering::Relaxed),
        }
    }

    /// Sets every count back to zero.
    pub(crate) fn reset(&self) {
        let _guard = self.reset.lock().unwrap_or_else(|p| p.into_inner());
        self.counts.sent.store(0, Ordering::Relaxed);
        self.counts.received.store(0, Ordering::Relaxed);
        self.counts.off_host.store(0, Ordering::Relaxed);
        self.counts.collectives.store(0, Ordering::Relaxed);
    }

    /// Counts `bytes` sent to `peer`.
    fn sent(&self, peer: usize, bytes: usize) {
        self.counts.sent.fetch_add(bytes as u64, Ordering::Relaxed);
        let inner = self.inner.as_ref();
        if inner.host_of(peer) != inner.host_of(inner.rank()) {
            self.counts
                .off_host
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    fn received(&self, bytes: usize) {
        self.counts
            .received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// Forwards to the transport, counting each message's payload and each collective once (the
/// driver reports it through [`Communicator::observe`]).
impl Communicator for Counted {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.sent(peer, data.len());
        self.inner.send(peer, tag, data)
    }

    fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError> {
        step.sends
            .iter()
            .for_each(|s| self.sent(s.peer, s.data.len()));
        self.received(step.copies.iter().map(|r| r.out.len()).sum());
        if let Some(r) = &step.reduce {
            self.received(r.acc.len() * r.from.len());
        }
        self.inner.exchange(step)
    }

    fn host_of(&self, rank: usize) -> usize {
        self.inner.host_of(rank)
    }

    fn policy(&self) -> Policy {
        self.inner.policy()
    }

    fn observe(&self, op: CommOp) {
        self.counts.collectives.fetch_add(1, Ordering::Relaxed);
        self.inner.observe(op);
    }
}

/// This rank's communication counts (per rank thread under `simulate`) since its start or the
/// last [`reset_comm_stats`], as DTensor's `CommDebugMode`: a check that what should not move
/// does not.
///
/// ```
/// use gflow_core::{comm_stats, reset_comm_stats, simulate, Placement, Sbp, Tensor};
/// let moved = simulate(2, |_env| {
///     let p = Placement::new("cpu", [0, 1])?;
///     let x = Tensor::ones(&[4, 4], (&p, [Sbp::split(0)]))?;
///     reset_comm_stats();
///     let _same = x.to_global(&p, [Sbp::split(0)])?; // nothing moves
///     let quiet = comm_stats();
///     let _all = x.to_global(&p, [Sbp::broadcast()])?; // one all-gather
///     Ok((quiet, comm_stats()))
/// })?;
/// let (quiet, gathered) = moved[0];
/// assert_eq!((quiet.bytes_sent, quiet.collectives), (0, 0));
/// assert_eq!(gathered.collectives, 1);
/// assert_eq!(gathered.bytes_sent, 2 * 4 * 4); // rank 0's two f32 rows, to rank 1
/// # Ok::<(), gflow_core::Error>(())
/// ```
pub fn comm_stats() -> CommStats {
    crate::env::current().comm_counts().stats()
}

/// Sets this rank's [`comm_stats`] back to zero.
pub fn reset_comm_stats() {
    crate::env::current().comm_counts().reset();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{Collectives, InProcComm};
    use crate::dtype::DType;
    use crate::reduce::ReduceOp;

    #[test]
    fn a_collective_counts_once_and_its_messages_count_their_bytes() {
        let comms = InProcComm::mesh(3, std::time::Duration::from_secs(10));
        let done: Vec<CommStats> = std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .map(|c| {
                    s.spawn(move || {
                        let c = Counted::new(Arc::new(c));
                        let mut data = vec![1u8; 12 * 4];
                        c.all_reduce(&[0, 1, 2], &mut data, DType::F32, ReduceOp::Sum)
                            .map(|()| c.stats())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        // Whatever the schedule, every byte one rank sends another receives, and each rank
        // takes part in its share of the reduction.
        let total = |f: fn(&CommStats) -> u64| done.iter().map(f).sum::<u64>();
        assert_eq!(total(|s| s.bytes_sent), total(|s| s.bytes_received));
        for st in &done {
            assert_eq!(st.collectives, 1);
            assert!(st.bytes_sent >= 16 && st.bytes_received >= 16, "{st:?}");
        }
    }

    /// Every rank on a host of its own.
    struct HostEach(InProcComm);

    impl Communicator for HostEach {
        fn rank(&self) -> usize {
            self.0.rank()
        }
        fn world_size(&self) -> usize {
            self.0.world_size()
        }
        fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
            self.0.send(peer, tag, data)
        }
        fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError> {
            self.0.exchange(step)
        }
        fn host_of(&self, rank: usize) -> usize {
            rank
        }
    }

    #[test]
    fn bytes_to_other_hosts_count_apart() {
        let off_host = |host_each: bool| -> Vec<CommStats> {
            let comms = InProcComm::mesh(2, std::time::Duration::from_secs(10));
            std::thread::scope(|s| {
                let handles: Vec<_> = comms
                    .into_iter()
                    .map(|c| {
                        s.spawn(move || {
                            let inner: Arc<dyn Communicator> = if host_each {
                                Arc::new(HostEach(c))
                            } else {
                                Arc::new(c)
                            };
                            let c = Counted::new(inner);
                            c.all_gather(&[0, 1], &[7; 24], &[24, 24])
                                .map(|_| c.stats())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap().unwrap())
                    .collect()
            })
        };
        for st in off_host(true) {
            assert_eq!((st.bytes_sent, st.bytes_sent_off_host), (24, 24));
        }
        for st in off_host(false) {
            assert_eq!((st.bytes_sent, st.bytes_sent_off_host), (24, 0));
        }
    }

    #[test]
    fn reset_zeroes_the_counts() {
        let c = Counted::new(Arc::new(InProcComm::solo()));
        c.sent(0, 10);
        c.observe(CommOp::AllGather);
        assert_ne!(c.stats(), CommStats::default());
        c.reset();
        assert_eq!(c.stats(), CommStats::default());
    }
}
