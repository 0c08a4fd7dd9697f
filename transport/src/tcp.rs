//! TCP links between hosts (`GFLOW_TRANSPORT=tcp`, for networks that block UDP; `tcp-all` also
//! within a host): TLS 1.3 over TCP, with the trust of the QUIC links (`tls.rs`): a fresh certificate per process,
//! its fingerprint reported in the rendezvous, mutual verification against the pinned
//! fingerprints, AES-128-GCM only. A process without the job token is not in the table, fails
//! the handshake and receives no byte.
//!
//! Each direction of a link is a TLS connection of its own: every process dials every peer once
//! (the connection it writes) and accepts one connection from every peer (the one it reads). The
//! halves then share no state and no lock, a writer waiting on a full socket never holds up the
//! reader, and no dialing order is needed. The dialer opens with (job, rank); the acceptor
//! checks them against the certificate it saw and answers one byte.
//!
//! Sockets are non-blocking after the handshake, so [`crate::NetComm`] runs its direct
//! exchanges over these links; blocking calls wait in `poll(2)`. After the handshake (rustls,
//! unbuffered) the records are sealed and opened by `records` with rustls' keys: 16
//! records per `write(2)`, sealed from the caller's bytes, and opened in place in the buffer a
//! `read(2)` filled (p2p between two simulated hosts 1.24 -> 1.42 GB/s, user CPU per byte 0.7x
//! on both sides; see `benches/MEASURED.md`). A large send is sealed a chunk at a time, paced
//! by the peer's reads (`TlsTx::stage`), so what the kernel copies is still in cache; a
//! receive into a buffer reads the socket straight into it and opens the records there
//! (`TlsRx::read_into`), so the kernel's copy is the receiver's only one.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustls::client::ClientConnectionData;
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::ServerConnectionData;
use rustls::server::UnbufferedServerConnection;

use crate::handshake::Handshake;

use crate::TransportError;
use crate::control::keep_alive;
use crate::link::{Caps, LinkError, LinkPair, LinkRx, LinkTx};
use crate::records::{ALERT, APP_DATA, CLOSE_NOTIFY, MAX_RECORD, Opened, Opener, Outbox, Sealer};
pub use crate::tls::Fingerprint;
use crate::tls::{SERVER_NAME, fingerprint, pinned_client, pinned_server, tls_error};

const ALPN: &[u8] = b"gflow-tcp/1";
/// Plaintext sealed per step of a write: 16 TLS records, written in one system call.
const CHUNK: usize = 256 << 10;
/// The longest one accepted connection may take to prove itself, so a silent stranger cannot
/// hold up the acceptor.
const HANDSHAKE_FOR: Duration = Duration::from_secs(5);
/// How long a staged send waits for the socket to take more before it stops pacing itself by
/// the peer's reads and seals ahead ([`LinkTx::stage`] never waits on a receive).
const STALL: Duration = Duration::from_millis(2);

/// A peer to link to: its rank, the address its listener is on, its certificate's fingerprint.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's rank.
    pub rank: usize,
    /// Its TCP listener.
    pub addr: SocketAddr,
    /// Its certificate.
    pub fingerprint: Fingerprint,
}

