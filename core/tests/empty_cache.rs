//! `empty_cache` frees the host buffers boxing keeps for its outputs (its own binary: the pool
//! is one per process, and the other tests' reuse must not see it emptied under them).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use gflow_core::{Device, Placement, Sbp, Tensor, empty_cache, simulate};

#[test]
fn empty_cache_frees_what_boxing_kept() {
    let p = Placement::new("cpu", [0, 1]).unwrap();
    let n = 1 << 19; // 2 MiB of f32 gathered: over the size the pool keeps
    let rounds = simulate(2, |_| {
        let x =
            Tensor::from_vec(vec![1.0f32; n], &[n], Device::Cpu)?.to_global(&p, Sbp::split(0))?;
        // the first output is dropped (kept), the second takes it, is dropped again (kept)
        for _ in 0..2 {
            drop(x.to_global(&p, Sbp::broadcast())?);
        }
        Ok(())
    });
    rounds.unwrap();
    let freed = empty_cache();
    assert!(freed >= n * 4, "freed {freed} bytes");
    assert_eq!(empty_cache(), 0);
}
