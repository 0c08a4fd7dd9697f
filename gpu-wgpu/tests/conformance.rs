//! core's conformance suite on the wgpu backend (lavapipe in CI, which sets
//! `GFLOW_REQUIRE_BACKEND=1` so a missing adapter fails instead of skipping), and the backend's
//! own errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gflow_core::backend::{Backend, UnaryOp};
use gflow_core::{Error, HostData};

gflow_core::conformance_tests!(gflow_wgpu::WgpuBackend::new().ok());

/// Prints the adapter (so a CI log shows what ran); arithmetic outside f32 and a tensor past
/// the storage-binding limit are typed errors, not panics.
#[test]
fn adapter_and_typed_errors() {
    let b = match gflow_wgpu::WgpuBackend::new() {
        Ok(b) => b,
        Err(e) if std::env::var("GFLOW_REQUIRE_BACKEND").is_ok_and(|v| v == "1") => {
            panic!("wgpu required: {e}")
        }
        Err(e) => return eprintln!("!!! SKIPPED: no wgpu adapter: {e} !!!"),
    };
    eprintln!("wgpu adapter: {}", b.adapter());
    let x = b.upload(&HostData::F64(vec![1.0, 2.0])).unwrap();
    assert!(matches!(
        b.unary(UnaryOp::Exp, &x),
        Err(Error::Device { .. })
    ));
    let too_big = HostData::F32(vec![0.0; (b.max_binding() / 4 + 1) as usize]);
    assert!(matches!(b.upload(&too_big), Err(Error::Device { .. })));
}
