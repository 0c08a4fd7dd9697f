//! Layers, losses and optimizers against hand-worked values and float64 references; dropout
//! masks are placement-invariant; modules convert with `to_global` / `to_local`.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::nn::functional::cross_entropy;
use gflow_core::nn::{self, Module};
use gflow_core::optim::{self, Optimizer};
use gflow_core::{DType, Device, Error, NdSbp, Placement, Sbp, Tensor, manual_seed, simulate};

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

#[test]
fn cross_entropy_matches_a_hand_computation_and_its_gradient() {
    simulate(2, |_| {
        let logits = vec![1.0f64, 2.0, 0.5, -1.0, 0.0, 3.0];
        let target = vec![1i64, 2];
        // -log softmax picked, averaged over 2 samples
        let lse = |r: &[f64]| r.iter().map(|v| v.exp()).sum::<f64>().ln();
        let want = ((lse(&logits[..3]) - 2.0) + (lse(&logits[3..]) - 3.0)) / 2.0;
        let p = Placement::new("cpu", [0, 1])?;
        for (lt, tt) in [
            (
                gflow_core::Target::Local(Device::Cpu),
                gflow_core::Target::Local(Device::Cpu),
            ),
            (
                gflow_core::Target::Global(p.clone(), Sbp::split(0).into()),
                gflow_core::Target::Global(p.clone(), Sbp::split(0).into()),
            ),
        ] {
            let x = Tensor::from_vec(logits.clone(), &[2, 3], lt)?.set_requires_grad(true);
            let t = Tensor::from_vec(target.clone(), &[2], tt)?;
            let l = cross_entropy(&x, &t)?;
            assert!((l.to_vec_cast::<f64>()?[0] - want).abs() < 1e-12);
            l.backward()?;
            // d/dlogits = (softmax - onehot) / N
            let g = x.grad().unwrap().to_vec_cast::<f64>()?;
            let mut expect = vec![];
            for (r, &t) in logits.chunks(3).zip(&target) {
                let z: f64 = r.iter().map(|v| v.exp()).sum();
                for (j, v) in r.iter().enumerate() {
                    expect.push((v.exp() / z - if j as i64 == t { 1.0 } else { 0.0 }) / 2.0);
                }
            }
            assert!(close(&g, &expect, 1e-12), "{g:?} vs {expect:?}");
        }
        // Probabilities as targets give the same loss as their one-hot indices.
        let x = Tensor::from_vec(logits.clone(), &[2, 3], Device::Cpu)?;
        let probs = Tensor::from_vec(vec![0.0f64, 1.0, 0.0, 0.0, 0.0, 1.0], &[2, 3], Device::Cpu)?;
        assert!((cross_entropy(&x, &probs)?.to_vec_cast::<f64>()?[0] - want).abs() < 1e-12);
        let bad = Tensor::from_vec(vec![3i64, 0], &[2], Device::Cpu)?;
        assert!(matches!(
            cross_entropy(&x, &bad),
            Err(Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            })
        ));
        Ok(())
    })
    .unwrap();
}

#[test]
fn layer_norm_normalises_and_embeds_look_up() {
    simulate(1, |_| {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, -1.0, 1.0], &[2, 3], Device::Cpu)?;
        let ln = nn::LayerNorm::new(3)?.with_eps(0.0);
        let y = ln.forward(&x)?.to_vec_cast::<f64>()?;
        let s = (2.0f64 / 3.0).sqrt();
        let row2_mean: f64 = 4.0 / 3.0;
        let row2_var = ((4.0 - row2_mean).powi(2)
            + (-1.0f64 - row2_mean).powi(2)
            + (1.0f64 - row2_mean).powi(2))
            / 3.0;
        let want = [
            -1.0 / s,
            0.0,
            1.0 / s,
            (4.0 - row2_mean) / row2_var.sqrt(),
            (-1.0 - row2_mean) / row2_var.sqrt(),
            (1.0 - row2_mean) / row2_var.sqrt(),
        ];
        assert!(close(&y, &want, 1e-5), "{y:?}");
        assert_eq!(ln.parameters().len(), 2);
        let e = nn::Embedding::from_tensor(Tensor::arange(6, Device::Cpu)?.reshape(&[3, 2])?)?;
        let idx = Tensor::from_vec(vec![2i64, 0, 2], &[3], Device::Cpu)?;
        assert_eq!(
            e.forward(&idx)?.to_vec_cast::<f32>()?,
            vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0]
        );
        assert!(nn::LayerNorm::new(4)?.forward(&x).is_err());
        assert!(nn::LayerNorm::new(Vec::new()).is_err());
        Ok(())
    })
    .unwrap();
}

