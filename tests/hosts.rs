//! Jobs across simulated hosts: network namespaces joined through a bridge
//! (`scripts/hosts.sh`, root only; every test skips loudly where namespaces cannot be made), one
//! `gflow-launch --nnodes` per host. Ranks of one host share memory, ranks of different hosts
//! talk QUIC. Every collective is correct and the seeds' boxing cases print what they print on
//! one host; a process that dies is named on every survivor ("rank R (pid P, host H) exited"),
//! a partition ends the job on every host with "no packets from rank R at ADDR for 6 s", and a
//! shorter outage is survived.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::example;
use common::hosts::{Hosts, MASTER_PORT};

/// The hosts of a test, or `None` after saying loudly why the test is skipped.
fn hosts(test: &str, tag: &str, n: usize) -> Option<Hosts> {
    match Hosts::up(tag, n, &[]) {
        Ok(h) => Some(h),
        Err(why) => {
            gflow::backend::say_skipped(
                test,
                &format!(
                    "network namespaces cannot be made here ({}); jobs across hosts are NOT \
                     tested",
                    why.trim()
                ),
            );
            None
        }
    }
}

/// Every output's stdout lines together, sorted.
fn sorted_lines(outs: &[&Output]) -> Vec<String> {
    let mut v: Vec<String> = outs.iter().flat_map(|o| common::sorted_lines(o)).collect();
    v.sort();
    v
}

