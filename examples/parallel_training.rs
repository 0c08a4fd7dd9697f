//! One MLP (Linear 8->16, ReLU, Linear 16->4, MSE, SGD) trained for 20 steps four ways on 4
//! ranks, each printing the same losses as a single device: data parallel (batch split(0),
//! weights broadcast), tensor parallel (Megatron: first weight split over its outputs, second
//! over its inputs), 2-D ((broadcast, split(0)) data on a 2x2 array), and a two-stage pipeline
//! (stage 1 on ranks [0, 1], stage 2 on [2, 3], activations crossing with `to_global`). No line
//! below communicates: the signatures and the gradients' boxing do.
//!
//! Run: `cargo run --release --example parallel_training`

use gflow::nn::functional::mse_loss;
use gflow::prelude::*;

const STEPS: usize = 20;

/// Deterministic data and initial weights, as whole logical values.
fn values(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0) * scale)
        .collect()
}

/// Builds a tensor of the logical value `values(n, seed, scale)` on `target`.
fn t(shape: &[usize], seed: usize, scale: f32, target: impl IntoTarget) -> Result<Tensor> {
    Tensor::from_vec(values(shape.iter().product(), seed, scale), shape, target)
}

/// Trains with SGD and returns the first and last loss (on ranks holding the loss).
fn fit(
    params: Vec<Tensor>,
    rank: usize,
    step: impl Fn() -> Result<Tensor>,
) -> Result<Option<(f32, f32)>> {
    let mut opt = optim::Sgd::new(params, 0.05).momentum(0.9);
    let mut losses = vec![];
    for _ in 0..STEPS {
        let loss = step()?;
        loss.backward()?;
        opt.step()?;
        opt.zero_grad();
        if loss.placement().is_none_or(|p| p.contains(rank)) {
            losses.push(loss.to_vec::<f32>()?[0]);
        }
    }
    Ok(losses.first().zip(losses.last()).map(|(a, b)| (*a, *b)))
}

fn main() -> Result<()> {
    let out = gflow::run(4, |env| {
        let r = env.rank();
        let all = Placement::new("cpu", [0, 1, 2, 3])?;
        let grid = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let (p1, p2) = (
            Placement::new("cpu", [0, 1])?,
            Placement::new("cpu", [2, 3])?,
        );
        let b = Sbp::broadcast();
        let mut lines = vec![];
        let mut report = |name: &str, r: Option<(f32, f32)>| {
            if let Some((first, last)) = r {
                lines.push(format!("{name:<16} loss {first:.6} -> {last:.6}"));
            }
        };

        let mlp = |w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor| -> Result<nn::Sequential> {
            Ok(nn::Sequential::new()
                .add(nn::Linear::from_tensors(w1, Some(b1))?)
                .add(nn::ReLU)
                .add(nn::Linear::from_tensors(w2, Some(b2))?))
        };
        let weights = |t1: Sbp, t2: Sbp, tb: Sbp, p: &Placement| -> Result<nn::Sequential> {
            mlp(
                t(&[16, 8], 1, 0.35, (p, t1))?,
                t(&[16], 2, 0.35, (p, t1))?,
                t(&[4, 16], 3, 0.3, (p, t2))?,
                t(&[4], 4, 0.3, (p, tb))?,
            )
        };

        // Single device, as the reference (every rank computes it on its own).
        let m = mlp(
            t(&[16, 8], 1, 0.35, Device::Cpu)?,
            t(&[16], 2, 0.35, Device::Cpu)?,
            t(&[4, 16], 3, 0.3, Device::Cpu)?,
            t(&[4], 4, 0.3, Device::Cpu)?,
        )?;
        let (x, y) = (
            t(&[16, 8], 5, 1.0, Device::Cpu)?,
            t(&[16, 4], 6, 1.0, Device::Cpu)?,
        );
        report(
            "single device",
            fit(m.parameters(), r, || mse_loss(&m.forward(&x)?, &y))?,
        );

        let m = weights(b, b, b, &all)?;
        let (x, y) = (
            t(&[16, 8], 5, 1.0, (&all, Sbp::split(0)))?,
            t(&[16, 4], 6, 1.0, (&all, Sbp::split(0)))?,
        );
        report(
            "data parallel",
            fit(m.parameters(), r, || mse_loss(&m.forward(&x)?, &y))?,
        );

        let m = weights(Sbp::split(0), Sbp::split(1), b, &all)?;
        let (x, y) = (
            t(&[16, 8], 5, 1.0, (&all, b))?,
            t(&[16, 4], 6, 1.0, (&all, b))?,
        );
        report(
            "tensor parallel",
            fit(m.parameters(), r, || mse_loss(&m.forward(&x)?, &y))?,
        );

        let bb = [b, b];
        let m = weights(b, b, b, &all)?.to_local()?.to_global(&grid, bb)?;
        let bs0 = [b, Sbp::split(0)];
        let (x, y) = (
            t(&[16, 8], 5, 1.0, (&grid, bs0))?,
            t(&[16, 4], 6, 1.0, (&grid, bs0))?,
        );
        report(
            "2-D (B, S(0))",
            fit(m.parameters(), r, || mse_loss(&m.forward(&x)?, &y))?,
        );

        let stage1 = nn::Sequential::new()
            .add(nn::Linear::from_tensors(
                t(&[16, 8], 1, 0.35, (&p1, b))?,
                Some(t(&[16], 2, 0.35, (&p1, b))?),
            )?)
            .add(nn::ReLU);
        let stage2 = nn::Linear::from_tensors(
            t(&[4, 16], 3, 0.3, (&p2, b))?,
            Some(t(&[4], 4, 0.3, (&p2, b))?),
        )?;
        let (x, y) = (
            t(&[16, 8], 5, 1.0, (&p1, Sbp::split(0)))?,
            t(&[16, 4], 6, 1.0, (&p2, Sbp::split(0)))?,
        );
        let params = stage1
            .parameters()
            .into_iter()
            .chain(stage2.parameters())
            .collect();
        report(
            "pipeline",
            fit(params, r, || {
                let h = stage1.forward(&x)?.to_global(&p2, Sbp::split(0))?;
                mse_loss(&stage2.forward(&h)?, &y)
            })?,
        );
        Ok(lines)
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