#[test]
fn dropout_masks_are_placement_invariant() {
    let masks = |n: usize, sbp: NdSbp, hier: bool| {
        simulate(n, move |_| {
            manual_seed(5);
            let p = if hier {
                Placement::new("cpu", [[0, 1], [2, 3]])?
            } else {
                Placement::new("cpu", (0..n).collect::<Vec<_>>())?
            };
            let x = Tensor::ones(&[8, 6], (&p, sbp.clone()))?;
            let d = nn::Dropout::new(0.25)?;
            let y = d.forward(&x)?.to_vec_cast::<f32>()?;
            d.set_training(false);
            assert_eq!(d.forward(&x)?.to_vec_cast::<f32>()?, vec![1.0; 48]);
            Ok(y)
        })
        .unwrap()
        .remove(0)
    };
    let one = masks(1, Sbp::broadcast().into(), false);
    let kept = one.iter().filter(|&&v| v != 0.0).count();
    assert!(
        one.iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6)
    );
    assert!((24..=44).contains(&kept), "kept {kept} of 48 at p = 0.25");
    assert_eq!(masks(3, Sbp::split(1).into(), false), one);
    assert_eq!(masks(2, Sbp::partial_sum().into(), false), one);
    assert_eq!(
        masks(4, NdSbp::from(vec![Sbp::split(0), Sbp::split(1)]), true),
        one
    );
    assert!(nn::Dropout::new(1.5).is_err());
}

#[test]
fn modules_convert_to_global_and_back() {
    let out = simulate(2, |_| {
        manual_seed(3);
        let model = nn::Sequential::new()
            .add(nn::Linear::new(5, 3, true)?)
            .add(nn::GELU)
            .add(nn::Linear::new(3, 2, false)?);
        assert_eq!(model.parameters().len(), 3);
        let w = model.parameters()[0].to_vec_cast::<f32>()?;
        // PyTorch's default: uniform in +-1/sqrt(in)
        assert!(w.iter().all(|v| v.abs() <= 1.0 / 5f32.sqrt()));
        let p = Placement::new("cpu", [0, 1])?;
        let model = model.to_global(&p, Sbp::broadcast())?;
        let params = model.parameters();
        assert!(
            params
                .iter()
                .all(|t| t.is_global() && t.requires_grad() && t.is_leaf())
        );
        let global_w = params[0].to_vec_cast::<f32>()?;
        let x = Tensor::randn(&[4, 5], (&p, Sbp::split(0)))?;
        let y = model.forward(&x)?;
        assert_eq!(y.shape(), &[4, 2]);
        let one = Tensor::randn(&[5], Device::Cpu)?;
        let l = nn::Linear::new(5, 3, true)?;
        assert_eq!(l.forward(&one)?.shape(), &[3]);
        assert!(l.forward(&Tensor::randn(&[4], Device::Cpu)?).is_err());
        let model = model.to_local()?;
        assert!(model.parameters().iter().all(|t| t.is_local()));
        Ok((w, global_w))
    })
    .unwrap();
    // Rank 1's own local init differs; broadcast took rank 0's, so both ranks hold rank 0's.
    assert_ne!(out[0].0, out[1].0);
    assert_eq!(out[0].1, out[0].0);
    assert_eq!(out[1].1, out[0].0);
}

