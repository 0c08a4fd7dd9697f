//! The round-2 operators and dtypes against PyTorch: every case of `tests/data/torch_ops.json`
//! (recorded by `benches/peers/torch_ops_reference.py`, schema in `tests/data/README.md`) runs
//! locally and as global tensors on a 2x2 placement of 4 simulated ranks, under two input
//! layouts; outputs and the gradients of `sum((out * w).sum())` must equal PyTorch's.
//! `TORCH_OPS_CASE=substring` runs only the cases whose name contains it.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;
use gflow::{Error, Target};
use serde_json::Value;

/// A tensor as the JSON stores it: shape, dtype name, values as f64 (bools as 0/1).
#[derive(Clone, Debug, PartialEq)]
struct Data {
    shape: Vec<usize>,
    dtype: String,
    data: Vec<f64>,
}

fn data(v: &Value) -> Data {
    let shape = v["shape"].as_array().unwrap();
    let vals = v["data"].as_array().unwrap();
    Data {
        shape: shape.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
        dtype: v["dtype"].as_str().unwrap().to_string(),
        data: vals
            .iter()
            .map(|x| match x {
                Value::Bool(b) => f64::from(u8::from(*b)),
                _ => x.as_f64().unwrap(),
            })
            .collect(),
    }
}

fn dtype_of(name: &str) -> DType {
    match name {
        "f64" => DType::F64,
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "i64" => DType::I64,
        "i32" => DType::I32,
        "bool" => DType::Bool,
        _ => panic!("unknown dtype {name}"),
    }
}

fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::Bool => "bool",
        #[allow(unreachable_patterns)]
        other => panic!("no name for {other:?}"),
    }
}

/// Where a case runs: locally, or on the 2x2 placement with each input laid out by `layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Local,
    /// `(split(0), split(ndim - 1))`: both axes split (the first dim and the last).
    SplitFirstLast,
    /// `(broadcast, split(0))`.
    BroadcastSplit,
}

fn target(layout: Layout, p: Option<&Placement>, ndim: usize) -> Target {
    let (b, s) = (Sbp::broadcast(), Sbp::split);
    let nd: NdSbp = match (layout, ndim) {
        (Layout::Local, _) => return Target::Local(Device::Cpu),
        (_, 0) => [b, b].into(),
        (Layout::SplitFirstLast, 1) => [s(0), b].into(),
        (Layout::SplitFirstLast, n) => [s(0), s(n - 1)].into(),
        (Layout::BroadcastSplit, _) => [b, s(0)].into(),
    };
    Target::Global(p.expect("a global layout has a placement").clone(), nd)
}

/// The tensor `d` on `t` (16-bit values are exact in f32, so they are made there and cast).
fn make(d: &Data, t: Target) -> Result<Tensor> {
    let v = &d.data;
    match d.dtype.as_str() {
        "f64" => Tensor::from_vec(v.clone(), &d.shape, t),
        "f32" => Tensor::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), &d.shape, t),
        "f16" | "bf16" => {
            let x = Tensor::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<_>>(), &d.shape, t)?;
            x.to_dtype(dtype_of(&d.dtype))
        }
        "i64" => Tensor::from_vec(v.iter().map(|&x| x as i64).collect::<Vec<_>>(), &d.shape, t),
        "i32" => Tensor::from_vec(v.iter().map(|&x| x as i32).collect::<Vec<_>>(), &d.shape, t),
        "bool" => Tensor::from_vec(v.iter().map(|&x| x != 0.0).collect::<Vec<_>>(), &d.shape, t),
        other => panic!("unknown dtype {other}"),
    }
}

/// The whole logical value of `t` as [`Data`].
fn read(t: &Tensor) -> Result<Data> {
    let data = match t.dtype() {
        DType::F64 => t.to_vec_cast::<f64>()?,
        DType::F32 => t.to_vec_cast::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F16 | DType::BF16 => t
            .to_dtype(DType::F32)?
            .to_vec_cast::<f32>()?
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::I64 => t
            .to_vec_cast::<i64>()?
            .into_iter()
            .map(|x| x as f64)
            .collect(),
        DType::I32 => t.to_vec_cast::<i32>()?.into_iter().map(f64::from).collect(),
        DType::Bool => t
            .to_vec_cast::<bool>()?
            .into_iter()
            .map(|b| f64::from(u8::from(b)))
            .collect(),
        other => panic!("no reader for dtype {other:?}"),
    };
    Ok(Data {
        shape: t.shape().to_vec(),
        dtype: dtype_name(t.dtype()).to_string(),
        data,
    })
}

