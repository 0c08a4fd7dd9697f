//! gflow's transport: makes one process per rank a world. `connect` runs the rendezvous on
//! `MASTER_ADDR:MASTER_PORT`, links every pair of processes on one host through shared memory
//! and every other pair through QUIC (feature `quic`, on by default; without it a job must stay
//! on one host) or, with `GFLOW_TRANSPORT=tcp`, TLS over TCP (feature `tcp`, on by default), and
//! returns a [`NetComm`], core's `Communicator` over those links.

pub mod arena;
pub mod comm;
pub mod control;
pub mod frame;
pub mod link;
#[cfg(feature = "quic")]
pub mod quic;
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
    /// `GFLOW_TRANSPORT=quic`: QUIC everywhere.
    pub force_quic: bool,
    /// `GFLOW_TRANSPORT=tcp`: TLS over TCP everywhere.
    pub force_tcp: bool,
}

/// The links `GFLOW_TRANSPORT` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Unset, empty or `shm`: shared memory within a host, QUIC between hosts.
    Auto,
    /// `quic`: QUIC between every pair of ranks, also within a host.
    Quic,
    /// `tcp`: TLS over TCP between every pair of ranks, also within a host (for networks that
    /// block UDP).
    Tcp,
}

impl Forced {
    /// Reads a `GFLOW_TRANSPORT` value.
    ///
    /// ```
    /// use gflow_transport::Forced;
    /// assert_eq!(Forced::parse(Some("tcp")).unwrap(), Forced::Tcp);
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
            Some(other) => Err(TransportError::Unsupported(format!(
                "GFLOW_TRANSPORT={other:?} is not a transport: expected quic, tcp, or shm or \
                 unset (the default: shared memory within a host, QUIC between hosts)"
            ))),
        }
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
fn no_tcp() -> TransportError {
    TransportError::Unsupported(
        "GFLOW_TRANSPORT=tcp asks for TCP links, and this build of gflow has none (its `tcp` \
         feature is off): build with the `tcp` feature"
            .into(),
    )
}

/// How long QUIC links may take to come up after the rendezvous: a handshake takes
/// milliseconds, so this only bounds how soon a job whose UDP is blocked fails (on every rank,
/// well within 15 s of the start).
#[cfg(feature = "quic")]
const QUIC_LINK_TIMEOUT: Duration = Duration::from_secs(10);

/// A member's host for error messages: its host name and the address rank 0 saw it at.
#[cfg(feature = "quic")]
fn host_of(m: &rendezvous::Member) -> String {
    let name = m.host.split('/').next().unwrap_or_default();
    format!("{name:?} ({})", m.quic.ip())
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
    let mut hosts: Vec<String> = peers.iter().map(|p| host_of(&members[p.rank])).collect();
    hosts.dedup();
    let ranks: Vec<usize> = peers.iter().map(|p| p.rank).collect();
    let why = format!(
        "rank {me} on host {} could not link over QUIC to ranks {ranks:?} on host {} ({e}): \
         UDP may be blocked between these hosts (QUIC runs over UDP); set GFLOW_TRANSPORT=tcp \
         on every rank to link them over TCP instead",
        host_of(&members[me]),
        hosts.join(", "),
    );
    match e {
        TransportError::Timeout(_) => TransportError::Timeout(why),
        _ => TransportError::Io(why),
    }
}

