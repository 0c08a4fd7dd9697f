//! Parallel training styles give the single-device losses: the same model, data and initial
//! weights trained for 20 steps locally (one rank) and as global tensors with data, tensor
//! (Megatron), 2-D and pipeline parallelism. No test writes a collective: the operators'
//! signatures and the gradients' boxing supply all communication.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;
use gflow::{nn::functional::mse_loss, simulate};

mod common;

const STEPS: usize = 20;
/// Samples, input features, hidden features, outputs.
const N: usize = 16;
const D: usize = 8;
const H: usize = 12;
const O: usize = 4;

/// Deterministic values in [-scale, scale).
fn data(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0) * scale)
        .collect()
}

/// The initial weights and the data set, as whole logical values.
struct Init {
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
}

fn init() -> Init {
    Init {
        w1: data(H * D, 1, 0.35),
        b1: data(H, 2, 0.35),
        w2: data(O * H, 3, 0.3),
        b2: data(O, 4, 0.3),
        x: data(N * D, 5, 1.0),
        y: data(N * O, 6, 1.0),
    }
}

/// Trains `model` on (x, y) for STEPS steps with `opt`, returning the losses (on ranks that hold
/// the loss).
fn train(
    model: &dyn Module,
    x: &Tensor,
    y: &Tensor,
    opt: &mut dyn Optimizer,
    rank: usize,
) -> Result<Vec<f32>> {
    let mut losses = vec![];
    for _ in 0..STEPS {
        let loss = mse_loss(&model.forward(x)?, y)?;
        loss.backward()?;
        opt.step()?;
        opt.zero_grad();
        if loss.placement().is_none_or(|p| p.contains(rank)) {
            losses.push(loss.to_vec_cast::<f32>()?[0]);
        }
    }
    Ok(losses)
}

fn mlp(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Result<nn::Sequential> {
    Ok(nn::Sequential::new()
        .add(nn::Linear::from_tensors(w1, Some(b1))?)
        .add(nn::ReLU)
        .add(nn::Linear::from_tensors(w2, Some(b2))?))
}

/// The single-device losses, with SGD (momentum) or Adam.
fn reference(adam: bool) -> Vec<f32> {
    simulate(1, |_| {
        let i = init();
        let t = |v: &Vec<f32>, s: &[usize]| Tensor::from_vec(v.clone(), s, Device::Cpu);
        let model = mlp(
            t(&i.w1, &[H, D])?,
            t(&i.b1, &[H])?,
            t(&i.w2, &[O, H])?,
            t(&i.b2, &[O])?,
        )?;
        let mut opt = optimizer(&model, adam);
        train(&model, &t(&i.x, &[N, D])?, &t(&i.y, &[N, O])?, &mut *opt, 0)
    })
    .unwrap()
    .remove(0)
}

fn optimizer(model: &dyn Module, adam: bool) -> Box<dyn Optimizer> {
    if adam {
        Box::new(optim::Adam::new(model.parameters(), 0.01))
    } else {
        Box::new(optim::Sgd::new(model.parameters(), 0.05).momentum(0.9))
    }
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: number of losses");
    for (s, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 2e-5 * (1.0 + b.abs()),
            "{what}: step {s}: loss {a} vs single-device {b}"
        );
    }
    assert!(want[STEPS - 1] < want[0] * 0.8, "the reference run learns");
}

#[test]
fn data_parallel_matches_single_device() {
    for adam in [false, true] {
        let want = reference(adam);
        let out = common::world(4, |env| {
            let p = Placement::new("cpu", [0, 1, 2, 3])?;
            let i = init();
            let b =
                |v: &Vec<f32>, s: &[usize]| Tensor::from_vec(v.clone(), s, (&p, Sbp::broadcast()));
            let model = mlp(
                b(&i.w1, &[H, D])?,
                b(&i.b1, &[H])?,
                b(&i.w2, &[O, H])?,
                b(&i.b2, &[O])?,
            )?;
            let x = Tensor::from_vec(i.x, &[N, D], (&p, Sbp::split(0)))?;
            let y = Tensor::from_vec(i.y, &[N, O], (&p, Sbp::split(0)))?;
            let mut opt = optimizer(&model, adam);
            let losses = train(&model, &x, &y, &mut *opt, env.rank())?;
            // One more backward: the weight gradients are broadcast, as the weights are.
            mse_loss(&model.forward(&x)?, &y)?.backward()?;
            for w in model.parameters() {
                assert_eq!(w.grad().unwrap().sbp(), w.sbp());
            }
            Ok(losses)
        })
        .unwrap();
        for losses in out {
            assert_close(
                &losses,
                &want,
                if adam {
                    "data parallel, Adam"
                } else {
                    "data parallel"
                },
            );
        }
    }
}

