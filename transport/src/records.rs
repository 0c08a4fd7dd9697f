//! TLS 1.3 records of a TCP link after its handshake, sealed and opened here with the keys
//! rustls negotiated (its `kernel` API, made for kTLS: rustls keeps the key schedule and
//! computes each key update; this module does the record layer). Done here so records are
//! encrypted straight from the caller's bytes into one buffer that goes to the socket in one
//! system call, and decrypted in place in the buffer the socket was read into, whose plaintext
//! the caller then takes directly: one copy per byte on each side besides the kernel's (rustls'
//! own record layer copies each record twice more on receipt).
//!
//! The wire format is TLS 1.3's (RFC 8446 §5.2): a 5-byte header, then the AES-128-GCM sealed
//! inner plaintext (content, content type, no padding) and its 16-byte tag; the nonce is the
//! write IV XOR the record's sequence number. The sender moves to the next key (a KeyUpdate
//! record) every [`REKEY_AFTER`] records, well inside AES-GCM's limit of 2^24.

use std::ops::Range;

use aws_lc_rs::aead::{AES_128_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;
use rustls::kernel::KernelConnection;

use crate::link::LinkError;

/// Plaintext bytes in one record at most.
pub(crate) const MAX_PLAIN: usize = 1 << 14;
/// A record's header.
pub(crate) const HEADER: usize = 5;
/// The longest record this side accepts (RFC 8446 allows 256 bytes of expansion).
pub(crate) const MAX_RECORD: usize = HEADER + MAX_PLAIN + 256;
const TAG: usize = 16;
/// Records sealed under one key before the sender moves to the next.
const REKEY_AFTER: u64 = 1 << 23;

/// Content types (of the inner plaintext).
pub(crate) const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
pub(crate) const APP_DATA: u8 = 23;
const KEY_UPDATE: u8 = 24;
/// The alert that ends a direction in order: level warning, description close_notify.
pub(crate) const CLOSE_NOTIFY: [u8; 2] = [1, 0];

fn tls_failure(what: &str) -> LinkError {
    LinkError::Io(format!("TLS records: {what}"))
}

/// One direction's key, IV and next sequence number.
struct Keys {
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    seq: u64,
}

impl Keys {
    fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Result<Keys, LinkError> {
        let ConnectionTrafficSecrets::Aes128Gcm { key, iv } = secrets else {
            return Err(tls_failure(
                "the handshake chose a cipher other than AES-128-GCM",
            ));
        };
        let key = UnboundKey::new(&AES_128_GCM, key.as_ref())
            .map_err(|_| tls_failure("bad AES-128-GCM key"))?;
        let iv: [u8; NONCE_LEN] = iv
            .as_ref()
            .try_into()
            .map_err(|_| tls_failure("bad IV length"))?;
        Ok(Keys {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The next record's nonce (and the sequence number moves on).
    fn next_nonce(&mut self) -> Nonce {
        let mut n = self.iv;
        for (b, s) in n[NONCE_LEN - 8..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(n)
    }
}

/// The header of a record of `len` bytes after the header.
fn header(len: usize) -> [u8; HEADER] {
    let [hi, lo] = (len as u16).to_be_bytes();
    [APP_DATA, 3, 3, hi, lo]
}

/// Sealed records waiting for the socket, `bytes()`. Its buffer keeps every byte it ever held
/// (zeroed once, when it grows), so a record is sealed straight into it without the buffer
/// being cleared or zeroed first (zeroing each 256 KiB chunk cost 2 % of an all-reduce).
#[derive(Default)]
pub(crate) struct Outbox {
    /// `buf[..end]`: the records; the rest was written before and is reused.
    buf: Vec<u8>,
    end: usize,
}

impl Outbox {
    /// The records' bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.end]
    }

    /// How many bytes the records take.
    pub(crate) fn len(&self) -> usize {
        self.end
    }

    /// How many bytes the buffer keeps (the most it ever held).
    pub(crate) fn kept(&self) -> usize {
        self.buf.len()
    }

    /// Forgets the records (the buffer stays).
    pub(crate) fn clear(&mut self) {
        self.end = 0;
    }

    /// The next `n` bytes after the records, now counted among them.
    fn grab(&mut self, n: usize) -> &mut [u8] {
        let at = self.end;
        if self.buf.len() < at + n {
            self.buf.resize(at + n, 0);
        }
        self.end = at + n;
        &mut self.buf[at..at + n]
    }

    fn push(&mut self, bytes: &[u8]) {
        self.grab(bytes.len()).copy_from_slice(bytes);
    }

    /// The records' bytes, to be changed (tests tamper with a record).
    #[cfg(test)]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.end]
    }
}

/// The sending direction of a connection.
pub(crate) struct Sealer<D> {
    keys: Keys,
    kernel: KernelConnection<D>,
    /// Records per key ([`REKEY_AFTER`]; tests lower it).
    pub(crate) rekey_after: u64,
}

impl<D> Sealer<D> {
    /// The sender of a connection rustls handed over (`tx`: its sequence number and keys).
    pub(crate) fn new(
        tx: (u64, ConnectionTrafficSecrets),
        kernel: KernelConnection<D>,
    ) -> Result<Sealer<D>, LinkError> {
        Ok(Sealer {
            keys: Keys::new(tx)?,
            kernel,
            rekey_after: REKEY_AFTER,
        })
    }

    /// Appends to `out` the records of `parts` (one stream of bytes, at most [`MAX_PLAIN`] per
    /// record) of content type `typ`. A record whose plaintext lies in one part is sealed
    /// straight from it into `out` (no copy of the caller's bytes first: that copy was a
    /// tenth of a rank's time in an all-reduce between hosts); one spanning parts is gathered
    /// into `out` and sealed in place.
    pub(crate) fn seal(
        &mut self,
        typ: u8,
        parts: &[&[u8]],
        out: &mut Outbox,
    ) -> Result<(), LinkError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (mut part, mut at) = (0, 0);
        let mut left = total;
        while left > 0 {
            self.rekey_if_due(out)?;
            while parts[part].len() == at {
                (part, at) = (part + 1, 0);
            }
            let n = left.min(MAX_PLAIN);
            if let Some(plain) = parts[part].get(at..at + n) {
                self.seal_from(typ, plain, out)?;
                at += n;
            } else {
                let start = out.len();
                out.push(&header(n + 1 + TAG));
                let mut want = n;
                while want > 0 {
                    let p = parts[part];
                    let take = (p.len() - at).min(want);
                    out.push(&p[at..at + take]);
                    (at, want) = (at + take, want - take);
                    if at == p.len() && want > 0 {
                        (part, at) = (part + 1, 0);
                    }
                }
                out.push(&[typ]);
                self.seal_in(start, out)?;
            }
            left -= n;
        }
        Ok(())
    }

    /// Before the next record: once [`Sealer::rekey_after`] records went under this key, a
    /// KeyUpdate (update_not_requested) goes under it and the sender moves to the next key.
    fn rekey_if_due(&mut self, out: &mut Outbox) -> Result<(), LinkError> {
        if self.keys.seq < self.rekey_after {
            return Ok(());
        }
        let at = out.len();
        out.push(&header(5 + 1 + TAG));
        out.push(&[KEY_UPDATE, 0, 0, 1, 0, HANDSHAKE]);
        self.seal_in(at, out)?;
        let next = self
            .kernel
            .update_tx_secret()
            .map_err(|e| tls_failure(&format!("key update: {e}")))?;
        self.keys = Keys::new(next)?;
        Ok(())
    }

    /// Appends the record of `plain` (content type `typ`), encrypted from `plain` straight
    /// into `out`.
    fn seal_from(&mut self, typ: u8, plain: &[u8], out: &mut Outbox) -> Result<(), LinkError> {
        let head = header(plain.len() + 1 + TAG);
        out.push(&head);
        let (body, typ_and_tag) = out.grab(plain.len() + 1 + TAG).split_at_mut(plain.len());
        let nonce = self.keys.next_nonce();
        self.keys
            .key
            .seal_out_of_place_scatter(nonce, Aad::from(head), plain, body, &[typ], typ_and_tag)
            .map_err(|_| tls_failure("sealing failed"))
    }

    /// Seals the record whose header starts at `out[start]` (its plaintext and type follow,
    /// to the end of `out`) in place, appending the tag.
    fn seal_in(&mut self, start: usize, out: &mut Outbox) -> Result<(), LinkError> {
        let (mut head, end) = ([0u8; HEADER], out.end);
        head.copy_from_slice(&out.buf[start..start + HEADER]);
        let nonce = self.keys.next_nonce();
        let tag = self
            .keys
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(head), &mut out.buf[start + HEADER..end])
            .map_err(|_| tls_failure("sealing failed"))?;
        out.push(tag.as_ref());
        Ok(())
    }
}

/// What an opened record holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Application data, at this range of the bytes opened.
    Data(Range<usize>),
    /// close_notify: the peer ended this direction in order.
    Closed,
    /// A key update, applied (nothing for the caller).
    Nothing,
}

