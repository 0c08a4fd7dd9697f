//! Trains a small MLP classifier on a synthetic data set (4 Gaussian clusters in 16-D) with data
//! parallelism: every batch is split(0) over all ranks, the parameters are broadcast, and the
//! gradient all-reduce comes from boxing, with no communication in this file. Rank 0 shows a
//! progress bar (loss, samples/s); every rank prints the epoch losses and the final test
//! accuracy, identical on any number of ranks.
//!
//! Run: `cargo run --release --example train_mlp` (4 ranks as threads), or as 4 processes:
//! `cargo run --release --bin gflow-launch -- --nproc-per-node 4 target/release/examples/train_mlp`

use std::time::Instant;

use gflow::nn::functional::cross_entropy;
use gflow::prelude::*;
use indicatif::{ProgressBar, ProgressStyle};

const CLASSES: usize = 4;
const FEATURES: usize = 16;
const BATCH: usize = 256;
const BATCHES: usize = 16;
const EPOCHS: usize = 8;

/// A labelled batch: features (BATCH, FEATURES) around the class centres, and I64 labels.
fn batch(centres: &Tensor, p: &Placement, index: usize) -> Result<(Tensor, Tensor)> {
    let labels: Vec<i64> = (0..BATCH)
        .map(|i| ((i * 7 + index * 3) % CLASSES) as i64)
        .collect();
    let y = Tensor::from_vec(labels, &[BATCH], (p, Sbp::split(0)))?;
    let noise = Tensor::randn(&[BATCH, FEATURES], (p, Sbp::split(0)))?;
    let x = centres.gather_rows(&y)?.add(&noise)?;
    Ok((x, y))
}

fn main() -> Result<()> {
    let out = gflow::run(4, |env| {
        gflow::manual_seed(7);
        let world: Vec<usize> = (0..env.world_size()).collect();
        let p = Placement::new("cpu", world)?;
        let centres =
            Tensor::randn(&[CLASSES, FEATURES], (&p, Sbp::broadcast()))?.mul_scalar(0.5)?;
        let train: Vec<(Tensor, Tensor)> = (0..BATCHES)
            .map(|i| batch(&centres, &p, i))
            .collect::<Result<_>>()?;
        let test = batch(&centres, &p, BATCHES)?;

        let model = nn::Sequential::new()
            .add(nn::Linear::new(FEATURES, 64, true)?)
            .add(nn::ReLU)
            .add(nn::Linear::new(64, CLASSES, true)?)
            .to_global(&p, Sbp::broadcast())?;
        let mut opt = optim::Adam::new(model.parameters(), 0.01);

        let bar = if env.rank() == 0 {
            ProgressBar::new((EPOCHS * BATCHES) as u64)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}").map_err(|e| {
                gflow::Error::InvalidArgument {
                    op: "progress bar",
                    reason: e.to_string(),
                }
            })?,
        );
        let mut lines = vec![];
        let start = Instant::now();
        for epoch in 0..EPOCHS {
            let mut total = 0.0;
            for (x, y) in &train {
                let loss = cross_entropy(&model.forward(x)?, y)?;
                loss.backward()?;
                opt.step()?;
                opt.zero_grad();
                let l = loss.to_vec::<f32>()?[0];
                total += l;
                bar.inc(1);
                let seen = (bar.position() as usize * BATCH) as f64;
                bar.set_message(format!(
                    "loss {l:.4}  {:.0} samples/s",
                    seen / start.elapsed().as_secs_f64()
                ));
            }
            lines.push(format!(
                "epoch {epoch}: mean loss {:.4}",
                total / BATCHES as f32
            ));
        }
        bar.finish_and_clear();

        let logits = gflow::no_grad(|| model.forward(&test.0))?.to_vec::<f32>()?;
        let labels = test.1.to_vec::<i64>()?;
        let correct = logits
            .chunks(CLASSES)
            .zip(&labels)
            .filter(|(row, label)| {
                let best = (0..CLASSES).fold(0, |b, c| if row[c] > row[b] { c } else { b });
                best as i64 == **label
            })
            .count();
        lines.push(format!(
            "test accuracy: {:.1}% of {}",
            100.0 * correct as f64 / labels.len() as f64,
            labels.len()
        ));
        Ok(lines)
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
