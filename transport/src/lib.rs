//! gflow's transport: makes one process per rank a world. `connect` runs the rendezvous on
//! `MASTER_ADDR:MASTER_PORT`, links every pair of processes on one host through shared memory
//! and every other pair through QUIC (feature `quic`, on by default; without it a job must stay
//! on one host) or, with `GFLOW_TRANSPORT=tcp`, TLS over TCP (feature `tcp`, on by default;
//! `tcp-all` links every pair over TCP, also within a host), and returns a [`NetComm`], core's
//! `Communicator` over those links.

pub mod arena;
pub mod comm;
pub mod control;
pub mod frame;
#[cfg(feature = "tcp")]
mod handshake;
pub mod link;
#[cfg(feature = "quic")]
pub mod quic;
#[cfg(feature = "tcp")]
mod records;
pub mod rendezvous;
pub mod shm;
#[cfg(feature = "quic")]
pub mod stripe;
#[cfg(feature = "tcp")]
pub mod tcp;
#[cfg(any(feature = "quic", feature = "tcp"))]
mod tls;

#[cfg(any(feature = "quic", feature = "tcp"))]
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;
#[cfg(any(feature = "quic", feature = "tcp"))]
use std::time::Instant;

pub use comm::NetComm;
use link::{LinkPair, Liveness};
#[cfg(feature = "quic")]
use quic::{Peer, QuicNode};
use rendezvous::Config;
use shm::{Ring, ShmRx, ShmTx};

/// Failures of starting the transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Rank 0 refused this process, or the job could not form; says why.
    #[error("rendezvous refused: {0}")]
    Refused(String),
    /// A deadline passed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A malformed message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An I/O failure.
    #[error("I/O error: {0}")]
    Io(String),
    /// The requested link kind is not available between these ranks.
    #[error("{0}")]
    Unsupported(String),
}

/// Settings of [`connect`], usually from the environment.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The rendezvous settings.
    pub rendezvous: Config,
    /// Deadline of every blocking receive.
    pub timeout: Duration,
    /// Largest accepted frame.
    pub max_frame: u64,
    /// The links `GFLOW_TRANSPORT` asks for.
    pub transport: Forced,
}

/// The links `GFLOW_TRANSPORT` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Unset, empty or `shm`: shared memory within a host, QUIC between hosts.
    Auto,
    /// `quic`: QUIC between every pair of ranks, also within a host.
    Quic,
    /// `tcp`: shared memory within a host, TLS over TCP between hosts (for networks that block
    /// UDP).
    Tcp,
    /// `tcp-all`: TLS over TCP between every pair of ranks, also within a host.
    TcpAll,
}

impl Forced {
    /// Reads a `GFLOW_TRANSPORT` value.
    ///
    /// ```
    /// use gflow_transport::Forced;
    /// assert_eq!(Forced::parse(Some("tcp")).unwrap(), Forced::Tcp);
    /// assert_eq!(Forced::parse(Some("tcp-all")).unwrap(), Forced::TcpAll);
    /// assert_eq!(Forced::parse(None).unwrap(), Forced::Auto);
    /// assert!(Forced::parse(Some("udp")).unwrap_err().to_string().contains("quic, tcp"));
    /// ```
    ///
    /// # Errors
    /// `Unsupported` for any other value, naming the accepted ones.
    pub fn parse(value: Option<&str>) -> Result<Forced, TransportError> {
        match value.map(str::trim) {
            None | Some("" | "shm") => Ok(Forced::Auto),
            Some("quic") => Ok(Forced::Quic),
            Some("tcp") => Ok(Forced::Tcp),
            Some("tcp-all") => Ok(Forced::TcpAll),
            Some(other) => Err(TransportError::Unsupported(format!(
                "GFLOW_TRANSPORT={other:?} is not a transport: expected quic, tcp (shared \
                 memory within a host, TCP between hosts), tcp-all, or shm or unset (the \
                 default: shared memory within a host, QUIC between hosts)"
            ))),
        }
    }

