//! The CUDA kernels' logic, checked on any machine: `tests/emulated/kernels_test.cpp` includes
//! `kernels/gflow.cu` with a small CPU stand-in for CUDA (`prelude.h`: blocks in turn, a block's
//! threads as OS threads meeting at a barrier for `__syncthreads`) and compares every kernel
//! with a plain loop. What it cannot see (NVRTC compilation, cuBLAS, real memory) the
//! conformance suite checks where a driver is.
#![allow(clippy::expect_used, clippy::panic)]

use std::path::Path;

use gflow_core::backend::{KernelLang, kernel_constants};
use std::process::Command;

#[test]
fn kernels_match_plain_loops_on_the_cpu() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emulated");
    let bin = std::env::temp_dir().join(format!("gflow-cuda-emulated-{}", std::process::id()));
    // The op codes NVRTC gets before the source, from the same enums.
    let codes = bin.with_extension("h");
    std::fs::write(&codes, kernel_constants(KernelLang::Cuda)).expect("write the kernel codes");
    let built = Command::new("g++")
        .args(["-std=c++20", "-O1", "-pthread", "-include"])
        .arg(&codes)
        .arg("-o")
        .arg(&bin)
        .arg(dir.join("kernels_test.cpp"))
        .output();
    let built = match built {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return gflow_core::backend::say_skipped(
                "kernels_match_plain_loops_on_the_cpu",
                &"no g++ on this machine to build the emulated CUDA kernels",
            );
        }
        Err(e) => panic!("g++: {e}"),
    };
    assert!(
        built.status.success(),
        "the kernels do not build as C++: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(&bin)
        .output()
        .expect("run the emulated kernels");
    let _ = std::fs::remove_file(&bin);
    let _ = std::fs::remove_file(&codes);
    let out = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "emulated kernels disagree:\n{out}");
    assert!(out.contains("fails: 0"), "{out}");
}
