//! The seeds' statements (OneFlow's global-tensor documents, ../shared/seeds/) as tests, run with
//! ranks as threads and again as processes over shared memory and over QUIC.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::prelude::*;

mod common;

fn p01() -> Result<Placement> {
    Placement::new("cpu", [0, 1])
}

/// "x = flow.randn(4, 5, placement, sbp=split(0)); x.shape == (4, 5); x.to_local() is (2, 5)",
/// and x.numpy() is the concatenation of the two local tensors.
#[test]
fn randn_split0_has_global_shape_and_local_halves() -> Result<()> {
    let out = common::world(2, |_| {
        let x = Tensor::randn(&[4, 5], (&p01()?, Sbp::split(0)))?;
        let local = x.to_local()?;
        Ok((
            x.shape().to_vec(),
            local.shape().to_vec(),
            local.to_vec_cast::<f32>()?,
            x.to_vec_cast::<f32>()?,
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
    let out = common::world(2, |env| {
        let x = Tensor::full(&[2, 5], env.rank() as f64, Device::Cpu)?;
        let g = x.to_global(&p01()?, Sbp::split(0))?;
        assert!(x.is_local() && !x.is_global());
        assert!(g.is_global() && !g.is_local());
        Ok((g.shape().to_vec(), g.to_vec_cast::<f32>()?))
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
    common::world(2, |_| {
        let p = p01()?;
        let x = Tensor::randn(&[2, 5], Device::Cpu)?;
        let xg = x.to_global(&p, Sbp::split(0))?;
        let xb = xg.to_global(&p, Sbp::broadcast())?;
        assert_eq!(xg.shape(), &[4, 5]);
        assert_eq!(xb.shape(), &[4, 5]);
        assert_eq!(xg.to_local()?.shape(), &[2, 5]);
        assert_eq!(xb.to_local()?.shape(), &[4, 5]);
        assert_eq!(
            xb.to_local()?.to_vec_cast::<f32>()?,
            xg.to_vec_cast::<f32>()?
        );
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
    let out = common::world(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let x = Tensor::randn(&[1, 2, 8], Device::Cpu)?;
        let g = x.to_global(&p, [Sbp::broadcast(), Sbp::split(0)])?;
        let local = g.to_local()?;
        Ok((
            x.to_vec_cast::<f32>()?,
            g.shape().to_vec(),
            local.shape().to_vec(),
            local.to_vec_cast::<f32>()?,
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
    let out = common::world(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let a = Tensor::from_vec(
            vec![1.0f32, 2.0, 3.0, 4.0],
            &[2, 2],
            (&p, [Sbp::broadcast(), Sbp::split(0)]),
        )?;
        a.to_local()?.to_vec_cast::<f32>()
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
    let out = common::world(2, |env| {
        let p = p01()?;
        let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let s1 = Tensor::from_vec(v.clone(), &[2, 4], (&p, Sbp::split(1)))?;
        let part = Tensor::from_vec(
            v.iter().map(|x| x * (env.rank() as f32 + 1.0)).collect(),
            &[2, 4],
            Device::Cpu,
        )?
        .to_global(&p, Sbp::partial_sum())?;
        Ok((
            s1.to_local()?.to_vec_cast::<f32>()?,
            part.to_vec_cast::<f32>()?,
        ))
    })?;
    assert_eq!(out[0].0, vec![0.0, 1.0, 4.0, 5.0]);
    assert_eq!(out[1].0, vec![2.0, 3.0, 6.0, 7.0]);
    let want: Vec<f32> = (0..8).map(|i| 3.0 * i as f32).collect();
    assert_eq!(out[0].1, want);
    Ok(())
}

/// The SBP-signature seed: matmul's output SBP as the seeds print it.
#[test]
fn matmul_signatures_as_the_seeds_say() -> Result<()> {
    let out = common::world(2, |_| {
        let p = p01()?;
        // data parallelism: split(0) x broadcast -> split(0)
        let x = Tensor::randn(&[4, 5], (&p, Sbp::split(0)))?;
        let w = Tensor::randn(&[5, 8], (&p, Sbp::broadcast()))?;
        let y = x.matmul(&w)?;
        // model parallelism: broadcast x split(1) -> split(1)
        let x2 = Tensor::randn(&[4, 5], (&p, Sbp::broadcast()))?;
        let w2 = Tensor::randn(&[5, 8], (&p, Sbp::split(1)))?;
        let y2 = x2.matmul(&w2)?;
        // split(1) x split(0) -> partial_sum
        let x3 = x2.to_global(&p, Sbp::split(1))?;
        let w3 = w.to_global(&p, Sbp::split(0))?;
        let y3 = x3.matmul(&w3)?;
        let reference = x2.to_vec_cast::<f32>()?;
        Ok((
            y.sbp().map(ToString::to_string),
            y.shape().to_vec(),
            y2.sbp().map(ToString::to_string),
            y3.sbp().map(ToString::to_string),
            y3.to_vec_cast::<f32>()?,
            reference,
            w.to_vec_cast::<f32>()?,
        ))
    })?;
    let (s1, shape, s2, s3, v3, x2, w) = out[0].clone();
    assert_eq!(s1.as_deref(), Some("(split(dim=0),)"));
    assert_eq!(shape, vec![4, 8]);
    assert_eq!(s2.as_deref(), Some("(split(dim=1),)"));
    assert_eq!(s3.as_deref(), Some("(partial_sum,)"));
    for i in 0..4 {
        for j in 0..8 {
            let want: f32 = (0..5).map(|l| x2[i * 5 + l] * w[l * 8 + j]).sum();
            assert!((v3[i * 8 + j] - want).abs() < 1e-4);
        }
    }
    Ok(())
}

/// The 2D SBP seed: (broadcast, split(0)) x (split(1), broadcast) -> (split(1), split(0)).
#[test]
fn two_d_matmul_signature() -> Result<()> {
    let out = common::world(4, |_| {
        let p = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let x = Tensor::randn(&[4, 6], (&p, [Sbp::broadcast(), Sbp::split(0)]))?;
        let w = Tensor::randn(&[6, 8], (&p, [Sbp::split(1), Sbp::broadcast()]))?;
        let y = x.matmul(&w)?;
        Ok((
            y.sbp().map(ToString::to_string),
            y.to_local()?.shape().to_vec(),
        ))
    })?;
    assert_eq!(out[0].0.as_deref(), Some("(split(dim=1), split(dim=0))"));
    assert_eq!(
        out.iter().map(|o| o.1.clone()).collect::<Vec<_>>(),
        vec![vec![2, 4]; 4]
    );
    Ok(())
}

/// The boxing seed: Y0 = A0 @ B0 on P0 = [0,1], moved to P1 = [2,3] as broadcast, then
/// Y2 = Y0 @ B1 with B1 split(1) on P1 — gives the single-device product.
#[test]
fn boxing_seed_two_placements() -> Result<()> {
    let out = common::world(4, |env| {
        let p0 = Placement::new("cpu", [0, 1])?;
        let p1 = Placement::new("cpu", [2, 3])?;
        gflow::manual_seed(3);
        let a0 = Tensor::randn(&[4, 5], (&p0, Sbp::split(0)))?;
        let b0 = Tensor::randn(&[5, 8], (&p0, Sbp::broadcast()))?;
        let y0 = a0.matmul(&b0)?.to_global(&p1, Sbp::broadcast())?;
        let b1 = Tensor::randn(&[8, 6], (&p1, Sbp::split(1)))?;
        let y2 = y0.matmul(&b1)?;
        // The same program on one rank, locally, from the same placement-invariant values.
        let on = |p: &Placement, t: &Tensor| -> Result<Option<Vec<f32>>> {
            if p.contains(env.rank()) {
                t.to_vec().map(Some)
            } else {
                Ok(None)
            }
        };
        Ok((
            y2.sbp().map(ToString::to_string),
            on(&p1, &y2)?,
            on(&p0, &a0)?,
            on(&p0, &b0)?,
            on(&p1, &b1)?,
        ))
    })?;
    let (a, b, b1) = (
        out[0].2.clone().expect("rank 0 in P0"),
        out[0].3.clone().expect("in P0"),
        out[2].4.clone().expect("rank 2 in P1"),
    );
    let ab: Vec<f32> = (0..4 * 8)
        .map(|ij| (0..5).map(|l| a[ij / 8 * 5 + l] * b[l * 8 + ij % 8]).sum())
        .collect();
    let want: Vec<f32> = (0..4 * 6)
        .map(|ij| {
            (0..8)
                .map(|l| ab[ij / 6 * 8 + l] * b1[l * 6 + ij % 6])
                .sum()
        })
        .collect();
    assert_eq!(out[2].0.as_deref(), Some("(split(dim=1),)"));
    for r in [2, 3] {
        let got = out[r].1.clone().expect("in P1");
        assert!(got.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-4));
    }
    Ok(())
}

/// Every test above again, as real processes over shared memory and over QUIC.
#[test]
fn as_processes_over_shared_memory_and_quic() {
    common::relaunch(&[
        ("randn_split0_has_global_shape_and_local_halves", 2),
        ("local_to_global_split_concatenates", 2),
        ("split_to_broadcast_gathers_the_slices", 2),
        ("two_d_sbp_broadcast_takes_the_first_rank_of_each_group", 4),
        ("two_d_sbp_figure", 4),
        ("sbp_definitions", 2),
        ("matmul_signatures_as_the_seeds_say", 2),
        ("two_d_matmul_signature", 4),
        ("boxing_seed_two_placements", 4),
    ]);
}