/// One process's TCP listener and certificate.
pub struct TcpNode {
    listener: TcpListener,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl TcpNode {
    /// Listens on `ip` (port chosen by the OS) with a fresh self-signed certificate. Listening
    /// starts here, before the rendezvous, so no peer dials a port that is not open yet.
    ///
    /// # Errors
    /// `Io` when the socket or the certificate cannot be made.
    pub fn bind(ip: IpAddr) -> Result<TcpNode, TransportError> {
        let (cert, key) = crate::tls::self_signed()?;
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| TransportError::Io(format!("TCP listener on {ip}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TransportError::Io(format!("TCP listener: {e}")))?;
        Ok(TcpNode {
            listener,
            cert,
            key,
        })
    }

    /// The port the listener is on.
    ///
    /// # Errors
    /// `Io` when the socket has no address.
    pub fn port(&self) -> Result<u16, TransportError> {
        self.listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| TransportError::Io(format!("TCP listener: {e}")))
    }

    /// This process's certificate fingerprint, reported in the rendezvous.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }

    fn client_config(
        &self,
        peer: Fingerprint,
    ) -> Result<Arc<rustls::ClientConfig>, TransportError> {
        let mut tls = pinned_client(&self.cert, &self.key, peer, ALPN)?;
        // The records after the handshake are sealed here (`records`) with rustls' keys.
        tls.enable_secret_extraction = true;
        Ok(Arc::new(tls))
    }

    fn server_config(&self, peers: &[Peer]) -> Result<Arc<rustls::ServerConfig>, TransportError> {
        let mut tls = pinned_server(
            &self.cert,
            &self.key,
            peers.iter().map(|p| p.fingerprint).collect(),
            ALPN,
        )?;
        // No session tickets: nothing the dialer would never read sits in its socket (unread
        // bytes at close turn its orderly end into a reset).
        tls.send_tls13_tickets = 0;
        tls.enable_secret_extraction = true;
        Ok(Arc::new(tls))
    }

    /// Links this process (`me`, of job `job`) to every peer: dials each (the connection this
    /// process writes) while accepting one connection from each (the one it reads).
    ///
    /// # Errors
    /// `Timeout` when a peer does not link before `deadline`; `Io` when a dial fails.
    pub fn link_all(
        &self,
        me: usize,
        job: u64,
        peers: &[Peer],
        deadline: Instant,
    ) -> Result<Vec<(usize, LinkPair)>, TransportError> {
        let server = self.server_config(peers)?;
        let give_up = AtomicBool::new(false);
        std::thread::scope(|s| {
            let accepting = s.spawn(|| self.accept_all(job, peers, &server, deadline, &give_up));
            let mut dialed = vec![];
            for p in peers {
                match self.dial(me, job, p, deadline) {
                    Ok(tx) => dialed.push((p.rank, tx)),
                    Err(e) => {
                        give_up.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            let mut accepted = accepting
                .join()
                .map_err(|_| TransportError::Io("TCP acceptor thread panicked".into()))??;
            Ok(dialed
                .into_iter()
                .filter_map(|(rank, tx)| {
                    let at = accepted.iter().position(|(r, _)| *r == rank)?;
                    let (_, rx) = accepted.swap_remove(at);
                    let pair: LinkPair = (Box::new(tx), Box::new(rx));
                    Some((rank, pair))
                })
                .collect())
        })
    }

    /// Dials `p`: TCP, the TLS handshake (its certificate pinned), the hello, its answer.
    fn dial(
        &self,
        me: usize,
        job: u64,
        p: &Peer,
        deadline: Instant,
    ) -> Result<TlsTx, TransportError> {
        let fail = |e: &dyn std::fmt::Display| {
            TransportError::Io(format!("TCP link to rank {} at {}: {e}", p.rank, p.addr))
        };
        let mut sock = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(
                &p.addr,
                left.clamp(Duration::from_millis(1), Duration::from_secs(1)),
            ) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(TransportError::Timeout(format!(
                        "TCP link to rank {} at {}: {e}",
                        p.rank, p.addr
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        tune(&sock).map_err(|e| fail(&e))?;
        let name = ServerName::try_from(SERVER_NAME).map_err(tls_error)?;
        let conn = UnbufferedClientConnection::new(self.client_config(p.fingerprint)?, name)
            .map_err(tls_error)?;
        blocking_until(&sock, deadline).map_err(|e| fail(&e))?;
        let mut hello = [0u8; 16];
        hello[..8].copy_from_slice(&job.to_le_bytes());
        hello[8..].copy_from_slice(&(me as u64).to_le_bytes());
        let mut hs = Handshake::new(conn);
        // The acceptor's answer: it checked our certificate, job and rank (a TLS 1.3 client
        // finishes its handshake before the server judges its certificate).
        hs.exchange(&mut sock, &hello, 1)
            .map_err(|e| match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => TransportError::Timeout(format!(
                    "TCP link to rank {} at {}: no answer in time",
                    p.rank, p.addr
                )),
                _ => fail(&e),
            })?;
        sock.set_nonblocking(true).map_err(|e| fail(&e))?;
        // From here this process seals the records itself, with the keys rustls negotiated.
        let (secrets, kernel, _) = hs.finish().map_err(|e| fail(&e))?;
        let sealer = Sealer::new(secrets.tx, kernel).map_err(|e| fail(&e))?;
        Ok(TlsTx::new(sealer, sock))
    }

    /// Accepts one genuine connection from every peer before `deadline` (or until `give_up`).
    /// A connection that fails the handshake, or whose hello does not match its certificate's
    /// rank and this job, is dropped unanswered.
    fn accept_all(
        &self,
        job: u64,
        peers: &[Peer],
        server: &Arc<rustls::ServerConfig>,
        deadline: Instant,
        give_up: &AtomicBool,
    ) -> Result<Vec<(usize, TlsRx)>, TransportError> {
        let mut got: Vec<(usize, TlsRx)> = vec![];
        while got.len() < peers.len() {
            if give_up.load(Ordering::Relaxed) {
                return Err(TransportError::Io("TCP links abandoned".into()));
            }
            if Instant::now() >= deadline {
                let missing: Vec<usize> = peers
                    .iter()
                    .map(|p| p.rank)
                    .filter(|r| !got.iter().any(|(g, _)| g == r))
                    .collect();
                return Err(TransportError::Timeout(format!(
                    "TCP links from ranks {missing:?} not up in time"
                )));
            }
            let sock = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                Err(e) => return Err(TransportError::Io(format!("TCP accept: {e}"))),
            };
            let soon = deadline.min(Instant::now() + HANDSHAKE_FOR);
            if let Some((rank, rx)) = self.admit(sock, job, peers, server, soon)
                && !got.iter().any(|(r, _)| *r == rank)
            {
                got.push((rank, rx));
            }
        }
        Ok(got)
    }

    /// The handshake and hello of one accepted connection: `Some((rank, half))` for a peer of
    /// this job, answered; `None` for anything else.
    fn admit(
        &self,
        mut sock: TcpStream,
        job: u64,
        peers: &[Peer],
        server: &Arc<rustls::ServerConfig>,
        deadline: Instant,
    ) -> Option<(usize, TlsRx)> {
        sock.set_nonblocking(false).ok()?;
        tune(&sock).ok()?;
        blocking_until(&sock, deadline).ok()?;
        let mut hs = Handshake::new(UnbufferedServerConnection::new(server.clone()).ok()?);
        let hello = hs.exchange(&mut sock, &[], 16).ok()?;
        let word = |r: std::ops::Range<usize>| {
            u64::from_le_bytes(
                hello
                    .get(r)
                    .and_then(|w| w.try_into().ok())
                    .unwrap_or([0xff; 8]),
            )
        };
        let (their_job, rank) = (word(0..8), word(8..16) as usize);
        let cert = hs
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| fingerprint(c));
        let genuine = peers
            .iter()
            .any(|p| p.rank == rank && Some(p.fingerprint) == cert);
        if hello.len() != 16 || their_job != job || !genuine {
            return None;
        }
        hs.exchange(&mut sock, &[1], 0).ok()?;
        sock.set_nonblocking(true).ok()?;
        // From here this process opens the records itself, with the keys rustls negotiated.
        let (secrets, kernel, early) = hs.finish().ok()?;
        let opener = Opener::new(secrets.rx, kernel).ok()?;
        let mut rx = TlsRx::new(opener, sock);
        rx.buf[..early.len()].copy_from_slice(&early);
        rx.end = early.len();
        Some((rank, rx))
    }
}

/// No Nagle delay (a frame header must not wait for an acknowledgement), and keep-alive probes
/// so a vanished host is noticed ([`keep_alive`]). Buffer sizes stay with the kernel's
/// autotuning, which on Linux grows them up to `tcp_rmem`/`tcp_wmem` (a fixed `SO_RCVBUF` would
/// turn it off and is capped lower, by `rmem_max`).
fn tune(sock: &TcpStream) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    keep_alive(sock)
}

/// Makes `sock`'s blocking calls give up at `deadline` (the handshake's).
fn blocking_until(sock: &TcpStream, deadline: Instant) -> std::io::Result<()> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    sock.set_read_timeout(Some(left))?;
    sock.set_write_timeout(Some(left))
}

/// What a blocking call waits for.
#[derive(Clone, Copy)]
enum Ready {
    Read,
    Write,
}

/// Waits until `sock` can be read or written (or has failed), at most until `deadline` and at
/// most 100 ms (callers check the link and the deadline between waits). The kernel wakes the
/// thread as bytes or room arrive, which a loaded host's sleeping poll loop cannot match.
#[cfg(unix)]
fn wait_for(sock: &TcpStream, what: Ready, deadline: Instant) {
    use std::os::fd::AsRawFd;
    let events = match what {
        Ready::Read => libc::POLLIN,
        Ready::Write => libc::POLLOUT,
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .min(Duration::from_millis(100));
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events,
        revents: 0,
    };
    let ms = i32::try_from(left.as_millis()).unwrap_or(100).max(1);
    // SAFETY: one valid pollfd, alive for the call; poll only writes its `revents`.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

/// Waits a little (no `poll` here).
#[cfg(not(unix))]
fn wait_for(_sock: &TcpStream, _what: Ready, deadline: Instant) {
    if Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// What a socket error means for the link: a reset, an end without TLS close_notify or a
/// keep-alive timeout is a peer that died or vanished; a broken pipe, a peer that closed.
fn lost(e: &std::io::Error) -> LinkError {
    match e.kind() {
        ErrorKind::BrokenPipe => LinkError::Closed,
        ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::TimedOut
        | ErrorKind::UnexpectedEof => LinkError::PeerDead,
        _ => LinkError::Io(e.to_string()),
    }
}

/// The sending half of a TCP link: a TLS connection this process dialed, its records sealed
/// here ([`crate::records`]).
struct TlsTx {
    sealer: Sealer<ClientConnectionData>,
    sock: TcpStream,
    /// Sealed records, written to the socket from `sent` on.
    out: Outbox,
    sent: usize,
    /// Plaintext bytes sealed into `out` whose records are not all on the socket yet; they
    /// count as written only once they are, so a caller that stops calling on "all written"
    /// leaves nothing behind in this process.
    staged: usize,
    failed: Option<LinkError>,
}

impl TlsTx {
    fn new(sealer: Sealer<ClientConnectionData>, sock: TcpStream) -> TlsTx {
        TlsTx {
            sealer,
            sock,
            out: Outbox::default(),
            sent: 0,
            staged: 0,
            failed: None,
        }
    }

    /// Seals `parts` (one stream of `typ` bytes) after what `out` holds.
    fn seal(&mut self, typ: u8, parts: &[&[u8]]) {
        if self.sent == self.out.len() {
            // Drained: start over (a buffer grown by a large staged send is given back).
            if self.out.kept() > 4 * CHUNK {
                self.out = Outbox::default();
            }
            self.out.clear();
            self.sent = 0;
        }
        if let Err(e) = self.sealer.seal(typ, parts, &mut self.out) {
            self.failed = Some(e);
        }
    }

    /// [`LinkTx::try_write`]: seals up to [`CHUNK`] bytes of `bytes` (unless some are staged
    /// already) and moves records to the socket; the count of bytes whose records are all on
    /// the socket.
    fn push(&mut self, bytes: &[u8]) -> usize {
        if self.failed.is_some() {
            return 0;
        }
        if self.staged == 0 && !bytes.is_empty() && self.sent == self.out.len() {
            let take = bytes.len().min(CHUNK);
            self.seal(APP_DATA, &[&bytes[..take]]);
            self.staged = take;
        }
        if !self.flush() {
            return 0;
        }
        std::mem::take(&mut self.staged)
    }

    /// Moves sealed records to the socket, waiting while it takes some within [`STALL`] of
    /// the last; true when none is left.
    fn drain_while_read(&mut self) -> bool {
        let mut since = (self.sent, Instant::now());
        while !self.flush() {
            if self.failed.is_some() {
                return false;
            }
            if self.sent != since.0 {
                since = (self.sent, Instant::now());
            } else if since.1.elapsed() >= STALL {
                return false;
            }
            wait_for(&self.sock, Ready::Write, since.1 + STALL);
        }
        true
    }

    /// Moves sealed records to the socket; true when none is left.
    fn flush(&mut self) -> bool {
        while self.failed.is_none() && self.sent < self.out.len() {
            match self.sock.write(&self.out.bytes()[self.sent..]) {
                Ok(0) => self.failed = Some(LinkError::Closed),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.failed = Some(lost(&e)),
            }
        }
        self.failed.is_none()
    }
}

impl LinkTx for TlsTx {
    fn kind(&self) -> &'static str {
        "tcp"
    }

    fn write_all(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), LinkError> {
        let mut done = 0;
        while done < bytes.len() {
            let n = self.push(&bytes[done..]);
            if n > 0 {
                done += n;
                continue;
            }
            LinkTx::check(self, deadline)?;
            wait_for(&self.sock, Ready::Write, deadline);
        }
        Ok(())
    }

    /// Sends TLS close_notify and shuts the socket's sending side: the peer reads an orderly
    /// end after the last byte.
    fn close(&mut self) {
        if self.failed.is_none() {
            self.seal(ALERT, &[&CLOSE_NOTIFY]);
        }
        let give_up = Instant::now() + Duration::from_secs(1);
        while !self.flush() && self.failed.is_none() && Instant::now() < give_up {
            wait_for(&self.sock, Ready::Write, give_up);
        }
        let _ = self.sock.shutdown(Shutdown::Write);
    }

    fn caps(&self) -> Caps {
        Caps {
            nonblocking: true,
            shares_memory: false,
        }
    }

    fn try_write(&mut self, bytes: &[u8]) -> usize {
        self.push(bytes)
    }

    /// Seals every part into records, [`CHUNK`] bytes at a time, each written as far as the
    /// socket takes it. While the peer reads, each chunk waits for the socket to take it
    /// before the next is sealed, so the sealed bytes are still in cache when the kernel copies
    /// them, the buffer stays small, and the peer opens the first records while the rest are
    /// sealed. Once the socket takes nothing for [`STALL`] (the peer is not reading now: it may
    /// be sending to this rank itself) the next chunks are sealed into the buffer without
    /// waiting, for the writer thread, until the socket takes bytes again: a send never waits
    /// on a receive.
    fn stage(&mut self, parts: &[&[u8]]) -> bool {
        if self.failed.is_some() || self.staged != 0 || self.sent != self.out.len() {
            return false;
        }
        let mut rest = parts.iter().copied().filter(|p| !p.is_empty());
        let mut part: &[u8] = rest.next().unwrap_or_default();
        let mut piece: Vec<&[u8]> = Vec::with_capacity(parts.len());
        let mut paced = true;
        while !part.is_empty() && self.failed.is_none() {
            piece.clear();
            let mut want = CHUNK;
            while want > 0 && !part.is_empty() {
                let take = part.len().min(want);
                piece.push(&part[..take]);
                want -= take;
                part = &part[take..];
                if part.is_empty() {
                    part = rest.next().unwrap_or_default();
                }
            }
            if self.sent == self.out.len() {
                self.out.clear();
                self.sent = 0;
            }
            if let Err(e) = self.sealer.seal(APP_DATA, &piece, &mut self.out) {
                self.failed = Some(e);
            }
            // Paced again as soon as the socket takes bytes without waiting (the peer reads).
            let before = self.sent;
            paced = (self.flush() || paced || self.sent != before) && self.drain_while_read();
        }
        true
    }

    fn write_staged(&mut self, deadline: Instant) -> Result<(), LinkError> {
        while !self.flush() {
            LinkTx::check(self, deadline)?;
            wait_for(&self.sock, Ready::Write, deadline);
        }
        Ok(())
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if Instant::now() > deadline {
            return Err(LinkError::Timeout);
        }
        Ok(())
    }
}

/// The receiving half of a TCP link: a TLS connection this process accepted, its records
/// opened in place in `buf`, where the socket put them.
struct TlsRx {
    opener: Opener<ServerConnectionData>,
    sock: TcpStream,
    /// Bytes read from the socket: `buf[start..end]` not yet opened, `buf[plain]` opened
    /// plaintext not yet taken.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    plain: std::ops::Range<usize>,
    failed: Option<LinkError>,
}

/// Bytes a receive asks the socket for at once (more, up to a record, may be buffered).
const INBOX: usize = 256 << 10;
/// Room in a destination from which [`TlsRx::read_into`] reads the socket straight into it.
const DIRECT_MIN: usize = 4 * MAX_RECORD;

impl TlsRx {
    fn new(opener: Opener<ServerConnectionData>, sock: TcpStream) -> TlsRx {
        TlsRx {
            opener,
            sock,
            buf: vec![0; INBOX + MAX_RECORD].into_boxed_slice(),
            start: 0,
            end: 0,
            plain: 0..0,
            failed: None,
        }
    }

    /// Opens the next record if it is all in, else reads what the socket holds; true if
    /// anything moved (`plain` may then hold bytes).
    fn fetch(&mut self) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match Opener::<ServerConnectionData>::record_len(&self.buf[self.start..self.end]) {
            Err(e) => {
                self.failed = Some(e);
                return false;
            }
            Ok(Some(len)) if self.end - self.start >= len => {
                let at = self.start;
                self.start += len;
                match self.opener.open(&mut self.buf[at..at + len]) {
                    Ok(Opened::Data(r)) => self.plain = at + r.start..at + r.end,
                    Ok(Opened::Nothing) => {}
                    Ok(Opened::Closed) => self.failed = Some(LinkError::Closed),
                    Err(e) => self.failed = Some(e),
                }
                return true;
            }
            Ok(_) => {}
        }
        // Room for a whole record after `end`: move the partial one to the front.
        if self.buf.len() - self.end < MAX_RECORD {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        match self.sock.read(&mut self.buf[self.end..]) {
            // EOF without close_notify: the peer process ended mid-stream.
            Ok(0) => {
                self.failed = Some(LinkError::PeerDead);
                false
            }
            Ok(n) => {
                self.end += n;
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => false,
            Err(e) => {
                self.failed = Some(lost(&e));
                false
            }
        }
    }
}

impl TlsRx {
    /// [`LinkRx::try_read_into`]: what the receive buffer holds goes first (copied); then,
    /// while `dst` has room for a few records, the socket is read straight into `dst` and each
    /// record opened there, its plaintext written right after the previous one's (the records'
    /// headers and tags are overwritten as it goes), so the bytes are copied once, by the
    /// kernel. Bytes of a record not all in yet go back to the receive buffer.
    fn read_into(&mut self, dst: &mut [u8]) -> usize {
        let mut got = 0;
        while got < dst.len() && self.failed.is_none() {
            if !self.plain.is_empty() {
                let n = self.plain.len().min(dst.len() - got);
                dst[got..got + n]
                    .copy_from_slice(&self.buf[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                got += n;
            } else {
                let whole = matches!(
                    Opener::<ServerConnectionData>::record_len(&self.buf[self.start..self.end]),
                    Ok(Some(len)) if self.end - self.start >= len
                );
                // A whole record is opened in the buffer; else the socket is read below.
                if !whole || !self.fetch() {
                    break;
                }
            }
        }
        if dst.len() - got < DIRECT_MIN || self.failed.is_some() {
            return got
                + self.try_read_with(dst.len() - got, &mut |piece| {
                    dst[got..got + piece.len()].copy_from_slice(piece);
                    got += piece.len();
                });
        }
        // The start of a record (no whole one) may wait in the buffer: it moves to `dst`.
        let held = self.end - self.start;
        dst[got..got + held].copy_from_slice(&self.buf[self.start..self.end]);
        (self.start, self.end) = (0, 0);
        // dst[got..]: plaintext; dst[rec..end]: records read, not opened yet.
        let (mut rec, mut end) = (got, got + held);
        while self.failed.is_none() {
            let room = (dst.len() - end).min(INBOX);
            if dst.len() - got < DIRECT_MIN || room < MAX_RECORD {
                break;
            }
            let n = match self.sock.read(&mut dst[end..end + room]) {
                Ok(0) => {
                    self.failed = Some(LinkError::PeerDead);
                    break;
                }
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    break;
                }
                Err(e) => {
                    self.failed = Some(lost(&e));
                    break;
                }
            };
            end += n;
            while self.failed.is_none() {
                let len = match Opener::<ServerConnectionData>::record_len(&dst[rec..end]) {
                    Ok(Some(len)) if end - rec >= len => len,
                    Ok(_) => break,
                    Err(e) => {
                        self.failed = Some(e);
                        break;
                    }
                };
                let at = rec - got + crate::records::HEADER;
                match self.opener.open_within(&mut dst[got..rec + len], at) {
                    Ok(Opened::Data(r)) => got += r.len(),
                    Ok(Opened::Nothing) => {}
                    Ok(Opened::Closed) => self.failed = Some(LinkError::Closed),
                    Err(e) => self.failed = Some(e),
                }
                rec += len;
            }
            // The start of the next record moves up behind the plaintext.
            dst.copy_within(rec..end, got);
            (rec, end) = (got, got + end - rec);
        }
        // Whatever is not opened goes back to the buffer (less than a record).
        let left = end - rec;
        self.buf[..left].copy_from_slice(&dst[rec..end]);
        (self.start, self.end) = (0, left);
        got
    }
}

impl LinkRx for TlsRx {
    fn read_with(
        &mut self,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        let mut done = 0;
        while done < len {
            let n = self.try_read_with(len - done, &mut |piece| {
                f(done, piece);
                done += piece.len();
            });
            if n > 0 {
                continue;
            }
            LinkRx::check(self, deadline)?;
            wait_for(&self.sock, Ready::Read, deadline);
        }
        Ok(())
    }

    fn caps(&self) -> Caps {
        Caps {
            nonblocking: true,
            shares_memory: false,
        }
    }

    fn try_read_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut got = 0;
        while got < max {
            if !self.plain.is_empty() {
                let n = self.plain.len().min(max - got);
                f(&self.buf[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                got += n;
                continue;
            }
            if !self.fetch() {
                break;
            }
        }
        got
    }

    fn try_read_into(&mut self, buf: &mut [u8]) -> usize {
        self.read_into(buf)
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if Instant::now() > deadline {
            return Err(LinkError::Timeout);
        }
        Ok(())
    }

    fn drain(&mut self, deadline: Instant) {
        while self.failed.is_none() && Instant::now() < deadline {
            if self.try_read_with(usize::MAX, &mut |_| {}) == 0 {
                wait_for(&self.sock, Ready::Read, deadline);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::records::MAX_PLAIN;

    fn lo() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    fn peer(rank: usize, n: &TcpNode) -> Peer {
        Peer {
            rank,
            addr: SocketAddr::new(lo(), n.port().unwrap()),
            fingerprint: n.fingerprint(),
        }
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// Ranks 0 and 1 linked over loopback: (links of 0, links of 1).
    fn linked() -> (LinkPair, LinkPair) {
        let (a, b) = (TcpNode::bind(lo()).unwrap(), TcpNode::bind(lo()).unwrap());
        let (pa, pb) = (peer(0, &a), peer(1, &b));
        std::thread::scope(|s| {
            let at_a = s.spawn(|| a.link_all(0, 7, std::slice::from_ref(&pb), soon()));
            let mut at_b = b.link_all(1, 7, std::slice::from_ref(&pa), soon()).unwrap();
            let mut at_a = at_a.join().unwrap().unwrap();
            assert_eq!((at_a[0].0, at_b[0].0), (1, 0));
            (at_a.remove(0).1, at_b.remove(0).1)
        })
    }

    /// Rank 0's sending half dialed to rank 1's receiving half over loopback (one direction,
    /// for tests that reach into the record layer).
    fn dialed() -> (TlsTx, TlsRx) {
        let (a, b) = (TcpNode::bind(lo()).unwrap(), TcpNode::bind(lo()).unwrap());
        let (pa, pb) = (peer(0, &a), peer(1, &b));
        let server = b.server_config(std::slice::from_ref(&pa)).unwrap();
        std::thread::scope(|s| {
            let accepting = s.spawn(|| {
                let stop = AtomicBool::new(false);
                b.accept_all(7, std::slice::from_ref(&pa), &server, soon(), &stop)
            });
            let tx = a.dial(0, 7, &pb, soon()).unwrap();
            (tx, accepting.join().unwrap().unwrap().remove(0).1)
        })
    }

    /// A process whose certificate is not in the job's table (it never passed the token check)
    /// fails the handshake and gets no byte; the genuine rank links and its bytes arrive.
    #[test]
    fn only_pinned_certificates_link() {
        let (a, b, intruder) = (
            TcpNode::bind(lo()).unwrap(),
            TcpNode::bind(lo()).unwrap(),
            TcpNode::bind(lo()).unwrap(),
        );
        let (pa, pb) = (peer(0, &a), peer(1, &b));
        std::thread::scope(|s| {
            let server = s.spawn(|| a.link_all(0, 7, std::slice::from_ref(&pb), soon()));
            let t = Instant::now();
            let refused = intruder.link_all(1, 7, std::slice::from_ref(&pa), soon());
            let err = refused.err().expect("the intruder linked").to_string();
            assert!(t.elapsed() < Duration::from_secs(2), "{err}");
            assert!(err.contains("rank 0"), "{err}");
            let mut links = b.link_all(1, 7, std::slice::from_ref(&pa), soon()).unwrap();
            let mut at_a = server.join().unwrap().unwrap();
            assert_eq!((links.len(), at_a.len(), at_a[0].0), (1, 1, 1));
            let msg: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            links[0].1.0.write_all(&msg, soon()).unwrap();
            let mut got = vec![0u8; msg.len()];
            at_a[0].1.1.read_exact(&mut got, soon()).unwrap();
            assert_eq!(got, msg);
        });
    }

    /// The sender moves to new keys every few records (here every 3; in use every 2^23, inside
    /// AES-GCM's limit): each KeyUpdate record is applied by the receiver, whose next records
    /// open under the new keys, so every byte arrives intact; a record altered on the way fails
    /// authentication instead of giving other bytes.
    #[test]
    fn key_updates_keep_the_stream_intact_and_a_bad_record_fails() {
        let (mut tx, mut rx) = dialed();
        tx.sealer.rekey_after = 3;
        let msg: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        std::thread::scope(|s| {
            s.spawn(|| tx.write_all(&msg, soon()).unwrap());
            let mut got = vec![0u8; msg.len()];
            rx.read_exact(&mut got, soon()).unwrap();
            assert!(got == msg, "other bytes arrived");
        });
        // One flipped bit in the next record's ciphertext.
        tx.seal(APP_DATA, &[b"tampered"]);
        let at = tx.out.len() - 20;
        tx.out.bytes_mut()[at] ^= 1;
        tx.write_all(&[], soon()).unwrap();
        assert!(tx.flush());
        let err = rx.read_exact(&mut [0u8; 8], soon()).unwrap_err();
        assert!(
            matches!(&err, LinkError::Io(m) if m.contains("authentication")),
            "{err:?}"
        );
    }

    /// Reads straight into the destination (`try_read_into`) give the bytes the copying path
    /// gives: messages of odd sizes back to back (the records that end one hold the start of
    /// the next), a message begun by a copying read, key updates every few records among
    /// them, and a small message after them.
    #[test]
    fn reads_into_the_destination_match_the_stream() {
        let (mut tx, mut rx) = dialed();
        tx.sealer.rekey_after = 5;
        let bytes = |n: usize, seed: u32| -> Vec<u8> {
            (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8)
                .collect()
        };
        let msgs = [
            bytes((5 << 20) + 777, 1),
            bytes((1 << 20) + 5, 2),
            bytes(DIRECT_MIN + 3, 3),
            bytes(10, 4),
        ];
        std::thread::scope(|s| {
            s.spawn(|| {
                for m in &msgs {
                    tx.write_all(m, soon()).unwrap();
                }
            });
            let mut head = [0u8; 3];
            rx.read_exact(&mut head, soon()).unwrap();
            assert_eq!(head, msgs[0][..3]);
            let deadline = soon();
            for (k, m) in msgs.iter().enumerate() {
                let mut got = vec![0u8; m.len()];
                let mut done = if k == 0 { 3 } else { 0 };
                got[..done].copy_from_slice(&m[..done]);
                while done < m.len() {
                    done += rx.try_read_into(&mut got[done..]);
                    assert!(Instant::now() < deadline, "stuck at {done} of message {k}");
                }
                assert!(got == *m, "message {k}: other bytes arrived");
            }
        });
    }

    /// A hello naming another job, or another rank than the certificate's, is dropped unanswered.
    #[test]
    fn a_wrong_job_or_rank_is_not_answered() {
        let (a, b) = (TcpNode::bind(lo()).unwrap(), TcpNode::bind(lo()).unwrap());
        let (pa, pb) = (peer(0, &a), peer(1, &b));
        let short = || Instant::now() + Duration::from_millis(1500);
        for (job, rank) in [(8, 1), (7, 2)] {
            std::thread::scope(|s| {
                let server = s.spawn(|| a.link_all(0, 7, std::slice::from_ref(&pb), short()));
                let dialer = b.link_all(rank, job, std::slice::from_ref(&pa), short());
                assert!(dialer.is_err(), "job {job} rank {rank} linked");
                assert!(server.join().unwrap().is_err());
            });
        }
    }

    /// Both directions at once, far beyond the socket buffers, through the non-blocking calls
    /// (as direct exchanges use them) and the blocking ones: every byte arrives, in order.
    #[test]
    fn large_transfers_both_ways_arrive_intact() {
        let ((mut a_tx, mut a_rx), (mut b_tx, mut b_rx)) = linked();
        let n = 24 << 20;
        let msg = |seed: u32| -> Vec<u8> {
            (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8)
                .collect()
        };
        let (ma, mb) = (msg(1), msg(2));
        std::thread::scope(|s| {
            s.spawn(|| b_tx.write_all(&mb, soon()).unwrap());
            let at_b = s.spawn(|| {
                let mut at_b = vec![0u8; n];
                b_rx.read_exact(&mut at_b, soon()).unwrap();
                at_b
            });
            // a: interleaved non-blocking writes and reads on one thread.
            let (mut sent, mut got) = (0, Vec::with_capacity(n));
            let deadline = soon();
            while sent < n || got.len() < n {
                sent += a_tx.try_write(&ma[sent..]);
                a_rx.try_read_with(n - got.len(), &mut |p| got.extend_from_slice(p));
                assert!(
                    Instant::now() < deadline,
                    "stuck at {sent} sent, {} got",
                    got.len()
                );
            }
            assert!(got == mb, "a received other bytes");
            assert!(at_b.join().unwrap() == ma, "b received other bytes");
        });
    }

    /// A staged send (sealed a chunk at a time, each written as far as the socket takes it) of
    /// parts whose sizes cross chunk and record boundaries anywhere, empty parts among them,
    /// arrives intact and in order: paced by a peer that reads meanwhile, and sealed ahead
    /// (after a stall) for one that reads only later, which costs the sender no wait beyond
    /// the stall.
    #[test]
    fn staged_parts_across_chunk_boundaries_arrive_intact() {
        let ((mut a_tx, _a_rx), (_b_tx, mut b_rx)) = linked();
        let bytes = |n: usize, seed: u32| -> Vec<u8> {
            (0..n as u32)
                .map(|i| (i.wrapping_mul(2_246_822_519) ^ seed) as u8)
                .collect()
        };
        let (head, body, tail) = (
            bytes(16, 1),
            // Beyond what the socket buffers take, so the send waits or stalls.
            bytes(96 * CHUNK + MAX_PLAIN / 2 + 13, 2),
            bytes(7, 3),
        );
        let parts: [&[u8]; 5] = [&head, &[], &body, &tail, &[]];
        let want: Vec<u8> = parts.concat();
        let read = |rx: &mut Box<dyn LinkRx>| {
            let mut got = vec![0u8; want.len()];
            rx.read_exact(&mut got, soon()).unwrap();
            assert!(got == want, "other bytes arrived");
        };
        for _ in 0..2 {
            // Read meanwhile: the send is paced by the reads.
            std::thread::scope(|s| {
                s.spawn(|| read(&mut b_rx));
                assert!(a_tx.stage(&parts));
                a_tx.write_staged(soon()).unwrap();
            });
            // Read later: the send stalls once, then seals the rest ahead and returns.
            let t = Instant::now();
            assert!(a_tx.stage(&parts));
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
            std::thread::scope(|s| {
                s.spawn(|| a_tx.write_staged(soon()).unwrap());
                read(&mut b_rx);
            });
        }
        assert!(a_tx.stage(&[&[]]));
        a_tx.write_staged(soon()).unwrap();
    }

    /// A peer that goes away (its sockets closed without TLS close_notify, as when its process
    /// is killed) is an error within a second, for reads and writes, not at the deadline.
    #[test]
    fn a_dead_peer_is_an_error_at_once() {
        let ((mut a_tx, mut a_rx), b) = linked();
        drop(b);
        let far = Instant::now() + Duration::from_secs(30);
        let t = Instant::now();
        let mut buf = [0u8; 8];
        let read = a_rx.read_exact(&mut buf, far);
        assert_eq!(read, Err(LinkError::PeerDead));
        let big = vec![0u8; 64 << 20];
        let wrote = a_tx.write_all(&big, far);
        assert!(
            matches!(wrote, Err(LinkError::PeerDead | LinkError::Closed)),
            "{wrote:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    /// An orderly close (`LinkTx::close`) reads as `Closed` after the last byte, and ends the
    /// peer's drain.
    #[test]
    fn an_orderly_close_delivers_every_byte_then_closed() {
        let ((mut a_tx, _a_rx), (_b_tx, mut b_rx)) = linked();
        a_tx.write_all(b"last words", soon()).unwrap();
        a_tx.close();
        let mut buf = [0u8; 10];
        b_rx.read_exact(&mut buf, soon()).unwrap();
        assert_eq!(&buf, b"last words");
        assert_eq!(
            b_rx.read_exact(&mut [0u8; 1], soon()),
            Err(LinkError::Closed)
        );
        let t = Instant::now();
        b_rx.drain(soon());
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
