//! Autograd against independent references: every differentiable operator's gradient equals
//! central finite differences of the forward pass (float64, local tensors); the same graphs on
//! global tensors under mixed 2-D SBPs give the single-device gradients, each with its leaf's
//! placement and SBP.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, NdSbp, Placement, Result, Sbp, Tensor, no_grad, simulate};

type Case = (
    &'static str,
    Vec<Vec<usize>>,
    fn(&[Tensor]) -> Result<Tensor>,
);

fn cases() -> Vec<Case> {
    vec![
        ("neg", vec![vec![3, 4]], |x| x[0].neg()),
        ("exp", vec![vec![3, 4]], |x| x[0].exp()),
        ("log", vec![vec![3, 4]], |x| x[0].log()),
        ("sqrt", vec![vec![3, 4]], |x| x[0].sqrt()),
        ("square", vec![vec![3, 4]], |x| x[0].square()),
        ("relu", vec![vec![3, 4]], |x| x[0].add_scalar(-1.3)?.relu()),
        ("gelu", vec![vec![3, 4]], |x| x[0].add_scalar(-1.3)?.gelu()),
        ("sigmoid", vec![vec![3, 4]], |x| x[0].sigmoid()),
        ("tanh", vec![vec![3, 4]], |x| x[0].tanh()),
        ("mul_scalar", vec![vec![3, 4]], |x| x[0].mul_scalar(-2.5)),
        ("add", vec![vec![3, 4], vec![4]], |x| x[0].add(&x[1])),
        ("sub", vec![vec![3, 1], vec![2, 3, 4]], |x| x[0].sub(&x[1])),
        ("mul", vec![vec![3, 4], vec![3, 1]], |x| x[0].mul(&x[1])),
        ("div", vec![vec![3, 4], vec![3, 4]], |x| x[0].div(&x[1])),
        ("x*x", vec![vec![3, 4]], |x| x[0].mul(&x[0])),
        ("matmul", vec![vec![3, 4], vec![4, 5]], |x| {
            x[0].matmul(&x[1])
        }),
        ("bmm", vec![vec![2, 3, 4], vec![2, 4, 5]], |x| {
            x[0].matmul(&x[1])
        }),
        ("bmm2d", vec![vec![2, 3, 4], vec![4, 5]], |x| {
            x[0].matmul(&x[1])
        }),
        ("matmul_nt", vec![vec![3, 4], vec![5, 4]], |x| {
            x[0].matmul_nt(&x[1])
        }),
        ("bmm_nt", vec![vec![2, 3, 4], vec![5, 4]], |x| {
            x[0].matmul_nt(&x[1])
        }),
        ("sum", vec![vec![3, 4, 2]], |x| x[0].sum(1, false)),
        ("sum_keep", vec![vec![3, 4, 2]], |x| x[0].sum([0, 2], true)),
        ("mean", vec![vec![3, 4, 2]], |x| x[0].mean([0, 1], false)),
        ("max", vec![vec![3, 4, 2]], |x| x[0].max(1, true)),
        ("softmax", vec![vec![3, 4]], |x| x[0].softmax(1)),
        ("log_softmax", vec![vec![3, 4]], |x| x[0].log_softmax(0)),
        ("reshape", vec![vec![3, 4]], |x| x[0].reshape(&[2, 6])),
        ("transpose", vec![vec![3, 4, 2]], |x| x[0].transpose(0, 2)),
        ("narrow", vec![vec![3, 5]], |x| x[0].narrow(1, 1, 3)),
        ("expand", vec![vec![3, 1]], |x| x[0].expand(&[3, 4])),
        ("cat", vec![vec![3, 2], vec![3, 3]], |x| Tensor::cat(x, 1)),
        ("abs", vec![vec![3, 4]], |x| x[0].add_scalar(-1.0)?.abs()),
        ("rsqrt", vec![vec![3, 4]], |x| x[0].rsqrt()),
        ("sin", vec![vec![3, 4]], |x| x[0].mul_scalar(3.0)?.sin()),
        ("cos", vec![vec![3, 4]], |x| x[0].mul_scalar(3.0)?.cos()),
        ("silu", vec![vec![3, 4]], |x| x[0].add_scalar(-1.0)?.silu()),
        ("erf", vec![vec![3, 4]], |x| x[0].add_scalar(-1.0)?.erf()),
        ("gelu_erf", vec![vec![3, 4]], |x| {
            x[0].add_scalar(-1.0)?.mul_scalar(2.0)?.gelu_erf()
        }),
        ("pow", vec![vec![3, 4]], |x| x[0].pow(2.5)),
        ("pow_neg", vec![vec![3, 4]], |x| x[0].pow(-1.0)),
        ("clamp", vec![vec![3, 4]], |x| {
            x[0].clamp(Some(0.6), Some(1.2))
        }),
        ("clamp_min", vec![vec![3, 4]], |x| {
            x[0].clamp(Some(0.9), None)
        }),
        ("maximum", vec![vec![3, 4], vec![4]], |x| {
            x[0].maximum(&x[1])
        }),
        ("minimum", vec![vec![3, 4], vec![3, 1]], |x| {
            x[0].minimum(&x[1])
        }),
        ("where_cond", vec![vec![3, 4], vec![3, 4]], |x| {
            x[0].gt(&x[1])?.where_cond(&x[0], &x[1].mul_scalar(2.0)?)
        }),
        ("masked_fill", vec![vec![3, 4]], |x| {
            let mask = x[0].detach().gt(&x[0].detach().mean(Vec::new(), false)?)?;
            x[0].masked_fill(&mask, -3.5)?.mul(&x[0])
        }),
        ("tril", vec![vec![3, 4]], |x| x[0].tril(0)),
        ("triu", vec![vec![2, 3, 4]], |x| x[0].triu(1)),
        ("tril_neg", vec![vec![4, 3]], |x| x[0].tril(-1)),
        ("min", vec![vec![3, 4, 2]], |x| x[0].min(1, true)),
        ("logsumexp", vec![vec![3, 4]], |x| x[0].logsumexp(1, false)),
        ("logsumexp_all", vec![vec![3, 4]], |x| {
            x[0].logsumexp(Vec::new(), true)
        }),
        ("permute", vec![vec![3, 4, 2]], |x| x[0].permute(&[2, 0, 1])),
        ("flatten", vec![vec![3, 4, 2]], |x| x[0].flatten(1, 2)),
        ("unsqueeze", vec![vec![3, 4]], |x| {
            x[0].unsqueeze(1)?.squeeze(1)?.unsqueeze(2)
        }),
        ("stack", vec![vec![3, 4], vec![3, 4]], |x| {
            Tensor::stack(x, 1)
        }),
        ("split", vec![vec![3, 5]], |x| {
            let parts = x[0].split(2, 1)?;
            parts[2].mul(&parts[1].narrow(1, 0, 1)?)
        }),
        ("chunk", vec![vec![5, 3]], |x| {
            let parts = x[0].chunk(2, 0)?;
            parts[0].narrow(0, 0, 2)?.sub(&parts[1])
        }),
        ("index_select", vec![vec![3, 4]], |x| {
            x[0].index_select(1, &ints(&x[0], vec![2, 0, 2], &[3])?)
        }),
        ("gather", vec![vec![3, 4]], |x| {
            x[0].gather(1, &ints(&x[0], vec![3, 0, 1, 1, 2, 0], &[3, 2])?)
        }),
        ("scatter_add", vec![vec![3, 4], vec![3, 2]], |x| {
            x[0].scatter_add(1, &ints(&x[0], vec![3, 0, 1, 1, 2, 0], &[3, 2])?, &x[1])
        }),
        ("cross_entropy", vec![vec![4, 5]], |x| {
            let t = ints(&x[0], vec![4, 0, 2, 2], &[4])?;
            gflow_core::nn::functional::cross_entropy(&x[0].mul_scalar(3.0)?, &t)
        }),
        (
            "attention",
            vec![vec![1, 2, 3, 4], vec![1, 2, 3, 4], vec![1, 2, 3, 4]],
            |x| {
                gflow_core::nn::functional::scaled_dot_product_attention(
                    &x[0], &x[1], &x[2], None, true,
                )
            },
        ),
        // sums and means hand their consumers a gradient that only broadcasts: into a
        // non-broadcasting op, into broadcasting ones, two of them into one leaf
        ("sum_of_exp", vec![vec![3, 4]], |x| x[0].exp()?.sum(1, true)),
        ("sum_of_mul", vec![vec![3, 4], vec![4]], |x| {
            x[0].mul(&x[1])?.sum(0, true)
        }),
        ("sum_plus_mean", vec![vec![3, 4]], |x| {
            x[0].sum(1, true)?.add(&x[0].mean(1, true)?)
        }),
        ("mean_of_sub", vec![vec![3, 4], vec![3, 1]], |x| {
            x[0].sub(&x[1])?.mean(Vec::new(), true)
        }),
        ("mean_of_broadcast_add", vec![vec![4], vec![2, 3, 4]], |x| {
            x[0].add(&x[1])?.mean(Vec::new(), false)
        }),
        ("chain", vec![vec![4, 3], vec![3, 3]], |x| {
            let h = x[0].matmul(&x[1])?.tanh()?;
            h.mul(&h.softmax(1)?)?
                .sum(0, true)?
                .sub(&x[0].narrow(0, 1, 1)?)
        }),
    ]
}

