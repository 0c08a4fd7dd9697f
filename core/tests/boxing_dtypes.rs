//! Boxing of every dtype (F32 F64 F16 BF16 I64 I32 Bool) between every pair of SBPs on 1-D
//! placements of 1 to 5 ranks, 2-D placements (2x2, 2x3), weighted placements and other
//! placements (overlapping, disjoint), over uneven, short and empty shapes. Values must equal
//! the single-device value exactly (the test values are small integers, exact in every dtype).
//!
//! `boxing_props` covers any layout to any layout in f64; this file covers what is dtype
//! specific: the identities of `partial_*` for integers and booleans (nested ones included), the
//! f32 reduction of 16-bit sums, and the element size in every copy.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, NdSbp, Placement, Ranks, ReduceOp, Sbp, Tensor, simulate};
use proptest::prelude::*;

mod reference;
use reference::{Lcg, hierarchy_strategy, part, slab};

/// Operands of a partial value `v` over `n` members for `dtype`, from the definition: they
/// reduce (sum, min, max; for Bool a sum or max is "any", a min is "all") to `v` exactly.
fn operands(v: &[f64], n: usize, op: ReduceOp, dtype: DType, rng: &mut Lcg) -> Vec<Vec<f64>> {
    let mut parts = vec![v.to_vec(); n];
    for x in 0..v.len() {
        for part in parts.iter_mut().skip(1) {
            let r = rng.next(3) as f64;
            part[x] = match (dtype, op) {
                (DType::Bool, ReduceOp::Min) => f64::from(v[x] != 0.0 || r == 0.0),
                (DType::Bool, _) => f64::from(v[x] != 0.0 && r == 0.0),
                (_, ReduceOp::Sum) => 0.0,
                (_, ReduceOp::Max) => v[x] - r,
                (_, ReduceOp::Min) => v[x] + r,
            };
        }
        if op == ReduceOp::Sum && dtype != DType::Bool {
            // Nonzero summands that cancel: the first holds v minus the others.
            for c in 1..n {
                let r = rng.next(5) as f64 - 2.0;
                parts[c][x] = r;
                parts[0][x] -= r;
            }
        }
    }
    parts
}

/// Every rank's component of `v` under (placement, sbp), from the definitions.
fn decompose(
    v: &[f64],
    shape: &[usize],
    p: &Placement,
    sbp: &[Sbp],
    dtype: DType,
    seed: u64,
) -> Vec<(usize, Vec<f64>, Vec<usize>)> {
    #[allow(clippy::too_many_arguments)]
    fn rec(
        v: Vec<f64>,
        shape: Vec<usize>,
        p: &Placement,
        sbp: &[Sbp],
        dtype: DType,
        prefix: &mut Vec<usize>,
        rng: &mut Lcg,
        out: &mut Vec<(usize, Vec<f64>, Vec<usize>)>,
    ) {
        let a = prefix.len();
        if a == sbp.len() {
            out.push((p.rank_at(prefix), v, shape));
            return;
        }
        let n = p.hierarchy()[a];
        let children: Vec<(Vec<f64>, Vec<usize>)> = match sbp[a] {
            Sbp::Broadcast => (0..n).map(|_| (v.clone(), shape.clone())).collect(),
            Sbp::Split(d) => (0..n)
                .map(|c| {
                    let r = match p.weights() {
                        Some(_) => p.split_range(a, shape[d], c),
                        None => part(shape[d], n, c),
                    };
                    slab(&v, &shape, d, r)
                })
                .collect(),
            Sbp::Partial(op) => operands(&v, n, op, dtype, rng)
                .into_iter()
                .map(|x| (x, shape.clone()))
                .collect(),
        };
        let saved = rng.0;
        for (c, (cv, cs)) in children.into_iter().enumerate() {
            if sbp[a] == Sbp::Broadcast {
                rng.0 = saved;
            }
            prefix.push(c);
            rec(cv, cs, p, sbp, dtype, prefix, rng, out);
            prefix.pop();
        }
    }
    let mut out = vec![];
    rec(
        v.to_vec(),
        shape.to_vec(),
        p,
        sbp,
        dtype,
        &mut vec![],
        &mut Lcg(seed),
        &mut out,
    );
    out
}

