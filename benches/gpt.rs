//! `gflow-bench gpt`: tokens/s of the GPT of `examples/gpt` (forward, backward, clipping and an
//! AdamW step) in a layout, and its model FLOPs utilization: 6 x parameters x tokens/s over
//! the f32 matmul peak of this machine (a 2048^3 matmul, as `gflow-bench matmul` measures, on
//! all cores; under `gflow-launch`, rank 0's share times the ranks). `--device wgpu|cuda`
//! trains on the GPU (the peer: `gpt_torch.py --device cuda`), the peak then that GPU's. The peer is `benches/peers/gpt_torch.py` (its JSON lines have the same fields).
//!
//! Run: `gflow-bench gpt [--config small] [--layout dp] [--ranks 4] [--runs 5]` (ranks as
//! threads), or `gflow-launch --nproc-per-node 4 target/release/gflow-bench gpt --layout fsdp`.
//! The line also has `rank_peak_rss_mb` (each rank's peak resident set; per process under
//! `gflow-launch`), `peak_rss_mb` (the largest), `rank_peer_pages_mb` (the part of each that is
//! pages of peers' shared arenas, read in collectives) and `shm_arena` (whether large buffers
//! were in the shared arena; `GFLOW_PORTABLE=1` turns it off): `--config m50 --layout dp|fsdp`
//! compares the memory of data parallelism and fully sharded parameters per rank.

use std::time::Instant;

use clap::{Parser, ValueEnum};
use gflow::nn::utils::clip_grad_norm;
use gflow::prelude::*;

// The example's modules, shared rather than copied; the benchmark uses part of them.
#[allow(dead_code)]
#[path = "../examples/gpt/data.rs"]
mod data;
#[allow(dead_code)]
#[path = "../examples/gpt/layout.rs"]
mod layout;
#[allow(dead_code)]
#[path = "../examples/gpt/model.rs"]
mod model;

/// `gflow-bench gpt` flags.
#[derive(Parser, Debug)]
#[command(name = "gflow-bench gpt")]
struct Flags {
    /// tiny, small or 50m.
    #[arg(long, default_value = "small")]
    config: String,
    /// The parallel layout.
    #[arg(long, value_enum, default_value_t = layout::Layout::Dp)]
    layout: layout::Layout,
    /// Ranks as threads when not under a launcher.
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// The device every rank computes on: cpu, wgpu, cuda or gpu.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Timed steps (after two warm-up steps).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also print where rank 0's step time goes (gflow's profiler: one JSON line per scope).
    #[arg(long)]
    profile: bool,
    /// With `--profile` on a GPU: each kernel waits for the device, so that its row holds its
    /// device time rather than its launch's (the step runs slower).
    #[arg(long)]
    profile_sync: bool,
}

