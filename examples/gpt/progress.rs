//! Rank 0's progress: a bar (loss, tokens/s, step time) in a terminal; under `gflow-launch` or
//! another pipe, a plain line every twentieth of the run (the launcher prefixes it with the rank).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Progress of a run of steps `first..total`.
pub enum Progress {
    /// Nothing shown (other ranks, `--quiet`).
    Off,
    /// A bar on the terminal.
    Bar(ProgressBar),
    /// Plain lines on stdout, every `every` steps.
    Lines { total: usize, every: usize },
}

impl Progress {
    /// Progress for steps `first..total`, shown when `show`.
    pub fn new(show: bool, first: usize, total: usize) -> Progress {
        if !show {
            return Progress::Off;
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total as u64).with_position(first as u64);
            if let Ok(style) =
                ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} (eta {eta})")
            {
                bar.set_style(style);
            }
            return Progress::Bar(bar);
        }
        Progress::Lines {
            total,
            every: (total / 20).max(1),
        }
    }

    /// Reports step `step` (0-based) done with `loss`, `tokens` tokens in `took`.
    pub fn step(&self, step: usize, loss: f64, tokens: usize, took: Duration) {
        let secs = took.as_secs_f64().max(1e-9);
        let msg = format!(
            "loss {loss:.4} | {:.0} tok/s | {:.1} ms/step",
            tokens as f64 / secs,
            secs * 1e3
        );
        match self {
            Progress::Off => {}
            Progress::Bar(bar) => {
                bar.set_message(msg);
                bar.inc(1);
            }
            Progress::Lines { total, every } => {
                if (step + 1).is_multiple_of(*every) || step + 1 == *total {
                    println!("step {}/{total} | {msg}", step + 1);
                }
            }
        }
    }

    /// Ends the bar.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}
