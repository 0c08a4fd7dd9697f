//! `gflow-bench collectives` labels its rows with the links the run used, as the transport
//! reports them: `gflow-shm` on one host (also under `GFLOW_TRANSPORT=tcp`), `gflow-quic` /
//! `gflow-tcp` under `GFLOW_TRANSPORT=quic` / `tcp-all`, and `gflow-shm+quic` (default) or
//! `gflow-shm+tcp` (`GFLOW_TRANSPORT=tcp`) for two ranks on each of two hosts (network
//! namespaces, root only).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn exe(name: &str) -> PathBuf {
    match name {
        "launch" => PathBuf::from(env!("CARGO_BIN_EXE_gflow-launch")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_gflow-bench")),
    }
}

/// The arguments of a small, quick collectives run that writes rank 0's rows to `out`.
fn bench_args(out: &std::path::Path) -> Vec<String> {
    let out = out.display().to_string();
    [
        "collectives",
        "--kib",
        "--sizes",
        "4",
        "--runs",
        "1",
        "--ops",
        "all_reduce",
        "--out",
        &out,
    ]
    .map(String::from)
    .to_vec()
}

/// The distinct `system` labels in a JSON-lines file.
fn systems(out: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(out).unwrap();
    let mut s: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["system"].as_str().unwrap().to_string()
        })
        .collect();
    s.dedup();
    s
}

/// A fresh directory for one run's rows, removed when the test ends.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("gflow-labels-")
        .tempdir()
        .unwrap()
}

fn one_host(transport: Option<&str>) -> Vec<String> {
    let dir = scratch();
    let out = dir
        .path()
        .join(format!("{}.jsonl", transport.unwrap_or("default")));
    let mut cmd = Command::new(exe("launch"));
    cmd.args(["--nproc-per-node", "2"])
        .arg(exe("bench"))
        .args(bench_args(&out))
        .env_remove("GFLOW_TRANSPORT")
        .env_remove("GFLOW_COLLECTIVES");
    if let Some(t) = transport {
        cmd.env("GFLOW_TRANSPORT", t);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    systems(&out)
}

#[test]
fn one_host_rows_say_shm() {
    assert_eq!(one_host(None), ["gflow-shm"]);
}

#[test]
fn rows_say_quic_when_every_peer_is_over_quic() {
    assert_eq!(one_host(Some("quic")), ["gflow-quic"]);
}

#[test]
fn rows_say_tcp_when_every_peer_is_over_tcp() {
    assert_eq!(one_host(Some("tcp-all")), ["gflow-tcp"]);
}

#[test]
fn one_host_rows_say_shm_under_tcp_between_hosts() {
    assert_eq!(one_host(Some("tcp")), ["gflow-shm"]);
}

#[test]
fn two_hosts_of_two_ranks_say_shm_and_quic() {
    if let Some(labels) = two_hosts_of_two_ranks(None) {
        assert_eq!(labels, ["gflow-shm+quic"]);
    }
}

#[test]
fn two_hosts_of_two_ranks_say_shm_and_tcp_under_tcp() {
    if let Some(labels) = two_hosts_of_two_ranks(Some("tcp")) {
        assert_eq!(labels, ["gflow-shm+tcp"]);
    }
}

/// Two "hosts" (network namespaces joined by a veth pair) with two ranks each, under
/// `GFLOW_TRANSPORT=transport`: rank 0 reaches one peer through shared memory and two over the
/// network. The labels of its rows; none where namespaces cannot be made (said loudly).
fn two_hosts_of_two_ranks(transport: Option<&str>) -> Option<Vec<String>> {
    let id = std::process::id() % 1000;
    let t = if transport.is_some() { "t" } else { "q" };
    let ns = [format!("gfn-l{t}{id}a"), format!("gfn-l{t}{id}b")];
    let veth = ns.clone();
    let ip = |args: &[&str]| {
        Command::new("ip")
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    struct Cleanup(Vec<String>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for n in &self.0 {
                let _ = Command::new("ip").args(["netns", "del", n]).output();
            }
        }
    }
    let _cleanup = Cleanup(ns.to_vec());
    let subnet = format!("10.74.{}", 100 + id % 150);
    let setup = ip(&["netns", "add", &ns[0]])
        && ip(&["netns", "add", &ns[1]])
        && ip(&[
            "link", "add", &veth[0], "netns", &ns[0], "type", "veth", "peer", "name", &veth[1],
            "netns", &ns[1],
        ])
        && (0..2).all(|k| {
            let addr = format!("{subnet}.{}/24", k + 1);
            ip(&["-n", &ns[k], "addr", "add", &addr, "dev", &veth[k]])
                && ip(&["-n", &ns[k], "link", "set", &veth[k], "up"])
                && ip(&["-n", &ns[k], "link", "set", "lo", "up"])
        });
    if !setup {
        gflow::backend::say_skipped(
            "two_hosts_of_two_ranks",
            &"this machine does not permit network namespaces (needs root and `ip`); the \
              two-host label is NOT tested here",
        );
        return None;
    }
    let dir = scratch();
    let out = dir.path().join("rows.jsonl");
    let node = |k: usize| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns[k]])
            .arg(exe("launch"))
            .args(["--nnodes", "2", "--node-rank", &k.to_string()])
            .args(["--nproc-per-node", "2", "--bind-to", "none"])
            .args([
                "--master-addr",
                &format!("{subnet}.1"),
                "--master-port",
                "29920",
            ])
            .arg(exe("bench"))
            .args(bench_args(&out))
            .env("GFLOW_JOB_TOKEN", "labels")
            .env("GFLOW_TIMEOUT_SECS", "20")
            .env_remove("GFLOW_TRANSPORT")
            .env_remove("GFLOW_COLLECTIVES")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(t) = transport {
            c.env("GFLOW_TRANSPORT", t);
        }
        c.spawn().expect("start a node")
    };
    let (a, b) = (node(0), node(1));
    for o in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    Some(systems(&out))
}
