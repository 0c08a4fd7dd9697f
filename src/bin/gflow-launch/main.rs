//! `gflow-launch`: starts one process per device on this node with `MASTER_ADDR`, `MASTER_PORT`,
//! `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` and `GFLOW_JOB_TOKEN`
//! set, prefixes every output line with its rank, and if one process fails stops the others and
//! exits with that rank's exit code (128 + the signal for a rank a signal ended), naming the
//! rank (or, with `--max-restarts R`, starts the whole job again up to R times).
//!
//! `gflow-launch --nproc-per-node 4 ./target/release/examples/demo` (OneFlow's underscore
//! spellings such as `--nproc_per_node` work too, as do its `--logdir` with
//! `--redirect_stdout_and_stderr`, its `--no_python` and torch's `--use_env` (both implied);
//! and torchrun's `--standalone`, `--nproc-per-node auto|gpu|cpu`, `--log-dir` and
//! `--max-restarts`).

mod cpus;
mod nproc;
mod output;
mod proc;

use std::path::{Path, PathBuf};
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
    /// Rendezvous port on node 0 (default: a free port on a single node, 29500 on several, as
    /// OneFlow's launcher).
    #[arg(long = "master-port", alias = "master_port",
          value_parser = clap::value_parser!(u16).range(1..))]
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
    /// OneFlow's log directory: `DIR/local_rank_I` for each process (its `GLOG_log_dir`), where
    /// `--redirect_stdout_and_stderr` writes its `stdout` and `stderr`.
    #[arg(long = "logdir")]
    logdir: Option<PathBuf>,
    /// OneFlow's: write each process's output to `stdout` and `stderr` in its `--logdir`
    /// directory instead of the console.
    #[arg(
        long = "redirect-stdout-and-stderr",
        alias = "redirect_stdout_and_stderr",
        requires = "logdir"
    )]
    redirect_stdout_and_stderr: bool,
    /// Accepted for `torch.distributed.launch` command lines: every child always finds its
    /// `LOCAL_RANK` (and the rest) in its environment, and no `--local_rank` argument is added.
    #[arg(long = "use-env", alias = "use_env")]
    use_env: bool,
    /// Accepted for OneFlow's and torchrun's command lines: gflow-launch always runs PROGRAM
    /// itself (start a Python script as `gflow-launch ... python script.py`).
    #[arg(long = "no-python", alias = "no_python")]
    no_python: bool,
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

/// Why a job (or one attempt of it) failed, and the launcher's exit code for it.
struct Failure {
    /// What happened, naming the failed rank.
    message: String,
    /// The failed rank's exit code (128 + the signal for a rank ended by one, as shells say),
    /// 130 for an interrupt, 1 for the launcher's own failures.
    code: u8,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure { message, code: 1 }
    }
}

/// The exit code that reports a child's status `st`: its own code, or 128 + the signal that
/// ended it; 1 where that is not a failing code of 1-255.
fn exit_code(st: &std::process::ExitStatus) -> u8 {
    let code = st
        .code()
        .or_else(|| proc::death_signal(st).map(|s| 128 + s))
        .unwrap_or(1);
    u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1)
}

/// The port rank 0 listens on: `--master-port`, else a free one on a single node, else
/// OneFlow's and torch's default, 29500.
fn master_port(a: &Args) -> Result<u16, String> {
    match a.master_port {
        Some(p) => Ok(p),
        None if a.nnodes > 1 => Ok(29_500),
        None => free_port(),
    }
}

