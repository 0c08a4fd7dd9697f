//! QUIC links between hosts (quinn + rustls, TLS 1.3 only, AES-128-GCM).
//!
//! Every process generates a self-signed certificate and reports its SHA-256 fingerprint in the
//! rendezvous, which only processes holding the job token pass. Links then use mutual TLS with
//! *pinned* fingerprints: a client accepts only the certificate of the rank it dials, a server only
//! the certificates of the job's ranks. A process without the token is not in the table, so it
//! fails the handshake and receives no byte of the job's data.
//!
//! One tokio current-thread runtime per process drives every connection on its own thread
//! (`../shared/notes/quic-on-loopback.md`: 25-50 % faster than the multi-thread runtime on two
//! cores). The blocking [`LinkTx`]/[`LinkRx`] halves enter it with `Handle::block_on`, so a
//! received chunk is handed to the caller as quinn's own buffer, with no copy.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tokio::runtime::Handle;

use crate::TransportError;
use crate::link::{LinkError, LinkPair, LinkRx, LinkTx};
use crate::stripe::{BLOCK, PartTx, StripedRx, StripedTx};
pub use crate::tls::Fingerprint;
use crate::tls::{SERVER_NAME, fingerprint, pinned_client, pinned_server, tls_error};

const ALPN: &[u8] = b"gflow/1";
/// A connection with no packet for this long is lost: a killed peer is an error this soon.
const IDLE_TIMEOUT: Duration = Duration::from_secs(6);
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The most bytes one `sendmsg` with segmentation offload (GSO) may carry: quinn batches up to
/// 10 datagrams in one, and a batch over 64 KiB is EMSGSIZE, dropped silently (black-hole
/// detection then falls back to 1200 bytes), so [`GsoSplit`] cuts larger batches.
const GSO_MAX_BYTES: usize = 65000;

/// quinn's UDP socket, whose batches for segmentation offload are cut to [`GSO_MAX_BYTES`]
/// each: datagrams may then be as large as the path carries (8972 bytes on a 9000-byte link)
/// and still go 7 to a system call, where 6500-byte ones had to be the most that 10 to a call
/// allowed (fewer, larger packets: less of quinn's per-packet work).
#[derive(Debug)]
struct GsoSplit(Arc<dyn quinn::AsyncUdpSocket>);

impl quinn::AsyncUdpSocket for GsoSplit {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.0.clone().create_io_poller()
    }

    /// Sends a batch over [`GSO_MAX_BYTES`] as several; a later part that would block fails
    /// the whole (quinn sends it again, and the peer drops the duplicates of the parts sent).
    fn try_send(&self, t: &quinn::udp::Transmit<'_>) -> std::io::Result<()> {
        match t.segment_size {
            Some(seg) if seg > 0 && t.contents.len() > GSO_MAX_BYTES => {
                for part in t.contents.chunks((GSO_MAX_BYTES / seg).max(1) * seg) {
                    self.0.try_send(&quinn::udp::Transmit {
                        contents: part,
                        segment_size: (part.len() > seg).then_some(seg),
                        ..t.clone()
                    })?;
                }
                Ok(())
            }
            _ => self.0.try_send(t),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.0.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.0.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

/// The largest UDP payload the path to `peer` may carry, as far as this host knows: its route's
/// interface MTU less the IP and UDP headers (Linux reports it on a connected socket; 8972 on a
/// 9000-byte jumbo-frame link, 1472 on Ethernet). `None` where the system does not say.
fn path_payload(peer: SocketAddr) -> Option<u16> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let local = SocketAddr::new(
            if peer.is_ipv4() {
                IpAddr::from([0u8; 4])
            } else {
                IpAddr::from([0u16; 8])
            },
            0,
        );
        let sock = UdpSocket::bind(local).ok()?;
        sock.connect(peer).ok()?;
        let (level, name, headers) = if peer.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_MTU, 28)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_MTU, 48)
        };
        let mut mtu: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `mtu`, an int of that size, on a
        // socket this function owns.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                level,
                name,
                (&raw mut mtu).cast(),
                &raw mut len,
            )
        };
        (rc == 0)
            .then(|| u16::try_from((mtu - headers).clamp(1200, 65527)).ok())
            .flatten()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = peer;
        None
    }
}

