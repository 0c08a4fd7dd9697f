//! Trains a small MLP classifier (with dropout) on a synthetic data set (4 Gaussian clusters in
//! 16-D) with data parallelism: every batch is split(0) over all ranks, the parameters are
//! broadcast, and the gradient all-reduce comes from boxing, with no communication in this file.
//! Rank 0 shows a progress bar (loss, samples/s); every rank prints the epoch losses and the
//! final test accuracy, identical on any number of ranks.
//!
//! Checkpoints: `--ckpt-dir DIR` saves model, optimizer moments, random generator state and
//! step to `DIR/step-NNNNNN` every `--ckpt-every K` steps; `--resume` (or a restart by
//! `gflow-launch --max-restarts`, which sets `GFLOW_RESTART_COUNT`) continues from the latest
//! complete checkpoint there, bitwise as if never stopped: the data order is a function of the
//! epoch, and dropout masks come from the restored generator. `--steps N` stops early;
//! `--print-steps` prints every step's loss bits and a digest of the final weights.
//! `GFLOW_TEST_KILL=RANK:STEP` makes that rank SIGKILL itself before that step on the first
//! attempt only (what tests/checkpoint_resume.rs uses to show a job surviving a killed rank).
//!
//! Run: `cargo run --release --example train_mlp` (4 ranks as threads), or as 4 processes:
//! `cargo run --release --bin gflow-launch -- --nproc-per-node 4 target/release/examples/train_mlp`;
//! a job that survives a killed rank:
//! `gflow-launch --max-restarts 1 --nproc-per-node 4 target/release/examples/train_mlp --ckpt-dir /tmp/ck`

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use gflow::nn::functional::cross_entropy;
use gflow::prelude::*;
use gflow::{StateDict, checkpoint};
use indicatif::{ProgressBar, ProgressStyle};

const CLASSES: usize = 4;
const FEATURES: usize = 16;
const BATCH: usize = 256;
const BATCHES: usize = 16;
const EPOCHS: usize = 8;

/// The command line.
#[derive(Parser, Debug)]
struct Args {
    /// Save checkpoints to DIR/step-NNNNNN (and resume from there).
    #[arg(long)]
    ckpt_dir: Option<PathBuf>,
    /// Save a checkpoint every K steps (and after the last step).
    #[arg(long, default_value_t = BATCHES)]
    ckpt_every: usize,
    /// Continue from the latest complete checkpoint in --ckpt-dir (implied on a restart).
    #[arg(long)]
    resume: bool,
    /// Stop after this many steps in all.
    #[arg(long, default_value_t = EPOCHS * BATCHES)]
    steps: usize,
    /// Print each step's loss as bits and a digest of the final weights (for exact comparisons).
    #[arg(long)]
    print_steps: bool,
}

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

/// The batch order of `epoch`: a shuffle that depends on the epoch alone (as PyTorch's
/// `DistributedSampler.set_epoch`), so a resumed run sees the same order.
fn order(epoch: usize) -> Vec<usize> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ epoch as u64;
    let mut next = || {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (s >> 33) as usize
    };
    let mut v: Vec<usize> = (0..BATCHES).collect();
    for i in (1..BATCHES).rev() {
        v.swap(i, next() % (i + 1));
    }
    v
}

/// The checkpoint directory of `step`.
fn ckpt_path(dir: &Path, step: usize) -> PathBuf {
    dir.join(format!("step-{step:06}"))
}

/// The latest complete checkpoint in `dir` (a crash's half-written `.step-*.partial` never counts).
fn latest(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let step: usize = name.strip_prefix("step-")?.parse().ok()?;
            let path = dir.join(&name);
            checkpoint::is_complete(&path).then_some((step, path))
        })
        .max()
        .map(|(_, p)| p)
}