fn arg_usize(args: &Value, k: &str) -> usize {
    args[k].as_u64().unwrap_or_else(|| panic!("arg {k}")) as usize
}

fn arg_f64(args: &Value, k: &str) -> f64 {
    args[k].as_f64().unwrap_or_else(|| panic!("arg {k}"))
}

fn arg_bool(args: &Value, k: &str) -> bool {
    args[k].as_bool().unwrap_or_else(|| panic!("arg {k}"))
}

fn arg_dims(args: &Value) -> Vec<usize> {
    let d = args["dims"].as_array().unwrap();
    d.iter().map(|x| x.as_u64().unwrap() as usize).collect()
}

/// Sets the values of parameter `p` (made by its module at `init`, e.g. ones) to `want` with
/// one SGD step of learning rate 1 on the gradient `init - want`: exact for the stored values
/// (multiples of 1/16 near `init`), and it needs nothing beyond the public API.
fn set_param(
    p: &Tensor,
    init: f64,
    want: &Data,
    layout: Layout,
    pl: Option<&Placement>,
) -> Result<()> {
    let g = Data {
        data: want.data.iter().map(|w| init - w).collect(),
        ..want.clone()
    };
    let g = make(&g, target(layout, pl, g.shape.len()))?;
    let g = match p.sbp() {
        Some(sbp) => g.to_global(p.placement().expect("global"), sbp.clone())?,
        None => g,
    };
    p.set_grad(Some(g));
    let mut opt = optim::Sgd::new(vec![p.clone()], 1.0);
    opt.step()?;
    p.set_grad(None);
    Ok(())
}

/// The module's parameter called `name`.
fn param(m: &impl Module, name: &str) -> Tensor {
    m.named_parameters()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no parameter {name}"))
        .1
}

/// A module on the layout: global modules take `(broadcast, broadcast)` parameters.
fn place<M: Module>(m: M, layout: Layout, pl: Option<&Placement>) -> Result<M> {
    match layout {
        Layout::Local => Ok(m),
        _ => m.to_global(pl.expect("global"), [Sbp::broadcast(), Sbp::broadcast()]),
    }
}

