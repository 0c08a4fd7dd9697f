//! Shared-memory links between processes of one host: one single-producer single-consumer byte
//! ring per direction, in a file under `/dev/shm` mapped by both processes. Positions are
//! monotonically increasing byte counts in the ring's header (writer publishes with Release,
//! reader observes with Acquire). A blocked side spins briefly, then yields, then sleeps, and
//! checks its deadline and whether the peer process still lives.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use memmap2::MmapMut;

use crate::arena::PeerArena;
use crate::link::{Backoff, Caps, LinkError, LinkRx, LinkTx, Liveness};

/// Bytes of data per ring: 1 MiB measured best of 256 KiB to 16 MiB (2 processes, 16 MiB
/// all_gather: 4 MiB 2.7-3.4 GB/s, 1 MiB 3.6-3.9, 16 MiB 1.7-2.8): rings that stay in cache.
pub const RING_BYTES: usize = 1 << 20;
const DATA_OFFSET: usize = 4096;
const WRITE_POS: usize = 0;
const READ_POS: usize = 64;
const CLOSED: usize = 128;
/// Payloads sent by reference that the reader has finished with (written by the reader).
const REFS_DONE: usize = 192;
/// 1 once the reader has found it may open the writer's descriptors (`/proc/PID/fd`), so
/// payloads may come by reference (written by the reader; until then they come as bytes).
const READER_MAPS: usize = 256;

/// One ring buffer, mapped in this process.
pub struct Ring {
    map: MmapMut,
    cap: usize,
    path: PathBuf,
}

// SAFETY: the ring's shared state is accessed only through atomics and through byte ranges that
// the SPSC protocol gives to exactly one side at a time; the mapping itself is not moved.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Ring {
    /// Creates (or truncates) the ring file at `path` and maps it.
    ///
    /// # Errors
    /// I/O errors creating, sizing or mapping the file.
    pub fn create(path: &Path) -> std::io::Result<Ring> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.set_len((DATA_OFFSET + RING_BYTES) as u64)?;
        // SAFETY: the file is ours, sized above; other processes only touch it via this protocol.
        let map = unsafe { MmapMut::map_mut(&f)? };
        Ok(Ring {
            map,
            cap: RING_BYTES,
            path: path.to_path_buf(),
        })
    }

    /// Maps an existing ring file, then removes its name (both sides hold it mapped).
    ///
    /// # Errors
    /// I/O errors opening or mapping the file, or a file of the wrong size.
    pub fn open(path: &Path) -> std::io::Result<Ring> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        if f.metadata()?.len() != (DATA_OFFSET + RING_BYTES) as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "ring file has the wrong size",
            ));
        }
        // SAFETY: as in `create`.
        let map = unsafe { MmapMut::map_mut(&f)? };
        let _ = std::fs::remove_file(path);
        Ok(Ring {
            map,
            cap: RING_BYTES,
            path: path.to_path_buf(),
        })
    }

    fn atomic64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the mapping is page-aligned and at least DATA_OFFSET long; `off` is a multiple
        // of 8 inside the header; AtomicU64 has the layout of u64.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    fn closed(&self) -> &AtomicU32 {
        // SAFETY: as in `atomic64`, 4-byte aligned.
        unsafe { &*(self.map.as_ptr().add(CLOSED) as *const AtomicU32) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: DATA_OFFSET is inside the mapping.
        unsafe { self.map.as_ptr().add(DATA_OFFSET) as *mut u8 }
    }

    /// Marks the ring closed by this side (the peer then fails instead of waiting).
    pub fn close(&self) {
        self.closed().store(1, Ordering::Release);
    }

    /// The ring's file name (for errors).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Waits politely ([`Backoff`]), checking the ring and the peer when a check is due.
fn wait(
    backoff: &mut Backoff,
    deadline: Instant,
    peer: &Liveness,
    ring: &Ring,
) -> Result<(), LinkError> {
    backoff.snooze();
    if backoff.check_due() {
        status(ring, peer, deadline)?;
    }
    Ok(())
}

/// Whether waiting on `ring` can still succeed: not closed, before the deadline, peer alive.
fn status(ring: &Ring, peer: &Liveness, deadline: Instant) -> Result<(), LinkError> {
    if ring.closed().load(Ordering::Acquire) != 0 {
        return Err(LinkError::Closed);
    }
    if Instant::now() > deadline {
        return Err(LinkError::Timeout);
    }
    if !peer.alive() {
        return Err(LinkError::PeerDead);
    }
    Ok(())
}

/// The sending end of a ring.
pub struct ShmTx {
    ring: Ring,
    peer: Liveness,
}

/// The receiving end of a ring.
pub struct ShmRx {
    ring: Ring,
    peer: Liveness,
    /// The writer's arena, mapped at its first payload by reference.
    arena: Option<PeerArena>,
}

impl ShmTx {
    /// The sending end over `ring`, whose reader is the process `peer`.
    pub fn new(ring: Ring, peer: Liveness) -> ShmTx {
        ShmTx { ring, peer }
    }
}

impl ShmRx {
    /// The receiving end over `ring`, whose writer is the process `peer`. Tells the writer
    /// whether this process may map its arena (ranks of other users, or a `/proc` hidden by a
    /// sandbox, get the payloads as bytes).
    pub fn new(ring: Ring, peer: Liveness) -> ShmRx {
        if std::fs::read_dir(format!("/proc/{}/fd", peer.pid())).is_ok() {
            ring.atomic64(READER_MAPS).store(1, Ordering::Release);
        }
        ShmRx {
            ring,
            peer,
            arena: None,
        }
    }
}