#[test]
fn optimizers_follow_their_update_rules_on_global_parameters() {
    // minimise sum (p - 3)^2 from p = 0 on a split parameter; compare with a float64 loop
    let run = |kind: usize| {
        simulate(2, move |_| {
            let p = Placement::new("cpu", [0, 1])?;
            let w = Tensor::zeros(&[4], (&p, Sbp::split(0)))?.set_requires_grad(true);
            let mut opt: Box<dyn Optimizer> = match kind {
                0 => Box::new(
                    optim::Sgd::new(vec![w.clone()], 0.1)
                        .momentum(0.5)
                        .weight_decay(0.1),
                ),
                1 => Box::new(optim::Adam::new(vec![w.clone()], 0.1)),
                _ => Box::new(optim::AdamW::new(vec![w.clone()], 0.1).weight_decay(0.5)),
            };
            let three = Tensor::full(&[4], 3.0, (&p, Sbp::broadcast()))?;
            for _ in 0..5 {
                w.sub(&three)?
                    .square()?
                    .sum(Vec::new(), false)?
                    .backward()?;
                opt.step()?;
                opt.zero_grad();
                assert!(w.grad().is_none());
            }
            assert_eq!(w.sbp().unwrap(), &NdSbp::from(Sbp::split(0)));
            w.to_vec_cast::<f32>()
        })
        .unwrap()
        .remove(0)
    };
    let reference = |kind: usize| {
        let (mut p, mut m, mut v, mut b) = (0.0f64, 0.0, 0.0, 0.0);
        for t in 1..=5 {
            let mut g = 2.0 * (p - 3.0);
            match kind {
                0 => {
                    g += 0.1 * p;
                    b = if t == 1 { g } else { 0.5 * b + g };
                    p -= 0.1 * b;
                }
                _ => {
                    if kind == 2 {
                        p *= 1.0 - 0.1 * 0.5;
                    }
                    m = 0.9 * m + 0.1 * g;
                    v = 0.999 * v + 0.001 * g * g;
                    let mh = m / (1.0 - 0.9f64.powi(t));
                    let vh = v / (1.0 - 0.999f64.powi(t));
                    p -= 0.1 * mh / (vh.sqrt() + 1e-8);
                }
            }
        }
        p
    };
    for kind in 0..3 {
        let got = run(kind);
        let want = reference(kind);
        assert!(
            got.iter().all(|&g| (f64::from(g) - want).abs() < 1e-5),
            "{kind}: {got:?} vs {want}"
        );
    }
}

/// A user's module needs only `forward` and `parameters` (API.md); it composes with the
/// built-in ones and trains.
#[test]
fn a_user_module_with_forward_and_parameters_trains() {
    struct Scale(Tensor);
    impl Module for Scale {
        fn forward(&self, x: &Tensor) -> gflow_core::Result<Tensor> {
            x.mul(&self.0)
        }
        fn parameters(&self) -> Vec<Tensor> {
            vec![self.0.clone()]
        }
    }
    simulate(1, |_| {
        let s = Tensor::full(&[1], 2.0, Device::Cpu)?.set_requires_grad(true);
        let model = nn::Sequential::new().add(Scale(s.clone())).add(nn::ReLU);
        let x = Tensor::from_vec(vec![1.0f32, 3.0], &[2], Device::Cpu)?;
        model.forward(&x)?.sum(0, false)?.backward()?;
        assert_eq!(s.grad().unwrap().to_vec_cast::<f32>()?, vec![4.0]);
        let mut opt = optim::Sgd::new(model.parameters(), 0.5);
        opt.step()?;
        assert_eq!(s.to_vec_cast::<f32>()?, vec![0.0]);
        // Conversion is in place, so a module with only `parameters` converts too, and the
        // handle held outside sees it.
        let p = Placement::new("cpu", [0])?;
        let model = model.to_global(&p, Sbp::broadcast())?;
        assert_eq!(s.placement(), Some(&p));
        let y = model.forward(&x.to_global(&p, Sbp::broadcast())?)?;
        assert_eq!(y.to_local()?.to_vec_cast::<f32>()?, vec![0.0, 0.0]);
        Ok(())
    })
    .unwrap();
}

