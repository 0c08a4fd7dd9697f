//! Device placements: the same global program on `"wgpu"` (and `"gpu"`) placements gives what it
//! gives on `"cpu"` (the kernels run on wgpu: lavapipe in CI), and a mixed cluster (rank 0 on
//! wgpu, rank 1 on the CPU, through `GFLOW_DEVICE_OVERRIDE`) holds shards of one tensor with the
//! same results; the same on `"cuda"` where a driver is. Skips loudly without an adapter or
//! driver, unless `GFLOW_REQUIRE_BACKEND` names the backend. GPU results stay in device memory
//! until the host reads them.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use gflow::Error;
use gflow::prelude::*;

/// A small training step on `device`: matmul, broadcasting add, relu, softmax, cumsum over the
/// split dim, narrow, cat, a reduction, boxing (split -> broadcast), and the weight's gradient.
fn program(device: &'static str) -> Result<Vec<Vec<f32>>> {
    let out = gflow::simulate(2, move |_| {
        let p = Placement::new(device, [0, 1])?;
        gflow::manual_seed(11);
        let x = Tensor::randn(&[7, 5], (&p, Sbp::split(0)))?;
        match device {
            "wgpu" => assert_eq!(x.device(), Device::Wgpu),
            "cuda" => assert_eq!(x.device(), Device::Cuda),
            _ => {}
        }
        let w = Tensor::randn(&[5, 4], (&p, Sbp::broadcast()))?.set_requires_grad(true);
        let b = Tensor::randn(&[4], (&p, Sbp::broadcast()))?;
        let h = (&x.matmul(&w)? + &b)?.relu()?;
        let s = h.softmax(1)?.cumsum(0)?;
        // GPU results stay on the device through the chain; host inputs keep their upload.
        let on = match x.device() {
            Device::Cpu => None,
            d => Some(d.to_string()),
        };
        for t in [&h, &s] {
            assert_eq!(t.resident_on().map(str::to_string), on, "a result's home");
            assert_eq!(
                t.has_host_copy(),
                on.is_none(),
                "a GPU result was downloaded"
            );
        }
        assert_eq!(
            w.resident_on().map(str::to_string),
            on,
            "an input's upload is kept"
        );
        let c = Tensor::cat(&[&s, &x.narrow(1, 0, 2)?], 1)?;
        let loss = (&c * &c)?.sum([0, 1], false)?;
        loss.backward()?;
        let g = w.grad().expect("a gradient");
        assert_eq!(g.sbp(), w.sbp());
        Ok(vec![
            h.to_vec_cast::<f32>()?,
            c.to_global(&p, Sbp::broadcast())?
                .to_local()?
                .to_vec_cast::<f32>()?,
            loss.to_vec_cast::<f32>()?,
            g.to_vec_cast::<f32>()?,
        ])
    })?;
    assert_eq!(out[0], out[1], "both ranks see the same values");
    Ok(out.into_iter().next().unwrap_or_default())
}

fn close(a: &[Vec<f32>], b: &[Vec<f32>], what: &str) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "{what}");
        for (p, q) in x.iter().zip(y) {
            assert!(
                (p - q).abs() <= 1e-4 * (1.0 + q.abs()),
                "{what}: {p} vs {q}"
            );
        }
    }
}

#[test]
fn device_and_mixed_placements_match_the_cpu() {
    let cpu = program("cpu").unwrap();
    let Some(wgpu) = common::on_wgpu("device placements", program("wgpu")) else {
        return;
    };
    close(&wgpu, &cpu, "wgpu placement");
    close(&program("gpu").unwrap(), &cpu, "gpu placement");
    // A mixed cluster: rank 0 computes on wgpu, rank 1 on the CPU, shards of the same tensors.
    // (The only test in this binary, so setting the variable races with nothing.)
    // SAFETY: no other thread of this test binary reads or writes the environment now.
    unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0:wgpu,1:cpu") };
    close(&program("gpu").unwrap(), &cpu, "mixed placement");
    // And the override really splits the devices.
    let devices = gflow::simulate(2, |_| {
        let p = Placement::new("gpu", [0, 1])?;
        Ok(Tensor::zeros(&[2], (&p, Sbp::split(0)))?
            .device()
            .to_string())
    })
    .unwrap();
    assert_eq!(devices, vec!["wgpu:0", "cpu"]);
    // An ordinal pinned by hand (RANK:TYPE:ORDINAL); one the host lacks names itself.
    unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0:wgpu:0,1:cpu") };
    close(
        &program("gpu").unwrap(),
        &cpu,
        "mixed placement, pinned ordinal",
    );
    unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0:wgpu:9,1:cpu") };
    let missing = gflow::simulate(2, |_| {
        Tensor::zeros(&[2], (&Placement::new("gpu", [0, 1])?, Sbp::split(0))).map(drop)
    });
    assert!(
        matches!(&missing, Err(Error::BackendUnavailable { device, .. }) if device == "wgpu:9"),
        "{missing:?}"
    );
    // A malformed override is a clear error, not a silent default.
    unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0=wgpu") };
    let bad = gflow::simulate(1, |_| {
        Tensor::zeros(&[2], (&Placement::new("gpu", [0])?, Sbp::broadcast())).map(drop)
    });
    unsafe { std::env::remove_var("GFLOW_DEVICE_OVERRIDE") };
    assert!(matches!(bad, Err(Error::Environment { .. })), "{bad:?}");

    // CUDA: the same program, "gpu" resolving to it, and a CUDA + wgpu cluster.
    let cuda = match program("cuda") {
        Ok(v) => v,
        Err(Error::BackendUnavailable { reason, .. }) if !gflow::backend::required("cuda") => {
            return gflow::backend::say_skipped(
                "cuda placements",
                &format!("no CUDA here: {reason}"),
            );
        }
        Err(e) => panic!("cuda: {e}"),
    };
    close(&cuda, &cpu, "cuda placement");
    let devices = gflow::simulate(1, |_| {
        let p = Placement::new("gpu", [0])?;
        Ok(Tensor::zeros(&[2], (&p, Sbp::broadcast()))?.device())
    })
    .unwrap();
    assert_eq!(
        devices,
        vec![Device::Cuda],
        "\"gpu\" is CUDA where a driver is"
    );
    unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0:cuda,1:wgpu") };
    let mixed = program("gpu");
    unsafe { std::env::remove_var("GFLOW_DEVICE_OVERRIDE") };
    close(&mixed.unwrap(), &cpu, "cuda + wgpu placement");
}
