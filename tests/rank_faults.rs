//! Faults of real rank processes started by hand (no launcher to stop the others): a rank that
//! exits early, whether with success, with a failure code or by panicking, makes every
//! survivor fail within seconds with an error naming the rank that went away, never a hang
//! until the receive deadline. (A rank killed by SIGKILL: `tests/launch.rs`.)
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gflow::prelude::*;

/// Iterations of the collective loop each rank runs.
const ITERS: usize = 200_000;

/// One rank of the job the tests below start (run only as their child, `--ignored`): a loop of
/// all-reduces in which rank `GFLOW_FAULT_RANK` leaves at iteration 20 the way
/// `GFLOW_FAULT_MODE` says: `exit0` (`process::exit(0)`), `exit3` (`process::exit(3)`) or
/// `panic`.
#[test]
#[ignore = "a rank process of the fault tests, started by them"]
fn fault_rank_child() {
    let mode = std::env::var("GFLOW_FAULT_MODE").unwrap();
    let faulty: usize = std::env::var("GFLOW_FAULT_RANK").unwrap().parse().unwrap();
    let env = gflow::init().unwrap();
    let n = env.world_size();
    let p = Placement::new("cpu", (0..n).collect::<Vec<_>>()).unwrap();
    let run = || -> Result<()> {
        for i in 0..ITERS {
            if env.rank() == faulty && i == 20 {
                match mode.as_str() {
                    "exit0" => std::process::exit(0),
                    "exit3" => std::process::exit(3),
                    _ => panic!("rank {faulty} panics on purpose"),
                }
            }
            Tensor::full(&[256], 1.0, Device::Cpu)?
                .to_global(&p, Sbp::partial_sum())?
                .to_vec::<f32>()?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => println!("rank {} completed every iteration", env.rank()),
        Err(e) => {
            eprintln!("rank {} failed: {e:?}", env.rank());
            std::process::exit(1);
        }
    }
}

/// Starts a job of 3 rank processes over `transport` in which rank 1 leaves as `mode` says, and
/// checks that both survivors fail within 20 s naming rank 1 (the receive deadline is 120 s,
/// so only the detection of the departed peer can end them that soon).
fn survivors_fail(mode: &str, transport: &str) {
    let port = common::free_port();
    let token = format!("rank-faults-{}-{mode}-{transport}", std::process::id());
    let kids: Vec<_> = (0..3)
        .map(|r| {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            common::without_job_env(&mut cmd);
            cmd.args(["--exact", "fault_rank_child", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .envs([
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", port.as_str()),
                    ("WORLD_SIZE", "3"),
                    ("GFLOW_JOB_TOKEN", token.as_str()),
                    ("GFLOW_TIMEOUT_SECS", "120"),
                    ("GFLOW_TRANSPORT", transport),
                    ("GFLOW_FAULT_MODE", mode),
                    ("GFLOW_FAULT_RANK", "1"),
                    ("RUST_BACKTRACE", "0"),
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    let t = Instant::now();
    // Each rank is reaped as soon as it ends (as a launcher does).
    let waits: Vec<_> = kids
        .into_iter()
        .map(|k| std::thread::spawn(move || (k.wait_with_output().unwrap(), Instant::now())))
        .collect();
    let outs: Vec<_> = waits.into_iter().map(|w| w.join().unwrap()).collect();
    for (r, (o, ended)) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        if r == 1 {
            continue;
        }
        assert!(
            ended.duration_since(t) < Duration::from_secs(20),
            "{mode} over {transport}: rank {r} took {:?}: {err}",
            ended.duration_since(t)
        );
        assert!(
            !o.status.success(),
            "{mode} over {transport}: survivor rank {r} should fail: {err}"
        );
        assert!(
            err.contains("failed:") && err.contains("peer: 1"),
            "{mode} over {transport}: rank {r} should name rank 1: {err}"
        );
    }
}

#[test]
fn a_rank_that_exits_early_with_success_fails_the_survivors() {
    for transport in ["shm", "quic"] {
        survivors_fail("exit0", transport);
    }
}

#[test]
fn a_rank_that_exits_early_with_a_failure_fails_the_survivors() {
    for transport in ["shm", "quic"] {
        survivors_fail("exit3", transport);
    }
}

#[test]
fn a_rank_that_panics_fails_the_survivors() {
    for transport in ["shm", "quic"] {
        survivors_fail("panic", transport);
    }
}