/// quinn's transport settings for links whose largest UDP payload is `payload` (`None`:
/// unknown, quinn's defaults). Windows, congestion window and timeouts always. On loopback the
/// large MTU from the first packet, without segmentation offload. Elsewhere datagrams start at
/// quinn's safe 1200 bytes and MTU discovery probes up to `payload` (quinn's default stops at
/// 1452, which binds a jumbo-frame link by packet rate), with segmentation offload (GSO, GRO:
/// several datagrams to a system call, [`GsoSplit`]).
fn transport_config(loopback: bool, payload: Option<u16>) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20))
        .receive_window(quinn::VarInt::from_u32(64 << 20))
        .send_window(32 << 20)
        .keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(1 << 20);
    t.congestion_controller_factory(Arc::new(cubic));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    if loopback {
        mtu.upper_bound(65527);
        t.initial_mtu(16000)
            .min_mtu(16000)
            .mtu_discovery_config(Some(mtu))
            .enable_segmentation_offload(false);
    } else if let Some(bound) = payload {
        // Segmentation offload wins over larger datagrams without it: on a 9000-byte link,
        // 6500-byte datagrams with GSO moved a 16 MiB message at 0.9-1.4 GB/s, 8972-byte ones
        // without it at 0.52 (benches/MEASURED.md); with it, 8972-byte ones do better still.
        mtu.upper_bound(bound);
        t.mtu_discovery_config(Some(mtu))
            .enable_segmentation_offload(true);
    }
    Arc::new(t)
}

/// The runtime thread that drives every connection of the process, and the endpoint.
struct Driver {
    rt: Handle,
    endpoint: quinn::Endpoint,
    stop: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Driver {
    /// Runs `f` to completion on the runtime, giving up at `deadline`.
    fn wait<T>(
        &self,
        deadline: Instant,
        f: impl Future<Output = T>,
    ) -> Result<T, tokio::time::error::Elapsed> {
        self.rt.block_on(async {
            tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), f).await
        })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.endpoint.close(quinn::VarInt::from_u32(0), b"done");
        if let Some(s) = self.stop.lock().ok().and_then(|mut s| s.take()) {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

/// One process's QUIC endpoint, its certificate, and the runtime that drives it.
///
/// The socket is bound at once (its port goes into the rendezvous), the runtime thread and
/// quinn's endpoint only when this process has QUIC links to make: quinn's endpoint holds a
/// receive buffer of up to 134 MB (the largest datagram x GRO segments x batch), which a job
/// on one host, linked by shared memory, never needs.
pub struct QuicNode {
    /// The bound socket, until the driver takes it.
    socket: std::sync::Mutex<Option<UdpSocket>>,
    port: u16,
    driver: std::sync::OnceLock<Arc<Driver>>,
    /// The address the endpoints listen on (the extra endpoints of striped links too).
    ip: IpAddr,
    /// What [`serve`](Self::serve) set, for the extra endpoints.
    server: std::sync::Mutex<Option<quinn::ServerConfig>>,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

/// A peer to link to: its rank, the address it listens on and its certificate's fingerprint.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's rank.
    pub rank: usize,
    /// Its QUIC endpoint.
    pub addr: SocketAddr,
    /// Its certificate.
    pub fingerprint: Fingerprint,
}

/// A non-blocking UDP socket on `ip` (port chosen by the OS) with buffers large enough for
/// the links' bursts.
fn bind_udp(ip: IpAddr) -> Result<UdpSocket, TransportError> {
    let io = |what: &str, e: std::io::Error| TransportError::Io(format!("QUIC {what}: {e}"));
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(SocketAddr::new(ip, 0)),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| io("socket", e))?;
    // quinn sets no buffer sizes, and the 208 KiB default drops packets silently.
    let _ = sock.set_recv_buffer_size(4 << 20);
    let _ = sock.set_send_buffer_size(4 << 20);
    sock.bind(&SocketAddr::new(ip, 0).into())
        .map_err(|e| io("bind", e))?;
    sock.set_nonblocking(true).map_err(|e| io("socket", e))?;
    Ok(sock.into())
}

impl Driver {
    /// Starts a runtime thread and an endpoint on `ip` (port chosen by the OS) that it drives.
    fn start(ip: IpAddr) -> Result<Driver, TransportError> {
        Driver::start_on(bind_udp(ip)?)
    }