/// Applies the case's operator: the outputs, and per input the tensor whose `.grad()` is that
/// input's gradient (the input itself, or a module's parameter).
fn apply(
    op: &str,
    a: &Value,
    xs: &[Tensor],
    ins: &[Data],
    layout: Layout,
    pl: Option<&Placement>,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let one = |t: Tensor| -> Result<(Vec<Tensor>, Vec<Tensor>)> { Ok((vec![t], xs.to_vec())) };
    let x = &xs[0];
    let dims = || arg_dims(a);
    match op {
        "eq" => one(x.eq(&xs[1])?),
        "ne" => one(x.ne(&xs[1])?),
        "lt" => one(x.lt(&xs[1])?),
        "le" => one(x.le(&xs[1])?),
        "gt" => one(x.gt(&xs[1])?),
        "ge" => one(x.ge(&xs[1])?),
        "add" => one(x.add(&xs[1])?),
        "matmul" => one(x.matmul(&xs[1])?),
        "where_cond" => one(x.where_cond(&xs[1], &xs[2])?),
        "masked_fill" => one(x.masked_fill(&xs[1], arg_f64(a, "value"))?),
        "tril" => one(x.tril(a["k"].as_i64().unwrap())?),
        "triu" => one(x.triu(a["k"].as_i64().unwrap())?),
        "abs" => one(x.abs()?),
        "rsqrt" => one(x.rsqrt()?),
        "sin" => one(x.sin()?),
        "cos" => one(x.cos()?),
        "silu" => one(x.silu()?),
        "erf" => one(x.erf()?),
        "gelu" => one(x.gelu()?),
        "gelu_erf" => one(x.gelu_erf()?),
        "sign" => one(x.sign()?),
        "log1p" => one(x.log1p()?),
        "expm1" => one(x.expm1()?),
        "sort" => {
            let (v, i) = x.sort(arg_usize(a, "dim"), arg_bool(a, "descending"))?;
            Ok((vec![v, i], xs.to_vec()))
        }
        "argsort" => one(x.argsort(arg_usize(a, "dim"), arg_bool(a, "descending"))?),
        "topk" => {
            let (v, i) = x.topk(
                arg_usize(a, "k"),
                arg_usize(a, "dim"),
                arg_bool(a, "largest"),
            )?;
            Ok((vec![v, i], xs.to_vec()))
        }
        "pow" => one(x.pow(arg_f64(a, "exponent"))?),
        "clamp" => one(x.clamp(a["min"].as_f64(), a["max"].as_f64())?),
        "maximum" => one(x.maximum(&xs[1])?),
        "minimum" => one(x.minimum(&xs[1])?),
        "fmod" => one(x.fmod(&xs[1])?),
        "remainder" => one(x.remainder(&xs[1])?),
        "floor_divide" => one(x.floor_divide(&xs[1])?),
        "max" => one(x.max(dims(), arg_bool(a, "keepdim"))?),
        "min" => one(x.min(dims(), arg_bool(a, "keepdim"))?),
        "sum" => one(x.sum(dims(), arg_bool(a, "keepdim"))?),
        "logsumexp" => one(x.logsumexp(dims(), arg_bool(a, "keepdim"))?),
        "argmax" => one(x.argmax(arg_usize(a, "dim"), arg_bool(a, "keepdim"))?),
        "argmin" => one(x.argmin(arg_usize(a, "dim"), arg_bool(a, "keepdim"))?),
        "softmax" => one(x.softmax(arg_usize(a, "dim"))?),
        "log_softmax" => one(x.log_softmax(arg_usize(a, "dim"))?),
        "permute" => one(x.permute(&dims())?),
        "squeeze" => one(x.squeeze(arg_usize(a, "dim"))?),
        "unsqueeze" => one(x.unsqueeze(arg_usize(a, "dim"))?),
        "flatten" => one(x.flatten(arg_usize(a, "start"), arg_usize(a, "end"))?),
        "stack" => one(Tensor::stack(xs, arg_usize(a, "dim"))?),
        "split" => Ok((
            x.split(arg_usize(a, "size"), arg_usize(a, "dim"))?,
            xs.to_vec(),
        )),
        "chunk" => Ok((
            x.chunk(arg_usize(a, "n"), arg_usize(a, "dim"))?,
            xs.to_vec(),
        )),
        "index_select" => one(x.index_select(arg_usize(a, "dim"), &xs[1])?),
        "gather" => one(x.gather(arg_usize(a, "dim"), &xs[1])?),
        "scatter_add" => one(x.scatter_add(arg_usize(a, "dim"), &xs[1], &xs[2])?),
        "gather_rows" => one(x.gather_rows(&xs[1])?),
        "cross_entropy" => one(nn::functional::cross_entropy(x, &xs[1])?),
        "scaled_dot_product_attention" => one(nn::functional::scaled_dot_product_attention(
            x,
            &xs[1],
            &xs[2],
            xs.get(3),
            arg_bool(a, "is_causal"),
        )?),
        "to_dtype" => one(x.to_dtype(dtype_of(a["dtype"].as_str().unwrap()))?),
        "rms_norm" => {
            assert_eq!(arg_f64(a, "eps"), 1e-6, "RMSNorm's eps");
            let m = place(
                nn::RMSNorm::new(*x.shape().last().unwrap())?.to_dtype(x.dtype())?,
                layout,
                pl,
            )?;
            let w = param(&m, "weight");
            set_param(&w, 1.0, &ins[1], layout, pl)?;
            Ok((vec![m.forward(x)?], vec![x.clone(), w]))
        }
        "layer_norm" => {
            assert_eq!(arg_f64(a, "eps"), 1e-5, "LayerNorm's eps");
            let m = place(
                nn::LayerNorm::new(*x.shape().last().unwrap())?.to_dtype(x.dtype())?,
                layout,
                pl,
            )?;
            let (w, b) = (param(&m, "weight"), param(&m, "bias"));
            set_param(&w, 1.0, &ins[1], layout, pl)?;
            set_param(&b, 0.0, &ins[2], layout, pl)?;
            Ok((vec![m.forward(x)?], vec![x.clone(), w, b]))
        }
        other => panic!("no mapping for op {other}"),
    }
}