/// A logical value of small integers (0/1 for Bool).
fn value(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            if dtype == DType::Bool {
                rng.next(2) as f64
            } else {
                rng.next(15) as f64 - 7.0
            }
        })
        .collect()
}

/// A local tensor of `dtype` holding `v`.
fn local(v: &[f64], shape: &[usize], dtype: DType) -> gflow_core::Result<Tensor> {
    typed(v, shape, Device::Cpu, dtype)
}

/// `Tensor::from_vec` with elements of `dtype` holding `v`.
fn typed(
    v: &[f64],
    shape: &[usize],
    target: impl gflow_core::IntoTarget,
    dtype: DType,
) -> gflow_core::Result<Tensor> {
    let v = v.iter().copied();
    match dtype {
        DType::F32 => Tensor::from_vec(v.map(|x| x as f32).collect(), shape, target),
        DType::F64 => Tensor::from_vec(v.collect(), shape, target),
        DType::F16 => Tensor::from_vec(v.map(gflow_core::f16::from_f64).collect(), shape, target),
        DType::BF16 => Tensor::from_vec(v.map(gflow_core::bf16::from_f64).collect(), shape, target),
        DType::I64 => Tensor::from_vec(v.map(|x| x as i64).collect(), shape, target),
        DType::I32 => Tensor::from_vec(v.map(|x| x as i32).collect(), shape, target),
        DType::Bool => Tensor::from_vec(v.map(|x| x != 0.0).collect(), shape, target),
        other => panic!("no test values for {other:?}"),
    }
}

/// The SBPs of one placement axis for a tensor of `ndim` dims.
fn axis_sbps(ndim: usize) -> Vec<Sbp> {
    let mut v: Vec<Sbp> = (0..ndim).map(Sbp::Split).collect();
    v.extend([
        Sbp::broadcast(),
        Sbp::partial_sum(),
        Sbp::partial_min(),
        Sbp::partial_max(),
    ]);
    v
}

/// Every nd SBP for `p`.
fn all_nd(p: &Placement, ndim: usize) -> Vec<Vec<Sbp>> {
    let mut out: Vec<Vec<Sbp>> = vec![vec![]];
    for _ in 0..p.ndim() {
        out = out
            .into_iter()
            .flat_map(|pre| {
                axis_sbps(ndim).into_iter().map(move |s| {
                    let mut v = pre.clone();
                    v.push(s);
                    v
                })
            })
            .collect();
    }
    out
}

