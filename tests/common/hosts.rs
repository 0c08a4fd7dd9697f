//! Simulated hosts for multi-host tests: `scripts/hosts.sh` network namespaces, named per test
//! (so tests run in parallel), deleted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The rendezvous port of the jobs on simulated hosts (each test has its own namespaces, so
/// they never collide).
pub const MASTER_PORT: &str = "29900";

/// Hosts `PREFIX-h0..` made by `scripts/hosts.sh up`, deleted by `down` on drop.
pub struct Hosts {
    prefix: String,
    /// Host k's address.
    pub addrs: Vec<String>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/hosts.sh")
}

impl Hosts {
    /// `n` hosts for the test `tag` (a few letters, unique among the tests), with `flags` for
    /// the script (`--rate 1gbit`, ...); `Err(why)` where this machine cannot make network
    /// namespaces (not root, no `ip`). Any other failure of the script fails the test.
    pub fn up(tag: &str, n: usize, flags: &[&str]) -> Result<Hosts, String> {
        let prefix = format!("gfn-{}{tag}", std::process::id() % 100_000);
        let out = Command::new("bash")
            .arg(script())
            .args(["up", "--hosts", &n.to_string(), "--prefix", &prefix])
            .args(["--subnet", "10.74.0"])
            .args(flags)
            .output()
            .map_err(|e| format!("cannot run scripts/hosts.sh: {e}"))?;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() == Some(2) {
            return Err(err);
        }
        let mut hosts = Hosts {
            prefix,
            addrs: vec![],
        };
        assert!(out.status.success(), "scripts/hosts.sh up failed: {err}");
        hosts.addrs = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
            .collect();
        assert_eq!(hosts.addrs.len(), n, "{out:?}");
        Ok(hosts)
    }

    /// Host k's network namespace.
    pub fn ns(&self, k: usize) -> String {
        format!("{}-h{k}", self.prefix)
    }

    /// `program` to be run inside host k.
    pub fn command(&self, k: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(k)]).arg(program);
        c
    }

    /// `gflow-launch` on host k as node k of `nodes`, `per_node` processes of `program`, node 0
    /// the master.
    pub fn launch(&self, k: usize, nodes: usize, per_node: usize, program: &Path) -> Command {
        let mut c = self.command(k, &super::launcher());
        c.args([
            "--nnodes",
            &nodes.to_string(),
            "--node-rank",
            &k.to_string(),
        ])
        .args(["--nproc-per-node", &per_node.to_string()])
        .args([
            "--master-addr",
            &self.addrs[0],
            "--master-port",
            MASTER_PORT,
        ])
        .arg(program)
        .env("GFLOW_JOB_TOKEN", format!("{}-job", self.prefix));
        c
    }

    /// Cuts host k off the others (its switch port down): a partition.
    pub fn cut(&self, k: usize) {
        self.script_on(k, "cut");
    }

    /// Ends [`Hosts::cut`].
    pub fn mend(&self, k: usize) {
        self.script_on(k, "mend");
    }

    fn script_on(&self, k: usize, what: &str) {
        let st = Command::new("bash")
            .arg(script())
            .args([what, &k.to_string(), "--prefix", &self.prefix])
            .status()
            .expect("run scripts/hosts.sh");
        assert!(st.success(), "scripts/hosts.sh {what} {k}");
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .args(["down", "--prefix", &self.prefix])
            .status();
    }
}
