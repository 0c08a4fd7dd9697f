//! The `Link` seam: a reliable, ordered byte stream to one peer, in two halves. Every wait has a
//! deadline; a peer that dies is an error, not a hang. Shared memory implements it now; QUIC
//! will implement the same halves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Why a link operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The deadline passed.
    #[error("timed out")]
    Timeout,
    /// The peer closed its end.
    #[error("closed by the peer")]
    Closed,
    /// The peer process no longer runs.
    #[error("the peer process died")]
    PeerDead,
    /// No packet came from the peer for this long (the transport's idle timeout): the network
    /// path went silent, or the peer's host stopped; a process that died is told apart by the
    /// control channel ([`crate::control`]).
    #[error("no packets for {} s", .0.as_secs())]
    Silent(Duration),
    /// An I/O or protocol failure.
    #[error("{0}")]
    Io(String),
}

/// The sending half of a link.
pub trait LinkTx: Send {
    /// Writes all of `bytes` before `deadline`.
    fn write_all(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), LinkError>;

    /// Writes all of a shared buffer before `deadline`. A link that can keep a reference
    /// instead of copying (QUIC hands it to quinn as is) overrides this.
    fn write_shared(&mut self, data: Arc<[u8]>, deadline: Instant) -> Result<(), LinkError> {
        self.write_all(&data, deadline)
    }

    /// Takes all of `parts` now, without waiting, to be written by [`LinkTx::write_staged`]:
    /// a link that encodes its bytes anyway (TLS encrypts them) does so here, so a queued send
    /// need not copy its payload first. False (nothing taken) where the link cannot, or has
    /// bytes of an unfinished write in progress.
    fn stage(&mut self, _parts: &[&[u8]]) -> bool {
        false
    }

    /// Writes what [`LinkTx::stage`] took before `deadline`.
    fn write_staged(&mut self, _deadline: Instant) -> Result<(), LinkError> {
        Ok(())
    }

    /// Tells the peer no more bytes will come.
    fn close(&mut self);

    /// What carries the bytes (`"shm"`, `"quic"`, `"tcp"`), for reports: `gflow-bench` labels
    /// its rows with the kinds a job's links used ([`crate::NetComm::link_kinds`]).
    fn kind(&self) -> &'static str {
        "other"
    }

    /// What this link can do beyond blocking writes.
    fn caps(&self) -> Caps {
        Caps::default()
    }

    /// Writes what fits now, without waiting: the bytes written (0 when full). Called only on a
    /// link whose [`LinkTx::caps`] are `nonblocking` (others always say 0).
    fn try_write(&mut self, _bytes: &[u8]) -> usize {
        0
    }

    /// `Ok` while waiting on this link can still succeed before `deadline` (the peer lives and
    /// has not closed); polled by non-blocking exchanges when no byte moves.
    fn check(&self, _deadline: Instant) -> Result<(), LinkError> {
        Ok(())
    }

    /// How many payloads sent by reference the peer has finished reading (the sender keeps
    /// such a payload unchanged until then).
    fn refs_done(&self) -> u64 {
        0
    }
}

/// The receiving half of a link.
pub trait LinkRx: Send {
    /// Consumes the next `len` bytes before `deadline`, handing them to `f` in order as
    /// (offset, bytes) pieces; links pass views of their receive buffers (no copy).
    fn read_with(
        &mut self,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError>;

    /// Fills `buf` before `deadline`.
    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), LinkError> {
        self.read_with(buf.len(), deadline, &mut |at, piece| {
            buf[at..at + piece.len()].copy_from_slice(piece);
        })
    }

    /// What this link can do beyond blocking reads.
    fn caps(&self) -> Caps {
        Caps::default()
    }

    /// Consumes what has arrived, at most `max` bytes, without waiting, handing it to `f` in
    /// order: the bytes consumed (0 when nothing is there). Called only on a link whose
    /// [`LinkRx::caps`] are `nonblocking`.
    fn try_read_with(&mut self, _max: usize, _f: &mut dyn FnMut(&[u8])) -> usize {
        0
    }

    /// Fills `buf` from its start with what has arrived, without waiting: the bytes put there
    /// (0 when nothing is there). Links that can put their bytes straight where they go (TLS
    /// over TCP decrypts in the destination) skip the copy the default makes of
    /// [`LinkRx::try_read_with`]'s pieces.
    fn try_read_into(&mut self, buf: &mut [u8]) -> usize {
        let mut got = 0;
        self.try_read_with(buf.len(), &mut |piece| {
            buf[got..got + piece.len()].copy_from_slice(piece);
            got += piece.len();
        });
        got
    }

    /// As [`LinkTx::check`], for the receiving side (bytes still unread count as progress).
    fn check(&self, _deadline: Instant) -> Result<(), LinkError> {
        Ok(())
    }

    /// `len` bytes at `offset` of the peer's shared arena (its descriptor `fd`), mapped on
    /// first use: the payload of a message sent by reference.
    ///
    /// # Errors
    /// `Io` for a link that shares no memory, an arena that cannot be mapped, or a range
    /// outside it.
    fn peer_bytes(&mut self, _fd: i32, _offset: u64, _len: usize) -> Result<&[u8], LinkError> {
        Err(LinkError::Io(
            "a payload by reference on a link that shares no memory".into(),
        ))
    }