    /// The value that asks for these links.
    pub fn name(self) -> &'static str {
        match self {
            Forced::Auto => "shm",
            Forced::Quic => "quic",
            Forced::Tcp => "tcp",
            Forced::TcpAll => "tcp-all",
        }
    }

    /// Its number in the rendezvous.
    pub(crate) fn code(self) -> u64 {
        match self {
            Forced::Auto => 0,
            Forced::Quic => 1,
            Forced::Tcp => 2,
            Forced::TcpAll => 3,
        }
    }

    /// [`Forced::code`] read back.
    pub(crate) fn from_code(c: u64) -> Option<Forced> {
        [Forced::Auto, Forced::Quic, Forced::Tcp, Forced::TcpAll]
            .into_iter()
            .find(|f| f.code() == c)
    }

    /// Links between every pair of ranks, also within a host (no shared memory).
    fn everywhere(self) -> bool {
        matches!(self, Forced::Quic | Forced::TcpAll)
    }

    /// TLS over TCP instead of QUIC.
    fn by_tcp(self) -> bool {
        matches!(self, Forced::Tcp | Forced::TcpAll)
    }
}

/// The links the job uses: what its ranks asked for, or a refusal naming the ranks that asked
/// for different ones.
fn agreed(members: &[rendezvous::Member]) -> Result<Forced, TransportError> {
    let mut asked: Vec<(Forced, Vec<usize>)> = vec![];
    for (rank, m) in members.iter().enumerate() {
        if m.transport == Forced::Auto {
            continue;
        }
        match asked.iter_mut().find(|(f, _)| *f == m.transport) {
            Some((_, ranks)) => ranks.push(rank),
            None => asked.push((m.transport, vec![rank])),
        }
    }
    match asked.as_slice() {
        [] => Ok(Forced::Auto),
        [(one, _)] => Ok(*one),
        many => Err(TransportError::Refused(format!(
            "{}: give every rank the same",
            many.iter()
                .map(|(f, ranks)| format!("ranks {ranks:?} set GFLOW_TRANSPORT={}", f.name()))
                .collect::<Vec<_>>()
                .join(" but ")
        ))),
    }
}

/// Whether the portable paths are in use: always off Linux, and on Linux under
/// `GFLOW_PORTABLE=1` (so CI tests them): no memfd arena (large blocks come from the system
/// allocator and move as bytes) and `kill(pid, 0)` liveness instead of `/proc`. Read without
/// allocating, as the allocator asks it.
pub fn portable() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    static PORTABLE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);
    match PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
        2 => {
            // SAFETY: getenv reads the environment with a NUL-terminated name; the result is
            // only read, at once.
            let on = unsafe {
                let v = libc::getenv(c"GFLOW_PORTABLE".as_ptr());
                !v.is_null() && std::ffi::CStr::from_ptr(v).to_bytes() == b"1"
            };
            PORTABLE.store(u8::from(on), std::sync::atomic::Ordering::Relaxed);
            on
        }
        v => v == 1,
    }
}

fn ring_path(job: u64, from: usize, to: usize) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("gflow-{job:016x}-{from}-{to}"))
}

#[cfg(any(feature = "quic", feature = "tcp"))]
/// The wildcard address of the family `MASTER_ADDR` resolves to: the QUIC endpoint listens on
/// every interface of that family, and rank 0 tells each peer which address reached it.
fn wildcard_for(master: &str) -> IpAddr {
    let v6 = master
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| a.is_ipv6());
    if v6 {
        IpAddr::from([0u16; 8])
    } else {
        IpAddr::from([0u8; 4])
    }
}

/// Whether `ranks` processes on this host outnumber its CPUs: `GFLOW_OVERSUBSCRIBED=1|0` as the
/// launcher sets it (it counts the CPUs it may use), else against the online CPUs.
fn oversubscribed(ranks: usize) -> bool {
    match std::env::var("GFLOW_OVERSUBSCRIBED").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => ranks > online_cpus(),
    }
}

/// The host's online CPUs (not this process's affinity share: a pinned rank still shares the
/// host with the others).
#[cfg(unix)]
fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1)
}

