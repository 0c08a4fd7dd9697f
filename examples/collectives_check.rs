//! Every collective (all_reduce with sum, max and min, in place and into another buffer,
//! all_gather with uneven counts, reduce_scatter, all_to_all with uneven counts both ways,
//! broadcast from every root, barrier) on several sizes and dtypes, over the whole world and
//! over the even ranks, each result checked against a reference this rank computes by itself
//! from every rank's deterministic input. Prints one line per rank and exits non-zero on the
//! first mismatch, naming it.
//!
//! `GFLOW_CHECK_ROUNDS` (default 1) repeats it, pausing `GFLOW_CHECK_PAUSE_MS` between rounds
//! and saying `round K ok` on stderr after each; `GFLOW_TEST_KILL=RANK:ROUND` has that rank
//! SIGKILL itself at that round, and `GFLOW_CHECK_LEAVE=RANK:ROUND` has that rank finish in
//! order after that round while the others go on without it (the fault tests of
//! `tests/hosts.rs`).
//!
//! Run: `./target/release/gflow-launch --nproc-per-node 4 ./target/release/examples/collectives_check`

use gflow::prelude::*;
use gflow::{Communicator, DType, Error, ReduceOp};

/// Element counts: one, a few hundred, and past the recursive-doubling all_reduce (odd, so splits
/// are uneven). `GFLOW_COLLECTIVES=ring|direct|doubling` forces every schedule on any size.
const SIZES: [usize; 3] = [1, 300, 20_011];
const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::I32, DType::I64];

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Element `i` of the input of group member `who` in case `case`: small integers, exact in
/// every dtype and in any order of summation.
fn value(who: usize, i: usize, case: usize) -> f64 {
    ((who * 31 + i * 7 + case * 13) % 17) as f64 - 8.0
}

/// `xs` as `dtype`'s little-endian bytes.
fn encode(dtype: DType, xs: impl Iterator<Item = f64>) -> Vec<u8> {
    let mut out = vec![];
    for x in xs {
        match dtype {
            DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
            _ => out.extend_from_slice(&(x as i64).to_le_bytes()),
        }
    }
    out
}

/// Compares a result with its reference; the error names the case and the first difference.
fn check(what: &str, got: &[u8], want: &[u8]) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b);
    Err(Error::Internal(format!(
        "{what}: wrong result ({} bytes, expected {}; first difference at byte {at:?})",
        got.len(),
        want.len()
    )))
}

