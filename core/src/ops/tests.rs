//! Every operator, every declared signature, on 1-D (3 ranks, uneven) and 2-D (2x2, every pair of
//! signatures) placements: the global result equals the single-device float64 result. Partial
//! inputs are genuine (weighted summands, max/min operands), not a value plus identities.

use super::*;
use crate::backend::{BinaryOp, UnaryOp};
use crate::placement::Placement;
use crate::shape::extract;
use crate::storage::HostData;
use crate::{Device, simulate};

/// The component of `v` (of `shape`) held by the rank at `coords` under `nd`.
fn component(v: &[f64], shape: &[usize], p: &Placement, nd: &NdSbp, coords: &[usize]) -> Vec<f64> {
    let region = nd.local_region(shape, coords, p);
    let mut x: Vec<f64> =
        bytemuck::pod_collect_to_vec(&extract(8, bytemuck::cast_slice(v), shape, &region));
    for (a, s) in nd.as_slice().iter().enumerate() {
        let (c, n) = (coords[a], p.hierarchy()[a]);
        match s {
            // weights c-th of n that sum to 1: 2/(n+1) for c = 0 ... decreasing, normalised
            Sbp::Partial(ReduceOp::Sum) => {
                let w: Vec<f64> = (0..n).map(|i| (n - i) as f64).collect();
                let total: f64 = w.iter().sum();
                x.iter_mut().for_each(|e| *e *= w[c] / total);
            }
            Sbp::Partial(ReduceOp::Max) if c != 0 => x.iter_mut().for_each(|e| *e -= 1.0),
            Sbp::Partial(ReduceOp::Min) if c != 0 => x.iter_mut().for_each(|e| *e += 1.0),
            _ => {}
        }
    }
    x
}

fn values(n: usize, seed: usize, positive: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i * 7 + seed * 13) % 17) as f64 / 4.0 - 2.0;
            if positive { x.abs() + 0.5 } else { x }
        })
        .collect()
}

/// Runs `op` under every n-d combination of its signatures on `p` (world `world`) and compares
/// with the local single-device result.
fn check_op(
    op: &(dyn Op + Sync),
    shapes: &[Vec<usize>],
    positive: bool,
    index: Option<(usize, usize)>,
    p: &Placement,
    world: usize,
) {
    let vals: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| match index {
            Some((j, rows)) if j == i => (0..s.iter().product())
                .map(|e| ((e * 7 + 3) % rows) as f64)
                .collect(),
            _ => values(s.iter().product(), i, positive),
        })
        .collect();
    // Index inputs are integers; the rest are f64.
    let data = |i: usize, v: Vec<f64>| match index {
        Some((j, _)) if j == i => HostData::I64(v.into_iter().map(|x| x as i64).collect()),
        _ => HostData::F64(v),
    };
    let dtype = |i: usize| match index {
        Some((j, _)) if j == i => DType::I64,
        _ => DType::F64,
    };
    let expected = simulate(1, |_| {
        let ts: Vec<Tensor> = vals
            .iter()
            .zip(shapes)
            .enumerate()
            .map(|(i, (v, s))| Tensor::from_vec_data(data(i, v.clone()).into(), s, Device::Cpu))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = ts.iter().collect();
        dispatch(op, &refs)?.to_vec_cast::<f64>()
    })
    .expect("single-device run")
    .remove(0);
    let shape_refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let out_shape = op.infer(&shape_refs).expect("shapes are valid");
    let sigs = op.signatures(&shape_refs, &out_shape);
    let k = p.ndim();
    let combos = sigs.len().pow(k as u32);
    for mut c in 0..combos {
        let pick: Vec<&Signature> = (0..k)
            .map(|_| {
                let s = &sigs[c % sigs.len()];
                c /= sigs.len();
                s
            })
            .collect();
        let in_nd: Vec<NdSbp> = (0..shapes.len())
            .map(|i| NdSbp::from(pick.iter().map(|s| s.inputs[i]).collect::<Vec<_>>()))
            .collect();
        let out_nd = NdSbp::from(pick.iter().map(|s| s.output).collect::<Vec<_>>());
        let got = simulate(world, |env| {
            let ts: Vec<Tensor> = (0..shapes.len())
                .map(|i| {
                    let dist = Dist::new(p.clone(), in_nd[i].clone());
                    let comp = p
                        .coords_of(env.rank())
                        .map(|c| data(i, component(&vals[i], &shapes[i], p, &in_nd[i], &c)).into());
                    Tensor::from_component(comp, &shapes[i], dtype(i), dist)
                })
                .collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            let y = dispatch(op, &refs)?;
            assert_eq!(y.shape(), &out_shape[..]);
            if p.contains(env.rank()) {
                Ok(Some((y.sbp().cloned(), y.to_vec_cast::<f64>()?)))
            } else {
                Ok(None)
            }
        })
        .unwrap_or_else(|e| panic!("{} {in_nd:?}: {e}", op.name()));
        for (sbp, v) in got.into_iter().flatten() {
            assert_eq!(
                sbp.as_ref(),
                Some(&out_nd),
                "{} chose another signature for {in_nd:?}",
                op.name()
            );
            assert_eq!(v.len(), expected.len());
            for (a, b) in v.iter().zip(&expected) {
                assert!(
                    (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                    "{} {in_nd:?} -> {out_nd}: {a} vs {b}",
                    op.name()
                );
            }
        }
    }
}

