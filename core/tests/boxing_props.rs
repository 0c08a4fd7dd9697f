//! Property tests: boxing from any (placement, nd_sbp) to any other, over random shapes (dims
//! shorter than the rank count included) and 1-D/2-D/3-D placements, gives exactly the
//! single-device value, and every component matches the balanced splitter.
//!
//! The reference is computed here, independently of the library: components are cut by
//! brute-force index filtering, and partial components are random integer summands (or min/max
//! operands) built from the definition, so every comparison is exact.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::HashMap;

use gflow_core::boxing::{Dist, exec, plan::axis_search};
use gflow_core::{DType, Device, NdSbp, Placement, ReduceOp, Sbp, Tensor, simulate};
use proptest::prelude::*;

mod reference;
use reference::{Lcg, hierarchy_strategy, part, slab};

/// Every rank's component of value `v` under (placement, sbp), straight from the definitions.
fn decompose(
    v: &[f64],
    shape: &[usize],
    p: &Placement,
    sbp: &[Sbp],
    seed: u64,
) -> HashMap<usize, (Vec<f64>, Vec<usize>)> {
    let mut out = HashMap::new();
    let mut rng = Lcg(seed);
    fn rec(
        v: Vec<f64>,
        shape: Vec<usize>,
        p: &Placement,
        sbp: &[Sbp],
        prefix: &mut Vec<usize>,
        rng: &mut Lcg,
        out: &mut HashMap<usize, (Vec<f64>, Vec<usize>)>,
    ) {
        let a = prefix.len();
        if a == sbp.len() {
            out.insert(p.rank_at(prefix), (v, shape));
            return;
        }
        let n = p.hierarchy()[a];
        let children: Vec<(Vec<f64>, Vec<usize>)> = match sbp[a] {
            Sbp::Broadcast => (0..n).map(|_| (v.clone(), shape.clone())).collect(),
            Sbp::Split(d) => (0..n)
                .map(|c| slab(&v, &shape, d, part(shape[d], n, c)))
                .collect(),
            Sbp::Partial(op) => {
                let mut parts: Vec<Vec<f64>> = vec![v.clone(); n];
                for x in 0..v.len() {
                    for c in 1..n {
                        let r = rng.next(6) as f64;
                        match op {
                            ReduceOp::Sum => {
                                parts[c][x] = r - 2.0;
                                parts[0][x] -= r - 2.0;
                            }
                            ReduceOp::Max => parts[c][x] = v[x] - r,
                            ReduceOp::Min => parts[c][x] = v[x] + r,
                        }
                    }
                }
                parts.into_iter().map(|x| (x, shape.clone())).collect()
            }
        };
        // Broadcast replicas hold identical components all the way down: replay the same draws.
        let saved = rng.0;
        for (c, (cv, cs)) in children.into_iter().enumerate() {
            if sbp[a] == Sbp::Broadcast {
                rng.0 = saved;
            }
            prefix.push(c);
            rec(cv, cs, p, sbp, prefix, rng, out);
            prefix.pop();
        }
    }
    rec(
        v.to_vec(),
        shape.to_vec(),
        p,
        sbp,
        &mut vec![],
        &mut rng,
        &mut out,
    );
    out
}

#[derive(Debug, Clone)]
struct Layout {
    hierarchy: Vec<usize>,
    ranks: Vec<usize>,
    sbp: Vec<Sbp>,
}

impl Layout {
    fn placement(&self) -> Placement {
        Placement::new(
            "cpu",
            gflow_core::Ranks::nd(&self.hierarchy, self.ranks.clone()),
        )
        .expect("valid placement")
    }
}

fn sbp_strategy(ndim: usize) -> impl Strategy<Value = Sbp> {
    prop_oneof![
        (0..ndim).prop_map(Sbp::Split),
        Just(Sbp::Broadcast),
        Just(Sbp::partial_sum()),
        Just(Sbp::partial_max()),
        Just(Sbp::partial_min()),
    ]
}

/// A placement of 1 to 3 axes over a random subset of `world` ranks, and an SBP for it.
fn layout_strategy(world: usize, ndim: usize) -> impl Strategy<Value = Layout> {
    let hier = hierarchy_strategy(world);
    hier.prop_flat_map(move |h| {
        let k = h.len();
        let n: usize = h.iter().product();
        (
            Just(h),
            Just((0..world).collect::<Vec<_>>()).prop_shuffle(),
            proptest::collection::vec(sbp_strategy(ndim), k),
        )
            .prop_map(move |(h, ranks, sbp)| Layout {
                hierarchy: h,
                ranks: ranks[..n].to_vec(),
                sbp,
            })
    })
}

#[derive(Debug, Clone)]
struct Case {
    world: usize,
    shape: Vec<usize>,
    src: Layout,
    dst: Layout,
    same_placement: bool,
    seed: u64,
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        1..=8usize,
        proptest::collection::vec(0..=6usize, 1..=3),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_flat_map(|(world, shape, same, seed)| {
            let nd = shape.len();
            (
                layout_strategy(world, nd),
                layout_strategy(world, nd),
                proptest::collection::vec(sbp_strategy(nd), 3),
            )
                .prop_map(move |(src, mut dst, alt)| {
                    if same {
                        // Same placement, new SBP: exercises the per-axis planner.
                        dst = Layout {
                            sbp: alt[..src.hierarchy.len()].to_vec(),
                            ..src.clone()
                        };
                    }
                    Case {
                        world,
                        shape: shape.clone(),
                        src,
                        dst,
                        same_placement: same,
                        seed,
                    }
                })
        })
}

