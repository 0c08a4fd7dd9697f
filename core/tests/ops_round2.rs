//! Round 2's dtypes and the signatures that matter at scale, against hand-worked values and the
//! single-device results: casts and promotion as PyTorch, Bool comparisons, argmax ties,
//! vocabulary-parallel lookups (partial sums), reshapes that keep a head split, softmax and
//! cross-entropy over a split class dim without gathering it.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, Error, Placement, Result, Sbp, Tensor, bf16, f16, simulate};

#[test]
fn casts_and_promotion_follow_pytorch() -> Result<()> {
    let x = Tensor::from_vec(vec![-1.7f64, -0.5, 0.0, 2.5, 3.9], &[5], Device::Cpu)?;
    assert_eq!(
        x.to_dtype(DType::I64)?.to_vec_cast::<i64>()?,
        vec![-1, 0, 0, 2, 3]
    );
    assert_eq!(
        x.to_dtype(DType::I32)?.to_vec_cast::<i32>()?,
        vec![-1, 0, 0, 2, 3]
    );
    assert_eq!(
        x.to_dtype(DType::Bool)?.to_vec_cast::<bool>()?,
        vec![true, true, false, true, true]
    );
    // 1 + 2^-11 is halfway between two f16 values: ties go to the even one (1.0).
    let t = Tensor::from_vec(
        vec![1.0f32 + 2f32.powi(-11), 65504.0 * 2.0],
        &[2],
        Device::Cpu,
    )?;
    let h = t.to_dtype(DType::F16)?;
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(
        h.to_vec_cast::<f16>()?,
        vec![f16::from_f32(1.0), f16::INFINITY]
    );
    assert_eq!(
        t.to_dtype(DType::BF16)?.to_vec_cast::<bf16>()?[0],
        bf16::from_f32(1.0)
    );
    // Integers to BF16 round through f32, as PyTorch 2.x does (its bits for these values,
    // recorded with torch.tensor(v, dtype=torch.int32).to(torch.bfloat16)).
    let big = Tensor::from_vec(
        vec![
            0x0080_8001i32,
            0x0101_0001,
            0x7fff_ffff,
            -0x0101_0001,
            33_685_505,
        ],
        &[5],
        Device::Cpu,
    )?;
    let bits: Vec<u16> = big
        .to_dtype(DType::BF16)?
        .to_vec_cast::<bf16>()?
        .iter()
        .map(|b| b.to_bits())
        .collect();
    assert_eq!(bits, vec![0x4b01, 0x4b80, 0x4f00, 0xcb80, 0x4c00]);
    let i = Tensor::from_vec(vec![1i32, 2], &[2], Device::Cpu)?;
    let f = Tensor::from_vec(
        vec![f16::from_f32(0.5), f16::from_f32(0.25)],
        &[2],
        Device::Cpu,
    )?;
    let b = Tensor::from_vec(vec![bf16::from_f32(1.0)], &[1], Device::Cpu)?;
    assert_eq!(i.add(&f)?.dtype(), DType::F16);
    assert_eq!(f.add(&b)?.dtype(), DType::F32);
    assert_eq!(i.add(&i)?.to_vec_cast::<i32>()?, vec![2, 4]);
    assert_eq!(i.div(&i)?.dtype(), DType::F32);
    let m = i.gt(&Tensor::from_vec(vec![1i64], &[1], Device::Cpu)?)?;
    assert_eq!(m.dtype(), DType::Bool);
    assert_eq!(m.to_vec_cast::<bool>()?, vec![false, true]);
    assert_eq!(m.sum(Vec::new(), false)?.dtype(), DType::I64);
    assert_eq!(m.sum(Vec::new(), false)?.to_vec_cast::<i64>()?, vec![1]);
    // 16-bit matmul accumulates in f32: 128 products of 1 + 2^-7 each give 129 (in bf16
    // arithmetic the sum would stall: 2 + 1.0078125 rounds to 3).
    let a = Tensor::full_dtype(&[1, 128], 1.0 + 2f64.powi(-7), DType::BF16, Device::Cpu)?;
    let ones = Tensor::full_dtype(&[128, 1], 1.0, DType::BF16, Device::Cpu)?;
    assert_eq!(a.matmul(&ones)?.to_vec_cast::<f64>()?, vec![129.0]);
    assert_eq!(a.sum(Vec::new(), false)?.to_vec_cast::<f64>()?, vec![129.0]);
    Ok(())
}

#[test]
fn argmax_takes_the_lowest_index_on_ties_also_across_ranks() -> Result<()> {
    let data = vec![1.0f64, 3.0, 3.0, 0.0, 5.0, 2.0, 5.0, 5.0];
    let out = simulate(4, |_| {
        let p = Placement::new("cpu", [0, 1, 2, 3])?;
        let x = Tensor::from_vec(data.clone(), &[2, 4], (&p, Sbp::split(1)))?;
        Ok((
            x.argmax(1, false)?.to_vec_cast::<i64>()?,
            x.argmin(1, true)?.to_vec_cast::<i64>()?,
            x.min(1, false)?.to_vec_cast::<f64>()?,
        ))
    })?;
    for (amax, amin, min) in out {
        assert_eq!(amax, vec![1, 0]);
        assert_eq!(amin, vec![3, 1]);
        assert_eq!(min, vec![0.0, 2.0]);
    }
    Ok(())
}

