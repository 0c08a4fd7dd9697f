//! `gflow-launch`: starts one process per device on this node with `MASTER_ADDR`, `MASTER_PORT`,
//! `WORLD_SIZE`, `RANK`, `LOCAL_RANK` and `GFLOW_JOB_TOKEN` set, prefixes every output line with
//! its rank, and if one process fails stops the others and exits non-zero naming the rank.
//!
//! `gflow-launch --nproc-per-node 4 ./target/release/examples/demo` (OneFlow's underscore
//! spellings such as `--nproc_per_node` work too).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

/// Start N processes of PROGRAM on this node as ranks of one gflow job.
#[derive(Parser, Debug)]
#[command(name = "gflow-launch", version, trailing_var_arg = true)]
struct Args {
    /// Processes (devices) on this node.
    #[arg(long = "nproc-per-node", alias = "nproc_per_node", default_value_t = 1)]
    nproc_per_node: usize,
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
    /// Pin each process to its share of this launcher's CPUs (`core`), or not (`none`);
    /// `auto` pins unless there are more processes than CPUs. A process left free to migrate
    /// shares a core with its peer at times, and every small collective then waits out a
    /// time slice (2 processes, 1 KiB all_reduce: 67 us unpinned, 1 us pinned).
    #[arg(long = "bind-to", alias = "bind_to", value_enum, default_value_t = BindTo::Auto)]
    bind_to: BindTo,
    /// The program and its arguments.
    #[arg(required = true, allow_hyphen_values = true)]
    program: Vec<String>,
}

/// How the launcher pins its processes to CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BindTo {
    /// `core` unless there are more processes than CPUs (then `none`), as Open MPI does.
    Auto,
    /// Each process gets an equal, disjoint share of the launcher's CPUs.
    Core,
    /// No pinning.
    None,
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set it is given; CPU_ISSET reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Each of `n` processes' CPU set under `bind` (`None`: not pinned).
fn cpu_shares(bind: BindTo, n: usize) -> Vec<Option<libc::cpu_set_t>> {
    let cpus = allowed_cpus();
    let pin = match bind {
        BindTo::None => false,
        BindTo::Core => !cpus.is_empty(),
        BindTo::Auto => !cpus.is_empty() && n <= cpus.len(),
    };
    (0..n)
        .map(|i| {
            pin.then(|| {
                // Process i takes CPUs [i * len / n, (i + 1) * len / n), or one CPU in turn
                // when there are more processes than CPUs.
                let (len, mut set) = (cpus.len(), empty_cpu_set());
                let lo = i * len / n;
                for &c in &cpus[lo..((i + 1) * len / n).max(lo + 1)] {
                    // SAFETY: `c` is below CPU_SETSIZE (it came from a set).
                    unsafe { libc::CPU_SET(c, &mut set) };
                }
                set
            })
        })
        .collect()
}

/// A CPU set with no CPU.
fn empty_cpu_set() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    unsafe { std::mem::zeroed() }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn token() -> Result<String, String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

fn pump(
    rank: usize,
    src: impl std::io::Read + Send + 'static,
    to_err: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(src).lines().map_while(Result::ok) {
            if to_err {
                let _ = writeln!(std::io::stderr().lock(), "[rank {rank}] {line}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[rank {rank}] {line}");
            }
        }
    })
}

fn stop_all(children: &mut [(usize, Child)]) {
    for (_, c) in children.iter() {
        // SAFETY: sending a signal to a child we spawned has no memory-safety preconditions.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    for (_, c) in children.iter_mut() {
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn run(a: Args) -> Result<(), String> {
    if a.nproc_per_node == 0 || a.nnodes == 0 || a.node_rank >= a.nnodes {
        return Err("need --nproc-per-node >= 1, --nnodes >= 1 and --node-rank < --nnodes".into());
    }
    let port = match a.master_port {
        Some(p) => p,
        None if a.nnodes == 1 => free_port()?,
        None => return Err("--master-port is required with --nnodes > 1".into()),
    };
    let job_token = match std::env::var("GFLOW_JOB_TOKEN") {
        Ok(t) if !t.is_empty() => t,
        _ if a.nnodes > 1 => {
            return Err("set GFLOW_JOB_TOKEN to the same secret on every node".into());
        }
        _ => token()?,
    };
    // SAFETY: installing a handler that only stores to an atomic is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let world = a.nproc_per_node * a.nnodes;
    // Share the node's cores between its processes (as torchrun sets OMP_NUM_THREADS), so
    // that the kernels' thread pools do not oversubscribe; a value the user set is kept.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (cores / a.nproc_per_node.max(1)).max(1).to_string();
    let shares = cpu_shares(a.bind_to, a.nproc_per_node);
    let mut children = vec![];
    let mut pumps = vec![];
    for (local, share) in shares.into_iter().enumerate() {
        let rank = a.node_rank * a.nproc_per_node + local;
        let mut cmd = Command::new(&a.program[0]);
        for var in ["RAYON_NUM_THREADS", "MATMUL_NUM_THREADS"] {
            if std::env::var_os(var).is_none() {
                cmd.env(var, &threads);
            }
        }
        cmd.args(&a.program[1..])
            .env("MASTER_ADDR", &a.master_addr)
            .env("MASTER_PORT", port.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", local.to_string())
            .env("GFLOW_JOB_TOKEN", &job_token)
            .env(
                "GFLOW_OVERSUBSCRIBED",
                if a.nproc_per_node > cores { "1" } else { "0" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl and sched_setaffinity in the child before exec only set its
        // parent-death signal and its CPUs (both async-signal-safe system calls).
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(set) = &share {
                    libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set);
                }
                Ok(())
            });
        }
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
            pumps.push(pump(rank, o, false));
        }
        if let Some(e) = child.stderr.take() {
            pumps.push(pump(rank, e, true));
        }
        children.push((rank, child));
    }
    let mut running = children.len();
    let mut failure: Option<String> = None;
    while running > 0 && failure.is_none() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            failure = Some("interrupted; stopped every rank".into());
            break;
        }
        running = 0;
        for (rank, c) in children.iter_mut() {
            match c.try_wait() {
                Ok(None) => running += 1,
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => {
                    let how = st.code().map_or_else(
                        || format!("signal {}", st.signal().unwrap_or(0)),
                        |c| format!("exit code {c}"),
                    );
                    failure = Some(format!(
                        "rank {rank} failed ({how}); stopped the other ranks"
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
            .find(|(_, st)| st.signal().is_some())
            .or_else(|| ended.iter().find(|(_, st)| !st.success()));
        if let (Some((rank, st)), false) = (root, INTERRUPTED.load(Ordering::SeqCst)) {
            let how = st.code().map_or_else(
                || format!("signal {}", st.signal().unwrap_or(0)),
                |c| format!("exit code {c}"),
            );
            failure = Some(format!(
                "rank {rank} failed ({how}); stopped the other ranks"
            ));
        }
        stop_all(&mut children);
    }
    for p in pumps {
        let _ = p.join();
    }
    failure.map_or(Ok(()), Err)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gflow-launch: {e}");
            ExitCode::FAILURE
        }
    }
}