/// Integer indices placed like `like`: local, or broadcast on its placement.
fn ints(like: &Tensor, data: Vec<i64>, shape: &[usize]) -> Result<Tensor> {
    match like.placement() {
        Some(p) => Tensor::from_vec(data, shape, (p, NdSbp::broadcast(p.ndim()))),
        None => Tensor::from_vec(data, shape, Device::Cpu),
    }
}

/// Deterministic values in [0.3, 1.7) (positive, so log and sqrt are defined).
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 0.3 + ((i * 37 + seed * 101 + 11) % 97) as f64 / 97.0 * 1.4)
        .collect()
}

/// A fixed weighting of the output, so that the output gradient is not uniform.
fn weights(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 13 % 7) as f64) - 2.5).collect()
}

fn loss(f: fn(&[Tensor]) -> Result<Tensor>, xs: &[Tensor]) -> Result<Tensor> {
    let y = f(xs)?;
    let w = Tensor::from_vec(weights(y.numel()), y.shape(), Device::Cpu)?;
    let w = match y.placement() {
        Some(p) => w.to_global(p, NdSbp::broadcast(p.ndim()))?,
        None => w,
    };
    y.mul(&w)?.sum(Vec::new(), false)
}

fn local_inputs(shapes: &[Vec<usize>]) -> Vec<Tensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Tensor::from_vec(values(s.iter().product(), i), s, Device::Cpu)
                .unwrap()
                .set_requires_grad(true)
        })
        .collect()
}

