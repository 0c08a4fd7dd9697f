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
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::runtime::Handle;

use crate::TransportError;
use crate::link::{LinkError, LinkPair, LinkRx, LinkTx};
pub use crate::tls::Fingerprint;
use crate::tls::{Pinned, SERVER_NAME, fingerprint, provider, tls_error};

const ALPN: &[u8] = b"gflow/1";
/// A connection with no packet for this long is lost: a killed peer is an error this soon.
const IDLE_TIMEOUT: Duration = Duration::from_secs(6);
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// quinn's transport settings. Windows, congestion window and timeouts always; the large MTU
/// only when every peer is on loopback (a real network's MTU is usually 1500, and quinn drops
/// oversized datagrams silently).
fn transport_config(loopback: bool) -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20))
        .receive_window(quinn::VarInt::from_u32(64 << 20))
        .send_window(32 << 20)
        .keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok());
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(1 << 20);
    t.congestion_controller_factory(Arc::new(cubic));
    if loopback {
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(65527);
        t.initial_mtu(16000)
            .min_mtu(16000)
            .mtu_discovery_config(Some(mtu))
            .enable_segmentation_offload(false);
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
pub struct QuicNode {
    driver: Arc<Driver>,
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

impl QuicNode {
    /// Starts the runtime thread and a client-only endpoint on `ip` (port chosen by the OS),
    /// with a fresh self-signed certificate.
    ///
    /// # Errors
    /// `Io` when the socket, the runtime or the certificate cannot be made.
    pub fn bind(ip: IpAddr) -> Result<QuicNode, TransportError> {
        let io = |what: &str, e: std::io::Error| TransportError::Io(format!("QUIC {what}: {e}"));
        let (cert, key) = crate::tls::self_signed()?;

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
        let udp: UdpSocket = sock.into();

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
            quinn::Endpoint::new(ecfg, None, udp, Arc::new(quinn::TokioRuntime))
                .map_err(|e| io("endpoint", e))?
        };
        Ok(QuicNode {
            driver: Arc::new(Driver {
                rt: handle,
                endpoint,
                stop: std::sync::Mutex::new(Some(stop)),
                thread: std::sync::Mutex::new(Some(thread)),
            }),
            cert,
            key,
        })
    }

    /// The port the endpoint listens on.
    ///
    /// # Errors
    /// `Io` when the socket has no address.
    pub fn port(&self) -> Result<u16, TransportError> {
        self.driver
            .endpoint
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| TransportError::Io(format!("QUIC endpoint: {e}")))
    }

    /// This process's certificate fingerprint, reported in the rendezvous.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint(&self.cert)
    }

    fn client_config(
        &self,
        peer: Fingerprint,
        loopback: bool,
    ) -> Result<quinn::ClientConfig, TransportError> {
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned::new(vec![peer])))
            .with_client_auth_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(tls_error)?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let mut c = quinn::ClientConfig::new(Arc::new(
            QuicClientConfig::try_from(tls).map_err(tls_error)?,
        ));
        c.transport_config(transport_config(loopback));
        Ok(c)
    }

    /// Starts accepting connections from the certificates in `clients` (and no other).
    /// Call before the rendezvous barrier, so no peer dials a node that cannot answer yet.
    ///
    /// # Errors
    /// `Io` for a TLS configuration failure.
    pub fn serve(&self, clients: &[Peer]) -> Result<(), TransportError> {
        let verifier = Pinned::new(clients.iter().map(|p| p.fingerprint).collect());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .with_client_cert_verifier(Arc::new(verifier))
            .with_single_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .map_err(tls_error)?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let mut sc = quinn::ServerConfig::with_crypto(Arc::new(
            QuicServerConfig::try_from(tls).map_err(tls_error)?,
        ));
        sc.transport_config(transport_config(
            clients.iter().all(|p| p.addr.ip().is_loopback()),
        ));
        self.driver.endpoint.set_server_config(Some(sc));
        Ok(())
    }

    /// Links this process (`me`, of job `job`) to every peer: dials the lower ranks, accepts the
    /// higher ones (which must have been passed to [`serve`](Self::serve)). Each link is one
    /// bidirectional stream; the dialer opens it with (job, rank) so the acceptor knows who it
    /// is, and the acceptor answers one byte once it has checked them.
    ///
    /// # Errors
    /// `Timeout` when a peer does not link before `deadline`; `Io`/`Refused` otherwise.
    pub fn link_all(
        &self,
        me: usize,
        job: u64,
        peers: &[Peer],
        deadline: Instant,
    ) -> Result<Vec<(usize, LinkPair)>, TransportError> {
        let mut dials = vec![];
        for p in peers.iter().filter(|p| p.rank < me) {
            let cfg = self.client_config(p.fingerprint, p.addr.ip().is_loopback())?;
            let (rank, addr, endpoint) = (p.rank, p.addr, self.driver.endpoint.clone());
            dials.push(async move {
                let io = |e: &dyn std::fmt::Display| {
                    TransportError::Io(format!("QUIC link to rank {rank}: {e}"))
                };
                let conn = endpoint
                    .connect_with(cfg, addr, SERVER_NAME)
                    .map_err(|e| io(&e))?
                    .await
                    .map_err(|e| io(&e))?;
                let (mut tx, mut rx) = conn.open_bi().await.map_err(|e| io(&e))?;
                let mut hello = [0u8; 16];
                hello[..8].copy_from_slice(&job.to_le_bytes());
                hello[8..].copy_from_slice(&(me as u64).to_le_bytes());
                tx.write_all(&hello).await.map_err(|e| io(&e))?;
                // The acceptor's answer: it checked our certificate, job and rank. (A TLS 1.3
                // client finishes its handshake before the server judges its certificate.)
                let mut ok = [0u8; 1];
                rx.read_exact(&mut ok).await.map_err(|e| io(&e))?;
                Ok::<_, TransportError>((rank, conn, tx, rx))
            });
        }
        let higher: Vec<Peer> = peers.iter().filter(|p| p.rank > me).cloned().collect();
        let endpoint = self.driver.endpoint.clone();
        let accepting = async move {
            let mut got: Vec<(
                usize,
                quinn::Connection,
                quinn::SendStream,
                quinn::RecvStream,
            )> = vec![];
            while got.len() < higher.len() {
                let incoming = endpoint.accept().await.ok_or_else(|| {
                    TransportError::Io("QUIC endpoint closed while accepting".into())
                })?;
                // A failed handshake (a certificate outside the job) is refused and ignored.
                let Ok(conn) = incoming.await else { continue };
                let Ok((mut tx, mut rx)) = conn.accept_bi().await else {
                    continue;
                };
                let mut hello = [0u8; 16];
                if rx.read_exact(&mut hello).await.is_err() {
                    continue;
                }
                let word = |r: std::ops::Range<usize>| {
                    u64::from_le_bytes(hello[r].try_into().unwrap_or([0xff; 8]))
                };
                let (their_job, rank) = (word(0..8), word(8..16) as usize);
                let cert = conn
                    .peer_identity()
                    .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
                    .and_then(|c| c.first().map(|c| fingerprint(c)));
                let genuine = higher
                    .iter()
                    .any(|p| p.rank == rank && Some(p.fingerprint) == cert);
                if their_job != job || !genuine || got.iter().any(|(r, ..)| *r == rank) {
                    conn.close(quinn::VarInt::from_u32(1), b"not a peer of this job");
                    continue;
                }
                if tx.write_all(&[1]).await.is_err() {
                    continue;
                }
                got.push((rank, conn, tx, rx));
            }
            Ok::<_, TransportError>(got)
        };
        let all = self.driver.wait(deadline, async {
            let dialed = tokio::spawn(async move {
                let mut out = vec![];
                for d in dials {
                    out.push(d.await?);
                }
                Ok::<_, TransportError>(out)
            });
            let mut links = accepting.await?;
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
            .map(|(rank, conn, tx, rx)| {
                let pair: LinkPair = (
                    Box::new(QuicTx {
                        stream: tx,
                        _conn: conn.clone(),
                        driver: self.driver.clone(),
                    }),
                    Box::new(QuicRx {
                        stream: rx,
                        pending: Bytes::new(),
                        _conn: conn,
                        driver: self.driver.clone(),
                    }),
                );
                (rank, pair)
            })
            .collect())
    }
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
        let driver = self.driver.clone();
        match driver.wait(deadline, self.stream.write_chunk(Bytes::from_owner(data))) {
            Err(_) => Err(LinkError::Timeout),
            Ok(Ok(())) => Ok(()),
            Ok(Err(quinn::WriteError::ConnectionLost(e))) => Err(lost(&e)),
            Ok(Err(e)) => Err(LinkError::Io(e.to_string())),
        }
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
        let (driver, stream) = (&self.driver, &mut self.stream);
        // On a thread of its own: at process exit this thread's thread-locals (tokio's
        // runtime context among them) may already be destroyed.
        std::thread::scope(|s| {
            let _ = s
                .spawn(|| {
                    driver.wait(deadline, async {
                        while let Ok(Some(_)) = stream.read_chunk(usize::MAX, true).await {}
                    })
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
    /// fails the handshake and gets nothing; the genuine rank links and its bytes arrive.
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
            let server = s.spawn(|| a.link_all(0, 7, std::slice::from_ref(&pb), soon()));
            let refused = intruder.link_all(1, 7, std::slice::from_ref(&pa), soon());
            assert!(refused.is_err(), "the intruder linked");
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
}