/// Runs the benchmark with the arguments after `gpt`, printing one JSON line (rank 0).
///
/// # Errors
/// Bad flags (`InvalidArgument`), training and communication errors.
pub fn main(args: impl Iterator<Item = String>) -> Result<()> {
    let f = match Flags::try_parse_from(std::iter::once("gflow-bench gpt".to_string()).chain(args))
    {
        Ok(f) => f,
        Err(e) if !e.use_stderr() => e.exit(), // --help: printed, exit 0
        Err(e) => {
            return Err(gflow::Error::InvalidArgument {
                op: "gflow-bench gpt",
                reason: e.to_string(),
            });
        }
    };
    let cfg = model::Config::named(&f.config).ok_or_else(|| gflow::Error::InvalidArgument {
        op: "--config",
        reason: format!("tiny, small, 50m, m50 or m10 expected, got {:?}", f.config),
    })?;
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/devils_dictionary.txt"
    ))
    .map_err(|e| gflow::Error::Environment {
        reason: format!("cannot read the corpus: {e}"),
    })?;
    let lines = gflow::run(f.ranks, |env| {
        let plan = layout::Plan::new(f.layout, &f.device, env.world_size(), None)?;
        gflow::manual_seed(0);
        let p = &plan.placement;
        let sbp = |name: &str, shape: &[usize]| plan.param_sbp(name, shape);
        let gpt = model::Gpt::placed(
            &cfg,
            &model::Placer {
                placement: p,
                sbp: &sbp,
            },
        )?;
        let params = gpt.parameters();
        let count: usize = params.iter().map(Tensor::numel).sum();
        let mut opt = optim::AdamW::new(params.clone(), cfg.lr)
            .betas((0.9, 0.95))
            .eps(1e-8)
            .weight_decay(0.1);
        let sampler = data::Sampler {
            batch: cfg.batch,
            seq: cfg.seq,
            stride: cfg.seq,
        };
        let mut step = 0;
        let on_device = f.device != "cpu";
        if f.profile {
            gflow::profile::enable(true);
            gflow::profile::enable_sync(f.profile_sync);
            gflow::profile::reset();
        }
        let t = super::time_collective(&env, f.runs, || {
            if step == 2 {
                // the profile covers the timed steps, not the two warm-ups (first launches
                // load the GPU libraries' kernels)
                gflow::profile::reset();
            }
            let (x, y) = sampler.global(&plan, env.rank(), &text, step)?;
            step += 1;
            let loss = gpt.loss(&x, &y)?;
            loss.backward()?;
            clip_grad_norm(&params, 1.0)?;
            opt.step()?;
            opt.zero_grad();
            if on_device {
                // the step's kernels are queued in order: reading the loss after them waits
                // for all of them (the peer's `loss.item()` and `torch.cuda.synchronize()`)
                loss.to_local()?.to_vec_cast::<f32>()?;
            }
            Ok(())
        })?;
        let rows = gflow::profile::take();
        let memory = peak_rss_fields(&plan.placement)?;
        if env.rank() != 0 {
            return Ok(None);
        }
        if f.profile {
            profile_lines(&rows, step - 2);
        }
        // Measured after the run, by rank 0 alone (any local tensor made before the job starts
        // would make this process a world of one).
        // Under gflow-launch each process is pinned to its share of the cores (or has its own
        // GPU): the job's peak is then rank 0's times the ranks.
        let peak = matmul_peak(&f.device)?
            * if gflow::launched() {
                env.world_size() as f64
            } else {
                1.0
            };
        let system = if gflow::launched() {
            super::system_name()
        } else {
            "gflow-inproc".to_string()
        };
        let tokens_per_s = (cfg.batch * cfg.seq) as f64 / t;
        let mfu = 6.0 * count as f64 * tokens_per_s / (peak * 1e9);
        Ok(Some(format!(
            "{{\"system\": \"{system}\", \"op\": \"gpt_train\", \"config\": \"{}\", \"device\": \"{}\", \"dtype\": \"f32\", \"mode\": \"{}\", \"ranks\": {}, \"batch\": {}, \"seq\": {}, \"params\": {}, \"median_step_s\": {t:.6}, \"tokens_per_s\": {tokens_per_s:.1}, \"peak_gflops\": {peak:.1}, \"mfu\": {mfu:.4}, {memory}, \"shm_arena\": {}}}",
            f.config,
            f.device,
            f.layout
                .to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default(),
            env.world_size(),
            cfg.batch,
            cfg.seq,
            count,
            gflow_transport::arena::installed(),
        )))
    })?;
    lines
        .into_iter()
        .filter_map(|(_, l)| l)
        .for_each(|l| println!("{l}"));
    Ok(())
}

/// Prints the profiler's rows per step, each with its share of the profiled time and its
/// category (matmul, other kernels, dispatch, autograd, boxing, optimizer).
fn profile_lines(rows: &[gflow::profile::Row], steps: usize) {
    let total: f64 = rows.iter().map(|r| r.time.as_secs_f64()).sum();
    for r in rows {
        let category = match r.scope.split_once(' ') {
            Some(("kernel", "matmul" | "linear")) => "matmul",
            Some(("kernel", _)) => "other kernels",
            Some(("dispatch", _)) => "dispatch",
            Some(("backward", _)) => "autograd",
            _ => r.scope.as_str(),
        };
        let s = r.time.as_secs_f64();
        println!(
            "{{\"system\": \"gflow\", \"op\": \"gpt_profile\", \"scope\": \"{}\", \"category\": \"{category}\", \"calls_per_step\": {:.1}, \"ms_per_step\": {:.3}, \"share\": {:.4}}}",
            r.scope,
            r.calls as f64 / steps.max(1) as f64,
            s * 1e3 / steps.max(1) as f64,
            s / total.max(f64::MIN_POSITIVE),
        );
    }
}

