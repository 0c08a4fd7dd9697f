//! `NetComm`: core's `Communicator` over links. Each outgoing link has a writer thread fed by a
//! queue, so `send` never blocks (the collectives' send-all-then-receive pattern cannot
//! deadlock on full buffers); receives read the frame header, check (op, sequence, length), and
//! read the payload straight into the caller's buffer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gflow_core::reduce::combine_bytes;
use gflow_core::{CommError, Communicator, DType, ReduceOp, Tag};

use crate::frame::{HEADER_LEN, Header};
use crate::link::{LinkError, LinkPair, LinkRx};

struct Outgoing {
    header: [u8; HEADER_LEN],
    data: Arc<[u8]>,
}

struct TxSide {
    queue: Mutex<Option<Sender<Outgoing>>>,
    seq: Mutex<u64>,
    pending: Arc<AtomicUsize>,
    failed: Arc<Mutex<Option<LinkError>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct RxSide {
    link: Box<dyn LinkRx>,
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
        let mut tx = vec![];
        let mut rx = vec![];
        for (peer, l) in links.into_iter().enumerate() {
            match l {
                None => {
                    tx.push(None);
                    rx.push(None);
                }
                Some((mut t, r)) => {
                    let (q, inbox) = channel::<Outgoing>();
                    let pending = Arc::new(AtomicUsize::new(0));
                    let failed = Arc::new(Mutex::new(None));
                    let (p2, f2) = (pending.clone(), failed.clone());
                    let thread = std::thread::Builder::new()
                        .name(format!("gflow-tx-{rank}-{peer}"))
                        .spawn(move || {
                            for m in inbox {
                                let deadline = Instant::now() + timeout;
                                let r = t
                                    .write_all(&m.header, deadline)
                                    .and_then(|_| t.write_shared(m.data, deadline));
                                p2.fetch_sub(1, Ordering::AcqRel);
                                if let Err(e) = r {
                                    if let Ok(mut f) = f2.lock() {
                                        *f = Some(e);
                                    }
                                    break;
                                }
                            }
                            t.close();
                        })
                        .ok();
                    tx.push(Some(TxSide {
                        queue: Mutex::new(Some(q)),
                        seq: Mutex::new(0),
                        pending,
                        failed,
                        thread: Mutex::new(thread),
                    }));
                    rx.push(Some(Mutex::new(RxSide { link: r, seq: 0 })));
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
        }
    }

    fn link_error(&self, peer: usize, e: LinkError) -> CommError {
        match e {
            LinkError::Closed | LinkError::PeerDead => CommError::PeerGone {
                rank: self.rank,
                peer,
            },
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
    /// peers see an orderly end, and waits for the peers to close theirs. Called at process exit.
    pub fn flush(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for side in self.tx.iter().flatten() {
            while side.pending.load(Ordering::Acquire) > 0
                && side.failed.lock().is_ok_and(|f| f.is_none())
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            if let Ok(mut q) = side.queue.lock() {
                q.take();
            }
            if let Some(h) = side.thread.lock().ok().and_then(|mut t| t.take()) {
                let _ = h.join();
            }
        }
        for side in self.rx.iter().flatten() {
            if let Ok(mut side) = side.try_lock() {
                side.link.drain(deadline);
            }
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
        // Pieces of the link's buffer may split an element: carry its first bytes over.
        let elem = dtype.size();
        let mut carry: Vec<u8> = Vec::with_capacity(elem);
        self.recv_with(peer, tag, acc.len(), &mut |mut at, mut piece| {
            if !carry.is_empty() {
                let take = (elem - carry.len()).min(piece.len());
                carry.extend_from_slice(&piece[..take]);
                (at, piece) = (at + take, &piece[take..]);
                if carry.len() == elem {
                    combine_bytes(dtype, reduce, &mut acc[at - elem..at], &carry);
                    carry.clear();
                }
            }
            let whole = piece.len() / elem * elem;
            combine_bytes(dtype, reduce, &mut acc[at..at + whole], &piece[..whole]);
            carry.extend_from_slice(&piece[whole..]);
        })
    }
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
        let side = self
            .rx
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.no_link(peer))?;
        let mut side = side.lock().map_err(|_| CommError::PeerGone {
            rank: self.rank,
            peer,
        })?;
        let deadline = Instant::now() + self.timeout;
        let mut head = [0u8; HEADER_LEN];
        side.link
            .read_exact(&mut head, deadline)
            .map_err(|e| self.link_error(peer, e))?;
        let h = Header::decode(&head, self.max_frame).map_err(|e| CommError::Transport {
            rank: self.rank,
            reason: format!("bad frame from rank {peer}: {e}"),
        })?;
        if h.seq != side.seq || h.tag != tag || h.len != len as u64 {
            return Err(CommError::Desync {
                rank: self.rank,
                peer,
                expected: format!("{tag} #{} of {len} bytes", side.seq),
                got: format!("{} #{} of {} bytes", h.tag, h.seq, h.len),
            });
        }
        side.link
            .read_with(len, deadline, f)
            .map_err(|e| self.link_error(peer, e))?;
        side.seq += 1;
        Ok(())
    }
}
