//! Real processes: every seed example through `gflow-launch` prints what it prints with ranks as
//! threads; a killed rank makes the survivors fail within seconds and the launcher name it; a
//! wrong job token, a wrong world size and a missing rank are refused clearly. (Jobs across
//! hosts: `tests/hosts.rs`.)
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::path::PathBuf;

use common::{example, launcher, sorted_lines};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn launch(n: usize, prog: &PathBuf, env: &[(&str, &str)]) -> Output {
    Command::new(launcher())
        .args(["--nproc_per_node", &n.to_string()])
        .arg(prog)
        .envs(env.iter().copied())
        .env("GFLOW_TIMEOUT_SECS", "20")
        .output()
        .expect("run launcher")
}

#[test]
fn seed_examples_print_the_same_as_processes_and_as_threads() {
    for (name, n) in [
        ("global_tensor_randn", 2),
        ("local_to_global", 2),
        ("global_to_global", 2),
        ("data_parallelism", 2),
        ("model_parallelism", 2),
        ("boxing_two_placements", 4),
        ("two_d_sbp", 4),
        ("demo", 4),
        ("train_mlp", 4),
        ("parallel_training", 4),
    ] {
        let prog = example(name);
        let threads = Command::new(&prog)
            .env_remove("WORLD_SIZE")
            .output()
            .expect("run example");
        assert!(
            threads.status.success(),
            "{name} as threads: {}",
            String::from_utf8_lossy(&threads.stderr)
        );
        let procs = launch(n, &prog, &[]);
        assert!(
            procs.status.success(),
            "{name} as {n} processes: {}",
            String::from_utf8_lossy(&procs.stderr)
        );
        assert_eq!(sorted_lines(&procs), sorted_lines(&threads), "{name}");
        if n == 2 {
            // The 2-rank programs also run on 4 ranks (2 and 3 outside the placement).
            let four = launch(4, &prog, &[]);
            assert!(
                four.status.success(),
                "{name} on 4 processes: {}",
                String::from_utf8_lossy(&four.stderr)
            );
            let threads4 = Command::new(&prog)
                .env_remove("WORLD_SIZE")
                .env("GFLOW_SIM_RANKS", "4")
                .output()
                .expect("run example");
            assert_eq!(sorted_lines(&four), sorted_lines(&threads4), "{name} on 4");
        }
    }
}