/// Joins the job and links this process to every other rank: shared memory to the ranks of
/// this host, QUIC to the others (to all with `GFLOW_TRANSPORT=quic` on any rank; TLS over TCP
/// instead of QUIC with `GFLOW_TRANSPORT=tcp`, to all ranks as `quic` does; ranks asking for
/// both are refused on every rank).
///
/// # Errors
/// Rendezvous failures (wrong token, world size, duplicate or late rank), or a link that cannot
/// be set up in time.
pub fn connect(s: &Settings) -> Result<NetComm, TransportError> {
    let cfg = &s.rendezvous;
    #[cfg(not(feature = "tcp"))]
    if s.force_tcp {
        return Err(no_tcp());
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
    let (quic_port, cert) = if s.force_quic {
        return Err(no_quic("GFLOW_TRANSPORT=quic asks for QUIC links"));
    } else {
        (0, [0; 32])
    };
    let offer = rendezvous::Offer {
        quic_port,
        cert,
        force_quic: s.force_quic,
        shared_arena: arena::installed() && comm::refs_enabled(),
        tcp_port,
        tcp_cert,
        force_tcp: s.force_tcp,
    };
    let mut session = rendezvous::join(cfg, &offer)?;
    let table = session.table.clone();
    let me = cfg.rank;
    let members = &table.members;
    let asking = |f: fn(&rendezvous::Member) -> bool| -> Vec<usize> {
        (0..cfg.world).filter(|&r| f(&members[r])).collect()
    };
    let (ask_quic, ask_tcp) = (asking(|m| m.force_quic), asking(|m| m.force_tcp));
    if !ask_quic.is_empty() && !ask_tcp.is_empty() {
        return Err(TransportError::Refused(format!(
            "ranks {ask_quic:?} set GFLOW_TRANSPORT=quic but ranks {ask_tcp:?} set \
             GFLOW_TRANSPORT=tcp: give every rank the same"
        )));
    }
    let by_tcp = !ask_tcp.is_empty();
    let everywhere = !ask_quic.is_empty() || by_tcp;
    // Links over the network (QUIC, or TCP with `by_tcp`).
    let by_quic = |peer: usize| everywhere || members[peer].host != members[me].host;
    #[cfg(not(feature = "tcp"))]
    if by_tcp {
        return Err(no_tcp());
    }
    #[cfg(feature = "tcp")]
    let tcp_peers: Vec<tcp::Peer> = (0..cfg.world)
        .filter(|&p| by_tcp && p != me)
        .map(|p| tcp::Peer {
            rank: p,
            addr: std::net::SocketAddr::new(members[p].quic.ip(), members[p].tcp_port),
            fingerprint: members[p].tcp_cert,
        })
        .collect();
    #[cfg(not(feature = "quic"))]
    if let Some(p) = (0..cfg.world).find(|&p| p != me && by_quic(p) && !by_tcp) {
        return Err(no_quic(&format!(
            "rank {p} runs on host {:?}, not on this rank's ({me}) host {:?}",
            members[p].host, members[me].host
        )));
    }
    #[cfg(feature = "quic")]
    let quic_peers: Vec<Peer> = (0..cfg.world)
        .filter(|&p| p != me && by_quic(p) && !by_tcp)
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
        outgoing.push(if peer == me || by_quic(peer) {
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
        let deadline = Instant::now() + cfg.timeout.min(QUIC_LINK_TIMEOUT);
        let pairs = node
            .link_all(me, table.job, &quic_peers, quic::stripes(here), deadline)
            .map_err(|e| quic_unreachable(me, members, &quic_peers, e))?;
        for (peer, pair) in pairs {
            links[peer] = Some(pair);
        }
    }
    #[cfg(feature = "tcp")]
    if !tcp_peers.is_empty() {
        let deadline = Instant::now() + cfg.timeout;
        for (peer, pair) in tcp_node.link_all(me, table.job, &tcp_peers, deadline)? {
            links[peer] = Some(pair);
        }
    }
    let one_copy = !everywhere
        && members
            .iter()
            .all(|m| m.shared_arena && m.host == members[me].host);
    if tracing::enabled!(tracing::Level::INFO) {
        let shm: Vec<usize> = (0..cfg.world).filter(|&p| p != me && !by_quic(p)).collect();
        let net: Vec<usize> = (0..cfg.world).filter(|&p| p != me && by_quic(p)).collect();
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
                        force_quic: false,
                        force_tcp: false,
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