/// One round of every collective over `group` (this rank is a member); returns the checks made.
fn round(c: &dyn Communicator, group: &[usize], r: usize) -> Result<usize> {
    let n = group.len();
    let me = group.iter().position(|&g| g == c.rank()).unwrap_or(0);
    let mut checks = 0;
    for (di, &dt) in DTYPES.iter().enumerate() {
        for (si, &len) in SIZES.iter().enumerate() {
            let case = r * 100 + di * 10 + si;
            let name = |op: &str| format!("{op} of {len} x {dt:?} over {group:?} (round {r})");
            let input = |who: usize, case: usize| (0..len).map(move |i| value(who, i, case));
            for (k, op) in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]
                .into_iter()
                .enumerate()
            {
                let mut data = encode(dt, input(me, case + k));
                // out of place first: the input must come back untouched
                let mut out = vec![0xA5; data.len()];
                c.all_reduce_into(group, &data, &mut out, dt, op)?;
                check(
                    &name(&format!("all_reduce_into's input ({op:?})")),
                    &data,
                    &encode(dt, input(me, case + k)),
                )?;
                c.all_reduce(group, &mut data, dt, op)?;
                check(&name(&format!("all_reduce_into {op:?}")), &out, &data)?;
                let want = encode(
                    dt,
                    (0..len).map(|i| {
                        let xs = (0..n).map(|w| value(w, i, case + k));
                        match op {
                            ReduceOp::Sum => xs.sum(),
                            ReduceOp::Max => xs.fold(f64::MIN, f64::max),
                            _ => xs.fold(f64::MAX, f64::min),
                        }
                    }),
                );
                check(&name(&format!("all_reduce {op:?}")), &data, &want)?;
            }
            // all_gather: member w gives len + w elements
            let mine = encode(dt, (0..len + me).map(|i| value(me, i, case)));
            let counts: Vec<usize> = (0..n).map(|w| (len + w) * dt.size()).collect();
            let got = c.all_gather(group, &mine, &counts)?;
            let want: Vec<u8> = (0..n)
                .flat_map(|w| encode(dt, (0..len + w).map(move |i| value(w, i, case))))
                .collect();
            check(&name("all_gather"), &got, &want)?;
            // reduce_scatter: chunk w has len + w elements; member w gets chunk w summed
            let data: Vec<u8> = (0..n)
                .flat_map(|w| encode(dt, (0..len + w).map(move |i| value(me, w * 1000 + i, case))))
                .collect();
            let got = c.reduce_scatter(group, &data, &counts, dt, ReduceOp::Sum)?;
            let want = encode(
                dt,
                (0..len + me).map(|i| (0..n).map(|w| value(w, me * 1000 + i, case)).sum()),
            );
            check(&name("reduce_scatter"), &got, &want)?;
            // all_to_all: from s to d, len + (s + 2d) % 3 elements of input (s * 100 + d)
            let part = |s: usize, d: usize| len + (s + 2 * d) % 3;
            let sends: Vec<Vec<u8>> = (0..n)
                .map(|d| encode(dt, (0..part(me, d)).map(|i| value(me * 100 + d, i, case))))
                .collect();
            let refs: Vec<&[u8]> = sends.iter().map(Vec::as_slice).collect();
            let recv: Vec<usize> = (0..n).map(|s| part(s, me) * dt.size()).collect();
            let got = c.all_to_all(group, &refs, &recv)?;
            for (s, g) in got.iter().enumerate() {
                let want = encode(dt, (0..part(s, me)).map(|i| value(s * 100 + me, i, case)));
                check(&name(&format!("all_to_all from member {s}")), g, &want)?;
            }
            // broadcast from every root
            for root in 0..n {
                let data = encode(dt, input(root, case + 50));
                let mine = if root == me { data.clone() } else { vec![] };
                let got = c.broadcast(group, root, &mine, data.len())?;
                check(&name(&format!("broadcast from member {root}")), &got, &data)?;
            }
            checks += 12 + 2 * n;
        }
    }
    c.barrier(group)?;
    Ok(checks + 1)
}

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the fault tests read the words a user reads.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let rounds = env_num("GFLOW_CHECK_ROUNDS", 1);
    let pause = std::time::Duration::from_millis(env_num("GFLOW_CHECK_PAUSE_MS", 0) as u64);
    let rank_round = |name: &str| -> Option<(usize, usize)> {
        let s = std::env::var(name).ok()?;
        let (r, i) = s.split_once(':')?;
        Some((r.parse().ok()?, i.parse().ok()?))
    };
    let (kill, leave) = (
        rank_round("GFLOW_TEST_KILL"),
        rank_round("GFLOW_CHECK_LEAVE"),
    );
    let out = gflow::run(4, |env| {
        let c = env.comm();
        let mut world: Vec<usize> = (0..env.world_size()).collect();
        let mut checks = 0;
        for r in 0..rounds {
            if let Some((leaver, after)) = leave
                && r == after + 1
            {
                if env.rank() == leaver {
                    eprintln!("rank {leaver} leaves after round {after}");
                    break;
                }
                world.retain(|&w| w != leaver);
            }
            let evens: Vec<usize> = world.iter().copied().step_by(2).collect();
            if kill == Some((env.rank(), r)) {
                // SAFETY: raising a signal in this process has no memory-safety preconditions.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            }
            checks += round(c, &world, r)?;
            if evens.len() > 1 && evens.contains(&env.rank()) {
                checks += round(c, &evens, r)?;
            }
            if gflow::launched() {
                eprintln!("round {r} ok");
            }
            std::thread::sleep(pause);
        }
        Ok(vec![format!(
            "collectives ok: {checks} checks on {} ranks",
            env.world_size()
        )])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
