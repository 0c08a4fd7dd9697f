//! The collectives over real links, ranks as threads of this process: shared-memory rings
//! (direct exchanges), QUIC over loopback (queued sends) and TLS over TCP (direct exchanges over
//! sockets), with uneven counts, against sums and concatenations computed here. Values are
//! small integers, so every sum is exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use gflow_core::{Collectives, CommOp, Communicator, DType, ReduceOp, Schedule, Tag};
use gflow_transport::NetComm;
use gflow_transport::link::{LinkPair, Liveness};
use gflow_transport::quic::{Peer, QuicNode};
use gflow_transport::shm::{Ring, ShmRx, ShmTx};
use gflow_transport::tcp::{self, TcpNode};
use proptest::prelude::*;

const TIMEOUT: Duration = Duration::from_secs(20);

/// `n` communicators joined pairwise by shared-memory rings.
fn shm_mesh(n: usize) -> Vec<NetComm> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = |a: usize, b: usize| {
        std::env::temp_dir().join(format!("gflow-mesh-{}-{id}-{a}-{b}", std::process::id()))
    };
    let me = Liveness::process(std::process::id());
    let created: Vec<Vec<Option<Ring>>> = (0..n)
        .map(|a| {
            (0..n)
                .map(|b| (a != b).then(|| Ring::create(&path(a, b)).unwrap()))
                .collect()
        })
        .collect();
    created
        .into_iter()
        .enumerate()
        .map(|(a, outs)| {
            let links: Vec<Option<LinkPair>> = outs
                .into_iter()
                .enumerate()
                .map(|(b, out)| {
                    out.map(|out| {
                        let inc = Ring::open(&path(b, a)).unwrap();
                        let pair: LinkPair = (
                            Box::new(ShmTx::new(out, me.clone())),
                            Box::new(ShmRx::new(inc, me.clone())),
                        );
                        pair
                    })
                })
                .collect();
            (a, links)
        })
        .map(|(a, links)| NetComm::new(a, links, TIMEOUT, 1 << 30))
        .collect()
}

