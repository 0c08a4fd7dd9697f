//! core's conformance suite on the CUDA backend, and the backend's own errors. Without a CUDA
//! driver every test says loudly that it skipped (the backend is `BackendUnavailable`, never a
//! panic); `GFLOW_REQUIRE_BACKEND=cuda` turns the skip into a failure on a GPU machine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gflow_core::backend::{Backend, BinaryOp, MatmulDims, ReduceKind, UnaryOp};
use gflow_core::{Error, HostData};
use gflow_cuda::CudaBackend;

gflow_core::conformance_tests!("cuda", CudaBackend::new());

/// The backend, or `None` after a loud skip message.
fn backend(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => {
            eprintln!("cuda device: {}", b.device_name());
            Some(b)
        }
        Err(e) if gflow_core::backend::required("cuda") => panic!("cuda required: {e}"),
        Err(e) => {
            assert!(
                matches!(e, Error::BackendUnavailable { .. }),
                "no CUDA must be BackendUnavailable, got {e:?}"
            );
            gflow_core::backend::say_skipped(test, &format!("no CUDA here: {e}"));
            None
        }
    }
}

/// Opening the backend twice without a driver is the same typed error both times (the library
/// check runs before cudarc could panic); with one, i64 arithmetic is a typed error.
#[test]
fn missing_driver_and_typed_errors() {
    let Some(b) = backend("missing_driver_and_typed_errors") else {
        assert!(matches!(
            CudaBackend::new(),
            Err(Error::BackendUnavailable { .. })
        ));
        return;
    };
    let x = b.upload(&HostData::I64(vec![1, 2])).unwrap();
    assert!(matches!(
        b.unary(UnaryOp::Exp, &x),
        Err(Error::Device { .. })
    ));
    let y = b.upload(&HostData::F32(vec![1.0, 2.0])).unwrap();
    assert!(matches!(
        b.binary(BinaryOp::Add, &y, &[2], &x, &[2], &[2]),
        Err(Error::DTypeMismatch { .. })
    ));
}

/// Large tensors: a full reduction that the backend cuts into parts, a reduction over leading
/// and scattered dims, and a large product, against host references.
#[test]
fn large_reductions_and_products() {
    let Some(b) = backend("large_reductions_and_products") else {
        return;
    };
    let n = 3 << 20;
    let v: Vec<f32> = (0..n).map(|i| (i % 17) as f32 - 8.0).collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let got = |s: &gflow_cuda::CudaStorage| -> Vec<f64> { b.download(s).unwrap().to_vec() };
    assert_eq!(
        got(&b.reduce(ReduceKind::Max, &x, &[n], &[0]).unwrap()),
        vec![8.0]
    );
    let want: f64 = v.iter().map(|&x| f64::from(x)).sum();
    let total = got(&b.reduce(ReduceKind::Sum, &x, &[n], &[0]).unwrap())[0];
    assert!(
        (total - want).abs() <= 1e-6 * 8.0 * n as f64,
        "{total} vs {want}"
    );
    // (3, 1024, 1024): over dims [0, 2] (scattered) and [0] (leading)
    let shape = [3usize, 1024, 1024];
    let s02 = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0, 2]).unwrap());
    let s0 = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0]).unwrap());
    for j in [0usize, 1, 511, 1023] {
        let w02: f64 = (0..3)
            .flat_map(|i| (0..1024).map(move |k| (i, k)))
            .map(|(i, k)| f64::from(v[(i * 1024 + j) * 1024 + k]))
            .sum();
        assert!(
            (s02[j] - w02).abs() < 1e-2,
            "[0,2] at {j}: {} vs {w02}",
            s02[j]
        );
        let w0: f64 = (0..3).map(|i| f64::from(v[i * 1024 * 1024 + j])).sum();
        assert!((s0[j] - w0).abs() < 1e-4, "[0] at {j}");
    }
    // a 1024 x 1024 x 1024 product: spot-check entries against f64 dot products
    let m = 1024;
    let a: Vec<f32> = (0..m * m)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let p = b.upload(&HostData::F32(a.clone())).unwrap();
    let dims = MatmulDims {
        batch: 1,
        m,
        k: m,
        n: m,
        b_batched: false,
        a_trans: false,
        b_trans: true,
    };
    let c = got(&b.matmul(&p, &p, dims).unwrap());
    for (i, j) in [(0, 0), (3, 1000), (1023, 17)] {
        let w: f64 = (0..m)
            .map(|l| f64::from(a[i * m + l]) * f64::from(a[j * m + l]))
            .sum();
        assert!((c[i * m + j] - w).abs() < 1e-3, "({i}, {j})");
    }
}

/// LayerNorm and RMSNorm on rows longer than a block's threads (several passes per thread)
/// and on more rows than one launch has blocks (65536: blocks loop over the rest).
#[test]
fn norms_of_long_rows() {
    let Some(b) = backend("norms_of_long_rows") else {
        return;
    };
    let r = gflow_core::backend::Resident::new(b);
    if let Err(e) =
        gflow_core::conformance::norms_of(&r, &[(5, 300), (2, 1030), (3, 4099), (70_000, 3)])
    {
        panic!("{e}");
    }
}