fn placements() -> Vec<(Placement, usize)> {
    vec![
        (Placement::new("cpu", [0, 1, 2]).expect("valid"), 3),
        (Placement::new("cpu", [[0, 1], [2, 3]]).expect("valid"), 4),
        // uneven hardware: weighted splits (the 2-D weights are not a product of per-axis ones)
        (
            Placement::new("cpu", [2, 0, 1])
                .and_then(|p| p.with_weights(&[1.0, 3.0, 2.0]))
                .expect("valid"),
            3,
        ),
        (
            Placement::new("cpu", [[0, 1], [2, 3]])
                .and_then(|p| p.with_weights(&[1, 2, 3, 1]))
                .expect("valid"),
            4,
        ),
    ]
}

fn check(op: &(dyn Op + Sync), shapes: &[Vec<usize>], positive: bool) {
    for (p, world) in placements() {
        check_op(op, shapes, positive, None, &p, world);
    }
}

#[test]
fn gather_and_scatter_rows() {
    for (p, world) in placements() {
        check_op(
            &gather::Gather,
            &[vec![7, 4], vec![5, 2]],
            false,
            Some((1, 7)),
            &p,
            world,
        );
        check_op(
            &gather::Gather,
            &[vec![7, 3, 2], vec![5]],
            false,
            Some((1, 7)),
            &p,
            world,
        );
        let scatter = gather::ScatterRows { rows: 7 };
        check_op(
            &scatter,
            &[vec![5, 2], vec![5, 2, 3]],
            false,
            Some((0, 7)),
            &p,
            world,
        );
    }
}

#[test]
fn unary_ops() {
    use UnaryOp::*;
    for op in [
        Neg, Exp, Log, Sqrt, Square, Relu, Gelu, Sigmoid, Tanh, Step, GeluGrad, Floor, Ceil, Round,
        Trunc, Log1p, Expm1,
    ] {
        check(
            &unary::Unary(op),
            &[vec![5, 4]],
            matches!(op, Log | Sqrt | Log1p),
        );
    }
    check(&unary::Scale(-2.5), &[vec![5, 3]], false);
    check(&unary::AddScalar(1.5), &[vec![5, 3]], false);
}

#[test]
fn binary_ops_with_broadcasting() {
    use BinaryOp::*;
    for op in [Add, Sub, Mul, Div, Fmod, Remainder, FloorDivide] {
        let divides = matches!(op, Div | Fmod | Remainder | FloorDivide);
        check(&binary::Binary(op), &[vec![5, 4], vec![5, 4]], divides);
        check(&binary::Binary(op), &[vec![3, 1, 4], vec![5, 1]], divides);
    }
}