#[test]
fn vocabulary_parallel_lookup_is_a_partial_sum() -> Result<()> {
    let table: Vec<f64> = (0..15).map(f64::from).collect();
    let idx = vec![4i64, 0, 2, 4, 1, 3];
    let out = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let t = Tensor::from_vec(table.clone(), &[5, 3], (&p, Sbp::split(0)))?;
        let i = Tensor::from_vec(idx.clone(), &[2, 3], (&p, Sbp::broadcast()))?;
        let e = t.gather_rows(&i)?;
        Ok((
            e.sbp().cloned(),
            e.shape().to_vec(),
            e.to_vec_cast::<f64>()?,
        ))
    })?;
    let want: Vec<f64> = idx
        .iter()
        .flat_map(|&r| (0..3).map(move |c| (r * 3 + c) as f64))
        .collect();
    for (sbp, shape, vals) in out {
        assert_eq!(sbp, Some(Sbp::partial_sum().into()));
        assert_eq!(shape, vec![2, 3, 3]);
        assert_eq!(vals, want);
    }
    let bad = simulate(1, |_| {
        let t = Tensor::zeros(&[5, 3], Device::Cpu)?;
        t.gather_rows(&Tensor::from_vec(vec![5i64], &[1], Device::Cpu)?)
    });
    assert!(
        matches!(
            bad,
            Err(Error::IndexOutOfRange {
                index: 5,
                size: 5,
                ..
            })
        ),
        "{bad:?}"
    );
    Ok(())
}

#[test]
fn heads_split_reshape_attention_and_split_class_loss_stay_split() -> Result<()> {
    let (b, t, h, d, c) = (2, 3, 4, 2, 6);
    let x: Vec<f64> = (0..b * t * h * d)
        .map(|i| (i as f64 * 0.37).sin())
        .collect();
    let logits: Vec<f64> = (0..b * c).map(|i| (i as f64 * 0.71).cos() * 3.0).collect();
    let targets = vec![5i64, 2];
    let single = simulate(1, |_| {
        let q = Tensor::from_vec(x.clone(), &[b, t, h * d], Device::Cpu)?
            .reshape(&[b, t, h, d])?
            .permute(&[0, 2, 1, 3])?;
        let a = gflow_core::nn::functional::scaled_dot_product_attention(&q, &q, &q, None, true)?;
        let l = Tensor::from_vec(logits.clone(), &[b, c], Device::Cpu)?;
        let tg = Tensor::from_vec(targets.clone(), &[b], Device::Cpu)?;
        Ok((
            a.to_vec_cast::<f64>()?,
            l.softmax(1)?.to_vec_cast::<f64>()?,
            gflow_core::nn::functional::cross_entropy(&l, &tg)?.to_vec_cast::<f64>()?,
        ))
    })?
    .remove(0);
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(x.clone(), &[b, t, h * d], (&p, Sbp::split(2)))?;
        let heads = x.reshape(&[b, t, h, d])?;
        assert_eq!(
            heads.sbp(),
            Some(&Sbp::split(2).into()),
            "reshape kept the split"
        );
        let q = heads.permute(&[0, 2, 1, 3])?;
        assert_eq!(q.sbp(), Some(&Sbp::split(1).into()));
        let a = gflow_core::nn::functional::scaled_dot_product_attention(&q, &q, &q, None, true)?;
        assert_eq!(
            a.sbp(),
            Some(&Sbp::split(1).into()),
            "heads split in, heads split out"
        );
        let l = Tensor::from_vec(logits.clone(), &[b, c], (&p, Sbp::split(1)))?;
        let s = l.softmax(1)?;
        assert_eq!(
            s.sbp(),
            Some(&Sbp::split(1).into()),
            "softmax kept the class split"
        );
        let tg = Tensor::from_vec(targets.clone(), &[b], (&p, Sbp::broadcast()))?;
        let loss = gflow_core::nn::functional::cross_entropy(&l, &tg)?;
        Ok((
            a.to_vec_cast::<f64>()?,
            s.to_vec_cast::<f64>()?,
            loss.to_vec_cast::<f64>()?,
        ))
    })?;
    for (a, s, loss) in out {
        for (x, y) in a.iter().zip(&single.0).chain(s.iter().zip(&single.1)) {
            assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        }
        assert!((loss[0] - single.2[0]).abs() < 1e-12);
    }
    Ok(())
}

