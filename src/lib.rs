//! gflow: global tensors over many processes and many kinds of device. One program, written as if
//! for a single device, runs on many ranks; the runtime inserts the communication ("boxing").
//!
//! ```
//! use gflow::prelude::*;
//! let shapes = gflow::simulate(2, |env| {
//!     let p = Placement::new("cpu", [0, 1])?;
//!     let x = Tensor::randn(&[4, 5], (&p, Sbp::split(0)))?;
//!     Ok((env.rank(), x.shape().to_vec(), x.to_local()?.shape().to_vec()))
//! })?;
//! assert_eq!(shapes[1], (1, vec![4, 5], vec![2, 5]));
//! # Ok::<(), gflow::Error>(())
//! ```

pub use gflow_core::{
    Buffer, Collectives, CommError, CommOp, CommStats, Communicator, DType, Device, DeviceInfo,
    DeviceKind, DeviceType, Element, Env, Error, HostData, IntoRanks, IntoTarget, NdSbp, Placement,
    Ranks, ReduceOp, Result, Sbp, Tag, Target, Tensor, autograd, backend, boxing, comm, comm_stats,
    devices, empty_cache, is_grad_enabled, manual_seed, nn, no_grad, no_sync, optim, profile,
    reset_comm_stats, sbp,
};

/// The global allocator that puts large buffers in shared memory, so collectives between
/// processes of one host copy each payload once, straight out of the sender's buffer. Opt in
/// with `#[global_allocator] static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;`
/// (see [`gflow_transport::arena`]).
pub use gflow_transport::arena::ShmAlloc;

/// The 16-bit float element types (`DType::F16`, `DType::BF16`), from the `half` crate.
pub use gflow_core::{bf16, f16};

mod log;
pub mod scheduler;

/// Checkpoints: [`checkpoint::save()`] / [`checkpoint::load()`] of a [`StateDict`] (sharded,
/// reshardable, atomic) and plain safetensors files.
pub use gflow_checkpoint as checkpoint;
pub use gflow_core::StateDict;
pub use gflow_core::rng::{RngState, rng_state, set_rng_state};

/// Everything a program needs: `use gflow::prelude::*;` (types, `nn`, `optim`, and the
/// `Module`, `Optimizer` and `Collectives` traits whose methods models, optimizers and
/// communicators use).
pub mod prelude {
    pub use gflow_core::Collectives;
    pub use gflow_core::nn::{self, Module};
    pub use gflow_core::optim::{self, Optimizer};
    pub use gflow_core::{
        DType, Device, Env, IntoTarget, NdSbp, Placement, Ranks, Result, Sbp, Tensor,
    };
}

// The GPU backends this build holds (features `wgpu`, `cuda`), found by core on first use, so
// placements on "wgpu", "cuda" and "gpu" and local tensors on GPU devices need no `init()`.
// A backend is opened on first use; where it has no device that use is `BackendUnavailable`.
#[cfg(feature = "wgpu")]
inventory::submit! {
    backend::BackendRegistration {
        device: DeviceType::Wgpu,
        open: |ordinal| Ok(std::sync::Arc::new(backend::Resident::on(
            gflow_wgpu::WgpuBackend::open(ordinal)?,
            ordinal,
        ))),
        list: gflow_wgpu::device_infos,
    }
}
#[cfg(feature = "cuda")]
inventory::submit! {
    backend::BackendRegistration {
        device: DeviceType::Cuda,
        open: |ordinal| Ok(std::sync::Arc::new(backend::Resident::on(
            gflow_cuda::CudaBackend::with_ordinal(ordinal)?,
            ordinal,
        ))),
        list: gflow_cuda::device_infos,
    }
}

/// The device type named by a `--device TYPE` (or `--device=TYPE`) program argument, `"cpu"`
/// without one: lets one example run on every backend (`--device wgpu`, `--device gpu`).
///
/// # Errors
/// `UnknownDeviceType` for a name other than `cpu`, `cuda`, `wgpu`, `gpu`.
pub fn device_arg() -> Result<DeviceType> {
    let args: Vec<String> = std::env::args().collect();
    let named = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--device=")
            .map(String::from)
            .or_else(|| (a == "--device").then(|| args.get(i + 1).cloned().unwrap_or_default()))
    });
    named.map_or(Ok(DeviceType::Cpu), |n| n.parse())
}

