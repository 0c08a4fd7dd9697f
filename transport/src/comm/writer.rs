//! The writer thread of each outgoing link: `send` queues a framed message and returns, so
//! point-to-point sends never wait for their receivers; direct exchanges write the link
//! themselves once the queue has drained.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::frame::HEADER_LEN;
use crate::link::{Backoff, LinkError, LinkTx};

/// What waits for the writer thread.
enum Outgoing {
    /// A framed message.
    Bytes {
        header: [u8; HEADER_LEN],
        data: Arc<[u8]>,
    },
    /// A framed message the link took already ([`LinkTx::stage`]), to be written out.
    Staged,
}

/// The sending half of a link to one peer.
pub(super) struct TxSide {
    /// The link, shared by the writer thread and direct (non-blocking) exchanges.
    pub(super) link: Arc<Mutex<Box<dyn LinkTx>>>,
    /// The link writes without waiting, so exchanges may bypass the writer thread.
    pub(super) direct: bool,
    queue: Mutex<Option<Sender<Outgoing>>>,
    /// The sequence number of the next message to this peer.
    pub(super) seq: Mutex<u64>,
    /// Payloads sent by reference so far (counted under the link's lock).
    pub(super) refs_sent: AtomicU64,
    pending: Arc<AtomicUsize>,
    failed: Arc<Mutex<Option<LinkError>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl TxSide {
    /// The side of `link` to `peer`, with its writer thread (named for `rank` and `peer`);
    /// each queued message must be written within `timeout`.
    pub(super) fn spawn(
        rank: usize,
        peer: usize,
        link: Box<dyn LinkTx>,
        timeout: Duration,
    ) -> TxSide {
        let direct = link.caps().nonblocking;
        let link = Arc::new(Mutex::new(link));
        let (q, inbox) = channel::<Outgoing>();
        let pending = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(Mutex::new(None));
        let (p2, f2, l2) = (pending.clone(), failed.clone(), link.clone());
        let thread = std::thread::Builder::new()
            .name(format!("gflow-tx-{rank}-{peer}"))
            .spawn(move || {
                for m in inbox {
                    let deadline = Instant::now() + timeout;
                    let r = match (l2.lock(), m) {
                        (Ok(mut t), Outgoing::Bytes { header, data }) => t
                            .write_all(&header, deadline)
                            .and_then(|_| t.write_shared(data, deadline)),
                        (Ok(mut t), Outgoing::Staged) => t.write_staged(deadline),
                        (Err(_), _) => Err(LinkError::Io("link lock poisoned".into())),
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
        TxSide {
            link,
            direct,
            queue: Mutex::new(Some(q)),
            seq: Mutex::new(0),
            refs_sent: AtomicU64::new(0),
            pending,
            failed,
            thread: Mutex::new(thread),
        }
    }

    /// The failure that stopped the writer thread, if any.
    pub(super) fn failed(&self) -> Option<LinkError> {
        self.failed.lock().ok().and_then(|f| f.clone())
    }

    /// Queues `data` framed by `header` (`None` if the writer thread is gone).
    pub(super) fn queue(&self, header: [u8; HEADER_LEN], data: Arc<[u8]>) -> Option<()> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let queue = self.queue.lock().ok()?;
        queue.as_ref()?.send(Outgoing::Bytes { header, data }).ok()
    }

    /// Hands `data` framed by `header` to the link at once when nothing is queued ahead of it
    /// and the link is free and takes it ([`LinkTx::stage`]: TLS encrypts it, instead of a copy
    /// for the queue), leaving the writing to the writer thread. False: nothing was taken. The
    /// caller holds the sequence lock, which orders every queueing.
    pub(super) fn try_stage(&self, header: [u8; HEADER_LEN], data: &[u8]) -> bool {
        if self.pending.load(Ordering::Acquire) > 0 {
            return false;
        }
        let Ok(mut link) = self.link.try_lock() else {
            return false;
        };
        if !link.stage(&[&header, data]) {
            return false;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let sent = self
            .queue
            .lock()
            .ok()
            .and_then(|q| q.as_ref()?.send(Outgoing::Staged).ok());
        if sent.is_none() {
            // No writer thread: the records go out here, or the link reports why not.
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let _ = link.write_staged(Instant::now());
        }
        true
    }

    /// Waits until every queued message has been written (earlier messages go first), a
    /// failure of the writer, or `deadline`.
    pub(super) fn wait_idle(&self, deadline: Instant) -> Result<(), LinkError> {
        let backoff = Backoff::default();
        while self.pending.load(Ordering::Acquire) > 0 {
            if let Some(e) = self.failed() {
                return Err(e);
            }
            backoff.snooze();
            if Instant::now() > deadline {
                return Err(LinkError::Timeout);
            }
        }
        Ok(())
    }

    /// At exit: waits (until `deadline`, or while `give_up` is false) for the queue to drain,
    /// then ends the writer thread (joined unless `give_up`), which closes the link.
    pub(super) fn finish(&self, deadline: Instant, give_up: bool) {
        while self.pending.load(Ordering::Acquire) > 0
            && self.failed().is_none()
            && !give_up
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        if let Some(h) = self.thread.lock().ok().and_then(|mut t| t.take())
            && !give_up
        {
            let _ = h.join();
        }
    }
}