impl LinkTx for ShmTx {
    fn kind(&self) -> &'static str {
        "shm"
    }

    fn write_all(&mut self, mut bytes: &[u8], deadline: Instant) -> Result<(), LinkError> {
        let mut backoff = Backoff::default();
        while !bytes.is_empty() {
            match self.try_write(bytes) {
                0 => wait(&mut backoff, deadline, &self.peer, &self.ring)?,
                n => {
                    backoff = Backoff::default();
                    bytes = &bytes[n..];
                }
            }
        }
        Ok(())
    }

    fn caps(&self) -> Caps {
        Caps {
            nonblocking: true,
            shares_memory: self.ring.atomic64(READER_MAPS).load(Ordering::Acquire) == 1,
        }
    }

    fn try_write(&mut self, bytes: &[u8]) -> usize {
        let r = &self.ring;
        let (wpos, rpos) = (r.atomic64(WRITE_POS), r.atomic64(READ_POS));
        let w = wpos.load(Ordering::Relaxed);
        let free = r.cap - (w - rpos.load(Ordering::Acquire)) as usize;
        let n = free.min(bytes.len());
        if n > 0 {
            let at = (w % r.cap as u64) as usize;
            let first = n.min(r.cap - at);
            // SAFETY: bytes [at, at + first) and [0, n - first) of the data area are free (not
            // readable by the consumer until write_pos advances), and in bounds.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.data().add(at), first);
                std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), r.data(), n - first);
            }
            wpos.store(w + n as u64, Ordering::Release);
        }
        n
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        status(&self.ring, &self.peer, deadline)
    }

    fn close(&mut self) {
        self.ring.close();
    }

    fn refs_done(&self) -> u64 {
        self.ring.atomic64(REFS_DONE).load(Ordering::Acquire)
    }
}

impl LinkRx for ShmRx {
    fn read_with(
        &mut self,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        let mut backoff = Backoff::default();
        let mut done = 0;
        while done < len {
            let got = self.try_read_with(len - done, &mut |piece| {
                f(done, piece);
                done += piece.len();
            });
            if got == 0 {
                match wait(&mut backoff, deadline, &self.peer, &self.ring) {
                    // The writer publishes its last bytes before closing: look once more.
                    Err(LinkError::Closed | LinkError::PeerDead) if self.unread() > 0 => {}
                    other => other?,
                }
            } else {
                backoff = Backoff::default();
            }
        }
        Ok(())
    }

    fn caps(&self) -> Caps {
        Caps {
            nonblocking: true,
            shares_memory: true,
        }
    }

    fn try_read_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let r = &self.ring;
        let rpos = r.atomic64(READ_POS);
        let rd = rpos.load(Ordering::Relaxed);
        let n = self.unread().min(max);
        if n > 0 {
            let at = (rd % r.cap as u64) as usize;
            let first = n.min(r.cap - at);
            // SAFETY: bytes [at, at + first) and [0, n - first) hold data the producer published
            // (write_pos was observed with Acquire) and that it cannot overwrite until read_pos
            // advances, which happens only after `f` has returned.
            let (a, b) = unsafe {
                (
                    std::slice::from_raw_parts(r.data().add(at), first),
                    std::slice::from_raw_parts(r.data(), n - first),
                )
            };
            f(a);
            if !b.is_empty() {
                f(b);
            }
            rpos.store(rd + n as u64, Ordering::Release);
        }
        n
    }

    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        match status(&self.ring, &self.peer, deadline) {
            Err(LinkError::Closed | LinkError::PeerDead) if self.unread() > 0 => Ok(()),
            other => other,
        }
    }

    fn peer_bytes(&mut self, fd: i32, offset: u64, len: usize) -> Result<&[u8], LinkError> {
        if self.arena.as_ref().is_none_or(|a| a.fd() != fd) {
            let pid = self.peer.pid();
            self.arena =
                Some(PeerArena::open(pid, fd).map_err(|e| {
                    LinkError::Io(format!("mapping the arena of process {pid}: {e}"))
                })?);
        }
        self.arena
            .as_ref()
            .and_then(|a| a.bytes(offset, len))
            .ok_or_else(|| {
                LinkError::Io(format!(
                    "a reference to {len} bytes at {offset} lies outside the peer's arena"
                ))
            })
    }

    fn ref_done(&mut self) {
        self.ring
            .atomic64(REFS_DONE)
            .fetch_add(1, Ordering::Release);
    }
}

impl ShmRx {
    /// Bytes published by the writer and not yet read.
    fn unread(&self) -> usize {
        let r = &self.ring;
        (r.atomic64(WRITE_POS).load(Ordering::Acquire)
            - r.atomic64(READ_POS).load(Ordering::Relaxed)) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_moves_bytes_across_wraparound() {
        let path = std::env::temp_dir().join(format!("gflow-ring-test-{}", std::process::id()));
        let tx_ring = Ring::create(&path).expect("create");
        let rx_ring = Ring::open(&path).expect("open");
        let me = Liveness::process(std::process::id());
        let (mut tx, mut rx) = (ShmTx::new(tx_ring, me.clone()), ShmRx::new(rx_ring, me));
        let data: Vec<u8> = (0..3 * RING_BYTES + 12345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let sent = data.clone();
        let h = std::thread::spawn(move || tx.write_all(&sent, deadline).map(|_| tx));
        let mut got = vec![0u8; data.len()];
        rx.read_exact(&mut got, deadline).expect("read");
        assert!(got == data);
        let mut tx = h.join().expect("writer thread").expect("write");
        tx.close();
        let mut one = [0u8; 1];
        assert_eq!(rx.read_exact(&mut one, deadline), Err(LinkError::Closed));
    }
}
