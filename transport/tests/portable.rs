//! `GFLOW_PORTABLE=1` turns the memfd arena off on Linux: a program that installed `ShmAlloc`
//! then allocates large blocks from the system allocator (and sends payloads as bytes), as on
//! systems without memfd. The test re-runs itself with and without the variable.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_transport::arena::{ShmAlloc, installed};

#[global_allocator]
static ALLOC: ShmAlloc = ShmAlloc;

const CHILD: &str = "GFLOW_PORTABLE_TEST_CHILD";

#[test]
fn gflow_portable_turns_the_arena_off() {
    if std::env::var_os(CHILD).is_some() {
        println!("installed={}", installed());
        return;
    }
    let run = |portable: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "gflow_portable_turns_the_arena_off",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("GFLOW_PORTABLE", portable)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run("1").contains("installed=false"));
    let native = run("0");
    if cfg!(target_os = "linux") {
        assert!(native.contains("installed=true"), "{native}");
    } else {
        assert!(native.contains("installed=false"), "{native}");
    }
}
