//! The one driver: every collective builds its [`Plan`](super::plan::Plan) and runs it step by
//! step over [`Communicator::exchange`]. [`Collectives`] is implemented for every communicator
//! and sealed, so no transport can replace a collective's algorithm, and every member of every
//! transport combines in the same order (Architecture Invariant: bit-identical results).

use super::plan::{Plan, Span, Step, carve};
use super::{
    CommError, CommOp, Communicator, Exchange, Inbound, Outbound, Own, Payload, Reduction, Tag,
    schedule,
};
use crate::dtype::DType;
use crate::reduce::{ReduceOp, combine_bytes};

mod sealed {
    /// Keeps [`super::Collectives`] implemented only by its blanket impl.
    pub trait Sealed {}
    impl<C: super::Communicator + ?Sized> Sealed for C {}
}

/// Receives and collectives over any [`Communicator`]; implemented for all of them, and only by
/// this crate. Groups are lists of world ranks, identical (same order) on every member.
///
/// ```
/// use gflow_core::comm::{Collectives, Communicator, InProcComm};
/// use std::time::Duration;
/// let got = std::thread::scope(|s| {
///     let hs: Vec<_> = InProcComm::mesh(2, Duration::from_secs(5))
///         .into_iter()
///         .map(|c| s.spawn(move || c.all_gather(&[0, 1], &[c.rank() as u8], &[1, 1])))
///         .collect();
///     hs.into_iter().map(|h| h.join().unwrap()).collect::<Result<Vec<_>, _>>()
/// })?;
/// assert_eq!(got, [vec![0, 1], vec![0, 1]]);
/// # Ok::<(), gflow_core::CommError>(())
/// ```
pub trait Collectives: Communicator + sealed::Sealed {
    /// Receives the next message from `peer` into `out`; it must be tagged `tag` and hold
    /// exactly `out.len()` bytes (else [`CommError::Desync`]).
    fn recv_into(&self, peer: usize, tag: Tag, out: &mut [u8]) -> Result<(), CommError> {
        self.exchange(Exchange {
            copies: vec![Inbound { peer, tag, out }],
            ..Exchange::default()
        })
    }

