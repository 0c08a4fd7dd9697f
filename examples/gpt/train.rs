//! The training loop, the same for every layout: AdamW (betas (0.9, 0.95), eps 1e-8, decoupled
//! weight decay 0.1) with linear warm-up and cosine decay to lr / 10, gradient clipping at 1.0,
//! checkpoints every K steps, then the validation loss and a sample of generated text.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gflow::StateDict;
use gflow::nn::utils::clip_grad_norm;
use gflow::optim::AdamW;
use gflow::prelude::*;

use crate::Args;
use crate::data::{Corpus, Sampler};
use crate::layout::Plan;
use crate::model::{Config, Gpt, Placer, from_torch_order};
use crate::progress::Progress;

/// Gradient clipping threshold (PyTorch's `clip_grad_norm_(params, 1.0)`).
const MAX_NORM: f64 = 1.0;
/// The text the sample continues.
const PROMPT: &[u8] = b"\nLOVE, n. ";
/// Validation batches averaged for the validation loss.
const VAL_BATCHES: usize = 4;

/// The learning rate of step `s` (0-based): linear warm-up to `lr` over `warmup` steps, then a
/// cosine decay to `lr / 10` at step `steps`, as gpt_torch.py's `lr_at`.
pub fn lr_at(s: usize, steps: usize, lr: f64, warmup: usize) -> f64 {
    if s < warmup {
        return lr * (s + 1) as f64 / warmup as f64;
    }
    let lo = lr / 10.0;
    let t = (s - warmup) as f64 / (steps.saturating_sub(warmup).max(1)) as f64;
    lo + 0.5 * (lr - lo) * (1.0 + (std::f64::consts::PI * t).cos())
}

/// Runs the job (ranks as threads, or this process as one rank under a launcher).
///
/// # Errors
/// Bad arguments (`InvalidArgument`), I/O and checkpoint errors, a rank's failure.
pub fn main(a: &Args) -> Result<()> {
    let cfg = Config::named(&a.config).ok_or_else(|| gflow::Error::InvalidArgument {
        op: "--config",
        reason: format!("tiny, small or 50m expected, got {:?}", a.config),
    })?;
    let dtype = match a.dtype.as_str() {
        "f32" => DType::F32,
        "f64" => DType::F64,
        other => {
            return Err(gflow::Error::InvalidArgument {
                op: "--dtype",
                reason: format!("f32 or f64 expected, got {other:?}"),
            });
        }
    };
    gflow::run(a.simulate, |env| rank_main(a, &cfg, dtype, &env))?;
    Ok(())
}

/// One rank's run.
fn rank_main(a: &Args, cfg: &Config, dtype: DType, env: &Env) -> Result<()> {
    let (rank, world) = (env.rank(), env.world_size());
    let plan = Plan::new(a.layout, &a.device, world, a.dp)?;
    let model = build(a, cfg, dtype, &plan)?;
    let params = model.parameters();
    let lr = a.lr.unwrap_or(cfg.lr);
    let mut opt = AdamW::new(params.clone(), lr)
        .betas((0.9, 0.95))
        .eps(1e-8)
        .weight_decay(0.1);
    let corpus = Corpus::open(&a.data, a.val_frac, cfg.seq)?;
    let sampler = Sampler {
        batch: cfg.batch,
        seq: cfg.seq,
        stride: a.stride.unwrap_or(cfg.seq).max(1),
    };
    let warmup = a.warmup.unwrap_or((a.steps / 10).max(1));

    let restarted = std::env::var("GFLOW_RESTART_COUNT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    let first = match (&a.ckpt_dir, a.resume || restarted) {
        (Some(dir), true) => resume(dir, &model, &opt)?,
        _ => 0,
    };
    let lead = rank == 0;
    if lead && !a.quiet {
        println!(
            "gpt {}: {} parameters, layout {:?} on {world} ranks ({}), {} steps of {} x {} tokens, {}{}",
            a.config,
            cfg.params(),
            a.layout,
            plan.placement,
            a.steps,
            cfg.batch,
            cfg.seq,
            a.dtype,
            if first > 0 {
                format!(", resumed at step {first}")
            } else {
                String::new()
            }
        );
    }
    let progress = Progress::new(lead && !a.quiet, first, a.steps);
    let mut losses = vec![];
    for s in first..a.steps {
        let t0 = Instant::now();
        opt.set_lr(lr_at(s, a.steps, lr, warmup));
        let (x, y) = sampler.global(&plan, rank, corpus.train(), s)?;
        let loss = model.loss(&x, &y)?;
        loss.backward()?;
        clip_grad_norm(&params, MAX_NORM)?;
        opt.step()?;
        opt.zero_grad();
        let l = scalar(&loss)?;
        losses.push(l);
        if let Some(dir) = &a.ckpt_dir
            && a.ckpt_every > 0
            && (s + 1).is_multiple_of(a.ckpt_every)
        {
            save(dir, s + 1, &model, &opt)?;
        }
        if a.crash_at == Some(s + 1) && !restarted && rank + 1 == world {
            return Err(gflow::Error::Environment {
                reason: format!(
                    "--crash-at: rank {rank} stops after step {} (a lost rank)",
                    s + 1
                ),
            });
        }
        progress.step(s, l, cfg.batch * cfg.seq, t0.elapsed());
    }
    progress.finish();
    let val = validation(&model, &plan, rank, &corpus, &sampler)?;
    let text = gflow::no_grad(|| generate(&model, &plan, cfg, a.sample))?;
    if lead {
        if !text.is_empty() {
            let shown: String = String::from_utf8_lossy(&text)
                .chars()
                .map(|c| if c.is_control() && c != '\n' { '?' } else { c })
                .collect();
            println!(
                "sample (after {:?}):\n{shown}",
                String::from_utf8_lossy(PROMPT)
            );
        }
        match val {
            Some(v) => println!("final validation loss: {v:.4}"),
            None => println!("final validation loss: none (no text held out: --val-frac 0)"),
        }
        if let Some(path) = &a.losses_out {
            write_losses(path, first, &losses, val)?;
        }
    }
    Ok(())
}