    /// Starts a runtime thread and an endpoint on the bound socket `udp` that it drives.
    fn start_on(udp: UdpSocket) -> Result<Driver, TransportError> {
        let io = |what: &str, e: std::io::Error| TransportError::Io(format!("QUIC {what}: {e}"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| io("runtime", e))?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gflow-quic".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| io("runtime thread", e))?;
        let mut ecfg = quinn::EndpointConfig::default();
        ecfg.max_udp_payload_size(65527)
            .map_err(|e| TransportError::Io(format!("QUIC endpoint: {e}")))?;
        let endpoint = {
            let _ctx = handle.enter();
            let runtime = Arc::new(quinn::TokioRuntime);
            let socket =
                quinn::Runtime::wrap_udp_socket(&*runtime, udp).map_err(|e| io("socket", e))?;
            quinn::Endpoint::new_with_abstract_socket(
                ecfg,
                None,
                Arc::new(GsoSplit(socket)),
                runtime,
            )
            .map_err(|e| io("endpoint", e))?
        };
        Ok(Driver {
            rt: handle,
            endpoint,
            stop: std::sync::Mutex::new(Some(stop)),
            thread: std::sync::Mutex::new(Some(thread)),
        })
    }

    fn port(&self) -> Result<u16, TransportError> {
        self.endpoint
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| TransportError::Io(format!("QUIC endpoint: {e}")))
    }
}

impl QuicNode {
    /// Binds a UDP socket on `ip` (port chosen by the OS), with a fresh self-signed
    /// certificate; the endpoint on it starts with the first links ([`serve`](Self::serve)
    /// with clients, or [`link_all`](Self::link_all)).
    ///
    /// # Errors
    /// `Io` when the socket or the certificate cannot be made.
    pub fn bind(ip: IpAddr) -> Result<QuicNode, TransportError> {
        let (cert, key) = crate::tls::self_signed()?;
        let udp = bind_udp(ip)?;
        let port = udp
            .local_addr()
            .map_err(|e| TransportError::Io(format!("QUIC endpoint: {e}")))?
            .port();
        Ok(QuicNode {
            socket: std::sync::Mutex::new(Some(udp)),
            port,
            driver: std::sync::OnceLock::new(),
            ip,
            server: std::sync::Mutex::new(None),
            cert,
            key,
        })
    }

    /// The port the endpoint listens on.
    ///
    /// # Errors
    /// None since the socket is bound in [`bind`](Self::bind); kept fallible for callers.
    pub fn port(&self) -> Result<u16, TransportError> {
        Ok(self.port)
    }

    /// The driver of the bound socket, started on first use (with the server configuration
    /// [`serve`](Self::serve) set, if any).
    fn driver(&self) -> Result<&Arc<Driver>, TransportError> {
        if let Some(d) = self.driver.get() {
            return Ok(d);
        }
        let udp = self
            .socket
            .lock()
            .ok()
            .and_then(|mut s| s.take())
            .ok_or_else(|| TransportError::Io("QUIC endpoint: the socket is gone".into()))?;
        let d = Driver::start_on(udp)?;
        if let Some(sc) = self.server.lock().ok().and_then(|s| s.clone()) {
            d.endpoint.set_server_config(Some(sc));
        }
        Ok(self.driver.get_or_init(|| Arc::new(d)))
    }

    /// This process's certificate fingerprint, reported in the rendezvous.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }

    /// The client side of links to the peer `peer` (its certificate pinned) at `addr`.
    fn client_config(
        &self,
        peer: Fingerprint,
        addr: SocketAddr,
    ) -> Result<quinn::ClientConfig, TransportError> {
        let tls = pinned_client(&self.cert, &self.key, peer, ALPN)?;
        let mut c = quinn::ClientConfig::new(Arc::new(
            QuicClientConfig::try_from(tls).map_err(tls_error)?,
        ));
        c.transport_config(transport_config(
            addr.ip().is_loopback(),
            path_payload(addr),
        ));
        Ok(c)
    }

