//! 16-bit global tensors on a `"wgpu"` placement of 2 simulated ranks (lavapipe in CI): boxing
//! split -> broadcast and partial_sum -> broadcast (the partial sums reduced in f32, rounded
//! once) give exactly what the same program gives on a `"cpu"` placement, and the data stays
//! on the device between operators. Skips loudly without an adapter unless
//! `GFLOW_REQUIRE_BACKEND` names wgpu.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use gflow::prelude::*;

/// For F16 and BF16: a (6, 5) split(0) boxed to broadcast, and the partial_sum product of a
/// (4, 6) split(1) and a (6, 3) split(0) boxed to broadcast, each as f64 values.
fn program(device: &'static str) -> Result<Vec<Vec<f64>>> {
    let out = gflow::simulate(2, move |_| {
        let p = Placement::new(device, [0, 1])?;
        let mut got = vec![];
        for dtype in [DType::F16, DType::BF16] {
            let v: Vec<f32> = (0..30).map(|i| (i as f32) * 0.37 - 5.1).collect();
            let x = Tensor::from_vec(v, &[6, 5], (&p, Sbp::split(0)))?.to_dtype(dtype)?;
            if device == "wgpu" {
                assert_eq!(x.device(), Device::Wgpu);
                assert!(
                    x.resident_on().is_some(),
                    "a 16-bit cast stays on the device"
                );
            }
            let b = x.to_global(&p, Sbp::broadcast())?;
            assert_eq!(b.dtype(), dtype);
            got.push(b.to_local()?.to_dtype(DType::F64)?.to_vec_cast::<f64>()?);
            // products of small numbers, partial sums past 16-bit precision when summed
            let a: Vec<f32> = (0..24)
                .map(|i| ((i * 7) % 11) as f32 * 1.25 - 6.0)
                .collect();
            let c: Vec<f32> = (0..18)
                .map(|i| ((i * 5) % 13) as f32 * 0.75 - 4.0)
                .collect();
            let a = Tensor::from_vec(a, &[4, 6], (&p, Sbp::split(1)))?.to_dtype(dtype)?;
            let c = Tensor::from_vec(c, &[6, 3], (&p, Sbp::split(0)))?.to_dtype(dtype)?;
            let prod = a.matmul(&c)?;
            assert_eq!(
                prod.sbp(),
                Some(&NdSbp::from(Sbp::partial_sum())),
                "a partial sum"
            );
            let whole = prod.to_global(&p, Sbp::broadcast())?;
            assert_eq!(whole.dtype(), dtype);
            got.push(
                whole
                    .to_local()?
                    .to_dtype(DType::F64)?
                    .to_vec_cast::<f64>()?,
            );
        }
        Ok(got)
    })?;
    assert_eq!(out[0], out[1], "both ranks see the same values");
    Ok(out.into_iter().next().unwrap_or_default())
}

#[test]
fn half_boxing_on_wgpu_matches_the_host() {
    let cpu = program("cpu").unwrap();
    let Some(wgpu) = common::on_wgpu("16-bit boxing", program("wgpu")) else {
        return;
    };
    assert_eq!(wgpu, cpu);
}
