//! `NetComm`: core's `Communicator` over links. Each outgoing link has a writer thread fed by a
//! queue, so `send` never blocks (the collectives' send-all-then-receive pattern cannot
//! deadlock on full buffers); receives read the frame header, check (op, sequence, length), and
//! read the payload straight into the caller's buffer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gflow_core::comm::{combine_piece, exchange_queued};
use gflow_core::{
    CommError, CommOp, Communicator, DType, Inbound, Outbound, ReduceOp, Reduction, Schedule, Tag,
};

use crate::arena;
use crate::control::{Control, Fate};
use crate::frame::{HEADER_LEN, Header, REF_LEN};
use crate::link::{Idle, LinkError, LinkPair, LinkRx, LinkTx};

struct Outgoing {
    header: [u8; HEADER_LEN],
    data: Arc<[u8]>,
}

struct TxSide {
    /// The link, shared by the writer thread and direct (non-blocking) exchanges.
    link: Arc<Mutex<Box<dyn LinkTx>>>,
    /// The link writes without waiting, so exchanges may bypass the writer thread.
    direct: bool,
    queue: Mutex<Option<Sender<Outgoing>>>,
    seq: Mutex<u64>,
    /// Payloads sent by reference so far (counted under the link's lock).
    refs_sent: AtomicU64,
    pending: Arc<AtomicUsize>,
    failed: Arc<Mutex<Option<LinkError>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct RxSide {
    link: Box<dyn LinkRx>,
    /// The link reads without waiting (direct exchanges may use it).
    direct: bool,
    seq: u64,
}

/// Payloads from this size up, in this process's shared arena, go to peers that share memory as
/// references (one copy, by the receiver) rather than through the link (two copies).
pub const REF_MIN_BYTES: usize = 64 << 10;

/// Whether payloads in the shared arena go by reference: unless `GFLOW_SHM_REFS=0` (for
/// comparisons; every rank of a job must see the same).
pub fn refs_enabled() -> bool {
    std::env::var("GFLOW_SHM_REFS").map_or(true, |v| v != "0")
}

/// How long an error from a peer that closed its link waits for another peer to show itself
/// dead (the root cause): more than QUIC's keep-alive interval.
const CLOSED_GRACE: Duration = Duration::from_secs(2);

/// How often a blocking receive looks whether its peer is known to have died (the control
/// channel hears of a killed process at once; its QUIC link would stay silent until the idle
/// timeout).
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// The communicator of one process over its links to every peer.
pub struct NetComm {
    rank: usize,
    world: usize,
    tx: Vec<Option<TxSide>>,
    rx: Vec<Option<Mutex<RxSide>>>,
    timeout: Duration,
    max_frame: u64,
    /// A schedule pinned for every collective (else core's choice by size).
    pinned: Option<Schedule>,
    /// Send payloads in the shared arena by reference (`GFLOW_SHM_REFS=0` turns it off).
    by_ref: bool,
    /// Every rank shares this host and sends by reference: collectives run direct, since a
    /// payload then costs one copy however many peers read it (no ring pipelining to win).
    one_copy: bool,
    /// The host of each rank (equal numbers share memory); empty: all on one host.
    hosts: Vec<usize>,
    /// What the control channel says of the other ranks' processes, and their table entries.
    control: Option<Control>,
    /// What carries the links ([`LinkTx::kind`]), each kind once.
    kinds: Vec<&'static str>,
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
            match l {
                None => {
                    tx.push(None);
                    rx.push(None);
                }
                Some((mut t, r)) => {
                    if !kinds.contains(&t.kind()) {
                        kinds.push(t.kind());
                    }
                    let direct = t.try_write(&[]).is_some();
                    let link = Arc::new(Mutex::new(t));
                    let (q, inbox) = channel::<Outgoing>();
                    let pending = Arc::new(AtomicUsize::new(0));
                    let failed = Arc::new(Mutex::new(None));
                    let (p2, f2, l2) = (pending.clone(), failed.clone(), link.clone());
                    let thread = std::thread::Builder::new()
                        .name(format!("gflow-tx-{rank}-{peer}"))
                        .spawn(move || {
                            for m in inbox {
                                let deadline = Instant::now() + timeout;
                                let r = match l2.lock() {
                                    Ok(mut t) => t
                                        .write_all(&m.header, deadline)
                                        .and_then(|_| t.write_shared(m.data, deadline)),
                                    Err(_) => Err(LinkError::Io("link lock poisoned".into())),
                                };
                                p2.fetch_sub(1, Ordering::AcqRel);
                                if let Err(e) = r {
                                    if let Ok(mut f) = f2.lock() {
                                        *f = Some(e);
                                    }
                                    break;
                                }
                            }
                            if let Ok(mut t) = l2.lock() {
                                t.close();
                            }
                        })
                        .ok();
                    tx.push(Some(TxSide {
                        link,
                        direct,
                        queue: Mutex::new(Some(q)),
                        seq: Mutex::new(0),
                        refs_sent: AtomicU64::new(0),
                        pending,
                        failed,
                        thread: Mutex::new(thread),
                    }));
                    let mut r = r;
                    let direct = r.try_read_with(0, &mut |_| {}).is_some();
                    rx.push(Some(Mutex::new(RxSide {
                        link: r,
                        direct,
                        seq: 0,
                    })));
                }
            }
        }
        NetComm {
            rank,
            world,
            tx,
            rx,
            timeout,
            max_frame,
            pinned: None,
            by_ref: refs_enabled(),
            one_copy: false,
            hosts: vec![],
            control: None,
            kinds,
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
        self.one_copy = one_copy && std::env::var_os("GFLOW_COLLECTIVES").is_none();
        self
    }

