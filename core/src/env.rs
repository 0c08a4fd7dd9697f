//! The process environment: this rank, the world, the communicator, and the random generator's
//! state. Tensors use the *current* env: the calling thread's (set by `simulate` for each rank
//! thread), else the process's (set by `gflow::init`), else a world of one rank.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::comm::{Communicator, Counted, InProcComm};
use crate::error::{Error, Result};
use crate::placement::DeviceType;

/// Default deadline of a blocking receive in `simulate` (override with `GFLOW_TIMEOUT_SECS`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

use crate::rng::RngState;

struct EnvInner {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    /// The transport's communicator, wrapped to count what moves (`comm_stats`).
    comm: Arc<Counted>,
    rng: Mutex<RngState>,
    /// This rank's device type (and ordinal, if pinned) from `GFLOW_DEVICE_OVERRIDE`, read once
    /// when the env is made (operators resolve devices on every call), or why the variable is
    /// malformed.
    device_override: std::result::Result<Option<Pin>, String>,
}

/// One rank's view of the job: rank, world size, local rank and the communicator.
/// A cheap handle.
#[derive(Clone)]
pub struct Env(Arc<EnvInner>);

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("rank", &self.rank())
            .field("world_size", &self.world_size())
            .field("local_rank", &self.local_rank())
            .finish()
    }
}

impl Env {
    /// An env over `comm`, which decides rank and world size.
    pub fn new(local_rank: usize, comm: Arc<dyn Communicator>) -> Env {
        Env(Arc::new(EnvInner {
            device_override: device_override_from_env(comm.rank()),
            rank: comm.rank(),
            world_size: comm.world_size(),
            local_rank,
            comm: Arc::new(Counted::new(comm)),
            rng: Mutex::new(RngState {
                seed: 0,
                counter: 0,
            }),
        }))
    }

    /// A world of one rank (rank 0), used when no distributed environment is configured.
    pub fn single() -> Env {
        Env::new(0, Arc::new(InProcComm::solo()))
    }

    /// This process's rank in the world.
    pub fn rank(&self) -> usize {
        self.0.rank
    }

    /// Number of ranks in the world.
    pub fn world_size(&self) -> usize {
        self.0.world_size
    }

    /// This process's index among the ranks of its node.
    pub fn local_rank(&self) -> usize {
        self.0.local_rank
    }

    /// This rank's device type and ordinal from `GFLOW_DEVICE_OVERRIDE`, if the variable names
    /// it (the ordinal `None` when the item is `RANK:TYPE`).
    ///
    /// # Errors
    /// `Environment` for a malformed value (every item must be `RANK:TYPE[:ORDINAL]`).
    pub fn device_override(&self) -> Result<Option<Pin>> {
        self.0
            .device_override
            .clone()
            .map_err(|reason| Error::Environment { reason })
    }

    /// The communicator that boxing uses.
    pub fn comm(&self) -> &dyn Communicator {
        self.0.comm.as_ref()
    }

    /// The counters of [`crate::comm_stats`].
    pub(crate) fn comm_counts(&self) -> &Counted {
        &self.0.comm
    }

    /// Sets the seed of the random generator and restarts its stream (call it on every rank).
    pub fn manual_seed(&self, seed: u64) {
        if let Ok(mut s) = self.0.rng.lock() {
            *s = RngState { seed, counter: 0 };
        }
    }

