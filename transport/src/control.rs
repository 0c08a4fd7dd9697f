//! The control channel: every rank keeps its rendezvous connection to rank 0 open for the job's
//! life, so a process that dies is told apart from a network path that went silent. QUIC over
//! UDP sends nothing when a process is killed (its peers only see silence, at the idle timeout),
//! but the kernel closes a dead process's TCP connections at once: rank 0 reads the close, and
//! tells every other rank which rank exited; every rank reads rank 0's own close.
//!
//! A rank that ends in order (`NetComm::flush`, at exit, also after an error) says `BYE` first,
//! so its close is an orderly exit; a close without `BYE` is a death. Either way the other ranks
//! only consult what they learnt when a link fails (a normal exit is never reported), and waits
//! on a rank that died end at once. Rank 0 is the hub: after its own `BYE` it stays (when the
//! job has links over the network), telling of the others' ends, until every rank has ended or
//! cannot be reached (at most the receive timeout), so a rank that dies after rank 0 finished
//! is still named at once. Nothing else waits at exit: the reading
//! threads end when their connection closes, and a finished job does not wait for them.

use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::rendezvous::{Member, read_msg, send_msg};

/// Message tags on the control channel (after the rendezvous' own).
const LEFT: u8 = 16;
const BYE: u8 = 17;

/// TCP keep-alive: a peer host that vanishes without a word (power, cable, partition) is an
/// error after about `KEEP_IDLE + KEEP_PROBES * KEEP_EVERY`, as QUIC's idle timeout makes it.
const KEEP_IDLE: Duration = Duration::from_secs(2);
const KEEP_EVERY: Duration = Duration::from_secs(1);
#[cfg(any(target_os = "linux", target_os = "macos"))]
const KEEP_PROBES: u32 = 4;

/// Turns on keep-alive probes on `sock` (control connections and TCP links), so a peer host that
/// vanished is an error (`TimedOut`) within seconds.
pub(crate) fn keep_alive(sock: &TcpStream) -> std::io::Result<()> {
    let keep = socket2::TcpKeepalive::new()
        .with_time(KEEP_IDLE)
        .with_interval(KEEP_EVERY);
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    let keep = keep.with_retries(KEEP_PROBES);
    socket2::SockRef::from(sock).set_tcp_keepalive(&keep)
}

/// What this rank knows of another rank's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Running, as far as anyone told.
    Running,
    /// It ended in order (said `BYE`), after success or an error of its own.
    Left,
    /// Its process ended without a word: killed, crashed or aborted.
    Died,
}

impl Fate {
    fn code(self) -> u8 {
        match self {
            Fate::Running => 0,
            Fate::Left => 1,
            Fate::Died => 2,
        }
    }

    fn from_code(c: u8) -> Fate {
        match c {
            1 => Fate::Left,
            2 => Fate::Died,
            _ => Fate::Running,
        }
    }
}

struct Shared {
    /// This rank.
    me: usize,
    members: Vec<Member>,
    fates: Vec<AtomicU8>,
    /// The control connection to each rank went silent (keep-alive probes unanswered: a
    /// partition or a vanished host, not a process known to have ended; nobody is told).
    unreachable: Vec<AtomicBool>,
    /// This rank said `BYE`.
    said_bye: AtomicBool,
    /// This rank is closing its connections: their closes are not news.
    closing: AtomicBool,
    /// Rank 0: the connection to each rank (for notices and `BYE`); other ranks: the one to 0.
    conns: std::sync::Mutex<Vec<(usize, TcpStream)>>,
}

