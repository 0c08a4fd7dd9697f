//! What the launcher does to its children that differs by system. On Unix each child leads its
//! own process group (so stopping it stops what it started), keeps to its CPUs and dies with
//! the launcher (Linux, see `cpus`), is stopped with SIGTERM and then SIGKILL, and a death by a
//! signal is named; SIGINT and SIGTERM to the launcher stop the job. On Windows a child is
//! killed, and Ctrl-C reaches every process of the console itself.

use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(unix)]
use crate::cpus;
use crate::cpus::CpuSet;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether the launcher was asked to stop (SIGINT, SIGTERM).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(unix)]
extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set [`interrupted`] instead of ending the launcher.
pub fn catch_interrupts() {
    #[cfg(unix)]
    // SAFETY: installing a handler that only stores to an atomic is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Sets up `cmd`'s child: its own process group, its CPUs `share`, death with the launcher.
pub fn prepare(cmd: &mut Command, share: Option<CpuSet>) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only makes async-signal-safe system calls (setpgid, and those
        // of `in_child`).
        unsafe {
            cmd.pre_exec(move || {
                libc::setpgid(0, 0);
                cpus::in_child(share.as_ref());
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (cmd, share);
}

/// Asks the child (and its process group) to stop.
pub fn terminate(c: &Child) {
    #[cfg(unix)]
    // SAFETY: signalling the process group our child leads has no memory-safety preconditions.
    unsafe {
        libc::kill(-(c.id() as libc::pid_t), libc::SIGTERM);
    }
    #[cfg(not(unix))]
    let _ = c;
}

/// Stops the child (and its process group) for good, and reaps it.
pub fn kill(c: &mut Child) {
    #[cfg(unix)]
    // SAFETY: as in `terminate`.
    unsafe {
        libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// The signal that ended a child, if one did.
pub fn death_signal(st: &ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    {
        std::os::unix::process::ExitStatusExt::signal(st)
    }
    #[cfg(not(unix))]
    {
        let _ = st;
        None
    }
}