    /// Starts accepting connections from the certificates in `clients` (and no other).
    /// Call before the rendezvous barrier, so no peer dials a node that cannot answer yet.
    ///
    /// # Errors
    /// `Io` for a TLS configuration failure.
    pub fn serve(&self, clients: &[Peer]) -> Result<(), TransportError> {
        let tls = pinned_server(
            &self.cert,
            &self.key,
            clients.iter().map(|p| p.fingerprint).collect(),
            ALPN,
        )?;
        let mut sc = quinn::ServerConfig::with_crypto(Arc::new(
            QuicServerConfig::try_from(tls).map_err(tls_error)?,
        ));
        // One setting for every client: discovery stops at each path's own limit.
        sc.transport_config(transport_config(
            clients.iter().all(|p| p.addr.ip().is_loopback()),
            clients.iter().filter_map(|p| path_payload(p.addr)).max(),
        ));
        if let Ok(mut s) = self.server.lock() {
            *s = Some(sc.clone());
        }
        // With no client to accept, the endpoint waits for this node's own dials (if any).
        if !clients.is_empty() || self.driver.get().is_some() {
            self.driver()?.endpoint.set_server_config(Some(sc));
        }
        Ok(())
    }

    /// Links this process (`me`, of job `job`) to every peer: dials the lower ranks, accepts the
    /// higher ones (which must have been passed to [`serve`](Self::serve)). A link is `k` QUIC
    /// connections, `k` the smaller of the two ends' `stripes`, each with one bidirectional
    /// stream, each on an endpoint of its own driven by a thread of its own, striped
    /// ([`crate::stripe`]) so `k` cores encrypt and decrypt. The dialer opens the first with
    /// (job, rank, its stripes) so the acceptor knows who it is; the acceptor answers once it
    /// has checked them, with `k` and the ports of its other endpoints; the dialer then opens
    /// connection `s` (1..k) from its endpoint `s` to the acceptor's, with (job, rank, s), each
    /// checked the same way. Every connection is mutual TLS with pinned certificates.
    ///
    /// # Errors
    /// `Timeout` when a peer does not link before `deadline`; `Io`/`Protocol` otherwise.
    pub fn link_all(
        &self,
        me: usize,
        job: u64,
        peers: &[Peer],
        stripes: usize,
        deadline: Instant,
    ) -> Result<Vec<(usize, LinkPair)>, TransportError> {
        let mine = stripes.clamp(1, MAX_STRIPES);
        let server = self.server.lock().ok().and_then(|s| s.clone());
        let main = self.driver()?.clone();
        let mut drivers = vec![main.clone()];
        for _ in 1..mine {
            let d = Driver::start(self.ip)?;
            if let Some(sc) = &server {
                d.endpoint.set_server_config(Some(sc.clone()));
            }
            drivers.push(Arc::new(d));
        }
        let ports = drivers[1..]
            .iter()
            .map(|d| d.port())
            .collect::<Result<Vec<u16>, _>>()?;
        let endpoints: Vec<quinn::Endpoint> = drivers.iter().map(|d| d.endpoint.clone()).collect();
        let handles: Vec<Handle> = drivers.iter().map(|d| d.rt.clone()).collect();

        let mut dials = vec![];
        for p in peers.iter().filter(|p| p.rank < me) {
            let cfg = self.client_config(p.fingerprint, p.addr)?;
            let (rank, addr) = (p.rank, p.addr);
            let (endpoints, handles) = (endpoints.clone(), handles.clone());
            dials.push(async move {
                let io = |e: &dyn std::fmt::Display| {
                    TransportError::Io(format!("QUIC link to rank {rank}: {e}"))
                };
                let (conn, tx, mut rx) = dial(
                    endpoints[0].clone(),
                    cfg.clone(),
                    addr,
                    hello(job, me, mine),
                )
                .await
                .map_err(|e| io(&e))?;
                // The acceptor's answer: it checked our certificate, job and rank (a TLS 1.3
                // client finishes its handshake before the server judges its certificate),
                // then k and its other endpoints' ports.
                let mut head = [0u8; 2];
                rx.read_exact(&mut head).await.map_err(|e| io(&e))?;
                let k = usize::from(head[1]);
                if head[0] != 1 || k == 0 || k > mine {
                    return Err(TransportError::Protocol(format!(
                        "rank {rank} answered {head:?} to a link asking for at most {mine} \
                         connections"
                    )));
                }
                let mut raw = vec![0u8; 2 * (k - 1)];
                rx.read_exact(&mut raw).await.map_err(|e| io(&e))?;
                let mut tasks = vec![];
                for (s, port) in raw
                    .chunks(2)
                    .enumerate()
                    .map(|(i, b)| (i + 1, [b[0], b[1]]))
                {
                    let at = SocketAddr::new(addr.ip(), u16::from_le_bytes(port));
                    let opened = dial(endpoints[s].clone(), cfg.clone(), at, hello(job, me, s));
                    // Spawned on the runtime of endpoint `s`: the connection's driver runs
                    // where it was made.
                    tasks.push(handles[s].spawn(async move {
                        let (conn, tx, mut rx) = opened.await?;
                        let mut ok = [0u8; 1];
                        rx.read_exact(&mut ok).await.map_err(|e| e.to_string())?;
                        Ok::<_, String>((conn, tx, rx))
                    }));
                }
                let mut subs = vec![(conn, tx, rx)];
                for t in tasks {
                    subs.push(t.await.map_err(|e| io(&e))?.map_err(|e| io(&e))?);
                }
                Ok::<_, TransportError>((rank, subs))
            });
        }
        let higher: Vec<Peer> = peers.iter().filter(|p| p.rank > me).cloned().collect();
        let accepting = async move {
            // (rank, connections in stripe order, k)
            let mut got: Vec<(usize, Vec<Conn>, usize)> = vec![];
            while got.len() < higher.len() {
                let taken: Vec<usize> = got.iter().map(|g| g.0).collect();
                let Some((rank, theirs, (conn, mut tx, rx))) =
                    accept_one(&endpoints[0], job, &higher, &taken).await?
                else {
                    continue;
                };
                let k = usize::try_from(theirs).unwrap_or(1).clamp(1, mine);
                let mut answer = vec![1, k as u8];
                answer.extend(ports[..k - 1].iter().flat_map(|p| p.to_le_bytes()));
                if tx.write_all(&answer).await.is_err() {
                    continue;
                }
                got.push((rank, vec![(conn, tx, rx)], k));
            }
            // Then connection s of every peer that asked for more than s, on endpoint s.
            let mut tasks = vec![];
            for s in 1..mine {
                let expected: Vec<Peer> = higher
                    .iter()
                    .filter(|p| got.iter().any(|g| g.0 == p.rank && g.2 > s))
                    .cloned()
                    .collect();
                if !expected.is_empty() {
                    let endpoint = endpoints[s].clone();
                    tasks.push(handles[s].spawn(accept_stripes(endpoint, job, s, expected)));
                }
            }
            for t in tasks {
                let accepted = t
                    .await
                    .map_err(|e| TransportError::Io(format!("QUIC accept task: {e}")))??;
                for (rank, c) in accepted {
                    if let Some(g) = got.iter_mut().find(|g| g.0 == rank) {
                        g.1.push(c);
                    }
                }
            }
            Ok::<_, TransportError>(got.into_iter().map(|(r, subs, _)| (r, subs)).collect())
        };
        let all = main.wait(deadline, async {
            let dialed = tokio::spawn(async move {
                let mut out = vec![];
                for d in dials {
                    out.push(d.await?);
                }
                Ok::<_, TransportError>(out)
            });
            let mut links: Vec<(usize, Vec<Conn>)> = accepting.await?;
            links.extend(
                dialed
                    .await
                    .map_err(|e| TransportError::Io(format!("QUIC dial task: {e}")))??,
            );
            Ok::<_, TransportError>(links)
        });
        let links = all.map_err(|_| {
            TransportError::Timeout(format!(
                "rank {me}: QUIC links to ranks {:?} not up in time",
                peers.iter().map(|p| p.rank).collect::<Vec<_>>()
            ))
        })??;
        Ok(links
            .into_iter()
            .map(|(rank, subs)| (rank, link_pair(subs, &drivers)))
            .collect())
    }
}

/// Most connections per link (the acceptor's answer carries the count in one byte).
const MAX_STRIPES: usize = 8;

/// One QUIC connection of a link and its stream.
type Conn = (quinn::Connection, quinn::SendStream, quinn::RecvStream);

/// Connections per peer (see [`QuicNode::link_all`]): `GFLOW_QUIC_LINKS` (1 to 8), else this
/// host's CPUs shared by its `ranks_here` processes, 1 to 4, so every core can encrypt and
/// decrypt (one connection is driven by one thread).
pub fn stripes(ranks_here: usize) -> usize {
    std::env::var("GFLOW_QUIC_LINKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or_else(
            || (crate::online_cpus() / ranks_here.max(1)).clamp(1, 4),
            |k: usize| k.clamp(1, MAX_STRIPES),
        )
}

/// The first bytes on a connection: job, rank, and a third word (the dialer's stripes on the
/// first connection of a link, the connection's index on the others).
fn hello(job: u64, rank: usize, word: usize) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[..8].copy_from_slice(&job.to_le_bytes());
    h[8..16].copy_from_slice(&(rank as u64).to_le_bytes());
    h[16..].copy_from_slice(&(word as u64).to_le_bytes());
    h
}

