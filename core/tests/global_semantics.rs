//! Global-tensor semantics at the edges: `to_global` from local tensors (broadcast takes the
//! first rank's data per group, partial components are operands, split sizes may differ),
//! refusals as typed errors on every rank (never a panic or a hang), metadata getters, and
//! `randn`'s placement invariance on weighted and uneven layouts.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{
    DType, Device, Error, NdSbp, Placement, Sbp, Tensor, comm_stats, manual_seed, reset_comm_stats,
    simulate,
};

fn cpu(ranks: impl gflow_core::IntoRanks) -> Placement {
    Placement::new("cpu", ranks).expect("placement")
}

/// Broadcast from local takes the first rank of each broadcast group, whatever values the
/// others hold, on 1-D and 2-D placements; a rank whose local shape differs is refused on every
/// rank (as OneFlow's `to_global` with its default `check_meta`): its gradient would take the
/// first rank's shape.
#[test]
fn broadcast_from_local_takes_each_groups_first_rank() {
    let refused = simulate(4, |env| {
        let shape: &[usize] = if env.rank() == 3 { &[3] } else { &[2] };
        let l = Tensor::from_vec(vec![1i64; shape[0]], shape, Device::Cpu)?;
        Ok(l.to_global(&cpu([2, 3, 0]), Sbp::broadcast()).err())
    })
    .expect("simulate");
    for (r, e) in refused.into_iter().enumerate() {
        assert!(
            matches!(e, Some(Error::LocalShapeMismatch { rank: 3, .. })),
            "rank {r}: {e:?}"
        );
    }
    let got = simulate(4, |env| {
        let r = env.rank() as i64;
        let l = Tensor::from_vec(vec![r * 10; 2], &[2], Device::Cpu)?;
        let one = l.to_global(&cpu([2, 3, 0]), Sbp::broadcast())?;
        // (broadcast, split(0)) on [[0, 1], [2, 3]]: ranks 0 and 1 are the first of their
        // columns' broadcast groups and hold the two halves.
        let l2 = Tensor::from_vec(vec![r, r], &[2], Device::Cpu)?;
        let two = l2.to_global(&cpu([[0, 1], [2, 3]]), [Sbp::broadcast(), Sbp::split(0)])?;
        let a = if r == 1 {
            None
        } else {
            Some(one.to_vec::<i64>()?)
        };
        Ok((a, two.to_vec::<i64>()?))
    })
    .expect("simulate");
    for (r, (a, two)) in got.into_iter().enumerate() {
        if r != 1 {
            assert_eq!(a, Some(vec![20, 20]), "rank {r}");
        }
        assert_eq!(two, vec![0, 0, 1, 1], "rank {r}");
    }
}

