//! `sort`, `argsort` and `topk` against a stable sort in f64 (ties to the lower index, NaN above
//! every number, `-inf` rows) in every dtype, on 3 uneven ranks and a 2x2 placement with the
//! dim split or not (a split elsewhere moves nothing), their gradients (the output gradient at
//! the picks); `multinomial`'s frequencies against its weights, draws without replacement
//! distinct, the same draws on any placement for one seed, and every bad argument refused.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{
    DType, Device, Error, NdSbp, Placement, Result, Sbp, Tensor, comm_stats, manual_seed,
    reset_comm_stats, simulate,
};

mod reference;

/// Values in [-1, 1) on a coarse grid (so that ties occur), from the shared generator.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut g = reference::Lcg(seed);
    (0..n).map(|_| g.next(16) as f64 / 8.0 - 1.0).collect()
}

/// Per lane along `dim` of a row-major `shape`: the `k` (value, index) pairs a stable sort
/// puts first (descending when `largest`; NaN above every number, as PyTorch).
fn reference(
    v: &[f64],
    shape: &[usize],
    dim: usize,
    k: usize,
    largest: bool,
) -> (Vec<f64>, Vec<i64>) {
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape[dim] = k;
    let (mut vals, mut idx) = (vec![0.0; outer * k * inner], vec![0; outer * k * inner]);
    for o in 0..outer {
        for i in 0..inner {
            let mut lane: Vec<(usize, f64)> =
                (0..n).map(|j| (j, v[(o * n + j) * inner + i])).collect();
            // NaN above +inf, NaNs alike: sort by (is NaN, value), a stable sort
            lane.sort_by(|a, b| {
                let c = (a.1.is_nan(), a.1)
                    .partial_cmp(&(b.1.is_nan(), b.1))
                    .unwrap_or(std::cmp::Ordering::Equal);
                if largest { c.reverse() } else { c }
            });
            for (r, &(j, x)) in lane.iter().take(k).enumerate() {
                vals[(o * k + r) * inner + i] = x;
                idx[(o * k + r) * inner + i] = j as i64;
            }
        }
    }
    (vals, idx)
}