/// Megatron's attention from one fused q/k/v projection whose rows are ordered (head, q|k|v,
/// head_dim) and split over heads: reshape to heads, pick q, k and v, attend causally and join
/// the heads back, forward and backward, without moving a byte; and the same values as one
/// device.
#[test]
fn tensor_parallel_attention_from_a_head_ordered_projection_moves_nothing() {
    let (b, t, heads, hd) = (2usize, 5usize, 4usize, 3usize);
    let run = |ranks: usize| {
        simulate(ranks, |_| {
            let p = Placement::new("cpu", (0..ranks).collect::<Vec<_>>())?;
            gflow_core::manual_seed(7);
            let split = |shape: &[usize]| -> Result<Tensor> {
                Tensor::randn(shape, Device::Cpu)?
                    .to_global(&p, Sbp::broadcast())?
                    .to_global(&p, Sbp::split(2))
            };
            let qkv = split(&[b, t, heads * 3 * hd])?.set_requires_grad(true);
            let seed = split(&[b, t, heads * hd])?;
            gflow_core::reset_comm_stats();
            let h = qkv.reshape(&[b, t, heads, 3, hd])?;
            let part = |i: usize| h.narrow(3, i, 1)?.squeeze(3)?.transpose(1, 2);
            let y = gflow_core::nn::functional::scaled_dot_product_attention(
                &part(0)?,
                &part(1)?,
                &part(2)?,
                None,
                true,
            )?
            .transpose(1, 2)?
            .reshape(&[b, t, heads * hd])?;
            y.backward_with(&seed)?;
            let moved = gflow_core::comm_stats().bytes_sent;
            let sbp = y.sbp().map(|s| s.to_string());
            let grad = qkv.grad().expect("a gradient").to_vec_cast::<f32>()?;
            Ok((moved, sbp, y.to_vec_cast::<f32>()?, grad))
        })
        .unwrap()
    };
    let one = run(1).remove(0);
    for (bytes, sbp, y, grad) in run(2) {
        assert_eq!(bytes, 0, "tensor-parallel attention moved {bytes} bytes");
        assert_eq!(sbp.as_deref(), Some("(split(dim=2),)"));
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
        assert!(close(&y, &one.2) && close(&grad, &one.3));
    }
}

/// Attention's backward (the fused kernel's dq, dk, dv, which leave it in one buffer) with q,
/// k and v split on heads or on batch rows over 2 and 3 ranks (uneven), or broadcast, gives
/// the single-device gradients of the composed form (a float mask of zeros takes it), each
/// in its input's layout.
#[test]
fn attention_gradients_keep_the_heads_or_batch_split() -> Result<()> {
    let (b, h, tq, tk, d) = (3, 3, 5, 4, 2);
    let vals =
        |n: usize, s: f64| -> Vec<f64> { (0..n).map(|i| ((i as f64 + s) * 0.37).sin()).collect() };
    let (q, k, v) = (
        vals(b * h * tq * d, 1.0),
        vals(b * h * tk * d, 2.0),
        vals(b * h * tk * d, 3.0),
    );
    let w = vals(b * h * tq * d, 4.0);
    let grads = |q: &Tensor, k: &Tensor, v: &Tensor, w: &Tensor, mask: Option<&Tensor>| {
        let a = gflow_core::nn::functional::scaled_dot_product_attention(q, k, v, mask, false)?;
        a.mul(w)?.sum([0, 1, 2, 3], false)?.backward()?;
        [q, k, v]
            .iter()
            .map(|t| t.grad().expect("a gradient").to_vec_cast::<f64>())
            .collect::<Result<Vec<Vec<f64>>>>()
    };
    let leaf = |data: &[f64], shape: &[usize], to: Option<(&Placement, Sbp)>| -> Result<Tensor> {
        let t = match to {
            None => Tensor::from_vec(data.to_vec(), shape, Device::Cpu)?,
            Some((p, sbp)) => Tensor::from_vec(data.to_vec(), shape, (p, sbp))?,
        };
        Ok(t.set_requires_grad(true))
    };
    let (sq, sk) = ([b, h, tq, d], [b, h, tk, d]);
    let want = simulate(1, |_| {
        grads(
            &leaf(&q, &sq, None)?,
            &leaf(&k, &sk, None)?,
            &leaf(&v, &sk, None)?,
            &Tensor::from_vec(w.clone(), &sq, Device::Cpu)?,
            Some(&Tensor::zeros(&[tq, tk], Device::Cpu)?),
        )
    })?
    .remove(0);
    for ranks in [2, 3] {
        for sbp in [Sbp::split(0), Sbp::split(1), Sbp::broadcast()] {
            let got = simulate(ranks, |_| {
                let p = Placement::new("cpu", (0..ranks).collect::<Vec<_>>())?;
                let on = Some((&p, sbp));
                let (q, k, v) = (leaf(&q, &sq, on)?, leaf(&k, &sk, on)?, leaf(&v, &sk, on)?);
                let wt = Tensor::from_vec(w.clone(), &sq, (&p, sbp))?;
                let out = grads(&q, &k, &v, &wt, None)?;
                for t in [&q, &k, &v] {
                    assert_eq!(t.grad().expect("a gradient").sbp(), t.sbp(), "{sbp:?}");
                }
                Ok(out)
            })?;
            for rank in got {
                for (g, w) in rank.iter().zip(&want) {
                    for (x, y) in g.iter().zip(w) {
                        assert!((x - y).abs() < 1e-12, "{ranks} ranks, {sbp:?}: {x} vs {y}");
                    }
                }
            }
        }
    }
    Ok(())
}