/// Partial components from local tensors are the operands: the value is their sum (min, max),
/// for floats, integers and Bool; uneven split components concatenate and are rebalanced.
#[test]
fn partial_and_uneven_split_from_local() {
    let got = simulate(3, |env| {
        let r = env.rank() as i64;
        let p = cpu([0, 1, 2]);
        let ints = Tensor::from_vec(vec![r, -r, 2 * r], &[3], Device::Cpu)?;
        let sum = ints.to_global(&p, Sbp::partial_sum())?.to_vec::<i64>()?;
        let min = ints.to_global(&p, Sbp::partial_min())?.to_vec::<i64>()?;
        let max = ints.to_global(&p, Sbp::partial_max())?.to_vec::<i64>()?;
        let bools = Tensor::from_vec(vec![r == 1, r != 5, false], &[3], Device::Cpu)?;
        let any = bools.to_global(&p, Sbp::partial_max())?.to_vec::<bool>()?;
        let all = bools.to_global(&p, Sbp::partial_min())?.to_vec::<bool>()?;
        // Uneven: rank r holds r + 1 rows (1, 2, 3): 6 rows, rebalanced to 2 each.
        let rows = (r + 1) as usize;
        let l = Tensor::from_vec(vec![r as f32; rows * 2], &[rows, 2], Device::Cpu)?;
        let g = l.to_global(&p, Sbp::split(0))?;
        let comp = g.to_local()?.shape().to_vec();
        // An empty component on rank 1 (0 rows) is allowed too.
        let e = if r == 1 { 0 } else { 1 };
        let le = Tensor::from_vec(vec![r as f32; e], &[e], Device::Cpu)?;
        let ge = le.to_global(&p, Sbp::split(0))?.to_vec::<f32>()?;
        Ok((
            sum,
            min,
            max,
            any,
            all,
            g.shape().to_vec(),
            comp,
            g.to_vec::<f32>()?,
            ge,
        ))
    })
    .expect("simulate");
    for (sum, min, max, any, all, shape, comp, v, ge) in got {
        assert_eq!(sum, vec![3, -3, 6]);
        assert_eq!(min, vec![0, -2, 0]);
        assert_eq!(max, vec![2, 0, 4]);
        assert_eq!(any, vec![true, true, false]);
        assert_eq!(all, vec![false, true, false]);
        assert_eq!(shape, vec![6, 2]);
        assert_eq!(comp, vec![2, 2]);
        let want: Vec<f32> = [0.0, 1.0, 1.0, 2.0, 2.0, 2.0]
            .iter()
            .flat_map(|&x| [x, x])
            .collect();
        assert_eq!(v, want);
        assert_eq!(ge, vec![0.0, 2.0]);
    }
}

