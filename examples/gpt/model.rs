//! The GPT-2-style decoder of `benches/peers/gpt_torch.py`, written as for one device: token and
//! position embeddings, pre-norm blocks (causal multi-head attention, a GELU MLP), a final norm
//! and a head over the vocabulary. Parameter names are the PyTorch state dict's, so its
//! safetensors init loads by name; the layout of every parameter is chosen outside the model
//! (`layout.rs`), never in it.

use gflow::nn::functional::{cross_entropy, qkv_packed_attention};
use gflow::nn::{Embedding, LayerNorm, Linear};
use gflow::prelude::*;

/// The model's sizes and the training batch, as gpt_torch.py's `CONFIGS`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Vocabulary size (256: bytes).
    pub vocab: usize,
    /// Width of the residual stream.
    pub d: usize,
    /// Number of blocks.
    pub layers: usize,
    /// Attention heads per block (`d` must be a multiple).
    pub heads: usize,
    /// Context length (tokens per batch row).
    pub seq: usize,
    /// Global batch rows per step.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
}

impl Config {
    /// The named configurations: `tiny` (0.13M parameters, the tests'), `small` (3.3M, the
    /// default run) and `50m` (50.8M, the benchmark's), as gpt_torch.py defines them; and two
    /// for measuring memory, where a small batch (4 x 64 tokens) keeps the activations well
    /// below the parameters and their optimizer state: `m50` (`50m`'s blocks, 50.7M) and
    /// `m10` (10.7M, the CI test's).
    pub fn named(name: &str) -> Option<Config> {
        let c = |d, layers, heads, seq, batch, lr| Config {
            vocab: 256,
            d,
            layers,
            heads,
            seq,
            batch,
            lr,
        };
        match name {
            "tiny" => Some(c(64, 2, 4, 32, 8, 1e-3)),
            "small" => Some(c(256, 4, 8, 128, 16, 6e-4)),
            "50m" => Some(c(512, 16, 8, 256, 8, 3e-4)),
            "m50" => Some(c(512, 16, 8, 64, 4, 3e-4)),
            "m10" => Some(c(384, 6, 6, 64, 4, 3e-4)),
            _ => None,
        }
    }

    /// The number of parameters.
    pub fn params(&self) -> usize {
        let (d, v) = (self.d, self.vocab);
        let block =
            2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d);
        v * d + self.seq * d + self.layers * block + 2 * d + v * d
    }
}

/// N(0, std) values of `shape` from this rank's random stream (local: `Module::to_global`
/// then takes rank 0's, so the init does not depend on the layout or the number of ranks).
fn normal(shape: &[usize], std: f64) -> Result<Tensor> {
    Tensor::randn(shape, Device::Cpu)?.mul_scalar(std)
}

/// A linear layer initialised as gpt_torch.py's `fresh_init`: weight N(0, std), bias zeros.
fn linear(inp: usize, out: usize, bias: bool, std: f64) -> Result<Linear> {
    let b = bias
        .then(|| Tensor::zeros(&[out], Device::Cpu))
        .transpose()?;
    Linear::from_tensors(normal(&[out, inp], std)?, b)
}

/// Where the parameters of a model being built go: the placement and each parameter's SBP by
/// name (the layout's, chosen outside the model). Each module is converted as soon as it is
/// made, so that no rank ever holds the whole model in a sharded layout (FSDP's point: a rank
/// of `fsdp` holds a quarter of the parameters on 4 ranks, also while building them).
pub struct Placer<'a> {
    /// The ranks of the job.
    pub placement: &'a Placement,
    /// The SBP of the parameter of a name (PyTorch's) and shape.
    pub sbp: &'a dyn Fn(&str, &[usize]) -> NdSbp,
}