/// The host's CPUs.
#[cfg(not(unix))]
fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The refusal of a link this build cannot make: `why` it was needed.
#[cfg(not(feature = "quic"))]
fn no_quic(why: &str) -> TransportError {
    TransportError::Unsupported(format!(
        "{why}, and this build of gflow has no QUIC (its `quic` feature is off): run every \
         rank on one host, or build with the `quic` feature"
    ))
}

/// The refusal of TCP links in a build without them.
#[cfg(not(feature = "tcp"))]
fn no_tcp(asked: Forced) -> TransportError {
    TransportError::Unsupported(format!(
        "GFLOW_TRANSPORT={} asks for TCP links, and this build of gflow has none (its `tcp` \
         feature is off): build with the `tcp` feature",
        asked.name()
    ))
}

/// How long QUIC or TCP links may take to come up after the rendezvous: a handshake takes
/// milliseconds, so this only bounds how soon a job whose network blocks them fails (on every
/// rank, well within 15 s of the start).
#[cfg(any(feature = "quic", feature = "tcp"))]
const LINK_TIMEOUT: Duration = Duration::from_secs(10);

/// A member's host for error messages: its host name and the address rank 0 saw it at.
#[cfg(any(feature = "quic", feature = "tcp"))]
fn host_of(m: &rendezvous::Member) -> String {
    let name = m.host.split('/').next().unwrap_or_default();
    format!("{name:?} ({})", m.quic.ip())
}

/// The hosts of `ranks`, each once, for error messages.
#[cfg(any(feature = "quic", feature = "tcp"))]
fn hosts_of(members: &[rendezvous::Member], ranks: &[usize]) -> String {
    let mut hosts: Vec<String> = ranks.iter().map(|&r| host_of(&members[r])).collect();
    hosts.dedup();
    hosts.join(", ")
}

/// The error of QUIC links that could not be set up: names this rank's host and the peers',
/// says UDP may be blocked between them, and names the TCP fallback.
#[cfg(feature = "quic")]
fn quic_unreachable(
    me: usize,
    members: &[rendezvous::Member],
    peers: &[Peer],
    e: TransportError,
) -> TransportError {
    let ranks: Vec<usize> = peers.iter().map(|p| p.rank).collect();
    let why = format!(
        "rank {me} on host {} could not link over QUIC to ranks {ranks:?} on host {} ({e}): \
         UDP may be blocked between these hosts (QUIC runs over UDP); set GFLOW_TRANSPORT=tcp \
         on every rank to link them over TCP instead",
        host_of(&members[me]),
        hosts_of(members, &ranks),
    );
    match e {
        TransportError::Timeout(_) => TransportError::Timeout(why),
        _ => TransportError::Io(why),
    }
}

/// The error of TCP links that could not be set up: names this rank's host and listener, the
/// peers' hosts and listeners, and says a firewall may block TCP between them.
#[cfg(feature = "tcp")]
fn tcp_unreachable(
    me: usize,
    members: &[rendezvous::Member],
    peers: &[tcp::Peer],
    e: TransportError,
) -> TransportError {
    let ranks: Vec<usize> = peers.iter().map(|p| p.rank).collect();
    let addrs: Vec<String> = peers.iter().map(|p| p.addr.to_string()).collect();
    let mine = std::net::SocketAddr::new(members[me].quic.ip(), members[me].tcp_port);
    let why = format!(
        "rank {me} on host {} (TCP listener at {mine}) could not link over TCP to ranks \
         {ranks:?} on host {} (TCP listeners at {}) within {} s ({e}): a firewall may block TCP \
         between these hosts on the listeners' ports",
        host_of(&members[me]),
        hosts_of(members, &ranks),
        addrs.join(", "),
        LINK_TIMEOUT.as_secs(),
    );
    match e {
        TransportError::Timeout(_) => TransportError::Timeout(why),
        _ => TransportError::Io(why),
    }
}

