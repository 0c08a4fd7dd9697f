//! Collectives on buffers in the shared arena (this binary installs `gflow::ShmAlloc`): between
//! processes of one host their payloads move by reference, copied once by the receiver straight
//! out of the sender's buffer. Each result is checked against the collective's definition
//! computed in one process; the values are small integers, so sums in any order are exact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gflow::{Collectives, DType, ReduceOp, Result};

#[global_allocator]
static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;

/// Rank `rank`'s `len` values for part `salt` of a collective.
fn values(rank: usize, len: usize, salt: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + rank * 13 + salt * 5) % 101) as f32 - 50.0)
        .collect()
}

/// Elements rank `from` sends to rank `to` (uneven, every message over the by-reference size).
fn count(from: usize, to: usize) -> usize {
    150_000 + 1_000 * from + 3 * to
}

fn bytes(v: &[f32]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Every collective at sizes that go by reference, on `n` ranks; per rank: whether each result
/// equals its definition, and whether the inputs were in the shared arena at all.
fn all_collectives(n: usize) -> Result<Vec<(Vec<bool>, bool)>> {
    common::world(n, move |env| {
        let (c, me) = (env.comm(), env.rank());
        let group: Vec<usize> = (0..n).collect();
        let f32s = |b: Vec<u8>| bytemuck::cast_slice::<u8, f32>(&b).to_vec();
        let mut ok = vec![];

        // all_gather, uneven counts
        let counts: Vec<usize> = (0..n).map(|r| count(r, 0) * 4).collect();
        let mine = values(me, count(me, 0), 0);
        let in_arena = gflow_transport::arena::locate(bytes(&mine)).is_some();
        let got = f32s(c.all_gather(&group, bytes(&mine), &counts)?);
        let want: Vec<f32> = (0..n).flat_map(|r| values(r, count(r, 0), 0)).collect();
        ok.push(got == want);

        // reduce_scatter: member i's chunk summed over the ranks
        let chunks: Vec<usize> = (0..n).map(|i| count(0, i)).collect();
        let data: Vec<f32> = (0..n).flat_map(|i| values(me, chunks[i], i)).collect();
        let got = f32s(c.reduce_scatter(
            &group,
            bytes(&data),
            &chunks.iter().map(|k| k * 4).collect::<Vec<_>>(),
            DType::F32,
            ReduceOp::Sum,
        )?);
        let parts: Vec<Vec<f32>> = (0..n).map(|r| values(r, chunks[me], me)).collect();
        let want: Vec<f32> = (0..chunks[me])
            .map(|k| parts.iter().map(|v| v[k]).sum())
            .collect();
        ok.push(got == want);

        // all_reduce (max and sum), 1.5 MB
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let mut x = values(me, 400_003, 9);
            c.all_reduce(&group, bytemuck::cast_slice_mut(&mut x), DType::F32, op)?;
            let all: Vec<Vec<f32>> = (0..n).map(|r| values(r, 400_003, 9)).collect();
            let want: Vec<f32> = (0..x.len())
                .map(|k| match op {
                    ReduceOp::Max => all.iter().map(|v| v[k]).fold(f32::MIN, f32::max),
                    _ => all.iter().map(|v| v[k]).sum(),
                })
                .collect();
            ok.push(x == want);
        }

        // all_to_all, uneven both ways
        let sends: Vec<Vec<f32>> = (0..n).map(|to| values(me, count(me, to), to)).collect();
        let send_refs: Vec<&[u8]> = sends.iter().map(|v| bytes(v)).collect();
        let recv: Vec<usize> = (0..n).map(|from| count(from, me) * 4).collect();
        let got = c.all_to_all(&group, &send_refs, &recv)?;
        ok.push((0..n).all(|from| f32s(got[from].clone()) == values(from, count(from, me), me)));

        // all_to_all of column blocks (runs at a stride, sent unpacked): each rank's matrix
        // of 37 rows x 9000 columns, member q's columns in proportion to q + 1
        let (rows, cols) = (37, 9_000);
        let bounds: Vec<usize> = (0..=n)
            .map(|q| cols * q * (q + 1) / (n * (n + 1)))
            .collect();
        let matrix = values(me, rows * cols, 11);
        let sends: Vec<gflow::comm::Payload<'_>> = (0..n)
            .map(|q| {
                let (at, run) = (bounds[q] * 4, (bounds[q + 1] - bounds[q]) * 4);
                gflow::comm::Payload::strided(bytes(&matrix), at, run, cols * 4, rows).unwrap()
            })
            .collect();
        let mine = bounds[me + 1] - bounds[me];
        let mut got = vec![0f32; n * rows * mine];
        let recv = vec![rows * mine * 4; n];
        c.all_to_all_payloads_into(&group, &sends, &recv, bytemuck::cast_slice_mut(&mut got))?;
        let want: Vec<f32> = (0..n)
            .flat_map(|from| {
                let m = values(from, rows * cols, 11);
                let mine = bounds[me]..bounds[me + 1];
                (0..rows).flat_map(move |r| m[r * cols + mine.start..r * cols + mine.end].to_vec())
            })
            .collect();
        ok.push(got == want);

        // broadcast from the last rank
        let root = n - 1;
        let x = values(root, 300_001, 4);
        let got = f32s(c.broadcast(&group, root, bytes(&x), x.len() * 4)?);
        ok.push(got == x);
        Ok((ok, in_arena))
    })
}