/// The receiving direction of a connection.
pub(crate) struct Opener<D> {
    keys: Keys,
    kernel: KernelConnection<D>,
}

impl<D> Opener<D> {
    /// The receiver of a connection rustls handed over (`rx`: its sequence number and keys).
    pub(crate) fn new(
        rx: (u64, ConnectionTrafficSecrets),
        kernel: KernelConnection<D>,
    ) -> Result<Opener<D>, LinkError> {
        Ok(Opener {
            keys: Keys::new(rx)?,
            kernel,
        })
    }

    /// The length of the record starting at `bytes` (header included), once its header is in;
    /// an error for a header no TLS 1.3 peer sends.
    pub(crate) fn record_len(bytes: &[u8]) -> Result<Option<usize>, LinkError> {
        if bytes.len() < HEADER {
            return Ok(None);
        }
        let len = HEADER + usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        if bytes[0] != APP_DATA || bytes[1] != 3 || !(HEADER + 1 + TAG..=MAX_RECORD).contains(&len)
        {
            return Err(tls_failure(&format!(
                "a malformed record header {:?}",
                &bytes[..HEADER]
            )));
        }
        Ok(Some(len))
    }

    /// Opens the whole record `record` (header included) in place.
    pub(crate) fn open(&mut self, record: &mut [u8]) -> Result<Opened, LinkError> {
        self.open_within(record, HEADER)
    }

