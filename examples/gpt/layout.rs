//! The parallel layouts, chosen by `--layout` and nothing else: each names a placement of the
//! job's ranks, an SBP per parameter (by its PyTorch name) and an SBP for the batch. The model
//! and the training loop do not change; gflow's signatures and boxing supply the communication.

use std::ops::Range;

use gflow::prelude::*;

/// How the ranks share the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// Every rank holds everything and computes the whole batch (the reference).
    Single,
    /// Data parallel: parameters broadcast, batch rows `split(0)`.
    Dp,
    /// Megatron tensor parallel: q/k/v and fc column splits, the projections row splits,
    /// vocabulary-parallel embeddings, head and loss; batch broadcast.
    Tp,
    /// Data x tensor parallel on a 2-D placement (rows: data-parallel groups).
    #[value(name = "2d")]
    TwoD,
    /// Fully sharded: every parameter (and its optimizer state) `split(0)`, batch `split(0)`.
    Fsdp,
}

/// A layout on a job of `world` ranks: the placement and the SBPs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The layout.
    pub layout: Layout,
    /// Every rank of the job, 1-D, or data x tensor for `2d`.
    pub placement: Placement,
    /// Data-parallel groups (ranks that hold different batch rows).
    pub dp: usize,
}

impl Plan {
    /// The plan of `layout` on `world` ranks computing on `device` (`cpu`, `wgpu`, `cuda`,
    /// `gpu`: each rank its own device); `2d` uses `dp` data-parallel rows (default: the
    /// largest divisor of `world` not above its square root).
    ///
    /// # Errors
    /// `InvalidArgument` for a `dp` that does not divide `world`; `UnknownDeviceType`.
    pub fn new(layout: Layout, device: &str, world: usize, dp: Option<usize>) -> Result<Plan> {
        let ranks: Vec<usize> = (0..world).collect();
        let (placement, dp) = match layout {
            Layout::TwoD => {
                let dp = dp.unwrap_or_else(|| {
                    (1..=world)
                        .filter(|k| world.is_multiple_of(*k) && k * k <= world)
                        .max()
                        .unwrap_or(1)
                });
                if dp == 0 || !world.is_multiple_of(dp) {
                    return Err(gflow::Error::InvalidArgument {
                        op: "--dp",
                        reason: format!(
                            "the data-parallel size must divide the {world} ranks, got {dp}"
                        ),
                    });
                }
                let rows: Vec<Vec<usize>> =
                    ranks.chunks(world / dp).map(<[usize]>::to_vec).collect();
                (Placement::new(device, rows)?, dp)
            }
            Layout::Dp | Layout::Fsdp => (Placement::new(device, ranks)?, world),
            Layout::Single | Layout::Tp => (Placement::new(device, ranks)?, 1),
        };
        Ok(Plan {
            layout,
            placement,
            dp,
        })
    }

    /// The SBP of the parameter `name` (PyTorch's name) of shape `shape`.
    pub fn param_sbp(&self, name: &str, shape: &[usize]) -> NdSbp {
        let _ = shape;
        match self.layout {
            Layout::Single | Layout::Dp => Sbp::broadcast().into(),
            Layout::Fsdp => Sbp::split(0).into(),
            Layout::Tp => megatron(name).into(),
            Layout::TwoD => [Sbp::broadcast(), megatron(name)].into(),
        }
    }

    /// The SBP of a batch (rows first).
    pub fn batch_sbp(&self) -> NdSbp {
        match self.layout {
            Layout::Single | Layout::Tp => Sbp::broadcast().into(),
            Layout::Dp | Layout::Fsdp => Sbp::split(0).into(),
            Layout::TwoD => [Sbp::split(0), Sbp::broadcast()].into(),
        }
    }

    /// Every axis broadcast (what generation feeds the model: one short row).
    pub fn replicated(&self) -> NdSbp {
        NdSbp::broadcast(self.placement.hierarchy().len())
    }

    /// The batch rows rank `rank` reads out of `batch`: its data-parallel group's share, as
    /// gflow's balanced splitter cuts `split(0)` (the first `batch % dp` groups one row more).
    pub fn rows(&self, rank: usize, batch: usize) -> Range<usize> {
        let group = match self.layout {
            Layout::Single | Layout::Tp => 0,
            Layout::Dp | Layout::Fsdp => rank,
            Layout::TwoD => rank / (self.placement.ranks().len() / self.dp),
        };
        let (q, r) = (batch / self.dp, batch % self.dp);
        let start = group * q + group.min(r);
        start..start + q + usize::from(group < r)
    }
}

/// Megatron's split of one parameter over the tensor-parallel ranks: column-parallel q/k/v and
/// fc (weight (out, in) `split(0)`, bias `split(0)`), row-parallel projections (weight
/// `split(1)`, bias broadcast), vocabulary-parallel embeddings and head (`split(0)`); the norms
/// broadcast.
fn megatron(name: &str) -> Sbp {
    let col = [".attn.qkv.", ".mlp.fc."].iter().any(|k| name.contains(k));
    let vocab = ["tok_emb.", "pos_emb.", "head."]
        .iter()
        .any(|k| name.starts_with(k));
    if col || vocab {
        Sbp::split(0)
    } else if name.ends_with("proj.weight") {
        Sbp::split(1)
    } else {
        Sbp::broadcast()
    }
}