#[test]
fn tensor_parallel_mlp_matches_single_device() {
    let want = reference(false);
    let out = common::world(2, |env| {
        let p = Placement::new("cpu", [0, 1])?;
        let i = init();
        let on = |v: &Vec<f32>, s: &[usize], sbp: Sbp| Tensor::from_vec(v.clone(), s, (&p, sbp));
        // Megatron: the first weight split over its output dim, the second over its input dim.
        let l1 = nn::Linear::from_tensors(
            on(&i.w1, &[H, D], Sbp::split(0))?,
            Some(on(&i.b1, &[H], Sbp::split(0))?),
        )?;
        let l2 = nn::Linear::from_tensors(
            on(&i.w2, &[O, H], Sbp::split(1))?,
            Some(on(&i.b2, &[O], Sbp::broadcast())?),
        )?;
        let x = on(&i.x, &[N, D], Sbp::broadcast())?;
        let y = on(&i.y, &[N, O], Sbp::broadcast())?;
        // The hidden activation stays split over features and the second product is a partial
        // sum: no boxing inside the block, one reduction at its end.
        let h = l1.forward(&x)?.relu()?;
        assert_eq!(h.sbp().unwrap().to_string(), "(split(dim=1),)");
        let partial = h.matmul(&l2.weight().transpose(0, 1)?)?;
        assert_eq!(partial.sbp().unwrap().to_string(), "(partial_sum,)");
        let model = nn::Sequential::new().add(l1).add(nn::ReLU).add(l2);
        let mut opt = optimizer(&model, false);
        let losses = train(&model, &x, &y, &mut *opt, env.rank())?;
        let sbps: Vec<String> = model
            .parameters()
            .iter()
            .map(|w| w.sbp().unwrap().to_string())
            .collect();
        Ok((losses, sbps))
    })
    .unwrap();
    for (losses, sbps) in out {
        assert_close(&losses, &want, "tensor parallel");
        assert_eq!(
            sbps,
            [
                "(split(dim=0),)",
                "(split(dim=0),)",
                "(split(dim=1),)",
                "(broadcast,)"
            ]
        );
    }
}

#[test]
fn two_d_sbp_model_matches_single_device() {
    let want = reference(false);
    let out = common::world(4, |env| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let i = init();
        let bb = [Sbp::broadcast(), Sbp::broadcast()];
        let bs0 = [Sbp::broadcast(), Sbp::split(0)];
        let local = |v: &Vec<f32>, s: &[usize]| Tensor::from_vec(v.clone(), s, Device::Cpu);
        // As the seed: build locally, then model.to_global(placement, (broadcast, broadcast)).
        let model = mlp(
            local(&i.w1, &[H, D])?,
            local(&i.b1, &[H])?,
            local(&i.w2, &[O, H])?,
            local(&i.b2, &[O])?,
        )?
        .to_global(&p, bb)?;
        let x = Tensor::from_vec(i.x, &[N, D], (&p, bs0))?;
        let y = Tensor::from_vec(i.y, &[N, O], (&p, bs0))?;
        let mut opt = optimizer(&model, false);
        train(&model, &x, &y, &mut *opt, env.rank())
    })
    .unwrap();
    for losses in out {
        assert_close(&losses, &want, "2-D (broadcast, split(0))");
    }
}

#[test]
fn two_stage_pipeline_matches_single_device() {
    let want = reference(false);
    let out = common::world(4, |env| {
        let p1 = Placement::new("cpu", [0, 1])?;
        let p2 = Placement::new("cpu", [2, 3])?;
        let i = init();
        let on = |v: &Vec<f32>, s: &[usize], p: &Placement| {
            Tensor::from_vec(v.clone(), s, (p, Sbp::broadcast()))
        };
        let stage1 = nn::Sequential::new()
            .add(nn::Linear::from_tensors(
                on(&i.w1, &[H, D], &p1)?,
                Some(on(&i.b1, &[H], &p1)?),
            )?)
            .add(nn::ReLU);
        let stage2 =
            nn::Linear::from_tensors(on(&i.w2, &[O, H], &p2)?, Some(on(&i.b2, &[O], &p2)?))?;
        let x = Tensor::from_vec(i.x, &[N, D], (&p1, Sbp::split(0)))?;
        let y = Tensor::from_vec(i.y, &[N, O], (&p2, Sbp::split(0)))?;
        let params: Vec<Tensor> = stage1
            .parameters()
            .into_iter()
            .chain(stage2.parameters())
            .collect();
        let mut opt = optim::Sgd::new(params, 0.05).momentum(0.9);
        let mut losses = vec![];
        for _ in 0..STEPS {
            let h = stage1.forward(&x)?.to_global(&p2, Sbp::split(0))?;
            let loss = mse_loss(&stage2.forward(&h)?, &y)?;
            loss.backward()?;
            opt.step()?;
            opt.zero_grad();
            if p2.contains(env.rank()) {
                losses.push(loss.to_vec_cast::<f32>()?[0]);
            }
        }
        Ok(losses)
    })
    .unwrap();
    assert!(out[0].is_empty() && out[1].is_empty());
    assert_close(&out[2], &want, "pipeline");
    assert_close(&out[3], &want, "pipeline");
}

/// Every style again, as real processes over shared memory and over QUIC.
#[test]
fn as_processes_over_shared_memory_and_quic() {
    common::relaunch(&[
        ("data_parallel_matches_single_device", 4),
        ("tensor_parallel_mlp_matches_single_device", 2),
        ("two_d_sbp_model_matches_single_device", 4),
        ("two_stage_pipeline_matches_single_device", 4),
    ]);
}
