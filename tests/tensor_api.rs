//! The API contract of docs/API.md for placements, SBPs and tensors.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;

#[test]
fn placement_accessors() -> Result<()> {
    let p = Placement::new("cuda", [[0, 1], [2, 3]])?;
    assert_eq!(p.device_type().as_str(), "cuda");
    assert!(p.device_type() == "cuda");
    assert_eq!(p.ranks(), &[0, 1, 2, 3]);
    assert_eq!(p.hierarchy(), &[2, 2]);
    assert!(p.contains(3) && !p.contains(4));
    let p3 = Placement::new("wgpu", vec![4, 5, 6, 7])?;
    assert_eq!(p3.hierarchy(), &[4]);
    let p4 = Placement::new("gpu", [0, 1])?;
    assert_eq!(p4.to_string(), "placement(type=\"gpu\", ranks=[0, 1])");
    Ok(())
}

#[test]
fn nd_sbp_conversions_and_display() {
    let a: NdSbp = Sbp::split(0).into();
    let b: NdSbp = [Sbp::broadcast(), Sbp::split(0)].into();
    let c: NdSbp = vec![Sbp::partial_sum(), Sbp::partial_min(), Sbp::partial_max()].into();
    assert_eq!(a.len(), 1);
    assert_eq!(b.to_string(), "(broadcast, split(dim=0))");
    assert_eq!(c.to_string(), "(partial_sum, partial_min, partial_max)");
}

/// The same seed gives the same global tensor on 1, 2, 3 and 8 ranks, under any SBP.
#[test]
fn randn_is_placement_invariant() -> Result<()> {
    let reference = gflow::simulate(1, |_| {
        gflow::manual_seed(42);
        let _first = Tensor::randn(&[3, 3], (&Placement::new("cpu", [0])?, Sbp::broadcast()))?;
        Tensor::randn(&[5, 7], (&Placement::new("cpu", [0])?, Sbp::broadcast()))?
            .to_vec_cast::<f32>()
    })?;
    let layouts: Vec<(usize, Placement, NdSbp)> = vec![
        (2, Placement::new("cpu", [0, 1])?, Sbp::split(0).into()),
        (2, Placement::new("cpu", [1, 0])?, Sbp::split(1).into()),
        (
            3,
            Placement::new("cpu", [0, 1, 2])?,
            Sbp::partial_sum().into(),
        ),
        (3, Placement::new("cpu", [2])?, Sbp::broadcast().into()),
        (
            8,
            Placement::new("cpu", [[0, 1, 2, 3], [4, 5, 6, 7]])?,
            [Sbp::split(1), Sbp::split(0)].into(),
        ),
        (
            8,
            Placement::new(
                "cpu",
                gflow::Ranks::nd([2, 2, 2], (0..8).collect::<Vec<_>>()),
            )?,
            [Sbp::split(0), Sbp::partial_max(), Sbp::split(0)].into(),
        ),
    ];
    for (n, p, sbp) in layouts {
        let out = gflow::simulate(n, |env| {
            gflow::manual_seed(42);
            let _first = Tensor::randn(&[3, 3], (&p, sbp.clone()))?;
            let x = Tensor::randn(&[5, 7], (&p, sbp.clone()))?;
            if p.contains(env.rank()) {
                x.to_vec_cast::<f32>().map(Some)
            } else {
                Ok(None)
            }
        })?;
        for v in out.into_iter().flatten() {
            assert_eq!(v, reference[0], "{n} ranks, {p}, {sbp}");
        }
    }
    Ok(())
}

#[test]
fn manual_seed_restarts_the_stream_and_local_randn_differs_per_rank() -> Result<()> {
    let out = gflow::simulate(2, |_| {
        gflow::manual_seed(7);
        let a = Tensor::randn(&[4], Device::Cpu)?.to_vec_cast::<f32>()?;
        gflow::manual_seed(7);
        let b = Tensor::randn(&[4], Device::Cpu)?.to_vec_cast::<f32>()?;
        assert_eq!(a, b);
        Ok(a)
    })?;
    assert_ne!(out[0], out[1]);
    Ok(())
}

#[test]
fn creation_functions() -> Result<()> {
    let out = gflow::simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let z = Tensor::zeros(&[5, 2], (&p, Sbp::split(0)))?;
        let o = Tensor::ones(&[2, 2], (&p, Sbp::broadcast()))?;
        let f = Tensor::full(&[2], 2.5, (&p, Sbp::partial_sum()))?;
        let a = Tensor::arange(5, (&p, Sbp::split(0)))?;
        let h = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
        assert_eq!(h.dtype(), DType::F64);
        assert_eq!(z.dtype(), DType::F32);
        Ok((
            z.to_local()?.shape().to_vec(),
            o.to_vec_cast::<f32>()?,
            f.to_vec_cast::<f32>()?,
            f.to_local()?.to_vec_cast::<f32>()?,
            a.to_local()?.to_vec_cast::<i64>()?,
            a.to_vec_cast::<f32>()?,
        ))
    })?;
    // 5 rows over 3 ranks: 2, 2, 1 (OneFlow's balanced splitter).
    assert_eq!(
        out.iter().map(|o| o.0.clone()).collect::<Vec<_>>(),
        vec![vec![2, 2], vec![2, 2], vec![1, 2]]
    );
    assert_eq!(out[2].1, vec![1.0; 4]);
    assert_eq!(out[1].2, vec![2.5, 2.5]);
    assert_eq!(
        out[0].3,
        vec![2.5, 2.5],
        "the first rank of a partial holds the value"
    );
    assert_eq!(out[1].3, vec![0.0, 0.0], "the others hold the identity");
    assert_eq!(
        out.iter().map(|o| o.4.clone()).collect::<Vec<_>>(),
        vec![vec![0, 1], vec![2, 3], vec![4]]
    );
    assert_eq!(out[0].5, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    Ok(())
}

