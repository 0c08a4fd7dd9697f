//! The direct exchange and the link protocol over fake links on a virtual clock, as
//! quinn-proto's `Pair`: every member's [`Engine`] is polled in turn on one thread, links are
//! in-memory pipes whose capacity and per-call limits the test sets, and time passes only when
//! a member idles. Faults (partial writes, a stalled reader, a dead peer, a reordered
//! collective, a truncated frame) are injected, not waited for, so each test takes
//! milliseconds and never depends on timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gflow_core::comm::{Payload, Reduction};
use gflow_core::{CommError, CommOp, DType, ReduceOp, Tag};

use super::exchange::{Clock, Engine, Failure, In, Out, drive};
use crate::frame::{HEADER_LEN, Header};
use crate::link::{Caps, LinkError, LinkRx, LinkTx};

/// A one-way in-memory pipe.
struct Pipe {
    bytes: VecDeque<u8>,
    /// Most bytes it holds.
    cap: usize,
    /// Most bytes one `try_write` takes (partial writes).
    max_write: usize,
    /// Most bytes one `try_read_with` hands over (partial reads).
    max_read: usize,
    /// The writer closed it.
    closed: bool,
    /// The writer's process died.
    dead: bool,
}

type Shared = Arc<Mutex<Pipe>>;

fn pipe(cap: usize, max_write: usize, max_read: usize) -> Shared {
    Arc::new(Mutex::new(Pipe {
        bytes: VecDeque::new(),
        cap,
        max_write,
        max_read,
        closed: false,
        dead: false,
    }))
}

struct FakeTx(Shared);
struct FakeRx(Shared);

const NONBLOCKING: Caps = Caps {
    nonblocking: true,
    shares_memory: false,
};

impl LinkTx for FakeTx {
    fn write_all(&mut self, bytes: &[u8], _: Instant) -> Result<(), LinkError> {
        self.0.lock().unwrap().bytes.extend(bytes);
        Ok(())
    }
    fn close(&mut self) {
        self.0.lock().unwrap().closed = true;
    }
    fn caps(&self) -> Caps {
        NONBLOCKING
    }
    fn try_write(&mut self, bytes: &[u8]) -> usize {
        let mut p = self.0.lock().unwrap();
        let n = bytes.len().min(p.max_write).min(p.cap - p.bytes.len());
        p.bytes.extend(&bytes[..n]);
        n
    }
    fn check(&self, deadline: Instant) -> Result<(), LinkError> {
        let _ = deadline;
        Ok(())
    }
}

impl LinkRx for FakeRx {
    fn read_with(
        &mut self,
        _: usize,
        _: Instant,
        _: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        Err(LinkError::Io(
            "the harness reads without waiting only".into(),
        ))
    }
    fn caps(&self) -> Caps {
        NONBLOCKING
    }
    fn try_read_with(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut p = self.0.lock().unwrap();
        let n = max.min(p.max_read).min(p.bytes.len());
        let piece: Vec<u8> = p.bytes.drain(..n).collect();
        drop(p);
        if n > 0 {
            f(&piece);
        }
        n
    }
    fn check(&self, _: Instant) -> Result<(), LinkError> {
        let p = self.0.lock().unwrap();
        match () {
            () if !p.bytes.is_empty() => Ok(()),
            () if p.dead => Err(LinkError::PeerDead),
            () if p.closed => Err(LinkError::Closed),
            () => Ok(()),
        }
    }
}

/// Time that passes 1 ms per idle, checking the links on every idle.
struct Virtual {
    now: Instant,
    idles: u32,
}

impl Virtual {
    fn new() -> Virtual {
        Virtual {
            now: Instant::now(),
            idles: 0,
        }
    }
}

impl Clock for Virtual {
    fn now(&self) -> Instant {
        self.now
    }
    fn idle(&mut self) {
        self.now += Duration::from_millis(1);
        self.idles += 1;
        assert!(self.idles < 100_000, "the exchange never gave up");
    }
    fn check_due(&mut self) -> bool {
        true
    }
    fn moved(&mut self) {}
}

const MAX_FRAME: u64 = 1 << 20;

