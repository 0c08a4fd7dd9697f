//! `retain_grad` as PyTorch's: a result's gradient is kept after backward only when asked,
//! equals the hand-derived derivative (the sum over every use of the result), keeps the result's
//! placement and SBP on global tensors, and leaves leaves and other results as they were.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{Device, Error, Placement, Sbp, Tensor, simulate};

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{got:?} != {want:?}");
    }
}

#[test]
fn a_retained_result_keeps_the_sum_of_its_uses_gradients() {
    let xs: Vec<f64> = vec![0.5, -1.0, 2.0, 0.25];
    let ws: Vec<f64> = vec![3.0, -2.0, 0.5, 1.5];
    let x = Tensor::from_vec(xs.clone(), &[2, 2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    let w = Tensor::from_vec(ws.clone(), &[2, 2], Device::Cpu).unwrap();
    let h = x.exp().unwrap();
    let other = x.mul_scalar(2.0).unwrap();
    h.retain_grad().unwrap();
    assert!(h.retains_grad() && !other.retains_grad());
    // loss = sum(h * w) + sum(h * h) + sum(other): dloss/dh = w + 2h.
    let loss = h
        .mul(&w)
        .unwrap()
        .add(&h.mul(&h).unwrap())
        .unwrap()
        .add(&other)
        .unwrap()
        .sum([0, 1], false)
        .unwrap();
    loss.backward().unwrap();
    let want: Vec<f64> = xs.iter().zip(&ws).map(|(x, w)| w + 2.0 * x.exp()).collect();
    close(&h.grad().unwrap().to_vec_cast::<f64>().unwrap(), &want);
    assert!(
        other.grad().is_none(),
        "a result not retained keeps no gradient"
    );
    // The leaf's gradient flows on unchanged: (w + 2h) * exp(x) + 2.
    let dx: Vec<f64> = want
        .iter()
        .zip(&xs)
        .map(|(g, x)| g * x.exp() + 2.0)
        .collect();
    close(&x.grad().unwrap().to_vec_cast::<f64>().unwrap(), &dx);
}

#[test]
fn retain_grad_refuses_a_tensor_without_gradients_and_ignores_leaves() {
    let c = Tensor::ones(&[2], Device::Cpu).unwrap();
    assert!(matches!(
        c.retain_grad(),
        Err(Error::InvalidArgument {
            op: "retain_grad",
            ..
        })
    ));
    let leaf = Tensor::ones(&[2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    leaf.retain_grad().unwrap();
    assert!(
        !leaf.retains_grad(),
        "as PyTorch: retains_grad is false for a leaf"
    );
    leaf.sum(0, false).unwrap().backward().unwrap();
    assert_eq!(
        leaf.grad().unwrap().to_vec_cast::<f32>().unwrap(),
        vec![1.0, 1.0]
    );
}

#[test]
fn a_retained_global_result_keeps_its_placement_and_sbp() {
    let out = simulate(2, |_env| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4, 1], (&p, [Sbp::split(0)]))?
            .set_requires_grad(true);
        let w = Tensor::from_vec(vec![2.0f64, -1.0], &[1, 2], (&p, [Sbp::broadcast()]))?;
        let h = x.matmul(&w)?; // (4, 2), split(0)
        h.retain_grad()?;
        let c = Tensor::from_vec(
            (0..8).map(f64::from).collect::<Vec<_>>(),
            &[4, 2],
            (&p, [Sbp::broadcast()]),
        )?;
        h.mul(&c)?.sum([0, 1], false)?.backward()?;
        let g = h.grad().expect("a retained gradient");
        Ok((g.sbp() == h.sbp(), g.to_vec_cast::<f64>()?))
    })
    .unwrap();
    for (same_layout, g) in out {
        assert!(same_layout, "the kept gradient has the result's SBP");
        close(&g, &(0..8).map(f64::from).collect::<Vec<_>>());
    }
}