/// `n` ranks as threads of one process (see `gflow_core::simulate`), with the GPU backends
/// registered.
///
/// # Errors
/// The first root-cause error of a rank.
pub fn simulate<T, F>(n: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Env) -> Result<T> + Sync,
{
    log::install();
    gflow_core::simulate(n, |env| {
        tracing::info!(
            rank = env.rank(),
            world = env.world_size(),
            backends = log::backends(),
            device_override = ?env.device_override().ok().flatten(),
            "rank started as a thread (in-process links)"
        );
        f(env)
    })
}

/// Runs `f` as the ranks of a job. Under a launcher ([`launched`]) this process is one rank
/// ([`init`], whose errors for an incomplete job come back: never threads in its place);
/// otherwise `n` ranks (or `GFLOW_SIM_RANKS`) run as threads ([`simulate`]). Returns (rank,
/// result) for the ranks run in this process, so one program serves both ways.
///
/// Under a launcher, once `f` returns this rank's links are flushed and closed before `run`
/// returns (rank 0, over a network, first waits there until every rank has ended), so nothing
/// networked is left for the exit-time destructors, which run after other libraries' (wgpu's).
///
/// # Errors
/// The first root-cause error of a rank (see [`simulate`]), an [`init`] error, or
/// `Environment` for a `GFLOW_SIM_RANKS` that is not a positive number.
pub fn run<T: Send>(n: usize, f: impl Fn(Env) -> Result<T> + Sync) -> Result<Vec<(usize, T)>> {
    keep_freed_memory();
    log::install();
    if launched() {
        let env = init()?;
        let rank = env.rank();
        let out = f(env);
        finish_links();
        return Ok(vec![(rank, out?)]);
    }
    let n = match std::env::var("GFLOW_SIM_RANKS") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&k| k > 0)
            .ok_or_else(|| Error::Environment {
                reason: format!("GFLOW_SIM_RANKS={s:?}: expected a positive number of ranks"),
            })?,
        _ => n,
    };
    Ok(simulate(n, f)?.into_iter().enumerate().collect())
}

/// Whether this process was started as one rank of a job: any variable of gflow-launch /
/// torchrun (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`), Open MPI (`OMPI_COMM_WORLD_*`) or Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS` above 1) is set; [`init`] then forms the job or says what
/// is missing.
pub fn launched() -> bool {
    scheduler::launched()
}

/// Prints each rank's lines, every line prefixed `[rank r] ` when the ranks are threads (the
/// launcher adds the same prefix itself for processes), so both ways print the same.
pub fn print_ranks(out: &[(usize, Vec<String>)]) {
    for (rank, lines) in out {
        for l in lines.iter().flat_map(|l| l.split('\n')) {
            if launched() {
                println!("{l}");
            } else {
                println!("[rank {rank}] {l}");
            }
        }
    }
}

