//! The GPT-2-style decoder of `benches/peers/gpt_torch.py`, written as for one device: token and
//! position embeddings, pre-norm blocks (causal multi-head attention, a GELU MLP), a final norm
//! and a head over the vocabulary. Parameter names are the PyTorch state dict's, so its
//! safetensors init loads by name; the layout of every parameter is chosen outside the model
//! (`layout.rs`), never in it.

use gflow::nn::functional::{cross_entropy, scaled_dot_product_attention};
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
    /// default run) and `50m` (50.8M, the benchmark's), as gpt_torch.py defines them.
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
        let hd = d / self.heads;
        let qkv = self.qkv.forward(x)?.reshape(&[b, t, self.heads, 3, hd])?;
        // q, k or v of every head as (batch, heads, seq, head_dim)
        let part = |i: usize| qkv.narrow(3, i, 1)?.squeeze(3)?.transpose(1, 2);
        let y = scaled_dot_product_attention(&part(0)?, &part(1)?, &part(2)?, None, true)?;
        self.proj.forward(&y.transpose(1, 2)?.reshape(&[b, t, d])?)
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
        if c.heads == 0 || !c.d.is_multiple_of(c.heads) {
            return Err(gflow::Error::InvalidArgument {
                op: "Gpt::new",
                reason: format!("d ({}) must be a multiple of heads ({})", c.d, c.heads),
            });
        }
        let (d, std) = (c.d, 0.02);
        let deep = std / ((2 * c.layers) as f64).sqrt();
        let blocks = (0..c.layers)
            .map(|_| {
                Ok(Block {
                    ln1: LayerNorm::new(d)?,
                    attn: Attention {
                        heads: c.heads,
                        qkv: linear(d, 3 * d, true, std)?,
                        proj: linear(d, d, true, deep)?,
                    },
                    ln2: LayerNorm::new(d)?,
                    fc: linear(d, 4 * d, true, std)?,
                    proj: linear(4 * d, d, true, deep)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt {
            tok_emb: Embedding::from_tensor(normal(&[c.vocab, d], std)?)?,
            pos_emb: Embedding::from_tensor(normal(&[c.seq, d], std)?)?,
            blocks,
            ln_f: LayerNorm::new(d)?,
            head: linear(d, c.vocab, false, std)?,
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
