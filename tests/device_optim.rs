//! Optimizer steps on a GPU placement run with the device's kernels: parameters and their state
//! stay in device memory (no host copy after a step), and SGD (momentum, weight decay,
//! dampening, Nesterov, maximize), Adam, AdamW (also AMSGrad, maximizing), RMSprop (plain, centred with momentum) and
//! Adagrad (decay, initial sum) reach the parameters the CPU reaches, with the gradients clipped on the device to
//! the CPU's norm. Skips loudly without a wgpu adapter, unless
//! `GFLOW_REQUIRE_BACKEND` names wgpu.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use gflow::optim::{Adagrad, Adam, AdamW, RmsProp, Sgd};
use gflow::prelude::*;

/// Three steps of each optimizer on `device`; the parameters after each optimizer's steps, then
/// the gradient norms `clip_grad_norm` returned.
fn train(device: &'static str) -> Result<Vec<Vec<f32>>> {
    let out = gflow::simulate(1, move |_| {
        let p = Placement::new(device, [0])?;
        gflow::manual_seed(5);
        let x = Tensor::randn(&[6, 4], (&p, Sbp::broadcast()))?;
        let (mut finals, mut norms) = (vec![], vec![]);
        for which in 0..9 {
            let w = Tensor::randn(&[4, 3], (&p, Sbp::broadcast()))?.set_requires_grad(true);
            let mut opt: Box<dyn Optimizer> = match which {
                0 => Box::new(
                    Sgd::new(vec![w.clone()], 0.1)
                        .momentum(0.9)
                        .weight_decay(0.01),
                ),
                1 => Box::new(Adam::new(vec![w.clone()], 0.05).weight_decay(0.01)),
                2 => Box::new(AdamW::new(vec![w.clone()], 0.05)),
                3 => Box::new(
                    Sgd::new(vec![w.clone()], 0.1)
                        .momentum(0.5)
                        .dampening(0.2)
                        .maximize(true),
                ),
                4 => Box::new(Sgd::new(vec![w.clone()], 0.05).momentum(0.8).nesterov(true)),
                5 => Box::new(RmsProp::new(vec![w.clone()], 0.01).weight_decay(0.01)),
                6 => Box::new(
                    RmsProp::new(vec![w.clone()], 0.01)
                        .alpha(0.9)
                        .momentum(0.5)
                        .centered(true),
                ),
                7 => Box::new(
                    AdamW::new(vec![w.clone()], 0.05)
                        .amsgrad(true)
                        .maximize(true),
                ),
                _ => Box::new(
                    Adagrad::new(vec![w.clone()], 0.1)
                        .lr_decay(0.1)
                        .initial_accumulator_value(0.2)
                        .maximize(true),
                ),
            };
            for _ in 0..3 {
                opt.zero_grad();
                let y = x.matmul(&w)?;
                (&y * &y)?.sum([0, 1], false)?.backward()?;
                norms.push(gflow::nn::utils::clip_grad_norm(std::slice::from_ref(&w), 0.5)? as f32);
                opt.step()?;
                if device != "cpu" {
                    assert_eq!(
                        w.resident_on().map(str::to_string),
                        Some(w.device().to_string()),
                        "the parameter stays on {device}"
                    );
                    assert!(
                        !w.has_host_copy(),
                        "a step copied the parameter to the host"
                    );
                }
            }
            finals.push(w.to_vec_cast::<f32>()?);
        }
        finals.push(norms);
        Ok(finals)
    })?;
    Ok(out.into_iter().next().unwrap_or_default())
}

#[test]
fn optimizer_steps_stay_on_the_device() {
    let cpu = train("cpu").unwrap();
    let Some(wgpu) = common::on_wgpu("optimizer_steps_stay_on_the_device", train("wgpu")) else {
        return;
    };
    for (which, (a, b)) in wgpu.iter().zip(&cpu).enumerate() {
        for (p, q) in a.iter().zip(b) {
            assert!(
                (p - q).abs() <= 1e-4 * (1.0 + q.abs()),
                "optimizer {which}: {p} on wgpu vs {q} on the CPU"
            );
        }
    }
}