/// Runs the job once (restart `attempt`): `Err` names the failed rank.
fn attempt(job: &Job, attempt: usize) -> Result<(), Failure> {
    let a = &job.args;
    let port = master_port(a)?;
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
        if let Some(dir) = &a.logdir
            && let Err(e) = oneflow_logs(&mut cmd, dir, local, a.redirect_stdout_and_stderr)
        {
            stop_all(&mut children);
            return Err(e.into());
        }
        proc::prepare(&mut cmd, share);
        let logs = match &a.log_dir {
            Some(dir) => match output::log_files(dir, attempt, rank) {
                Ok((o, e)) => (Some(o), Some(e)),
                Err(e) => {
                    stop_all(&mut children);
                    return Err(e.into());
                }
            },
            None => (None, None),
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut children);
                return Err(format!("cannot start {:?} for rank {rank}: {e}", a.program[0]).into());
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

/// OneFlow's `--logdir`: the directory `DIR/local_rank_LOCAL` made and named to the child as
/// `GLOG_log_dir`, and with `redirect` its output written there (`stdout`, `stderr`) instead of
/// piped to the console.
///
/// # Errors
/// Why the directory or a file cannot be made.
fn oneflow_logs(cmd: &mut Command, dir: &Path, local: usize, redirect: bool) -> Result<(), String> {
    let d = dir.join(format!("local_rank_{local}"));
    std::fs::create_dir_all(&d)
        .map_err(|e| format!("--logdir: cannot create {}: {e}", d.display()))?;
    let abs = std::path::absolute(&d).unwrap_or_else(|_| d.clone());
    cmd.env("GLOG_log_dir", abs);
    if redirect {
        let open = |name: &str| {
            let p = d.join(name);
            std::fs::File::create(&p)
                .map_err(|e| format!("--logdir: cannot create {}: {e}", p.display()))
        };
        cmd.stdout(open("stdout")?).stderr(open("stderr")?);
    }
    Ok(())
}

/// Waits for the children; on the first failure (or an interrupt) stops them all and says why.
fn watch(children: &mut [(usize, Child)]) -> Option<Failure> {
    let mut running = children.len();
    let mut failure: Option<Failure> = None;
    while running > 0 && failure.is_none() {
        if proc::interrupted() {
            failure = Some(Failure {
                message: "interrupted; stopped every rank".into(),
                code: 130,
            });
            break;
        }
        running = 0;
        for (rank, c) in children.iter_mut() {
            match c.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => {
                    failure = Some(Failure {
                        message: format!(
                            "rank {rank} failed ({}); stopped the other ranks",
                            how(&st)
                        ),
                        code: exit_code(&st),
                    });
                    break;
                }
                Err(e) => failure = Some(format!("cannot wait for rank {rank}: {e}").into()),
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
            failure = Some(Failure {
                message: format!("rank {rank} failed ({}); stopped the other ranks", how(st)),
                code: exit_code(st),
            });
        }
        stop_all(children);
    }
    failure
}

fn run(mut a: Args) -> Result<(), Failure> {
    if a.standalone {
        if a.nnodes != 1 {
            return Err(String::from("--standalone is a single-node job: drop --nnodes").into());
        }
        a.master_addr = "127.0.0.1".into();
    }
    let nproc = a.nproc_per_node.resolve()?;
    if a.nnodes == 0 || a.node_rank >= a.nnodes {
        return Err(format!(
            "need --nnodes >= 1 and 0 <= --node-rank < --nnodes, got --nnodes {} --node-rank {}",
            a.nnodes, a.node_rank
        )
        .into());
    }
    let token = match std::env::var("GFLOW_JOB_TOKEN") {
        Ok(t) if !t.is_empty() => t,
        _ if a.nnodes > 1 => {
            // As OneFlow's and torch's launchers: the nodes find each other by the master's
            // address and port alone (the token a job started by hand has, so such ranks can
            // join too). A shared secret keeps other jobs and strangers out.
            eprintln!(
                "gflow-launch: GFLOW_JOB_TOKEN is not set: the nodes meet by --master-addr and \
                 --master-port alone (set it to the same secret on every node to refuse others)"
            );
            String::new()
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
                    "gflow-launch: {}; restarting every rank (restart {k} of {})",
                    e.message, job.args.max_restarts
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) if k > 0 => {
                return Err(Failure {
                    message: format!("{} (after {k} restarts)", e.message),
                    code: e.code,
                });
            }
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
            eprintln!("gflow-launch: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}