    /// The random generator's state (see [`crate::rng::rng_state`]).
    pub fn rng_state(&self) -> RngState {
        *self.0.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Restores a state [`Env::rng_state`] gave (see [`crate::rng::set_rng_state`]).
    pub fn set_rng_state(&self, state: RngState) {
        *self.0.rng.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// The (seed, index) of the next random tensor, advancing the index (past `u64::MAX` it
    /// wraps to 0: a state restored from a checkpoint may hold any counter).
    pub(crate) fn next_random(&self) -> (u64, u64) {
        match self.0.rng.lock() {
            Ok(mut s) => {
                let k = s.counter;
                s.counter = s.counter.wrapping_add(1);
                (s.seed, k)
            }
            Err(p) => {
                let s = p.into_inner();
                (s.seed, s.counter)
            }
        }
    }

    /// Makes this env the calling thread's current env until the guard drops.
    pub fn enter(&self) -> EnvGuard {
        let prev = CURRENT.with(|c| c.replace(Some(self.clone())));
        EnvGuard { prev }
    }

    /// Makes this env the process's current env (what `gflow::init` does). Only the first call
    /// takes effect; later calls return the env already installed.
    pub fn install_process(self) -> Env {
        PROCESS.get_or_init(|| self).clone()
    }

    /// The env installed for the process, if any.
    pub fn process() -> Option<Env> {
        PROCESS.get().cloned()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Env>> = const { RefCell::new(None) };
}
static PROCESS: OnceLock<Env> = OnceLock::new();

/// Restores the previous current env when dropped.
pub struct EnvGuard {
    prev: Option<Env>,
}

impl Drop for EnvGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        CURRENT.with(|c| *c.borrow_mut() = prev);
    }
}

/// The current env: the thread's, else the process's, else a world of one rank (installed as
/// the process's env on first use).
pub fn current() -> Env {
    CURRENT
        .with(|c| c.borrow().clone())
        .unwrap_or_else(|| PROCESS.get_or_init(Env::single).clone())
}

/// Sets the seed of the current env's random generator (same call on every rank).
pub fn manual_seed(seed: u64) {
    current().manual_seed(seed);
}

/// The receive deadline: `GFLOW_TIMEOUT_SECS` if set and valid, else [`DEFAULT_TIMEOUT`]
/// ([`timeout_setting`] refuses an invalid value instead).
pub fn timeout_from_env() -> Duration {
    timeout_setting().unwrap_or(DEFAULT_TIMEOUT)
}

/// The receive deadline: `GFLOW_TIMEOUT_SECS` (seconds, a positive finite number such as `30`
/// or `0.5`) if set, else [`DEFAULT_TIMEOUT`].
///
/// # Errors
/// `Environment` naming the variable, what it must be and its value when it is set to
/// anything else (a typo must not quietly become the default deadline).
pub fn timeout_setting() -> Result<Duration> {
    let Some(raw) = std::env::var_os("GFLOW_TIMEOUT_SECS") else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let s = raw.to_string_lossy();
    if s.trim().is_empty() {
        return Ok(DEFAULT_TIMEOUT);
    }
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| *v > 0.0 && v.is_finite())
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| Error::Environment {
            reason: format!(
                "GFLOW_TIMEOUT_SECS={s:?}: expected a positive number of seconds (such as 60)"
            ),
        })
}

/// Runs `n` ranks as threads of one process, joined by an in-process communicator, each with
/// its own current env; returns their results in rank order.
///
/// ```
/// # use gflow_core::{simulate, Placement, Sbp, Tensor};
/// let sums = simulate(2, |env| {
///     let p = Placement::new("cpu", [0, 1])?;
///     let x = Tensor::ones(&[4, 2], (&p, Sbp::split(0)))?;
///     Ok((env.rank(), x.to_local()?.shape().to_vec()))
/// })?;
/// assert_eq!(sums, vec![(0, vec![2, 2]), (1, vec![2, 2])]);
/// # Ok::<(), gflow_core::Error>(())
/// ```
///
/// # Errors
/// The first rank's error in rank order that is a root cause (not just a peer that went away);
/// `RankPanicked` if a rank panicked; `InvalidArgument` for `n == 0`; `Environment` for a
/// `GFLOW_TIMEOUT_SECS` that is not a positive number of seconds.
pub fn simulate<T, F>(n: usize, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Env) -> Result<T> + Sync,
{
    simulate_with_timeout(n, timeout_setting()?, f)
}