    /// Receives `len` bytes from `peer` into a new buffer (see [`Collectives::recv_into`]).
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
        self.observe(CommOp::AllGather);
        let policy = self.policy();
        let grid = policy.grid(group, out.len(), |r| self.host_of(r));
        let plan = schedule::all_gather(&policy, grid.as_ref(), group, me, counts);
        run(self, &plan, &[mine.into()], out, None)
    }

    /// [`Collectives::all_gather_into`] into a new buffer.
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

    /// `data` holds one chunk per member (member i's chunk has `counts[i]` bytes, in group
    /// order); writes this member's chunk reduced with `op` over all members into `out`.
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
        self.observe(CommOp::ReduceScatter);
        let policy = self.policy();
        let grid = policy.grid(group, data.len(), |r| self.host_of(r));
        let plan = schedule::reduce_scatter(&policy, grid.as_ref(), group, me, counts);
        run(self, &plan, &[data.into()], out, Some((dtype, op)))
    }

    /// [`Collectives::reduce_scatter_into`] into a new buffer.
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

    /// Reduces `data` with `op` over the group, in place, with the same bits on every member.
    fn all_reduce(
        &self,
        group: &[usize],
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let me = position(self.rank(), group, group)?;
        self.observe(CommOp::AllReduce);
        if group.len() == 1 {
            return Ok(());
        }
        let policy = self.policy();
        let grid = policy.grid(group, data.len(), |r| self.host_of(r));
        let sizes = (data.len(), dtype.size());
        let plan = schedule::all_reduce(&policy, grid.as_ref(), group, me, sizes, false);
        run(self, &plan, &[], data, Some((dtype, op)))
    }

    /// Reduces `data` with `op` over the group into `out` (of `data`'s length), with the same
    /// bits on every member and `data` left as it was: MPI's `Allreduce` with a send buffer.
    /// It costs what [`Collectives::all_reduce`] does, not a copy more: `out` is written, never
    /// read, and this member's own block is read from `data` where it is first combined.
    ///
    /// ```
    /// use gflow_core::DType;
    /// use gflow_core::comm::{Collectives, Communicator, InProcComm};
    /// use gflow_core::reduce::ReduceOp;
    /// use std::time::Duration;
    /// let got = std::thread::scope(|s| {
    ///     let hs: Vec<_> = InProcComm::mesh(2, Duration::from_secs(5))
    ///         .into_iter()
    ///         .map(|c| s.spawn(move || {
    ///             let data = [c.rank() as i32 + 1, 10].map(i32::to_le_bytes).concat();
    ///             let mut out = vec![0; 8];
    ///             c.all_reduce_into(&[0, 1], &data, &mut out, DType::I32, ReduceOp::Sum)?;
    ///             Ok::<_, gflow_core::CommError>(out)
    ///         }))
    ///         .collect();
    ///     hs.into_iter().map(|h| h.join().unwrap()).collect::<Result<Vec<_>, _>>()
    /// })?;
    /// let sums = [3i32, 20].map(i32::to_le_bytes).concat();
    /// assert_eq!(got, [sums.clone(), sums]);
    /// # Ok::<(), gflow_core::CommError>(())
    /// ```
    fn all_reduce_into(
        &self,
        group: &[usize],
        data: &[u8],
        out: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let me = position(self.rank(), group, group)?;
        check_len(self.rank(), out.len(), data.len(), "all_reduce output")?;
        self.observe(CommOp::AllReduce);
        let policy = self.policy();
        let grid = policy.grid(group, data.len(), |r| self.host_of(r));
        let sizes = (data.len(), dtype.size());
        let plan = schedule::all_reduce(&policy, grid.as_ref(), group, me, sizes, true);
        run(self, &plan, &[data.into()], out, Some((dtype, op)))
    }

    /// Sends `sends[i]` to member i and returns what each member sent here (`recv_counts[i]`
    /// bytes from member i).
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

    /// [`Collectives::all_to_all`] into one buffer: member i's bytes at offset
    /// `recv_counts[..i].sum()` of `out` (which holds the sum of `recv_counts`), as MPI's
    /// `Alltoallv` into a preallocated buffer.
    fn all_to_all_into(
        &self,
        group: &[usize],
        sends: &[&[u8]],
        recv_counts: &[usize],
        out: &mut [u8],
    ) -> Result<(), CommError> {
        let sends: Vec<Payload<'_>> = sends.iter().map(|&s| s.into()).collect();
        self.all_to_all_payloads_into(group, &sends, recv_counts, out)
    }

    /// [`Collectives::all_to_all_into`] of [`Payload`]s: a strided send (a column block) goes
    /// out without being packed, and this member's own one is copied run by run into `out`.
    fn all_to_all_payloads_into(
        &self,
        group: &[usize],
        sends: &[Payload<'_>],
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
        self.observe(CommOp::AllToAll);
        let send_counts: Vec<usize> = sends.iter().map(|s| s.len()).collect();
        let plan = schedule::all_to_all(group, me, &send_counts, recv_counts);
        run(self, &plan, sends, out, None)
    }

    /// Copies `len` bytes from the member at group position `root` to every member (`data` is
    /// read on the root only).
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
        if me == root {
            check_len(self.rank(), data.len(), len, "broadcast input")?;
        }
        self.observe(CommOp::Broadcast);
        let plan = schedule::broadcast(&self.policy(), group, me, root, len);
        let mut out = vec![0; len];
        run(self, &plan, &[data.into()], &mut out, None)?;
        Ok(out)
    }

    /// Waits until every member of `group` has arrived.
    fn barrier(&self, group: &[usize]) -> Result<(), CommError> {
        self.all_gather_into(group, &[], &vec![0; group.len()], &mut [])
    }
}

