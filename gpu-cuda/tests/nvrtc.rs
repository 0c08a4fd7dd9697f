//! The CUDA source compiles with NVRTC for the architectures gflow targets, with every kernel
//! the backend loads, wherever the NVRTC library is (no driver or device needed: a machine
//! with only `libnvrtc`, such as one with NVIDIA's `nvidia-cuda-nvrtc` wheel on its library
//! path, checks it); elsewhere the test says loudly that it skipped.
#![allow(clippy::panic)]

use gflow_core::Error;

#[test]
fn kernels_compile_with_nvrtc() {
    for arch in ["compute_70", "compute_80", "compute_90"] {
        match gflow_cuda::kernels_ptx(arch) {
            Ok(ptx) => assert!(ptx.contains(".entry convert("), "{arch}"),
            Err(Error::BackendUnavailable { reason, .. })
                if !gflow_core::backend::required("cuda") =>
            {
                return gflow_core::backend::say_skipped("kernels_compile_with_nvrtc", &reason);
            }
            Err(e) => panic!("{arch}: {e}"),
        }
    }
}