/// What is refused is a typed error on every rank, and the ranks stay in step afterwards.
#[test]
fn refusals_are_typed_errors_on_every_rank() {
    let got = simulate(3, |env| {
        let r = env.rank();
        let p = cpu([0, 1, 2]);
        let mut errs = vec![];
        // Split components whose other dims differ.
        let cols = if r == 2 { 3 } else { 2 };
        let l = Tensor::from_vec(vec![1.0f32; cols], &[1, cols], Device::Cpu)?;
        errs.push(l.to_global(&p, Sbp::split(0)).err());
        // Components of different dtypes.
        let l = if r == 1 {
            Tensor::from_vec(vec![1i64], &[1], Device::Cpu)?
        } else {
            Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu)?
        };
        errs.push(l.to_global(&p, Sbp::split(0)).err());
        // Components of different ranks (number of dims).
        let l = if r == 0 {
            Tensor::from_vec(vec![1.0f32], &[1, 1], Device::Cpu)?
        } else {
            Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu)?
        };
        errs.push(l.to_global(&p, Sbp::partial_sum()).err());
        // A split dim out of range, from local and from global.
        let l = Tensor::from_vec(vec![1.0f32; 2], &[2], Device::Cpu)?;
        errs.push(l.to_global(&p, Sbp::split(1)).err());
        let g = l.to_global(&p, Sbp::broadcast())?;
        errs.push(g.to_global(&p, Sbp::split(3)).err());
        // One SBP for a 2-D placement, and a rank outside the world.
        errs.push(g.to_global(&cpu([[0, 1, 2]]), Sbp::split(0)).err());
        errs.push(g.to_global(&cpu([0, 5]), Sbp::split(0)).err());
        // Still in step: a collective after the refusals.
        let ok = g.to_global(&p, Sbp::split(0))?.to_vec::<f32>()?;
        Ok((errs, ok))
    })
    .expect("simulate");
    for (r, (errs, ok)) in got.into_iter().enumerate() {
        assert_eq!(ok, vec![1.0, 1.0]);
        let kinds: Vec<String> = errs
            .iter()
            .map(|e| match e {
                Some(Error::LocalShapeMismatch { .. }) => "shape".into(),
                Some(Error::DTypeMismatch { .. }) => "dtype".into(),
                Some(Error::SplitDimOutOfRange { .. }) => "dim".into(),
                Some(Error::SbpAxesMismatch { .. }) => "axes".into(),
                Some(Error::RankOutOfWorld { .. }) => "world".into(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["shape", "dtype", "shape", "dim", "dim", "axes", "world"],
            "rank {r}"
        );
    }
}

/// Metadata: shape, SBP, placement, dtype, ndim of global and local tensors; `to_local`
/// outside the placement is `NotInPlacement`; nothing moves for either.
#[test]
fn metadata_getters_and_to_local() {
    simulate(3, |env| {
        let p = cpu([[2], [0]]);
        let sbp: NdSbp = [Sbp::split(1), Sbp::broadcast()].into();
        let x = Tensor::from_vec(vec![1i32; 10], &[2, 5], (&p, sbp.clone()))?;
        reset_comm_stats();
        assert!(x.is_global() && !x.is_local());
        assert_eq!(x.shape(), &[2, 5]);
        assert_eq!(x.ndim(), 2);
        assert_eq!(x.dtype(), DType::I32);
        assert_eq!(x.sbp(), Some(&sbp));
        assert_eq!(x.placement(), Some(&p));
        match x.to_local() {
            Ok(l) => {
                assert!(env.rank() != 1);
                assert!(l.is_local() && l.sbp().is_none() && l.placement().is_none());
                // (split(1), broadcast) on a 2x1 array: 5 columns over 2 rows of it.
                let want = if env.rank() == 2 { 3 } else { 2 };
                assert_eq!(l.shape(), &[2, want]);
            }
            Err(e) => {
                assert_eq!(env.rank(), 1);
                assert!(matches!(e, Error::NotInPlacement { rank: 1, .. }), "{e:?}");
            }
        }
        let s = comm_stats();
        assert_eq!((s.bytes_sent, s.bytes_received, s.collectives), (0, 0, 0));
        Ok(())
    })
    .expect("simulate");
}

/// `randn`, `randint` and `linspace` on weighted and uneven layouts give the same values as on
/// one rank.
#[test]
fn creation_is_invariant_on_weighted_and_uneven_layouts() {
    type Made = (Vec<f32>, Vec<i64>, Vec<f32>);
    // Every rank makes the tensors (each draws from the same random stream); members read them.
    let make = |target: (&Placement, NdSbp), member: bool| -> gflow_core::Result<Option<Made>> {
        manual_seed(7);
        let normal = Tensor::randn(&[5, 3], (target.0, target.1.clone()))?;
        let ints = Tensor::randint(-50, 1000, &[5, 3], (target.0, target.1.clone()))?;
        let line = Tensor::linspace(-2.0, 3.0, 15, DType::F32, (target.0, first_axis(&target.1)))?;
        if !member {
            return Ok(None);
        }
        Ok(Some((normal.to_vec()?, ints.to_vec()?, line.to_vec()?)))
    };
    let reference = simulate(1, |_| make((&cpu([0]), Sbp::broadcast().into()), true))
        .expect("simulate")
        .remove(0)
        .expect("a member");
    let layouts: Vec<(Placement, NdSbp)> = vec![
        (
            cpu([0, 1, 2]).with_weights(&[1, 4, 2]).expect("weights"),
            Sbp::split(0).into(),
        ),
        (cpu([4, 3, 2, 1, 0]), Sbp::split(1).into()),
        (
            cpu([[0, 1, 2], [3, 4, 5]]),
            [Sbp::split(0), Sbp::split(0)].into(),
        ),
        (
            cpu([[0, 1, 2], [3, 4, 5]]),
            [Sbp::partial_min(), Sbp::split(1)].into(),
        ),
    ];
    for (p, sbp) in layouts {
        let out =
            simulate(6, |env| make((&p, sbp.clone()), p.contains(env.rank()))).expect("simulate");
        for v in out.into_iter().flatten() {
            assert_eq!(v, reference, "{p} {sbp}");
        }
    }
    // Every value of a small range is drawn, and only those.
    let (_, ints, _) = &reference;
    assert!(ints.iter().all(|v| (-50..1000).contains(v)), "{ints:?}");
    let few = simulate(1, |_| {
        Tensor::randint(0, 4, &[400], Device::Cpu)?.to_vec::<i64>()
    })
    .expect("simulate")
    .remove(0);
    let counts: Vec<usize> = (0..4)
        .map(|v| few.iter().filter(|&&x| x == v).count())
        .collect();
    assert!(counts.iter().all(|&c| (60..140).contains(&c)), "{counts:?}");
}

/// A 1-D layout's SBPs made fit for a 1-D tensor: split(1) becomes split(0).
fn first_axis(sbp: &NdSbp) -> NdSbp {
    sbp.as_slice()
        .iter()
        .map(|s| {
            if s.split_dim().is_some() {
                Sbp::split(0)
            } else {
                *s
            }
        })
        .collect::<Vec<_>>()
        .into()
}

/// `linspace` as PyTorch: both ends exact, the halves counted from either end in f32, one
/// step, and `randint` refuses an empty or too wide range.
#[test]
fn linspace_and_randint_edges() {
    simulate(1, |_| {
        let v = |start, end, steps| {
            Tensor::linspace(start, end, steps, DType::F32, Device::Cpu)?.to_vec::<f32>()
        };
        assert_eq!(v(0.0, 1.0, 5)?, [0.0, 0.25, 0.5, 0.75, 1.0]);
        // PyTorch 2.15's values of torch.linspace(-2, 3, 15) (shortest f32 digits).
        assert_eq!(v(-1.0, 1.0, 4)?, [-1.0, -0.333_333_3, 0.333_333_3, 1.0]);
        let torch = [
            -2.0,
            -1.642_857_1,
            -1.285_714_3,
            -0.928_571_4,
            -0.571_428_54,
            -0.214_285_67,
            0.142_857_2,
            0.499_999_94,
            0.857_142_8,
            1.214_285_6,
            1.571_428_5,
            1.928_571_5,
            2.285_714_1,
            2.642_857,
            3.0,
        ];
        assert_eq!(v(-2.0, 3.0, 15)?, torch);
        assert_eq!(v(3.0, 7.0, 1)?, [3.0]);
        assert_eq!(v(3.0, 7.0, 0)?, Vec::<f32>::new());
        let f64s = Tensor::linspace(0.0, 1.0, 3, DType::F64, Device::Cpu)?.to_vec::<f64>()?;
        assert_eq!(f64s, [0.0, 0.5, 1.0]);
        for (low, high) in [(3, 3), (5, 2), (0, (1 << 32) + 1)] {
            let e = Tensor::randint(low, high, &[2], Device::Cpu).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { op: "randint", .. }),
                "{e}"
            );
        }
        let wide = Tensor::randint(i64::MIN, i64::MIN + (1 << 32), &[64], Device::Cpu)?;
        assert!(
            wide.to_vec::<i64>()?
                .iter()
                .all(|&x| x < i64::MIN + (1 << 32))
        );
        Ok(())
    })
    .expect("simulate");
}