/// [`all_collectives`] on `n` ranks: every result right, every input in the arena.
fn check_all(n: usize) -> Result<()> {
    for (ok, in_arena) in all_collectives(n)? {
        assert!(in_arena, "large buffers should live in the arena");
        assert!(ok.iter().all(|&b| b), "results: {ok:?}");
    }
    Ok(())
}

#[test]
fn collectives_by_reference_2_ranks() -> Result<()> {
    check_all(2)
}

#[test]
fn collectives_by_reference_3_ranks() -> Result<()> {
    check_all(3)
}

/// Both tests again as processes over shared memory (payloads by reference) and over QUIC.
#[test]
fn as_processes() {
    common::relaunch(&[
        ("collectives_by_reference_2_ranks", 2),
        ("collectives_by_reference_3_ranks", 3),
    ]);
}

/// A reader that dies without acknowledging a payload sent by reference: the sender, waiting
/// for the acknowledgement, fails with `PeerExited` naming it within 10 s instead of hanging.
/// Two processes of this test started by hand (the launcher would stop the survivor itself).
#[test]
fn a_dead_reader_fails_the_sender() {
    const ROLE: &str = "GFLOW_ARENA_TEST_ROLE";
    if std::env::var_os(ROLE).is_some() {
        let env = gflow::init().expect("join");
        if env.rank() == 1 {
            // SAFETY: raising a signal in this process has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
        let data = values(0, 1 << 20, 0);
        assert!(gflow_transport::arena::locate(bytes(&data)).is_some());
        let t = Instant::now();
        let r = env.comm().all_gather(&[0, 1], bytes(&data), &[4 << 20; 2]);
        let err = format!("{:?}", r.expect_err("the peer is dead"));
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t.elapsed()
        );
        assert!(
            err.contains("PeerExited") && err.contains("peer: 1"),
            "{err}"
        );
        println!("survivor saw: {err}");
        return;
    }
    if gflow::launched() {
        return;
    }
    let port = common::free_port();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            Command::new(std::env::current_exe().unwrap())
                .args(["a_dead_reader_fails_the_sender", "--exact", "--nocapture"])
                .envs([
                    (ROLE, "1"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", &port),
                    ("WORLD_SIZE", "2"),
                    ("GFLOW_JOB_TOKEN", "arena-test"),
                    ("GFLOW_TIMEOUT_SECS", "60"),
                ])
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let survivor = String::from_utf8_lossy(&outs[0].stdout);
    assert!(
        outs[0].status.success() && survivor.contains("survivor saw"),
        "rank 0: {survivor}\n{}",
        String::from_utf8_lossy(&outs[0].stderr)
    );
    assert!(!outs[1].status.success(), "rank 1 should have been killed");
}