/// Joins the job and links this process to every other rank: shared memory to the ranks of
/// this host, QUIC to the others. `GFLOW_TRANSPORT` on any rank changes that: `quic`, QUIC to
/// every rank; `tcp`, TLS over TCP instead of QUIC between hosts (shared memory within one);
/// `tcp-all`, TLS over TCP to every rank. Ranks asking for different ones are refused on every
/// rank.
///
/// # Errors
/// Rendezvous failures (wrong token, world size, duplicate or late rank), or a link that cannot
/// be set up in time (10 s after the rendezvous for QUIC and TCP links).
pub fn connect(s: &Settings) -> Result<NetComm, TransportError> {
    let cfg = &s.rendezvous;
    #[cfg(not(feature = "tcp"))]
    if s.transport.by_tcp() {
        return Err(no_tcp(s.transport));
    }
    #[cfg(feature = "tcp")]
    let tcp_node = tcp::TcpNode::bind(wildcard_for(&cfg.master))?;
    #[cfg(feature = "tcp")]
    let (tcp_port, tcp_cert) = (tcp_node.port()?, tcp_node.fingerprint());
    #[cfg(not(feature = "tcp"))]
    let (tcp_port, tcp_cert) = (0, [0; 32]);
    #[cfg(feature = "quic")]
    let node = QuicNode::bind(wildcard_for(&cfg.master))?;
    #[cfg(feature = "quic")]
    let (quic_port, cert) = (node.port()?, node.fingerprint());
    #[cfg(not(feature = "quic"))]
    let (quic_port, cert) = if s.transport == Forced::Quic {
        return Err(no_quic("GFLOW_TRANSPORT=quic asks for QUIC links"));
    } else {
        (0, [0; 32])
    };
    let offer = rendezvous::Offer {
        quic_port,
        cert,
        transport: s.transport,
        shared_arena: arena::installed() && comm::refs_enabled(),
        tcp_port,
        tcp_cert,
    };
    let mut session = rendezvous::join(cfg, &offer)?;
    let table = session.table.clone();
    let me = cfg.rank;
    let members = &table.members;
    let transport = agreed(members)?;
    let (by_tcp, everywhere) = (transport.by_tcp(), transport.everywhere());
    // Links over the network (QUIC, or TCP with `by_tcp`).
    let by_net = |peer: usize| everywhere || members[peer].host != members[me].host;
    #[cfg(not(feature = "tcp"))]
    if by_tcp {
        return Err(no_tcp(transport));
    }
    #[cfg(feature = "tcp")]
    let tcp_peers: Vec<tcp::Peer> = (0..cfg.world)
        .filter(|&p| by_tcp && p != me && by_net(p))
        .map(|p| tcp::Peer {
            rank: p,
            addr: std::net::SocketAddr::new(members[p].quic.ip(), members[p].tcp_port),
            fingerprint: members[p].tcp_cert,
        })
        .collect();
    #[cfg(not(feature = "quic"))]
    if let Some(p) = (0..cfg.world).find(|&p| p != me && by_net(p) && !by_tcp) {
        return Err(no_quic(&format!(
            "rank {p} runs on host {:?}, not on this rank's ({me}) host {:?}",
            members[p].host, members[me].host
        )));
    }
    #[cfg(feature = "quic")]
    let quic_peers: Vec<Peer> = (0..cfg.world)
        .filter(|&p| p != me && by_net(p) && !by_tcp)
        .map(|p| Peer {
            rank: p,
            addr: members[p].quic,
            fingerprint: members[p].cert,
        })
        .collect();
    let here = members
        .iter()
        .filter(|m| m.host == members[me].host)
        .count();
    link::set_spinning(!oversubscribed(here));
    let mut outgoing: Vec<Option<Ring>> = Vec::with_capacity(cfg.world);
    for peer in 0..cfg.world {
        outgoing.push(if peer == me || by_net(peer) {
            None
        } else {
            Some(
                Ring::create(&ring_path(table.job, me, peer))
                    .map_err(|e| TransportError::Io(format!("shared memory: {e}")))?,
            )
        });
    }
    #[cfg(feature = "quic")]
    {
        let dialing_me: Vec<Peer> = quic_peers.iter().filter(|p| p.rank > me).cloned().collect();
        node.serve(&dialing_me)?;
    }
    session.barrier()?;
    let mut links: Vec<Option<LinkPair>> = Vec::with_capacity(cfg.world);
    for (peer, out) in outgoing.into_iter().enumerate() {
        links.push(match out {
            None => None,
            Some(out) => {
                let inc = Ring::open(&ring_path(table.job, peer, me))
                    .map_err(|e| TransportError::Io(format!("shared memory: {e}")))?;
                let alive = Liveness::process(members[peer].pid);
                Some((
                    Box::new(ShmTx::new(out, alive.clone())),
                    Box::new(ShmRx::new(inc, alive)),
                ))
            }
        });
    }
    #[cfg(feature = "quic")]
    if !quic_peers.is_empty() {
        let deadline = Instant::now() + cfg.timeout.min(LINK_TIMEOUT);
        let pairs = node
            .link_all(me, table.job, &quic_peers, quic::stripes(here), deadline)
            .map_err(|e| quic_unreachable(me, members, &quic_peers, e))?;
        for (peer, pair) in pairs {
            links[peer] = Some(pair);
        }
    }
    #[cfg(feature = "tcp")]
    if !tcp_peers.is_empty() {
        let deadline = Instant::now() + cfg.timeout.min(LINK_TIMEOUT);
        let pairs = tcp_node
            .link_all(me, table.job, &tcp_peers, deadline)
            .map_err(|e| tcp_unreachable(me, members, &tcp_peers, e))?;
        for (peer, pair) in pairs {
            links[peer] = Some(pair);
        }
    }
    let one_copy = !everywhere
        && members
            .iter()
            .all(|m| m.shared_arena && m.host == members[me].host);
    if tracing::enabled!(tracing::Level::INFO) {
        let shm: Vec<usize> = (0..cfg.world).filter(|&p| p != me && !by_net(p)).collect();
        let net: Vec<usize> = (0..cfg.world).filter(|&p| p != me && by_net(p)).collect();
        let (quic, tcp) = if by_tcp { (vec![], net) } else { (net, vec![]) };
        tracing::info!(
            rank = me,
            host = %members[me].host,
            ?shm,
            ?quic,
            ?tcp,
            one_copy,
            "links (shared memory, QUIC, TCP) to the other ranks"
        );
    }
    let hosts = members
        .iter()
        .map(|m| members.iter().position(|o| o.host == m.host).unwrap_or(0))
        .collect();
    Ok(NetComm::new(me, links, s.timeout, s.max_frame)
        .with_one_copy(one_copy)
        .with_hosts(hosts)
        .with_control(session.into_control()))
}

