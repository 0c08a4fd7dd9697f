//! Payloads by reference: a payload in this process's shared arena goes to a peer that maps the
//! arena as (descriptor, offset) instead of its bytes; the peer reads it in place and says so.

use crate::frame::REF_LEN;
use crate::link::{LinkError, LinkRx};

/// Payloads from this size up, in this process's shared arena, go to peers that share memory as
/// references (one copy, by the receiver) rather than through the link (two copies).
pub const REF_MIN_BYTES: usize = 64 << 10;

/// Whether payloads in the shared arena go by reference: unless `GFLOW_SHM_REFS=0` (for
/// comparisons; every rank of a job must see the same).
pub fn refs_enabled() -> bool {
    std::env::var("GFLOW_SHM_REFS").map_or(true, |v| v != "0")
}

/// Where a payload lies in its sender's arena: the arena's descriptor, the offset of its first
/// byte and its layout there, (run, stride) in bytes ([`gflow_core::comm::Payload::layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reference {
    pub fd: i32,
    pub offset: u64,
    pub run: u64,
    pub stride: u64,
}

impl Reference {
    /// The wire form: descriptor, offset, run, stride, 8 bytes each.
    pub(super) fn encode(&self) -> [u8; REF_LEN] {
        let mut b = [0; REF_LEN];
        let words = [
            i64::from(self.fd) as u64,
            self.offset,
            self.run,
            self.stride,
        ];
        for (c, w) in b.chunks_exact_mut(8).zip(words) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Reads [`Reference::encode`]'s form (a descriptor out of range becomes -1, which maps
    /// nothing).
    fn decode(b: &[u8; REF_LEN]) -> Reference {
        let mut w = [0u64; 4];
        for (x, c) in w.iter_mut().zip(b.chunks_exact(8)) {
            *x = u64::from_le_bytes(c.try_into().unwrap_or_default());
        }
        Reference {
            fd: i32::try_from(w[0] as i64).unwrap_or(-1),
            offset: w[1],
            run: w[2],
            stride: w[3],
        }
    }

    /// The bytes of the sender's arena that `len` payload bytes in this layout span: their
    /// (run, stride, span length), or an error for a layout that cannot hold them.
    fn extent(&self, len: usize) -> Result<(usize, usize, usize), LinkError> {
        let bad = || {
            LinkError::Io(format!(
                "malformed payload reference {self:?} for {len} bytes"
            ))
        };
        let run = usize::try_from(self.run).map_err(|_| bad())?;
        let stride = usize::try_from(self.stride).map_err(|_| bad())?;
        if len == 0 {
            return Ok((run, stride, 0));
        }
        if run == 0 || run > stride || !len.is_multiple_of(run) {
            return Err(bad());
        }
        let span = (len / run - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(run))
            .ok_or_else(bad)?;
        Ok((run, stride, span))
    }
}

/// Hands the `len`-byte payload that `reference` points to (in the peer's arena) to `sink`, run
/// by run, then tells the peer it has been read.
pub(super) fn read_by_ref(
    link: &mut dyn LinkRx,
    reference: &[u8; REF_LEN],
    len: usize,
    sink: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), LinkError> {
    let r = Reference::decode(reference);
    let (run, stride, span) = r.extent(len)?;
    let bytes = link.peer_bytes(r.fd, r.offset, span)?;
    if run == stride || len == 0 {
        sink(0, bytes);
    } else {
        for (k, c) in bytes.chunks(stride).enumerate() {
            sink(k * run, &c[..run]);
        }
    }
    link.ref_done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_bad_ones_are_refused() {
        let r = Reference {
            fd: 7,
            offset: 1 << 40,
            run: 24,
            stride: 96,
        };
        assert_eq!(Reference::decode(&r.encode()), r);
        assert_eq!(r.extent(72).unwrap(), (24, 96, 2 * 96 + 24));
        let mut b = r.encode();
        b[..8].copy_from_slice(&i64::MAX.to_le_bytes());
        assert_eq!(Reference::decode(&b).fd, -1);
        for (run, stride, len) in [(0, 8, 8), (16, 8, 16), (24, 96, 50), (1, u64::MAX, 4)] {
            let bad = Reference { run, stride, ..r };
            assert!(bad.extent(len).is_err(), "{bad:?} for {len} bytes");
        }
    }
}