/// Connects `endpoint` to `addr`, opens the stream and sends `hello`.
async fn dial(
    endpoint: quinn::Endpoint,
    cfg: quinn::ClientConfig,
    addr: SocketAddr,
    hello: [u8; 24],
) -> Result<Conn, String> {
    let conn = endpoint
        .connect_with(cfg, addr, SERVER_NAME)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    let (mut tx, rx) = conn.open_bi().await.map_err(|e| e.to_string())?;
    tx.write_all(&hello).await.map_err(|e| e.to_string())?;
    Ok((conn, tx, rx))
}

/// Accepts the next connection on `endpoint` and reads its hello: `Some((rank, third word,
/// connection))` when it comes from a certificate of a rank in `expected` not yet `taken`, of
/// this job; `None` (the connection refused) otherwise. A failed handshake (a certificate
/// outside the job) is `None` too.
async fn accept_one(
    endpoint: &quinn::Endpoint,
    job: u64,
    expected: &[Peer],
    taken: &[usize],
) -> Result<Option<(usize, u64, Conn)>, TransportError> {
    let incoming = endpoint
        .accept()
        .await
        .ok_or_else(|| TransportError::Io("QUIC endpoint closed while accepting".into()))?;
    let Ok(conn) = incoming.await else {
        return Ok(None);
    };
    let Ok((tx, mut rx)) = conn.accept_bi().await else {
        return Ok(None);
    };
    let mut hello = [0u8; 24];
    if rx.read_exact(&mut hello).await.is_err() {
        return Ok(None);
    }
    let word =
        |r: std::ops::Range<usize>| u64::from_le_bytes(hello[r].try_into().unwrap_or([0xff; 8]));
    let (their_job, rank, third) = (word(0..8), word(8..16) as usize, word(16..24));
    let cert = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .and_then(|c| c.first().map(|c| fingerprint(c)));
    let genuine = expected
        .iter()
        .any(|p| p.rank == rank && Some(p.fingerprint) == cert);
    if their_job != job || !genuine || taken.contains(&rank) {
        conn.close(quinn::VarInt::from_u32(1), b"not a peer of this job");
        return Ok(None);
    }
    Ok(Some((rank, third, (conn, tx, rx))))
}