/// `m` (a fresh local module whose parameters are named under `prefix.`) in `at`'s layout:
/// rank 0's values broadcast, then each parameter boxed to its SBP; `m` itself without `at`.
fn put<M: Module>(at: Option<&Placer<'_>>, prefix: &str, m: M) -> Result<M> {
    let Some(at) = at else { return Ok(m) };
    let p = at.placement;
    m.to_global(p, NdSbp::broadcast(p.hierarchy().len()))?
        .to_global_with(p, |name, shape| {
            (at.sbp)(&format!("{prefix}.{name}"), shape)
        })
}

/// Names `m`'s parameters under `prefix.`.
fn under(prefix: &str, m: &impl Module) -> Vec<(String, Tensor)> {
    m.named_parameters()
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

/// Causal multi-head self-attention with one fused q, k, v projection. Its rows are ordered
/// (head, q|k|v, head_dim), so that a split of the projection over heads (tensor parallel)
/// leaves each head's q, k and v on one rank and attention runs with no communication;
/// PyTorch's (q|k|v, head, head_dim) order is converted on loading ([`from_torch_order`]).
struct Attention {
    heads: usize,
    qkv: Linear,
    proj: Linear,
}

impl Attention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        // one projection: its (batch, seq, 3d) output is (batch, seq, heads, 3, head_dim) as
        // it lies, which attention reads in place, and its (batch, seq, heads, head_dim)
        // output is the proj's (batch, seq, d) input as it lies
        let qkv = self
            .qkv
            .forward(x)?
            .reshape(&[b, t, self.heads, 3, d / self.heads])?;
        let y = qkv_packed_attention(&qkv, true)?;
        self.proj.forward(&y.reshape(&[b, t, d])?)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        [under("qkv", &self.qkv), under("proj", &self.proj)].concat()
    }
}

/// One pre-norm block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))` with a tanh-GELU MLP.
struct Block {
    ln1: LayerNorm,
    attn: Attention,
    ln2: LayerNorm,
    fc: Linear,
    proj: Linear,
}

impl Block {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.add(&self.attn.forward(&self.ln1.forward(x)?)?)?;
        let h = self.fc.forward(&self.ln2.forward(&x)?)?.gelu()?;
        x.add(&self.proj.forward(&h)?)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let attn = self
            .attn
            .named_parameters()
            .into_iter()
            .map(|(n, t)| (format!("attn.{n}"), t));
        [
            under("ln1", &self.ln1),
            attn.collect(),
            under("ln2", &self.ln2),
            under("mlp.fc", &self.fc),
            under("mlp.proj", &self.proj),
        ]
        .concat()
    }
}

/// The decoder. `forward` maps I64 tokens (batch, seq) to logits (batch, seq, vocab).
pub struct Gpt {
    tok_emb: Embedding,
    pos_emb: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Linear,
}

impl Gpt {
    /// A model initialised as gpt_torch.py's `fresh_init` (Linear weights and embeddings
    /// N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2 layers)), biases zeros, norms
    /// ones and zeros), local f32 tensors from this rank's random stream.
    ///
    /// # Errors
    /// `InvalidArgument` when `d` is not a multiple of `heads`; tensor creation errors.
    pub fn new(c: &Config) -> Result<Gpt> {
        Gpt::build(c, None)
    }

    /// [`Gpt::new`]'s model (the same values) in `at`'s layout, each module converted as soon
    /// as it is made: the most a rank holds at once is its share of the model and the module
    /// being converted (whole, in its local and replicated copies).
    ///
    /// # Errors
    /// As [`Gpt::new`]; errors of the conversions.
    pub fn placed(c: &Config, at: &Placer<'_>) -> Result<Gpt> {
        Gpt::build(c, Some(at))
    }

