//! Devices by ordinal (API.md, "Devices: one device per rank"): `Device::wgpu(n)` /
//! `Device::cuda(n)`, `ordinal()`, `Display`, `gflow::devices()`, `to_device`, local tensors on
//! a GPU without `init()`, `DeviceMismatch` between ordinals, and `BackendUnavailable` naming an
//! ordinal the host lacks. wgpu runs on lavapipe in CI (one adapter); CUDA parts skip loudly
//! without a driver unless `GFLOW_REQUIRE_BACKEND` names the backend.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;
use gflow::{DeviceType, Error, backend};

/// The number of devices of `t` that `gflow::devices()` lists, or `None` (after saying so) where
/// there is none and the backend is not required.
fn count(t: DeviceType, test: &str) -> Option<usize> {
    let n = gflow::devices()
        .iter()
        .filter(|d| d.device_type == t)
        .count();
    if n == 0 {
        assert!(
            !backend::required(t.as_str()),
            "{t} is required but has no device"
        );
        backend::say_skipped(test, &format!("no {t} device here"));
        return None;
    }
    Some(n)
}

#[test]
fn names_and_ordinals() {
    assert_eq!(Device::Cpu.ordinal(), 0);
    assert_eq!(Device::Cpu.to_string(), "cpu");
    assert_eq!(Device::cuda(1).to_string(), "cuda:1");
    assert_eq!(Device::wgpu(0).to_string(), "wgpu:0");
    assert_eq!(Device::cuda(3).ordinal(), 3);
    assert_ne!(Device::wgpu(0), Device::wgpu(1));
    assert_ne!(Device::wgpu(0), Device::cuda(0));
    // This process (local rank 0) owns ordinal 0 of each type: LOCAL_RANK % count.
    assert_eq!(Device::Wgpu.ordinal(), 0);
    assert_eq!(Device::Wgpu, Device::wgpu(0));
    assert_eq!(Device::Wgpu.to_string(), "wgpu:0");
    assert_eq!(Device::Cuda.to_string(), "cuda:0");
}

#[test]
fn devices_lists_the_cpu_and_gpus_in_ordinal_order() {
    let all = gflow::devices();
    assert_eq!(all[0].device(), Device::Cpu);
    assert_eq!(all[0].ordinal, 0);
    for t in [DeviceType::Wgpu, DeviceType::Cuda] {
        let ords: Vec<usize> = all
            .iter()
            .filter(|d| d.device_type == t)
            .map(|d| d.ordinal)
            .collect();
        assert_eq!(ords, (0..ords.len()).collect::<Vec<_>>(), "{t}");
    }
    for d in all.iter().filter(|d| d.device_type == DeviceType::Wgpu) {
        assert!(!d.name.is_empty() && !d.api.is_empty(), "{d:?}");
        assert_eq!(d.device().to_string(), format!("wgpu:{}", d.ordinal));
    }
}

#[test]
fn a_missing_ordinal_is_backend_unavailable_naming_it() {
    for (t, dev) in [
        (DeviceType::Wgpu, Device::wgpu(7)),
        (DeviceType::Cuda, Device::cuda(7)),
    ] {
        let n = gflow::devices()
            .iter()
            .filter(|d| d.device_type == t)
            .count();
        if n > 7 {
            continue;
        }
        match Tensor::zeros(&[2], dev) {
            Err(Error::BackendUnavailable { device, .. }) => assert_eq!(device, dev.to_string()),
            other => panic!("{dev}: expected BackendUnavailable, got {other:?}"),
        }
    }
    // lavapipe in CI is one adapter: ordinal 1 exists only with a second one.
    let n = gflow::devices()
        .iter()
        .filter(|d| d.device_type == DeviceType::Wgpu)
        .count();
    let one = Tensor::zeros(&[2], Device::wgpu(1));
    assert_eq!(one.is_ok(), n > 1, "{one:?}");
}

#[test]
fn local_gpu_tensors_need_no_init_and_move_with_to_device() {
    let Some(n) = count(DeviceType::Wgpu, "local_gpu_tensors_need_no_init") else {
        return;
    };
    // No init(), run() or simulate() in this test: the backend is found on first use.
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, 4.0], &[2, 2], Device::wgpu(0)).unwrap();
    let y = x.relu().unwrap().matmul(&x).unwrap();
    assert_eq!(y.device(), Device::wgpu(0));
    assert_eq!(y.resident_on(), Some("wgpu:0"));
    assert_eq!(y.to_vec_cast::<f32>().unwrap(), vec![1.0, -2.0, 15.0, 10.0]);
    let c = x.to_device(Device::Cpu).unwrap();
    assert_eq!(c.device(), Device::Cpu);
    // Different devices: never a silent copy.
    match &x + &c {
        Err(Error::DeviceMismatch { left, right, .. }) => {
            assert_eq!((left.as_str(), right.as_str()), ("wgpu:0", "cpu"));
        }
        other => panic!("expected DeviceMismatch, got {other:?}"),
    }
    let back = c.to_device(Device::wgpu(0)).unwrap();
    assert_eq!(
        (&back + &x).unwrap().to_vec_cast::<f32>().unwrap(),
        vec![2.0, -4.0, 6.0, 8.0]
    );
    if n > 1 {
        let other = x.to_device(Device::wgpu(1)).unwrap();
        assert!(matches!(&x + &other, Err(Error::DeviceMismatch { .. })));
        assert_eq!((&other * &other).unwrap().device(), Device::wgpu(1));
    }
}

#[test]
fn to_device_carries_gradients_back() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    let dev = if count(DeviceType::Wgpu, "to_device_carries_gradients_back").is_some() {
        Device::wgpu(0)
    } else {
        Device::Cpu
    };
    let y = x.to_device(dev).unwrap();
    (&y * &y)
        .unwrap()
        .sum([0], false)
        .unwrap()
        .backward()
        .unwrap();
    let g = x.grad().expect("a gradient");
    assert_eq!(g.device(), Device::Cpu);
    assert_eq!(g.to_vec_cast::<f32>().unwrap(), vec![2.0, 4.0]);
}

#[test]
fn cuda_ordinal_opens_that_device() {
    let Some(n) = count(DeviceType::Cuda, "cuda_ordinal_opens_that_device") else {
        return;
    };
    for i in 0..n {
        let x = Tensor::ones(&[3], Device::cuda(i)).unwrap();
        let y = (&x + &x).unwrap();
        assert_eq!(y.resident_on(), Some(format!("cuda:{i}").as_str()));
        assert_eq!(y.to_vec_cast::<f32>().unwrap(), vec![2.0; 3]);
    }
}
