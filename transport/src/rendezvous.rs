//! Rendezvous on `MASTER_ADDR:MASTER_PORT`: rank 0 listens; every other rank connects, answers a
//! challenge with proof of the job token (SHA-256 of token and nonce, so the token never crosses
//! the wire), and reports its rank, world size, host identity and pid. Rank 0 answers with the
//! table of all ranks, or a refusal that says why. A second round is a barrier (each rank has
//! created its outgoing links). A wrong token is refused and learns nothing of the job; a wrong
//! world size, a duplicate rank, a rank out of range or a rank that does not arrive in time is an
//! error within the deadline, never a hang. The connections then stay open as the job's control
//! channel ([`crate::control`]).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::control::Control;
use crate::{Forced, TransportError};

/// One rank of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Host identity: equal for processes that can share memory.
    pub host: String,
    /// Process id (for liveness checks between processes of one host).
    pub pid: u32,
    /// Where its QUIC endpoint listens. A rank reports an unspecified IP; rank 0 fills in the
    /// address it saw the rank's rendezvous connection come from.
    pub quic: SocketAddr,
    /// SHA-256 of its QUIC certificate (pinned by every peer).
    pub cert: [u8; 32],
    /// The links it asked for (`GFLOW_TRANSPORT`); one rank asking decides for all, and a job
    /// whose ranks ask for different ones is refused.
    pub transport: Forced,
    /// Its large buffers live in a shared arena that peers on its host may read
    /// ([`crate::arena`]), and it sends such payloads by reference.
    pub shared_arena: bool,
    /// The port of its TCP listener (at the IP of `quic`).
    pub tcp_port: u16,
    /// SHA-256 of its TCP links' certificate.
    pub tcp_cert: [u8; 32],
}

impl Member {
    fn encode(&self, v: &mut Vec<u8>) {
        put_bytes(v, self.host.as_bytes());
        v.extend_from_slice(&u64::from(self.pid).to_le_bytes());
        put_bytes(v, self.quic.to_string().as_bytes());
        put_bytes(v, &self.cert);
        v.extend_from_slice(&self.transport.code().to_le_bytes());
        v.extend_from_slice(&u64::from(self.shared_arena).to_le_bytes());
        v.extend_from_slice(&u64::from(self.tcp_port).to_le_bytes());
        put_bytes(v, &self.tcp_cert);
    }

    fn decode(c: &mut Cur<'_>) -> Result<Member, TransportError> {
        let bad = |what: &str| TransportError::Protocol(format!("bad {what} in rendezvous"));
        Ok(Member {
            host: String::from_utf8_lossy(&c.bytes()?).into_owned(),
            pid: c.u64()? as u32,
            quic: String::from_utf8_lossy(&c.bytes()?)
                .parse()
                .map_err(|_| bad("QUIC address"))?,
            cert: c
                .bytes()?
                .try_into()
                .map_err(|_| bad("certificate fingerprint"))?,
            transport: Forced::from_code(c.u64()?).ok_or_else(|| bad("transport"))?,
            shared_arena: c.u64()? != 0,
            tcp_port: u16::try_from(c.u64()?).map_err(|_| bad("TCP port"))?,
            tcp_cert: c
                .bytes()?
                .try_into()
                .map_err(|_| bad("TCP certificate fingerprint"))?,
        })
    }
}

/// What every rank learns: a job id and all members, indexed by rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Random id of this job (names its shared-memory files).
    pub job: u64,
    /// Members by rank.
    pub members: Vec<Member>,
}

/// Rendezvous settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// `MASTER_ADDR:MASTER_PORT`.
    pub master: String,
    /// `WORLD_SIZE`.
    pub world: usize,
    /// `RANK`.
    pub rank: usize,
    /// The job token (`GFLOW_JOB_TOKEN`).
    pub token: Vec<u8>,
    /// Deadline for the whole rendezvous.
    pub timeout: Duration,
    /// This process's host identity.
    pub host: String,
}