    /// Tells the peer this process has finished reading one more payload sent by reference.
    fn ref_done(&mut self) {}

    /// At exit: waits (until `deadline`) for the peer to close its sending half, which it does
    /// only when its program is done, so it needs none of the bytes this process sent any more.
    /// A link whose written bytes outlive the writer (shared memory) returns at once.
    fn drain(&mut self, _deadline: Instant) {}
}

/// What a link half can do beyond its blocking calls, declared by the link (never probed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// `try_write` / `try_read_with` move bytes without waiting, so direct exchanges may
    /// interleave this link with others (else `NetComm` queues to a writer thread and reads
    /// blocking).
    pub nonblocking: bool,
    /// The peer can read this process's shared arena ([`crate::arena`]), so a payload there may
    /// be sent as a reference (`refs_done`, `peer_bytes`, `ref_done`): shared-memory links.
    pub shares_memory: bool,
}

/// Both halves of a link to one peer.
pub type LinkPair = (Box<dyn LinkTx>, Box<dyn LinkRx>);

/// Whether a peer process still runs (checked through `/proc` on Linux, else `kill(pid, 0)`).
#[derive(Clone, Debug)]
pub struct Liveness {
    pid: u32,
}

impl Liveness {
    /// Tracks the process `pid` on this host.
    pub fn process(pid: u32) -> Liveness {
        Liveness { pid }
    }

    /// The tracked process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// True while the process exists and (on Linux, read from `/proc`) is not a zombie; on
    /// other systems and under `GFLOW_PORTABLE=1`, while `kill(pid, 0)` finds it (Windows: while
    /// it has no exit code).
    pub fn alive(&self) -> bool {
        if !cfg!(target_os = "linux") || crate::portable() {
            return exists(self.pid);
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Err(_) => false,
            // the state is the field after the parenthesised command name
            Ok(s) => !s
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        }
    }
}

/// Whether process `pid` exists: `kill(pid, 0)` finds it (EPERM: another user's).
#[cfg(unix)]
fn exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether process `pid` runs: it opens, and has no exit code yet.
#[cfg(windows)]
fn exists(pid: u32) -> bool {
    use windows_sys::Win32::Foundation::{CloseHandle, STILL_ACTIVE};
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    // SAFETY: the handle is checked for null, read once and closed.
    unsafe {
        let h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if h.is_null() {
            return false;
        }
        let mut code = 0u32;
        let running = GetExitCodeProcess(h, &mut code) != 0 && code == STILL_ACTIVE as u32;
        CloseHandle(h);
        running
    }
}

/// How a polling wait passes time while nothing moves: it spins for the first [`SPIN_FOR`] (a
/// peer on another core answers within microseconds, and a sleep would cost 50-100 µs of timer
/// granularity), yields the core until [`YIELD_FOR`], then sleeps 50 µs at a time (a long
/// wait, a peer still computing, costs no core). Where a host runs more ranks than it has CPUs
/// the spin is off ([`set_spinning`]): a spinning rank holds the core the rank it waits for
/// needs.
pub(crate) struct Idle {
    since: Instant,
}

/// How long an idle wait spins.
pub const SPIN_FOR: Duration = Duration::from_micros(30);
/// How long an idle wait yields before it sleeps.
pub const YIELD_FOR: Duration = Duration::from_millis(2);

static SPINNING: AtomicBool = AtomicBool::new(true);

/// Whether this process's idle waits spin before yielding (the default): turn it off where
/// ranks outnumber CPUs (4 processes on 2 cores, 1 MiB all_gather 0.3-0.6 -> 4.0 GB/s busbw,
/// all_reduce 0.5-0.6 -> 2.6-2.8).
pub fn set_spinning(on: bool) {
    SPINNING.store(on, Ordering::Relaxed);
}

/// How a polling wait passes time while nothing moves (`Idle`), and when it should look at
/// its links (deadline, peer alive: a read of `/proc`, ~10 µs): after every 2 ms of idling,
/// never on a short wait. The one backoff of the workspace: shared-memory rings and direct
/// exchanges wait with it.
pub struct Backoff {
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
    /// Waits a little.
    pub fn snooze(&self) {
        self.idle.snooze();
    }

    /// True after every 2 ms of idling.
    pub fn check_due(&mut self) -> bool {
        let now = Instant::now();
        let due = now.duration_since(self.last_check) > Duration::from_millis(2);
        if due {
            self.last_check = now;
        }
        due
    }
}

impl Idle {
    /// Starts a wait.
    pub(crate) fn new() -> Idle {
        Idle {
            since: Instant::now(),
        }
    }

    /// Passes a little time.
    pub(crate) fn snooze(&self) {
        let waited = self.since.elapsed();
        if waited < SPIN_FOR && SPINNING.load(Ordering::Relaxed) {
            for _ in 0..16 {
                std::hint::spin_loop();
            }
        } else if waited < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