/// LayerNorm (over two trailing dims) and RMSNorm, forward and input gradient, against a
/// reference written out here in f64: local (the fused kernel), and on 2 ranks with the batch
/// split (fused per rank) and the normalised dim split (composed from partial statistics).
#[test]
fn norms_match_a_hand_written_reference_fused_and_composed() {
    let (rows, cols) = (6usize, 10usize);
    let x: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 37 % 23) as f64 - 11.0) * 0.3 + (i / cols) as f64)
        .collect();
    let w: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 13 % 7) as f64) - 3.0)
        .collect();
    // reference: y = (x - mean) * rstd (mean 0 for RMS); dx = rstd (w - mean(w) - y mean(w y))
    let reference = |center: bool, eps: f64| -> (Vec<f64>, Vec<f64>) {
        let (mut y, mut dx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let g = &w[r * cols..(r + 1) * cols];
            let n = cols as f64;
            let mean = if center {
                row.iter().sum::<f64>() / n
            } else {
                0.0
            };
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let rstd = 1.0 / (var + eps).sqrt();
            let yr: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
            let gm = if center {
                g.iter().sum::<f64>() / n
            } else {
                0.0
            };
            let gy = g.iter().zip(&yr).map(|(a, b)| a * b).sum::<f64>() / n;
            for c in 0..cols {
                y[r * cols + c] = yr[c];
                dx[r * cols + c] = rstd * (g[c] - gm - yr[c] * gy);
            }
        }
        (y, dx)
    };
    for (center, eps) in [(true, 1e-5), (false, 1e-6)] {
        let (want_y, want_dx) = reference(center, eps);
        for (ranks, sbp) in [
            (1, None),
            (2, Some(Sbp::split(0))),
            (2, Some(Sbp::split(2))),
        ] {
            let got = simulate(ranks, |_| {
                let local = Tensor::from_vec(x.clone(), &[rows, 2, cols / 2], Device::Cpu)?;
                let wt = Tensor::from_vec(w.clone(), &[rows, 2, cols / 2], Device::Cpu)?;
                let p = Placement::new("cpu", [0, 1])?;
                let (xt, wt) = match sbp {
                    None => (local, wt),
                    Some(s) => {
                        let b = Sbp::broadcast();
                        let (xg, wg) = (local.to_global(&p, b)?, wt.to_global(&p, b)?);
                        (xg.to_global(&p, s)?, wg.to_global(&p, s)?)
                    }
                };
                fn place<M: Module>(m: M, p: &Placement, global: bool) -> gflow_core::Result<M> {
                    if global {
                        m.to_global(p, Sbp::broadcast())
                    } else {
                        Ok(m)
                    }
                }
                let xt = xt.set_requires_grad(true);
                let y = if center {
                    let ln = place(nn::LayerNorm::new(vec![2, cols / 2])?, &p, sbp.is_some())?;
                    ln.forward(&xt)?
                } else {
                    let rms = place(nn::RMSNorm::new(cols)?, &p, sbp.is_some())?;
                    let flat = xt.reshape(&[rows, cols])?;
                    rms.forward(&flat)?.reshape(&[rows, 2, cols / 2])?
                };
                y.mul(&wt)?.sum(vec![0, 1, 2], false)?.backward()?;
                let dx = xt.grad().expect("x has a gradient");
                Ok((y.to_vec_cast::<f64>()?, dx.to_vec_cast::<f64>()?))
            })
            .unwrap();
            for (y, dx) in got {
                assert!(close(&y, &want_y, 1e-12), "center {center}, {sbp:?}: {y:?}");
                assert!(
                    close(&dx, &want_dx, 1e-12),
                    "center {center}, {sbp:?}: {dx:?}"
                );
            }
        }
    }
}

/// 16-bit inputs take the fused norm and softmax backward in f32, rounded once: their input
/// gradients match the f32 run's to the 16-bit type's precision.
#[test]
fn sixteen_bit_norm_and_softmax_gradients_follow_f32() {
    use gflow_core::DType;
    let x: Vec<f64> = (0..48)
        .map(|i| ((i * 29 % 17) as f64 - 8.0) * 0.25)
        .collect();
    let grads = |dtype: DType| -> Vec<f64> {
        simulate(1, |_| {
            let xt = Tensor::from_vec(x.clone(), &[4, 12], Device::Cpu)?
                .to_dtype(dtype)?
                .set_requires_grad(true);
            let ln = nn::LayerNorm::new(12)?.to_dtype(dtype)?;
            let y = ln.forward(&xt)?.softmax(1)?;
            let w = Tensor::from_vec(
                (0..48).map(|i| i as f64 * 0.1).collect(),
                &[4, 12],
                Device::Cpu,
            )?
            .to_dtype(dtype)?;
            y.mul(&w)?.sum(vec![0, 1], false)?.backward()?;
            xt.grad()
                .expect("x has a gradient")
                .to_dtype(DType::F64)?
                .to_vec_cast::<f64>()
        })
        .unwrap()
        .remove(0)
    };
    let want = grads(DType::F32);
    for (dtype, eps) in [(DType::BF16, 2f64.powi(-7)), (DType::F16, 2f64.powi(-10))] {
        let got = grads(dtype);
        let scale = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 16.0 * eps * scale,
                "{dtype:?}: {got:?} vs {want:?}"
            );
        }
    }
}

