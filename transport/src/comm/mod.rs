//! `NetComm`: core's `Communicator` over links. Each outgoing link has a writer thread fed by a
//! queue (`writer`), so `send` never blocks; an exchange runs *directly* (`exchange`) when
//! all its links move bytes without waiting, else queued; receives read the frame header, check
//! (op, sequence, length), and read the payload straight into the caller's buffer; a failed
//! link becomes its root cause (`diagnose`); large payloads in the shared arena go by
//! reference (`codec`).

mod codec;
mod diagnose;
mod exchange;
#[cfg(test)]
mod harness;
mod writer;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gflow_core::comm::{Exchange, Mailbox, PIPELINE_PIECE, TCP_PIPELINE_PIECE, exchange_queued};
use gflow_core::{CommError, Communicator, Policy, Schedule, Tag};

use codec::read_by_ref;
pub use codec::{REF_MIN_BYTES, refs_enabled};
use exchange::{Engine, Failure, In, Out, RealClock, check_header, drive};
use writer::TxSide;

use crate::arena;
use crate::control::Control;
use crate::frame::{HEADER_LEN, Header, REF_LEN};
use crate::link::{LinkError, LinkPair, LinkRx, LinkTx};

/// The receiving half of a link to one peer.
struct RxSide {
    link: Box<dyn LinkRx>,
    /// The link reads without waiting (direct exchanges may use it).
    direct: bool,
    /// The sequence number expected next from this peer.
    seq: u64,
}

/// The communicator of one process over its links to every peer.
pub struct NetComm {
    rank: usize,
    world: usize,
    tx: Vec<Option<TxSide>>,
    rx: Vec<Option<Mutex<RxSide>>>,
    timeout: Duration,
    max_frame: u64,
    /// The schedule policy (the environment's, unless pinned).
    policy: Policy,
    /// Send payloads in the shared arena by reference (`GFLOW_SHM_REFS=0` turns it off).
    by_ref: bool,
    /// The host of each rank (equal numbers share memory); empty: all on one host.
    hosts: Vec<usize>,
    /// What the control channel says of the other ranks' processes, and their table entries.
    control: Option<Control>,
    /// What carries the links ([`LinkTx::kind`]), each kind once.
    kinds: Vec<&'static str>,
    /// [`NetComm::flush`] ran.
    flushed: std::sync::atomic::AtomicBool,
}