fn same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g == w || (g.is_nan() && w.is_nan()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn topk_equals_a_stable_sort_locally() -> Result<()> {
    for (shape, dim, k) in [
        (vec![9], 0, 4),
        (vec![3, 10], 1, 3),
        (vec![10, 3], 0, 10),
        (vec![2, 7, 3], 1, 2),
        (vec![4, 5], 1, 0),
    ] {
        let mut v = values(shape.iter().product(), 5);
        v[1] = f64::NAN;
        v[2] = f64::NEG_INFINITY;
        for largest in [true, false] {
            let (want_v, want_i) = reference(&v, &shape, dim, k, largest);
            let x = Tensor::from_vec(v.clone(), &shape, Device::Cpu)?;
            let (values, indices) = x.topk(k, dim, largest)?;
            let what = format!("{shape:?} dim {dim} k {k} largest {largest}");
            assert_eq!(indices.dtype(), DType::I64);
            assert_eq!(indices.to_vec::<i64>()?, want_i, "{what}");
            same(&values.to_vec::<f64>()?, &want_v, &what);
            let f = x.to_dtype(DType::F32)?.topk(k, dim, largest)?;
            assert_eq!(f.1.to_vec::<i64>()?, want_i, "f32 {what}");
        }
    }
    // a row of -inf: the picks are its lowest indices, each once
    let x = Tensor::from_vec(vec![f64::NEG_INFINITY; 4], &[4], Device::Cpu)?;
    assert_eq!(x.topk(3, 0, true)?.1.to_vec::<i64>()?, [0, 1, 2]);
    Ok(())
}

#[test]
fn topk_refuses_bad_arguments() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3], Device::Cpu).unwrap();
    assert!(matches!(
        x.topk(4, 0, true),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        x.topk(1, 1, true),
        Err(Error::DimOutOfRange { .. })
    ));
    let b = x.to_dtype(DType::Bool).unwrap();
    assert!(matches!(
        b.topk(1, 0, true),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(matches!(x.sort(1, false), Err(Error::DimOutOfRange { .. })));
    assert!(matches!(
        x.argsort(2, true),
        Err(Error::DimOutOfRange { .. })
    ));
}

/// A full sort is the reference with `k` the whole dim, in f64, f32, bf16 (the values are
/// exact in each), I64, I32 and Bool; `argsort` gives the same positions; the smallest `k`
/// leave NaN last.
#[test]
fn sort_equals_a_stable_sort_in_every_dtype() -> Result<()> {
    for (shape, dim) in [
        (vec![9], 0),
        (vec![3, 10], 1),
        (vec![10, 3], 0),
        (vec![2, 7, 3], 1),
    ] {
        let n = shape[dim];
        let mut v = values(shape.iter().product(), 11);
        v[1] = f64::NAN;
        v[2] = f64::NEG_INFINITY;
        v[4] = -0.0;
        let finite: Vec<f64> = v
            .iter()
            .map(|x| if x.is_finite() { *x } else { 0.0 })
            .collect();
        for descending in [false, true] {
            let what = format!("{shape:?} dim {dim} descending {descending}");
            let (want_v, want_i) = reference(&v, &shape, dim, n, descending);
            for dtype in [DType::F64, DType::F32, DType::BF16] {
                let x = Tensor::from_vec(v.clone(), &shape, Device::Cpu)?.to_dtype(dtype)?;
                let (values, indices) = x.sort(dim, descending)?;
                assert_eq!(indices.to_vec::<i64>()?, want_i, "{dtype} {what}");
                assert_eq!(
                    x.argsort(dim, descending)?.to_vec::<i64>()?,
                    want_i,
                    "{what}"
                );
                let got = values.to_dtype(DType::F64)?.to_vec::<f64>()?;
                same(&got, &want_v, &format!("{dtype} {what}"));
            }
            // integers: the values times 8 (whole), with their own ties
            let (want_v, want_i) = reference(&finite, &shape, dim, n, descending);
            for dtype in [DType::I64, DType::I32] {
                let x = Tensor::from_vec(finite.clone(), &shape, Device::Cpu)?
                    .mul_scalar(8.0)?
                    .to_dtype(dtype)?;
                let (values, indices) = x.sort(dim, descending)?;
                assert_eq!(
                    (values.dtype(), indices.to_vec::<i64>()?),
                    (dtype, want_i.clone())
                );
                let got = values.to_dtype(DType::F64)?.to_vec::<f64>()?;
                let want: Vec<f64> = want_v.iter().map(|w| w * 8.0).collect();
                same(&got, &want, &format!("{dtype} {what}"));
            }
            let bits: Vec<f64> = finite.iter().map(|&x| f64::from(x > 0.0)).collect();
            let (want_v, want_i) = reference(&bits, &shape, dim, n, descending);
            let b = Tensor::from_vec(bits.clone(), &shape, Device::Cpu)?.to_dtype(DType::Bool)?;
            let (values, indices) = b.sort(dim, descending)?;
            assert_eq!(indices.to_vec::<i64>()?, want_i, "bool {what}");
            let want: Vec<bool> = want_v.iter().map(|&w| w > 0.5).collect();
            assert_eq!(values.to_vec::<bool>()?, want, "bool {what}");
        }
    }
    // topk of the smallest: NaN is the largest, so it comes last (PyTorch's)
    let x = Tensor::from_vec(vec![1.0f32, f32::NAN, 0.0, 2.0], &[4], Device::Cpu)?;
    let (values, indices) = x.topk(2, 0, false)?;
    assert_eq!(
        (values.to_vec::<f32>()?, indices.to_vec::<i64>()?),
        (vec![0.0, 1.0], vec![2, 0])
    );
    Ok(())
}

/// `sort` on 3 uneven ranks and a 2x2 placement, along a split dim (gathered) or a whole one
/// (a split on the other dim stays, and the sort moves no byte); the gradient of
/// `sum(values * w)` puts each `w` where its value came from.
#[test]
fn sort_on_global_layouts_and_its_gradient() {
    let shape = [5usize, 12];
    let v = values(shape.iter().product(), 13);
    for dim in [0, 1] {
        let n = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        for descending in [false, true] {
            let (want_v, want_i) = reference(&v, &shape, dim, n, descending);
            let w: Vec<f64> = (0..v.len()).map(|i| i as f64 + 1.0).collect();
            let mut want_g = vec![0.0; v.len()];
            for (pos, &j) in want_i.iter().enumerate() {
                let (o, i) = (pos / (n * inner), pos % inner);
                want_g[(o * n + j as usize) * inner + i] = w[pos];
            }
            for (ranks, p, sbp) in reference::split_layouts() {
                let other = sbp.as_slice().iter().all(|s| *s != Sbp::split(dim));
                let out = simulate(ranks, |_| {
                    let x = Tensor::from_vec(v.clone(), &shape, (&p, sbp.clone()))?
                        .set_requires_grad(true);
                    reset_comm_stats();
                    let (values, indices) = x.sort(dim, descending)?;
                    let moved = comm_stats().bytes_sent;
                    let wt = Tensor::from_vec(w.clone(), &shape, (&p, sbp.clone()))?;
                    (&values * &wt)?.sum(vec![], false)?.backward()?;
                    Ok((
                        values.to_vec::<f64>()?,
                        indices.to_vec::<i64>()?,
                        x.grad().unwrap().to_vec::<f64>()?,
                        moved,
                        values.sbp().cloned(),
                    ))
                })
                .unwrap();
                for (got_v, got_i, got_g, moved, out_sbp) in out {
                    let what = format!("{p} {sbp} dim {dim} descending {descending}");
                    same(&got_v, &want_v, &what);
                    assert_eq!(got_i, want_i, "{what}");
                    same(&got_g, &want_g, &format!("grad {what}"));
                    if other {
                        assert_eq!(moved, 0, "{what}: a sort along a whole dim moved bytes");
                        assert_eq!(out_sbp, Some(sbp.clone()), "{what}");
                    }
                }
            }
        }
    }
}

/// On 3 uneven ranks and a 2x2 placement, the dim split or not, the picks equal the local ones
/// and the gradient of `sum(values * w)` is `w` at each pick, 0 elsewhere.
#[test]
fn topk_on_global_layouts_and_its_gradient() {
    let shape = [5usize, 12];
    let v = values(shape.iter().product(), 9);
    let layouts = reference::split_layouts();
    for (dim, k) in [(1, 4), (0, 2)] {
        let (want_v, want_i) = reference(&v, &shape, dim, k, true);
        let mut out_shape = shape.to_vec();
        out_shape[dim] = k;
        let w: Vec<f64> = (0..want_v.len()).map(|i| i as f64 + 1.0).collect();
        // the gradient: w at each pick
        let mut want_g = vec![0.0; v.len()];
        let inner: usize = shape[dim + 1..].iter().product();
        for (pos, &j) in want_i.iter().enumerate() {
            let (o, i) = (pos / (k * inner), pos % inner);
            want_g[(o * shape[dim] + j as usize) * inner + i] = w[pos];
        }
        for (n, p, sbp) in &layouts {
            let out = simulate(*n, |_| {
                let x =
                    Tensor::from_vec(v.clone(), &shape, (p, sbp.clone()))?.set_requires_grad(true);
                let (values, indices) = x.topk(k, dim, true)?;
                let wt = Tensor::from_vec(w.clone(), &out_shape, Device::Cpu)?
                    .to_global(p, NdSbp::broadcast(p.ndim()))?;
                (&values * &wt)?.sum(vec![], false)?.backward()?;
                Ok((
                    values.to_vec::<f64>()?,
                    indices.to_vec::<i64>()?,
                    x.grad().unwrap().to_vec::<f64>()?,
                ))
            })
            .unwrap();
            for (got_v, got_i, got_g) in out {
                let what = format!("{p} {sbp} dim {dim}");
                same(&got_v, &want_v, &what);
                assert_eq!(got_i, want_i, "{what}");
                same(&got_g, &want_g, &format!("grad {what}"));
            }
        }
    }
}

/// 40000 draws with replacement from weights (0, 1, 2, 5) (not normalised): never the zero
/// category, and each frequency within 4.5 standard deviations of its probability.
#[test]
fn multinomial_frequencies_follow_the_weights() -> Result<()> {
    manual_seed(7);
    let w = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 5.0], &[1, 4], Device::Cpu)?;
    let n = 40_000;
    let draws = w.multinomial(n, true)?;
    assert_eq!((draws.shape(), draws.dtype()), (&[1, n][..], DType::I64));
    let mut counts = [0usize; 4];
    for d in draws.to_vec::<i64>()? {
        counts[d as usize] += 1;
    }
    assert_eq!(counts[0], 0);
    for (c, p) in counts.iter().zip([0.0, 1.0 / 8.0, 2.0 / 8.0, 5.0 / 8.0]) {
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (*c as f64 - n as f64 * p).abs() <= 4.5 * sd.max(1.0),
            "{counts:?}"
        );
    }
    Ok(())
}

