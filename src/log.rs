//! Logging through `tracing`, on only when `RUST_LOG` is set (then filtered by it, to stderr):
//! `RUST_LOG=info` names each rank's device and links at start, `RUST_LOG=debug` (or
//! `gflow_core=debug`) also each boxing plan and collective schedule chosen. Without `RUST_LOG`
//! no subscriber is installed and every event is one relaxed atomic load.

/// Installs the subscriber when `RUST_LOG` is set; idempotent, and leaves a subscriber the
/// program installed itself in place.
pub(crate) fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// The GPU backends of this build, for the start-up line.
pub(crate) fn backends() -> &'static str {
    match (cfg!(feature = "cuda"), cfg!(feature = "wgpu")) {
        (true, true) => "cpu, cuda, wgpu",
        (true, false) => "cpu, cuda",
        (false, true) => "cpu, wgpu",
        (false, false) => "cpu",
    }
}
