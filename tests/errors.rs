//! Bad input gets a typed error, never a panic or a hang.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::time::{Duration, Instant};

use gflow::prelude::*;
use gflow::{CommError, Error};

fn p01() -> Placement {
    Placement::new("cpu", [0, 1]).expect("valid")
}

/// Runs `f` on 2 simulated ranks and returns rank 0's error.
fn err2(f: impl Fn(usize) -> Result<()> + Sync) -> Error {
    match gflow::simulate(2, |env| f(env.rank())) {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn bad_placements() {
    assert!(matches!(
        Placement::new("cpu", Vec::<usize>::new()),
        Err(Error::EmptyPlacement)
    ));
    assert!(matches!(
        Placement::new("cpu", [1, 1]),
        Err(Error::DuplicateRank { rank: 1 })
    ));
    assert!(matches!(
        Placement::new("cpu", [[0, 1], [1, 2]]),
        Err(Error::DuplicateRank { rank: 1 })
    ));
    assert!(matches!(
        Placement::new("cpu", vec![vec![0, 1], vec![2, 3, 4]]),
        Err(Error::RaggedRanks { .. })
    ));
    assert!(matches!(
        Placement::new("xpu", [0]),
        Err(Error::UnknownDeviceType { .. })
    ));
    assert!(matches!(
        Placement::new("CPU", [0]),
        Err(Error::UnknownDeviceType { .. })
    ));
    assert!(matches!(
        Placement::new("cpu", Ranks::nd([2, 2], vec![0, 1, 2])),
        Err(Error::RanksShape { .. })
    ));
    assert!(matches!(
        Placement::new("cpu", Ranks::nd([0], vec![])),
        Err(Error::EmptyPlacement)
    ));
}

#[test]
fn sbp_count_must_match_the_placement_axes() {
    let e = err2(|_| {
        Tensor::zeros(&[4], (&Placement::new("cpu", [[0], [1]])?, Sbp::split(0))).map(drop)
    });
    assert!(
        matches!(
            e,
            Error::SbpAxesMismatch {
                sbp_axes: 1,
                placement_axes: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = err2(|_| Tensor::zeros(&[4], (&p01(), [Sbp::split(0), Sbp::broadcast()])).map(drop));
    assert!(matches!(e, Error::SbpAxesMismatch { .. }), "{e}");
    let e = err2(|_| {
        let x = Tensor::zeros(&[4], (&p01(), Sbp::split(0)))?;
        x.to_global(&p01(), [Sbp::broadcast(), Sbp::broadcast()])
            .map(drop)
    });
    assert!(matches!(e, Error::SbpAxesMismatch { .. }), "{e}");
    let e = err2(|_| {
        Tensor::zeros(&[2], Device::Cpu)?
            .to_global(&Placement::new("cpu", [[0, 1]])?, Sbp::split(0))
            .map(drop)
    });
    assert!(matches!(e, Error::SbpAxesMismatch { .. }), "{e}");
}

#[test]
fn split_dim_out_of_range() {
    let e = err2(|_| Tensor::zeros(&[4, 4], (&p01(), Sbp::split(2))).map(drop));
    assert!(
        matches!(e, Error::SplitDimOutOfRange { dim: 2, ndim: 2 }),
        "{e}"
    );
    let e = err2(|_| {
        Tensor::zeros(&[4], (&p01(), Sbp::split(0)))?
            .to_global(&p01(), Sbp::split(1))
            .map(drop)
    });
    assert!(
        matches!(e, Error::SplitDimOutOfRange { dim: 1, ndim: 1 }),
        "{e}"
    );
    let e = err2(|_| {
        Tensor::zeros(&[4], Device::Cpu)?
            .to_global(&p01(), Sbp::split(3))
            .map(drop)
    });
    assert!(
        matches!(e, Error::SplitDimOutOfRange { dim: 3, ndim: 1 }),
        "{e}"
    );
    let e = err2(|_| Tensor::zeros(&[], (&p01(), Sbp::split(0))).map(drop));
    assert!(
        matches!(e, Error::SplitDimOutOfRange { dim: 0, ndim: 0 }),
        "{e}"
    );
}

#[test]
fn rank_beyond_the_world() {
    let e =
        err2(|_| Tensor::zeros(&[4], (&Placement::new("cpu", [0, 2])?, Sbp::split(0))).map(drop));
    assert!(
        matches!(
            e,
            Error::RankOutOfWorld {
                rank: 2,
                world_size: 2
            }
        ),
        "{e}"
    );
    let e = err2(|_| {
        Tensor::zeros(&[4], (&p01(), Sbp::split(0)))?
            .to_global(&Placement::new("cpu", [5])?, Sbp::broadcast())
            .map(drop)
    });
    assert!(matches!(e, Error::RankOutOfWorld { rank: 5, .. }), "{e}");
    let e = err2(|_| {
        Tensor::zeros(&[4], Device::Cpu)?
            .to_global(&Placement::new("cpu", [0, 1, 2])?, Sbp::split(0))
            .map(drop)
    });
    assert!(matches!(e, Error::RankOutOfWorld { rank: 2, .. }), "{e}");
}

#[test]
fn data_shape_mismatch() {
    assert!(matches!(
        Tensor::from_vec(vec![1.0f32; 5], &[2, 3], Device::Cpu),
        Err(Error::DataShapeMismatch { len: 5, .. })
    ));
    let e = err2(|_| Tensor::from_vec(vec![1.0f32; 3], &[2, 2], (&p01(), Sbp::split(0))).map(drop));
    assert!(matches!(e, Error::DataShapeMismatch { len: 3, .. }), "{e}");
    assert!(matches!(
        Tensor::zeros(&[usize::MAX, 4], Device::Cpu),
        Err(Error::ShapeOverflow { .. })
    ));
}

#[test]
fn outside_the_placement() {
    let out = gflow::simulate(3, |_| {
        let x = Tensor::ones(&[4], (&p01(), Sbp::split(0)))?;
        Ok((
            x.to_local().err().map(|e| e.to_string()),
            x.to_vec_cast::<f32>()
                .err()
                .map(|e| matches!(e, Error::NotInPlacement { rank: 2, .. })),
        ))
    })
    .expect("no rank fails");
    assert_eq!(out[0], (None, None));
    assert_eq!(out[2].1, Some(true));
    assert!(
        out[2]
            .0
            .as_deref()
            .is_some_and(|m| m.contains("rank 2 is not in the placement"))
    );
}

#[test]
fn local_components_that_do_not_fit() {
    // non-split dims differ
    let e = err2(|r| {
        Tensor::zeros(&[2, 3 + r], Device::Cpu)?
            .to_global(&p01(), Sbp::split(0))
            .map(drop)
    });
    assert!(
        matches!(e, Error::LocalShapeMismatch { rank: 1, .. }),
        "{e}"
    );
    // different ranks of tensor
    let e = err2(|r| {
        Tensor::zeros(&vec![2; 1 + r], Device::Cpu)?
            .to_global(&p01(), Sbp::split(0))
            .map(drop)
    });
    assert!(
        matches!(e, Error::LocalShapeMismatch { rank: 1, .. }),
        "{e}"
    );
    // partial components must have one shape
    let e = err2(|r| {
        Tensor::zeros(&[2 + r], Device::Cpu)?
            .to_global(&p01(), Sbp::partial_sum())
            .map(drop)
    });
    assert!(matches!(e, Error::LocalShapeMismatch { .. }), "{e}");
    // so must broadcast components (the data is the first's, but every rank's gradient would
    // take its local shape)
    let e = err2(|r| {
        Tensor::zeros(&[3 - r, 2], Device::Cpu)?
            .to_global(&p01(), Sbp::broadcast())
            .map(drop)
    });
    assert!(
        matches!(e, Error::LocalShapeMismatch { rank: 1, .. }),
        "{e}"
    );
    // different dtypes
    let e = err2(|r| {
        let t = if r == 0 {
            Tensor::zeros(&[2], Device::Cpu)?
        } else {
            Tensor::from_vec(vec![0i64, 1], &[2], Device::Cpu)?
        };
        t.to_global(&p01(), Sbp::split(0)).map(drop)
    });
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
}

#[test]
fn misc_bad_arguments() {
    assert!(matches!(
        gflow::simulate(0, |_| Ok(())),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Tensor::randn_dtype(&[2], DType::I64, Device::Cpu),
        Err(Error::InvalidArgument { .. })
    ));
    let e =
        err2(|_| Tensor::zeros(&[2], (&Placement::new("cuda", [0, 1])?, Sbp::split(0))).map(drop));
    assert!(matches!(e, Error::BackendUnavailable { .. }), "{e}");
}

/// Ranks that issue different collectives get `Desync`, quickly, instead of corrupt data.
#[test]
fn desync_is_an_error_not_a_hang() {
    let t = Instant::now();
    let e = err2(|r| {
        let x = Tensor::ones(&[4, 4], (&p01(), Sbp::split(0)))?;
        let to = if r == 0 {
            Sbp::broadcast()
        } else {
            Sbp::split(1)
        };
        x.to_global(&p01(), to).map(drop)
    });
    assert!(matches!(e, Error::Comm(CommError::Desync { .. })), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// The same collective with the same byte count, issued on two groups in different orders
/// (rank 0: the world then the pair; rank 1: the pair then the world), is a `Desync` on both
/// ranks: every message names its group, so one group's data never lands in another's.
#[test]
fn collectives_of_different_groups_are_a_desync() {
    let got = std::sync::Mutex::new(vec![String::new(); 3]);
    let _ = gflow::simulate(3, |env| {
        let c = env.comm();
        let (world, pair) = ([0, 1, 2], [0, 1]);
        let me = [env.rank() as u8; 8];
        let on = |g: &[usize]| c.all_gather(g, &me, &vec![8; g.len()]).map(drop);
        let r = match env.rank() {
            0 => on(&world).and_then(|()| on(&pair)),
            1 => on(&pair).and_then(|()| on(&world)),
            _ => on(&world),
        };
        got.lock().unwrap()[env.rank()] = match &r {
            Err(CommError::Desync { .. }) => "desync".into(),
            Err(e) => format!("{e}"),
            Ok(()) => "ok".into(),
        };
        r.map_err(Error::from)
    });
    let got = got.into_inner().unwrap();
    assert_eq!(got[0], "desync", "rank 0: {}", got[0]);
    assert_eq!(got[1], "desync", "rank 1: {}", got[1]);
    assert_ne!(got[2], "ok", "rank 2 cannot complete without rank 1");
}

/// A rank that fails (or panics) is an error on the others at once.
#[test]
fn a_failed_rank_releases_its_peers() {
    let t = Instant::now();
    let e = gflow::simulate(3, |env| {
        if env.rank() == 1 {
            return Err(Error::InvalidArgument {
                op: "test",
                reason: "rank 1 gives up".into(),
            });
        }
        Tensor::ones(&[6], (&Placement::new("cpu", [0, 1, 2])?, Sbp::split(0)))?
            .to_vec_cast::<f32>()
            .map(drop)
    })
    .err();
    assert!(
        matches!(e, Some(Error::InvalidArgument { op: "test", .. })),
        "root cause first: {e:?}"
    );
    let e = gflow::simulate(2, |env| {
        if env.rank() == 0 {
            panic!("user code panicked");
        }
        Tensor::ones(&[6], (&p01(), Sbp::split(0)))?
            .to_vec_cast::<f32>()
            .map(drop)
    })
    .err();
    assert!(
        matches!(e, Some(Error::RankPanicked { rank: 0, .. })),
        "{e:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// A rank (a thread of `simulate`) that returns early, successfully, while its peers still
/// expect it in collectives: they fail at once naming it (`PeerGone`), well before the receive
/// deadline (60 s here), and `simulate` returns that error rather than hanging or succeeding.
#[test]
fn a_rank_that_returns_early_releases_its_peers() {
    let t = Instant::now();
    let e = gflow_core::env::simulate_with_timeout(3, Duration::from_secs(60), |env| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        for i in 0..10 {
            if env.rank() == 1 && i == 3 {
                return Ok(());
            }
            Tensor::ones(&[6], (&p, Sbp::split(0)))?.to_vec_cast::<f32>()?;
        }
        Ok(())
    })
    .err();
    assert!(
        matches!(e, Some(Error::Comm(CommError::PeerGone { peer: 1, .. }))),
        "{e:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