    /// This communicator with every collective on `schedule` (tests and benchmarks compare
    /// schedules with it; every rank of a group must pin the same).
    pub fn with_schedule(mut self, schedule: Schedule) -> NetComm {
        self.pinned = Some(schedule);
        self
    }

    /// The error for a failed link to `peer`, naming the root cause: a process of the job that
    /// died (pid, host), before a path that went silent (address), before a peer that closed
    /// its link or ended in order, before a timeout.
    fn link_error(&self, peer: usize, e: LinkError) -> CommError {
        if let Some(dead) = self.first_dead() {
            return self.exited(dead);
        }
        if let (LinkError::PeerDead, Some(c)) = (&e, &self.control) {
            // the link saw the process gone (a peer on this host): the job has failed
            c.saw_die(peer);
        }
        let exited = self.fate(peer) != Fate::Running;
        match e {
            LinkError::Closed => self
                .root_cause(CLOSED_GRACE)
                .or_else(|| exited.then(|| self.exited(peer)))
                .unwrap_or(CommError::PeerGone {
                    rank: self.rank,
                    peer,
                }),
            LinkError::PeerDead => self.exited(peer),
            _ if exited => self.exited(peer),
            LinkError::Silent(d) => self.silent(peer, d),
            LinkError::Timeout => CommError::Timeout {
                rank: self.rank,
                peer,
                secs: self.timeout.as_secs_f64(),
            },
            LinkError::Io(reason) => CommError::Transport {
                rank: self.rank,
                reason: format!("link to rank {peer}: {reason}"),
            },
        }
    }

    /// The lowest rank whose process the control channel says died: the job has failed.
    fn first_dead(&self) -> Option<usize> {
        self.control.as_ref().and_then(Control::first_dead)
    }

    /// What the control channel knows of `peer`'s process (`Running` without a channel).
    fn fate(&self, peer: usize) -> Fate {
        self.control
            .as_ref()
            .map_or(Fate::Running, |c| c.fate(peer))
    }

    /// "`peer` (pid, host) exited", from the job's table (without one: the peer is gone).
    fn exited(&self, peer: usize) -> CommError {
        let member = self
            .control
            .as_ref()
            .and_then(|c| Some((c, c.member(peer)?)));
        match member {
            Some((c, m)) => CommError::PeerExited {
                rank: self.rank,
                peer,
                pid: m.pid,
                host: c.host_label(peer),
            },
            None => CommError::PeerGone {
                rank: self.rank,
                peer,
            },
        }
    }

    /// "no packets from `peer` at its address for `d`".
    fn silent(&self, peer: usize, d: Duration) -> CommError {
        CommError::PeerSilent {
            rank: self.rank,
            peer,
            addr: self
                .control
                .as_ref()
                .and_then(|c| c.member(peer))
                .map_or_else(|| "an unknown address".into(), |m| m.quic.to_string()),
            secs: d.as_secs(),
        }
    }