/// What this process tells the others about its links.
#[derive(Clone, Debug)]
pub struct Offer {
    /// The port of its QUIC endpoint.
    pub quic_port: u16,
    /// SHA-256 of its QUIC certificate.
    pub cert: [u8; 32],
    /// The links it asks for (`GFLOW_TRANSPORT`).
    pub transport: Forced,
    /// It sends payloads in its shared arena by reference.
    pub shared_arena: bool,
    /// The port of its TCP listener.
    pub tcp_port: u16,
    /// SHA-256 of its TCP links' certificate.
    pub tcp_cert: [u8; 32],
}

/// An open rendezvous: the table, and the connection(s) for the barrier round.
pub struct Session {
    /// The table.
    pub table: Table,
    conns: Vec<TcpStream>,
    deadline: Instant,
    rank: usize,
}

// Message tags.
const CHALLENGE: u8 = 1;
const HELLO: u8 = 2;
const TABLE: u8 = 3;
const REJECT: u8 = 4;
const READY: u8 = 5;
const GO: u8 = 6;
const MAX_MSG: usize = 1 << 20;

/// Writes one message: tag, length, body.
pub(crate) fn send_msg(s: &mut TcpStream, tag: u8, body: &[u8]) -> std::io::Result<()> {
    let mut m = Vec::with_capacity(5 + body.len());
    m.push(tag);
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(body);
    s.write_all(&m)
}

fn recv_msg(s: &mut TcpStream, deadline: Instant) -> Result<(u8, Vec<u8>), TransportError> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left)).map_err(io)?;
    read_msg(s)
}

/// Reads one message (tag, body), waiting as long as the socket's read timeout allows.
pub(crate) fn read_msg(s: &mut TcpStream) -> Result<(u8, Vec<u8>), TransportError> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).map_err(io)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_MSG {
        return Err(TransportError::Protocol(format!(
            "rendezvous message of {len} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(io)?;
    Ok((head[0], body))
}

fn io(e: std::io::Error) -> TransportError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            TransportError::Timeout("rendezvous".into())
        }
        _ => TransportError::Io(e.to_string()),
    }
}

fn proof(token: &[u8], nonce: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"gflow-rendezvous-v1");
    h.update(token);
    h.update(nonce);
    h.finalize().into()
}

/// A tiny cursor over little-endian fields.
struct Cur<'a>(&'a [u8]);
impl Cur<'_> {
    fn u64(&mut self) -> Result<u64, TransportError> {
        if self.0.len() < 8 {
            return Err(TransportError::Protocol("short rendezvous message".into()));
        }
        let (a, b) = self.0.split_at(8);
        self.0 = b;
        Ok(u64::from_le_bytes(a.try_into().unwrap_or([0; 8])))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, TransportError> {
        let n = self.u64()? as usize;
        if self.0.len() < n {
            return Err(TransportError::Protocol("short rendezvous message".into()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a.to_vec())
    }
}

fn put_bytes(v: &mut Vec<u8>, b: &[u8]) {
    v.extend_from_slice(&(b.len() as u64).to_le_bytes());
    v.extend_from_slice(b);
}

fn encode_table(t: &Table) -> Vec<u8> {
    let mut v = t.job.to_le_bytes().to_vec();
    v.extend_from_slice(&(t.members.len() as u64).to_le_bytes());
    for m in &t.members {
        m.encode(&mut v);
    }
    v
}

fn decode_table(b: &[u8]) -> Result<Table, TransportError> {
    let mut c = Cur(b);
    let job = c.u64()?;
    let n = c.u64()? as usize;
    if n > 1 << 20 {
        return Err(TransportError::Protocol(
            "implausible world size in table".into(),
        ));
    }
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        members.push(Member::decode(&mut c)?);
    }
    Ok(Table { job, members })
}

/// Runs the first round: returns the table (on every rank) or a clear error.
///
/// # Errors
/// `Refused` (with the reason rank 0 gave), `Timeout`, `Io`, `Protocol`.
pub fn join(cfg: &Config, offer: &Offer) -> Result<Session, TransportError> {
    let deadline = Instant::now() + cfg.timeout;
    if cfg.rank >= cfg.world {
        return Err(TransportError::Refused(format!(
            "RANK={} is not below WORLD_SIZE={}",
            cfg.rank, cfg.world
        )));
    }
    let me = Member {
        host: cfg.host.clone(),
        pid: std::process::id(),
        quic: SocketAddr::new(IpAddr::from([0, 0, 0, 0]), offer.quic_port),
        cert: offer.cert,
        transport: offer.transport,
        shared_arena: offer.shared_arena,
        tcp_port: offer.tcp_port,
        tcp_cert: offer.tcp_cert,
    };
    if cfg.world == 1 {
        return Ok(Session {
            table: Table {
                job: random_u64()?,
                members: vec![me],
            },
            conns: vec![],
            deadline,
            rank: 0,
        });
    }
    if cfg.rank == 0 {
        serve(cfg, me, deadline)
    } else {
        connect(cfg, me, deadline)
    }
}

fn random_u64() -> Result<u64, TransportError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| TransportError::Io(e.to_string()))?;
    Ok(u64::from_le_bytes(b))
}

