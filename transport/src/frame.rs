//! The wire frame: every message carries (op, group, sequence, byte count) in a fixed 32-byte
//! header, so a receiver checks what arrives against what it expects before reading the
//! payload, and bounds the length before allocating anything.

use gflow_core::{CommOp, Tag};

/// Size of an encoded header.
pub const HEADER_LEN: usize = 32;
const MAGIC: u32 = 0x4746_4c31; // "GFL1"

/// The header of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The operation and group the message belongs to.
    pub tag: Tag,
    /// Per-link message counter (both sides count).
    pub seq: u64,
    /// Payload bytes (that follow, or that the peer reads from the sender's shared arena).
    pub len: u64,
    /// The payload is not on the link: a [`REF_LEN`]-byte reference to it in the sender's
    /// shared arena follows instead (links between processes of one host).
    pub by_ref: bool,
}

/// Bytes of a payload reference: the arena's descriptor, the offset, the run and the stride
/// (8 bytes each; a contiguous payload is one run).
pub const REF_LEN: usize = 32;

/// Why a header was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("truncated frame header ({0} bytes)")]
    Truncated(usize),
    /// Not a gflow frame.
    #[error("bad frame magic {0:#x}")]
    Magic(u32),
    /// Unknown operation code.
    #[error("unknown operation code {0}")]
    Op(u8),
    /// Unknown flags.
    #[error("unknown frame flags {0:#x}")]
    Flags(u8),
    /// A length over the configured bound.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Announced length.
        len: u64,
        /// The bound.
        max: u64,
    },
}

fn op_code(op: CommOp) -> u8 {
    match op {
        CommOp::P2p => 1,
        CommOp::AllGather => 2,
        CommOp::ReduceScatter => 3,
        CommOp::AllToAll => 4,
        CommOp::Broadcast => 5,
        CommOp::AllReduce => 6,
        _ => 0,
    }
}

fn op_of(code: u8) -> Option<CommOp> {
    Some(match code {
        1 => CommOp::P2p,
        2 => CommOp::AllGather,
        3 => CommOp::ReduceScatter,
        4 => CommOp::AllToAll,
        5 => CommOp::Broadcast,
        6 => CommOp::AllReduce,
        _ => return None,
    })
}

impl Header {
    /// The 32 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = op_code(self.tag.op);
        b[5] = u8::from(self.by_ref);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.tag.group.to_le_bytes());
        b
    }

    /// Parses and checks a header; `max_len` bounds the payload length.
    ///
    /// # Errors
    /// A [`FrameError`] for anything but a well-formed header within the bound.
    pub fn decode(b: &[u8], max_len: u64) -> Result<Header, FrameError> {
        if b.len() < HEADER_LEN {
            return Err(FrameError::Truncated(b.len()));
        }
        let word = |r: std::ops::Range<usize>| -> u64 {
            let mut a = [0u8; 8];
            a[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(a)
        };
        let magic = word(0..4) as u32;
        if magic != MAGIC {
            return Err(FrameError::Magic(magic));
        }
        let op = op_of(b[4]).ok_or(FrameError::Op(b[4]))?;
        if b[5] > 1 {
            return Err(FrameError::Flags(b[5]));
        }
        let len = word(16..24);
        if len > max_len {
            return Err(FrameError::TooLong { len, max: max_len });
        }
        Ok(Header {
            tag: Tag {
                op,
                group: word(24..32),
            },
            seq: word(8..16),
            len,
            by_ref: b[5] == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let h = Header {
            tag: Tag::new(CommOp::AllToAll, &[3, 1, 2]),
            seq: 7,
            len: 1 << 40,
            by_ref: true,
        };
        assert_eq!(Header::decode(&h.encode(), u64::MAX), Ok(h));
        assert_eq!(
            Header::decode(&h.encode(), 1 << 20),
            Err(FrameError::TooLong {
                len: 1 << 40,
                max: 1 << 20
            })
        );
    }

    proptest! {
        /// Random and truncated bytes give errors, never panics, and never a length past the bound.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 0u64..1 << 30) {
            if let Ok(h) = Header::decode(&bytes, max) {
                prop_assert!(h.len <= max);
            }
        }
    }
}
