//! Weighted placements (`Placement::with_weights`): every split is proportional to the ranks'
//! weights by the largest remainder method, ties to the lower rank; boxing between weighted and
//! balanced layouts round-trips the data and moves only the boxes that change owner; a matmul on
//! a weighted split gives the single-device result; bad weights are typed errors.
//!
//! The reference splitter here is exact integer arithmetic (integer weights), independent of the
//! library's.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::boxing::{Dist, plan};
use gflow_core::{Device, Error, NdSbp, Placement, Sbp, Tensor, simulate};
use proptest::prelude::*;

/// Largest remainder sizes of `len` over integer `weights`, exactly: floors of `len * w / W`,
/// the rest one each by largest remainder, ties to the lower index.
fn sizes(len: usize, weights: &[u32]) -> Vec<usize> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let num: Vec<u64> = weights.iter().map(|&w| len as u64 * u64::from(w)).collect();
    let mut out: Vec<usize> = num.iter().map(|n| (n / total) as usize).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(num[i] % total), i));
    let left = len - out.iter().sum::<usize>();
    for &i in &order[..left] {
        out[i] += 1;
    }
    out
}

fn range(len: usize, weights: &[u32], i: usize) -> std::ops::Range<usize> {
    let s = sizes(len, weights);
    let start: usize = s[..i].iter().sum();
    start..start + s[i]
}

/// The elements of `v` (of `shape`) whose index along `d` is in `r`, row-major.
fn slab(v: &[f64], shape: &[usize], d: usize, r: &std::ops::Range<usize>) -> Vec<f64> {
    let inner: usize = shape[d + 1..].iter().product();
    if v.is_empty() {
        return vec![];
    }
    v.chunks(inner)
        .enumerate()
        .filter(|(k, _)| r.contains(&(k % shape[d])))
        .flat_map(|(_, c)| c.iter().copied())
        .collect()
}

fn weighted(n: usize, w: &[u32]) -> Placement {
    Placement::new("cpu", (0..n).collect::<Vec<_>>())
        .and_then(|p| p.with_weights(w))
        .expect("valid weights")
}