#[test]
fn a_killed_rank_fails_the_job_and_is_named() {
    let prog = example("collective_loop");
    let t = Instant::now();
    let out = launch(
        4,
        &prog,
        &[("GFLOW_TEST_KILL", "2:5"), ("GFLOW_TEST_ITERS", "100000")],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 2 failed (signal 9)"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(30));
}

/// Without the launcher (which would stop them), survivors of a SIGKILL must fail on their own,
/// over shared memory (the peer's pid vanishes) and over QUIC (its connection goes silent).
#[test]
fn survivors_of_a_killed_rank_error_within_ten_seconds() {
    for transport in ["shm", "quic"] {
        survivors_error_within_ten_seconds(transport, "0");
    }
}

/// The portable paths (`GFLOW_PORTABLE=1`: `kill(pid, 0)` liveness instead of `/proc`, no
/// memfd arena) still notice a killed peer.
#[test]
fn survivors_of_a_killed_rank_error_on_the_portable_paths() {
    survivors_error_within_ten_seconds("shm", "1");
}

fn survivors_error_within_ten_seconds(transport: &str, portable: &str) {
    let prog = example("collective_loop");
    let port = common::free_port();
    let mut kids: Vec<_> = (0..3)
        .map(|r| {
            Command::new(&prog)
                .envs([
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", port.as_str()),
                    ("WORLD_SIZE", "3"),
                    ("GFLOW_JOB_TOKEN", "t"),
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("GFLOW_TEST_KILL", "1:20")
                .env("GFLOW_TEST_ITERS", "1000000")
                .env("GFLOW_TIMEOUT_SECS", "60")
                .env("GFLOW_TRANSPORT", transport)
                .env("GFLOW_PORTABLE", portable)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let t = Instant::now();
    // Each rank is reaped as soon as it ends (as a launcher does): a dead rank left a zombie
    // would still exist for `kill(pid, 0)`.
    let waits: Vec<_> = kids
        .drain(..)
        .map(|k| std::thread::spawn(move || k.wait_with_output().expect("wait")))
        .collect();
    let outs: Vec<_> = waits.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{transport}: survivors took {:?}",
        t.elapsed()
    );
    for (r, o) in outs.iter().enumerate() {
        assert!(!o.status.success(), "{transport}: rank {r} should fail");
        if r != 1 {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("PeerExited") && err.contains("peer: 1"),
                "{transport}: rank {r}: {err}"
            );
        }
    }
}

/// Rank `rank` of a job started by hand. The example is built once (by the first call): a
/// build between the ranks' starts (which waits for cargo's lock while other builds run) could
/// outlast the short rendezvous deadlines these tests give.
fn manual(rank: usize, world: &str, port: &str, token: &str, timeout: &str) -> std::process::Child {
    static PROG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    Command::new(PROG.get_or_init(|| example("collective_loop")))
        .envs([
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port),
            ("WORLD_SIZE", world),
            ("GFLOW_JOB_TOKEN", token),
        ])
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("GFLOW_TIMEOUT_SECS", timeout)
        .env("GFLOW_TEST_ITERS", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

#[test]
fn rendezvous_refusals_are_clear() {
    let port = common::free_port;
    // wrong token: refused, and rank 0 reports the rank that never joined
    let p = port();
    let (r0, r1) = (
        manual(0, "2", &p, "right", "3"),
        manual(1, "2", &p, "wrong", "3"),
    );
    let (o0, o1) = (
        r0.wait_with_output().unwrap(),
        r1.wait_with_output().unwrap(),
    );
    assert!(
        String::from_utf8_lossy(&o1.stderr).contains("wrong job token"),
        "{}",
        String::from_utf8_lossy(&o1.stderr)
    );
    assert!(o1.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&o0.stderr).contains("ranks [1] did not join"),
        "{}",
        String::from_utf8_lossy(&o0.stderr)
    );
    // wrong world size
    let p = port();
    let (r0, r1) = (manual(0, "2", &p, "t", "5"), manual(1, "3", &p, "t", "5"));
    let (o0, o1) = (
        r0.wait_with_output().unwrap(),
        r1.wait_with_output().unwrap(),
    );
    for o in [&o0, &o1] {
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // duplicate rank
    let p = port();
    let (r0, a, b) = (
        manual(0, "3", &p, "t", "5"),
        manual(1, "3", &p, "t", "5"),
        manual(1, "3", &p, "t", "5"),
    );
    let outs = [
        r0.wait_with_output().unwrap(),
        a.wait_with_output().unwrap(),
        b.wait_with_output().unwrap(),
    ];
    assert!(outs.iter().all(|o| !o.status.success()));
    assert!(String::from_utf8_lossy(&outs[0].stderr).contains("two processes claim RANK=1"));
}

/// The 2D SBP and data-parallel seed examples with `--device wgpu` as 4 and 2 processes print
/// what they print as threads (skipped loudly without a wgpu adapter, unless
/// `GFLOW_REQUIRE_BACKEND` names wgpu).
#[test]
fn seed_examples_on_wgpu_as_processes() {
    for (name, n) in [("two_d_sbp", 4), ("data_parallelism", 2)] {
        let prog = example(name);
        let threads = Command::new(&prog)
            .args(["--device", "wgpu"])
            .env_remove("WORLD_SIZE")
            .output()
            .expect("run example");
        let err = String::from_utf8_lossy(&threads.stderr);
        if !threads.status.success()
            && err.contains("BackendUnavailable")
            && !gflow::backend::required("wgpu")
        {
            return gflow::backend::say_skipped(
                "seed_examples_on_wgpu_as_processes",
                &format!("no wgpu adapter: {err}"),
            );
        }
        assert!(threads.status.success(), "{name} on wgpu as threads: {err}");
        let procs = Command::new(launcher())
            .args(["--nproc_per_node", &n.to_string()])
            .arg(&prog)
            .args(["--device", "wgpu"])
            .env("GFLOW_TIMEOUT_SECS", "60")
            .output()
            .expect("run launcher");
        assert!(
            procs.status.success(),
            "{name} on wgpu as processes: {}",
            String::from_utf8_lossy(&procs.stderr)
        );
        assert_eq!(
            sorted_lines(&procs),
            sorted_lines(&threads),
            "{name} on wgpu"
        );
        assert!(String::from_utf8_lossy(&procs.stdout).contains("wgpu") || name != "two_d_sbp");
    }
}

/// Each rank's `Cpus_allowed_list` under `gflow-launch --nproc-per-node n` with `flags`.
fn cpu_lists(n: usize, flags: &[&str]) -> Vec<String> {
    let out = Command::new(launcher())
        .args(["--nproc-per-node", &n.to_string()])
        .args(flags)
        .args(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
        .output()
        .expect("run launcher");
    assert!(out.status.success(), "{out:?}");
    let mut lines = sorted_lines(&out);
    lines.iter_mut().for_each(|l| {
        *l = l
            .split_once('\t')
            .map_or(l.clone(), |(_, cpus)| cpus.to_string())
    });
    lines
}

/// The launcher pins each process to its own share of the CPUs when there are enough (so two
/// processes never share a core while another idles), and `--bind-to none` leaves them free.
#[test]
fn launcher_pins_processes_to_their_share_of_the_cpus() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let free = cpu_lists(2, &["--bind-to", "none"]);
    assert_eq!(
        free[0], free[1],
        "unpinned processes share the launcher's CPUs"
    );
    let pinned = cpu_lists(2, &[]);
    if cpus >= 2 {
        assert_ne!(
            pinned[0], pinned[1],
            "each process gets its own CPUs: {pinned:?}"
        );
        assert!(
            pinned.iter().all(|l| *l != free[0]),
            "{pinned:?} vs {free:?}"
        );
    } else {
        assert_eq!(pinned, free, "one CPU: nothing to pin");
    }
    // more processes than CPUs: not pinned, as Open MPI does
    let over = cpu_lists(cpus + 1, &[]);
    assert!(over.iter().all(|l| *l == free[0]), "{over:?}");
}

/// `RUST_LOG=info` names each rank's start and links; `debug` adds each boxing plan and
/// collective schedule; without `RUST_LOG` nothing is logged.
#[test]
fn rust_log_shows_ranks_links_plans_and_schedules() {
    let prog = example("collective_loop");
    let run = |log: Option<&str>| {
        let mut cmd = Command::new(launcher());
        cmd.args(["--nproc-per-node", "2"])
            .arg(&prog)
            .env("GFLOW_TEST_ITERS", "1")
            .env("GFLOW_TIMEOUT_SECS", "20")
            .env_remove("RUST_LOG");
        if let Some(l) = log {
            cmd.env("RUST_LOG", l);
        }
        let out = cmd.output().expect("run launcher");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let info = run(Some("info"));
    for r in 0..2 {
        let started = info
            .lines()
            .find(|l| l.starts_with(&format!("[rank {r}]")) && l.contains("rank started"))
            .unwrap_or_else(|| panic!("no start line of rank {r}: {info}"));
        assert!(started.contains("world=2") && started.contains(&format!("local_rank={r}")));
        let links = info
            .lines()
            .find(|l| l.starts_with(&format!("[rank {r}]")) && l.contains("links"))
            .unwrap_or_else(|| panic!("no links line of rank {r}: {info}"));
        assert!(links.contains(&format!("shm=[{}]", 1 - r)), "{links}");
    }
    assert!(!info.contains("DEBUG"), "{info}");
    let debug = run(Some("debug"));
    assert!(
        debug.contains("boxing plan") && debug.contains("(partial_sum,) -> (broadcast,)"),
        "{debug}"
    );
    assert!(
        debug.contains("collective schedule op=AllReduce members=2"),
        "{debug}"
    );
    assert_eq!(run(None), "");
}