#[test]
fn gradients_match_finite_differences() {
    simulate(1, |_| {
        for (name, shapes, f) in cases() {
            let xs = local_inputs(&shapes);
            loss(f, &xs)?.backward()?;
            for (i, x) in xs.iter().enumerate() {
                let got = x.grad().expect("a gradient").to_vec_cast::<f64>()?;
                let base = x.to_vec_cast::<f64>()?;
                for e in 0..base.len() {
                    let at = |h: f64| -> Result<f64> {
                        let mut v = base.clone();
                        v[e] += h;
                        let mut ys: Vec<Tensor> = xs.iter().map(Tensor::detach).collect();
                        ys[i] = Tensor::from_vec(v, x.shape(), Device::Cpu)?;
                        Ok(no_grad(|| loss(f, &ys))?.to_vec_cast::<f64>()?[0])
                    };
                    let h = 1e-6;
                    let want = (at(h)? - at(-h)?) / (2.0 * h);
                    assert!(
                        (got[e] - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{name}: d/dx{i}[{e}] autograd {} vs numeric {want}",
                        got[e]
                    );
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

/// Layouts to try for an input of `ndim` dims on a 2x2 placement.
fn layouts(ndim: usize, k: usize) -> Vec<NdSbp> {
    let last = ndim - 1;
    let all = [
        vec![Sbp::split(0), Sbp::broadcast()],
        vec![Sbp::broadcast(), Sbp::split(last)],
        vec![Sbp::split(last), Sbp::split(0)],
        vec![Sbp::partial_sum(), Sbp::split(0)],
        vec![Sbp::broadcast(), Sbp::broadcast()],
    ];
    (0..3)
        .map(|j| NdSbp::from(all[(k + j) % all.len()].clone()))
        .collect()
}

#[test]
fn global_gradients_equal_single_device_and_keep_the_leaf_layout() {
    let expected: Vec<Vec<Vec<f64>>> = simulate(1, |_| {
        cases()
            .into_iter()
            .map(|(_, shapes, f)| {
                let xs = local_inputs(&shapes);
                loss(f, &xs)?.backward()?;
                xs.iter()
                    .map(|x| x.grad().unwrap().to_vec_cast::<f64>())
                    .collect()
            })
            .collect()
    })
    .unwrap()
    .remove(0);
    simulate(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        for (k, ((name, shapes, f), want)) in cases().into_iter().zip(&expected).enumerate() {
            for (j, _) in layouts(1, 0).iter().enumerate() {
                let xs: Vec<Tensor> = local_inputs(&shapes)
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        let sbp = layouts(x.ndim(), k + i)[j].clone();
                        let whole = no_grad(|| x.to_global(&p, NdSbp::broadcast(2)))?;
                        Ok(no_grad(|| whole.to_global(&p, sbp))?.set_requires_grad(true))
                    })
                    .collect::<Result<_>>()?;
                loss(f, &xs)?.backward()?;
                for (i, x) in xs.iter().enumerate() {
                    let g = x.grad().expect("a gradient");
                    assert_eq!(g.sbp(), x.sbp(), "{name}: gradient layout of input {i}");
                    assert_eq!(g.placement(), x.placement());
                    let got = g.to_vec_cast::<f64>()?;
                    assert_eq!(got.len(), want[i].len());
                    for (a, b) in got.iter().zip(&want[i]) {
                        assert!(
                            (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                            "{name} input {i} as {}: {a} vs {b}",
                            x.sbp().unwrap()
                        );
                    }
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn embedding_lookup_gradient_adds_rows_back() {
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let table: Vec<f64> = (0..12).map(f64::from).collect();
        let idx = vec![3i64, 0, 3, 1, 3];
        let mut grads = vec![];
        for (t_sbp, i_sbp) in [
            (Sbp::broadcast(), Sbp::split(0)),
            (Sbp::split(1), Sbp::broadcast()),
        ] {
            let w = Tensor::from_vec(table.clone(), &[4, 3], (&p, t_sbp))?.set_requires_grad(true);
            let i = Tensor::from_vec(idx.clone(), &[5], (&p, i_sbp))?;
            let e = w.gather_rows(&i)?;
            assert_eq!(e.shape(), &[5, 3]);
            let rows = e.to_vec_cast::<f64>()?;
            assert_eq!(&rows[..3], &[9.0, 10.0, 11.0]);
            e.sum(Vec::new(), false)?.backward()?;
            assert_eq!(w.grad().unwrap().sbp(), w.sbp());
            grads.push(w.grad().unwrap().to_vec_cast::<f64>()?);
        }
        Ok(grads)
    })
    .unwrap();
    // Row 3 was picked three times, rows 0 and 1 once, row 2 never.
    let want = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0];
    for g in out.iter().flatten() {
        assert_eq!(g, &want);
    }
}

#[test]
fn gradients_accumulate_and_graphs_free() {
    simulate(1, |_| {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
        let y = x.square()?.sum(0, false)?;
        y.backward()?;
        assert!(
            y.backward().is_err(),
            "a second backward through a freed graph"
        );
        x.square()?.sum(0, false)?.backward()?;
        assert_eq!(x.grad().unwrap().to_vec_cast::<f32>()?, vec![4.0, 8.0]);
        assert!(x.is_leaf() && !y.is_leaf() && y.requires_grad());
        let z = no_grad(|| x.square())?;
        assert!(!z.requires_grad());
        assert!(z.backward().is_err());
        let d = x.detach();
        assert!(!d.requires_grad() && d.grad().is_none());
        assert!(x.square()?.backward().is_err(), "not a scalar");
        let t = Tensor::zeros(&[2], Device::Cpu)?;
        assert_eq!(t.dtype(), DType::F32);
        Ok(())
    })
    .unwrap();
}

#[test]
fn to_global_and_to_local_are_differentiable_across_placements() {
    let out = simulate(4, |_| {
        let p1 = Placement::new("cpu", [0, 1])?;
        let p2 = Placement::new("cpu", [2, 3])?;
        // Uneven local sizes: rank r holds r + 1 rows.
        let env = gflow_core::env::current();
        let rows = env.rank() + 1;
        let x =
            Tensor::full(&[rows, 2], (env.rank() + 1) as f32, Device::Cpu)?.set_requires_grad(true);
        let g1 = x.to_global(&p1, Sbp::split(0))?;
        let g2 = g1.mul_scalar(3.0)?.to_global(&p2, Sbp::split(1))?;
        let l = g2.to_local();
        // Ranks 0 and 1 are not on p2: they take part in the collectives but hold nothing.
        let total = g2.square()?.sum(Vec::new(), false)?;
        total.backward()?;
        Ok((x.grad().unwrap().to_vec_cast::<f32>()?, l.is_ok()))
    })
    .unwrap();
    // g1 is [1,1; 2,2; 2,2] (ranks 0 and 1 only), loss = sum (3 g1)^2, d/dx = 18 x.
    assert_eq!(out[0], (vec![18.0, 18.0], false));
    assert_eq!(out[1], (vec![36.0; 4], false));
    assert_eq!(
        out[2],
        (vec![0.0; 6], true),
        "rank 2 is not on p1: zero gradient"
    );
    assert_eq!(out[3].0, vec![0.0; 8]);
}

/// PyTorch's `retain_graph=True`: the graph survives the pass, so a second backward of the same
/// loss (or of another output sharing the graph) accumulates into the leaves again, on a global
/// layout too; without it, the graph is freed and the second pass is an error.
#[test]
fn retain_graph_keeps_the_graph_for_another_backward() {
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4], (&p, Sbp::split(0)))?
            .set_requires_grad(true);
        let h = x.mul(&x)?; // shared by both losses
        let a = h.sum(vec![], false)?;
        let b = h.mul_scalar(3.0)?.sum(vec![], false)?;
        a.backward_with_options(None, true)?;
        let once = x.grad().unwrap().to_vec::<f32>()?;
        a.backward_with_options(None, true)?;
        let twice = x.grad().unwrap().to_vec::<f32>()?;
        b.backward()?; // frees the shared part of the graph
        let thrice = x.grad().unwrap().to_vec::<f32>()?;
        let again = a.backward().is_err();
        Ok((once, twice, thrice, again))
    })
    .unwrap();
    for (once, twice, thrice, again) in out {
        assert_eq!(once, [2.0, 4.0, 6.0, 8.0]);
        assert_eq!(twice, [4.0, 8.0, 12.0, 16.0]);
        // + d(3 x^2)/dx = 6x
        assert_eq!(thrice, [10.0, 20.0, 30.0, 40.0]);
        assert!(again, "the graph b's pass freed cannot be run again");
    }
}