#[test]
fn split_sizes_are_largest_remainder() {
    assert_eq!(sizes(10, &[1, 3]), vec![3, 7]);
    let p = weighted(3, &[1, 1, 2]);
    let out = simulate(3, |env| {
        let v: Vec<f32> = (0..14).map(|x| x as f32).collect();
        let x = Tensor::from_vec(v, &[7, 2], (&p, Sbp::split(0)))?;
        Ok((env.rank(), x.to_local()?.to_vec_cast::<f32>()?))
    })
    .unwrap();
    // 7 rows over weights 1:1:2 -> quotas 1.75, 1.75, 3.5 -> 2, 2, 3
    assert_eq!(out[0].1, vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(out[1].1, vec![4.0, 5.0, 6.0, 7.0]);
    assert_eq!(out[2].1, (8..14).map(|x| x as f32).collect::<Vec<_>>());
    assert!(p.to_string().ends_with("weights=[1.0, 1.0, 2.0])"));
}

#[test]
fn bad_weights_are_typed_errors() {
    let p = Placement::new("cpu", [0, 1]).unwrap();
    for bad in [
        vec![1.0],
        vec![1.0, 2.0, 3.0],
        vec![1.0, 0.0],
        vec![-1.0, 2.0],
    ] {
        assert!(
            matches!(p.with_weights(&bad), Err(Error::InvalidArgument { .. })),
            "{bad:?}"
        );
    }
    assert!(p.with_weights(&[f64::NAN, 1.0]).is_err());
    assert!(p.with_weights(&[f64::INFINITY, 1.0]).is_err());
    let msg = p.with_weights(&[1, -2]).unwrap_err().to_string();
    assert!(msg.contains("weights[1]") && msg.contains("-2"), "{msg}");
    // A weighted placement is another layout than the balanced one over the same ranks.
    let w = p.with_weights(&[1, 3]).unwrap();
    assert_ne!(w, p);
    assert_eq!(w.balanced(), p);
}

#[test]
fn to_global_moves_only_what_changes_owner() {
    // 8 rows of 3 f32: balanced 4 | 4, weighted 1:3 -> 2 | 6; rows 2..4 go from rank 0 to 1.
    let p = Placement::new("cpu", [0, 1]).unwrap();
    let w = p.with_weights(&[1, 3]).unwrap();
    let src = Dist::new(p.clone(), Sbp::split(0).into());
    let dst = Dist::new(w.clone(), Sbp::split(0).into());
    assert_eq!(plan(&[8, 3], 4, &src, &dst).unwrap().cost_bytes, 2 * 3 * 4);
    assert_eq!(plan(&[8, 3], 4, &dst, &src).unwrap().cost_bytes, 2 * 3 * 4);
    // Splitting the other dim: every rank keeps its columns' overlap only.
    let dst1 = Dist::new(w, Sbp::split(1).into());
    let p1 = plan(&[8, 3], 4, &src, &dst1).unwrap();
    // columns 1:3 weights over 3 -> quotas .75, 2.25 -> 1 | 2; rank 0 needs rows 4..8 of
    // column 0 (4 elements), rank 1 rows 0..4 of columns 1..3 (8 elements)
    assert_eq!(p1.cost_bytes, (4 + 8) * 4);
}

#[test]
fn weighted_split_matmul_is_the_single_device_product() {
    let a: Vec<f64> = (0..35).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
    let b: Vec<f64> = (0..20).map(|i| ((i * 5) % 9) as f64 - 4.0).collect();
    let want = {
        let x = Tensor::from_vec(a.clone(), &[7, 5], Device::Cpu).unwrap();
        let y = Tensor::from_vec(b.clone(), &[5, 4], Device::Cpu).unwrap();
        x.matmul(&y).unwrap().to_vec_cast::<f64>().unwrap()
    };
    let p = weighted(3, &[3, 1, 2]);
    let got = simulate(3, |env| {
        // rows split (output split by the same weights) and the inner dim split (partial sums)
        let x = Tensor::from_vec(a.clone(), &[7, 5], (&p, Sbp::split(0)))?;
        let y = Tensor::from_vec(b.clone(), &[5, 4], (&p, Sbp::broadcast()))?;
        let rows = x.matmul(&y)?;
        assert_eq!(rows.sbp(), Some(&NdSbp::from(Sbp::split(0))));
        let mine = rows.to_local()?.shape()[0];
        assert_eq!(mine, range(7, &[3, 1, 2], env.rank()).len());
        let xk = Tensor::from_vec(a.clone(), &[7, 5], (&p, Sbp::split(1)))?;
        let yk = Tensor::from_vec(b.clone(), &[5, 4], (&p, Sbp::split(0)))?;
        Ok((
            rows.to_vec_cast::<f64>()?,
            xk.matmul(&yk)?.to_vec_cast::<f64>()?,
        ))
    })
    .unwrap();
    for (rows, inner) in got {
        assert_eq!(rows, want);
        assert_eq!(inner, want);
    }
}

/// One of 2..=4 ranks' weights, a 1-3 dim shape (dims may be shorter than the rank count) and
/// the dims to split before and after.
fn case() -> impl Strategy<Value = (Vec<u32>, Vec<usize>, usize, usize)> {
    (
        prop::collection::vec(1u32..6, 2..=4),
        prop::collection::vec(0usize..7, 1..=3),
    )
        .prop_flat_map(|(w, s)| {
            let n = s.len();
            (Just(w), Just(s), 0..n, 0..n)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// balanced split(d) -> weighted split(e) -> weighted broadcast -> balanced split(d):
    /// each weighted component is the reference box, and the value comes back unchanged.
    #[test]
    fn boxing_between_weighted_and_balanced_round_trips((w, shape, d, e) in case()) {
        let n = w.len();
        let v: Vec<f64> = (0..shape.iter().product::<usize>()).map(|i| i as f64 * 0.5 - 3.0).collect();
        let bal = Placement::new("cpu", (0..n).collect::<Vec<_>>()).unwrap();
        let pw = bal.with_weights(&w).unwrap();
        let out = simulate(n, |env| {
            let x = Tensor::from_vec(v.clone(), &shape, (&bal, Sbp::split(d)))?;
            let y = x.to_global(&pw, Sbp::split(e))?;
            let mine = y.to_local()?.to_vec_cast::<f64>()?;
            let z = y.to_global(&pw, Sbp::broadcast())?.to_global(&bal, Sbp::split(d))?;
            Ok((env.rank(), mine, z.to_vec_cast::<f64>()?))
        })
        .unwrap();
        for (rank, mine, back) in out {
            prop_assert_eq!(mine, slab(&v, &shape, e, &range(shape[e], &w, rank)));
            prop_assert_eq!(&back, &v);
        }
    }
}