/// [`simulate`] with an explicit receive deadline.
///
/// # Errors
/// As [`simulate`].
pub fn simulate_with_timeout<T, F>(n: usize, timeout: Duration, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Env) -> Result<T> + Sync,
{
    if n == 0 {
        return Err(Error::InvalidArgument {
            op: "simulate",
            reason: "needs at least one rank".into(),
        });
    }
    let f = &f;
    let results: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = InProcComm::mesh(n, timeout)
            .into_iter()
            .enumerate()
            .map(|(rank, comm)| {
                std::thread::Builder::new()
                    .name(format!("gflow-rank-{rank}"))
                    .spawn_scoped(s, move || {
                        let env = Env::new(rank, Arc::new(comm));
                        let _guard = env.enter();
                        f(env)
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h {
                Err(e) => Err(Error::Environment {
                    reason: format!("cannot spawn the thread of rank {rank}: {e}"),
                }),
                Ok(h) => h.join().unwrap_or_else(|p| {
                    let message = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(Error::RankPanicked { rank, message })
                }),
            })
            .collect()
    });
    if results.iter().all(Result::is_ok) {
        return results.into_iter().collect();
    }
    let mut errs: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
    let root = errs.iter().position(|e| !e.is_consequence()).unwrap_or(0);
    Err(errs.swap_remove(root))
}

/// The device type rank `rank` computes a `placement_type` placement on: the type named for it
/// in `GFLOW_DEVICE_OVERRIDE` (the same variable on every rank of a job, so every rank knows
/// every rank's device), else the placement's; `gpu` resolves as it does on this rank.
pub(crate) fn device_type_of(rank: usize, placement_type: DeviceType) -> DeviceType {
    let t = device_override_from_env(rank)
        .ok()
        .flatten()
        .map_or(placement_type, |(t, _)| t);
    if t == DeviceType::Gpu {
        return if crate::backend::kernels(DeviceType::Cuda).is_ok() {
            DeviceType::Cuda
        } else {
            DeviceType::Wgpu
        };
    }
    t
}

/// Checks what `GFLOW_DEVICE_OVERRIDE` says about `rank` before the rank starts (what
/// `gflow::init` calls, so a wrong pin fails at the start rather than at the first tensor on
/// the device): the value must be well formed, and an ordinal pinned for `rank` must name a
/// device of that type on this host (`gpu` meaning CUDA where it has a device, else wgpu).
/// A type pinned without an ordinal is checked when first used, as without the override.
///
/// # Errors
/// `Environment` for a malformed value; `BackendUnavailable` naming the device (`cuda:3`) when
/// the pinned ordinal has no device here.
pub fn check_device_override(rank: usize) -> Result<()> {
    let pin = device_override_from_env(rank).map_err(|reason| Error::Environment { reason })?;
    let Some((t, Some(ordinal))) = pin else {
        return Ok(());
    };
    let t = match t {
        DeviceType::Gpu if !crate::backend::device_list(DeviceType::Cuda).is_empty() => {
            DeviceType::Cuda
        }
        DeviceType::Gpu => DeviceType::Wgpu,
        t => t,
    };
    if t == DeviceType::Cpu {
        return Ok(());
    }
    let count = crate::backend::device_list(t).len();
    if ordinal < count {
        return Ok(());
    }
    Err(Error::BackendUnavailable {
        device: format!("{t}:{ordinal}"),
        reason: format!(
            "GFLOW_DEVICE_OVERRIDE pins rank {rank} to {t}:{ordinal}, but this host has {count} \
             {t} device{} (ordinals from 0)",
            if count == 1 { "" } else { "s" }
        ),
    })
}

/// A device pinned by `GFLOW_DEVICE_OVERRIDE`: its type, and its ordinal when the item names one.
pub type Pin = (DeviceType, Option<usize>);

/// Parses `GFLOW_DEVICE_OVERRIDE` (`RANK:TYPE[:ORDINAL],...`, e.g. `0:cuda:1,1:wgpu:0,2:cpu`)
/// for `rank`.
fn device_override_from_env(rank: usize) -> std::result::Result<Option<Pin>, String> {
    let Ok(spec) = std::env::var("GFLOW_DEVICE_OVERRIDE") else {
        return Ok(None);
    };
    parse_override(&spec, rank)
}

/// The pin `spec` gives `rank` (the last item naming it wins).
fn parse_override(spec: &str, rank: usize) -> std::result::Result<Option<Pin>, String> {
    let mut found = None;
    for item in spec.split(',').filter(|i| !i.trim().is_empty()) {
        let parts: Vec<&str> = item.split(':').map(str::trim).collect();
        let parsed = match parts[..] {
            [r, t] => r
                .parse::<usize>()
                .ok()
                .zip(t.parse::<DeviceType>().ok())
                .map(|(r, t)| (r, t, None)),
            [r, t, o] => r
                .parse::<usize>()
                .ok()
                .zip(
                    t.parse::<DeviceType>()
                        .ok()
                        .filter(|t| *t != DeviceType::Cpu || o == "0"),
                )
                .zip(o.parse::<usize>().ok())
                .map(|((r, t), o)| (r, t, Some(o))),
            _ => None,
        };
        match parsed {
            Some((r, t, o)) if r == rank => found = Some((t, o)),
            Some(_) => {}
            None => {
                return Err(format!(
                    "GFLOW_DEVICE_OVERRIDE={spec:?}: {item:?} is not RANK:TYPE[:ORDINAL] (TYPE one of cpu, cuda, wgpu, gpu; the cpu has only ordinal 0)"
                ));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod override_tests {
    use super::*;

    #[test]
    fn parses_types_and_ordinals() {
        let spec = "0:cuda:1, 1:wgpu:0,2:cpu,3:gpu";
        assert_eq!(
            parse_override(spec, 0),
            Ok(Some((DeviceType::Cuda, Some(1))))
        );
        assert_eq!(
            parse_override(spec, 1),
            Ok(Some((DeviceType::Wgpu, Some(0))))
        );
        assert_eq!(parse_override(spec, 2), Ok(Some((DeviceType::Cpu, None))));
        assert_eq!(parse_override(spec, 3), Ok(Some((DeviceType::Gpu, None))));
        assert_eq!(parse_override(spec, 4), Ok(None));
        for bad in [
            "0=wgpu",
            "0:wgpu:x",
            "0:cpu:1",
            "0:wgpu:1:2",
            "x:cpu",
            "0:tpu",
        ] {
            assert!(parse_override(bad, 0).is_err(), "{bad}");
        }
    }
}
