//! Where a rank's time goes: an opt-in profiler of scopes (an operator's kernel, its dispatch,
//! a backward step, boxing, the optimizer), each timed exclusively of the scopes nested in it,
//! per thread (one rank). Off by default; on with `GFLOW_PROFILE=1` or [`enable`]. When off a
//! scope costs one relaxed atomic load. On a GPU a kernel's scope times its launch only, unless
//! `GFLOW_PROFILE=sync` (or [`enable_sync`]): then each kernel waits for the device, so that its
//! scope holds its device time (and the step runs slower).
//!
//! ```
//! use gflow_core::{profile, Device, Tensor};
//! profile::enable(true);
//! profile::reset();
//! let x = Tensor::ones(&[64, 64], Device::Cpu)?;
//! let _ = x.matmul(&x)?;
//! let rows = profile::take();
//! assert!(rows.iter().any(|r| r.scope == "kernel matmul" && r.calls == 1));
//! # Ok::<(), gflow_core::Error>(())
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
static SYNC: AtomicBool = AtomicBool::new(false);
static FROM_ENV: Once = Once::new();

/// One profiled scope: its name, how often it ran and its time excluding nested scopes.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// `kernel <op>`, `dispatch <op>`, `backward <op>`, `boxing` or `optimizer`.
    pub scope: String,
    /// Times the scope was entered.
    pub calls: u64,
    /// Time inside it, less the time of scopes nested in it.
    pub time: Duration,
}

#[derive(Default)]
struct Table {
    /// Open scopes: name and when their current exclusive stretch began.
    stack: Vec<(String, Instant)>,
    rows: HashMap<String, (u64, Duration)>,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

/// Turns the profiler on or off for every thread (overrides `GFLOW_PROFILE`).
pub fn enable(on: bool) {
    FROM_ENV.call_once(|| {});
    ON.store(on, Ordering::Relaxed);
}

/// Whether scopes are being timed.
pub fn enabled() -> bool {
    FROM_ENV.call_once(|| {
        let v = std::env::var("GFLOW_PROFILE").unwrap_or_default();
        ON.store(!v.is_empty() && v != "0", Ordering::Relaxed);
        SYNC.store(v == "sync", Ordering::Relaxed);
    });
    ON.load(Ordering::Relaxed)
}

/// Turns the profiler on, each kernel waiting for its device (`GFLOW_PROFILE=sync`), or back to
/// timing launches only.
pub fn enable_sync(on: bool) {
    enable(on || enabled());
    SYNC.store(on, Ordering::Relaxed);
}

/// Whether each kernel waits for its device when profiled.
pub(crate) fn syncs() -> bool {
    enabled() && SYNC.load(Ordering::Relaxed)
}

/// Clears this thread's table.
pub fn reset() {
    TABLE.with(|t| t.borrow_mut().rows.clear());
}

/// This thread's rows, longest first, and clears them.
pub fn take() -> Vec<Row> {
    let mut rows: Vec<Row> = TABLE.with(|t| {
        t.borrow_mut()
            .rows
            .drain()
            .map(|(scope, (calls, time))| Row { scope, calls, time })
            .collect()
    });
    rows.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.scope.cmp(&b.scope)));
    rows
}

/// Runs `f` as the scope `name()` (the name is built only when profiling).
pub(crate) fn scope<T>(name: impl FnOnce() -> String, f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let now = Instant::now();
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if let Some((parent, since)) = t.stack.last().cloned() {
            t.rows.entry(parent).or_default().1 += now - since;
        }
        t.stack.push((name(), now));
    });
    let out = f();
    let end = Instant::now();
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if let Some((me, since)) = t.stack.pop() {
            let row = t.rows.entry(me).or_default();
            row.0 += 1;
            row.1 += end - since;
        }
        if let Some(top) = t.stack.last_mut() {
            top.1 = end;
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {}
    }

    #[test]
    fn nested_scopes_are_timed_exclusively() {
        enable(true);
        reset();
        scope(
            || "outer".into(),
            || {
                spin(Duration::from_millis(20));
                scope(|| "inner".into(), || spin(Duration::from_millis(40)));
                scope(|| "inner".into(), || spin(Duration::from_millis(40)));
            },
        );
        let rows = take();
        let get = |s: &str| rows.iter().find(|r| r.scope == s).cloned();
        let (outer, inner) = (get("outer").unwrap(), get("inner").unwrap());
        assert_eq!((outer.calls, inner.calls), (1, 2));
        assert!(inner.time >= Duration::from_millis(80), "{inner:?}");
        // the outer scope's own time (20 ms) excludes the inner 80 ms
        assert!(outer.time >= Duration::from_millis(20), "{outer:?}");
        assert!(outer.time < inner.time / 2, "{outer:?} {inner:?}");
        assert_eq!(rows[0].scope, "inner");
        assert!(take().is_empty());
    }
}
