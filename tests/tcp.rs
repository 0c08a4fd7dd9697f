//! `GFLOW_TRANSPORT=tcp` and `tcp-all` with real processes: the seed examples print over
//! TLS-over-TCP links (`tcp-all` on one host) what they print with ranks as threads, and `tcp`
//! keeps shared memory within a host; a killed rank makes the survivors fail within seconds; an
//! unknown transport and ranks asking for different ones are refused clearly; between two
//! network namespaces with UDP blocked, the default (QUIC) fails on every rank within 15 s
//! naming both hosts, UDP and `GFLOW_TRANSPORT=tcp`, while `GFLOW_TRANSPORT=tcp` runs; and with
//! TCP blocked but for the rendezvous, `tcp` fails on every rank within 15 s naming both hosts
//! and the listeners' addresses.
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
            .env("GFLOW_TRANSPORT", "tcp-all")
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

/// `GFLOW_TRANSPORT=tcp` asks for TCP between hosts only: ranks of one host keep shared memory.
#[test]
fn tcp_on_one_host_links_by_shared_memory() {
    let prog = example("global_tensor_randn");
    let procs = Command::new(launcher())
        .args(["--nproc_per_node", "2"])
        .arg(&prog)
        .env("GFLOW_TRANSPORT", "tcp")
        .env("GFLOW_TIMEOUT_SECS", "30")
        .env("RUST_LOG", "gflow_transport=info")
        .output()
        .expect("run launcher");
    let err = stderr(&procs);
    assert!(procs.status.success(), "{err}");
    assert!(err.contains("shm=[1] quic=[] tcp=[]"), "{err}");
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
            let mut c = rank(&prog, r, 3, &port, "tcp-all");
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

/// Ranks asking for different transports (QUIC and TCP; TCP between hosts and TCP everywhere;
/// one rank left to the default goes along): every rank is refused, naming each, at once.
#[test]
fn ranks_asking_for_different_transports_are_refused_on_every_rank() {
    let prog = example("collective_loop");
    for (asked, want) in [
        (
            ["quic", "tcp", ""],
            "ranks [0] set GFLOW_TRANSPORT=quic but ranks [1] set GFLOW_TRANSPORT=tcp:",
        ),
        (
            ["tcp", "", "tcp-all"],
            "ranks [0] set GFLOW_TRANSPORT=tcp but ranks [2] set GFLOW_TRANSPORT=tcp-all:",
        ),
    ] {
        let port = common::free_port();
        let cmds = asked
            .iter()
            .enumerate()
            .map(|(r, t)| {
                let mut c = rank(&prog, r, 3, &port, t);
                c.env("GFLOW_TIMEOUT_SECS", "60");
                c
            })
            .collect();
        let (outs, took) = run_all(cmds);
        assert!(took < Duration::from_secs(10), "took {took:?}");
        for (r, o) in outs.iter().enumerate() {
            let err = stderr(o);
            assert!(!o.status.success(), "rank {r} should fail");
            assert!(err.contains(want), "rank {r}: {err}");
        }
    }
}

/// The address of host `k` (0 or 1) of [`Hosts`].
fn addr(k: usize) -> String {
    format!("10.74.63.{}", k + 1)
}

/// The rendezvous port on [`Hosts`].
const PORT: &str = "29901";

/// Two network namespaces joined by a veth pair (10.74.63.1 and .2), deleted on drop.
struct Hosts {
    names: [String; 2],
}

impl Hosts {
    /// The namespaces with UDP dropped between them, or why they cannot be made.
    fn udp_blocked() -> Result<Hosts, String> {
        Hosts::up(
            "u",
            &[("INPUT", &["-p", "udp"]), ("OUTPUT", &["-p", "udp"])],
        )
    }

    /// The namespaces with TCP dropped between them but for the rendezvous (to and from
    /// `PORT` on host 0), or why they cannot be made.
    fn tcp_blocked() -> Result<Hosts, String> {
        Hosts::up(
            "t",
            &[
                ("INPUT", &["-p", "tcp", "!", "--dport", PORT]),
                ("OUTPUT", &["-p", "tcp", "!", "--sport", PORT]),
            ],
        )
    }

    /// The namespaces (`tag` tells tests apart), host 0 dropping what matches each of `drop`
    /// (an iptables chain, `INPUT` or `OUTPUT`, and a match on its link).
    fn up(tag: &str, drop: &[(&str, &[&str])]) -> Result<Hosts, String> {
        let tag = format!("gfn-{tag}{}", std::process::id() % 1_000_000);
        let hosts = Hosts {
            names: [format!("{tag}-a"), format!("{tag}-b")],
        };
        let [a, b] = &hosts.names;
        let (va, vb) = (format!("{tag}a"), format!("{tag}b"));
        let (cidr_a, cidr_b) = (format!("{}/24", addr(0)), format!("{}/24", addr(1)));
        let mut steps: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", a],
            vec!["ip", "netns", "add", b],
            vec![
                "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
            ],
            vec!["ip", "link", "set", &va, "netns", a],
            vec!["ip", "link", "set", &vb, "netns", b],
            vec!["ip", "-n", a, "addr", "add", &cidr_a, "dev", &va],
            vec!["ip", "-n", b, "addr", "add", &cidr_b, "dev", &vb],
            vec!["ip", "-n", a, "link", "set", &va, "up"],
            vec!["ip", "-n", b, "link", "set", &vb, "up"],
            vec!["ip", "-n", a, "link", "set", "lo", "up"],
            vec!["ip", "-n", b, "link", "set", "lo", "up"],
        ];
        for &(chain, rule) in drop {
            let dir = if chain == "INPUT" { "-i" } else { "-o" };
            let mut step = vec!["ip", "netns", "exec", a, "iptables", "-A", chain, dir, &va];
            step.extend_from_slice(rule);
            step.extend_from_slice(&["-j", "DROP"]);
            steps.push(step);
        }
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

    /// `prog` as `rank` of 2 in namespace `rank` (rank 0 on host 0 is the master).
    fn rank(&self, prog: &PathBuf, rank: usize, transport: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[rank]])
            .arg(prog)
            .env("MASTER_ADDR", addr(0))
            .envs([
                ("MASTER_PORT", PORT),
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
            &addr(0),
            &addr(1),
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

/// TCP blocked between two hosts but for the rendezvous (iptables on host 0): under
/// `GFLOW_TRANSPORT=tcp` every rank fails within 15 s of the start (the links get 10 s, not the
/// 60 s rendezvous timeout), naming both hosts, the other host's listener address, and a
/// firewall. Skips loudly where namespaces or iptables are not available.
#[test]
fn with_tcp_blocked_tcp_links_fail_fast_naming_both_hosts() {
    let hosts = match Hosts::tcp_blocked() {
        Ok(h) => h,
        Err(why) => {
            eprintln!("!!! SKIPPED: cannot make network namespaces with TCP blocked: {why} !!!");
            return;
        }
    };
    let prog = example("global_tensor_randn");
    let (outs, took) = run_all((0..2).map(|r| hosts.rank(&prog, r, "tcp")).collect());
    eprintln!(
        "TCP links with TCP blocked failed after {took:?}: {}",
        stderr(&outs[0])
    );
    assert!(took < Duration::from_secs(15), "TCP failure took {took:?}");
    for (r, o) in outs.iter().enumerate() {
        let err = stderr(o);
        assert!(!o.status.success(), "rank {r} linked over blocked TCP");
        let other = format!("TCP listeners at {}:", addr(1 - r));
        for want in [
            &format!("rank {r} on host "),
            &format!("({})", addr(r)),
            &format!("({})", addr(1 - r)),
            &other,
            "could not link over TCP",
            "firewall",
        ] {
            assert!(err.contains(want), "rank {r}: no {want:?} in {err}");
        }
    }
}

/// A launched program's `gflow::run` closes its links before it returns: rank 0, done after
/// its first round, stays in `run` (the control channel's hub) until rank 1 has ended, so its
/// program prints its result after rank 1's end and nothing networked is left for the
/// exit-time destructors (which run after wgpu's and crashed there).
#[test]
fn run_returns_on_rank_0_only_after_every_rank_ended() {
    use std::io::BufRead;
    let prog = example("collectives_check");
    let port = "29547";
    let mut kids: Vec<std::process::Child> = (0..2)
        .map(|r| {
            rank(&prog, r, 2, port, "tcp-all")
                .envs([
                    ("GFLOW_TIMEOUT_SECS", "30"),
                    ("GFLOW_CHECK_ROUNDS", "25"),
                    ("GFLOW_CHECK_PAUSE_MS", "100"),
                    ("GFLOW_CHECK_LEAVE", "0:0"),
                ])
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let out0 = kids[0].stdout.take().expect("rank 0's stdout");
    let printed = std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(out0).lines();
        let line = lines.next().and_then(|l| l.ok()).unwrap_or_default();
        (line, Instant::now())
    });
    let mut k1 = kids.pop().expect("rank 1");
    let st1 = k1.wait().expect("wait for rank 1");
    let ended1 = Instant::now();
    let st0 = kids[0].wait().expect("wait for rank 0");
    let (line, at) = printed.join().unwrap();
    assert!(st0.success() && st1.success(), "{st0:?} {st1:?}");
    assert!(line.contains("collectives ok"), "rank 0 printed {line:?}");
    // Rank 1 runs 25 rounds of 100 ms after rank 0 left: rank 0's print comes after.
    assert!(
        at + Duration::from_millis(300) >= ended1,
        "rank 0 printed {:?} before rank 1 ended",
        ended1.saturating_duration_since(at)
    );
}
