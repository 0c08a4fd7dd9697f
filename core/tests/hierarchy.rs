//! Hierarchical collectives over fake topologies: ranks as threads, each told a host, counting
//! the bytes each host sends to the others. Results are checked against a reference computed
//! here (exact integer-valued sums; concatenations in group order), every member must end with
//! identical bits, and each host must send exactly its share over the "network".
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gflow_core::comm::InProcComm;
use gflow_core::{Collectives, CommError, Communicator, DType, Exchange, ReduceOp, Tag};

/// One rank of a mesh whose ranks run on `hosts[rank]`; counts what it sends off its host.
struct OnHost<'a> {
    inner: InProcComm,
    hosts: &'a [usize],
    off_host: &'a [AtomicU64],
}

impl Communicator for OnHost<'_> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        self.count(peer, data.len());
        self.inner.send(peer, tag, data)
    }

    fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError> {
        for s in &step.sends {
            self.count(s.peer, s.data.len());
        }
        self.inner.exchange(step)
    }

    fn host_of(&self, rank: usize) -> usize {
        self.hosts[rank]
    }
}

impl OnHost<'_> {
    /// Counts `bytes` sent to `peer` if it is on another host.
    fn count(&self, peer: usize, bytes: usize) {
        let host = self.hosts[self.rank()];
        if self.hosts[peer] != host {
            self.off_host[host].fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }
}

