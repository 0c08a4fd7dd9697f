//! `GFLOW_TRANSPORT=tcp` with real processes: the seed examples print over TLS-over-TCP links
//! what they print with ranks as threads; a killed rank makes the survivors fail within seconds;
//! an unknown transport and ranks asking for different ones are refused clearly; and between
//! two network namespaces with UDP blocked, the default (QUIC) fails on every rank within 15 s
//! naming both hosts, UDP and `GFLOW_TRANSPORT=tcp`, while `GFLOW_TRANSPORT=tcp` runs.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::{example, launcher, sorted_lines};

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn seed_examples_print_the_same_over_tcp_as_threads() {
    for (name, n) in [
        ("global_tensor_randn", 2),
        ("data_parallelism", 2),
        ("boxing_two_placements", 4),
        ("train_mlp", 4),
    ] {
        let prog = example(name);
        let threads = Command::new(&prog)
            .env_remove("WORLD_SIZE")
            .output()
            .expect("run example");
        assert!(threads.status.success(), "{name}: {}", stderr(&threads));
        let procs = Command::new(launcher())
            .args(["--nproc_per_node", &n.to_string()])
            .arg(&prog)
            .env("GFLOW_TRANSPORT", "tcp")
            .env("GFLOW_TIMEOUT_SECS", "30")
            .env("RUST_LOG", "gflow_transport=info")
            .output()
            .expect("run launcher");
        let err = stderr(&procs);
        assert!(procs.status.success(), "{name} over TCP: {err}");
        assert_eq!(sorted_lines(&procs), sorted_lines(&threads), "{name}");
        // Every link of rank 0 is a TCP link (none shared memory, none QUIC).
        let peers: Vec<String> = (1..n).map(|p| p.to_string()).collect();
        let want = format!("shm=[] quic=[] tcp=[{}]", peers.join(", "));
        assert!(err.contains(&want), "{name}: no {want:?} in {err}");
    }
}