/// Without replacement: a row's draws are distinct categories of positive weight; drawing as
/// many as there are gives each once; the first draw follows the weights.
#[test]
fn multinomial_without_replacement_draws_each_category_once() -> Result<()> {
    manual_seed(3);
    let w = Tensor::from_vec(vec![0.5f64, 0.0, 2.0, 1.0, 0.5, 0.0], &[2, 3], Device::Cpu)?;
    for _ in 0..20 {
        let d = w.multinomial(2, false)?.to_vec::<i64>()?;
        let (mut a, mut b) = ([d[0], d[1]], [d[2], d[3]]);
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!((a, b), ([0, 2], [0, 1]), "{d:?}");
    }
    let first = Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2], Device::Cpu)?;
    let mut ones = 0;
    for _ in 0..2000 {
        ones += first.multinomial(1, false)?.to_vec::<i64>()?[0];
    }
    // P(1) = 3/4: 1500 expected, sd 19.4
    assert!((ones - 1500).abs() < 90, "{ones}");
    Ok(())
}

/// One seed, the same draws on 1, 2 or 3 ranks with the weights split or broadcast (global
/// random values are keyed by the seed and the tensor, never by rank or layout).
#[test]
fn multinomial_draws_are_placement_invariant() {
    let v: Vec<f64> = values(4 * 9, 21).iter().map(|x| x + 1.5).collect();
    let draws = |n: usize, sbp: Sbp| {
        let p = Placement::new("cpu", (0..n).collect::<Vec<_>>()).unwrap();
        simulate(n, |_| {
            manual_seed(11);
            let w = Tensor::from_vec(v.clone(), &[4, 9], (&p, sbp))?;
            Ok((
                w.multinomial(5, true)?.to_vec::<i64>()?,
                w.multinomial(3, false)?.to_vec::<i64>()?,
            ))
        })
        .unwrap()
    };
    let one = draws(1, Sbp::broadcast()).remove(0);
    for (n, sbp) in [
        (2, Sbp::split(0)),
        (3, Sbp::split(1)),
        (2, Sbp::broadcast()),
    ] {
        for got in draws(n, sbp) {
            assert_eq!(got, one, "{n} ranks {sbp}");
        }
    }
}