/// Accepts connection `stripe` of the links to every rank in `expected`, on `endpoint`.
async fn accept_stripes(
    endpoint: quinn::Endpoint,
    job: u64,
    stripe: usize,
    expected: Vec<Peer>,
) -> Result<Vec<(usize, Conn)>, TransportError> {
    let mut got: Vec<(usize, Conn)> = vec![];
    while got.len() < expected.len() {
        let taken: Vec<usize> = got.iter().map(|g| g.0).collect();
        let Some((rank, index, (conn, mut tx, rx))) =
            accept_one(&endpoint, job, &expected, &taken).await?
        else {
            continue;
        };
        if index != stripe as u64 {
            conn.close(quinn::VarInt::from_u32(1), b"wrong connection index");
            continue;
        }
        if tx.write_all(&[1]).await.is_err() {
            continue;
        }
        got.push((rank, (conn, tx, rx)));
    }
    Ok(got)
}

/// The link over `subs` (connection `s` driven by `drivers[s]`): the connection itself when
/// there is one, else striped over them.
fn link_pair(subs: Vec<Conn>, drivers: &[Arc<Driver>]) -> LinkPair {
    let halves = subs.into_iter().zip(drivers).map(|((conn, tx, rx), d)| {
        (
            QuicTx {
                stream: tx,
                _conn: conn.clone(),
                driver: d.clone(),
            },
            QuicRx {
                stream: rx,
                pending: Bytes::new(),
                _conn: conn,
                driver: d.clone(),
            },
        )
    });
    let (mut txs, mut rxs): (Vec<QuicTx>, Vec<QuicRx>) = halves.unzip();
    if txs.len() == 1
        && let (Some(tx), Some(rx)) = (txs.pop(), rxs.pop())
    {
        return (Box::new(tx), Box::new(rx));
    }
    (
        Box::new(StripedTx::new(txs, BLOCK)),
        Box::new(StripedRx::new(rxs, BLOCK)),
    )
}