fn run_case(c: &Case) -> Result<(), String> {
    let n: usize = c.shape.iter().product();
    let mut rng = Lcg(c.seed);
    let value: Vec<f64> = (0..n).map(|_| rng.next(41) as f64 - 20.0).collect();
    let (sp, dp) = (c.src.placement(), c.dst.placement());
    let src_parts = decompose(&value, &c.shape, &sp, &c.src.sbp, c.seed ^ 1);
    let dst_parts = decompose(&value, &c.shape, &dp, &c.dst.sbp, c.seed ^ 2);
    let dst_has_partial = c.dst.sbp.iter().any(|s| matches!(s, Sbp::Partial(_)));
    let src_nd: NdSbp = c.src.sbp.clone().into();
    let dst_nd: NdSbp = c.dst.sbp.clone().into();
    simulate(c.world, |env| {
        let me = env.rank();
        let mine = src_parts
            .get(&me)
            .cloned()
            .unwrap_or((vec![], vec![0; c.shape.len()]));
        let local = Tensor::from_vec(mine.0.clone(), &mine.1, Device::Cpu)?;
        let x = local.to_global(&sp, src_nd.clone())?;
        assert_eq!(x.shape(), &c.shape[..], "local->global shape");
        if let Some((v, s)) = src_parts.get(&me) {
            let l = x.to_local()?;
            assert_eq!(
                l.shape(),
                &s[..],
                "component shape follows the balanced splitter"
            );
            assert_eq!(
                &l.to_vec_cast::<f64>()?,
                v,
                "local->global keeps the components"
            );
        }
        let y = x.to_global(&dp, dst_nd.clone())?;
        assert_eq!(y.shape(), &c.shape[..]);
        if let Some((v, s)) = dst_parts.get(&me) {
            assert_eq!(y.to_vec_cast::<f64>()?, value, "boxed value");
            if !dst_has_partial {
                let l = y.to_local()?;
                assert_eq!(l.shape(), &s[..], "boxed component shape");
                assert_eq!(&l.to_vec_cast::<f64>()?, v, "boxed component");
            }
        }
        if c.same_placement {
            // The per-axis route, forced, must be right too (the planner may prefer p2p).
            let src = Dist::new(sp.clone(), src_nd.clone());
            let dst = Dist::new(sp.clone(), dst_nd.clone());
            let plan = axis_search(&c.shape, 8, &sp, &src.nd_sbp, &dst.nd_sbp)
                .expect("a per-axis route exists");
            let data = x.to_local().ok().map(|l| l.to_host()).transpose()?;
            // Borrowed data is copied before in-place steps; owned data is reduced in place.
            let data = if c.shape.len().is_multiple_of(2) {
                data.as_ref().map(std::borrow::Cow::Borrowed)
            } else {
                data.map(std::borrow::Cow::Owned)
            };
            let out = exec::execute(&plan, &c.shape, DType::F64, data, env.comm())?;
            let z = Tensor::from_component(out.map(Into::into), &c.shape, DType::F64, dst)?;
            if sp.contains(me) {
                assert_eq!(z.to_vec_cast::<f64>()?, value, "per-axis route value");
            }
        }
        Ok(())
    })
    .map(|_| ())
    .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn boxing_any_to_any_equals_single_device(c in case_strategy()) {
        prop_assert_eq!(run_case(&c), Ok(()), "case {:?}", c);
    }
}

/// Hand-picked cases the random search might reach rarely: nested splits of one dim, mixed
/// partial ops on two axes, empty parts, 0-size tensors.
#[test]
fn hand_picked_layouts() {
    use Sbp::{Broadcast as B, Split as S};
    let ps = Sbp::partial_sum();
    let pm = Sbp::partial_max();
    let l = |h: &[usize], sbp: &[Sbp]| Layout {
        hierarchy: h.to_vec(),
        ranks: (0..h.iter().product()).collect(),
        sbp: sbp.to_vec(),
    };
    let cases = [
        (
            vec![7, 3],
            l(&[2, 2], &[S(0), S(0)]),
            l(&[2, 2], &[S(1), S(0)]),
        ),
        (
            vec![7, 3],
            l(&[2, 2], &[S(0), S(0)]),
            l(&[2, 2], &[S(0), S(1)]),
        ),
        (vec![5, 6], l(&[2, 3], &[pm, ps]), l(&[2, 3], &[B, S(1)])),
        (vec![5, 6], l(&[2, 3], &[ps, pm]), l(&[3, 2], &[S(0), pm])),
        (
            vec![3, 2],
            l(&[2, 2, 2], &[S(0), S(0), S(0)]),
            l(&[8], &[S(1)]),
        ),
        (vec![0, 4], l(&[2, 2], &[S(0), ps]), l(&[4], &[B])),
        (vec![2], l(&[4], &[S(0)]), l(&[2, 2], &[ps, S(0)])),
    ];
    for (i, (shape, src, dst)) in cases.into_iter().enumerate() {
        for same in [false, true] {
            if same && src.hierarchy != dst.hierarchy {
                continue;
            }
            let c = Case {
                world: 8,
                shape: shape.clone(),
                src: src.clone(),
                dst: dst.clone(),
                same_placement: same,
                seed: i as u64,
            };
            assert_eq!(run_case(&c), Ok(()), "{c:?}");
        }
    }
}
