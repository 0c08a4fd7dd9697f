//! Checkpoints across the layouts tests/checkpoint.rs leaves out: a 2x2 placement saves and 3
//! ranks load uneven splits; weighted placements on either side; dims shorter than the rank
//! count, empty and 0-d tensors; a placement that leaves out rank 0; partial targets of every
//! reduction (nested ones on integers included), every dtype on each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gflow::prelude::*;
use gflow::{StateDict, checkpoint};

/// A fresh directory for one test's checkpoints, removed when the test ends.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gflow-ckpt-lay-{name}-"))
        .tempdir()
        .unwrap()
}

/// The shapes saved: uneven, shorter than the rank count, empty, 0-d.
const SHAPES: [&[usize]; 5] = [&[7, 5], &[2, 3], &[0, 4], &[], &[1]];

/// The value of tensor `k` as small integers (exact in every dtype; 0/1 for Bool).
fn value(k: usize, n: usize, dtype: DType) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i * 7 + k * 3) % 11) as f64 - 5.0;
            if dtype == DType::Bool {
                f64::from(x > 0.0)
            } else {
                x
            }
        })
        .collect()
}

/// A tensor of a state dict: its name, the handle, and the value it must hold.
type Saved = (String, Tensor, Vec<f64>);

/// A state dict of every dtype and shape on `p`, each tensor with the SBP `sbp(shape)` gives,
/// holding its value (or zeros).
fn dict(
    p: &Placement,
    sbp: &dyn Fn(&[usize]) -> NdSbp,
    zero: bool,
) -> Result<(StateDict, Vec<Saved>)> {
    let mut sd = StateDict::new();
    let mut all = vec![];
    for (k, shape) in SHAPES.iter().enumerate() {
        for dtype in DType::ALL {
            let n: usize = shape.iter().product();
            let v = value(k, n, dtype);
            let data = if zero { vec![0.0; n] } else { v.clone() };
            // Built broadcast (so that from_vec's identities are not in play) and boxed.
            let b = NdSbp::broadcast(p.ndim());
            let t = Tensor::from_vec(data, shape, (p, b))?
                .to_dtype(dtype)?
                .to_global(p, sbp(shape))?;
            let name = format!("t{k}.{dtype}");
            sd.insert(&name, &t);
            all.push((name, t, v));
        }
    }
    sd.insert_value("step", 7);
    Ok((sd, all))
}

/// Checks every tensor's value (on ranks of its placement).
fn check(rank: usize, all: &[Saved], what: &str) -> Result<()> {
    for (name, t, v) in all {
        if t.placement().is_some_and(|p| p.contains(rank)) {
            let got = t.to_vec_cast::<f64>()?;
            assert_eq!(&got, v, "{what}: {name} ({:?})", t.sbp());
        }
    }
    Ok(())
}

/// The SBP that splits the first dimension (broadcast for a 0-d tensor) on each axis.
fn split_first(p: &Placement) -> impl Fn(&[usize]) -> NdSbp + '_ {
    move |shape: &[usize]| {
        let s = if shape.is_empty() {
            Sbp::broadcast()
        } else {
            Sbp::split(0)
        };
        NdSbp::from(vec![s; p.ndim()])
    }
}

#[test]
fn a_2x2_save_loads_on_three_ranks_weighted_and_on_a_subset() {
    let tmp = scratch("2x2");
    let root = tmp.path();
    let dir = root.join("c");
    gflow::simulate(4, |env| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let sbp = |shape: &[usize]| -> NdSbp {
            match shape.len() {
                0 => [Sbp::broadcast(), Sbp::broadcast()].into(),
                1 => [Sbp::split(0), Sbp::broadcast()].into(),
                _ => [Sbp::split(1), Sbp::split(0)].into(),
            }
        };
        let (sd, all) = dict(&p, &sbp, false)?;
        checkpoint::save(&sd, &dir)?;
        check(env.rank(), &all, "saved")
    })
    .unwrap();
    // Three ranks, uneven split of dim 1 (5 over 3) and of dims shorter than the rank count.
    gflow::simulate(3, |env| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let last = |shape: &[usize]| -> NdSbp {
            match shape.len() {
                0 => Sbp::broadcast().into(),
                n => Sbp::split(n - 1).into(),
            }
        };
        let (mut sd, all) = dict(&p, &last, true)?;
        checkpoint::load(&mut sd, &dir)?;
        assert_eq!(sd.value("step"), Some(7));
        check(env.rank(), &all, "3 ranks")
    })
    .unwrap();
    // Weighted: 3 ranks with weights 5:1:2.
    gflow::simulate(3, |env| {
        let p = Placement::new("cpu", [2, 0, 1])?.with_weights(&[5, 1, 2])?;
        let (mut sd, all) = dict(&p, &split_first(&p), true)?;
        checkpoint::load(&mut sd, &dir)?;
        check(env.rank(), &all, "weighted")
    })
    .unwrap();
    // A placement that leaves out rank 0 (rank 0 takes part in the collective load, holding
    // nothing) and a 1x3 2-D one.
    gflow::simulate(4, |env| {
        let p = Placement::new("cpu", [3, 1])?;
        let (mut sd, all) = dict(&p, &split_first(&p), true)?;
        checkpoint::load(&mut sd, &dir)?;
        check(env.rank(), &all, "ranks 3 and 1")?;
        let q = Placement::new("cpu", [[1, 2, 3]])?;
        let (mut sd, all) = dict(&q, &split_first(&q), true)?;
        checkpoint::load(&mut sd, &dir)?;
        check(env.rank(), &all, "1x3")
    })
    .unwrap();
}