/// GFLOP/s of a 2048^3 f32 matmul on this process's cores, or on its GPU for `--device wgpu`
/// or `cuda` (the median of 3 after a warm-up; on a GPU each of 3 rounds times 8 products and
/// waits for them by reading a sum of the last; a software adapter such as lavapipe, slower
/// than 10 GFLOP/s on a 256^3 product, is measured at 512^3).
fn matmul_peak(device: &str) -> Result<f64> {
    let (dev, per_round) = match device {
        "wgpu" => (Device::Wgpu, 8),
        "cuda" => (Device::Cuda, 8),
        _ => (Device::Cpu, 1),
    };
    let mut n = 2048;
    if dev != Device::Cpu {
        let small = Tensor::randn(&[256, 256], dev)?;
        small
            .matmul(&small)?
            .sum([0, 1], false)?
            .to_vec_cast::<f32>()?;
        let s = Instant::now();
        small
            .matmul(&small)?
            .sum([0, 1], false)?
            .to_vec_cast::<f32>()?;
        if 2.0 * 256f64.powi(3) / s.elapsed().as_secs_f64() < 10e9 {
            n = 512;
        }
    }
    let x = Tensor::randn(&[n, n], dev)?;
    let mut t = vec![];
    for _ in 0..4 {
        let s = Instant::now();
        let mut y = x.matmul(&x)?;
        for _ in 1..per_round {
            y = x.matmul(&x)?;
        }
        if dev != Device::Cpu {
            y.sum([0, 1], false)?.to_vec_cast::<f32>()?;
        }
        std::hint::black_box(y);
        t.push(s.elapsed().as_secs_f64() / per_round as f64);
    }
    let med = super::median(t[1..].to_vec());
    Ok(2.0 * (n as f64).powi(3) / med / 1e9)
}

/// The `peak_rss_mb`, `rank_peak_rss_mb` and `rank_peer_pages_mb` fields: the peak resident
/// set (`VmHWM`, MiB) of each rank's process after the timed steps, their largest, and how much
/// of each rank's resident set are pages of peers' shared arenas (mapped read-only to read their
/// buffers in collectives: shared, no memory of the rank's own). Under `gflow-launch` a rank's
/// peak is its own parameters, gradients, optimizer state, activations and transient gathered
/// weights, plus those peers' pages; with ranks as threads every rank reports the one process.
/// `null` where `/proc/self/status` does not exist (not Linux). Collective: every rank of
/// `placement` calls it.
fn peak_rss_fields(placement: &Placement) -> Result<String> {
    let kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .unwrap_or(f64::NAN);
    let mine = [kb / 1024.0, peer_pages_kb() / 1024.0];
    let all = Tensor::from_vec(mine.to_vec(), &[1, 2], Device::Cpu)?
        .to_global(placement, Sbp::split(0))?
        .to_vec_cast::<f64>()?;
    if all.iter().any(|v| v.is_nan()) {
        return Ok(
            "\"peak_rss_mb\": null, \"rank_peak_rss_mb\": null, \"rank_peer_pages_mb\": null"
                .into(),
        );
    }
    let list = |k: usize| {
        let v: Vec<String> = all
            .iter()
            .skip(k)
            .step_by(2)
            .map(|v| format!("{v:.1}"))
            .collect();
        v.join(", ")
    };
    let peak = all.iter().step_by(2).copied().fold(0.0, f64::max);
    Ok(format!(
        "\"peak_rss_mb\": {peak:.1}, \"rank_peak_rss_mb\": [{}], \"rank_peer_pages_mb\": [{}]",
        list(0),
        list(1)
    ))
}

/// Resident kB of this process's read-only mappings of peers' shared arenas (`/proc/self/smaps`
/// entries of a `gflow-arena` memfd not mapped writable); 0 without any, NaN without smaps.
fn peer_pages_kb() -> f64 {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return f64::NAN;
    };
    let mut peer = false;
    let mut kb = 0.0;
    for line in smaps.lines() {
        // A mapping's header: "start-end perms offset dev inode [path]".
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 5 && fields[0].contains('-') && !fields[0].ends_with(':') {
            peer = line.contains("gflow-arena") && fields[1].starts_with("r-");
        } else if peer && let Some(v) = line.strip_prefix("Rss:") {
            kb += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .unwrap_or(0.0);
        }
    }
    kb
}