/// The model in the plan's layout: a fresh init (local, rank 0's values broadcast) or the
/// `--init` file loaded by name into each rank's shards, then cast to `dtype`.
fn build(a: &Args, cfg: &Config, dtype: DType, plan: &Plan) -> Result<Gpt> {
    gflow::manual_seed(a.seed);
    let p = &plan.placement;
    let sbp = |name: &str, shape: &[usize]| plan.param_sbp(name, shape);
    let model = Gpt::placed(
        cfg,
        &Placer {
            placement: p,
            sbp: &sbp,
        },
    )?;
    if let Some(init) = &a.init {
        // PyTorch's file, loaded whole, reordered to this model's rows, then into the layout
        let whole = Gpt::new(cfg)?;
        let mut file = whole.state_dict();
        gflow::checkpoint::load_safetensors(init, &mut file)?;
        let mut sd = StateDict::new();
        for (name, t) in whole.named_parameters() {
            sd.insert(&name, &from_torch_order(&name, &t, cfg)?);
        }
        model.load_state_dict(&sd)?;
    }
    model.to_dtype(dtype)
}

/// A scalar tensor's value (every rank of its placement gets it).
fn scalar(t: &Tensor) -> Result<f64> {
    let v = t.detach().to_dtype(DType::F64)?.to_vec::<f64>()?;
    Ok(v.first().copied().unwrap_or(f64::NAN))
}

/// The state of a run: the model, the optimizer's moments and step counts, the next step.
fn state(model: &Gpt, opt: &AdamW, step: usize) -> StateDict {
    let mut sd = StateDict::new();
    sd.insert_module("model", model);
    sd.insert_optimizer("opt", opt);
    sd.insert_value("step", step as i64);
    sd
}

/// Saves the state after `step` steps as `dir/step-NNNNNN` (collective, atomic).
fn save(dir: &Path, step: usize, model: &Gpt, opt: &AdamW) -> Result<()> {
    gflow::checkpoint::save(
        &state(model, opt, step),
        dir.join(format!("step-{step:06}")),
    )
}

/// Loads the latest complete checkpoint of `dir` in place and returns its step (0 when there
/// is none yet: a fresh start).
fn resume(dir: &Path, model: &Gpt, opt: &AdamW) -> Result<usize> {
    let Some(latest) = latest(dir) else {
        return Ok(0);
    };
    let mut sd = state(model, opt, 0);
    gflow::checkpoint::load(&mut sd, &latest)?;
    let step = sd.value("step").unwrap_or(0);
    usize::try_from(step).map_err(|_| gflow::Error::Checkpoint {
        path: latest.display().to_string(),
        reason: format!("step {step} is not a step count"),
    })
}

/// The complete checkpoint `dir/step-N` of the largest N.
fn latest(dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let n: usize = p
                .file_name()?
                .to_str()?
                .strip_prefix("step-")?
                .parse()
                .ok()?;
            gflow::checkpoint::is_complete(&p).then_some((n, p))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
}

/// The mean loss over the first `VAL_BATCHES` batches of the held-out text (None without one).
fn validation(
    model: &Gpt,
    plan: &Plan,
    rank: usize,
    corpus: &Corpus,
    s: &Sampler,
) -> Result<Option<f64>> {
    if corpus.val().len() <= s.seq + 1 {
        return Ok(None);
    }
    let mut total = 0.0;
    for k in 0..VAL_BATCHES {
        let (x, y) = s.global(plan, rank, corpus.val(), k)?;
        total += scalar(&gflow::no_grad(|| model.loss(&x, &y))?)?;
    }
    Ok(Some(total / VAL_BATCHES as f64))
}

/// `n` bytes sampled after a fixed prompt (temperature 0.8, a fixed seed: every rank draws the
/// same bytes from the same broadcast logits).
fn generate(model: &Gpt, plan: &Plan, cfg: &Config, n: usize) -> Result<Vec<u8>> {
    let mut text: Vec<u8> = PROMPT.to_vec();
    let prompt = text.len();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..n {
        let ctx = &text[text.len().saturating_sub(cfg.seq)..];
        let t = ctx.len();
        let tokens = Tensor::from_vec(
            ctx.iter().map(|&b| i64::from(b)).collect(),
            &[1, t],
            (&plan.placement, plan.replicated()),
        )?;
        let last = model
            .forward(&tokens)?
            .narrow(1, t - 1, 1)?
            .to_dtype(DType::F64)?;
        let logits = last.to_vec_cast::<f64>()?;
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|l| ((l - max) / 0.8).exp()).collect();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut u = (rng >> 11) as f64 / (1u64 << 53) as f64 * w.iter().sum::<f64>();
        let pick = w.iter().position(|&wi| {
            u -= wi;
            u <= 0.0
        });
        text.push(pick.unwrap_or(w.len() - 1) as u8);
    }
    Ok(text.split_off(prompt))
}

/// Writes `{"first_step", "losses", "val_loss"}` as JSON.
fn write_losses(path: &Path, first: usize, losses: &[f64], val: Option<f64>) -> Result<()> {
    let body = serde_json::json!({ "first_step": first, "losses": losses, "val_loss": val });
    std::fs::write(path, format!("{body}\n")).map_err(|e| gflow::Error::Environment {
        reason: format!("cannot write {}: {e}", path.display()),
    })
}