/// LayerNorm and RMSNorm with non-trivial weight and bias: outputs and the gradients of the
/// input, the weight and the bias against a float64 hand computation; local, with the rows
/// split over 2 ranks (the fused kernels, parameter gradients as partial sums) and with the
/// normalised dim split (composed).
#[test]
fn affine_norms_and_their_parameter_gradients_match_a_hand_written_reference() {
    let (rows, cols) = (6usize, 8usize);
    let x: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 29 % 17) as f64 - 8.0) * 0.25 + (i / cols) as f64 * 0.5)
        .collect();
    let g: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 11 % 5) as f64) - 2.0)
        .collect();
    let w: Vec<f64> = (0..cols).map(|c| 0.5 + c as f64 * 0.25).collect();
    let b: Vec<f64> = (0..cols).map(|c| c as f64 * 0.1 - 0.3).collect();
    // y = xhat w + b; h = g w; dx = rstd (h - mean(h) - xhat mean(h xhat)); dw = sum g xhat
    let reference = |center: bool, eps: f64| -> [Vec<f64>; 4] {
        let (mut y, mut dx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        let (mut dw, mut db) = (vec![0.0; cols], vec![0.0; cols]);
        let n = cols as f64;
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let gr = &g[r * cols..(r + 1) * cols];
            let mean = if center {
                row.iter().sum::<f64>() / n
            } else {
                0.0
            };
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let rstd = 1.0 / (var + eps).sqrt();
            let xh: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
            let h: Vec<f64> = gr.iter().zip(&w).map(|(a, b)| a * b).collect();
            let hm = if center {
                h.iter().sum::<f64>() / n
            } else {
                0.0
            };
            let hx = h.iter().zip(&xh).map(|(a, b)| a * b).sum::<f64>() / n;
            for c in 0..cols {
                let bias = if center { b[c] } else { 0.0 };
                y[r * cols + c] = xh[c] * w[c] + bias;
                dx[r * cols + c] = rstd * (h[c] - hm - xh[c] * hx);
                dw[c] += gr[c] * xh[c];
                db[c] += gr[c];
            }
        }
        [y, dx, dw, db]
    };
    for (center, eps) in [(true, 1e-5), (false, 1e-6)] {
        let want = reference(center, eps);
        for sbp in [None, Some(Sbp::split(0)), Some(Sbp::split(1))] {
            let got = simulate(if sbp.is_some() { 2 } else { 1 }, |_| {
                let local =
                    |v: &[f64], shape: &[usize]| Tensor::from_vec(v.to_vec(), shape, Device::Cpu);
                let mut sd = gflow_core::StateDict::new();
                sd.insert("weight", &local(&w, &[cols])?);
                sd.insert("bias", &local(&b, &[cols])?);
                let (xt, gt) = (local(&x, &[rows, cols])?, local(&g, &[rows, cols])?);
                let p = Placement::new("cpu", [0, 1])?;
                let (xt, gt) = match sbp {
                    None => (xt, gt),
                    Some(s) => {
                        let bc = |t: Tensor| t.to_global(&p, Sbp::broadcast())?.to_global(&p, s);
                        (bc(xt)?, bc(gt)?)
                    }
                };
                let xt = xt.set_requires_grad(true);
                let (y, params) = if center {
                    let mut ln = nn::LayerNorm::new(cols)?.to_dtype(DType::F64)?;
                    if sbp.is_some() {
                        ln = ln.to_global(&p, Sbp::broadcast())?;
                    }
                    ln.load_state_dict(&sd)?;
                    (ln.forward(&xt)?, ln.parameters())
                } else {
                    let mut rms = nn::RMSNorm::new(cols)?.to_dtype(DType::F64)?;
                    if sbp.is_some() {
                        rms = rms.to_global(&p, Sbp::broadcast())?;
                    }
                    rms.load_state_dict(&sd)?;
                    (rms.forward(&xt)?, rms.parameters())
                };
                y.mul(&gt)?.sum(vec![0, 1], false)?.backward()?;
                let grad = |t: &Tensor| t.grad().expect("a gradient").to_vec_cast::<f64>();
                let mut out = vec![y.to_vec_cast::<f64>()?, grad(&xt)?];
                for p in &params {
                    out.push(grad(p)?);
                }
                Ok(out)
            })
            .unwrap();
            for per_rank in got {
                let names = ["y", "dx", "dweight", "dbias"];
                for (i, v) in per_rank.iter().enumerate() {
                    assert!(
                        close(v, &want[i], 1e-10),
                        "center {center}, {sbp:?}, {}: {v:?} vs {:?}",
                        names[i],
                        want[i]
                    );
                }
                assert_eq!(per_rank.len(), if center { 4 } else { 3 });
            }
        }
    }
}