/// What one run of a case gives: outputs, then gradients (one per input, None where none).
type Got = (Vec<Data>, Vec<Option<Data>>);

fn run_case(c: &Value, layout: Layout, pl: Option<&Placement>) -> Result<Got> {
    let ins: Vec<Data> = c["inputs"].as_array().unwrap().iter().map(data).collect();
    let a = &c["args"];
    let op = c["op"].as_str().unwrap();
    let differentiable = c.get("grads").is_some();
    let mut xs = Vec::new();
    for (i, d) in ins.iter().enumerate() {
        let t = make(d, target(layout, pl, d.shape.len()))?;
        let wants_grad = differentiable && !c["grads"][i].is_null();
        xs.push(if wants_grad {
            t.set_requires_grad(true)
        } else {
            t
        });
    }
    if op == "clip_grad_norm" {
        for (x, g) in xs.iter().zip(c["given_grads"].as_array().unwrap()) {
            let g = make(&data(g), target(layout, pl, x.ndim()))?;
            x.set_requires_grad(true).set_grad(Some(g));
        }
        let norm = nn::utils::clip_grad_norm(&xs, arg_f64(a, "max_norm"))?;
        let mut outs = vec![Data {
            shape: vec![],
            dtype: "f64".into(),
            data: vec![norm],
        }];
        for x in &xs {
            outs.push(read(&x.grad().expect("a gradient after clipping"))?);
        }
        return Ok((outs, vec![]));
    }
    let (outs, sources) = apply(op, a, &xs, &ins, layout, pl)?;
    let mut grads = Vec::new();
    if differentiable {
        let ws = c["weights"].as_array().unwrap();
        assert_eq!(ws.len(), outs.len(), "one weight per output");
        let mut loss: Option<Tensor> = None;
        for (o, w) in outs.iter().zip(ws) {
            let w = data(w);
            let w = make(&w, target(layout, pl, w.shape.len()))?;
            let term = o.mul(&w)?.sum(Vec::<usize>::new(), false)?;
            loss = Some(match loss {
                None => term,
                Some(l) => l.add(&term)?,
            });
        }
        loss.expect("an output").backward()?;
        for (i, s) in sources.iter().enumerate() {
            grads.push(match (c["grads"][i].is_null(), s.grad()) {
                (true, _) => None,
                (false, Some(g)) => Some(read(&g)?),
                (false, None) => Some(read(&s.detach().mul_scalar(0.0)?)?),
            });
        }
    }
    Ok((outs.iter().map(read).collect::<Result<_>>()?, grads))
}

/// (relative, absolute) tolerance by dtype: 1e-10 relative for f64, a unit in the last place for
/// 16 bits (whose results are rounded once from f32 sums in another order); casts, integers and
/// bools must be exact. On a placement a 16-bit reduction over a split dim rounds each rank's
/// partial sum to 16 bits before the (f32) cross-rank sum, as Megatron's bf16 partials: the
/// partials cancel, so the bound is absolute, 8 units of the dtype's epsilon at magnitude 1.
fn tolerance(dtype: &str, exact: bool, global: bool) -> (f64, f64) {
    let half = |eps: f64| {
        if global {
            (eps, 8.0 * eps)
        } else {
            (1.001 * eps, 1e-4)
        }
    };
    match (dtype, exact) {
        ("f64", false) => (1e-10, 1e-12),
        ("f32", false) => (1e-5, 1e-6),
        ("f16", false) => half(2f64.powi(-10)),
        ("bf16", false) => half(2f64.powi(-7)),
        _ => (0.0, 0.0),
    }
}

fn compare(what: &str, got: &Data, want: &Data, exact: bool, global: bool, errs: &mut Vec<String>) {
    if got.shape != want.shape || got.dtype != want.dtype {
        errs.push(format!(
            "{what}: shape {:?} dtype {}, PyTorch {:?} {}",
            got.shape, got.dtype, want.shape, want.dtype
        ));
        return;
    }
    let (rtol, atol) = tolerance(&want.dtype, exact, global);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        // exact: the same bits (so -0.0 is not 0.0)
        let ok = if rtol == 0.0 {
            g.to_bits() == w.to_bits() || (g == w && !exact)
        } else {
            (g - w).abs() <= rtol * w.abs() + atol
        };
        if !ok {
            errs.push(format!(
                "{what}[{i}]: {g:e}, PyTorch {w:e} (and maybe more)"
            ));
            return;
        }
    }
}