/// A build without QUIC links the ranks of one host, and refuses, clearly and on every rank, a
/// job whose ranks are on two hosts (`cargo test -p gflow-transport --no-default-features`).
#[cfg(all(test, not(feature = "quic")))]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod without_quic {
    use super::*;

    fn world_of_two(hosts: [&str; 2]) -> Vec<Result<NetComm, TransportError>> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|rank| {
                    let settings = Settings {
                        rendezvous: Config {
                            master: format!("127.0.0.1:{port}"),
                            world: 2,
                            rank,
                            token: b"t".to_vec(),
                            timeout: Duration::from_secs(10),
                            host: hosts[rank].to_string(),
                        },
                        timeout: Duration::from_secs(10),
                        max_frame: 1 << 20,
                        transport: Forced::Auto,
                    };
                    s.spawn(move || connect(&settings))
                })
                .collect();
            ranks.into_iter().map(|r| r.join().unwrap()).collect()
        })
    }

    #[test]
    fn one_host_links_and_two_hosts_are_refused_by_name() {
        for r in world_of_two(["a", "a"]) {
            assert!(r.is_ok(), "{:?}", r.err());
        }
        for (rank, r) in world_of_two(["a", "b"]).into_iter().enumerate() {
            let err = r
                .err()
                .expect("two hosts without QUIC must fail")
                .to_string();
            assert!(
                err.contains("no QUIC") && err.contains(&format!("rank {}", 1 - rank)),
                "{err}"
            );
        }
    }
}