fn serve(cfg: &Config, mut me: Member, deadline: Instant) -> Result<Session, TransportError> {
    let listener = TcpListener::bind(&cfg.master)
        .map_err(|e| TransportError::Io(format!("rank 0 cannot listen on {}: {e}", cfg.master)))?;
    listener.set_nonblocking(true).map_err(io)?;
    let mut joined: Vec<Option<(Member, TcpStream)>> = (0..cfg.world).map(|_| None).collect();
    let mut missing = cfg.world - 1;
    let fail = |joined: &mut Vec<Option<(Member, TcpStream)>>, why: String| -> TransportError {
        for (_, s) in joined.iter_mut().flatten() {
            let _ = send_msg(s, REJECT, why.as_bytes());
        }
        TransportError::Refused(why)
    };
    while missing > 0 {
        if Instant::now() > deadline {
            let late: Vec<usize> = (1..cfg.world).filter(|&r| joined[r].is_none()).collect();
            let why = format!(
                "ranks {late:?} did not join rank 0 at {} within {:.0} s",
                cfg.master,
                cfg.timeout.as_secs_f64()
            );
            return Err(fail(&mut joined, why));
        }
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(io(e)),
        };
        s.set_nonblocking(false).map_err(io)?;
        let mut nonce = [0u8; 32];
        getrandom::fill(&mut nonce).map_err(|e| TransportError::Io(e.to_string()))?;
        if send_msg(&mut s, CHALLENGE, &nonce).is_err() {
            continue;
        }
        let hello_deadline = deadline.min(Instant::now() + Duration::from_secs(5));
        let Ok((HELLO, body)) = recv_msg(&mut s, hello_deadline) else {
            continue;
        };
        let mut c = Cur(&body);
        let (Ok(rank), Ok(world), Ok(pr), Ok(mut member)) =
            (c.u64(), c.u64(), c.bytes(), Member::decode(&mut c))
        else {
            continue;
        };
        if pr != proof(&cfg.token, &nonce) {
            // A process without the token learns nothing about the job.
            let _ = send_msg(&mut s, REJECT, b"wrong job token (GFLOW_JOB_TOKEN)");
            continue;
        }
        let (rank, world) = (rank as usize, world as usize);
        let why = if world != cfg.world {
            Some(format!(
                "rank {rank} says WORLD_SIZE={world} but rank 0 has WORLD_SIZE={}",
                cfg.world
            ))
        } else if rank == 0 || rank >= cfg.world {
            Some(format!(
                "a process claims RANK={rank}, which is not in 1..{}",
                cfg.world
            ))
        } else if joined[rank].is_some() {
            Some(format!("two processes claim RANK={rank}"))
        } else {
            None
        };
        if let Some(why) = why {
            let _ = send_msg(&mut s, REJECT, why.as_bytes());
            return Err(fail(&mut joined, why));
        }
        // Reachable addresses: where this connection came from and where it arrived.
        if let (Ok(peer), Ok(local)) = (s.peer_addr(), s.local_addr()) {
            if member.quic.ip().is_unspecified() {
                member.quic.set_ip(peer.ip());
            }
            if me.quic.ip().is_unspecified() {
                me.quic.set_ip(local.ip());
            }
        }
        joined[rank] = Some((member, s));
        missing -= 1;
    }
    let mut members = vec![me];
    let mut conns = vec![];
    for (m, s) in joined.into_iter().skip(1).flatten() {
        members.push(m);
        conns.push(s);
    }
    let table = Table {
        job: random_u64()?,
        members,
    };
    let enc = encode_table(&table);
    for s in &mut conns {
        send_msg(s, TABLE, &enc).map_err(io)?;
    }
    Ok(Session {
        table,
        conns,
        deadline,
        rank: 0,
    })
}