#[test]
fn multinomial_refuses_bad_weights() {
    let t = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(v, shape, Device::Cpu).unwrap();
    let bad = |r: Result<Tensor>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(bad(t(vec![1.0, -0.5], &[2]).multinomial(1, true)));
    assert!(bad(t(vec![1.0, f32::NAN], &[2]).multinomial(1, true)));
    assert!(bad(t(vec![1.0, f32::INFINITY], &[2]).multinomial(1, true)));
    assert!(
        bad(t(vec![1.0, 1.0, 0.0, 0.0], &[2, 2]).multinomial(1, true)),
        "a zero row"
    );
    assert!(
        bad(t(vec![1.0, 0.0, 2.0], &[3]).multinomial(3, false)),
        "too many"
    );
    assert!(bad(t(vec![1.0, 2.0], &[2]).multinomial(0, true)));
    assert!(bad(t(vec![1.0], &[]).multinomial(1, true)));
    let i = t(vec![1.0, 2.0], &[2]).to_dtype(DType::I64).unwrap();
    assert!(matches!(
        i.multinomial(1, true),
        Err(Error::UnsupportedDType { .. })
    ));
}

/// `randperm` is a permutation, and one seed gives the same one on 1 rank, 3 ranks split or
/// broadcast and a 2x2 placement.
#[test]
fn randperm_is_a_placement_invariant_permutation() {
    let n = 37;
    let draw = |ranks: usize, p: Placement, sbp: NdSbp| {
        simulate(ranks, move |_| {
            manual_seed(11);
            Tensor::randperm(n, (&p, sbp.clone()))?.to_vec::<i64>()
        })
        .unwrap()
    };
    let one = draw(
        1,
        Placement::new("cpu", [0]).unwrap(),
        Sbp::broadcast().into(),
    )[0]
    .clone();
    let mut sorted = one.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..n as i64).collect::<Vec<_>>());
    assert_ne!(one, sorted, "37 draws left in order");
    for (ranks, p, sbp) in reference::split_layouts() {
        let sbp = if sbp.as_slice().contains(&Sbp::split(1)) {
            NdSbp::broadcast(p.ndim()).with(0, Sbp::split(0))
        } else {
            sbp
        };
        for got in draw(ranks, p.clone(), sbp.clone()) {
            assert_eq!(got, one, "{p} {sbp}");
        }
    }
}
