//! `gflow-launch`: starts one process per device on this node with `MASTER_ADDR`, `MASTER_PORT`,
//! `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` and `GFLOW_JOB_TOKEN`
//! set, prefixes every output line with its rank, and if one process fails stops the others and
//! exits non-zero naming the rank (or, with `--max-restarts R`, starts the whole job again up to
//! R times).
//!
//! `gflow-launch --nproc-per-node 4 ./target/release/examples/demo` (OneFlow's underscore
//! spellings such as `--nproc_per_node` work too, and torchrun's `--standalone`,
//! `--nproc-per-node auto|gpu|cpu`, `--log-dir` and `--max-restarts`).

mod cpus;
mod nproc;
mod output;
mod proc;

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

use cpus::BindTo;
use nproc::Nproc;
use output::Stream;

/// Start N processes of PROGRAM on this node as ranks of one gflow job.
#[derive(Parser, Debug)]
#[command(name = "gflow-launch", version, trailing_var_arg = true)]
struct Args {
    /// Processes on this node: a number, `auto` (one per GPU, else one per CPU, as torchrun),
    /// `gpu` (one per GPU; an error without one) or `cpu` (one per CPU).
    #[arg(long = "nproc-per-node", alias = "nproc_per_node", default_value = "1",
          value_parser = nproc::parse)]
    nproc_per_node: Nproc,
    /// Number of nodes.
    #[arg(long = "nnodes", default_value_t = 1)]
    nnodes: usize,
    /// This node's index.
    #[arg(long = "node-rank", alias = "node_rank", default_value_t = 0)]
    node_rank: usize,
    /// Address of node 0.
    #[arg(
        long = "master-addr",
        alias = "master_addr",
        default_value = "127.0.0.1"
    )]
    master_addr: String,
    /// Rendezvous port on node 0 (default: a free port, single node only).
    #[arg(long = "master-port", alias = "master_port")]
    master_port: Option<u16>,
    /// A single-node job on this host with a free port (torchrun's `--standalone`).
    #[arg(long, conflicts_with_all = ["master_addr", "master_port", "node_rank"])]
    standalone: bool,
    /// After a failure, stop every rank and start the whole job again, up to this many times
    /// (each rank sees `GFLOW_RESTART_COUNT`); non-zero exit if it still fails.
    #[arg(long = "max-restarts", alias = "max_restarts", default_value_t = 0)]
    max_restarts: usize,
    /// Also write each rank's output, unprefixed, to `DIR/attempt_K/RANK/{stdout,stderr}.log`.
    #[arg(long = "log-dir", alias = "log_dir")]
    log_dir: Option<PathBuf>,
    /// Pin each process to its share of this launcher's CPUs (`core`), or not (`none`);
    /// `auto` pins unless there are more processes than CPUs. A process left free to migrate
    /// shares a core with its peer at times, and every small collective then waits out a
    /// time slice (2 processes, 1 KiB all_reduce: 67 us unpinned, 1 us pinned).
    #[arg(long = "bind-to", alias = "bind_to", value_enum, default_value_t = BindTo::Auto)]
    bind_to: BindTo,
    /// The program and its arguments.
    #[arg(required = true)]
    program: Vec<String>,
}