/// A lost connection as a link error: the idle timeout (nothing heard for [`IDLE_TIMEOUT`]) is a
/// silent path, not a dead process (a killed peer is named by the control channel).
fn lost(e: &quinn::ConnectionError) -> LinkError {
    match e {
        quinn::ConnectionError::TimedOut => LinkError::Silent(IDLE_TIMEOUT),
        quinn::ConnectionError::ApplicationClosed(_)
        | quinn::ConnectionError::ConnectionClosed(_)
        | quinn::ConnectionError::LocallyClosed
        | quinn::ConnectionError::Reset => LinkError::Closed,
        other => LinkError::Io(other.to_string()),
    }
}

/// The sending half of a QUIC link.
struct QuicTx {
    stream: quinn::SendStream,
    _conn: quinn::Connection,
    driver: Arc<Driver>,
}

impl PartTx for QuicTx {
    fn send(&mut self, bytes: Bytes, deadline: Instant) -> Result<(), LinkError> {
        let driver = self.driver.clone();
        match driver.wait(deadline, self.stream.write_chunk(bytes)) {
            Err(_) => Err(LinkError::Timeout),
            Ok(Ok(())) => Ok(()),
            Ok(Err(quinn::WriteError::ConnectionLost(e))) => Err(lost(&e)),
            Ok(Err(e)) => Err(LinkError::Io(e.to_string())),
        }
    }

    fn close(&mut self) {
        let _ = self.stream.finish();
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        connection_status(&self._conn, deadline)
    }
}

impl LinkTx for QuicTx {
    fn write_all(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), LinkError> {
        let driver = self.driver.clone();
        match driver.wait(deadline, self.stream.write_all(bytes)) {
            Err(_) => Err(LinkError::Timeout),
            Ok(Ok(())) => Ok(()),
            Ok(Err(quinn::WriteError::ConnectionLost(e))) => Err(lost(&e)),
            Ok(Err(e)) => Err(LinkError::Io(e.to_string())),
        }
    }

    fn write_shared(&mut self, data: Arc<[u8]>, deadline: Instant) -> Result<(), LinkError> {
        self.send(Bytes::from_owner(data), deadline)
    }

    fn kind(&self) -> &'static str {
        "quic"
    }

    /// Finishes the stream; the process then stays until the peer finishes its own
    /// ([`LinkRx::drain`]), so this stream's last bytes are not cut off by the exit.
    fn close(&mut self) {
        let _ = self.stream.finish();
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        connection_status(&self._conn, deadline)
    }
}

/// A connection's health for [`LinkTx::check`] and [`LinkRx::check`]: lost (a peer that went
/// silent shows as the idle timeout, `Silent`), or past `deadline`.
fn connection_status(conn: &quinn::Connection, deadline: Instant) -> Result<(), LinkError> {
    if let Some(e) = conn.close_reason() {
        return Err(lost(&e));
    }
    if Instant::now() > deadline {
        return Err(LinkError::Timeout);
    }
    Ok(())
}

/// The receiving half of a QUIC link.
struct QuicRx {
    stream: quinn::RecvStream,
    /// The unread rest of the last chunk.
    pending: Bytes,
    _conn: quinn::Connection,
    driver: Arc<Driver>,
}

