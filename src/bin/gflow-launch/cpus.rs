//! Pinning each process to its share of the launcher's CPUs (Linux; elsewhere nothing is
//! pinned).

/// How the launcher pins its processes to CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BindTo {
    /// `core` unless there are more processes than CPUs (then `none`), as Open MPI does.
    Auto,
    /// Each process gets an equal, disjoint share of the launcher's CPUs.
    Core,
    /// No pinning.
    None,
}

/// A set of CPUs a child is confined to.
#[cfg(target_os = "linux")]
pub type CpuSet = libc::cpu_set_t;
/// A set of CPUs a child is confined to (no pinning off Linux).
#[cfg(not(target_os = "linux"))]
pub type CpuSet = ();

/// The CPUs this process may run on.
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
pub fn cpu_shares(bind: BindTo, n: usize) -> Vec<Option<CpuSet>> {
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
                // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
                let (len, mut set) = (cpus.len(), unsafe { std::mem::zeroed::<CpuSet>() });
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

/// Off Linux nothing is pinned.
#[cfg(not(target_os = "linux"))]
pub fn cpu_shares(_bind: BindTo, n: usize) -> Vec<Option<CpuSet>> {
    vec![None; n]
}

/// In the child before exec: die with the launcher (Linux's parent-death signal) and keep to
/// `share`. Only async-signal-safe system calls.
#[cfg(unix)]
pub fn in_child(share: Option<&CpuSet>) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl and sched_setaffinity only set this process's parent-death signal and CPUs.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if let Some(set) = share {
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = share;
}
