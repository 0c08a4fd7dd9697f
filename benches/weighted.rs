//! `gflow-bench weighted`: data-parallel training on a mixed placement, balanced against weighted.
//!
//! Two simulated ranks share a `"gpu"` placement whose devices differ: `GFLOW_DEVICE_OVERRIDE`
//! (default `0:wgpu,1:cpu`: rank 0 on its wgpu adapter, rank 1 on the CPU). Each rank first
//! times its own share of a step (forward and backward of its rows of the batch on its device,
//! no communication; both ranks at once, as in training); the weights are the ranks' measured
//! speeds (rows per second). Then the step of `gflow-bench train` (3 layers of `--width`, MSE,
//! SGD, the batch `--batch` split(0), the gradients all-reduced) is timed on the balanced
//! placement and on `Placement::with_weights(speeds)`, the slowest rank's time, median of
//! `--runs`. One JSON line: both step times, the weights, each rank's rows and device.

use std::time::Instant;

use gflow::nn::{self, Module};
use gflow::prelude::*;

use super::{Args, emit, median, time_collective};

/// The ranks of the mixed placement.
const RANKS: usize = 2;

/// What each rank reports: its device, its own share's seconds, the balanced and weighted
/// step seconds, the weights, and its rows under the weighted split.
type RankReport = (String, f64, f64, f64, Vec<f64>, usize);

/// Linear-ReLU-Linear-ReLU-Linear of width `w` (local, on the CPU).
fn mlp(w: usize) -> Result<nn::Sequential> {
    Ok(nn::Sequential::new()
        .add(nn::Linear::new(w, w, true)?)
        .add(nn::ReLU)
        .add(nn::Linear::new(w, w, true)?)
        .add(nn::ReLU)
        .add(nn::Linear::new(w, w, true)?))
}

/// The step time (the slowest rank's) of data-parallel training on `p`.
fn step_time(env: &Env, a: &Args, p: &Placement) -> Result<f64> {
    let model = mlp(a.width)?.to_global(p, Sbp::broadcast())?;
    let mut opt = optim::Sgd::new(model.parameters(), 0.01);
    let x = Tensor::randn(&[a.batch, a.width], (p, Sbp::split(0)))?;
    let y = Tensor::randn(&[a.batch, a.width], (p, Sbp::split(0)))?;
    time_collective(env, a.runs, || {
        let loss = nn::functional::mse_loss(&model.forward(&x)?, &y)?;
        loss.backward()?;
        opt.step()?;
        opt.zero_grad();
        Ok(())
    })
}

/// This rank's device and its own seconds for forward and backward of its rows of a balanced
/// split on that device (a local copy of the model; every rank at once after a barrier).
fn own_share(env: &Env, a: &Args, p: &Placement) -> Result<(Device, f64)> {
    let x = Tensor::randn(&[a.batch, a.width], (p, Sbp::split(0)))?.to_local()?;
    let y = Tensor::randn(&[a.batch, a.width], (p, Sbp::split(0)))?.to_local()?;
    let dev = x.device();
    let mut model = mlp(a.width)?;
    model.map_parameters(&mut |t| Ok(t.to_device(dev)?.detach().set_requires_grad(true)))?;
    let world: Vec<usize> = (0..env.world_size()).collect();
    let mut times = vec![];
    for i in 0..a.runs + 2 {
        env.comm().barrier(&world)?;
        let t = Instant::now();
        let loss = nn::functional::mse_loss(&model.forward(&x)?, &y)?;
        loss.backward()?;
        // the first layer's gradient (backward computes it last) on the host: the step is done
        let first = model.parameters().into_iter().next();
        if let Some(g) = first.and_then(|w| w.grad()) {
            std::hint::black_box(g.to_vec::<f32>()?);
        }
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    Ok((dev, median(times)))
}

/// Every rank's `value`, in rank order.
fn gather(env: &Env, value: f64) -> Result<Vec<f64>> {
    let world: Vec<usize> = (0..env.world_size()).collect();
    let all = env
        .comm()
        .all_gather(&world, &value.to_le_bytes(), &vec![8; world.len()])?;
    Ok(all
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect())
}

/// One rank's part of the benchmark.
fn rank(env: Env, a: &Args) -> Result<RankReport> {
    let balanced = Placement::new("gpu", (0..RANKS).collect::<Vec<_>>())?;
    let (dev, own) = own_share(&env, a, &balanced)?;
    let rows = balanced.split_range(0, a.batch, env.rank()).len() as f64;
    let speeds = gather(&env, rows / own)?;
    let weighted = balanced.with_weights(&speeds)?;
    let t_balanced = step_time(&env, a, &balanced)?;
    let t_weighted = step_time(&env, a, &weighted)?;
    let my_rows = weighted.split_range(0, a.batch, env.rank()).len();
    Ok((
        dev.to_string(),
        own,
        t_balanced,
        t_weighted,
        speeds,
        my_rows,
    ))
}

/// Runs the benchmark (see the module's documentation) and prints its JSON line.
pub fn weighted(a: &Args) -> Result<()> {
    if std::env::var_os("GFLOW_DEVICE_OVERRIDE").is_none() {
        // SAFETY: called from main before any thread of this process starts.
        unsafe { std::env::set_var("GFLOW_DEVICE_OVERRIDE", "0:wgpu,1:cpu") };
    }
    let reports = gflow::simulate(RANKS, |env| rank(env, a))?;
    let (devices, own): (Vec<String>, Vec<f64>) =
        reports.iter().map(|r| (r.0.clone(), r.1)).unzip();
    let rows: Vec<usize> = reports.iter().map(|r| r.5).collect();
    let (_, _, balanced, weighted, speeds, _) = &reports[0];
    let total: f64 = speeds.iter().sum();
    let weights: Vec<String> = speeds.iter().map(|s| format!("{:.3}", s / total)).collect();
    let own: Vec<String> = own.iter().map(|t| format!("{t:.6}")).collect();
    let (w, b) = (a.width, a.batch);
    emit(
        a,
        &[format!(
            "{{\"system\": \"gflow-inproc\", \"op\": \"train_mlp_3x{w}_b{b}_mixed\", \"ranks\": {RANKS}, \"devices\": {devices:?}, \"own_share_s\": [{}], \"weights\": [{}], \"weighted_rows\": {rows:?}, \"balanced_s\": {balanced:.6}, \"median_s\": {weighted:.6}, \"speedup\": {:.3}}}",
            own.join(", "),
            weights.join(", "),
            balanced / weighted
        )],
    )
}