#[test]
fn matmul_2d_and_batched() {
    check(&matmul::Matmul::PLAIN, &[vec![5, 3], vec![3, 4]], false);
    check(
        &matmul::Matmul::PLAIN,
        &[vec![3, 5, 3], vec![3, 3, 2]],
        false,
    );
    check(&matmul::Matmul::PLAIN, &[vec![2, 5, 3], vec![3, 4]], false);
    let t = |ta, tb| matmul::Matmul { ta, tb };
    check(&t(false, true), &[vec![5, 3], vec![4, 3]], false);
    check(&t(true, false), &[vec![3, 5], vec![3, 4]], false);
    check(&t(true, true), &[vec![3, 5], vec![4, 3]], false);
    check(&t(false, true), &[vec![2, 5, 3], vec![4, 3]], false);
    // x Wᵀ + b: rows, output features or the inner dim split (a partial bias), uneven
    check(&matmul::Linear, &[vec![5, 3], vec![4, 3], vec![4]], false);
    check(
        &matmul::Linear,
        &[vec![2, 5, 6], vec![7, 6], vec![7]],
        false,
    );
}

#[test]
fn reductions() {
    for kind in [reduce::Kind::Sum, reduce::Kind::Mean, reduce::Kind::Max] {
        check(
            &reduce::Reduce {
                kind,
                dims: vec![1],
                keepdim: false,
            },
            &[vec![5, 4, 3]],
            false,
        );
        check(
            &reduce::Reduce {
                kind,
                dims: vec![0, 2],
                keepdim: true,
            },
            &[vec![5, 4, 3]],
            false,
        );
    }
}

#[test]
fn softmax_ops() {
    for log in [false, true] {
        check(&softmax::Softmax { dim: 1, log }, &[vec![5, 4]], false);
    }
}

#[test]
fn shape_ops() {
    check(&shape_ops::Reshape(vec![2, 3, 4]), &[vec![6, 4]], false);
    check(&shape_ops::Reshape(vec![20]), &[vec![5, 4]], false);
    check(&shape_ops::Transpose(0, 2), &[vec![5, 4, 3]], false);
    check(&shape_ops::Cat(1), &[vec![5, 2], vec![5, 3]], false);
    check(&shape_ops::Expand(vec![5, 4, 3]), &[vec![5, 1, 3]], false);
    check(&shape_ops::Expand(vec![2, 3]), &[vec![1, 1]], false);
    check(
        &shape_ops::Narrow {
            dim: 1,
            start: 1,
            len: 2,
        },
        &[vec![5, 4]],
        false,
    );
}

#[test]
fn attention_ops() {
    let shapes = [vec![2, 3, 5, 4], vec![2, 3, 6, 4], vec![2, 3, 6, 3]];
    for causal in [false, true] {
        for save in [false, true] {
            let op = attention::Attention {
                scale: 0.5,
                causal,
                save,
            };
            check(&op, &shapes, false);
            // (batch, seq, heads, 3, head_dim): batch and heads uneven over 3 ranks
            check(
                &attention::PackedAttention(op),
                &[vec![4, 5, 3, 3, 2]],
                false,
            );
        }
        let op = attention::Attention {
            scale: 0.5,
            causal,
            save: true,
        };
        // the output gradient, then the output and its log-sum-exp (any values)
        let mut with_grad = shapes.to_vec();
        with_grad.extend([vec![2, 3, 5, 3], vec![2, 3, 5, 3], vec![2, 3, 5]]);
        check(&attention::AttentionGrad(op), &with_grad, false);
        let grad = attention::PackedAttentionGrad(attention::PackedAttention(op));
        let (qkv, out) = (vec![4, 5, 3, 3, 2], vec![4, 5, 3, 2]);
        check(&grad, &[qkv, out.clone(), out, vec![4, 5, 3]], false);
    }
}