fn token() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("no random bytes for a job token: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A port for rank 0 to listen on: a free one below Linux's ephemeral range (32768-60999), so
/// that no outgoing connection takes it between this check and rank 0's bind (a port from
/// `bind(0)` comes from that range, and did get taken so under a busy test suite); the
/// ephemeral range's where none of a few random tries is free.
fn free_port() -> Result<u16, String> {
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    for _ in 0..32 {
        let mut b = [0u8; 2];
        getrandom::fill(&mut b).map_err(|e| format!("no random bytes for a port: {e}"))?;
        let port = LOW + u16::from_le_bytes(b) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Stops every child and what it started: each child leads its own process group, so a
/// grandchild (a shell's command) that holds the output pipes goes too.
fn stop_all(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter() {
        proc::terminate(c);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    for (_, c) in children.iter_mut() {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        proc::kill(c);
    }
}

fn how(st: &std::process::ExitStatus) -> String {
    st.code().map_or_else(
        || format!("signal {}", proc::death_signal(st).unwrap_or(0)),
        |c| format!("exit code {c}"),
    )
}

/// What every attempt of the job shares.
struct Job {
    args: Args,
    nproc: usize,
    token: String,
    /// Threads per process (the node's cores over its processes).
    threads: String,
    oversubscribed: bool,
}

/// Runs the job once (restart `attempt`): `Err` names the failed rank.
fn attempt(job: &Job, attempt: usize) -> Result<(), String> {
    let a = &job.args;
    let port = match a.master_port {
        Some(p) => p,
        None => free_port()?,
    };
    let world = job.nproc * a.nnodes;
    let shares = cpus::cpu_shares(a.bind_to, job.nproc);
    let mut children = vec![];
    let mut pumps = vec![];
    for (local, share) in shares.into_iter().enumerate() {
        let rank = a.node_rank * job.nproc + local;
        let mut cmd = Command::new(&a.program[0]);
        // Share the node's cores between its processes (as torchrun sets OMP_NUM_THREADS), so
        // that the kernels' thread pools do not oversubscribe; a value the user set is kept.
        for var in ["RAYON_NUM_THREADS", "MATMUL_NUM_THREADS", "OMP_NUM_THREADS"] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, &job.threads);
            }
        }
        cmd.args(&a.program[1..])
            .env("MASTER_ADDR", &a.master_addr)
            .env("MASTER_PORT", port.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("LOCAL_WORLD_SIZE", job.nproc.to_string())
            .env("GROUP_RANK", a.node_rank.to_string())
            .env("GFLOW_RESTART_COUNT", attempt.to_string())
            .env("GFLOW_JOB_TOKEN", &job.token)
            .env(
                "GFLOW_OVERSUBSCRIBED",
                if job.oversubscribed { "1" } else { "0" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        proc::prepare(&mut cmd, share);
        let logs = match &a.log_dir {
            Some(dir) => match output::log_files(dir, attempt, rank) {
                Ok((o, e)) => (Some(o), Some(e)),
                Err(e) => {
                    stop_all(&mut children);
                    return Err(e);
                }
            },
            None => (None, None),
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut children);
                return Err(format!(
                    "cannot start {:?} for rank {rank}: {e}",
                    a.program[0]
                ));
            }
        };
        if let Some(o) = child.stdout.take() {
            pumps.push(output::pump(rank, o, Stream::Out, logs.0));
        }
        if let Some(e) = child.stderr.take() {
            pumps.push(output::pump(rank, e, Stream::Err, logs.1));
        }
        children.push((rank, child));
    }
    let failure = watch(&mut children);
    for p in pumps {
        let _ = p.join();
    }
    failure.map_or(Ok(()), Err)
}

/// Waits for the children; on the first failure (or an interrupt) stops them all and says why.
fn watch(children: &mut [(usize, Child)]) -> Option<String> {
    let mut running = children.len();
    let mut failure: Option<String> = None;
    while running > 0 && failure.is_none() {
        if proc::interrupted() {
            failure = Some("interrupted; stopped every rank".into());
            break;
        }
        running = 0;
        for (rank, c) in children.iter_mut() {
            match c.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => {
                    failure = Some(format!(
                        "rank {rank} failed ({}); stopped the other ranks",
                        how(&st)
                    ));
                    break;
                }
                Err(e) => failure = Some(format!("cannot wait for rank {rank}: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if failure.is_some() {
        // Peers of a dead rank fail right after it: gather what ended in a short grace period
        // and name the root cause (a rank ended by a signal) rather than the first noticed.
        let grace = Instant::now() + Duration::from_millis(500);
        let mut ended: Vec<(usize, std::process::ExitStatus)> = vec![];
        while Instant::now() < grace {
            ended = children
                .iter_mut()
                .filter_map(|(r, c)| c.try_wait().ok().flatten().map(|st| (*r, st)))
                .collect();
            if ended.len() == children.len() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let root = ended
            .iter()
            .find(|(_, st)| proc::death_signal(st).is_some())
            .or_else(|| ended.iter().find(|(_, st)| !st.success()));
        if let (Some((rank, st)), false) = (root, proc::interrupted()) {
            failure = Some(format!(
                "rank {rank} failed ({}); stopped the other ranks",
                how(st)
            ));
        }
        stop_all(children);
    }
    failure
}

fn run(mut a: Args) -> Result<(), String> {
    if a.standalone {
        if a.nnodes != 1 {
            return Err("--standalone is a single-node job: drop --nnodes".into());
        }
        a.master_addr = "127.0.0.1".into();
    }
    let nproc = a.nproc_per_node.resolve()?;
    if a.nnodes == 0 || a.node_rank >= a.nnodes {
        return Err("need --nnodes >= 1 and --node-rank < --nnodes".into());
    }
    if a.master_port.is_none() && a.nnodes > 1 {
        return Err("--master-port is required with --nnodes > 1".into());
    }
    let token = match std::env::var("GFLOW_JOB_TOKEN") {
        Ok(t) if !t.is_empty() => t,
        _ if a.nnodes > 1 => {
            return Err("set GFLOW_JOB_TOKEN to the same secret on every node".into());
        }
        _ => token()?,
    };
    proc::catch_interrupts();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let job = Job {
        nproc,
        token,
        threads: (cores / nproc).max(1).to_string(),
        oversubscribed: nproc > cores,
        args: a,
    };
    let mut k = 0;
    loop {
        match attempt(&job, k) {
            Ok(()) => return Ok(()),
            Err(e) if k < job.args.max_restarts && !proc::interrupted() => {
                k += 1;
                eprintln!(
                    "gflow-launch: {e}; restarting every rank (restart {k} of {})",
                    job.args.max_restarts
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) if k > 0 => return Err(format!("{e} (after {k} restarts)")),
            Err(e) => return Err(e),
        }
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // clap's message names an unknown flag; --help and --version exit 0.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gflow-launch: {e}");
            ExitCode::FAILURE
        }
    }
}
