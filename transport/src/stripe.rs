//! Striped links: one byte stream over K sub-links (QUIC connections, each driven by its own
//! thread), so K cores encrypt and decrypt one peer's traffic. The stream is cut into blocks of
//! [`BLOCK`] bytes at fixed stream offsets and block `b` goes on sub-link `b % K`: both ends
//! derive the split from the offset alone, so no framing is added and order is kept.
//!
//! Large messages spread over every sub-link; a small one (a frame header) goes whole on the
//! sub-link that owns its offset. Writes hand blocks to the sub-links one after another
//! without waiting for them to be sent (each sub-link's send window holds many blocks), and
//! reads take them in the same order while the other sub-links keep receiving.

use std::time::Instant;

use bytes::Bytes;

use crate::link::{LinkError, LinkRx, LinkTx};

/// Bytes per block: small enough that a 16 MiB message spreads evenly over the sub-links, large
/// enough that the per-block hand-off (one entry into a sub-link's runtime) costs nothing.
pub const BLOCK: usize = 256 << 10;

/// The sending half of one sub-link: takes a shared buffer (no copy), and reports health.
pub trait PartTx: Send {
    /// Writes all of `bytes` before `deadline`.
    fn send(&mut self, bytes: Bytes, deadline: Instant) -> Result<(), LinkError>;
    /// Tells the peer no more bytes will come on this sub-link.
    fn close(&mut self);
    /// As [`LinkTx::check`].
    fn check(&self, deadline: Instant) -> Result<(), LinkError>;
}

/// Which sub-link carries stream offset `at`, and how many bytes from there stay on it.
fn place(at: u64, parts: usize, block: usize) -> (usize, usize) {
    let b = block as u64;
    ((at / b % parts as u64) as usize, (b - at % b) as usize)
}

/// The most severe of the sub-links' errors: a dead peer before a silent path, before a closed
/// link, before I/O errors, before a timeout (as a caller names the root cause).
fn worst(errors: impl Iterator<Item = LinkError>) -> Option<LinkError> {
    errors.min_by_key(|e| match e {
        LinkError::PeerDead => 0,
        LinkError::Silent(_) => 1,
        LinkError::Closed => 2,
        LinkError::Io(_) => 3,
        LinkError::Timeout => 4,
    })
}

/// The sending half of a striped link.
pub struct StripedTx<T> {
    parts: Vec<T>,
    block: usize,
    /// Bytes written so far (the stream offset of the next byte).
    at: u64,
}

impl<T: PartTx> StripedTx<T> {
    /// A link over `parts` (at least one), cut into `block`-byte blocks.
    pub fn new(parts: Vec<T>, block: usize) -> StripedTx<T> {
        StripedTx {
            parts,
            block: block.max(1),
            at: 0,
        }
    }

    fn send(&mut self, mut bytes: Bytes, deadline: Instant) -> Result<(), LinkError> {
        while !bytes.is_empty() {
            let (part, room) = place(self.at, self.parts.len(), self.block);
            let piece = bytes.split_to(room.min(bytes.len()));
            let n = piece.len();
            self.parts[part].send(piece, deadline)?;
            self.at += n as u64;
        }
        Ok(())
    }
}

impl<T: PartTx> LinkTx for StripedTx<T> {
    fn write_all(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), LinkError> {
        self.send(Bytes::copy_from_slice(bytes), deadline)
    }

    fn write_shared(
        &mut self,
        data: std::sync::Arc<[u8]>,
        deadline: Instant,
    ) -> Result<(), LinkError> {
        self.send(Bytes::from_owner(data), deadline)
    }

    fn close(&mut self) {
        self.parts.iter_mut().for_each(PartTx::close);
    }

    /// Striping is used by QUIC links only.
    fn kind(&self) -> &'static str {
        "quic"
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        worst(self.parts.iter().filter_map(|p| p.check(deadline).err())).map_or(Ok(()), Err)
    }
}

/// The receiving half of a striped link.
pub struct StripedRx<R> {
    parts: Vec<R>,
    block: usize,
    /// Bytes read so far.
    at: u64,
}

impl<R: LinkRx> StripedRx<R> {
    /// A link over `parts` (as the sender's, in the same order), cut into `block`-byte blocks.
    pub fn new(parts: Vec<R>, block: usize) -> StripedRx<R> {
        StripedRx {
            parts,
            block: block.max(1),
            at: 0,
        }
    }
}

impl<R: LinkRx> LinkRx for StripedRx<R> {
    fn read_with(
        &mut self,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        let mut done = 0;
        while done < len {
            let (part, room) = place(self.at, self.parts.len(), self.block);
            let n = room.min(len - done);
            // A read that ends early (a caller's short deadline) has still taken what it
            // handed over: the position moves by that, or the next read would look for the
            // rest of this block on the next sub-link.
            let mut got = 0;
            let r = self.parts[part].read_with(n, deadline, &mut |at, piece| {
                f(done + at, piece);
                got = at + piece.len();
            });
            done += got;
            self.at += got as u64;
            r?;
        }
        Ok(())
    }