/// Attention's output and gradients (`sum(out * w)`) in f64: `(out, dq, dk, dv)`.
fn attention_and_grads(
    q: &[f64],
    (k, v): (&[f64], &[f64]),
    (tq, tk): (usize, usize),
    mask: Option<Tensor>,
    w: &[f64],
) -> gflow_core::Result<[Vec<f64>; 4]> {
    let leaf = |x: &[f64], t| {
        Ok::<_, Error>(
            Tensor::from_vec(x.to_vec(), &[1, 1, t, 3], Device::Cpu)?.set_requires_grad(true),
        )
    };
    let (q, k, v) = (leaf(q, tq)?, leaf(k, tk)?, leaf(v, tk)?);
    let out = nn::functional::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), false)?;
    let w = Tensor::from_vec(w.to_vec(), &[1, 1, tq, 3], Device::Cpu)?;
    out.mul(&w)?.sum(vec![0, 1, 2, 3], false)?.backward()?;
    let grad = |t: &Tensor| t.grad().expect("a gradient").to_vec_cast::<f64>();
    Ok([out.to_vec_cast::<f64>()?, grad(&q)?, grad(&k)?, grad(&v)?])
}

#[test]
fn a_query_with_every_key_masked_gets_zeros_and_finite_gradients() {
    // Rows are independent: with query 0 masked out entirely, queries 1..4 must give what the
    // same problem without query 0 gives, and query 0 zeros (PyTorch's safe softmax).
    let (tq, tk) = (4, 5);
    let data = |n: usize, s: f64| {
        (0..n)
            .map(|i| (i as f64 * 0.37 + s).sin())
            .collect::<Vec<_>>()
    };
    let (q, k, v, w) = (
        data(tq * 3, 0.1),
        data(tk * 3, 0.7),
        data(tk * 3, 1.3),
        data(tq * 3, 2.1),
    );
    let allowed: Vec<bool> = (0..tq * tk).map(|i| i >= tk && i % 3 != 1).collect();
    let rest = |x: &[f64]| x[3..].to_vec();
    let rest_mask = Tensor::from_vec(allowed[tk..].to_vec(), &[tq - 1, tk], Device::Cpu).unwrap();
    let want = attention_and_grads(
        &rest(&q),
        (&k, &v),
        (tq - 1, tk),
        Some(rest_mask),
        &rest(&w),
    )
    .unwrap();
    let bool_mask = Tensor::from_vec(allowed.clone(), &[tq, tk], Device::Cpu).unwrap();
    let float_mask = Tensor::from_vec(
        allowed
            .iter()
            .map(|&a| if a { 0.0 } else { f64::NEG_INFINITY })
            .collect::<Vec<_>>(),
        &[tq, tk],
        Device::Cpu,
    )
    .unwrap();
    for mask in [bool_mask, float_mask] {
        let [out, dq, dk, dv] =
            attention_and_grads(&q, (&k, &v), (tq, tk), Some(mask), &w).unwrap();
        assert_eq!(&out[..3], &[0.0; 3], "the masked query's output");
        assert_eq!(&dq[..3], &[0.0; 3], "the masked query's gradient");
        assert!(
            close(&out[3..], &want[0], 1e-12),
            "{out:?} vs {:?}",
            want[0]
        );
        assert!(close(&dq[3..], &want[1], 1e-12));
        assert!(close(&dk, &want[2], 1e-12), "{dk:?} vs {:?}", want[2]);
        assert!(close(&dv, &want[3], 1e-12));
    }
}

#[test]
fn attention_refuses_a_mask_with_is_causal_and_an_integer_mask() {
    let x = Tensor::ones(&[1, 1, 2, 3], Device::Cpu).unwrap();
    let sdpa = nn::functional::scaled_dot_product_attention;
    let bool_mask = Tensor::from_vec(vec![true; 4], &[2, 2], Device::Cpu).unwrap();
    assert!(matches!(
        sdpa(&x, &x, &x, Some(&bool_mask), true),
        Err(Error::InvalidArgument { .. })
    ));
    let int_mask = Tensor::from_vec(vec![0i64; 4], &[2, 2], Device::Cpu).unwrap();
    assert!(matches!(
        sdpa(&x, &x, &x, Some(&int_mask), false),
        Err(Error::UnsupportedDType {
            dtype: DType::I64,
            ..
        })
    ));
}

#[test]
fn global_max_and_min_over_a_split_dim_propagate_nan() {
    let got = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(vec![1.0f32, f32::NAN, 2.0, 3.0], &[4], (&p, Sbp::split(0)))?;
        let m = [x.max(0, false)?, x.min(0, false)?];
        let y = Tensor::from_vec(
            vec![1.0f32, f32::NAN, 2.0, 3.0],
            &[2, 2],
            (&p, Sbp::split(0)),
        )?;
        Ok((
            m.iter()
                .map(|t| t.to_vec_cast::<f32>())
                .collect::<gflow_core::Result<Vec<_>>>()?,
            y.max(0, false)?.to_vec_cast::<f32>()?,
        ))
    })
    .unwrap();
    for (whole, cols) in got {
        assert!(whole.iter().all(|v| v[0].is_nan()), "{whole:?}");
        assert!(cols[0] == 2.0 && cols[1].is_nan(), "{cols:?}");
    }
}