/// 16-bit means, variances and standard deviations sum in f32 and round once, as PyTorch's:
/// the mean of a hundred f16 1000s is 1000 (its sum, 100000, is past f16's 65504), and their
/// variance 0; the mean over a split dim (partial sums of the mean) gives the same.
#[test]
fn half_means_sum_in_f32_and_round_once() {
    for dtype in [DType::F16, DType::BF16] {
        let x = Tensor::full(&[4, 25], 1000.0, Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let all = || Vec::<usize>::new();
        let one = |t: Tensor| t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()[0];
        assert_eq!(one(x.mean(all(), false).unwrap()), 1000.0, "{dtype} mean");
        assert_eq!(one(x.var(all(), 1.0, false).unwrap()), 0.0, "{dtype} var");
        assert_eq!(one(x.std(all(), 0.0, false).unwrap()), 0.0, "{dtype} std");
        let ramp: Vec<f64> = (0..100).map(|i| 300.0 + f64::from(i)).collect();
        let r = Tensor::from_vec(ramp.clone(), &[100], Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let exact: Vec<f64> = r.to_dtype(DType::F64).unwrap().to_vec().unwrap();
        let mean = exact.iter().sum::<f64>() / 100.0;
        let var = exact.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 99.0;
        let round = |v: f64| {
            Tensor::from_vec(vec![v], &[1], Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap()[0]
        };
        assert_eq!(
            one(r.mean(0, false).unwrap()),
            round(mean),
            "{dtype} ramp mean"
        );
        assert_eq!(
            one(r.var(0, 1.0, false).unwrap()),
            round(var),
            "{dtype} ramp var"
        );
        let split = simulate(2, |_| {
            let p = Placement::new("cpu", [0, 1])?;
            let g = x.to_global(&p, vec![Sbp::Split(1)])?;
            g.mean(all(), false)?
                .to_global(&p, vec![Sbp::Broadcast])?
                .to_local()?
                .to_dtype(DType::F64)?
                .to_vec::<f64>()
        })
        .unwrap();
        for r in split {
            assert_eq!(r[0], 1000.0, "{dtype} split mean");
        }
    }
}

/// `prod` and `cumprod` against float64 loops, with zeros (their gradients are the products of
/// the others, where dividing by the input would give NaN), and split over 3 uneven ranks on
/// the multiplied dim and on another: the single-device values and gradients.
#[test]
fn products_and_running_products() {
    let (rows, cols) = (5, 7);
    let v: Vec<f64> = (0..rows * cols)
        .map(|i| {
            if i % 9 == 4 {
                0.0
            } else {
                ((i * 5) % 11) as f64 / 4.0 - 1.1
            }
        })
        .collect();
    let at = |r: usize, c: usize| v[r * cols + c];
    let prod_rows: Vec<f64> = (0..rows)
        .map(|r| (0..cols).map(|c| at(r, c)).product())
        .collect();
    let running: Vec<f64> = (0..rows)
        .flat_map(|r| {
            (0..cols).scan(1.0, move |p, c| {
                *p *= at(r, c);
                Some(*p)
            })
        })
        .collect();
    // d/dx(r, c) of sum over rows of prod(row): the product of the row's others
    let grad: Vec<f64> = (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            (0..cols).filter(|&k| k != c).map(|k| at(r, k)).product()
        })
        .collect();
    let close = |a: &[f64], b: &[f64], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                "{what}: {a:?} vs {b:?}"
            );
        }
    };
    let x = Tensor::from_vec(v.clone(), &[rows, cols], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    let p = x.prod(1, false).unwrap();
    close(&p.to_vec::<f64>().unwrap(), &prod_rows, "prod");
    p.sum(vec![], false).unwrap().backward().unwrap();
    close(
        &x.grad().unwrap().to_vec::<f64>().unwrap(),
        &grad,
        "prod's gradient",
    );
    close(
        &x.cumprod(1).unwrap().to_vec::<f64>().unwrap(),
        &running,
        "cumprod",
    );
    let world = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let mut out = vec![];
        for split in [0, 1] {
            let g = Tensor::from_vec(v.clone(), &[rows, cols], Device::Cpu)?
                .to_global(&p, vec![Sbp::Broadcast])?
                .to_global(&p, vec![Sbp::Split(split)])?
                .detach()
                .set_requires_grad(true);
            let prod = g.prod(1, false)?;
            prod.sum(vec![], false)?.backward()?;
            let local = |t: Tensor| -> Result<Vec<f64>> {
                t.to_global(&p, vec![Sbp::Broadcast])?
                    .to_local()?
                    .to_vec::<f64>()
            };
            out.push((
                local(prod)?,
                local(g.grad().expect("a gradient"))?,
                local(g.cumprod(1)?)?,
            ));
        }
        Ok(out)
    })
    .unwrap();
    for (prod, grad_got, run) in world.into_iter().flatten() {
        close(&prod, &prod_rows, "split prod");
        close(&grad_got, &grad, "split prod's gradient");
        close(&run, &running, "split cumprod");
    }
}
