//! The seeds' statements (OneFlow's global-tensor documents, ../shared/seeds/) as tests, run with
//! ranks as threads.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;

fn p01() -> Result<Placement> {
    Placement::new("cpu", [0, 1])
}

/// "x = flow.randn(4, 5, placement, sbp=split(0)); x.shape == (4, 5); x.to_local() is (2, 5)",
/// and x.numpy() is the concatenation of the two local tensors.
#[test]
fn randn_split0_has_global_shape_and_local_halves() -> Result<()> {
    let out = gflow::simulate(2, |_| {
        let x = Tensor::randn(&[4, 5], (&p01()?, Sbp::split(0)))?;
        let local = x.to_local()?;
        Ok((
            x.shape().to_vec(),
            local.shape().to_vec(),
            local.to_vec::<f32>()?,
            x.to_vec::<f32>()?,
        ))
    })?;
    for (shape, lshape, _, _) in &out {
        assert_eq!(shape, &vec![4, 5]);
        assert_eq!(lshape, &vec![2, 5]);
    }
    let concat: Vec<f32> = out[0].2.iter().chain(&out[1].2).copied().collect();
    assert_eq!(out[0].3, concat);
    assert_eq!(out[1].3, concat);
    assert_ne!(out[0].2, out[1].2, "the halves are different random data");
    Ok(())
}

/// "Two local tensors with the shape of (2,5) ... after to_global ... shape (4,5)";
/// is_local / is_global as printed in the seed.
#[test]
fn local_to_global_split_concatenates() -> Result<()> {
    let out = gflow::simulate(2, |env| {
        let x = Tensor::full(&[2, 5], env.rank() as f64, Device::Cpu)?;
        let g = x.to_global(&p01()?, Sbp::split(0))?;
        assert!(x.is_local() && !x.is_global());
        assert!(g.is_global() && !g.is_local());
        Ok((g.shape().to_vec(), g.to_vec::<f32>()?))
    })?;
    let mut want = vec![0.0f32; 10];
    want.extend(vec![1.0f32; 10]);
    assert_eq!(out[0], (vec![4, 5], want.clone()));
    assert_eq!(out[1], (vec![4, 5], want));
    Ok(())
}

/// "x_global (split(0)) to broadcast: shapes stay (4,5), the local component turns from a
/// slice into the complete data"; numpy() equals to_global(broadcast).to_local().
#[test]
fn split_to_broadcast_gathers_the_slices() -> Result<()> {
    gflow::simulate(2, |_| {
        let p = p01()?;
        let x = Tensor::randn(&[2, 5], Device::Cpu)?;
        let xg = x.to_global(&p, Sbp::split(0))?;
        let xb = xg.to_global(&p, Sbp::broadcast())?;
        assert_eq!(xg.shape(), &[4, 5]);
        assert_eq!(xb.shape(), &[4, 5]);
        assert_eq!(xg.to_local()?.shape(), &[2, 5]);
        assert_eq!(xb.to_local()?.shape(), &[4, 5]);
        assert_eq!(xb.to_local()?.to_vec::<f32>()?, xg.to_vec::<f32>()?);
        assert_eq!(
            xg.sbp().map(ToString::to_string).as_deref(),
            Some("(split(dim=0),)")
        );
        Ok(())
    })?;
    Ok(())
}

/// The 2D SBP seed: on [[0,1],[2,3]] with (broadcast, split(0)), a local (1,2,8) tensor per rank
/// gives a global (2,2,8) tensor; rank 2 holds rank 0's data and rank 3 rank 1's.
#[test]
fn two_d_sbp_broadcast_takes_the_first_rank_of_each_group() -> Result<()> {
    let out = gflow::simulate(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let x = Tensor::randn(&[1, 2, 8], Device::Cpu)?;
        let g = x.to_global(&p, [Sbp::broadcast(), Sbp::split(0)])?;
        let local = g.to_local()?;
        Ok((
            x.to_vec::<f32>()?,
            g.shape().to_vec(),
            local.shape().to_vec(),
            local.to_vec::<f32>()?,
        ))
    })?;
    for o in &out {
        assert_eq!(o.1, vec![2, 2, 8]);
        assert_eq!(o.2, vec![1, 2, 8]);
    }
    assert_eq!(out[0].3, out[0].0, "rank 0 keeps its own data");
    assert_eq!(out[1].3, out[1].0, "rank 1 keeps its own data");
    assert_eq!(out[2].3, out[0].0, "rank 2 ends up with rank 0's data");
    assert_eq!(out[3].3, out[1].0, "rank 3 ends up with rank 1's data");
    assert_ne!(out[0].0, out[1].0);
    Ok(())
}

/// The 2D SBP figure: (broadcast, split(0)) of [[1,2],[3,4]] — ranks (g, 0) hold [[1,2]] and
/// ranks (g, 1) hold [[3,4]], so each axis-0 pair is a broadcast and each row a split(0).
#[test]
fn two_d_sbp_figure() -> Result<()> {
    let out = gflow::simulate(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let a = Tensor::from_vec(
            vec![1.0f32, 2.0, 3.0, 4.0],
            &[2, 2],
            (&p, [Sbp::broadcast(), Sbp::split(0)]),
        )?;
        a.to_local()?.to_vec::<f32>()
    })?;
    assert_eq!(
        out,
        vec![
            vec![1.0, 2.0],
            vec![3.0, 4.0],
            vec![1.0, 2.0],
            vec![3.0, 4.0]
        ]
    );
    Ok(())
}

/// The global-view seed's SBP definitions on a 2-rank example: split(1) halves columns,
/// partial_sum components add up to the value.
#[test]
fn sbp_definitions() -> Result<()> {
    let out = gflow::simulate(2, |env| {
        let p = p01()?;
        let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let s1 = Tensor::from_vec(v.clone(), &[2, 4], (&p, Sbp::split(1)))?;
        let part = Tensor::from_vec(
            v.iter().map(|x| x * (env.rank() as f32 + 1.0)).collect(),
            &[2, 4],
            Device::Cpu,
        )?
        .to_global(&p, Sbp::partial_sum())?;
        Ok((s1.to_local()?.to_vec::<f32>()?, part.to_vec::<f32>()?))
    })?;
    assert_eq!(out[0].0, vec![0.0, 1.0, 4.0, 5.0]);
    assert_eq!(out[1].0, vec![2.0, 3.0, 6.0, 7.0]);
    let want: Vec<f32> = (0..8).map(|i| 3.0 * i as f32).collect();
    assert_eq!(out[0].1, want);
    Ok(())
}