/// A framed header as a sender writes it.
fn head(tag: Tag, seq: u64, len: usize) -> [u8; HEADER_LEN] {
    Header {
        tag,
        seq,
        len: len as u64,
        by_ref: false,
    }
    .encode()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Polls both engines in turn until both are done; panics if neither can move.
fn run_pair(a: &mut Engine<'_>, b: &mut Engine<'_>) {
    for _ in 0..1_000_000 {
        let moved = a.poll().unwrap() | b.poll().unwrap();
        if a.done() && b.done() {
            return;
        }
        assert!(moved, "both members are stuck");
    }
    panic!("no end");
}

/// Two members swap 1003 bytes (a's are 17 runs of 59 bytes at a stride of 100, columns of a
/// matrix, written run by run), then all-reduce 251 f32s by combining receives, over pipes of
/// 16 bytes that take 3 bytes per write and give 5 per read (so elements and runs split
/// between pieces): every byte arrives, in order, and the sums are exact.
#[test]
fn partial_writes_and_reads_deliver_every_byte() {
    let (ab, ba) = (pipe(16, 3, 5), pipe(16, 3, 5));
    let (mut tx_a, mut rx_a) = (FakeTx(ab.clone()), FakeRx(ba.clone()));
    let (mut tx_b, mut rx_b) = (FakeTx(ba), FakeRx(ab));
    let tag = Tag::new(CommOp::AllGather, &[0, 1]);
    let matrix: Vec<u8> = (0..1700).map(|i| (i * 7 + i / 100) as u8).collect();
    let from_a = Payload::strided(&matrix, 20, 59, 100, 17).unwrap();
    let from_b: Vec<u8> = (0..1003).map(|i| (i * 11) as u8).collect();
    let (mut got_a, mut got_b) = (vec![0; 1003], vec![0; 1003]);
    let (mut seq_a, mut seq_b) = (0, 0);
    {
        let mut a = Engine::new(0, MAX_FRAME, None);
        a.send(Out::new(1, &mut tx_a, head(tag, 0, 1003), from_a, None));
        a.copy(In::new(1, tag, 1003, &mut rx_a, &mut seq_a), &mut got_a);
        let mut b = Engine::new(1, MAX_FRAME, None);
        b.send(Out::new(
            0,
            &mut tx_b,
            head(tag, 0, 1003),
            from_b[..].into(),
            None,
        ));
        b.copy(In::new(0, tag, 1003, &mut rx_b, &mut seq_b), &mut got_b);
        run_pair(&mut a, &mut b);
    }
    let packed: Vec<u8> = (0..17)
        .flat_map(|r| matrix[r * 100 + 20..r * 100 + 79].to_vec())
        .collect();
    assert_eq!((got_a == from_b, got_b == packed), (true, true));
    assert_eq!((seq_a, seq_b), (1, 1), "each receive advanced its sequence");

    let tag = Tag::new(CommOp::ReduceScatter, &[0, 1]);
    let xa: Vec<f32> = (0..251).map(|i| i as f32).collect();
    let xb: Vec<f32> = (0..251).map(|i| 1000.0 - i as f32).collect();
    let (sa, sb) = (f32s(&xa), f32s(&xb));
    let (mut acc_a, mut acc_b) = (sa.clone(), sb.clone());
    {
        let mut a = Engine::new(0, MAX_FRAME, None);
        a.send(Out::new(
            1,
            &mut tx_a,
            head(tag, 1, sa.len()),
            sa[..].into(),
            None,
        ));
        a.combine(In::new(1, tag, sb.len(), &mut rx_a, &mut seq_a));
        a.accumulate(Reduction {
            acc: &mut acc_a,
            base: None,
            dtype: DType::F32,
            op: ReduceOp::Sum,
            from: vec![(1, tag)],
        });
        let mut b = Engine::new(1, MAX_FRAME, None);
        b.send(Out::new(
            0,
            &mut tx_b,
            head(tag, 1, sb.len()),
            sb[..].into(),
            None,
        ));
        b.combine(In::new(0, tag, sa.len(), &mut rx_b, &mut seq_b));
        b.accumulate(Reduction {
            acc: &mut acc_b,
            base: None,
            dtype: DType::F32,
            op: ReduceOp::Sum,
            from: vec![(0, tag)],
        });
        run_pair(&mut a, &mut b);
    }
    assert_eq!(acc_a, f32s(&vec![1000.0; 251]));
    assert_eq!(acc_a, acc_b);
}

/// A member whose peer never reads fills the pipe, then fails with a timeout naming that
/// peer once the deadline passes (virtual time: the test takes microseconds).
#[test]
fn a_stalled_reader_times_out_naming_it() {
    let p = pipe(64, 64, 64);
    let mut tx = FakeTx(p.clone());
    let data = vec![1u8; 1000];
    let tag = Tag::new(CommOp::AllGather, &[0, 1]);
    let mut a = Engine::new(0, MAX_FRAME, None);
    a.send(Out::new(
        1,
        &mut tx,
        head(tag, 0, 1000),
        data[..].into(),
        None,
    ));
    let mut clock = Virtual::new();
    let deadline = clock.now + Duration::from_millis(100);
    let started = Instant::now();
    let r = drive(&mut a, &mut clock, deadline, &|r| r);
    assert!(
        matches!(r, Err(Failure::Link(1, LinkError::Timeout))),
        "{r:?}"
    );
    assert!(clock.now > deadline && clock.now < deadline + Duration::from_millis(5));
    assert_eq!(p.lock().unwrap().bytes.len(), 64, "it wrote what fitted");
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A peer that dies mid-message fails the receive at once with `PeerDead` (not at the
/// deadline), and what the communicator knows of a dead process outranks a mere timeout.
#[test]
fn a_dead_peer_fails_the_exchange_before_the_deadline() {
    let p = pipe(1 << 10, 1 << 10, 1 << 10);
    let tag = Tag::new(CommOp::AllGather, &[0, 1]);
    FakeTx(p.clone()).try_write(&head(tag, 0, 100));
    p.lock().unwrap().dead = true;
    let (mut rx, mut seq, mut out) = (FakeRx(p), 0, vec![0; 100]);
    let mut a = Engine::new(0, MAX_FRAME, None);
    a.copy(In::new(1, tag, 100, &mut rx, &mut seq), &mut out);
    let mut clock = Virtual::new();
    let deadline = clock.now + Duration::from_secs(30);
    let r = drive(&mut a, &mut clock, deadline, &|r| r);
    assert!(
        matches!(r, Err(Failure::Link(1, LinkError::PeerDead))),
        "{r:?}"
    );
    assert!(clock.now < deadline);
    assert_eq!(
        seq, 0,
        "an unfinished message does not advance the sequence"
    );
}

/// Members that issue collectives in different orders, or skip a message, get `Desync`
/// naming both sides, never each other's bytes.
#[test]
fn a_reordered_collective_is_a_desync() {
    let group = [0, 1];
    let gather = Tag::new(CommOp::AllGather, &group);
    let scatter = Tag::new(CommOp::ReduceScatter, &group);
    for (sent, seq) in [(gather, 0), (scatter, 1)] {
        let p = pipe(1 << 10, 1 << 10, 1 << 10);
        let mut tx = FakeTx(p.clone());
        tx.try_write(&head(sent, seq, 8));
        tx.try_write(&[9; 8]);
        let (mut rx, mut next, mut out) = (FakeRx(p), 0, vec![0; 8]);
        let mut a = Engine::new(0, MAX_FRAME, None);
        a.copy(In::new(1, scatter, 8, &mut rx, &mut next), &mut out);
        let r = drive(
            &mut a,
            &mut Virtual::new(),
            Instant::now() + Duration::from_secs(1),
            &|r| r,
        );
        match r {
            Err(Failure::Comm(CommError::Desync {
                peer: 1,
                expected,
                got,
                ..
            })) => {
                assert!(
                    expected.contains("reduce_scatter") && expected.contains("#0"),
                    "{expected}"
                );
                assert!(got.contains(&format!("#{seq}")), "{got}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out, [0; 8], "no byte of the wrong message was taken");
    }
}

/// A frame cut short by its sender's close is `Closed` (the communicator's `PeerGone`), and a
/// header that claims more than the frame limit is refused as a bad frame, not allocated.
#[test]
fn a_truncated_or_oversized_frame_is_an_error() {
    let tag = Tag::new(CommOp::Broadcast, &[0, 1]);
    let p = pipe(1 << 10, 1 << 10, 1 << 10);
    let mut tx = FakeTx(p.clone());
    tx.try_write(&head(tag, 0, 100));
    tx.try_write(&[5; 40]);
    tx.close();
    let (mut rx, mut seq, mut out) = (FakeRx(p), 0, vec![0; 100]);
    let mut a = Engine::new(0, MAX_FRAME, None);
    a.copy(In::new(1, tag, 100, &mut rx, &mut seq), &mut out);
    let r = drive(
        &mut a,
        &mut Virtual::new(),
        Instant::now() + Duration::from_secs(1),
        &|r| r,
    );
    assert!(
        matches!(r, Err(Failure::Link(1, LinkError::Closed))),
        "{r:?}"
    );
    assert_eq!(&out[..40], &[5; 40]);

    let p = pipe(1 << 10, 1 << 10, 1 << 10);
    FakeTx(p.clone()).try_write(&head(tag, 0, 1 << 30));
    let (mut rx, mut seq, mut out) = (FakeRx(p), 0, vec![0; 1 << 10]);
    let mut a = Engine::new(0, MAX_FRAME, None);
    a.copy(In::new(1, tag, 1 << 10, &mut rx, &mut seq), &mut out);
    let r = drive(
        &mut a,
        &mut Virtual::new(),
        Instant::now() + Duration::from_secs(1),
        &|r| r,
    );
    assert!(
        matches!(&r, Err(Failure::Comm(CommError::Transport { reason, .. })) if reason.contains("bad frame")),
        "{r:?}"
    );
}