/// Local -> global with uneven sizes: the sizes are exchanged and the result is rebalanced.
#[test]
fn uneven_local_sizes_concatenate_and_rebalance() -> Result<()> {
    let out = gflow::simulate(2, |env| {
        let rows = if env.rank() == 0 { 3 } else { 1 };
        let v: Vec<f32> = (0..rows * 2)
            .map(|i| (env.rank() * 100 + i) as f32)
            .collect();
        let g = Tensor::from_vec(v, &[rows, 2], Device::Cpu)?
            .to_global(&Placement::new("cpu", [0, 1])?, Sbp::split(0))?;
        Ok((
            g.shape().to_vec(),
            g.to_local()?.to_vec_cast::<f32>()?,
            g.to_vec_cast::<f32>()?,
        ))
    })?;
    assert_eq!(out[0].0, vec![4, 2]);
    assert_eq!(out[0].1, vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(out[1].1, vec![4.0, 5.0, 100.0, 101.0]);
    assert_eq!(out[1].2, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 100.0, 101.0]);
    Ok(())
}

/// Ranks outside a placement hold no component, and a cross-placement move (the boxing seed's
/// P0 = [0,1] -> P1 = [2,3]) involves them.
#[test]
fn cross_placement_and_ranks_outside() -> Result<()> {
    let out = gflow::simulate(4, |env| {
        let p0 = Placement::new("cpu", [0, 1])?;
        let p1 = Placement::new("cpu", [2, 3])?;
        gflow::manual_seed(1);
        let a = Tensor::randn(&[4, 5], (&p0, Sbp::split(0)))?;
        let b = a.to_global(&p1, Sbp::broadcast())?;
        let back = b.to_global(&p0, Sbp::split(1))?;
        let in0 = p0.contains(env.rank());
        assert_eq!(a.to_local().is_ok(), in0);
        let full_b = if in0 {
            None
        } else {
            Some(b.to_vec_cast::<f32>()?)
        };
        let full_a = if in0 {
            Some(back.to_vec_cast::<f32>()?)
        } else {
            None
        };
        Ok((full_a, full_b))
    })?;
    let a = out[0].0.clone();
    assert!(a.is_some());
    assert_eq!(out[2].1, a);
    assert_eq!(out[3].1, a);
    assert_eq!(out[1].0, a);
    Ok(())
}

#[test]
fn display_shows_placement_and_sbp() -> Result<()> {
    let out = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        Ok(Tensor::arange(4, (&p, Sbp::split(0)))?.to_string())
    })?;
    assert_eq!(
        out[0],
        "tensor([0.0000, 1.0000, 2.0000, 3.0000], placement=placement(type=\"cpu\", ranks=[0, 1]), sbp=(split(dim=0),), dtype=f32)"
    );
    Ok(())
}

#[test]
fn init_without_variables_is_a_world_of_one() -> Result<()> {
    let env = gflow::init()?;
    assert_eq!((env.rank(), env.world_size(), env.local_rank()), (0, 1, 0));
    let again = gflow::init()?;
    assert_eq!(again.rank(), 0);
    let x = Tensor::ones(&[2], (&Placement::new("cpu", [0])?, Sbp::split(0)))?;
    assert_eq!(x.to_vec_cast::<f32>()?, vec![1.0, 1.0]);
    Ok(())
}

#[test]
fn to_vec_of_another_element_type_is_a_dtype_mismatch_on_every_rank() {
    let got = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(vec![1.5f32, -2.0, 3.0, 4.0], &[4], (&p, Sbp::split(0)))?;
        let wrong = matches!(
            x.to_vec::<f64>(),
            Err(gflow::Error::DTypeMismatch {
                expected: DType::F32,
                got: DType::F64
            })
        );
        let b = x.to_dtype(DType::Bool)?;
        Ok((
            wrong,
            x.to_vec::<f32>()?,
            b.to_vec::<bool>()?,
            x.to_vec_cast::<i64>()?,
            matches!(b.to_vec::<i64>(), Err(gflow::Error::DTypeMismatch { .. })),
        ))
    })
    .unwrap();
    for (wrong, right, bools, cast, bytes) in got {
        assert!(wrong);
        assert_eq!(right, [1.5, -2.0, 3.0, 4.0]);
        assert_eq!(bools, [true; 4]);
        assert_eq!(cast, [1, -2, 3, 4]);
        assert!(bytes);
    }
}
