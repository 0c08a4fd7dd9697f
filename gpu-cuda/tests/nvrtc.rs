//! The CUDA source compiles with NVRTC for the architectures gflow targets that this NVRTC
//! has, with every kernel the backend loads, wherever the NVRTC library is (no driver or device needed: a machine
//! with only `libnvrtc`, such as one with NVIDIA's `nvidia-cuda-nvrtc` wheel on its library
//! path, checks it); elsewhere the test says loudly that it skipped.
#![allow(clippy::panic)]

use gflow_core::Error;

#[test]
fn kernels_compile_with_nvrtc() {
    let archs = match gflow_cuda::nvrtc_archs() {
        Ok(a) => a,
        Err(Error::BackendUnavailable { reason, .. }) if !gflow_core::backend::required("cuda") => {
            return gflow_core::backend::say_skipped("kernels_compile_with_nvrtc", &reason);
        }
        Err(e) => panic!("{e}"),
    };
    // Volta, Ampere and Hopper, where this NVRTC still has them (CUDA 13 dropped Volta)
    let targets: Vec<u32> = [70, 80, 90]
        .into_iter()
        .filter(|a| archs.contains(a))
        .collect();
    assert!(
        !targets.is_empty(),
        "NVRTC compiles for none of 70, 80, 90: {archs:?}"
    );
    for arch in targets {
        let ptx = gflow_cuda::kernels_ptx(&format!("compute_{arch}"))
            .unwrap_or_else(|e| panic!("compute_{arch}: {e}"));
        assert!(ptx.contains(".entry convert("), "compute_{arch}");
    }
}