/// Starts (or returns) this process's environment. The job comes from whichever launcher's
/// variables are present ([`scheduler::job_from`]): gflow-launch's / OneFlow's / torchrun's
/// (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`), Open
/// MPI's (`mpirun`) or Slurm's (`srun`). With none of them set (or a world of one) the world is
/// this one rank, so a program runs as is. Idempotent; the env becomes the process's current
/// env. Other variables: `GFLOW_JOB_TOKEN` (every rank must have the same; the launcher sets
/// one), `GFLOW_MASTER_PORT` (the rendezvous port, under any launcher), `GFLOW_TIMEOUT_SECS`
/// (receive and rendezvous deadline, default 60), `GFLOW_MAX_FRAME` (largest accepted message,
/// default 16 GiB).
///
/// # Errors
/// `Environment` for missing or malformed variables of a multi-rank job or a failed rendezvous
/// (wrong token, world size, duplicate or late rank), with the reason, and for a malformed
/// `GFLOW_TIMEOUT_SECS`, `GFLOW_MAX_FRAME`, `GFLOW_TRANSPORT` or `GFLOW_DEVICE_OVERRIDE`;
/// `BackendUnavailable` naming the device when `GFLOW_DEVICE_OVERRIDE` pins this rank to an
/// ordinal this host lacks. These are checked before the rank joins the others.
pub fn init() -> Result<Env> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(env) = Env::process() {
        return Ok(env);
    }
    keep_freed_memory();
    log::install();
    let job = scheduler::current_job()?;
    // Settings a typo would otherwise turn into defaults (or into an error at the first GPU
    // tensor), refused before this rank joins the others.
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let rank = job.as_ref().map_or(0, |j| j.rank);
    let timeout = gflow_core::env::timeout_setting()?;
    let max_frame = max_frame_setting()?;
    let forced =
        gflow_transport::Forced::parse(var("GFLOW_TRANSPORT").as_deref()).map_err(|e| {
            Error::Environment {
                reason: format!("rank {rank}: {e}"),
            }
        })?;
    gflow_core::env::check_device_override(rank)?;
    let Some(job) = job else {
        tracing::info!(backends = log::backends(), "a world of one rank");
        return Ok(Env::single().install_process());
    };
    let hint = if job.port_derived {
        format!(
            " (port {} was derived from the {:?} job; GFLOW_MASTER_PORT sets another)",
            job.master_port, job.launcher
        )
    } else {
        String::new()
    };
    let settings = gflow_transport::Settings {
        rendezvous: gflow_transport::rendezvous::Config {
            master: format!("{}:{}", job.master_addr, job.master_port),
            world: job.world,
            rank,
            token: job.token.into_bytes(),
            timeout,
            host: gflow_transport::rendezvous::host_identity(),
        },
        timeout,
        max_frame,
        transport: forced,
    };
    let comm = std::sync::Arc::new(gflow_transport::connect(&settings).map_err(|e| {
        Error::Environment {
            reason: format!("rank {rank}: {e}{hint}"),
        }
    })?);
    let _ = NET.set(comm.clone());
    // SAFETY: registering a plain `extern "C" fn` with atexit has no preconditions.
    unsafe {
        libc::atexit(flush_at_exit);
    }
    let env = Env::new(job.local_rank, comm).install_process();
    tracing::info!(
        rank,
        world = job.world,
        local_rank = job.local_rank,
        launcher = ?job.launcher,
        backends = log::backends(),
        device_override = ?env.device_override().ok().flatten(),
        "rank started (its GPU ordinal on this host follows local_rank)"
    );
    Ok(env)
}

/// `GFLOW_MAX_FRAME`: the largest message a link accepts, in bytes (default 16 GiB).
///
/// # Errors
/// `Environment` naming the variable and its value when it is not a positive integer.
fn max_frame_setting() -> Result<u64> {
    const DEFAULT: u64 = 16 << 30;
    match std::env::var("GFLOW_MAX_FRAME") {
        Err(std::env::VarError::NotPresent) => Ok(DEFAULT),
        Ok(s) if s.trim().is_empty() => Ok(DEFAULT),
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::Environment {
                reason: format!(
                    "GFLOW_MAX_FRAME={s:?}: expected a positive number of bytes (default {DEFAULT})"
                ),
            }),
        Err(e) => Err(Error::Environment {
            reason: format!("GFLOW_MAX_FRAME: {e}"),
        }),
    }
}

/// Asks glibc's allocator to keep freed tensor buffers for reuse instead of returning them to
/// the kernel: tensors of megabytes are otherwise mmapped and unmapped per operation, and the
/// page faults of fresh pages cost more than the arithmetic (measured: a data-parallel training
/// step of 3 layers of 1024 went from 68 to 47 ms). Like PyTorch's caching allocator, memory
/// stays with the process. Skipped when the user set `MALLOC_MMAP_THRESHOLD_`.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only changes allocator parameters; it has no memory-safety
        // preconditions and is harmless to repeat.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}

/// The process's network communicator, flushed at exit so that queued sends reach their peers.
static NET: std::sync::OnceLock<std::sync::Arc<gflow_transport::NetComm>> =
    std::sync::OnceLock::new();

/// The kinds of link this process has to the other ranks (`"shm"`, `"quic"`, `"tcp"`), each
/// once; empty before [`init`] or in a world of one. Benchmarks label their rows with it.
pub fn link_kinds() -> Vec<&'static str> {
    NET.get()
        .map(|c| c.link_kinds().to_vec())
        .unwrap_or_default()
}

/// Flushes and closes this process's links (queued sends reach their peers; rank 0 stays the
/// control channel's hub until every rank has ended); later calls do nothing.
fn finish_links() {
    if let Some(c) = NET.get() {
        c.flush(std::time::Duration::from_secs(10));
    }
}

extern "C" fn flush_at_exit() {
    finish_links();
}
