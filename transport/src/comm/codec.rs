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

/// The wire form of a payload reference: the arena's descriptor, then the offset.
pub(super) fn encode_ref(fd: i32, offset: u64) -> [u8; REF_LEN] {
    let mut b = [0; REF_LEN];
    b[..8].copy_from_slice(&i64::from(fd).to_le_bytes());
    b[8..].copy_from_slice(&offset.to_le_bytes());
    b
}

/// Reads [`encode_ref`]'s form (a descriptor out of range becomes -1, which maps nothing).
fn decode_ref(b: &[u8; REF_LEN]) -> (i32, u64) {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    let fd = i32::try_from(i64::from_le_bytes(w)).unwrap_or(-1);
    w.copy_from_slice(&b[8..]);
    (fd, u64::from_le_bytes(w))
}

/// Hands the `len`-byte payload that `reference` points to (in the peer's arena) to `sink`,
/// then tells the peer it has been read.
pub(super) fn read_by_ref(
    link: &mut dyn LinkRx,
    reference: &[u8; REF_LEN],
    len: usize,
    sink: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), LinkError> {
    let (fd, offset) = decode_ref(reference);
    sink(0, link.peer_bytes(fd, offset, len)?);
    link.ref_done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_bad_descriptors_map_nothing() {
        assert_eq!(decode_ref(&encode_ref(7, 1 << 40)), (7, 1 << 40));
        let mut b = encode_ref(0, 5);
        b[..8].copy_from_slice(&i64::MAX.to_le_bytes());
        assert_eq!(decode_ref(&b).0, -1);
    }
}