/// Boxes from (`sp`, each source SBP) to (`dp`, each destination SBP) for every dtype and
/// shape, checking the value and (for layouts without partial axes) every component. With
/// `sample`, a deterministic sample of that many pairs per dtype and shape.
fn matrix(world: usize, sp: &Placement, dp: &Placement, shapes: &[Vec<usize>], sample: usize) {
    for (si, shape) in shapes.iter().enumerate() {
        let srcs = all_nd(sp, shape.len());
        let dsts = all_nd(dp, shape.len());
        let mut pairs: Vec<(Vec<Sbp>, Vec<Sbp>)> = vec![];
        for s in &srcs {
            for d in &dsts {
                pairs.push((s.clone(), d.clone()));
            }
        }
        if sample > 0 && pairs.len() > sample {
            let mut rng = Lcg(si as u64 + 17);
            let mut picked = vec![];
            for _ in 0..sample {
                picked.push(pairs.swap_remove(rng.next(pairs.len() as u64) as usize));
            }
            pairs = picked;
        }
        for dtype in DType::ALL {
            let n: usize = shape.iter().product();
            let v = value(n, dtype, 7 + si as u64);
            let cases: Vec<_> = pairs
                .iter()
                .enumerate()
                .map(|(k, (s, d))| {
                    (
                        s.clone(),
                        d.clone(),
                        decompose(&v, shape, sp, s, dtype, k as u64),
                        decompose(&v, shape, dp, d, dtype, !(k as u64)),
                    )
                })
                .collect();
            simulate(world, |env| {
                let me = env.rank();
                for (s, d, src_parts, dst_parts) in &cases {
                    let what = format!("{dtype:?} {shape:?} {sp} {s:?} -> {dp} {d:?}");
                    let mine = src_parts.iter().find(|c| c.0 == me);
                    let l = match mine {
                        Some((_, cv, cs)) => local(cv, cs, dtype)?,
                        None => local(&vec![0.0; n], shape, dtype)?,
                    };
                    let x = l.to_global(sp, NdSbp::from(s.clone()))?;
                    assert_eq!(x.shape(), &shape[..], "{what}");
                    let y = x.to_global(dp, NdSbp::from(d.clone()))?;
                    assert_eq!(y.dtype(), dtype, "{what}");
                    assert_eq!(y.shape(), &shape[..], "{what}");
                    assert_eq!(y.placement(), Some(dp), "{what}");
                    assert_eq!(y.sbp(), Some(&NdSbp::from(d.clone())), "{what}");
                    if let Some((_, dv, ds)) = dst_parts.iter().find(|c| c.0 == me) {
                        assert_eq!(y.to_vec_cast::<f64>()?, v, "value of {what}");
                        if !d.iter().any(|x| matches!(x, Sbp::Partial(_))) {
                            let c = y.to_local()?;
                            assert_eq!(c.dtype(), dtype, "{what}");
                            assert_eq!(c.shape(), &ds[..], "component shape of {what}");
                            assert_eq!(&c.to_vec_cast::<f64>()?, dv, "component of {what}");
                        }
                    } else {
                        assert!(y.to_local().is_err(), "{what}: no component outside");
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{dtype:?} {shape:?} {sp} -> {dp}: {e}"));
        }
    }
}

fn cpu(ranks: impl gflow_core::IntoRanks) -> Placement {
    Placement::new("cpu", ranks).expect("placement")
}

/// 1-D placements of 1 to 5 ranks, every SBP pair, uneven, empty and 0-d shapes.
#[test]
fn one_d_every_dtype_every_pair() {
    let shapes = [vec![7, 3], vec![2], vec![0, 3], vec![3, 1], vec![]];
    for n in 1..=5 {
        let p = cpu((0..n).collect::<Vec<_>>());
        matrix(n, &p, &p, &shapes, 0);
    }
}

/// 2-D placements (2x2, 2x3): a sample of the nd SBP pairs, nested partials of different
/// operations included.
#[test]
fn two_d_every_dtype() {
    let shapes = [vec![5, 3], vec![1, 7], vec![0, 2], vec![]];
    let p22 = cpu([[0, 1], [2, 3]]);
    matrix(4, &p22, &p22, &shapes, 160);
    let p23 = cpu([[0, 1, 2], [3, 4, 5]]);
    matrix(6, &p23, &p23, &shapes, 120);
}

/// Nested partial layouts of integers: an outer `partial_max`/`partial_min` over an inner
/// `partial_sum`. The ranks off the first row hold the outer identity; summing it over the inner
/// axis must not wrap around (`i64::MIN + i64::MIN` is 0), which would turn a negative maximum
/// into 0.
#[test]
fn nested_integer_partials_keep_their_identity() {
    let p = cpu([[0, 1], [2, 3]]);
    let out = simulate(4, |env| {
        let mut got = vec![];
        for dtype in [DType::I64, DType::I32, DType::F32, DType::Bool] {
            for outer in [Sbp::partial_max(), Sbp::partial_min()] {
                let v = if dtype == DType::Bool {
                    vec![1.0, 0.0, 1.0, 0.0]
                } else {
                    vec![-5.0, -1.0, 3.0, 0.0]
                };
                let sbp = NdSbp::from([outer, Sbp::partial_sum()]);
                // Made by from_vec, by boxing from broadcast, and boxed back to broadcast.
                let x = typed(&v, &[4], (&p, sbp.clone()), dtype)?;
                let b = local(&v, &[4], dtype)?.to_global(&p, [Sbp::broadcast(); 2])?;
                let y = b.to_global(&p, sbp.clone())?;
                let made =
                    typed(&v, &[4], (&p, [Sbp::broadcast(); 2]), dtype)?.to_global(&p, sbp)?;
                for t in [x, y, made] {
                    got.push((dtype, outer, t.to_vec_cast::<f64>()?, v.clone()));
                }
                // Another placement takes it too.
                let q = cpu([3, 0]);
                let z = b
                    .to_global(&p, [outer, Sbp::partial_sum()])?
                    .to_global(&q, Sbp::split(0))?;
                if q.contains(env.rank()) {
                    got.push((dtype, outer, z.to_vec_cast::<f64>()?, v.clone()));
                }
            }
        }
        Ok(got)
    })
    .expect("simulate");
    for rank in out {
        for (dtype, outer, got, want) in rank {
            assert_eq!(got, want, "{dtype:?} ({outer}, partial_sum)");
        }
    }
}

/// Identities of a partial tensor made by `from_vec` for integers and Bool: the value comes back.
#[test]
fn from_vec_partials_of_every_dtype() {
    let p = cpu([0, 1, 2]);
    simulate(3, |_| {
        for dtype in DType::ALL {
            for sbp in [Sbp::partial_sum(), Sbp::partial_min(), Sbp::partial_max()] {
                let v = vec![1.0, 0.0, -1.0, 1.0];
                let v = if dtype == DType::Bool {
                    v.iter().map(|x: &f64| x.abs()).collect()
                } else {
                    v
                };
                let x = local(&v, &[2, 2], dtype)?
                    .to_global(&p, Sbp::broadcast())?
                    .to_global(&p, sbp)?;
                assert_eq!(x.to_vec_cast::<f64>()?, v, "{dtype:?} {sbp}");
                let x = x.to_global(&p, Sbp::split(1))?;
                assert_eq!(x.to_vec_cast::<f64>()?, v, "{dtype:?} {sbp}");
            }
        }
        Ok(())
    })
    .expect("simulate");
}

/// Other placements: overlapping, disjoint, a subset, more ranks, weighted; every dtype.
#[test]
fn across_placements_every_dtype() {
    let shapes = [vec![5, 2], vec![1, 3], vec![0, 2], vec![]];
    let pairs = [
        (cpu([0, 1, 2]), cpu([1, 2, 3, 4])),
        (cpu([0, 1]), cpu([2, 3])),
        (cpu([3, 1, 0]), cpu([0])),
        (cpu([0, 1, 2, 3]), cpu([3, 2, 0, 1])),
        (cpu([0, 1, 2, 3]), cpu([[0, 1], [2, 3]])),
        (cpu([[0, 1], [2, 3]]), cpu([[3, 1], [2, 0]])),
        (cpu([4]), cpu([0, 2, 4])),
        (
            cpu([0, 1, 2]).with_weights(&[3, 1, 2]).expect("weights"),
            cpu([2, 1, 0]),
        ),
        (
            cpu(Ranks::nd([2, 2], vec![0, 1, 2, 3]).expect("ranks")),
            cpu([1, 2, 3]).with_weights(&[1, 3, 1]).expect("weights"),
        ),
    ];
    for (sp, dp) in &pairs {
        matrix(5, sp, dp, &shapes, 60);
    }
}

/// Weighted placements, 1-D and 2-D (marginal weights per axis), with themselves and with their
/// balanced twins: every SBP pair on the 1-D one, a sample on the 2-D one.
#[test]
fn weighted_placements_every_dtype() {
    let shapes = [vec![7, 3], vec![2, 5], vec![0, 1]];
    let w1 = cpu([0, 1, 2]).with_weights(&[5, 1, 2]).expect("weights");
    matrix(3, &w1, &w1, &shapes, 0);
    matrix(3, &w1, &w1.balanced(), &shapes, 80);
    let w2 = cpu([[0, 1], [2, 3]])
        .with_weights(&[1, 2, 3, 4])
        .expect("weights");
    matrix(4, &w2, &w2, &shapes, 120);
    matrix(4, &w2.balanced(), &w2, &shapes, 60);
}

/// `partial_sum` of F16/BF16 reduces in f32 and rounds once, on every route: all-reduce,
/// reduce-scatter, partial to partial, and to another placement. Summands 2048 + 1 + 1 (F16) or
/// 256 + 1 + 1 (BF16): rounding after each addition loses both ones (ties to even), one rounding
/// of the f32 sum keeps them.
#[test]
fn half_partial_sums_round_once() {
    for (dtype, big, want) in [(DType::F16, 2048.0, 2050.0), (DType::BF16, 256.0, 258.0)] {
        for (world, p) in [(3, cpu([0, 1, 2])), (4, cpu([[0, 1], [2, 3]]))] {
            let out = simulate(world, |env| {
                let r = env.rank();
                // Rank 0's summand is `big`, two others give 1, the rest 0; a 2-D placement
                // sums over both axes.
                let one = f64::from(u8::from(r == 1 || r == 2));
                let mine = vec![if r == 0 { big } else { one }; 4];
                let sbp = vec![Sbp::partial_sum(); p.ndim()];
                let x = local(&mine, &[4], dtype)?.to_global(&p, sbp)?;
                let b = vec![Sbp::broadcast(); p.ndim()];
                let s = vec![Sbp::split(0); p.ndim()];
                let mut pm = vec![Sbp::partial_max(); p.ndim()];
                pm[0] = Sbp::partial_max();
                let q = cpu([world - 1]);
                let mut got = vec![
                    x.to_global(&p, b)?.to_vec_cast::<f64>()?,
                    x.to_global(&p, s)?.to_vec_cast::<f64>()?,
                    x.to_global(&p, pm)?.to_vec_cast::<f64>()?,
                ];
                let moved = x.to_global(&q, Sbp::broadcast())?;
                // Partial to a partial of fewer operands: reduced where the operands land.
                let fewer = x.to_global(&q, Sbp::partial_sum())?;
                if q.contains(r) {
                    got.push(moved.to_vec_cast::<f64>()?);
                    got.push(fewer.to_vec_cast::<f64>()?);
                }
                Ok(got)
            })
            .expect("simulate");
            for rank in out {
                for got in rank {
                    assert_eq!(got, vec![want; 4], "{dtype:?} on {p}");
                }
            }
        }
    }
}

/// A random placement of 1 to 3 axes over a shuffled subset of `world` ranks, maybe weighted.
fn placement_strategy(world: usize) -> impl Strategy<Value = Placement> {
    let hier = hierarchy_strategy(world);
    (
        hier,
        Just((0..world).collect::<Vec<_>>()).prop_shuffle(),
        proptest::option::of(proptest::collection::vec(1..=4u32, 8)),
    )
        .prop_map(|(h, ranks, weights)| {
            let n: usize = h.iter().product();
            let p = cpu(Ranks::nd(&h, ranks[..n].to_vec()).expect("ranks"));
            match weights {
                Some(w) => p.with_weights(&w[..n]).expect("weights"),
                None => p,
            }
        })
}

fn sbp_strategy(ndim: usize) -> impl Strategy<Value = Sbp> {
    prop_oneof![
        (0..ndim.max(1)).prop_map(move |d| if ndim == 0 {
            Sbp::broadcast()
        } else {
            Sbp::split(d)
        }),
        Just(Sbp::broadcast()),
        Just(Sbp::partial_sum()),
        Just(Sbp::partial_max()),
        Just(Sbp::partial_min()),
    ]
}

/// One random case: world, dtype, shape, source and destination layouts, seed.
type RandomCase = (
    usize,
    DType,
    Vec<usize>,
    Placement,
    Vec<Sbp>,
    Placement,
    Vec<Sbp>,
    u64,
);

fn random_case() -> impl Strategy<Value = RandomCase> {
    (
        1..=6usize,
        proptest::sample::select(DType::ALL.to_vec()),
        proptest::collection::vec(0..=5usize, 0..=3),
        any::<u64>(),
    )
        .prop_flat_map(|(world, dtype, shape, seed)| {
            let nd = shape.len();
            (placement_strategy(world), placement_strategy(world)).prop_flat_map(move |(sp, dp)| {
                (
                    Just(world),
                    Just(dtype),
                    Just(shape.clone()),
                    proptest::collection::vec(sbp_strategy(nd), sp.ndim()),
                    proptest::collection::vec(sbp_strategy(nd), dp.ndim()),
                    Just(sp),
                    Just(dp),
                    Just(seed),
                )
                    .prop_map(|(w, d, s, ss, ds, sp, dp, seed)| (w, d, s, sp, ss, dp, ds, seed))
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any layout to any layout, any dtype, weighted or not: the single-device value.
    #[test]
    fn random_layouts_every_dtype((world, dtype, shape, sp, ss, dp, ds, seed) in random_case()) {
        let n: usize = shape.iter().product();
        let v = value(n, dtype, seed);
        let src_parts = decompose(&v, &shape, &sp, &ss, dtype, seed ^ 1);
        let out = simulate(world, |env| {
            let me = env.rank();
            let l = match src_parts.iter().find(|c| c.0 == me) {
                Some((_, cv, cs)) => local(cv, cs, dtype)?,
                None => local(&vec![0.0; n], &shape, dtype)?,
            };
            let x = l.to_global(&sp, NdSbp::from(ss.clone()))?;
            let y = x.to_global(&dp, NdSbp::from(ds.clone()))?;
            if dp.contains(me) {
                Ok(Some(y.to_vec_cast::<f64>()?))
            } else {
                Ok(None)
            }
        });
        let out = out.map_err(|e| TestCaseError::fail(e.to_string()))?;
        for got in out.into_iter().flatten() {
            prop_assert_eq!(&got, &v, "{:?} {:?} {} {:?} -> {} {:?}", dtype, shape, sp, ss, dp, ds);
        }
    }
}

/// Messages past the small-message schedules (ring and direct collectives, pipelined pieces)
/// with uneven and empty parts: a dimension of 2 over 5 ranks, and 7 rows over 3.
#[test]
fn large_uneven_messages() {
    for (world, shape) in [(5usize, vec![2usize, 150_000]), (3, vec![7, 60_000])] {
        let p = cpu((0..world).collect::<Vec<_>>());
        let n: usize = shape.iter().product();
        for dtype in [DType::F32, DType::BF16, DType::I64] {
            let v = value(n, dtype, 3);
            let parts = decompose(&v, &shape, &p, &[Sbp::partial_sum()], dtype, 5);
            simulate(world, |env| {
                let (_, cv, cs) = parts.iter().find(|c| c.0 == env.rank()).expect("member");
                let x = local(cv, cs, dtype)?.to_global(&p, Sbp::partial_sum())?;
                for sbp in [Sbp::split(0), Sbp::split(1), Sbp::broadcast()] {
                    let y = x.to_global(&p, sbp)?;
                    assert_eq!(y.to_vec_cast::<f64>()?, v, "{dtype:?} {shape:?} {sbp}");
                    let z = y
                        .to_global(&p, Sbp::split(0))?
                        .to_global(&p, Sbp::broadcast())?;
                    assert_eq!(z.to_vec_cast::<f64>()?, v, "{dtype:?} {shape:?} {sbp} back");
                }
                Ok(())
            })
            .expect("simulate");
        }
    }
}