fn rank(prog: &PathBuf, r: usize, world: usize, port: &str, transport: &str) -> Command {
    let mut c = Command::new(prog);
    c.envs([
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", port),
        ("GFLOW_JOB_TOKEN", "t"),
        ("GFLOW_TRANSPORT", transport),
    ])
    .env("WORLD_SIZE", world.to_string())
    .env("RANK", r.to_string())
    .env("LOCAL_RANK", r.to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// Runs one command per rank to the end, each reaped as soon as it ends (a dead rank left a
/// zombie would still look alive).
fn run_all(cmds: Vec<Command>) -> (Vec<Output>, Duration) {
    let t = Instant::now();
    let waits: Vec<_> = cmds
        .into_iter()
        .map(|mut c| {
            let k = c.spawn().expect("spawn rank");
            std::thread::spawn(move || k.wait_with_output().expect("wait"))
        })
        .collect();
    let outs = waits.into_iter().map(|w| w.join().unwrap()).collect();
    (outs, t.elapsed())
}

/// A rank killed mid-loop: the survivors name it as a process that exited (the control channel
/// and its TCP links see the end of its sockets at once).
#[test]
fn survivors_of_a_killed_rank_error_within_seconds_over_tcp() {
    let prog = example("collective_loop");
    let port = common::free_port();
    let cmds = (0..3)
        .map(|r| {
            let mut c = rank(&prog, r, 3, &port, "tcp");
            c.env("GFLOW_TEST_KILL", "1:20")
                .env("GFLOW_TEST_ITERS", "1000000")
                .env("GFLOW_TIMEOUT_SECS", "60");
            c
        })
        .collect();
    let (outs, took) = run_all(cmds);
    assert!(took < Duration::from_secs(20), "took {took:?}");
    for (r, o) in outs.iter().enumerate() {
        assert!(!o.status.success(), "rank {r} should fail");
        if r != 1 {
            let err = stderr(o);
            assert!(
                err.contains("PeerExited") && err.contains("peer: 1"),
                "rank {r}: {err}"
            );
        }
    }
}

#[test]
fn an_unknown_transport_is_refused_naming_the_accepted_values() {
    let prog = example("collective_loop");
    let port = common::free_port();
    let (outs, took) = run_all((0..2).map(|r| rank(&prog, r, 2, &port, "udp")).collect());
    assert!(took < Duration::from_secs(10), "took {took:?}");
    for o in &outs {
        let err = stderr(o);
        assert!(!o.status.success());
        assert!(
            err.contains("GFLOW_TRANSPORT=\\\"udp\\\"") && err.contains("expected quic, tcp"),
            "{err}"
        );
    }
}

/// One rank asks for QUIC, the other for TCP: every rank is refused, naming both, at once.
#[test]
fn ranks_asking_for_quic_and_tcp_are_refused_on_every_rank() {
    let prog = example("collective_loop");
    let port = common::free_port();
    let cmds = ["quic", "tcp"]
        .iter()
        .enumerate()
        .map(|(r, t)| {
            let mut c = rank(&prog, r, 2, &port, t);
            c.env("GFLOW_TIMEOUT_SECS", "60");
            c
        })
        .collect();
    let (outs, took) = run_all(cmds);
    assert!(took < Duration::from_secs(10), "took {took:?}");
    for (r, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert!(!o.status.success(), "rank {r} should fail");
        assert!(
            err.contains(
                "ranks [0] set GFLOW_TRANSPORT=quic but ranks [1] set GFLOW_TRANSPORT=tcp"
            ),
            "rank {r}: {err}"
        );
    }
}

/// Two network namespaces joined by a veth pair (10.63.0.1 and .2), deleted on drop.
struct Hosts {
    names: [String; 2],
}

impl Hosts {
    /// The namespaces with UDP dropped between them, or why they cannot be made.
    fn udp_blocked() -> Result<Hosts, String> {
        let tag = format!("gft-{}", std::process::id());
        let hosts = Hosts {
            names: [format!("{tag}-a"), format!("{tag}-b")],
        };
        let [a, b] = &hosts.names;
        let (va, vb) = (format!("{tag}a"), format!("{tag}b"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", a],
            vec!["ip", "netns", "add", b],
            vec![
                "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
            ],
            vec!["ip", "link", "set", &va, "netns", a],
            vec!["ip", "link", "set", &vb, "netns", b],
            vec!["ip", "-n", a, "addr", "add", "10.63.0.1/24", "dev", &va],
            vec!["ip", "-n", b, "addr", "add", "10.63.0.2/24", "dev", &vb],
            vec!["ip", "-n", a, "link", "set", &va, "up"],
            vec!["ip", "-n", b, "link", "set", &vb, "up"],
            vec!["ip", "-n", a, "link", "set", "lo", "up"],
            vec!["ip", "-n", b, "link", "set", "lo", "up"],
            vec![
                "ip", "netns", "exec", a, "iptables", "-A", "INPUT", "-i", &va, "-p", "udp", "-j",
                "DROP",
            ],
            vec![
                "ip", "netns", "exec", a, "iptables", "-A", "OUTPUT", "-o", &va, "-p", "udp", "-j",
                "DROP",
            ],
        ];
        for step in steps {
            let out = Command::new(step[0])
                .args(&step[1..])
                .output()
                .map_err(|e| format!("{}: {e}", step.join(" ")))?;
            if !out.status.success() {
                return Err(format!("{}: {}", step.join(" "), stderr(&out)));
            }
        }
        Ok(hosts)
    }

    /// `prog` as `rank` of 2 in namespace `rank` (rank 0 on 10.63.0.1 is the master).
    fn rank(&self, prog: &PathBuf, rank: usize, transport: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[rank]])
            .arg(prog)
            .envs([
                ("MASTER_ADDR", "10.63.0.1"),
                ("MASTER_PORT", "29801"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("GFLOW_JOB_TOKEN", "t"),
                ("GFLOW_TRANSPORT", transport),
                ("GFLOW_TIMEOUT_SECS", "60"),
            ])
            .env("RANK", rank.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// UDP blocked between two hosts (network namespaces, an iptables rule): the default transport
/// fails on every rank within 15 s with an error that names both hosts, says UDP may be blocked
/// and names `GFLOW_TRANSPORT=tcp`; with `GFLOW_TRANSPORT=tcp` the job runs and prints what
/// its ranks as threads print. Skips loudly where namespaces or iptables are not available (it
/// needs root; scripts/test.sh installs iptables on Debian).
#[test]
fn with_udp_blocked_quic_fails_fast_by_name_and_tcp_runs() {
    let hosts = match Hosts::udp_blocked() {
        Ok(h) => h,
        Err(why) => {
            eprintln!("!!! SKIPPED: cannot make network namespaces with UDP blocked: {why} !!!");
            return;
        }
    };
    let prog = example("global_tensor_randn");
    let (outs, took) = run_all((0..2).map(|r| hosts.rank(&prog, r, "")).collect());
    assert!(took < Duration::from_secs(15), "QUIC failure took {took:?}");
    eprintln!(
        "QUIC with UDP blocked failed after {took:?}: {}",
        stderr(&outs[0])
    );
    for (r, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert!(!o.status.success(), "rank {r} linked over blocked UDP");
        for want in [
            "10.63.0.1",
            "10.63.0.2",
            "UDP may be blocked",
            "GFLOW_TRANSPORT=tcp",
        ] {
            assert!(err.contains(want), "rank {r}: no {want:?} in {err}");
        }
    }
    let (outs, _) = run_all((0..2).map(|r| hosts.rank(&prog, r, "tcp")).collect());
    let threads = Command::new(&prog)
        .env_remove("WORLD_SIZE")
        .output()
        .expect("run example");
    let mut lines: Vec<String> = vec![];
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r} over TCP: {}", stderr(o));
        // As the launcher shows them.
        lines.extend(sorted_lines(o).iter().map(|l| format!("[rank {r}] {l}")));
    }
    lines.sort();
    assert_eq!(lines, sorted_lines(&threads));
}