    fn build(c: &Config, at: Option<&Placer<'_>>) -> Result<Gpt> {
        if c.heads == 0 || !c.d.is_multiple_of(c.heads) {
            return Err(gflow::Error::InvalidArgument {
                op: "Gpt::new",
                reason: format!("d ({}) must be a multiple of heads ({})", c.d, c.heads),
            });
        }
        let (d, std) = (c.d, 0.02);
        let deep = std / ((2 * c.layers) as f64).sqrt();
        let blocks = (0..c.layers)
            .map(|i| {
                let name = |n: &str| format!("blocks.{i}.{n}");
                Ok(Block {
                    ln1: put(at, &name("ln1"), LayerNorm::new(d)?)?,
                    attn: Attention {
                        heads: c.heads,
                        qkv: put(at, &name("attn.qkv"), linear(d, 3 * d, true, std)?)?,
                        proj: put(at, &name("attn.proj"), linear(d, d, true, deep)?)?,
                    },
                    ln2: put(at, &name("ln2"), LayerNorm::new(d)?)?,
                    fc: put(at, &name("mlp.fc"), linear(d, 4 * d, true, std)?)?,
                    proj: put(at, &name("mlp.proj"), linear(4 * d, d, true, deep)?)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let embedding =
            |rows, name| put(at, name, Embedding::from_tensor(normal(&[rows, d], std)?)?);
        Ok(Gpt {
            tok_emb: embedding(c.vocab, "tok_emb")?,
            pos_emb: embedding(c.seq, "pos_emb")?,
            blocks,
            ln_f: put(at, "ln_f", LayerNorm::new(d)?)?,
            head: put(at, "head", linear(d, c.vocab, false, std)?)?,
        })
    }

    /// The mean cross entropy of the next-token predictions: `targets` (batch, seq) are the
    /// bytes following `tokens`.
    ///
    /// # Errors
    /// Operator errors.
    pub fn loss(&self, tokens: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let logits = self.forward(tokens)?;
        let (n, v) = (tokens.shape()[0] * tokens.shape()[1], logits.shape()[2]);
        cross_entropy(&logits.reshape(&[n, v])?, &targets.reshape(&[n])?)
    }
}

impl Module for Gpt {
    fn forward(&self, tokens: &Tensor) -> Result<Tensor> {
        let t = tokens.shape()[1];
        // Positions 0..t as indices, broadcast over the tokens' placement (weight[:t] in PyTorch).
        let pos = match tokens.placement() {
            Some(p) => {
                Tensor::arange_dtype(t, DType::I64, (p, NdSbp::broadcast(p.hierarchy().len())))?
            }
            None => Tensor::arange_dtype(t, DType::I64, Device::Cpu)?,
        };
        let mut x = self
            .tok_emb
            .forward(tokens)?
            .add(&self.pos_emb.forward(&pos)?)?;
        for blk in &self.blocks {
            x = blk.forward(&x)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }

    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let blocks = self.blocks.iter().enumerate().flat_map(|(i, b)| {
            b.named_parameters()
                .into_iter()
                .map(move |(n, t)| (format!("blocks.{i}.{n}"), t))
        });
        [
            under("tok_emb", &self.tok_emb),
            under("pos_emb", &self.pos_emb),
            blocks.collect(),
            under("ln_f", &self.ln_f),
            under("head", &self.head),
        ]
        .concat()
    }
}

/// A parameter of PyTorch's model (gpt_torch.py, whose names these are) in this model's row
/// order: the fused projection `*.attn.qkv.*` goes from rows (q|k|v, head, head_dim) to (head,
/// q|k|v, head_dim) (see [`Attention`]); every other parameter is returned as it is.
///
/// # Errors
/// Errors of the row gather.
pub fn from_torch_order(name: &str, t: &Tensor, cfg: &Config) -> Result<Tensor> {
    if !name.contains(".attn.qkv.") {
        return Ok(t.clone());
    }
    let (d, h) = (cfg.d, cfg.heads);
    let hd = d / h;
    let rows: Vec<i64> = (0..h)
        .flat_map(|head| {
            (0..3).flat_map(move |j| (0..hd).map(move |e| (j * d + head * hd + e) as i64))
        })
        .collect();
    t.index_select(0, &Tensor::from_vec(rows, &[3 * d], Device::Cpu)?)
}