/// FNV-1a over the bits of every parameter: one number that differs if any weight does.
fn digest(model: &impl Module) -> Result<u64> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for t in model.parameters() {
        for x in t.to_vec::<f32>()? {
            for b in x.to_bits().to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    Ok(h)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let restarted = std::env::var("GFLOW_RESTART_COUNT")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    let kill: Option<(usize, usize)> = std::env::var("GFLOW_TEST_KILL")
        .ok()
        .and_then(|s| {
            let (r, i) = s.split_once(':')?;
            Some((r.parse().ok()?, i.parse().ok()?))
        })
        .filter(|_| restarted == 0);
    let resume_from = match &args.ckpt_dir {
        Some(dir) if args.resume || restarted > 0 => latest(dir),
        _ => None,
    };
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
            .add(nn::Dropout::new(0.1)?)
            .add(nn::Linear::new(64, CLASSES, true)?)
            .to_global(&p, Sbp::broadcast())?;
        let mut opt = optim::Adam::new(model.parameters(), 0.01);

        let mut lines = vec![];
        // What a checkpoint holds besides the tensors: the next step and this epoch's loss sum.
        let (mut start_step, mut total) = (0, 0.0f32);
        if let Some(dir) = &resume_from {
            let mut sd = StateDict::new();
            sd.insert_module("model", &model);
            sd.insert_optimizer("opt", &opt);
            checkpoint::load(&mut sd, dir)?;
            let missing = |name: &str| gflow::Error::Checkpoint {
                path: dir.display().to_string(),
                reason: format!("no value {name:?}: not a train_mlp checkpoint"),
            };
            gflow::set_rng_state(sd.rng_state("rng").ok_or_else(|| missing("rng"))?);
            start_step = sd.value("step").ok_or_else(|| missing("step"))? as usize;
            total = f32::from_bits(
                sd.value("epoch_loss")
                    .ok_or_else(|| missing("epoch_loss"))? as u32,
            );
            if env.rank() == 0 {
                eprintln!("resumed from {} at step {start_step}", dir.display());
            }
        } else if let (Some(dir), true, 0) =
            (&args.ckpt_dir, args.resume || restarted > 0, env.rank())
        {
            eprintln!(
                "no complete checkpoint in {}: starting at step 0",
                dir.display()
            );
        }

        let bar = if env.rank() == 0 {
            ProgressBar::new(args.steps as u64)
        } else {
            ProgressBar::hidden()
        };
        bar.set_position(start_step as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}").map_err(|e| {
                gflow::Error::InvalidArgument {
                    op: "progress bar",
                    reason: e.to_string(),
                }
            })?,
        );
        let start = Instant::now();
        for step in start_step..args.steps {
            if kill == Some((env.rank(), step)) {
                // SAFETY: raising a signal in this process has no memory-safety preconditions.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            }
            let (epoch, i) = (step / BATCHES, step % BATCHES);
            let (x, y) = &train[order(epoch)[i]];
            let loss = cross_entropy(&model.forward(x)?, y)?;
            loss.backward()?;
            opt.step()?;
            opt.zero_grad();
            let l = loss.to_vec::<f32>()?[0];
            total += l;
            if args.print_steps {
                lines.push(format!("step {step}: loss bits {:08x}", l.to_bits()));
            }
            bar.inc(1);
            let seen = ((step + 1 - start_step) * BATCH) as f64;
            bar.set_message(format!(
                "loss {l:.4}  {:.0} samples/s",
                seen / start.elapsed().as_secs_f64()
            ));
            if i == BATCHES - 1 {
                lines.push(format!(
                    "epoch {epoch}: mean loss {:.4}",
                    total / BATCHES as f32
                ));
                total = 0.0;
            }
            let done = step + 1;
            if let Some(dir) = &args.ckpt_dir
                && (done % args.ckpt_every.max(1) == 0 || done == args.steps)
            {
                let mut sd = StateDict::new();
                sd.insert_module("model", &model);
                sd.insert_optimizer("opt", &opt);
                sd.insert_rng_state("rng", gflow::rng_state());
                sd.insert_value("step", done as i64);
                sd.insert_value("epoch_loss", i64::from(total.to_bits()));
                checkpoint::save(&sd, ckpt_path(dir, done))?;
            }
        }
        bar.finish_and_clear();

        model.set_training(false);
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
        if args.print_steps {
            lines.push(format!("weights digest {:016x}", digest(&model)?));
        }
        Ok(lines)
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
