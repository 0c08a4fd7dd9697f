//! The CUDA source compiles with NVRTC for the architectures gflow targets that this NVRTC
//! has, with every kernel the backend loads, wherever the NVRTC library is (no driver or device needed: a machine
//! with only `libnvrtc`, such as one with NVIDIA's `nvidia-cuda-nvrtc` wheel on its library
//! path, checks it); elsewhere the test says loudly that it skipped. A second compilation of
//! the same source comes from the kernel cache, the same text.
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
    let cache = std::env::temp_dir().join(format!("gflow-nvrtc-test-{}", std::process::id()));
    // SAFETY: this binary's only test sets it before anything reads the environment.
    unsafe { std::env::set_var("GFLOW_CACHE_DIR", &cache) };
    for arch in targets {
        let ptx = gflow_cuda::kernels_ptx(&format!("compute_{arch}"))
            .unwrap_or_else(|e| panic!("compute_{arch}: {e}"));
        assert!(ptx.contains(".entry convert("), "compute_{arch}");
        let started = std::time::Instant::now();
        let again = gflow_cuda::kernels_ptx(&format!("compute_{arch}")).unwrap();
        assert_eq!(again, ptx, "compute_{arch}: the cached PTX differs");
        println!("compute_{arch}: from the cache in {:?}", started.elapsed());
    }
    let files = std::fs::read_dir(&cache).map_or(0, |d| d.count());
    assert!(files > 0, "nothing cached in {}", cache.display());
    std::fs::remove_dir_all(&cache).ok();
}