impl NetComm {
    /// A communicator for `rank` of `world` over one (tx, rx) link pair per peer (`None` for
    /// this rank). Receives wait at most `timeout`; frames over `max_frame` bytes are refused.
    pub fn new(
        rank: usize,
        links: Vec<Option<LinkPair>>,
        timeout: Duration,
        max_frame: u64,
    ) -> NetComm {
        let world = links.len();
        let mut kinds = vec![];
        let mut tx = vec![];
        let mut rx = vec![];
        for (peer, l) in links.into_iter().enumerate() {
            let Some((t, r)) = l else {
                tx.push(None);
                rx.push(None);
                continue;
            };
            if !kinds.contains(&t.kind()) {
                kinds.push(t.kind());
            }
            tx.push(Some(TxSide::spawn(rank, peer, t, timeout)));
            rx.push(Some(Mutex::new(RxSide {
                direct: r.caps().nonblocking,
                link: r,
                seq: 0,
            })));
        }
        NetComm {
            rank,
            world,
            tx,
            rx,
            timeout,
            max_frame,
            // QUIC links copy every message they send (the writer thread's queue) and TCP links
            // seal it: a direct all-reduce pipelined in pieces copies or seals each reduced
            // piece while it is in cache, and moves it while the next is reduced.
            policy: Policy {
                pipeline: if kinds.contains(&"tcp") {
                    Some(TCP_PIPELINE_PIECE)
                } else {
                    kinds.contains(&"quic").then_some(PIPELINE_PIECE)
                },
                ..Policy::from_env()
            },
            by_ref: refs_enabled(),
            hosts: vec![],
            control: None,
            kinds,
            flushed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// This communicator told which host runs each rank (`hosts[r]`, equal numbers for ranks
    /// that share memory), so collectives over several hosts run hierarchically.
    pub fn with_hosts(mut self, hosts: Vec<usize>) -> NetComm {
        self.hosts = hosts;
        self
    }

    /// This communicator with the job's control channel: failures then name a peer process
    /// that exited (with its pid and host) apart from a path that went silent (with its
    /// address), and receives from a peer that died end at once.
    pub fn with_control(mut self, control: Control) -> NetComm {
        self.control = Some(control);
        self
    }

    /// The kinds of link this process has to its peers (`"shm"`, `"quic"`, ...), each once, in
    /// the order first met; empty in a world of one.
    pub fn link_kinds(&self) -> &[&'static str] {
        &self.kinds
    }

    /// This communicator with direct schedules where core would run rings, when `one_copy`:
    /// every rank of the job is on this host and sends its payloads by reference (4 processes,
    /// 1 / 16 MiB all_gather 1.3-1.5 -> 2.3 / 2.4-2.6 -> 3.0-3.4 GB/s). A schedule forced by
    /// `GFLOW_COLLECTIVES` stays.
    pub fn with_one_copy(mut self, one_copy: bool) -> NetComm {
        self.policy.prefer_direct = one_copy;
        self
    }

    /// This communicator with every collective on `schedule` (tests and benchmarks compare
    /// schedules with it; every rank of a group must pin the same).
    pub fn with_schedule(mut self, schedule: Schedule) -> NetComm {
        self.policy.forced = Some(schedule);
        self
    }

    fn no_link(&self, peer: usize) -> CommError {
        CommError::no_link(self.rank, peer, self.world)
    }

    fn gone(&self, peer: usize) -> CommError {
        CommError::PeerGone {
            rank: self.rank,
            peer,
        }
    }

    fn enqueue(&self, peer: usize, tag: Tag, data: Arc<[u8]>) -> Result<(), CommError> {
        let side = self.tx_side(peer)?;
        if let Some(e) = side.failed() {
            return Err(self.link_error(peer, e));
        }
        let mut seq = side.seq.lock().map_err(|_| self.gone(peer))?;
        let header = Header {
            tag,
            seq: *seq,
            len: data.len() as u64,
            by_ref: false,
        }
        .encode();
        side.queue(header, data).ok_or_else(|| self.gone(peer))?;
        *seq += 1;
        Ok(())
    }

    /// Sends `data` through [`TxSide::try_stage`] (no copy for the queue) where the link allows;
    /// false where it did not take it.
    fn stage(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<bool, CommError> {
        let side = self.tx_side(peer)?;
        if !side.direct {
            return Ok(false);
        }
        if let Some(e) = side.failed() {
            return Err(self.link_error(peer, e));
        }
        let mut seq = side.seq.lock().map_err(|_| self.gone(peer))?;
        let header = Header {
            tag,
            seq: *seq,
            len: data.len() as u64,
            by_ref: false,
        }
        .encode();
        let staged = side.try_stage(header, data);
        if staged {
            *seq += 1;
        }
        Ok(staged)
    }

    /// Waits (up to `timeout`) until every queued message has been written, closes the links so
    /// peers see an orderly end, waits for the peers to close theirs, and says `BYE` on the
    /// control channel (this rank ends in order; rank 0, when it has a link over the network,
    /// then stays until every rank has ended, at most the receive timeout, telling each of the
    /// others' ends). Called when the rank's program is done (`gflow::run`) or at process exit;
    /// only the first call does anything.
    pub fn flush(&self, timeout: Duration) {
        if self.flushed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let deadline = Instant::now() + timeout;
        // Once a rank of the job died nothing is owed to anyone (the job has failed), and a
        // link to a dead peer answers only at the idle timeout: writer threads are left behind
        // (they end with the process) and links are not drained.
        let doomed = self.first_dead().is_some();
        let died = |peer: usize| doomed || self.fate(peer) == crate::control::Fate::Died;
        for (peer, side) in self.tx.iter().enumerate() {
            if let Some(side) = side {
                side.finish(deadline, died(peer));
            }
        }
        for (peer, side) in self.rx.iter().enumerate() {
            if let Some(Ok(mut side)) = side.as_ref().map(Mutex::try_lock)
                && !died(peer)
            {
                side.link.drain(deadline);
            }
        }
        // Rank 0 stays the control channel's hub only while some peer is over the network: over
        // shared memory every rank sees a peer's death itself (its pid), and waiting at exit
        // gives threads of other libraries time to run on state their destructors freed.
        let linger = if self.kinds.iter().any(|k| *k != "shm") {
            self.timeout
        } else {
            Duration::ZERO
        };
        if let Some(c) = &self.control {
            c.bye(linger);
        }
    }

    fn tx_side(&self, peer: usize) -> Result<&TxSide, CommError> {
        self.tx
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.no_link(peer))
    }

    fn rx_side(&self, peer: usize) -> Result<&Mutex<RxSide>, CommError> {
        self.rx
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.no_link(peer))
    }

    /// Whether an exchange can run direct: no peer twice on a side, and every link involved
    /// moves bytes without waiting.
    fn can_go_direct(&self, step: &Exchange<'_>) -> bool {
        let rx_peers: Vec<usize> = step
            .copies
            .iter()
            .map(|c| c.peer)
            .chain(step.reduce.iter().flat_map(|r| r.from.iter().map(|f| f.0)))
            .collect();
        let tx_peers: Vec<usize> = step.sends.iter().map(|s| s.peer).collect();
        distinct(&tx_peers)
            && distinct(&rx_peers)
            && tx_peers
                .iter()
                .all(|&p| self.tx_side(p).is_ok_and(|t| t.direct))
            && rx_peers.iter().all(|&p| {
                self.rx_side(p)
                    .is_ok_and(|r| r.lock().is_ok_and(|r| r.direct))
            })
    }

    /// [`Communicator::exchange`] over links that never block ([`Engine`]). Queued messages to
    /// a peer are written before this step's.
    fn exchange_direct(&self, step: Exchange<'_>) -> Result<(), CommError> {
        let deadline = Instant::now() + self.timeout;
        let Exchange {
            sends,
            copies,
            reduce,
            own,
        } = step;
        let mut tx_links: Vec<MutexGuard<'_, Box<dyn LinkTx>>> = Vec::with_capacity(sends.len());
        let mut heads = Vec::with_capacity(sends.len());
        for s in &sends {
            let side = self.tx_side(s.peer)?;
            side.wait_idle(deadline)
                .map_err(|e| self.link_error(s.peer, e))?;
            let link = side.link.lock().map_err(|_| self.gone(s.peer))?;
            let mut seq = side.seq.lock().map_err(|_| self.gone(s.peer))?;
            let shared =
                (self.by_ref && s.data.len() >= REF_MIN_BYTES && link.caps().shares_memory)
                    .then(|| arena::locate(s.data.span()))
                    .flatten();
            let head = Header {
                tag: s.tag,
                seq: *seq,
                len: s.data.len() as u64,
                by_ref: shared.is_some(),
            }
            .encode();
            *seq += 1;
            let by_ref = shared.map(|(fd, offset)| {
                let (run, stride) = s.data.layout();
                let reference = codec::Reference {
                    fd,
                    offset,
                    run: run as u64,
                    stride: stride as u64,
                };
                (
                    reference.encode(),
                    side.refs_sent
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
                        + 1,
                )
            });
            heads.push((head, by_ref));
            tx_links.push(link);
        }
        let from: Vec<(usize, Tag)> = reduce.as_ref().map_or(vec![], |r| r.from.clone());
        let mut rx_sides: Vec<MutexGuard<'_, RxSide>> =
            Vec::with_capacity(copies.len() + from.len());
        for peer in copies
            .iter()
            .map(|c| c.peer)
            .chain(from.iter().map(|f| f.0))
        {
            rx_sides.push(self.rx_side(peer)?.lock().map_err(|_| self.gone(peer))?);
        }
        let mut engine = Engine::new(self.rank, self.max_frame, own);
        for ((s, link), (head, by_ref)) in sends.iter().zip(&mut tx_links).zip(heads) {
            engine.send(Out::new(s.peer, &mut ***link, head, s.data, by_ref));
        }
        let mut rx = rx_sides.iter_mut();
        for (c, side) in copies.into_iter().zip(&mut rx) {
            let RxSide { link, seq, .. } = &mut **side;
            engine.copy(In::new(c.peer, c.tag, c.out.len(), &mut **link, seq), c.out);
        }
        if let Some(r) = reduce {
            for (&(peer, tag), side) in from.iter().zip(&mut rx) {
                let RxSide { link, seq, .. } = &mut **side;
                engine.combine(In::new(peer, tag, r.acc.len(), &mut **link, seq));
            }
            engine.accumulate(r);
        }
        // Once the control channel says a process died, every link counts as dead.
        let told = |r: Result<(), LinkError>| match r {
            Ok(()) if self.first_dead().is_some() => Err(LinkError::PeerDead),
            r => r,
        };
        drive(&mut engine, &mut RealClock::default(), deadline, &told).map_err(|f| match f {
            Failure::Comm(e) => e,
            Failure::Link(peer, e) => self.link_error(peer, e),
        })
    }

    /// Receives the next message from `peer`, checks its (op, group, sequence, length) against
    /// `tag` and `len`, and hands its payload to `f` in pieces.
    fn recv_with(
        &self,
        peer: usize,
        tag: Tag,
        len: usize,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), CommError> {
        let mut side = self
            .rx_side(peer)?
            .lock()
            .map_err(|_| CommError::PeerGone {
                rank: self.rank,
                peer,
            })?;
        let deadline = Instant::now() + self.timeout;
        let mut head = [0u8; HEADER_LEN];
        self.read_watched(&mut *side.link, HEADER_LEN, deadline, &mut |at, piece| {
            head[at..at + piece.len()].copy_from_slice(piece);
        })
        .map_err(|e| self.link_error(peer, e))?;
        let h = check_header(self.rank, peer, &head, self.max_frame, tag, len, side.seq)?;
        if h.by_ref {
            let mut at = [0u8; REF_LEN];
            side.link
                .read_exact(&mut at, deadline)
                .map_err(|e| self.link_error(peer, e))?;
            read_by_ref(&mut *side.link, &at, len, f).map_err(|e| self.link_error(peer, e))?;
        } else {
            self.read_watched(&mut *side.link, len, deadline, f)
                .map_err(|e| self.link_error(peer, e))?;
        }
        side.seq += 1;
        Ok(())
    }
}

impl Drop for NetComm {
    fn drop(&mut self) {
        self.flush(self.timeout);
    }
}

impl Communicator for NetComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        if data.len() >= STAGE_MIN_BYTES && self.stage(peer, tag, data)? {
            return Ok(());
        }
        self.enqueue(peer, tag, Arc::from(data))
    }

    fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError> {
        if self.can_go_direct(&step) {
            self.exchange_direct(step)
        } else {
            exchange_queued(self, step)
        }
    }

    fn host_of(&self, rank: usize) -> usize {
        self.hosts.get(rank).copied().unwrap_or(0)
    }

    fn policy(&self) -> Policy {
        self.policy
    }
}

impl Mailbox for NetComm {
    fn fetch(
        &self,
        peer: usize,
        tag: Tag,
        len: usize,
        sink: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), CommError> {
        self.recv_with(peer, tag, len, sink)
    }
}

/// Sends from this size up try [`NetComm::stage`] (below, the queue's copy costs less than a
/// link's records).
const STAGE_MIN_BYTES: usize = 64 << 10;

/// No rank twice.
fn distinct(peers: &[usize]) -> bool {
    peers
        .iter()
        .enumerate()
        .all(|(i, p)| !peers[..i].contains(p))
}