#[test]
fn log_softmax_keeps_precision_at_large_inputs_locally_and_over_a_split_dim() {
    let got = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let data = vec![1000.0f32, 1000.0, 1.0, f32::INFINITY, 2.0, 3.0, 5.0, 5.0];
        let local = Tensor::from_vec(data.clone(), &[4, 2], Device::Cpu)?;
        let split = Tensor::from_vec(data, &[4, 2], (&p, Sbp::split(1)))?;
        Ok([
            local.log_softmax(1)?.to_vec_cast::<f32>()?,
            split.log_softmax(1)?.to_vec_cast::<f32>()?,
        ])
    })
    .unwrap();
    let half = -std::f32::consts::LN_2;
    for [local, split] in got {
        for v in [&local, &split] {
            // (x - max) - ln 2 exactly; x - (max + ln 2) was 1000's ulp away (-0.69317627)
            assert_eq!([v[0], v[1], v[6], v[7]], [half; 4], "{v:?}");
            // a row holding +inf: NaN throughout (PyTorch)
            assert!(v[2].is_nan() && v[3].is_nan(), "{v:?}");
            assert_eq!(v[4], 2.0 - 3.0 - (1.0f32 + (-1.0f32).exp()).ln());
        }
    }
}

#[test]
fn a_tied_parameter_is_one_parameter_to_containers_optimizers_and_clipping() {
    // w shared by two layers: y = w (w x); PyTorch counts it once everywhere
    let w = Tensor::from_vec(vec![1.0f64, -0.5, 0.25, 1.5], &[2, 2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    let layer = || nn::Linear::from_tensors(w.clone(), None).unwrap();
    let seq = nn::Sequential::new().add(layer()).add(layer());
    assert_eq!(seq.parameters().len(), 1);
    let names: Vec<String> = seq.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight"]);
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2], Device::Cpu).unwrap();
    seq.forward(&x)
        .unwrap()
        .sum(vec![0, 1], false)
        .unwrap()
        .backward()
        .unwrap();
    let g = w.grad().unwrap().to_vec_cast::<f64>().unwrap();
    let norm = g.iter().map(|v| v * v).sum::<f64>().sqrt();
    // clipping a list that names w twice: the norm of w's gradient, scaled once
    let got = nn::utils::clip_grad_norm(&[w.clone(), w.clone()], 1e9).unwrap();
    assert!((got - norm).abs() < 1e-12, "{got} vs {norm}");
    let before = w.to_vec_cast::<f64>().unwrap();
    let mut opt = optim::Sgd::new(vec![w.clone(), w.clone()], 0.1);
    opt.step().unwrap();
    let after = w.to_vec_cast::<f64>().unwrap();
    for ((a, b), g) in after.iter().zip(&before).zip(&g) {
        assert!(
            (a - (b - 0.1 * g)).abs() < 1e-12,
            "updated twice? {after:?}"
        );
    }
}

#[test]
fn clipping_a_nan_norm_makes_every_gradient_nan() {
    let w = Tensor::from_vec(vec![f64::NAN, 2.0], &[2], Device::Cpu)
        .unwrap()
        .set_requires_grad(true);
    w.mul(&w)
        .unwrap()
        .sum(vec![0], false)
        .unwrap()
        .backward()
        .unwrap();
    assert!(
        nn::utils::clip_grad_norm(std::slice::from_ref(&w), 1.0)
            .unwrap()
            .is_nan()
    );
    assert!(
        w.grad()
            .unwrap()
            .to_vec_cast::<f64>()
            .unwrap()
            .iter()
            .all(|v| v.is_nan())
    );
}

#[test]
fn to_global_with_takes_a_closure_that_records() {
    simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let mut seen = vec![];
        let m = nn::Linear::new(3, 2, true)?.to_global_with(&p, |name, shape| {
            seen.push((name.to_string(), shape.to_vec()));
            Sbp::broadcast().into()
        })?;
        assert_eq!(m.parameters().len(), 2);
        assert_eq!(
            seen,
            [("weight".to_string(), vec![2, 3]), ("bias".into(), vec![2])]
        );
        Ok(())
    })
    .unwrap();
}