/// `n` communicators joined pairwise by QUIC connections over loopback: rank r offers 1 + r % 3
/// connections per link, so pairs link by 1, 2 or 3 striped connections.
fn quic_mesh(n: usize) -> Vec<NetComm> {
    let lo = IpAddr::from([127, 0, 0, 1]);
    let nodes: Vec<QuicNode> = (0..n).map(|_| QuicNode::bind(lo).unwrap()).collect();
    let peers: Vec<Peer> = nodes
        .iter()
        .enumerate()
        .map(|(rank, q)| Peer {
            rank,
            addr: SocketAddr::new(lo, q.port().unwrap()),
            fingerprint: q.fingerprint(),
        })
        .collect();
    for (r, q) in nodes.iter().enumerate() {
        q.serve(&peers[r + 1..]).unwrap();
    }
    let deadline = Instant::now() + TIMEOUT;
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(r, q)| {
                let others: Vec<Peer> = peers.iter().filter(|p| p.rank != r).cloned().collect();
                s.spawn(move || {
                    let mut links: Vec<Option<LinkPair>> = (0..n).map(|_| None).collect();
                    for (p, pair) in q.link_all(r, 1, &others, 1 + r % 3, deadline).unwrap() {
                        links[p] = Some(pair);
                    }
                    NetComm::new(r, links, TIMEOUT, 1 << 30)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `n` communicators joined pairwise by TLS-over-TCP links over loopback.
fn tcp_mesh(n: usize) -> Vec<NetComm> {
    let lo = IpAddr::from([127, 0, 0, 1]);
    let nodes: Vec<TcpNode> = (0..n).map(|_| TcpNode::bind(lo).unwrap()).collect();
    let peers: Vec<tcp::Peer> = nodes
        .iter()
        .enumerate()
        .map(|(rank, t)| tcp::Peer {
            rank,
            addr: SocketAddr::new(lo, t.port().unwrap()),
            fingerprint: t.fingerprint(),
        })
        .collect();
    let deadline = Instant::now() + TIMEOUT;
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(r, t)| {
                let others: Vec<tcp::Peer> =
                    peers.iter().filter(|p| p.rank != r).cloned().collect();
                s.spawn(move || {
                    let mut links: Vec<Option<LinkPair>> = (0..n).map(|_| None).collect();
                    for (p, pair) in t.link_all(r, 1, &others, deadline).unwrap() {
                        links[p] = Some(pair);
                    }
                    NetComm::new(r, links, TIMEOUT, 1 << 30)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Rank r's value of element i.
fn value(r: usize, i: usize) -> f64 {
    ((r * 31 + i * 7) % 13) as f64 - 6.0
}

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f64> {
    b.chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs every collective on `comms` (one thread per rank) with per-member element counts
/// `counts`, and checks each result.
fn check_all(comms: Vec<NetComm>, counts: &[usize]) {
    let n = comms.len();
    let rounded: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(vec![]);
    let group: Vec<usize> = (0..n).collect();
    let total: usize = counts.iter().sum();
    let byte_counts: Vec<usize> = counts.iter().map(|c| c * 8).collect();
    let starts: Vec<usize> = (0..n).map(|i| counts[..i].iter().sum()).collect();
    std::thread::scope(|s| {
        // Each thread owns (and at its end drops) its communicator: closing waits for the
        // peers to close too, so they must close concurrently, as processes do.
        for (r, c) in comms.into_iter().enumerate() {
            let (group, byte_counts, starts, rounded) = (&group, &byte_counts, &starts, &rounded);
            s.spawn(move || {
                // all_reduce of values whose sums round: every rank gets the same bits
                let mut data = bytes(
                    &(0..total)
                        .map(|i| (value(r, i) / 3.0).sin())
                        .collect::<Vec<_>>(),
                );
                c.all_reduce(group, &mut data, DType::F64, ReduceOp::Sum)
                    .unwrap();
                for (i, got) in floats(&data).iter().enumerate() {
                    let want: f64 = (0..n).map(|k| (value(k, i) / 3.0).sin()).sum();
                    assert!((got - want).abs() < 1e-12, "rounded all_reduce on rank {r}");
                }
                rounded.lock().unwrap().push(data);

                // all_reduce of `total` elements: the sum over ranks
                let mut data = bytes(&(0..total).map(|i| value(r, i)).collect::<Vec<_>>());
                c.all_reduce(group, &mut data, DType::F64, ReduceOp::Sum)
                    .unwrap();
                let want: Vec<f64> = (0..total)
                    .map(|i| (0..n).map(|k| value(k, i)).sum())
                    .collect();
                assert_eq!(floats(&data), want, "all_reduce on rank {r}");

                // all_gather: member k contributes counts[k] elements
                let mine = bytes(&(0..counts[r]).map(|i| value(r, i)).collect::<Vec<_>>());
                let got = c.all_gather(group, &mine, byte_counts).unwrap();
                let want: Vec<f64> = (0..n)
                    .flat_map(|k| (0..counts[k]).map(move |i| value(k, i)))
                    .collect();
                assert_eq!(floats(&got), want, "all_gather on rank {r}");

                // a queued point-to-point message between two direct steps keeps its place
                let next = (r + 1) % n;
                let prev = (r + n - 1) % n;
                c.send(next, CommOp::P2p.into(), &mine).unwrap();

                let mut from_prev = vec![0u8; counts[prev] * 8];
                c.recv_into(prev, Tag::from(CommOp::P2p), &mut from_prev)
                    .unwrap();
                let want: Vec<f64> = (0..counts[prev]).map(|i| value(prev, i)).collect();
                assert_eq!(floats(&from_prev), want, "p2p on rank {r}");

                // reduce_scatter: chunk k of the sum goes to member k
                let data = bytes(&(0..total).map(|i| value(r, i)).collect::<Vec<_>>());
                let got = c
                    .reduce_scatter(group, &data, byte_counts, DType::F64, ReduceOp::Max)
                    .unwrap();
                let want: Vec<f64> = (starts[r]..starts[r] + counts[r])
                    .map(|i| (0..n).map(|k| value(k, i)).fold(f64::MIN, f64::max))
                    .collect();
                assert_eq!(floats(&got), want, "reduce_scatter on rank {r}");

                // all_to_all: rank r sends counts[k] elements (value(r, 1000k + i)) to member k
                let parts: Vec<Vec<u8>> = (0..n)
                    .map(|k| {
                        bytes(
                            &(0..counts[k])
                                .map(|i| value(r, 1000 * k + i))
                                .collect::<Vec<_>>(),
                        )
                    })
                    .collect();
                let sends: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                let recv_counts = vec![counts[r] * 8; n];
                let got = c.all_to_all(group, &sends, &recv_counts).unwrap();
                for (k, g) in got.iter().enumerate() {
                    let want: Vec<f64> = (0..counts[r]).map(|i| value(k, 1000 * r + i)).collect();
                    assert_eq!(floats(g), want, "all_to_all from {k} on rank {r}");
                }

                // broadcast from the last member
                let root = n - 1;
                let got = c.broadcast(group, root, &mine, byte_counts[root]).unwrap();
                let want: Vec<f64> = (0..counts[root]).map(|i| value(root, i)).collect();
                assert_eq!(floats(&got), want, "broadcast on rank {r}");
            });
        }
    });
    let rounded = rounded.into_inner().unwrap();
    assert!(
        rounded.windows(2).all(|w| w[0] == w[1]),
        "all ranks hold identical bits"
    );
}

fn pin(comms: Vec<NetComm>, schedule: Schedule) -> Vec<NetComm> {
    comms
        .into_iter()
        .map(|c| c.with_schedule(schedule))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Shared memory, direct exchanges, rings and recursive doubling: uneven counts (zero
    /// included), messages larger than a ring buffer, group sizes that are and are not powers
    /// of two.
    #[test]
    fn shared_memory_collectives(
        counts in proptest::collection::vec(
            prop_oneof![Just(0usize), 1usize..40, Just(700_000usize)], 2..=5),
        schedule in prop_oneof![
            Just(Schedule::Direct), Just(Schedule::Ring), Just(Schedule::Doubling)],
    ) {
        check_all(pin(shm_mesh(counts.len()), schedule), &counts);
    }
}

/// QUIC: the same checks over loopback connections, every schedule.
#[test]
fn quic_collectives() {
    for schedule in [Schedule::Direct, Schedule::Ring, Schedule::Doubling] {
        for counts in [vec![3, 0, 5], vec![300_000, 7], vec![1, 2, 3, 4]] {
            check_all(pin(quic_mesh(counts.len()), schedule), &counts);
        }
    }
}

#[test]
fn tcp_collectives() {
    for schedule in [Schedule::Direct, Schedule::Ring, Schedule::Doubling] {
        for counts in [vec![3, 0, 5], vec![300_000, 7], vec![1, 2, 3, 4]] {
            check_all(pin(tcp_mesh(counts.len()), schedule), &counts);
        }
    }
}

/// Sends over TLS-over-TCP, large ones encrypted at once into the link (no queue copy) and
/// small or crowded ones queued: both ranks send 2 x 24 MiB before receiving (so a send that
/// waited for its receiver would hang), then a mix, received, then at once an all_reduce (a
/// direct exchange, which must wait for the last staged records), then a last send; every
/// byte arrives in order.
#[test]
fn tcp_sends_large_and_small_arrive_in_order_and_never_wait() {
    let comms = tcp_mesh(2);
    let msg = |r: usize, k: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) >> 7) as u8 ^ (r * 16 + k) as u8)
            .collect()
    };
    let rounds: [&[usize]; 3] = [
        &[24 << 20, 24 << 20],
        &[100, 24 << 20, 70_000, 9 << 20],
        &[3],
    ];
    std::thread::scope(|s| {
        for (r, c) in comms.into_iter().enumerate() {
            s.spawn(move || {
                let peer = 1 - r;
                let p2p = Tag::from(CommOp::P2p);
                for (round, sizes) in rounds.iter().enumerate() {
                    let started = Instant::now();
                    for (k, &len) in sizes.iter().enumerate() {
                        c.send(peer, p2p, &msg(r, 4 * round + k, len)).unwrap();
                    }
                    assert!(started.elapsed() < Duration::from_secs(10), "sends waited");
                    for (k, &len) in sizes.iter().enumerate() {
                        let mut got = vec![0u8; len];
                        c.recv_into(peer, p2p, &mut got).unwrap();
                        assert!(got == msg(peer, 4 * round + k, len), "{round}.{k} on {r}");
                    }
                    let mut x = bytes(&[r as f64 + 1.0; 20_000]);
                    c.all_reduce(&[0, 1], &mut x, DType::F64, ReduceOp::Sum)
                        .unwrap();
                    assert_eq!(floats(&x), vec![3.0; 20_000], "all_reduce on rank {r}");
                }
            });
        }
    });
}