/// `program` as threads (`ranks` of them), its lines sorted: the one-host reference.
fn as_threads(program: &Path, ranks: usize) -> Vec<String> {
    let out = Command::new(program)
        .env_remove("WORLD_SIZE")
        .env("GFLOW_SIM_RANKS", ranks.to_string())
        .output()
        .expect("run example");
    assert!(
        out.status.success(),
        "{program:?} as threads: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sorted_lines(&[&out])
}

/// Runs `program` as `per_node` processes on each of the hosts, each host's launcher started
/// with `env`; returns every host's output.
fn job(h: &Hosts, per_node: usize, program: &Path, env: &[(&str, &str)]) -> Vec<Output> {
    let nodes = h.addrs.len();
    let kids: Vec<Child> = (0..nodes)
        .map(|k| {
            h.launch(k, nodes, per_node, program)
                .envs(env.iter().copied())
                .env("GFLOW_TIMEOUT_SECS", "30")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a node")
        })
        .collect();
    kids.into_iter()
        .map(|k| k.wait_with_output().expect("wait for a node"))
        .collect()
}

/// Each program as `per_node` processes on every host prints what it prints as threads.
fn same_as_one_host(h: &Hosts, per_node: usize, programs: &[&str]) {
    let ranks = h.addrs.len() * per_node;
    for name in programs {
        let prog = example(name);
        let outs = job(h, per_node, &prog, &[]);
        for (k, o) in outs.iter().enumerate() {
            assert!(
                o.status.success(),
                "{name} on host {k} of {}x{per_node}: {}",
                h.addrs.len(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let lines = sorted_lines(&outs.iter().collect::<Vec<_>>());
        assert_eq!(
            lines,
            as_threads(&prog, ranks),
            "{name} on {}x{per_node}",
            h.addrs.len()
        );
        if *name == "collectives_check" {
            assert_eq!(lines.len(), ranks, "{lines:?}");
        }
    }
}

#[test]
fn two_hosts_of_one_rank_run_every_collective_and_the_seeds() {
    let Some(h) = hosts(
        "two_hosts_of_one_rank_run_every_collective_and_the_seeds",
        "a",
        2,
    ) else {
        return;
    };
    same_as_one_host(
        &h,
        1,
        &[
            "collectives_check",
            "global_to_global",
            "data_parallelism",
            "model_parallelism",
        ],
    );
}

#[test]
fn two_hosts_of_two_ranks_run_every_collective_and_the_seeds() {
    let Some(h) = hosts(
        "two_hosts_of_two_ranks_run_every_collective_and_the_seeds",
        "b",
        2,
    ) else {
        return;
    };
    same_as_one_host(
        &h,
        2,
        &[
            "collectives_check",
            "boxing_two_placements",
            "two_d_sbp",
            "demo",
        ],
    );
}

#[test]
fn three_hosts_of_one_rank_run_every_collective_and_the_seeds() {
    let Some(h) = hosts(
        "three_hosts_of_one_rank_run_every_collective_and_the_seeds",
        "c",
        3,
    ) else {
        return;
    };
    same_as_one_host(&h, 1, &["collectives_check", "global_to_global"]);
}

/// Hosts on a rate-limited (`tc tbf`, 1 Gbit/s) jumbo-frame (MTU 9000) link, two ranks each:
/// every collective (hierarchical from 64 KiB) is correct over QUIC, whose MTU discovery then
/// probes past 1500 bytes, and over `GFLOW_TRANSPORT=tcp`.
#[test]
fn a_rate_limited_jumbo_link_runs_every_collective_over_quic_and_tcp() {
    let test = "a_rate_limited_jumbo_link_runs_every_collective_over_quic_and_tcp";
    let h = match Hosts::up("r", 2, &["--rate", "1gbit", "--mtu", "9000"]) {
        Ok(h) => h,
        Err(why) => {
            return gflow::backend::say_skipped(
                test,
                &format!(
                    "network namespaces or tc cannot be used here ({})",
                    why.trim()
                ),
            );
        }
    };
    let prog = example("collectives_check");
    let want = as_threads(&prog, 4);
    for transport in ["quic", "tcp"] {
        let env = [(
            "GFLOW_TRANSPORT",
            if transport == "quic" { "" } else { "tcp" },
        )];
        let outs = job(&h, 2, &prog, &env);
        for (k, o) in outs.iter().enumerate() {
            assert!(
                o.status.success(),
                "{transport}, host {k}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert_eq!(
            sorted_lines(&outs.iter().collect::<Vec<_>>()),
            want,
            "{transport}"
        );
    }
}

/// `GFLOW_TRANSPORT=tcp` on two hosts of two ranks: every collective is correct, and each rank
/// links the other rank of its host through shared memory and the other host's ranks over TCP
/// (as each rank logs its links), none over QUIC.
#[test]
fn tcp_between_hosts_keeps_shared_memory_within_each() {
    let Some(h) = hosts("tcp_between_hosts_keeps_shared_memory_within_each", "t", 2) else {
        return;
    };
    let prog = example("collectives_check");
    let env = [
        ("GFLOW_TRANSPORT", "tcp"),
        ("RUST_LOG", "gflow_transport=info"),
    ];
    let outs = job(&h, 2, &prog, &env);
    for (k, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "host {k}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert_eq!(
        sorted_lines(&outs.iter().collect::<Vec<_>>()),
        as_threads(&prog, 4)
    );
    for r in 0..4 {
        let err = String::from_utf8_lossy(&outs[r / 2].stderr);
        let far = if r < 2 { [2, 3] } else { [0, 1] };
        let want = format!("shm=[{}] quic=[] tcp=[{}, {}]", r ^ 1, far[0], far[1]);
        let line = err
            .lines()
            .find(|l| l.contains("links (shared memory") && l.contains(&format!("rank={r} ")))
            .unwrap_or_else(|| panic!("rank {r} logs no links: {err}"));
        assert!(line.contains(&want), "rank {r}: no {want:?} in {line}");
    }
}

/// A child's stderr, read as it comes: the lines so far, and a channel that gets each line.
struct Watched {
    child: Child,
    err: Arc<Mutex<String>>,
    lines: Receiver<String>,
}

impl Watched {
    fn new(mut cmd: Command) -> Watched {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let (tx, lines) = channel();
        let err = Arc::new(Mutex::new(String::new()));
        let (stderr, all) = (child.stderr.take().unwrap(), err.clone());
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                all.lock().unwrap().push_str(&format!("{l}\n"));
                let _ = tx.send(l);
            }
        });
        Watched { child, err, lines }
    }

    /// Waits (at most `limit`) for a stderr line containing `what`.
    fn wait_for(&self, what: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while let Ok(l) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            if l.contains(what) {
                return;
            }
        }
        panic!("no line with {what:?} within {limit:?}: {}", self.stderr());
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }
}

/// Waits for every child; returns (exit status, time it ended, stderr) of each, in order.
fn ends(kids: Vec<Watched>) -> Vec<(std::process::ExitStatus, Instant, String)> {
    let waits: Vec<_> = kids
        .into_iter()
        .map(|mut w| {
            std::thread::spawn(move || {
                let st = w.child.wait().expect("wait");
                let at = Instant::now();
                // the reader thread ends with the pipe
                std::thread::sleep(Duration::from_millis(50));
                (st, at, w.stderr())
            })
        })
        .collect();
    waits.into_iter().map(|w| w.join().unwrap()).collect()
}

/// A rank killed on one host (SIGKILL: no word on any link) is named, with its pid and host, by
/// every survivor on both hosts within a few seconds (the QUIC idle timeout alone would take 6 s
/// and say nothing of a process). Ranks are started by hand (a launcher would stop the survivors
/// of its host itself); first a rank other than 0 dies, then rank 0 (whose death closes every
/// rank's control connection).
#[test]
fn a_process_that_died_is_named_on_every_host() {
    let Some(h) = hosts("a_process_that_died_is_named_on_every_host", "d", 2) else {
        return;
    };
    let prog = example("collectives_check");
    for victim in [3, 0] {
        let kids: Vec<Watched> = (0..4)
            .map(|r| {
                let mut c = h.command(r / 2, &prog);
                c.envs([
                    ("MASTER_ADDR", h.addrs[0].as_str()),
                    ("MASTER_PORT", MASTER_PORT),
                    ("WORLD_SIZE", "4"),
                    ("GFLOW_JOB_TOKEN", "died"),
                    ("GFLOW_TIMEOUT_SECS", "60"),
                    ("GFLOW_CHECK_ROUNDS", "1000"),
                    // the control channel's notices, in the failure message if the test fails
                    ("RUST_LOG", "gflow_transport=debug"),
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", (r % 2).to_string())
                .env("GFLOW_TEST_KILL", format!("{victim}:2"));
                Watched::new(c)
            })
            .collect();
        let pid = kids[victim].child.id();
        let outs = ends(kids);
        let died = outs[victim].1;
        for (r, (st, at, err)) in outs.iter().enumerate() {
            assert!(!st.success(), "rank {r} should fail");
            if r == victim {
                continue;
            }
            let want = format!("rank {victim} (pid {pid}, host ");
            assert!(
                err.contains(&want) && err.contains(") exited"),
                "victim {victim}: rank {r} does not say {want:?}...exited: {err}"
            );
            let after = at.saturating_duration_since(died);
            println!("victim {victim}: rank {r} ended {after:?} after it");
            assert!(
                after < Duration::from_secs(5),
                "victim {victim}: rank {r} ended {after:?} after it: {:#?}",
                outs.iter()
                    .map(|(_, at, err)| (at.saturating_duration_since(died), err))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// Rank 0 finishes in order (its work done, exit status 0) while ranks 1 (on its host) and 2
/// (on the other) go on; rank 2 is killed 12 s later, past the 10 s that rank 0's exit may wait
/// for its peers' links: rank 1 still names it, "rank 2 (pid P, host H) exited", within 3 s
/// (its QUIC link alone would say only "no packets" after 6 s), as rank 0 stays the control
/// channel's hub until every rank has ended.
#[test]
fn a_death_after_rank_0_finished_is_named() {
    let Some(h) = hosts("a_death_after_rank_0_finished_is_named", "e", 2) else {
        return;
    };
    let prog = example("collectives_check");
    let kids: Vec<Watched> = [(0, 0), (1, 0), (2, 1)]
        .into_iter()
        .map(|(r, host)| {
            let mut c = h.command(host, &prog);
            c.envs([
                ("MASTER_ADDR", h.addrs[0].as_str()),
                ("MASTER_PORT", MASTER_PORT),
                ("WORLD_SIZE", "3"),
                ("GFLOW_JOB_TOKEN", "after"),
                ("GFLOW_TIMEOUT_SECS", "60"),
                ("GFLOW_CHECK_ROUNDS", "100000"),
                ("GFLOW_CHECK_PAUSE_MS", "100"),
                ("GFLOW_CHECK_LEAVE", "0:0"),
                ("RUST_LOG", "gflow_transport=debug"),
            ])
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", if r == 1 { "1" } else { "0" });
            Watched::new(c)
        })
        .collect();
    kids[0].wait_for("rank 0 leaves after round 0", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(12));
    let mut kids = kids;
    let pid = kids[2].child.id();
    kids[2].child.kill().expect("kill rank 2");
    let died = Instant::now();
    let outs = ends(kids);
    let (st, at, err) = &outs[1];
    assert!(!st.success(), "rank 1 should fail");
    let want = format!("rank 2 (pid {pid}, host ");
    assert!(
        err.contains(&want) && err.contains(") exited"),
        "rank 1 does not say {want:?}...exited: {err}"
    );
    let after = at.saturating_duration_since(died);
    println!("rank 1 ended {after:?} after rank 2 was killed");
    assert!(
        after < Duration::from_secs(3),
        "rank 1 ended {after:?} after: {err}"
    );
    assert!(outs[0].0.success(), "rank 0 failed: {}", outs[0].2);
}

/// The check job on two hosts of one rank, slowed (a pause between rounds) so that it runs
/// for `rounds` x 100 ms, with stderr watched.
fn slow_job(h: &Hosts, rounds: usize) -> Vec<Watched> {
    let prog = example("collectives_check");
    (0..2)
        .map(|k| {
            let mut c = h.launch(k, 2, 1, &prog);
            c.env("GFLOW_TIMEOUT_SECS", "60")
                .env("GFLOW_CHECK_ROUNDS", rounds.to_string())
                .env("GFLOW_CHECK_PAUSE_MS", "100");
            Watched::new(c)
        })
        .collect()
}

/// A partition (host 1's link down for good) ends the job on both hosts within 15 s, each
/// naming the silent peer and its address, and neither calls it a process that exited.
#[test]
fn a_partition_ends_the_job_on_every_host() {
    let Some(h) = hosts("a_partition_ends_the_job_on_every_host", "p", 2) else {
        return;
    };
    let kids = slow_job(&h, 1000);
    kids[0].wait_for("round 1 ok", Duration::from_secs(30));
    h.cut(1);
    let cut = Instant::now();
    let outs = ends(kids);
    for (k, (st, at, err)) in outs.iter().enumerate() {
        assert!(!st.success(), "host {k} should fail");
        let took = at.saturating_duration_since(cut);
        println!("partition: host {k} ended {took:?} after the cut");
        assert!(
            took < Duration::from_secs(15),
            "host {k} ended {took:?} after the cut"
        );
        let want = format!("no packets from rank {} at {}:", 1 - k, h.addrs[1 - k]);
        assert!(
            err.contains(&want) && err.contains(" for 6 s") && !err.contains("exited"),
            "host {k} does not say {want:?}: {err}"
        );
    }
}

/// An outage shorter than the idle timeout (3 s) is survived: the job goes on and every check
/// passes on both hosts.
#[test]
fn a_short_outage_is_survived() {
    let Some(h) = hosts("a_short_outage_is_survived", "o", 2) else {
        return;
    };
    let kids = slow_job(&h, 40);
    kids[0].wait_for("round 1 ok", Duration::from_secs(30));
    h.cut(1);
    std::thread::sleep(Duration::from_secs(3));
    h.mend(1);
    let mut lines = vec![];
    for (k, mut w) in kids.into_iter().enumerate() {
        let mut out = String::new();
        std::io::Read::read_to_string(w.child.stdout.as_mut().unwrap(), &mut out).unwrap();
        let st = w.child.wait().unwrap();
        assert!(st.success(), "host {k} failed: {}", w.stderr());
        lines.extend(out.lines().map(String::from));
    }
    lines.sort();
    let prog = example("collectives_check");
    let threads = Command::new(&prog)
        .env_remove("WORLD_SIZE")
        .env("GFLOW_SIM_RANKS", "2")
        .env("GFLOW_CHECK_ROUNDS", "40")
        .output()
        .unwrap();
    assert!(threads.status.success());
    assert_eq!(lines, sorted_lines(&[&threads]));
}