    /// `Ok` while every sub-link is: a message needs them all.
    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        worst(self.parts.iter().filter_map(|p| p.check(deadline).err())).map_or(Ok(()), Err)
    }

    fn drain(&mut self, deadline: Instant) {
        self.parts.iter_mut().for_each(|p| p.drain(deadline));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// An in-memory sub-link that counts the bytes it carried.
    struct Pipe(Sender<Bytes>, Arc<Mutex<usize>>);
    struct PipeRx(Receiver<Bytes>, Bytes);

    impl PartTx for Pipe {
        fn send(&mut self, bytes: Bytes, _: Instant) -> Result<(), LinkError> {
            *self.1.lock().unwrap() += bytes.len();
            self.0.send(bytes).map_err(|_| LinkError::Closed)
        }
        fn close(&mut self) {}
        fn check(&self, _: Instant) -> Result<(), LinkError> {
            Ok(())
        }
    }

    impl LinkRx for PipeRx {
        fn read_with(
            &mut self,
            len: usize,
            deadline: Instant,
            f: &mut dyn FnMut(usize, &[u8]),
        ) -> Result<(), LinkError> {
            let mut done = 0;
            while done < len {
                if self.1.is_empty() {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    self.1 = self.0.recv_timeout(wait).map_err(|_| LinkError::Timeout)?;
                }
                let piece = self.1.split_to(self.1.len().min(len - done));
                f(done, &piece);
                done += piece.len();
            }
            Ok(())
        }
    }

    fn striped(
        k: usize,
        block: usize,
    ) -> (StripedTx<Pipe>, StripedRx<PipeRx>, Vec<Arc<Mutex<usize>>>) {
        let (mut tx, mut rx, mut counts) = (vec![], vec![], vec![]);
        for _ in 0..k {
            let (s, r) = channel();
            let c = Arc::new(Mutex::new(0));
            tx.push(Pipe(s, c.clone()));
            rx.push(PipeRx(r, Bytes::new()));
            counts.push(c);
        }
        (StripedTx::new(tx, block), StripedRx::new(rx, block), counts)
    }

    /// A read that times out part way through a block (`NetComm` reads in turns of 200 ms to
    /// watch the control channel) and is then resumed for the rest gets every byte in order:
    /// the bytes the timed-out read handed over count (they were lost to a position kept per
    /// whole block, and the next frame header was looked for on the wrong sub-link).
    #[test]
    fn a_read_resumed_after_a_timeout_keeps_the_stripes_in_step() {
        let block = 1000;
        let (mut tx, mut rx, _) = striped(2, block);
        let soon = || Instant::now() + Duration::from_secs(5);
        let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        // Half of the first block arrives, then the reader's turn ends.
        tx.write_all(&msg[..500], soon()).unwrap();
        let mut got = vec![0u8; msg.len()];
        let mut done = 0;
        let short = Instant::now() + Duration::from_millis(30);
        let r = rx.read_with(msg.len(), short, &mut |at, piece| {
            got[at..at + piece.len()].copy_from_slice(piece);
            done = at + piece.len();
        });
        assert_eq!((r, done), (Err(LinkError::Timeout), 500));
        tx.write_all(&msg[500..], soon()).unwrap();
        let rest = msg.len() - done;
        rx.read_with(rest, soon(), &mut |at, piece| {
            got[done + at..done + at + piece.len()].copy_from_slice(piece);
        })
        .unwrap();
        assert!(got == msg, "the resumed read got other bytes");
    }

    /// Messages of every awkward size (empty, 1 byte, a header, not a multiple of the block or
    /// of K, several blocks) come out whole and in order, read in pieces of other sizes than
    /// they were written in, and a large message is spread evenly over the sub-links.
    #[test]
    fn messages_keep_order_and_content_across_sub_links() {
        for k in [1, 2, 3] {
            let block = 1000;
            let (mut tx, mut rx, counts) = striped(k, block);
            let soon = || Instant::now() + Duration::from_secs(5);
            let sizes = [0, 1, 32, 999, 1000, 1001, 7 * 1000 + 13, 3, 50_000, 32, 1];
            let msgs: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(m, &n)| (0..n).map(|i| (i * 31 + m * 7) as u8).collect())
                .collect();
            for (m, msg) in msgs.iter().enumerate() {
                if m % 2 == 0 {
                    tx.write_all(msg, soon()).unwrap();
                } else {
                    tx.write_shared(Arc::from(msg.as_slice()), soon()).unwrap();
                }
            }
            // Read the stream back in pieces cut differently: each message in two halves.
            for msg in &msgs {
                let mut got = vec![0u8; msg.len()];
                let half = msg.len() / 2;
                rx.read_exact(&mut got[..half], soon()).unwrap();
                rx.read_exact(&mut got[half..], soon()).unwrap();
                assert_eq!(&got, msg, "k = {k}, message of {} bytes", msg.len());
            }
            let total: usize = sizes.iter().sum();
            let carried: Vec<usize> = counts.iter().map(|c| *c.lock().unwrap()).collect();
            assert_eq!(carried.iter().sum::<usize>(), total);
            for c in &carried {
                assert!(
                    c.abs_diff(total / k) <= block,
                    "k = {k}: uneven spread {carried:?}"
                );
            }
            // Nothing left over: the next read times out.
            let mut one = [0u8];
            let short = Instant::now() + Duration::from_millis(20);
            assert_eq!(rx.read_exact(&mut one, short), Err(LinkError::Timeout));
        }
    }
}