/// `to_global` to the layout a tensor already has moves nothing and gives back the same
/// storage (as OneFlow and DTensor give back the tensor itself): a write through the result is
/// seen through the original, and gradients flow through it as the identity.
#[test]
fn to_global_to_the_same_layout_shares_the_tensor() {
    let out = simulate(2, |_| {
        let p = cpu([0, 1]);
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4], (&p, Sbp::split(0)))?
            .set_requires_grad(true);
        reset_comm_stats();
        let y = x.to_global(&p, Sbp::split(0))?;
        let moved = comm_stats().bytes_sent + comm_stats().collectives;
        (&y * &y)?.sum(vec![], false)?.backward()?;
        let grad = x.grad().unwrap().to_vec::<f32>()?;
        let ones = Tensor::ones(&[4], (&p, Sbp::split(0)))?;
        gflow_core::state_dict::assign(&y.detach(), &ones)?;
        Ok((moved, grad, x.to_vec::<f32>()?))
    })
    .unwrap();
    for (moved, grad, x) in out {
        assert_eq!(moved, 0);
        assert_eq!(grad, [2.0, 4.0, 6.0, 8.0]);
        assert_eq!(
            x, [1.0; 4],
            "a write through the result is seen through the original"
        );
    }
}

/// Boxing outputs of a megabyte and more reuse the buffers of dropped outputs without zeroing
/// them first: every conversion still writes every element of its output, round after round
/// of new values (all-gather, all-to-all, all-reduce and reduce-scatter outputs).
#[test]
fn recycled_boxing_outputs_hold_only_new_values() {
    let (rows, cols) = (1024usize, 512usize);
    let out = simulate(2, move |env| {
        let p = cpu([0, 1]);
        let summand = env.rank() as f32 + 1.0;
        let mut wrong = vec![];
        for round in 0..3 {
            let full: Vec<f32> = (0..rows * cols)
                .map(|i| (i % 1013) as f32 + 7.0 * round as f32)
                .collect();
            let s0 = Tensor::from_vec(full.clone(), &[rows, cols], (&p, Sbp::split(0)))?;
            let local = Tensor::from_vec(
                full.iter().map(|x| x * summand).collect::<Vec<f32>>(),
                &[rows, cols],
                Device::Cpu,
            )?;
            let partial = local.to_global(&p, Sbp::partial_sum())?;
            let summed: Vec<f32> = full.iter().map(|x| x * 3.0).collect();
            for (what, got, want) in [
                ("s0_to_b", s0.to_global(&p, Sbp::broadcast())?, &full),
                ("s0_to_s1", s0.to_global(&p, Sbp::split(1))?, &full),
                ("p_to_b", partial.to_global(&p, Sbp::broadcast())?, &summed),
                ("p_to_s0", partial.to_global(&p, Sbp::split(0))?, &summed),
            ] {
                if got.to_vec::<f32>()? != *want {
                    wrong.push(format!("{what} in round {round}"));
                }
            }
        }
        Ok(wrong)
    })
    .unwrap();
    for wrong in out {
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}

/// Optimizers refuse a parameter with a `partial_max`/`partial_min` SBP on every rank (its
/// components hold -inf/inf where another rank holds the value: an update would make NaN),
/// and step a `partial_sum` one as its value (the update is linear).
#[test]
fn optimizers_refuse_partial_extrema() {
    use gflow_core::optim::{Adagrad, RmsProp, Sgd};
    let got = simulate(2, |_| {
        let p = cpu([0, 1]);
        let mut refused = vec![];
        for sbp in [Sbp::partial_max(), Sbp::partial_min()] {
            let make = || -> gflow_core::Result<Tensor> {
                let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?
                    .to_global(&p, Sbp::broadcast())?
                    .to_global(&p, sbp)?
                    .detach()
                    .set_requires_grad(true);
                w.mul(&w)?.sum(vec![], false)?.backward()?;
                Ok(w)
            };
            let w = make()?;
            refused.push(Sgd::new(vec![w.clone()], 0.1).step().err());
            refused.push(RmsProp::new(vec![w.clone()], 0.1).step().err());
            refused.push(Adagrad::new(vec![w], 0.1).step().err());
        }
        let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?
            .to_global(&p, Sbp::broadcast())?
            .to_global(&p, Sbp::partial_sum())?
            .detach()
            .set_requires_grad(true);
        w.mul(&w)?.sum(vec![], false)?.backward()?;
        Sgd::new(vec![w.clone()], 0.1).step()?;
        Ok((refused, w.to_vec::<f32>()?))
    })
    .expect("simulate");
    for (refused, stepped) in got {
        for e in refused {
            assert!(matches!(e, Some(Error::InvalidArgument { .. })), "{e:?}");
        }
        assert_eq!(stepped, vec![0.8, 1.6]);
    }
}
