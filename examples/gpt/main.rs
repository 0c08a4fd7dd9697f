//! Trains a GPT-2-style byte-level model on a real text (Ambrose Bierce's *The Devil's
//! Dictionary*) with global tensors, written as for one device: `--layout` alone picks the
//! parallelism (`single`, `dp`, `tp`, `2d`, `fsdp`) on any number of ranks.
//!
//! Run: `cargo run --release --example gpt` (a small model, 4 ranks as threads, about a minute),
//! `./scripts/demo.sh` (4 processes under `gflow-launch`), or e.g.
//! `gflow-launch --nproc-per-node 4 target/release/examples/gpt --layout fsdp --steps 300`.
//! Checkpoints: `--ckpt-dir DIR --ckpt-every K`; `--resume` (or a relaunch by
//! `gflow-launch --max-restarts`) continues from the latest one. The tests compare
//! `--config tiny --init tests/data/gpt_tiny_init.safetensors --val-frac 0 --losses-out F` with
//! PyTorch's losses (tests/gpt.rs).

mod data;
mod layout;
mod model;
mod progress;
mod train;

use std::path::PathBuf;

use clap::Parser;

/// Large buffers in shared memory: collectives between processes of one host copy once.
#[global_allocator]
static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;

/// The command line.
#[derive(Parser, Debug, Clone)]
#[command(about = "Train a GPT on global tensors; --layout picks the parallelism")]
pub struct Args {
    /// Model size: tiny, small or 50m (as benches/peers/gpt_torch.py), m50 or m10 (memory).
    #[arg(long, default_value = "small")]
    config: String,
    /// The parallel layout.
    #[arg(long, value_enum, default_value_t = layout::Layout::Dp)]
    layout: layout::Layout,
    /// The device every rank computes on: cpu, wgpu, cuda or gpu (each rank its own device,
    /// `LOCAL_RANK` modulo the devices it sees).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Ranks as threads when not started by a launcher (under gflow-launch: one rank per process).
    #[arg(long, default_value_t = 4)]
    simulate: usize,
    /// Data-parallel rows of the `2d` placement (default: the largest divisor of the world
    /// size not above its square root).
    #[arg(long)]
    dp: Option<usize>,
    /// Training steps.
    #[arg(long, default_value_t = 150)]
    steps: usize,
    /// Warm-up steps (default max(1, steps / 10)).
    #[arg(long)]
    warmup: Option<usize>,
    /// Peak learning rate (default: the config's).
    #[arg(long)]
    lr: Option<f64>,
    /// Bytes between consecutive windows (default: seq).
    #[arg(long)]
    stride: Option<usize>,
    /// Parameters' dtype: f32 or f64.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// The text to train on.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/devils_dictionary.txt"))]
    data: PathBuf,
    /// The share of the text held out for the validation loss (its tail; 0: none).
    #[arg(long, default_value_t = 0.1)]
    val_frac: f64,
    /// Initial weights (safetensors, gpt_torch.py's names); default a fresh init from --seed.
    #[arg(long)]
    init: Option<PathBuf>,
    /// Seed of the fresh init.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory of the checkpoints (`DIR/step-NNNNNN`).
    #[arg(long)]
    ckpt_dir: Option<PathBuf>,
    /// Save a checkpoint every K steps (0: never).
    #[arg(long, default_value_t = 0)]
    ckpt_every: usize,
    /// Continue from the latest checkpoint in --ckpt-dir (implied when GFLOW_RESTART_COUNT > 0).
    #[arg(long)]
    resume: bool,
    /// The last rank stops with an error after this many steps on a job's first attempt
    /// (`GFLOW_RESTART_COUNT` unset or 0): a lost rank, to show `gflow-launch --max-restarts`
    /// resuming from the latest checkpoint.
    #[arg(long)]
    crash_at: Option<usize>,
    /// Write the losses (JSON) here (rank 0).
    #[arg(long)]
    losses_out: Option<PathBuf>,
    /// Bytes of text to generate at the end (0: none).
    #[arg(long, default_value_t = 200)]
    sample: usize,
    /// No progress output (the summary lines still print).
    #[arg(long)]
    quiet: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = train::main(&args) {
        eprintln!("gpt: {e}");
        std::process::exit(1);
    }
}
