//! The TLS handshake of a TCP link and its first application bytes (the dialer's hello, the
//! acceptor's answer), driven over a blocking socket through rustls' unbuffered API: the
//! connection can then hand its keys to this crate's record layer ([`crate::records`]).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, UnbufferedStatus,
};

/// A client or server connection of rustls' unbuffered API.
pub(crate) trait Unbuffered {
    /// The side's connection data.
    type Data;
    /// `process_tls_records` of the side.
    fn process<'c, 'i>(&'c mut self, tls: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// The side's `dangerous_into_kernel_connection`.
    fn into_kernel(
        self,
    ) -> Result<(rustls::ExtractedSecrets, KernelConnection<Self::Data>), rustls::Error>;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, tls: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(tls)
    }
    fn into_kernel(
        self,
    ) -> Result<(rustls::ExtractedSecrets, KernelConnection<Self::Data>), rustls::Error> {
        self.dangerous_into_kernel_connection()
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, tls: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(tls)
    }
    fn into_kernel(
        self,
    ) -> Result<(rustls::ExtractedSecrets, KernelConnection<Self::Data>), rustls::Error> {
        self.dangerous_into_kernel_connection()
    }
}

/// A connection in its handshake, with the bytes read from its socket and not yet processed.
pub(crate) struct Handshake<C> {
    pub(crate) conn: C,
    inbuf: Vec<u8>,
    used: usize,
    out: Vec<u8>,
}

fn tls_io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("TLS: {e}"))
}

impl<C: Unbuffered> Handshake<C> {
    pub(crate) fn new(conn: C) -> Handshake<C> {
        Handshake {
            conn,
            inbuf: vec![0; 16 << 10],
            used: 0,
            out: vec![0; 16 << 10],
        }
    }

    /// Runs the handshake as far as needed to write `send` (application data) once allowed,
    /// then reads until `want` bytes of application data arrived; those bytes. Blocking calls
    /// on `sock` end at its timeouts (`WouldBlock` / `TimedOut`).
    pub(crate) fn exchange(
        &mut self,
        sock: &mut TcpStream,
        send: &[u8],
        want: usize,
    ) -> std::io::Result<Vec<u8>> {
        let (mut sent, mut got, mut pending) = (send.is_empty(), vec![], 0);
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process(&mut self.inbuf[..self.used]);
            let (mut read, mut done) = (false, false);
            match state.map_err(tls_io)? {
                ConnectionState::ReadTraffic(mut rt) => {
                    while let Some(r) = rt.next_record() {
                        got.extend_from_slice(r.map_err(tls_io)?.payload);
                    }
                }
                ConnectionState::EncodeTlsData(mut e) => loop {
                    match e.encode(&mut self.out[pending..]) {
                        Ok(n) => {
                            pending += n;
                            break;
                        }
                        Err(EncodeError::InsufficientSize(InsufficientSizeError {
                            required_size,
                        })) => self.out.resize(pending + required_size, 0),
                        Err(e) => return Err(tls_io(e)),
                    }
                },
                ConnectionState::TransmitTlsData(t) => {
                    sock.write_all(&self.out[..pending])?;
                    pending = 0;
                    t.done();
                }
                ConnectionState::BlockedHandshake => read = true,
                ConnectionState::WriteTraffic(mut w) if !sent => loop {
                    match w.encrypt(send, &mut self.out) {
                        Ok(n) => {
                            sock.write_all(&self.out[..n])?;
                            sent = true;
                            break;
                        }
                        Err(EncryptError::InsufficientSize(InsufficientSizeError {
                            required_size,
                        })) => self.out.resize(required_size, 0),
                        Err(e) => return Err(tls_io(e)),
                    }
                },
                ConnectionState::WriteTraffic(_) => {
                    done = got.len() >= want;
                    read = !done;
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    return Err(ErrorKind::UnexpectedEof.into());
                }
                _ => return Err(tls_io("an unexpected handshake state")),
            }
            self.inbuf.copy_within(discard..self.used, 0);
            self.used -= discard;
            if done {
                return Ok(got);
            }
            if read {
                if self.used == self.inbuf.len() {
                    self.inbuf.resize(2 * self.used, 0);
                }
                match sock.read(&mut self.inbuf[self.used..])? {
                    0 => return Err(ErrorKind::UnexpectedEof.into()),
                    n => self.used += n,
                }
            }
        }
    }

    /// The keys and key schedule, and the bytes read past the handshake (records under the
    /// new keys, if the peer sent any already).
    pub(crate) fn finish(
        self,
    ) -> std::io::Result<(rustls::ExtractedSecrets, KernelConnection<C::Data>, Vec<u8>)> {
        let (secrets, kernel) = self.conn.into_kernel().map_err(tls_io)?;
        Ok((secrets, kernel, self.inbuf[..self.used].to_vec()))
    }
}