fn connect(cfg: &Config, me: Member, deadline: Instant) -> Result<Session, TransportError> {
    let addr = cfg
        .master
        .to_socket_addrs()
        .map_err(|e| {
            TransportError::Io(format!(
                "cannot resolve MASTER_ADDR:MASTER_PORT {}: {e}",
                cfg.master
            ))
        })?
        .next()
        .ok_or_else(|| TransportError::Io(format!("{} resolves to no address", cfg.master)))?;
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(TransportError::Timeout(format!(
                    "rank {} could not reach rank 0 at {} within {:.0} s: {e}",
                    cfg.rank,
                    cfg.master,
                    cfg.timeout.as_secs_f64()
                )));
            }
        }
    };
    let (tag, nonce) = recv_msg(&mut s, deadline)?;
    if tag != CHALLENGE {
        return Err(TransportError::Protocol(
            "rank 0 did not send a challenge".into(),
        ));
    }
    let mut hello = vec![];
    hello.extend_from_slice(&(cfg.rank as u64).to_le_bytes());
    hello.extend_from_slice(&(cfg.world as u64).to_le_bytes());
    put_bytes(&mut hello, &proof(&cfg.token, &nonce));
    me.encode(&mut hello);
    send_msg(&mut s, HELLO, &hello).map_err(io)?;
    match recv_msg(&mut s, deadline)? {
        (TABLE, body) => Ok(Session {
            table: decode_table(&body)?,
            conns: vec![s],
            deadline,
            rank: cfg.rank,
        }),
        (REJECT, why) => Err(TransportError::Refused(
            String::from_utf8_lossy(&why).into_owned(),
        )),
        _ => Err(TransportError::Protocol(
            "unexpected rendezvous reply".into(),
        )),
    }
}

impl Session {
    /// The barrier round: returns once every rank has called it.
    ///
    /// # Errors
    /// `Timeout`, `Refused`, `Io`.
    pub fn barrier(&mut self) -> Result<(), TransportError> {
        if self.rank == 0 {
            for s in &mut self.conns {
                match recv_msg(s, self.deadline)? {
                    (READY, _) => {}
                    _ => return Err(TransportError::Protocol("expected READY".into())),
                }
            }
            for s in &mut self.conns {
                send_msg(s, GO, &[]).map_err(io)?;
            }
            Ok(())
        } else {
            let s = self
                .conns
                .first_mut()
                .ok_or_else(|| TransportError::Protocol("no rendezvous connection".into()))?;
            send_msg(s, READY, &[]).map_err(io)?;
            match recv_msg(s, self.deadline)? {
                (GO, _) => Ok(()),
                (REJECT, why) => Err(TransportError::Refused(
                    String::from_utf8_lossy(&why).into_owned(),
                )),
                _ => Err(TransportError::Protocol("expected GO".into())),
            }
        }
    }
}

impl Session {
    /// Keeps the rendezvous connections open for the job's life as its control channel
    /// ([`Control`]): call after the barrier.
    pub fn into_control(self) -> Control {
        Control::start(self.rank, self.table.members, self.conns)
    }
}

/// This process's host identity: hostname, boot id and network namespace. Processes with equal
/// identities can share memory; network namespaces count as separate hosts.
pub fn host_identity() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut hostname = read("/proc/sys/kernel/hostname");
    if hostname.is_empty() {
        hostname = system_host_name();
    }
    format!(
        "{}/{}/{}",
        hostname,
        read("/proc/sys/kernel/random/boot_id"),
        netns
    )
}

/// The system's host name where there is no /proc (macOS and other Unixes).
#[cfg(unix)]
fn system_host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The computer's name (Windows).
#[cfg(not(unix))]
fn system_host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}