impl LinkRx for QuicRx {
    fn read_with(
        &mut self,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        let (driver, stream, pending) = (&self.driver, &mut self.stream, &mut self.pending);
        // One entry into the runtime per message: chunks arrive per packet, far too often to
        // pay a cross-thread wake-up and a timer each.
        let read = driver.wait(deadline, async {
            let mut done = 0;
            while done < len {
                if pending.is_empty() {
                    *pending = match stream.read_chunk(len - done, true).await {
                        Ok(Some(chunk)) => chunk.bytes,
                        Ok(None) => return Err(LinkError::Closed),
                        Err(quinn::ReadError::ConnectionLost(e)) => return Err(lost(&e)),
                        Err(e) => return Err(LinkError::Io(e.to_string())),
                    };
                }
                let piece = pending.split_to(pending.len().min(len - done));
                f(done, &piece);
                done += piece.len();
            }
            Ok(())
        });
        read.unwrap_or(Err(LinkError::Timeout))
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        if !self.pending.is_empty() {
            return Ok(());
        }
        connection_status(&self._conn, deadline)
    }

    fn drain(&mut self, deadline: Instant) {
        let (driver, stream, conn) = (&self.driver, &mut self.stream, &self._conn);
        // On a thread of its own: at process exit this thread's thread-locals (tokio's
        // runtime context and tracing's among them) may already be destroyed.
        std::thread::scope(|s| {
            let _ = s
                .spawn(|| {
                    let _ = driver.wait(deadline, async {
                        while let Ok(Some(_)) = stream.read_chunk(usize::MAX, true).await {}
                    });
                    let path = conn.stats().path;
                    tracing::debug!(
                        mtu = path.current_mtu,
                        sent = path.sent_packets,
                        lost = path.lost_packets,
                        rtt_us = path.rtt.as_micros(),
                        cwnd = path.cwnd,
                        "QUIC connection at exit"
                    );
                })
                .join();
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn peer(rank: usize, n: &QuicNode) -> Peer {
        Peer {
            rank,
            addr: SocketAddr::new(IpAddr::from([127, 0, 0, 1]), n.port().unwrap()),
            fingerprint: n.fingerprint(),
        }
    }

    /// A process whose certificate is not in the job's table (it never passed the token check)
    /// fails the handshake and gets nothing; the genuine rank links (two connections: the
    /// smaller of the two ends' stripes) and its bytes arrive, both ways.
    #[test]
    fn only_pinned_certificates_link() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let (a, b, intruder) = (
            QuicNode::bind(lo).unwrap(),
            QuicNode::bind(lo).unwrap(),
            QuicNode::bind(lo).unwrap(),
        );
        let (pa, pb) = (peer(0, &a), peer(1, &b));
        a.serve(std::slice::from_ref(&pb)).unwrap();
        let soon = || Instant::now() + Duration::from_secs(3);
        std::thread::scope(|s| {
            let server = s.spawn(|| a.link_all(0, 7, std::slice::from_ref(&pb), 3, soon()));
            let refused = intruder.link_all(1, 7, std::slice::from_ref(&pa), 2, soon());
            assert!(refused.is_err(), "the intruder linked");
            let mut links = b
                .link_all(1, 7, std::slice::from_ref(&pa), 2, soon())
                .unwrap();
            let mut at_a = server.join().unwrap().unwrap();
            assert_eq!((links.len(), at_a.len(), at_a[0].0), (1, 1, 1));
            let msg: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            links[0].1.0.write_all(&msg, soon()).unwrap();
            let mut got = vec![0u8; msg.len()];
            at_a[0].1.1.read_exact(&mut got, soon()).unwrap();
            assert_eq!(got, msg);
            let back: Vec<u8> = (0..3 * BLOCK as u32 + 5).map(|i| (i % 253) as u8).collect();
            at_a[0]
                .1
                .0
                .write_shared(Arc::from(back.as_slice()), soon())
                .unwrap();
            let mut got = vec![0u8; back.len()];
            links[0].1.1.read_exact(&mut got, soon()).unwrap();
            assert_eq!(got, back);
        });
    }
}