impl Shared {
    /// Records that `rank` ended; true if this is news (the first word of its end).
    fn record(&self, rank: usize, fate: Fate) -> bool {
        self.fates.get(rank).is_some_and(|f| {
            f.compare_exchange(0, fate.code(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// Rank 0: tells every rank still connected that `rank` ended.
    fn tell_all(&self, rank: usize, fate: Fate) {
        let mut body = (rank as u64).to_le_bytes().to_vec();
        body.push(fate.code());
        if let Ok(mut conns) = self.conns.lock() {
            for (r, s) in conns.iter_mut() {
                if *r != rank {
                    let _ = send_msg(s, LEFT, &body);
                }
            }
        }
    }
}

/// This rank's view of the job's processes, fed by the control channel.
#[derive(Clone)]
pub struct Control {
    shared: Arc<Shared>,
}

impl Control {
    /// Starts watching the rendezvous connections `conns` (rank 0: one per other rank, in rank
    /// order from 1; any other rank: its one connection to rank 0) of the job of `members`.
    pub fn start(me: usize, members: Vec<Member>, conns: Vec<TcpStream>) -> Control {
        let ranked: Vec<(usize, TcpStream)> = if me == 0 {
            conns
                .into_iter()
                .enumerate()
                .map(|(i, s)| (i + 1, s))
                .collect()
        } else {
            conns.into_iter().map(|s| (0, s)).collect()
        };
        let shared = Arc::new(Shared {
            me,
            fates: members.iter().map(|_| AtomicU8::new(0)).collect(),
            unreachable: members.iter().map(|_| AtomicBool::new(false)).collect(),
            members,
            said_bye: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            conns: std::sync::Mutex::new(vec![]),
        });
        let mut writers = vec![];
        for (peer, s) in ranked {
            // A notice is a few bytes: it never waits long for a peer that went silent.
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = s.set_read_timeout(None);
            let _ = keep_alive(&s);
            let Ok(reader) = s.try_clone() else {
                continue;
            };
            writers.push((peer, s));
            let shared = shared.clone();
            let _ = std::thread::Builder::new()
                .name(format!("gflow-control-{peer}"))
                .spawn(move || watch(me, peer, reader, &shared));
        }
        if let Ok(mut c) = shared.conns.lock() {
            *c = writers;
        }
        Control { shared }
    }

    /// What this rank knows of `rank`'s process.
    pub fn fate(&self, rank: usize) -> Fate {
        self.shared.fates.get(rank).map_or(Fate::Running, |f| {
            Fate::from_code(f.load(Ordering::Acquire))
        })
    }

    /// Records that this rank saw `rank`'s process gone by itself (a peer on this host whose
    /// pid vanished): as good as rank 0's word.
    pub fn saw_die(&self, rank: usize) {
        self.shared.record(rank, Fate::Died);
    }

    /// The lowest rank whose process is known to have died, if any.
    pub fn first_dead(&self) -> Option<usize> {
        (0..self.shared.fates.len()).find(|&r| self.fate(r) == Fate::Died)
    }

    /// `rank`'s table entry (pid, host, address).
    pub fn member(&self, rank: usize) -> Option<&Member> {
        self.shared.members.get(rank)
    }

    /// `rank`'s host as people name it: the host name, with the network namespace where
    /// another rank's host has the same name (namespaces count as hosts).
    pub fn host_label(&self, rank: usize) -> String {
        let members = &self.shared.members;
        let Some(m) = members.get(rank) else {
            return "unknown".into();
        };
        let name = |h: &str| h.split('/').next().unwrap_or_default().to_string();
        let mine = name(&m.host);
        let ambiguous = members
            .iter()
            .any(|o| o.host != m.host && name(&o.host) == mine);
        match m.host.rsplit('/').next() {
            Some(ns) if ambiguous && !ns.is_empty() => format!("{mine} {ns}"),
            _ => mine,
        }
    }

    /// Says `BYE` on every control connection and closes them: this rank ends in order. Rank 0
    /// first waits, still telling every rank of the others' ends, until every other rank has
    /// ended or cannot be reached, or `linger` has passed. Called once its links are flushed (at exit: so it logs
    /// nothing, thread-locals may be gone); later calls do nothing.
    pub fn bye(&self, linger: Duration) {
        if self.shared.said_bye.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = &self.shared;
        if shared.me != 0 {
            shared.closing.store(true, Ordering::Release);
        }
        if let Ok(mut conns) = shared.conns.lock() {
            for (_, s) in conns.iter_mut() {
                let _ = send_msg(s, BYE, &[]);
            }
        }
        let until = Instant::now() + linger;
        let running = || {
            (1..shared.fates.len()).any(|r| {
                self.fate(r) == Fate::Running && !shared.unreachable[r].load(Ordering::Acquire)
            })
        };
        while shared.me == 0 && running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        shared.closing.store(true, Ordering::Release);
        if let Ok(mut conns) = shared.conns.lock() {
            for (_, s) in conns.iter_mut() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Reads one control connection until it closes: on rank 0 the connection of rank `peer` (its
/// `BYE` or its death is told to every other rank), elsewhere the one to rank 0 (its notices,
/// its `BYE`, the notices it sends while it waits for the others, then its close or death).
fn watch(me: usize, peer: usize, mut s: TcpStream, shared: &Shared) {
    loop {
        let msg = read_msg(&mut s);
        if shared.closing.load(Ordering::Acquire) {
            return;
        }
        // (rank, how it ended, whether this connection is done)
        let (rank, fate, done) = match msg {
            Ok((BYE, _)) => (peer, Fate::Left, me == 0),
            Ok((LEFT, body)) if me != 0 && body.len() == 9 && body[8] != 0 => {
                let mut w = [0u8; 8];
                w.copy_from_slice(&body[..8]);
                let rank = u64::from_le_bytes(w) as usize;
                (rank, Fate::from_code(body[8]), false)
            }
            Ok(_) => continue,
            Err(crate::TransportError::Timeout(_)) => {
                // Keep-alive probes went unanswered: silence, which the links judge.
                if let Some(u) = shared.unreachable.get(peer) {
                    u.store(true, Ordering::Release);
                }
                return;
            }
            Err(_) => (peer, Fate::Died, true),
        };
        if shared.record(rank, fate) {
            tracing::debug!(rank = me, of = rank, ?fate, "control channel: a rank ended");
            if me == 0 {
                shared.tell_all(rank, fate);
            }
        }
        if done {
            return;
        }
    }
}