impl<C: Communicator + ?Sized> Collectives for C {}

/// Runs `plan` over `comm`: its inputs `inputs`, output `output`, combining (if the plan
/// reduces) with `reduce` = (element type, operation).
fn run<C: Communicator + ?Sized>(
    comm: &C,
    plan: &Plan,
    inputs: &[Payload<'_>],
    output: &mut [u8],
    reduce_with: Option<(DType, ReduceOp)>,
) -> Result<(), CommError> {
    let mut scratch = vec![0u8; plan.scratch];
    let bad = |reason: String| CommError::BadGroup {
        rank: comm.rank(),
        reason: format!("malformed collective plan: {reason}"),
    };
    // Combining and an own block read one slice; only sends and copies take runs.
    fn contiguous<'p>(p: Payload<'p>, rank: usize) -> Result<&'p [u8], CommError> {
        p.as_slice().ok_or_else(|| CommError::BadGroup {
            rank,
            reason: "malformed collective plan: a strided input where one slice is needed".into(),
        })
    }
    let rank = comm.rank();
    for step in &plan.steps {
        match step {
            Step::Copy { from, to } => {
                let c = carve(inputs, output, &mut scratch, &[*from], &[*to]).map_err(bad)?;
                for (w, r) in c.writes.into_iter().zip(c.reads) {
                    r.copy_to(w);
                }
            }
            Step::Combine { acc, with } => {
                let (dtype, op) =
                    reduce_with.ok_or_else(|| bad("a combine without a reduction".into()))?;
                let c = carve(inputs, output, &mut scratch, &[*with], &[*acc]).map_err(bad)?;
                for (w, r) in c.writes.into_iter().zip(c.reads) {
                    combine_bytes(dtype, op, w, contiguous(r, rank)?);
                }
            }
            Step::Exchange {
                tag,
                sends,
                copies,
                reduce,
                own,
            } => {
                let mut reads: Vec<Span> = sends.iter().map(|s| s.1).collect();
                reads.extend(own.iter().map(|o| o.0));
                reads.extend(reduce.iter().flat_map(|r| r.base));
                let mut writes: Vec<Span> = copies.iter().map(|c| c.1).collect();
                writes.extend(reduce.iter().map(|r| r.acc));
                writes.extend(own.iter().map(|o| o.1));
                let c = carve(inputs, output, &mut scratch, &reads, &writes).map_err(bad)?;
                let (mut r, mut w) = (c.reads.into_iter(), c.writes.into_iter());
                let tag = *tag;
                let sends = sends
                    .iter()
                    .zip(&mut r)
                    .map(|(&(peer, _), data)| Outbound { peer, tag, data })
                    .collect();
                let copies = copies
                    .iter()
                    .zip(&mut w)
                    .map(|(&(peer, _), out)| Inbound { peer, tag, out })
                    .collect();
                let own = match own {
                    Some((_, _, at)) => {
                        let from = r.next().ok_or_else(|| bad("no own block".into()))?;
                        let last = w.next_back().ok_or_else(|| bad("no own slot".into()))?;
                        Some(Own {
                            from,
                            to: last,
                            at: *at,
                        })
                    }
                    None => None,
                };
                let reduce = match reduce {
                    Some(c) => {
                        let (dtype, op) = reduce_with
                            .ok_or_else(|| bad("a reduction without an operation".into()))?;
                        Some(Reduction {
                            acc: w.next().ok_or_else(|| bad("no accumulator".into()))?,
                            base: match c.base {
                                Some(_) => Some(contiguous(
                                    r.next().ok_or_else(|| bad("no base".into()))?,
                                    rank,
                                )?),
                                None => None,
                            },
                            dtype,
                            op,
                            from: c.from.iter().map(|&p| (p, tag)).collect(),
                        })
                    }
                    None => None,
                };
                comm.exchange(Exchange {
                    sends,
                    copies,
                    reduce,
                    own,
                })?;
            }
        }
    }
    Ok(())
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