    /// The failure behind a peer that closed its link, looked for during `grace`: a process the
    /// control channel says died, else a link that reports its peer dead or silent. A peer that
    /// closed in order usually failed because another died, and every survivor should name the
    /// dead one (a QUIC peer is known dead only at its idle timeout, which the ranks reach up to
    /// a keep-alive interval apart). Links in use by another thread are skipped.
    fn root_cause(&self, grace: Duration) -> Option<CommError> {
        let deadline = Instant::now() + grace;
        let far = deadline + self.timeout;
        let cause = |peer: usize, e: Option<LinkError>| match e {
            Some(LinkError::PeerDead) => Some(self.exited(peer)),
            Some(LinkError::Silent(d)) => Some(self.silent(peer, d)),
            _ => None,
        };
        loop {
            if let Some(dead) = self.first_dead() {
                return Some(self.exited(dead));
            }
            for (peer, side) in self.tx.iter().enumerate() {
                let Some(side) = side else { continue };
                let failed = side.failed.lock().ok().and_then(|f| f.clone());
                let checked = side.link.try_lock().ok().and_then(|l| l.check(far).err());
                if let Some(e) = cause(peer, failed).or_else(|| cause(peer, checked)) {
                    return Some(e);
                }
            }
            for (peer, side) in self.rx.iter().enumerate() {
                let checked = side
                    .as_ref()
                    .and_then(|s| s.try_lock().ok())
                    .and_then(|s| s.link.check(far).err());
                if let Some(e) = cause(peer, checked) {
                    return Some(e);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reads `len` bytes of `link` into `f` before `deadline`, in turns of
    /// [`WATCH_EVERY`] when there is a control channel: a turn in which no byte came, once a
    /// process of the job is known to have died, ends the wait (`PeerDead`; the job has failed,
    /// and the peer may be waiting on the dead one) instead of waiting out the deadline.
    fn read_watched(
        &self,
        link: &mut dyn LinkRx,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        if self.control.is_none() {
            return link.read_with(len, deadline, f);
        }
        let mut done = 0;
        loop {
            let turn = deadline.min(Instant::now() + WATCH_EVERY);
            let base = done;
            let mut got = 0;
            let r = link.read_with(len - base, turn, &mut |at, piece| {
                f(base + at, piece);
                got = at + piece.len();
            });
            done = base + got;
            match r {
                Err(LinkError::Timeout) if Instant::now() < deadline => {
                    if got == 0 && self.first_dead().is_some() {
                        return Err(LinkError::PeerDead);
                    }
                }
                other => return other,
            }
        }
    }

    fn no_link(&self, peer: usize) -> CommError {
        CommError::no_link(self.rank, peer, self.world)
    }

    fn enqueue(&self, peer: usize, tag: Tag, data: Arc<[u8]>) -> Result<(), CommError> {
        let side = self
            .tx
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.no_link(peer))?;
        if let Some(e) = side.failed.lock().ok().and_then(|f| f.clone()) {
            return Err(self.link_error(peer, e));
        }
        let mut seq = side.seq.lock().map_err(|_| CommError::PeerGone {
            rank: self.rank,
            peer,
        })?;
        let header = Header {
            tag,
            seq: *seq,
            len: data.len() as u64,
            by_ref: false,
        }
        .encode();
        side.pending.fetch_add(1, Ordering::AcqRel);
        let queue = side.queue.lock().map_err(|_| CommError::PeerGone {
            rank: self.rank,
            peer,
        })?;
        queue
            .as_ref()
            .and_then(|q| q.send(Outgoing { header, data }).ok())
            .ok_or(CommError::PeerGone {
                rank: self.rank,
                peer,
            })?;
        *seq += 1;
        Ok(())
    }

    /// Waits (up to `timeout`) until every queued message has been written, closes the links so
    /// peers see an orderly end, waits for the peers to close theirs, and says `BYE` on the
    /// control channel (this rank ends in order). Called at process exit.
    pub fn flush(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        // Once a rank of the job died nothing is owed to anyone (the job has failed), and a
        // link to a dead peer answers only at the idle timeout: writer threads are left behind
        // (they end with the process) and links are not drained.
        let doomed = self.first_dead().is_some();
        let died = |peer: usize| doomed || self.fate(peer) == Fate::Died;
        for (peer, side) in self.tx.iter().enumerate() {
            let Some(side) = side else { continue };
            while side.pending.load(Ordering::Acquire) > 0
                && side.failed.lock().is_ok_and(|f| f.is_none())
                && !died(peer)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            if let Ok(mut q) = side.queue.lock() {
                q.take();
            }
            if let Some(h) = side.thread.lock().ok().and_then(|mut t| t.take())
                && !died(peer)
            {
                let _ = h.join();
            }
        }
        for (peer, side) in self.rx.iter().enumerate() {
            if let Some(Ok(mut side)) = side.as_ref().map(Mutex::try_lock)
                && !died(peer)
            {
                side.link.drain(deadline);
            }
        }
        if let Some(c) = &self.control {
            c.bye();
        }
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
        self.enqueue(peer, tag, Arc::from(data))
    }

    fn send_to_all(&self, peers: &[usize], tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let shared: Arc<[u8]> = Arc::from(data);
        peers
            .iter()
            .try_for_each(|&p| self.enqueue(p, tag, shared.clone()))
    }

    fn recv_into(&self, peer: usize, tag: Tag, out: &mut [u8]) -> Result<(), CommError> {
        self.recv_with(peer, tag, out.len(), &mut |at, piece| {
            out[at..at + piece.len()].copy_from_slice(piece);
        })
    }

    fn recv_combine(
        &self,
        peer: usize,
        tag: Tag,
        acc: &mut [u8],
        dtype: DType,
        reduce: ReduceOp,
    ) -> Result<(), CommError> {
        let mut carry = Vec::with_capacity(dtype.size());
        self.recv_with(peer, tag, acc.len(), &mut |at, piece| {
            combine_piece(acc, dtype, reduce, &mut carry, at, piece);
        })
    }

    fn host_of(&self, rank: usize) -> usize {
        self.hosts.get(rank).copied().unwrap_or(0)
    }

    fn schedule(&self, op: CommOp, n: usize, bytes: usize) -> Schedule {
        self.pinned
            .unwrap_or_else(|| match gflow_core::schedule(op, n, bytes) {
                Schedule::Ring if self.one_copy => Schedule::Direct,
                s => s,
            })
    }

    fn exchange(
        &self,
        sends: &[Outbound<'_>],
        copies: &mut [Inbound<'_>],
        reduce: Option<Reduction<'_>>,
    ) -> Result<(), CommError> {
        if self.can_go_direct(sends, copies, reduce.as_ref()) {
            self.exchange_direct(sends, copies, reduce, None)
        } else {
            exchange_queued(self, sends, copies, reduce)
        }
    }

    fn exchange_with_own(
        &self,
        sends: &[Outbound<'_>],
        copies: &mut [Inbound<'_>],
        own: (&[u8], &mut [u8]),
        at: usize,
    ) -> Result<(), CommError> {
        if self.can_go_direct(sends, copies, None) {
            self.exchange_direct(sends, copies, None, Some((own.0, own.1, at)))
        } else {
            own.1.copy_from_slice(own.0);
            exchange_queued(self, sends, copies, None)
        }
    }
}

impl NetComm {
    /// Whether an exchange can run direct: no peer twice on a side, and every link involved
    /// moves bytes without waiting.
    fn can_go_direct(
        &self,
        sends: &[Outbound<'_>],
        copies: &[Inbound<'_>],
        reduce: Option<&Reduction<'_>>,
    ) -> bool {
        let rx_peers: Vec<usize> = copies
            .iter()
            .map(|c| c.peer)
            .chain(reduce.iter().flat_map(|r| r.from.iter().map(|f| f.0)))
            .collect();
        let tx_peers: Vec<usize> = sends.iter().map(|s| s.peer).collect();
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
}

/// No rank twice.
fn distinct(peers: &[usize]) -> bool {
    peers
        .iter()
        .enumerate()
        .all(|(i, p)| !peers[..i].contains(p))
}

impl NetComm {
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
        let h = self.check_header(peer, &head, tag, len, side.seq)?;
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

    /// Checks a received header against what this rank expects next from `peer`.
    fn check_header(
        &self,
        peer: usize,
        head: &[u8; HEADER_LEN],
        tag: Tag,
        len: usize,
        seq: u64,
    ) -> Result<Header, CommError> {
        let h = Header::decode(head, self.max_frame).map_err(|e| CommError::Transport {
            rank: self.rank,
            reason: format!("bad frame from rank {peer}: {e}"),
        })?;
        if h.seq != seq || h.tag != tag || h.len != len as u64 {
            return Err(CommError::Desync {
                rank: self.rank,
                peer,
                expected: format!("{tag} #{seq} of {len} bytes"),
                got: format!("{} #{} of {} bytes", h.tag, h.seq, h.len),
            });
        }
        Ok(h)
    }

    /// [`Communicator::exchange`] over links that never block: this thread writes straight
    /// into the outgoing links and reads straight out of the incoming ones, moving whatever
    /// can move on any of them, so no send is copied to a queue and no receive waits behind
    /// another. Combining receives take their turns in order. `own` = (source, destination,
    /// at): a local copy made once the first `at` copies are done, and before any later one
    /// takes a byte ([`Communicator::exchange_with_own`]).
    fn exchange_direct(
        &self,
        sends: &[Outbound<'_>],
        copies: &mut [Inbound<'_>],
        reduce: Option<Reduction<'_>>,
        mut own: Option<(&[u8], &mut [u8], usize)>,
    ) -> Result<(), CommError> {
        let deadline = Instant::now() + self.timeout;
        let gone = |peer| CommError::PeerGone {
            rank: self.rank,
            peer,
        };
        let mut outs = Vec::with_capacity(sends.len());
        for s in sends {
            let side = self.tx_side(s.peer)?;
            // Earlier queued messages go first: wait for the writer thread to be idle.
            let mut backoff = Backoff::default();
            while side.pending.load(Ordering::Acquire) > 0 {
                if let Some(e) = side.failed.lock().ok().and_then(|f| f.clone()) {
                    return Err(self.link_error(s.peer, e));
                }
                backoff
                    .idle(deadline)
                    .map_err(|e| self.link_error(s.peer, e))?;
            }
            let link = side.link.lock().map_err(|_| gone(s.peer))?;
            let mut seq = side.seq.lock().map_err(|_| gone(s.peer))?;
            let shared = (self.by_ref && s.data.len() >= REF_MIN_BYTES && link.shares_memory())
                .then(|| arena::locate(s.data))
                .flatten();
            let head = Header {
                tag: s.tag,
                seq: *seq,
                len: s.data.len() as u64,
                by_ref: shared.is_some(),
            }
            .encode();
            *seq += 1;
            let (reference, ticket) = match shared {
                Some((fd, offset)) => (
                    encode_ref(fd, offset),
                    Some(side.refs_sent.fetch_add(1, Ordering::AcqRel) + 1),
                ),
                None => ([0; REF_LEN], None),
            };
            outs.push(Out {
                peer: s.peer,
                link,
                head,
                data: s.data,
                reference,
                ticket,
                done: 0,
            });
        }
        let mut ins = Vec::with_capacity(copies.len());
        for c in copies.iter_mut() {
            let side = self.rx_side(c.peer)?.lock().map_err(|_| gone(c.peer))?;
            ins.push(In::new(c.peer, c.tag, c.out.len(), side));
        }
        let (mut acc, mut turns) = (None, vec![]);
        if let Some(r) = reduce {
            for &(peer, tag) in &r.from {
                let side = self.rx_side(peer)?.lock().map_err(|_| gone(peer))?;
                turns.push(In::new(peer, tag, r.acc.len(), side));
            }
            acc = Some((r.acc, r.dtype, r.op));
        }
        let mut turn = 0;
        let mut carry = vec![];
        let mut backoff = Backoff::default();
        loop {
            let mut moved = false;
            for o in outs.iter_mut().filter(|o| !o.finished()) {
                moved |= o.push();
            }
            for (i, c) in copies.iter_mut().enumerate() {
                if let Some((src, dst, at)) = &mut own
                    && i == *at
                {
                    if !ins[..i].iter().all(In::finished) {
                        break;
                    }
                    dst.copy_from_slice(src);
                    own = None;
                    moved = true;
                }
                let out = &mut *c.out;
                moved |= self.pull(&mut ins[i], &mut |at, piece| {
                    out[at..at + piece.len()].copy_from_slice(piece);
                })?;
            }
            if let (Some((acc, dtype, op)), Some(t)) = (&mut acc, turns.get_mut(turn)) {
                moved |= self.pull(t, &mut |at, piece| {
                    combine_piece(acc, *dtype, *op, &mut carry, at, piece);
                })?;
                if t.finished() {
                    turn += 1;
                }
            }
            if let Some((src, dst, _)) = own.take_if(|_| ins.iter().all(In::finished)) {
                dst.copy_from_slice(src);
                moved = true;
            }
            let done = outs.iter().all(Out::finished)
                && ins.iter().all(In::finished)
                && own.is_none()
                && turn == turns.len();
            if done {
                return Ok(());
            }
            if moved {
                backoff = Backoff::default();
                continue;
            }
            let late = backoff.idle(deadline).is_err();
            if late || backoff.should_check() {
                // Report the root cause: a dead peer before one that closed (it may have
                // failed because of the dead one), before a timeout.
                let rank_of = |e: &LinkError| match e {
                    LinkError::PeerDead => 0,
                    LinkError::Silent(_) => 1,
                    LinkError::Closed => 2,
                    LinkError::Io(_) => 3,
                    LinkError::Timeout => 4,
                };
                // Once the control channel says a process died, every link counts as dead.
                let told = |r: Result<(), LinkError>| match r {
                    Ok(()) if self.first_dead().is_some() => Err(LinkError::PeerDead),
                    r => r,
                };
                // Only links with bytes still to move: a finished peer may have left.
                let worst = outs
                    .iter()
                    .filter(|o| !o.finished())
                    .map(|o| (o.peer, told(o.link.check(deadline))))
                    .chain(
                        ins.iter()
                            .chain(&turns)
                            .filter(|i| !i.finished())
                            .map(|i| (i.peer, told(i.side.link.check(deadline)))),
                    )
                    .filter_map(|(p, r)| r.err().map(|e| (p, e)))
                    .min_by_key(|(_, e)| rank_of(e));
                if let Some((peer, e)) = worst {
                    return Err(self.link_error(peer, e));
                }
                if late {
                    let waiting = outs
                        .iter()
                        .find(|o| !o.finished())
                        .map(|o| o.peer)
                        .or_else(|| {
                            ins.iter()
                                .chain(&turns)
                                .find(|i| !i.finished())
                                .map(|i| i.peer)
                        })
                        .unwrap_or(self.rank);
                    return Err(self.link_error(waiting, LinkError::Timeout));
                }
            }
        }
    }

    /// Moves what has arrived of `inc`'s message (header, then payload to `sink`); true if
    /// any byte moved.
    fn pull(
        &self,
        inc: &mut In<'_>,
        sink: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<bool, CommError> {
        if inc.finished() {
            return Ok(false);
        }
        let mut moved = false;
        if inc.head_got < HEADER_LEN {
            moved = fill(&mut *inc.side.link, &mut inc.head, &mut inc.head_got);
            if inc.head_got < HEADER_LEN {
                return Ok(moved);
            }
            let h = self.check_header(inc.peer, &inc.head, inc.tag, inc.len, inc.side.seq)?;
            inc.by_ref = h.by_ref;
        }
        if inc.by_ref {
            moved |= fill(&mut *inc.side.link, &mut inc.reference, &mut inc.ref_got);
            if inc.ref_got < REF_LEN {
                return Ok(moved);
            }
            read_by_ref(&mut *inc.side.link, &inc.reference, inc.len, sink)
                .map_err(|e| self.link_error(inc.peer, e))?;
            inc.done = inc.len;
            inc.side.seq += 1;
            return Ok(true);
        }
        let (len, done) = (inc.len, &mut inc.done);
        let n = inc
            .side
            .link
            .try_read_with(len - *done, &mut |piece| {
                sink(*done, piece);
                *done += piece.len();
            })
            .unwrap_or(0);
        if inc.finished() {
            inc.side.seq += 1;
        }
        Ok(moved || n > 0)
    }
}

/// A send in progress in a direct exchange: the header, then the data or a reference to it.
struct Out<'a> {
    peer: usize,
    link: MutexGuard<'a, Box<dyn LinkTx>>,
    head: [u8; HEADER_LEN],
    data: &'a [u8],
    /// Where the data lies in the shared arena, when sent by reference.
    reference: [u8; REF_LEN],
    /// For a send by reference: the peer's count of finished references that includes it.
    ticket: Option<u64>,
    /// Bytes written, header included.
    done: usize,
}

impl Out<'_> {
    /// Bytes that go on the link after the header.
    fn body_len(&self) -> usize {
        match self.ticket {
            Some(_) => REF_LEN,
            None => self.data.len(),
        }
    }

    /// All written, and a payload sent by reference read by the peer.
    fn finished(&self) -> bool {
        self.done == HEADER_LEN + self.body_len()
            && self.ticket.is_none_or(|t| self.link.refs_done() >= t)
    }

    /// Writes what fits; true if any byte moved.
    /// Header and body go in one call where they fit: a peer that sees a header without its
    /// body would wait for this rank's next turn (after whatever long copy it does first).
    fn push(&mut self) -> bool {
        let body: &[u8] = match self.ticket {
            Some(_) => &self.reference,
            None => self.data,
        };
        let mut moved = false;
        while self.done < HEADER_LEN + body.len() {
            let rest = if self.done < HEADER_LEN {
                &self.head[self.done..]
            } else {
                &body[self.done - HEADER_LEN..]
            };
            let n = self.link.try_write(rest).unwrap_or(0);
            if n == 0 {
                break;
            }
            self.done += n;
            moved = true;
        }
        moved
    }
}

/// A receive in progress in a direct exchange.
struct In<'a> {
    peer: usize,
    tag: Tag,
    len: usize,
    side: MutexGuard<'a, RxSide>,
    head: [u8; HEADER_LEN],
    head_got: usize,
    /// The header says the payload comes by reference.
    by_ref: bool,
    reference: [u8; REF_LEN],
    ref_got: usize,
    /// Payload bytes taken.
    done: usize,
}

impl<'a> In<'a> {
    fn new(peer: usize, tag: Tag, len: usize, side: MutexGuard<'a, RxSide>) -> In<'a> {
        In {
            peer,
            tag,
            len,
            side,
            head: [0; HEADER_LEN],
            head_got: 0,
            by_ref: false,
            reference: [0; REF_LEN],
            ref_got: 0,
            done: 0,
        }
    }

    fn finished(&self) -> bool {
        self.head_got == HEADER_LEN && self.done == self.len
    }
}

/// Reads what has arrived of `buf`'s remaining bytes (`got` so far) without waiting; true if
/// any byte moved.
fn fill(link: &mut dyn LinkRx, buf: &mut [u8], got: &mut usize) -> bool {
    let before = *got;
    link.try_read_with(buf.len() - before, &mut |piece| {
        buf[*got..*got + piece.len()].copy_from_slice(piece);
        *got += piece.len();
    });
    *got > before
}

/// The wire form of a payload reference: the arena's descriptor, then the offset.
fn encode_ref(fd: i32, offset: u64) -> [u8; REF_LEN] {
    let mut b = [0; REF_LEN];
    b[..8].copy_from_slice(&i64::from(fd).to_le_bytes());
    b[8..].copy_from_slice(&offset.to_le_bytes());
    b
}

/// Hands the `len`-byte payload that `reference` points to (in the peer's arena) to `sink`,
/// then tells the peer it has been read.
fn read_by_ref(
    link: &mut dyn LinkRx,
    reference: &[u8; REF_LEN],
    len: usize,
    sink: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), LinkError> {
    let (fd, offset) = decode_ref(reference);
    sink(0, link.peer_bytes(fd, offset, len)?);
    link.ref_done();
    Ok(())
}

/// Reads [`encode_ref`]'s form (a descriptor out of range becomes -1, which maps nothing).
fn decode_ref(b: &[u8; REF_LEN]) -> (i32, u64) {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    let fd = i32::try_from(i64::from_le_bytes(w)).unwrap_or(-1);
    w.copy_from_slice(&b[8..]);
    (fd, u64::from_le_bytes(w))
}

/// How a direct exchange waits when nothing moves ([`Idle`]); links are checked (deadline,
/// peer alive: a read of `/proc`, ~10 µs) after every 2 ms of idling, never on a short wait.
struct Backoff {
    idle: Idle,
    last_check: Instant,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            idle: Idle::new(),
            last_check: Instant::now(),
        }
    }
}

impl Backoff {
    /// Waits a little; `Err(Timeout)` past `deadline`.
    fn idle(&mut self, deadline: Instant) -> Result<(), LinkError> {
        self.idle.snooze();
        if Instant::now() > deadline {
            return Err(LinkError::Timeout);
        }
        Ok(())
    }

    /// True after every 2 ms of idling.
    fn should_check(&mut self) -> bool {
        let now = Instant::now();
        let due = now.duration_since(self.last_check) > Duration::from_millis(2);
        if due {
            self.last_check = now;
        }
        due
    }
}
