//! `gflow-bench ops`: the transformer operators on the CPU, one JSON line each, in the rows of
//! `benches/peers/torch_ops_bench.py` (its peer: same ops, shapes, `fwd_ms` and `fwd_bwd_ms`):
//! softmax, log_softmax, layer_norm, rms_norm, gelu (tanh), gelu_erf on activations `--act`
//! (default 8,1024,768), scaled dot-product attention on `--attn` (default 8,12,256,64), causal
//! and not, and an `--mm`^3 matmul in f32 and bf16. `fwd_bwd_ms` is the forward, then the
//! backward of `(out * w).sum()` for a fixed random `w`, as the peer times it. `--ops a,b` keeps
//! only the rows of those ops.

use gflow::nn::{self, Module, functional as F};
use gflow::no_grad;
use gflow::prelude::*;

use super::{Args, emit, timed};

/// Sizes of the operator benchmark.
pub struct OpSizes {
    /// Activations (batch, seq, width).
    pub act: Vec<usize>,
    /// Attention (batch, heads, seq, head_dim).
    pub attn: Vec<usize>,
    /// The matmul's m = k = n.
    pub mm: usize,
}

/// Milliseconds of `f`, the median of `runs` after 2 warm-ups.
fn median_ms(runs: usize, f: impl FnMut() -> Result<()>) -> Result<f64> {
    Ok(timed(runs, f)? * 1e3)
}

/// One row: `op` on inputs `xs` (the first one's shape is the row's), fwd and fwd+bwd times.
fn bench(
    a: &Args,
    op: &str,
    xs: &[Tensor],
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<String> {
    let w = no_grad(|| f(xs))?.detach();
    let w = Tensor::randn(w.shape(), Device::Cpu)?;
    let fwd = median_ms(a.runs, || no_grad(|| f(xs)).map(drop))?;
    let fwd_bwd = median_ms(a.runs, || {
        for x in xs {
            x.set_grad(None);
        }
        let out = f(xs)?.mul(&w)?;
        let all: Vec<usize> = (0..out.ndim()).collect();
        out.sum(all, false)?.backward()
    })?;
    Ok(format!(
        "{{\"system\": \"gflow-cpu\", \"op\": \"{op}\", \"shape\": {:?}, \"dtype\": \"f32\", \"fwd_ms\": {fwd:.4}, \"fwd_bwd_ms\": {fwd_bwd:.4}}}",
        xs[0].shape()
    ))
}

/// Runs the operator rows (see the module docs).
pub fn ops(a: &Args, sizes: &OpSizes) -> Result<()> {
    let leaf = |shape: &[usize]| -> Result<Tensor> {
        Ok(Tensor::randn(shape, Device::Cpu)?.set_requires_grad(true))
    };
    let last = sizes.act.len() - 1;
    let d = sizes.act[last];
    let x = leaf(&sizes.act)?;
    let wanted = |op: &str| a.ops.is_empty() || a.ops.iter().any(|o| o == op);
    let mut lines = vec![];
    let mut row = |op: &str, xs: &[Tensor], f: &dyn Fn(&[Tensor]) -> Result<Tensor>| -> Result<()> {
        if wanted(op) {
            lines.push(bench(a, op, xs, f)?);
        }
        Ok(())
    };
    let one = std::slice::from_ref(&x);
    row("softmax", one, &|t| t[0].softmax(last))?;
    row("log_softmax", one, &|t| t[0].log_softmax(last))?;
    row("gelu", one, &|t| t[0].gelu())?;
    row("gelu_erf", one, &|t| t[0].gelu_erf())?;
    let ln = nn::LayerNorm::new(d)?;
    row("layer_norm", one, &|t| ln.forward(&t[0]))?;
    let rms = nn::RMSNorm::new(d)?;
    row("rms_norm", one, &|t| rms.forward(&t[0]))?;
    let qkv = [leaf(&sizes.attn)?, leaf(&sizes.attn)?, leaf(&sizes.attn)?];
    for (op, causal) in [
        ("scaled_dot_product_attention", false),
        ("scaled_dot_product_attention_causal", true),
    ] {
        row(op, &qkv, &|t| {
            F::scaled_dot_product_attention(&t[0], &t[1], &t[2], None, causal)
        })?;
    }
    let n = sizes.mm;
    for dtype in [DType::F32, DType::BF16].into_iter().filter(|_| wanted("matmul")) {
        let m1 = Tensor::randn(&[n, n], Device::Cpu)?.to_dtype(dtype)?;
        let m2 = Tensor::randn(&[n, n], Device::Cpu)?.to_dtype(dtype)?;
        let ms = median_ms(a.runs, || m1.matmul(&m2).map(drop))?;
        let name = if dtype == DType::F32 { "f32" } else { "bf16" };
        lines.push(format!(
            "{{\"system\": \"gflow-cpu\", \"op\": \"matmul\", \"shape\": [{n}, {n}, {n}], \"dtype\": \"{name}\", \"fwd_ms\": {ms:.4}, \"gflops\": {:.2}}}",
            2.0 * (n as f64).powi(3) / (ms / 1e3) / 1e9
        ));
    }
    emit(a, &lines)
}