#[test]
fn weighted_and_partial_saves_load_into_partial_targets() {
    let tmp = scratch("partial");
    let root = tmp.path();
    let dir = root.join("c");
    // Saved by a weighted placement that leaves out rank 0, from partial_max components.
    gflow::simulate(3, |env| {
        let p = Placement::new("cpu", [1, 2])?.with_weights(&[1, 3])?;
        let (sd, all) = dict(&p, &|_: &[usize]| Sbp::partial_max().into(), false)?;
        checkpoint::save(&sd, &dir)?;
        check(env.rank(), &all, "saved")
    })
    .unwrap();
    for sbp in [
        [Sbp::partial_sum(), Sbp::partial_sum()],
        [Sbp::partial_max(), Sbp::partial_sum()],
        [Sbp::partial_min(), Sbp::partial_sum()],
        [Sbp::partial_sum(), Sbp::partial_min()],
        [Sbp::broadcast(), Sbp::partial_max()],
    ] {
        gflow::simulate(4, |env| {
            let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
            let (mut sd, all) = dict(&p, &|_: &[usize]| sbp.into(), true)?;
            checkpoint::load(&mut sd, &dir)?;
            check(env.rank(), &all, &format!("into {sbp:?}"))
        })
        .unwrap();
    }
}

#[test]
fn one_rank_saves_and_many_load_and_back() {
    let tmp = scratch("1to3");
    let root = tmp.path();
    let (one, three) = (root.join("one"), root.join("three"));
    gflow::simulate(1, |_| {
        let p = Placement::new("cpu", [0])?;
        let (sd, _) = dict(&p, &split_first(&p), false)?;
        checkpoint::save(&sd, &one)
    })
    .unwrap();
    gflow::simulate(3, |env| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let (mut sd, all) = dict(&p, &split_first(&p), true)?;
        checkpoint::load(&mut sd, &one)?;
        check(env.rank(), &all, "1 -> 3")?;
        // Saved again by three, boxed to broadcast, loaded by one.
        checkpoint::save(&sd, &three)
    })
    .unwrap();
    gflow::simulate(1, |env| {
        let p = Placement::new("cpu", [0])?;
        let (mut sd, all) = dict(&p, &|_: &[usize]| Sbp::broadcast().into(), true)?;
        checkpoint::load(&mut sd, &three)?;
        check(env.rank(), &all, "3 -> 1")
    })
    .unwrap();
}

/// Optimizer state reshards too: Adam's moments and step counts saved by 2 ranks (parameters
/// split by rows) load into a fresh Adam on 3 ranks (parameters split by columns, and a
/// weighted placement), and the next step gives the same parameters as an uninterrupted run.
#[test]
fn optimizer_state_loads_into_another_layout() {
    let tmp = scratch("optim");
    let root = tmp.path();
    let dir = root.join("c");
    let w0: Vec<f32> = (0..12).map(|i| (i as f32 * 0.7).sin()).collect();
    let x0: Vec<f32> = (0..8).map(|i| (i as f32 * 0.3).cos()).collect();
    // Two steps, then a save, then a third step: the reference.
    let step = |w: &Tensor, x: &Tensor, opt: &mut dyn Optimizer| -> Result<()> {
        opt.zero_grad();
        let loss = x.matmul(&w.transpose(0, 1)?)?.tanh()?.sum(vec![], false)?;
        loss.backward()?;
        opt.step()
    };
    let want = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let w = Tensor::from_vec(w0.clone(), &[3, 4], (&p, Sbp::split(0)))?.set_requires_grad(true);
        let x = Tensor::from_vec(x0.clone(), &[2, 4], (&p, Sbp::broadcast()))?;
        let mut opt = optim::Adam::new(vec![w.clone()], 0.1);
        step(&w, &x, &mut opt)?;
        step(&w, &x, &mut opt)?;
        let mut sd = StateDict::new();
        sd.insert("w", &w);
        sd.insert_optimizer("opt", &opt);
        checkpoint::save(&sd, &dir)?;
        step(&w, &x, &mut opt)?;
        w.to_vec::<f32>()
    })
    .unwrap()
    .remove(0);
    for weighted in [false, true] {
        let got = gflow::simulate(3, |_| {
            let mut p = Placement::new("cpu", [2, 0, 1])?;
            if weighted {
                p = p.with_weights(&[1, 1, 3])?;
            }
            let w = Tensor::zeros(&[3, 4], (&p, Sbp::split(1)))?.set_requires_grad(true);
            let x = Tensor::from_vec(x0.clone(), &[2, 4], (&p, Sbp::broadcast()))?;
            let mut opt = optim::Adam::new(vec![w.clone()], 0.1);
            let mut sd = StateDict::new();
            sd.insert("w", &w);
            sd.insert_optimizer("opt", &opt);
            checkpoint::load(&mut sd, &dir)?;
            step(&w, &x, &mut opt)?;
            w.to_vec::<f32>()
        })
        .unwrap();
        for g in got {
            assert_eq!(g, want, "weighted: {weighted}");
        }
    }
}