/// Runs `f(comm)` on every rank of a world whose rank r runs on `hosts[r]`; returns each rank's
/// result and the bytes each host (by its number) sent off-host.
fn run<T: Send>(hosts: &[usize], f: impl Fn(&OnHost<'_>) -> T + Sync) -> (Vec<T>, Vec<u64>) {
    let top = hosts.iter().max().map_or(0, |h| h + 1);
    let off_host: Vec<AtomicU64> = (0..top).map(|_| AtomicU64::new(0)).collect();
    let mesh = InProcComm::mesh(hosts.len(), Duration::from_secs(20));
    let out = std::thread::scope(|s| {
        let handles: Vec<_> = mesh
            .into_iter()
            .map(|inner| {
                let comm = OnHost {
                    inner,
                    hosts,
                    off_host: &off_host,
                };
                let f = &f;
                s.spawn(move || f(&comm))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    (
        out,
        off_host.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
    )
}

fn f64_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f64(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Rank r's input element i: integer-valued, so every summation order is exact.
fn input(r: usize, i: usize) -> f64 {
    ((r * 31 + i * 7) % 1000) as f64 - 500.0
}

/// The distinct hosts of a topology.
fn host_ids(hosts: &[usize]) -> Vec<usize> {
    let mut h = hosts.to_vec();
    h.sort_unstable();
    h.dedup();
    h
}

/// Topologies (host of each rank) that run hierarchically.
const TOPOLOGIES: &[&[usize]] = &[
    &[0, 0, 1, 1],
    &[0, 1, 0, 1],
    &[4, 4, 9, 9, 2, 2],
    &[0, 0, 0, 1, 1, 1],
];

#[test]
fn all_reduce_matches_the_reference_and_each_host_sends_its_share_once() {
    // 66_000 f64 (528 KB, divisible by every grid): each piece is over the flat thresholds
    for &hosts in TOPOLOGIES {
        let n = hosts.len();
        let elems = 66_000;
        let group: Vec<usize> = (0..n).collect();
        let (results, sent) = run(hosts, |c| {
            let mut data = f64_bytes(&(0..elems).map(|i| input(c.rank(), i)).collect::<Vec<_>>());
            c.all_reduce(&group, &mut data, DType::F64, ReduceOp::Sum)
                .unwrap();
            data
        });
        let want: Vec<f64> = (0..elems)
            .map(|i| (0..n).map(|r| input(r, i)).sum())
            .collect();
        for (r, got) in results.iter().enumerate() {
            assert_eq!(to_f64(got), want, "rank {r} of {hosts:?}");
        }
        // every host sends 2 (h - 1) / h of the buffer, as h ranks (one per host) would
        let h = host_ids(hosts).len() as u64;
        let share = 2 * (h - 1) * (elems as u64 * 8) / h;
        for host in host_ids(hosts) {
            assert_eq!(sent[host], share, "host {host} of {hosts:?}");
        }
    }
}

#[test]
fn all_reduce_of_rounding_floats_is_bit_identical_on_every_member() {
    for &hosts in TOPOLOGIES {
        let group: Vec<usize> = (0..hosts.len()).rev().collect();
        let (results, _) = run(hosts, |c| {
            let v: Vec<f32> = (0..40_001)
                .map(|i| ((c.rank() * 7919 + i * 104_729) % 9973) as f32 * 1e-3 + 0.1)
                .collect();
            let mut data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            c.all_reduce(&group, &mut data, DType::F32, ReduceOp::Sum)
                .unwrap();
            data
        });
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{hosts:?}");
        let got = f32::from_le_bytes(results[0][..4].try_into().unwrap());
        let want: f32 = (0..hosts.len())
            .map(|r| ((r * 7919) % 9973) as f32 * 1e-3 + 0.1)
            .sum();
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
}

#[test]
fn all_gather_puts_uneven_blocks_in_group_order_and_sends_each_once_per_host() {
    for &hosts in TOPOLOGIES {
        let n = hosts.len();
        let group: Vec<usize> = [1, 0]
            .iter()
            .chain(&(2..n).collect::<Vec<_>>())
            .copied()
            .collect();
        // member i of the group gives 40_000 + 17 i bytes
        let counts: Vec<usize> = (0..n).map(|i| 40_000 + 17 * i).collect();
        let block = |rank: usize, len: usize| -> Vec<u8> {
            (0..len).map(|k| (rank * 13 + k * 5) as u8).collect()
        };
        let (results, sent) = run(hosts, |c| {
            let me = group.iter().position(|&r| r == c.rank()).unwrap();
            c.all_gather(&group, &block(c.rank(), counts[me]), &counts)
                .unwrap()
        });
        let want: Vec<u8> = group
            .iter()
            .zip(&counts)
            .flat_map(|(&r, &len)| block(r, len))
            .collect();
        for got in &results {
            assert_eq!(got, &want, "{hosts:?}");
        }
        // each host sends its members' blocks once to every other host
        let others = host_ids(hosts).len() as u64 - 1;
        for host in host_ids(hosts) {
            let own: u64 = group
                .iter()
                .zip(&counts)
                .filter(|&(&r, _)| hosts[r] == host)
                .map(|(_, &c)| c as u64)
                .sum();
            assert_eq!(sent[host], own * others, "host {host} of {hosts:?}");
        }
    }
}

#[test]
fn reduce_scatter_gives_each_member_its_reduced_chunk() {
    for &hosts in TOPOLOGIES {
        let n = hosts.len();
        let group: Vec<usize> = (0..n).rev().collect();
        let counts: Vec<usize> = (0..n).map(|i| (9_000 + 3 * i) * 8).collect();
        let total: usize = counts.iter().sum::<usize>() / 8;
        let (results, sent) = run(hosts, |c| {
            let data = f64_bytes(&(0..total).map(|i| input(c.rank(), i)).collect::<Vec<_>>());
            let out = c
                .reduce_scatter(&group, &data, &counts, DType::F64, ReduceOp::Max)
                .unwrap();
            (c.rank(), out)
        });
        let mut start = vec![0];
        for c in &counts {
            start.push(start.last().unwrap() + c / 8);
        }
        for (rank, got) in results {
            let me = group.iter().position(|&r| r == rank).unwrap();
            let want: Vec<f64> = (start[me]..start[me + 1])
                .map(|i| (0..n).map(|r| input(r, i)).fold(f64::MIN, f64::max))
                .collect();
            assert_eq!(to_f64(&got), want, "rank {rank} of {hosts:?}");
        }
        // each host sends the other hosts' chunks, reduced over its members, once
        for host in host_ids(hosts) {
            let others: u64 = group
                .iter()
                .zip(&counts)
                .filter(|&(&r, _)| hosts[r] != host)
                .map(|(_, &c)| c as u64)
                .sum();
            assert_eq!(sent[host], others, "host {host} of {hosts:?}");
        }
    }
}

#[test]
fn small_messages_and_single_host_groups_run_flat() {
    // a 1 KiB all-reduce takes the flat schedule: recursive doubling sends the whole buffer
    let hosts = [0, 0, 1, 1];
    let (_, sent) = run(&hosts, |c| {
        let mut data = f64_bytes(&[c.rank() as f64; 128]);
        c.all_reduce(&[0, 1, 2, 3], &mut data, DType::F64, ReduceOp::Sum)
            .unwrap();
        data
    });
    assert_eq!(sent, vec![2048, 2048]);
}