    /// Opens the record that ends `bytes` and starts `at` bytes in (header included), its
    /// plaintext written from `bytes[0]` on (`at` = [`HEADER`]: in place): a receiver that
    /// read several records into its destination packs their plaintexts together without a
    /// copy of its own.
    pub(crate) fn open_within(&mut self, bytes: &mut [u8], at: usize) -> Result<Opened, LinkError> {
        let start = at - HEADER;
        let mut head = [0u8; HEADER];
        head.copy_from_slice(&bytes[start..at]);
        let nonce = self.keys.next_nonce();
        let plain = self
            .keys
            .key
            .open_within(nonce, Aad::from(head), bytes, at..)
            .map_err(|_| tls_failure("a record failed authentication"))?;
        let Some(end) = plain.iter().rposition(|&b| b != 0) else {
            return Err(tls_failure("a record without a content type"));
        };
        let (typ, body) = (plain[end], &plain[..end]);
        match typ {
            APP_DATA => Ok(Opened::Data(0..end)),
            ALERT if body == CLOSE_NOTIFY => Ok(Opened::Closed),
            ALERT => Err(tls_failure(&format!("the peer sent alert {body:?}"))),
            HANDSHAKE if body.first() == Some(&KEY_UPDATE) => {
                let next = self
                    .kernel
                    .update_rx_secret()
                    .map_err(|e| tls_failure(&format!("key update: {e}")))?;
                self.keys = Keys::new(next)?;
                Ok(Opened::Nothing)
            }
            t => Err(tls_failure(&format!("an unexpected record of type {t}"))),
        }
    }
}
