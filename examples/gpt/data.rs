//! Byte-level data and the distributed sampler. Tokens are the file's bytes (vocab 256). Row
//! `i` of step `s` is the window at offset `((s * batch + i) * stride) mod (n - seq - 1)`
//! (gpt_torch.py's rule), so every layout sees the same global batches; each rank reads only
//! the rows of its data-parallel group and the global batch is formed from those slices
//! (`to_global` with `split(0)`: no rank loads the whole batch).

use std::ops::Range;
use std::path::Path;

use gflow::prelude::*;

use super::layout::Plan;

/// A text corpus split into a training part and a held-out validation tail.
pub struct Corpus {
    train: Vec<u8>,
    val: Vec<u8>,
}

impl Corpus {
    /// The bytes of `path`; the last `val_frac` of them (0 for none) held out for validation.
    ///
    /// # Errors
    /// `Environment` for an unreadable file; `InvalidArgument` for a training part not longer
    /// than one window of `seq + 1` bytes or a `val_frac` outside [0, 1).
    pub fn open(path: &Path, val_frac: f64, seq: usize) -> Result<Corpus> {
        let bytes = std::fs::read(path).map_err(|e| gflow::Error::Environment {
            reason: format!("cannot read the corpus {}: {e}", path.display()),
        })?;
        if !(0.0..1.0).contains(&val_frac) {
            return Err(gflow::Error::InvalidArgument {
                op: "--val-frac",
                reason: format!("a fraction in [0, 1) expected, got {val_frac}"),
            });
        }
        let cut = bytes.len() - (bytes.len() as f64 * val_frac) as usize;
        let (train, val) = bytes.split_at(cut);
        if train.len() <= seq + 1 {
            return Err(gflow::Error::InvalidArgument {
                op: "--data",
                reason: format!(
                    "{}: {} training bytes, need more than one window of {} bytes",
                    path.display(),
                    train.len(),
                    seq + 1
                ),
            });
        }
        Ok(Corpus {
            train: train.to_vec(),
            val: val.to_vec(),
        })
    }

    /// The validation bytes (empty when none were held out).
    pub fn val(&self) -> &[u8] {
        &self.val
    }

    /// The training bytes.
    pub fn train(&self) -> &[u8] {
        &self.train
    }
}

/// The sampler: global batches of `batch` rows of `seq` tokens, windows `stride` bytes apart.
#[derive(Clone, Copy, Debug)]
pub struct Sampler {
    /// Rows of a global batch.
    pub batch: usize,
    /// Tokens per row.
    pub seq: usize,
    /// Bytes between the starts of consecutive windows.
    pub stride: usize,
}

impl Sampler {
    /// Inputs and targets (flat, row-major) of `rows` of step `step`'s batch over `data`.
    pub fn rows(&self, data: &[u8], step: usize, rows: Range<usize>) -> (Vec<i64>, Vec<i64>) {
        let span = data.len().saturating_sub(self.seq + 1).max(1);
        let (mut x, mut y) = (vec![], vec![]);
        for i in rows {
            let o = ((step * self.batch + i) * self.stride) % span;
            x.extend(data[o..o + self.seq].iter().map(|&b| i64::from(b)));
            y.extend(data[o + 1..o + self.seq + 1].iter().map(|&b| i64::from(b)));
        }
        (x, y)
    }

    /// Step `step`'s global batch (inputs, targets), each (batch, seq) I64 with the plan's batch
    /// SBP, built from this rank's rows only.
    ///
    /// # Errors
    /// Conversion errors.
    pub fn global(
        &self,
        plan: &Plan,
        rank: usize,
        data: &[u8],
        step: usize,
    ) -> Result<(Tensor, Tensor)> {
        let rows = plan.rows(rank, self.batch);
        let n = rows.len();
        let (x, y) = self.rows(data, step, rows);
        let g = |v: Vec<i64>| {
            Tensor::from_vec(v, &[n, self.seq], Device::Cpu)?
                .to_global(&plan.placement, plan.batch_sbp())
        };
        Ok((g(x)?, g(y)?))
    }
}