#[test]
fn an_optimizer_that_has_stepped_follows_its_parameters_to_global() {
    // two Adam steps on a local model against one local step, to_global, one global step
    let w0 = vec![0.5f64, -0.25, 1.0, 0.75, -1.5, 0.125];
    let x0 = vec![1.0f64, 2.0, -1.0, 0.5, 0.25, -2.0];
    let train = |convert: Option<(Placement, Sbp)>| -> gflow_core::Result<Vec<f64>> {
        let w = Tensor::from_vec(w0.clone(), &[2, 3], Device::Cpu)?.set_requires_grad(true);
        let mut model = nn::Sequential::new().add(nn::Linear::from_tensors(w, None)?);
        let mut opt = optim::Adam::new(model.parameters(), 0.1);
        let mut x = Tensor::from_vec(x0.clone(), &[2, 3], Device::Cpu)?;
        for step in 0..2 {
            if step == 1
                && let Some((p, sbp)) = &convert
            {
                model = model.to_global(p, *sbp)?;
                x = x.to_global(p, Sbp::broadcast())?;
            }
            let y = model.forward(&x)?;
            y.mul(&y)?.sum(vec![0, 1], false)?.backward()?;
            opt.step()?;
            opt.zero_grad();
        }
        model.parameters()[0].to_vec::<f64>()
    };
    let want = train(None).unwrap();
    // (a split would concatenate the ranks' local parameters, another model)
    for sbp in [Sbp::broadcast()] {
        let got = simulate(2, |_| {
            let p = Placement::new("cpu", [0, 1])?;
            train(Some((p, sbp)))
        })
        .unwrap();
        for g in got {
            assert!(close(&g, &want, 1e-12), "{sbp}: {g:?} vs {want:?}");
        }
    }
}

#[test]
fn norms_keep_a_sixteen_bit_input_dtype_with_f32_parameters() {
    let x = Tensor::from_vec(
        vec![1.0f32, -2.0, 0.5, 3.0, 0.25, -1.0],
        &[2, 3],
        Device::Cpu,
    )
    .unwrap();
    let rms = nn::RMSNorm::new(3).unwrap();
    let ln = nn::LayerNorm::new(3).unwrap();
    for dtype in [DType::BF16, DType::F16] {
        let xh = x.to_dtype(dtype).unwrap().set_requires_grad(true);
        for (name, m) in [("rms", &rms as &dyn Module), ("layer", &ln)] {
            let y = m.forward(&xh).unwrap();
            assert_eq!(y.dtype(), dtype, "{name}");
            // within the 16-bit rounding of the f32 result (PyTorch computes in f32, rounds once)
            let want = m.forward(&x).unwrap().to_vec::<f32>().unwrap();
            let got = y.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 2e-2 * (1.0 + w.abs()),
                    "{name} {dtype:?}: {got:?} vs {want:?}"
                );
            }
            y.to_dtype(DType::F32)
                .unwrap()
                .sum(vec![0, 1], false)
                .unwrap()
                .backward()
                .unwrap();
            assert_eq!(m.parameters()[0].grad().unwrap().dtype(), DType::F32);
        }
    }
}

/// SGD with momentum and AdamW on F16 and BF16 parameters (their state in the same dtype, as
/// PyTorch's) step like the F32 run to 16-bit precision, where they were `DTypeMismatch`.
#[test]
fn optimizers_step_16_bit_parameters() {
    let start = [1.0f64, -2.0, 0.5, 3.0];
    let run = |dtype: DType, adam: bool| -> Vec<f64> {
        let p = Tensor::from_vec(start.map(|v| v as f32).to_vec(), &[4], Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .set_requires_grad(true);
        let mut opt: Box<dyn Optimizer> = if adam {
            Box::new(optim::AdamW::new(vec![p.clone()], 0.1).weight_decay(0.01))
        } else {
            Box::new(optim::Sgd::new(vec![p.clone()], 0.1).momentum(0.9))
        };
        for _ in 0..3 {
            let loss = p.mul(&p).unwrap().sum(vec![], false).unwrap();
            loss.backward().unwrap();
            opt.step().unwrap();
            opt.zero_grad();
        }
        p.to_vec_cast::<f64>().unwrap()
    };
    for adam in [false, true] {
        let want = run(DType::F32, adam);
        for (dtype, tol) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
            let got = run(dtype, adam);
            assert!(
                close(&got, &want, tol),
                "{dtype:?} adam {adam}: {got:?} vs {want:?}"
            );
            assert_ne!(
                got, start,
                "{dtype:?} adam {adam}: the parameter did not move"
            );
        }
    }
}