fn check(c: &Value, got: &Got, global: bool, errs: &mut Vec<String>) {
    let name = c["name"].as_str().unwrap();
    let exact = name.starts_with("to_dtype") || name.starts_with("promote_");
    let want: Vec<Data> = match (c.get("output"), c.get("outputs")) {
        (Some(o), _) => vec![data(o)],
        (None, Some(os)) => os.as_array().unwrap().iter().map(data).collect(),
        _ => panic!("case {name} has no output"),
    };
    if got.0.len() != want.len() {
        errs.push(format!(
            "{name}: {} outputs, PyTorch {}",
            got.0.len(),
            want.len()
        ));
        return;
    }
    for (i, (g, w)) in got.0.iter().zip(&want).enumerate() {
        compare(&format!("{name} output {i}"), g, w, exact, global, errs);
    }
    if let Some(gs) = c.get("grads").and_then(Value::as_array) {
        for (i, want) in gs.iter().enumerate() {
            match (got.1.get(i).cloned().flatten(), want.is_null()) {
                (_, true) => {}
                (Some(g), false) => compare(
                    &format!("{name} grad {i}"),
                    &g,
                    &data(want),
                    false,
                    global,
                    errs,
                ),
                (None, false) => errs.push(format!("{name} grad {i}: none")),
            }
        }
    }
}

fn cases() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch_ops.json");
    let text = std::fs::read_to_string(path).expect("tests/data/torch_ops.json");
    let all: Vec<Value> = serde_json::from_str(&text).expect("valid JSON");
    assert!(all.len() >= 150, "the reference lost cases: {}", all.len());
    let filter = std::env::var("TORCH_OPS_CASE").unwrap_or_default();
    all.into_iter()
        .filter(|c| c["name"].as_str().unwrap().contains(&filter))
        .collect()
}

/// Runs every case on `layout` and fails with the list of every case that differs.
fn run_all(layout: Layout) {
    let mut errs = Vec::new();
    let mut ran = 0;
    for c in cases() {
        let name = c["name"].as_str().unwrap().to_string();
        let got: Result<Vec<Got>> = match layout {
            Layout::Local => run_case(&c, layout, None).map(|g| vec![g]),
            _ => gflow::simulate(4, |_| {
                let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
                run_case(&c, layout, Some(&p))
            }),
        };
        match got {
            Ok(per_rank) => {
                for (rank, g) in per_rank.iter().enumerate() {
                    let before = errs.len();
                    check(&c, g, layout != Layout::Local, &mut errs);
                    for e in &mut errs[before..] {
                        *e = format!("rank {rank}: {e}");
                    }
                }
            }
            Err(e) => errs.push(format!("{name}: error {e}")),
        }
        ran += 1;
    }
    assert!(ran > 0, "no case ran");
    assert!(
        errs.is_empty(),
        "{layout:?}: {} mismatches in {ran} cases:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

#[test]
fn torch_ops_local() {
    run_all(Layout::Local);
}

#[test]
fn torch_ops_global_split_first_last() {
    run_all(Layout::SplitFirstLast);
}

#[test]
fn torch_ops_global_broadcast_split() {
    run_all(Layout::BroadcastSplit);
}

/// A gathered index past the table is a typed error, the same locally and globally.
#[test]
fn index_out_of_range_is_typed() {
    let check = |layout: Layout, pl: Option<&Placement>| -> Result<()> {
        let t = make(
            &Data {
                shape: vec![3, 2],
                dtype: "f64".into(),
                data: vec![0.0; 6],
            },
            target(layout, pl, 2),
        )?;
        let i = make(
            &Data {
                shape: vec![2],
                dtype: "i64".into(),
                data: vec![1.0, 3.0],
            },
            target(layout, pl, 1),
        )?;
        match t.gather_rows(&i) {
            Err(Error::IndexOutOfRange { .. }) => Ok(()),
            other => Err(Error::InvalidArgument {
                op: "index_out_of_range_is_typed",
                reason: format!("{layout:?}: {other:?}"),
            }),
        }
    };
    check(Layout::Local, None).unwrap();
    gflow::simulate(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        check(Layout::SplitFirstLast, Some(&p))
    })
    .unwrap();
}
