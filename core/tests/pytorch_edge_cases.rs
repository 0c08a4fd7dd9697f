//! Contract edge cases checked against PyTorch 2.x (values recorded from `torch`, or worked by
//! hand where noted): promotion with 0-d operands, `cat`/`stack` of mixed dtypes, `clamp` of
//! integer tensors and NaN bounds, exact I64 casts and arg-reductions, reductions over empty
//! dims, `chunk` of an empty dim, and the operator named by errors. Global cases check that
//! every rank gets the single-device result (or the same error).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, Error, Placement, Result, Sbp, Tensor, bf16, f16, simulate};

fn scalar(v: f64, dtype: DType) -> Result<Tensor> {
    Tensor::full_dtype(&[], v, dtype, Device::Cpu)
}

fn vec3(dtype: DType) -> Result<Tensor> {
    Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3], Device::Cpu)?.to_dtype(dtype)
}

/// torch: `(torch.tensor([1., 2, 3], dtype=d) + torch.tensor(1, dtype=z)).dtype`.
#[test]
fn zero_dim_operands_change_the_dtype_only_by_a_higher_category() -> Result<()> {
    use DType::*;
    let cases = [
        (F16, F32, F16),
        (I32, I64, I32),
        (F32, F64, F32),
        (BF16, F32, BF16),
        (I32, F32, F32),
        (I32, F64, F64),
        (Bool, I64, I64),
        (I32, Bool, I32),
    ];
    for (d, z, want) in cases {
        let (a, b) = (vec3(d)?, scalar(1.0, z)?);
        assert_eq!(a.add(&b)?.dtype(), want, "{d}[3] + {z} 0-d");
        assert_eq!(b.add(&a)?.dtype(), want, "{z} 0-d + {d}[3]");
    }
    // bf16[3] * f32 0-d stays BF16: the scalar rounds to bf16 first (torch: [2.5, 5., 7.5]).
    let y = vec3(BF16)?.mul(&scalar(2.5, F32)?)?;
    assert_eq!(y.dtype(), BF16);
    assert_eq!(
        y.to_vec::<bf16>()?,
        [2.5, 5.0, 7.5].map(bf16::from_f64).to_vec()
    );
    // f16[3] + f32 0-d: computed in f16 (torch: [1.0996, 2.0996, 3.0996] for 0.1).
    let y = vec3(F16)?.add(&scalar(0.1, F32)?)?;
    assert_eq!(y.dtype(), F16);
    let want = [1.0996f32, 2.0996, 3.0996].map(f16::from_f32).to_vec();
    assert_eq!(y.to_vec::<f16>()?, want);
    // i32[3] + i64 0-d keeps I32; i32[3] + f32 0-d is F32 with the fraction kept.
    let y = vec3(I32)?.add(&scalar(1.0, I64)?)?;
    assert_eq!(y.to_vec::<i32>()?, vec![2, 3, 4]);
    let y = vec3(I32)?.add(&scalar(0.5, F32)?)?;
    assert_eq!(y.to_vec::<f32>()?, vec![1.5, 2.5, 3.5]);
    // bool[3] + i64 0-d is I64 (torch: [6, 5, 6]).
    let b = Tensor::from_vec(vec![true, false, true], &[3], Device::Cpu)?;
    assert_eq!(b.add(&scalar(5.0, I64)?)?.to_vec::<i64>()?, vec![6, 5, 6]);
    // Two 0-d operands promote as usual: f16 0-d + f32 0-d is F32.
    assert_eq!(scalar(1.0, F16)?.add(&scalar(1.0, F32)?)?.dtype(), F32);
    Ok(())
}

#[test]
fn where_and_comparisons_follow_result_type() -> Result<()> {
    let c = Tensor::from_vec(vec![true, false, true], &[3], Device::Cpu)?;
    // torch.where(c, f16[3], f32 0-d).dtype == float16
    let y = c.where_cond(&vec3(DType::F16)?, &scalar(-1.0, DType::F32)?)?;
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(
        y.to_vec::<f16>()?,
        [1.0, -1.0, 3.0].map(f16::from_f64).to_vec()
    );
    // Both branches 0-d: plain promotion (F32).
    let y = c.where_cond(&scalar(1.0, DType::F16)?, &scalar(2.0, DType::F32)?)?;
    assert_eq!(y.dtype(), DType::F32);
    // torch: tensor([0], dtype=int32) == tensor(2**32) is True (compared in int32) and
    // tensor([1.], dtype=float16) == tensor(1.0001) is True (compared in float16).
    let i = Tensor::from_vec(vec![0i32], &[1], Device::Cpu)?;
    let big = Tensor::from_vec(vec![1i64 << 32], &[], Device::Cpu)?;
    assert_eq!(i.eq(&big)?.to_vec::<bool>()?, vec![true]);
    let h = Tensor::from_vec(vec![f16::from_f32(1.0)], &[1], Device::Cpu)?;
    assert_eq!(
        h.eq(&scalar(1.0001, DType::F32)?)?.to_vec::<bool>()?,
        vec![true]
    );
    Ok(())
}

#[test]
fn zero_dim_promotion_gives_gradients_in_each_input_dtype() -> Result<()> {
    // torch: x f32[3] * y f64 0-d is f32; y.grad is f64 and equals sum(x) = 6.
    let x = vec3(DType::F32)?.set_requires_grad(true);
    let y = scalar(2.0, DType::F64)?.set_requires_grad(true);
    let out = x.mul(&y)?;
    assert_eq!(out.dtype(), DType::F32);
    out.sum(vec![], false)?.backward()?;
    let gy = y.grad().expect("y has a gradient");
    assert_eq!(gy.dtype(), DType::F64);
    assert_eq!(gy.to_vec::<f64>()?, vec![6.0]);
    let gx = x.grad().expect("x has a gradient");
    assert_eq!(gx.to_vec::<f32>()?, vec![2.0, 2.0, 2.0]);
    Ok(())
}

#[test]
fn zero_dim_promotion_is_the_same_on_every_sbp() -> Result<()> {
    let data = vec![1.0f64, 2.0, 3.0, 4.0];
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let mut got = vec![];
        for sbp in [Sbp::split(0), Sbp::broadcast()] {
            let x = Tensor::from_vec(data.clone(), &[4], (&p, sbp))?.to_dtype(DType::F16)?;
            let s = Tensor::full_dtype(&[], 0.5, DType::F32, (&p, Sbp::broadcast()))?;
            let y = x.add(&s)?;
            got.push((y.dtype(), y.to_vec::<f16>()?));
        }
        Ok(got)
    })?;
    let want = [1.5, 2.5, 3.5, 4.5].map(f16::from_f64).to_vec();
    for rank in out {
        for (dtype, vals) in rank {
            assert_eq!(dtype, DType::F16);
            assert_eq!(vals, want);
        }
    }
    Ok(())
}

#[test]
fn cat_and_stack_promote_mixed_dtypes() -> Result<()> {
    use DType::*;
    // torch.cat dtypes: f32+f64 -> f64, i32+i64 -> i64, f16+bf16 -> f32, bool+i32 -> i32.
    for (a, b, want) in [
        (F32, F64, F64),
        (I32, I64, I64),
        (F16, BF16, F32),
        (Bool, I32, I32),
    ] {
        let y = Tensor::cat(&[vec3(a)?, vec3(b)?], 0)?;
        assert_eq!(y.dtype(), want, "cat {a} {b}");
        assert_eq!(y.shape(), &[6]);
    }
    let y = Tensor::cat(&[vec3(I32)?, vec3(I64)?], 0)?;
    assert_eq!(y.to_vec::<i64>()?, vec![1, 2, 3, 1, 2, 3]);
    // torch.stack([tensor(1.), tensor(2., dtype=float64)]) is f64.
    let y = Tensor::stack(&[scalar(1.0, F32)?, scalar(2.0, F64)?], 0)?;
    assert_eq!(y.dtype(), F64);
    assert_eq!(y.to_vec::<f64>()?, vec![1.0, 2.0]);
    // The gradient of the promoted input comes back in its own dtype.
    let x = vec3(F32)?.set_requires_grad(true);
    let y = Tensor::cat(&[&x, &vec3(F64)?], 0)?;
    y.sum(vec![], false)?.backward()?;
    let g = x.grad().expect("x has a gradient");
    assert_eq!(g.dtype(), F32);
    assert_eq!(g.to_vec::<f32>()?, vec![1.0; 3]);
    // Global: split pieces of different dtypes concatenate to the single-device value.
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2], (&p, Sbp::split(0)))?;
        let b = Tensor::from_vec(vec![3.0f64, 4.0], &[2], (&p, Sbp::broadcast()))?;
        let y = Tensor::cat(&[a, b], 0)?;
        Ok((y.dtype(), y.to_vec::<f64>()?))
    })?;
    for (dtype, vals) in out {
        assert_eq!(dtype, F64);
        assert_eq!(vals, vec![1.0, 2.0, 3.0, 4.0]);
    }
    Ok(())
}

#[test]
fn clamp_of_integers_with_fractional_bounds_gives_floats() -> Result<()> {
    let i32s = Tensor::from_vec(vec![0i32, 1, 2, 3], &[4], Device::Cpu)?;
    let i64s = i32s.to_dtype(DType::I64)?;
    for x in [&i32s, &i64s] {
        // torch: tensor([0, 1, 2, 3]).clamp(1.5, 2.5) == tensor([1.5, 1.5, 2.0, 2.5])
        let y = x.clamp(Some(1.5), Some(2.5))?;
        assert_eq!(y.dtype(), DType::F32);
        assert_eq!(y.to_vec::<f32>()?, vec![1.5, 1.5, 2.0, 2.5]);
        // clamp(1.5, None): [1.5, 1.5, 2, 3]; clamp(None, 2.5): [0, 1, 2, 2.5]
        assert_eq!(
            x.clamp(Some(1.5), None)?.to_vec::<f32>()?,
            vec![1.5, 1.5, 2.0, 3.0]
        );
        assert_eq!(
            x.clamp(None, Some(2.5))?.to_vec::<f32>()?,
            vec![0.0, 1.0, 2.0, 2.5]
        );
    }
    // Integral bounds keep the integer dtype: torch clamp(1, 2) -> int32 [1, 1, 2, 2].
    let y = i32s.clamp(Some(1.0), Some(2.0))?;
    assert_eq!(y.dtype(), DType::I32);
    assert_eq!(y.to_vec::<i32>()?, vec![1, 1, 2, 2]);
    let y = i64s.clamp(Some(1.0), Some(2.0))?;
    assert_eq!(y.to_vec::<i64>()?, vec![1, 1, 2, 2]);
    // Bool: integral bounds give I64 (torch: [1, 0] int64), fractional ones F32 ([1, 0.5]).
    let b = Tensor::from_vec(vec![true, false], &[2], Device::Cpu)?;
    assert_eq!(b.clamp(Some(0.0), Some(1.0))?.to_vec::<i64>()?, vec![1, 0]);
    assert_eq!(
        b.clamp(Some(0.5), Some(1.0))?.to_vec::<f32>()?,
        vec![1.0, 0.5]
    );
    // An infinite bound is a float: torch tensor([1, 2, 3]).clamp(inf) is [inf, inf, inf].
    assert_eq!(
        i64s.clamp(Some(f64::INFINITY), None)?.to_vec::<f32>()?,
        vec![f32::INFINITY; 4]
    );
    // Float tensors keep their dtype.
    let h = vec3(DType::F16)?.clamp(Some(1.5), Some(2.5))?;
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(
        h.to_vec::<f16>()?,
        [1.5, 2.0, 2.5].map(f16::from_f64).to_vec()
    );
    Ok(())
}

#[test]
fn clamp_with_a_nan_bound_is_nan_everywhere() -> Result<()> {
    let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], &[4], Device::Cpu)?;
    // torch: clamp(nan, 2.) / clamp(None, nan) / clamp(nan) are all [nan] * 4.
    for (lo, hi) in [
        (Some(f64::NAN), Some(2.0)),
        (None, Some(f64::NAN)),
        (Some(f64::NAN), None),
    ] {
        let y = x.clamp(lo, hi)?;
        assert_eq!(y.dtype(), DType::F32);
        assert!(
            y.to_vec::<f32>()?.iter().all(|v| v.is_nan()),
            "{lo:?} {hi:?}"
        );
    }
    // An integer tensor with a NaN bound: F32 NaNs (torch: tensor([nan] * 4)).
    let i = Tensor::from_vec(vec![0i32, 1, 2, 3], &[4], Device::Cpu)?;
    let y = i.clamp(Some(f64::NAN), None)?;
    assert_eq!(y.dtype(), DType::F32);
    assert!(y.to_vec::<f32>()?.iter().all(|v| v.is_nan()));
    // f16 keeps its dtype; the gradient is zero (torch: x.grad == [0., 0.]).
    let h = vec3(DType::F16)?.clamp(Some(f64::NAN), None)?;
    assert_eq!(h.dtype(), DType::F16);
    assert!(h.to_vec::<f16>()?.iter().all(|v| v.is_nan()));
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
    x.clamp(Some(f64::NAN), None)?
        .sum(vec![], false)?
        .backward()?;
    assert_eq!(
        x.grad().expect("a gradient").to_vec::<f32>()?,
        vec![0.0, 0.0]
    );
    // The same on every rank of a split tensor.
    let out = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], &[4], (&p, Sbp::split(0)))?;
        x.clamp(None, Some(f64::NAN))?.to_vec::<f32>()
    })?;
    for vals in out {
        assert!(vals.iter().all(|v| v.is_nan()));
    }
    Ok(())
}

#[test]
fn i64_to_f32_rounds_once() -> Result<()> {
    // torch.tensor([(1 << 60) + (1 << 36) + 1]).float().item() == 1.1529216420458004e18
    // (2^60 + 2^37: the value lies just above halfway between 2^60 and 2^60 + 2^37, so one
    // rounding goes up; rounding through f64 first lands on the halfway point and goes to even).
    let v = (1i64 << 60) + (1 << 36) + 1;
    let x = Tensor::from_vec(vec![v, (1 << 53) + 1, -v, 7], &[4], Device::Cpu)?;
    let y = x.to_dtype(DType::F32)?.to_vec::<f32>()?;
    assert_eq!(y[0] as f64, 1.152_921_642_045_800_4e18);
    assert_eq!(y[0] as f64, 2f64.powi(60) + 2f64.powi(37));
    assert_eq!(y[1], 2f32.powi(53));
    assert_eq!(y[2], -y[0]);
    assert_eq!(y[3], 7.0);
    // I32 -> F32 (exact through f64 anyway): torch gives 1073741952.0.
    let i = Tensor::from_vec(vec![(1i32 << 30) + (1 << 6) + 1], &[1], Device::Cpu)?;
    assert_eq!(
        i.to_dtype(DType::F32)?.to_vec::<f32>()?,
        vec![1_073_741_952.0]
    );
    Ok(())
}

#[test]
fn argmax_compares_i64_exactly() -> Result<()> {
    // torch: tensor([1 << 53, (1 << 53) + 1]).argmax() == 1, argmin() == 0.
    let x = Tensor::from_vec(vec![1i64 << 53, (1 << 53) + 1], &[2], Device::Cpu)?;
    assert_eq!(x.argmax(0, false)?.to_vec::<i64>()?, vec![1]);
    assert_eq!(x.argmin(0, false)?.to_vec::<i64>()?, vec![0]);
    // Over a split dim on 3 ranks (one of them empty): [i64::MIN, i64::MIN + 1].
    let out = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let x = Tensor::from_vec(vec![i64::MIN, i64::MIN + 1], &[2], (&p, Sbp::split(0)))?;
        Ok((
            x.argmax(0, false)?.to_vec::<i64>()?,
            x.argmin(0, false)?.to_vec::<i64>()?,
        ))
    })?;
    for (amax, amin) in out {
        assert_eq!(amax, vec![1]);
        assert_eq!(amin, vec![0]);
    }
    // Ties still take the lowest index; the first NaN still wins.
    let t = Tensor::from_vec(vec![3i64, 5, 5, 1, 1], &[5], Device::Cpu)?;
    assert_eq!(t.argmax(0, false)?.to_vec::<i64>()?, vec![1]);
    assert_eq!(t.argmin(0, false)?.to_vec::<i64>()?, vec![3]);
    let f = Tensor::from_vec(vec![1.0f32, f32::NAN, 9.0, f32::NAN], &[4], Device::Cpu)?;
    assert_eq!(f.argmax(0, false)?.to_vec::<i64>()?, vec![1]);
    assert_eq!(f.argmin(0, false)?.to_vec::<i64>()?, vec![1]);
    Ok(())
}

fn empty_dim_error(e: &Error, want_op: &str) {
    assert!(
        matches!(e, Error::ShapeMismatch { op, .. } if *op == want_op),
        "want ShapeMismatch naming {want_op}, got {e}"
    );
}

#[test]
fn max_min_and_arg_reductions_over_an_empty_dim_are_errors() -> Result<()> {
    // torch: zeros(2, 0).argmax(1) raises "Expected reduction dim 1 to have non-zero size";
    // so do argmin, max, min (and a reduction over all dims of an empty tensor).
    let x = Tensor::zeros(&[2, 0], Device::Cpu)?;
    empty_dim_error(&x.argmax(1, false).unwrap_err(), "argmax");
    empty_dim_error(&x.argmin(1, true).unwrap_err(), "argmin");
    empty_dim_error(&x.max(vec![1], false).unwrap_err(), "max");
    empty_dim_error(&x.min(vec![1], false).unwrap_err(), "min");
    empty_dim_error(&x.max(vec![], false).unwrap_err(), "max");
    let i = Tensor::full_dtype(&[2, 0], 0.0, DType::I64, Device::Cpu)?;
    empty_dim_error(&i.max(1, false).unwrap_err(), "max");
    // Over a non-empty dim of an empty tensor they are fine: torch zeros(0, 3).amax(1) is [].
    let e = Tensor::zeros(&[0, 3], Device::Cpu)?;
    assert_eq!(e.max(1, false)?.shape(), &[0]);
    assert_eq!(e.argmax(1, false)?.shape(), &[0]);
    // sum, mean and logsumexp of nothing: 0, NaN and -inf, as torch.
    assert_eq!(x.sum(1, false)?.to_vec::<f32>()?, vec![0.0, 0.0]);
    assert!(
        x.mean(1, false)?
            .to_vec::<f32>()?
            .iter()
            .all(|v| v.is_nan())
    );
    assert_eq!(
        x.logsumexp(1, false)?.to_vec::<f32>()?,
        vec![f32::NEG_INFINITY; 2]
    );
    let l = x.logsumexp(vec![], true)?;
    assert_eq!(l.shape(), &[1, 1]);
    assert_eq!(l.to_vec::<f32>()?, vec![f32::NEG_INFINITY]);
    // Every rank refuses alike, also those whose own part of the other dim is empty.
    let out = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let x = Tensor::zeros(&[2, 0], (&p, Sbp::split(0)))?;
        Ok((
            x.argmax(1, false).err(),
            x.max(vec![1], false).err(),
            x.logsumexp(1, false)?.to_vec::<f32>()?,
        ))
    })?;
    for (a, m, l) in out {
        empty_dim_error(&a.expect("argmax refused"), "argmax");
        empty_dim_error(&m.expect("max refused"), "max");
        assert_eq!(l, vec![f32::NEG_INFINITY; 2]);
    }
    Ok(())
}

#[test]
fn chunk_of_an_empty_dim_gives_n_empty_pieces() -> Result<()> {
    // torch.zeros(0).chunk(3) == (tensor([]),) * 3; zeros(2, 0).chunk(3, 1): three (2, 0).
    let pieces = Tensor::zeros(&[0], Device::Cpu)?.chunk(3, 0)?;
    assert_eq!(pieces.len(), 3);
    assert!(pieces.iter().all(|p| p.shape() == [0]));
    let pieces = Tensor::zeros(&[2, 0], Device::Cpu)?.chunk(3, 1)?;
    assert_eq!(pieces.len(), 3);
    assert!(pieces.iter().all(|p| p.shape() == [2, 0]));
    assert_eq!(Tensor::zeros(&[0], Device::Cpu)?.chunk(1, 0)?.len(), 1);
    // Non-empty dims as before: torch sizes for 5/3, 5/4, 6/4 are [2, 2, 1], [2, 2, 1], [2, 2, 2].
    for (len, n, want) in [
        (5, 3, vec![2, 2, 1]),
        (5, 4, vec![2, 2, 1]),
        (6, 4, vec![2, 2, 2]),
    ] {
        let sizes: Vec<usize> = Tensor::zeros(&[len], Device::Cpu)?
            .chunk(n, 0)?
            .iter()
            .map(|p| p.shape()[0])
            .collect();
        assert_eq!(sizes, want, "{len} in {n}");
    }
    // PyTorch's split of an empty dim stays one piece.
    assert_eq!(Tensor::zeros(&[0], Device::Cpu)?.split(2, 0)?.len(), 1);
    Ok(())
}

#[test]
fn errors_name_the_operator_called() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], Device::Cpu)?;
    let idx = Tensor::from_vec(vec![0i64, 5], &[2], Device::Cpu)?;
    let e = x.index_select(1, &idx).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "index_select",
                index: 5,
                size: 3
            }
        ),
        "{e}"
    );
    let e = x.index_select(0, &idx).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "index_select",
                index: 5,
                size: 2
            }
        ),
        "{e}"
    );
    let e = x.logsumexp(vec![2], false).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "logsumexp",
                dim: 2,
                ndim: 2
            }
        ),
        "{e}"
    );
    let e = x.logsumexp(vec![1, 1], false).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "logsumexp",
                ..
            }
        ),
        "{e}"
    );
    let e = x.sum(vec![0, 0], false).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "sum", .. }), "{e}");
    Ok(())
}

/// torch: `torch.tensor(1.).squeeze(0).shape == ()`, `x.index_select(0, torch.tensor(1))` of a
/// (2, 3) `x` is (1, 3), `torch.zeros(3).masked_fill(torch.ones(2, 3, dtype=bool), 1.)` is (2, 3)
/// ones; the same over a split dim on 2 ranks.
#[test]
fn scalars_squeeze_a_zero_d_index_selects_one_row_and_wide_masks_broadcast() -> Result<()> {
    let s = scalar(4.0, DType::F32)?;
    assert_eq!(s.squeeze(0)?.shape(), &[] as &[usize]);
    assert!(matches!(s.squeeze(1), Err(Error::DimOutOfRange { .. })));
    let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3], Device::Cpu)?;
    let one = Tensor::from_vec(vec![1i64], &[], Device::Cpu)?;
    let row = x.index_select(0, &one)?;
    assert_eq!(
        (row.shape(), row.to_vec::<f32>()?),
        (&[1, 3][..], vec![3.0, 4.0, 5.0])
    );
    let col = x.index_select(1, &one)?;
    assert_eq!(
        (col.shape(), col.to_vec::<f32>()?),
        (&[2, 1][..], vec![1.0, 4.0])
    );
    let wide = Tensor::from_vec(
        vec![true, false, true, false, false, true],
        &[2, 3],
        Device::Cpu,
    )?;
    let filled = Tensor::zeros(&[3], Device::Cpu)?.masked_fill(&wide, 1.0)?;
    assert_eq!(filled.shape(), &[2, 3]);
    assert_eq!(filled.to_vec::<f32>()?, vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
    let got = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let g = Tensor::from_vec(
            (0..6).map(|v| v as f32).collect(),
            &[2, 3],
            (&p, Sbp::split(0)),
        )?;
        let idx = Tensor::from_vec(vec![1i64], &[], (&p, Sbp::broadcast()))?;
        g.index_select(0, &idx)?.to_vec::<f32>()
    })?;
    assert!(got.iter().all(|v| v == &[3.0, 4.0, 5.0]), "{got:?}");
    Ok(())
}

/// torch (CPU, tensors shorter than a vector): `torch.maximum(a, b)` and `torch.minimum(a, b)`
/// of equal operands give the first, so `maximum([0., -0.], [-0., 0.])` is `[0., -0.]` (NumPy
/// agrees); NaN on either side wins.
#[test]
fn maximum_and_minimum_of_signed_zeros_give_the_first_operand() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let a = Tensor::from_vec(vec![0.0f64, -0.0, 1.0, f64::NAN], &[4], Device::Cpu)?
            .to_dtype(dtype)?;
        let b = Tensor::from_vec(vec![-0.0f64, 0.0, f64::NAN, 1.0], &[4], Device::Cpu)?
            .to_dtype(dtype)?;
        for (name, out) in [("maximum", a.maximum(&b)?), ("minimum", a.minimum(&b)?)] {
            let v = out.to_vec_cast::<f64>()?;
            assert_eq!(v[0].to_bits(), 0.0f64.to_bits(), "{name} {dtype}: {v:?}");
            assert_eq!(v[1].to_bits(), (-0.0f64).to_bits(), "{name} {dtype}: {v:?}");
            assert!(v[2].is_nan() && v[3].is_nan(), "{name} {dtype}: {v:?}");
        }
    }
    Ok(())
}

/// torch: where an input of `maximum`/`minimum` is NaN, both inputs get the whole gradient
/// (`where(a == b, g / 2, g).masked_fill_(a < b, 0)` and its mirror); ties split it.
#[test]
fn maximum_gradient_with_nan_goes_to_both_inputs() -> Result<()> {
    let a =
        Tensor::from_vec(vec![f32::NAN, 1.0, 2.0, 3.0], &[4], Device::Cpu)?.set_requires_grad(true);
    let b = Tensor::from_vec(vec![1.0f32, f32::NAN, 2.0, 5.0], &[4], Device::Cpu)?
        .set_requires_grad(true);
    a.maximum(&b)?.sum(Vec::<usize>::new(), false)?.backward()?;
    assert_eq!(a.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.5, 0.0]);
    assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.5, 1.0]);
    let (a, b) = (
        a.detach().set_requires_grad(true),
        b.detach().set_requires_grad(true),
    );
    a.minimum(&b)?.sum(Vec::<usize>::new(), false)?.backward()?;
    assert_eq!(a.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.5, 1.0]);
    assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.5, 0.0]);
    Ok(())
}

/// torch: `torch.tensor([1, 2, 3]).logsumexp(0)` is `tensor(3.4076)` (float32), and of
/// `[True, False]` `tensor(1.3133)`: integers and Bool compute in the default float.
#[test]
fn logsumexp_of_integers_and_bools_is_f32() -> Result<()> {
    for dtype in [DType::I64, DType::I32, DType::Bool] {
        let x = Tensor::from_vec(vec![1i64, 0, 1, 1], &[2, 2], Device::Cpu)?.to_dtype(dtype)?;
        let y = x.logsumexp(vec![1], false)?;
        assert_eq!(y.dtype(), DType::F32, "{dtype}");
        let want = [(1f64.exp() + 1.0).ln(), (2.0 * 1f64.exp()).ln()];
        for (g, w) in y.to_vec::<f32>()?.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{dtype}: {g} vs {w}");
        }
    }
    let x = Tensor::from_vec(vec![1i64, 2, 3], &[3], Device::Cpu)?;
    let y = x.logsumexp(Vec::<usize>::new(), false)?.to_vec::<f32>()?;
    assert!((y[0] - 3.407_606).abs() < 1e-5, "{y:?}");
    Ok(())
}

/// torch: `expand` works on every dtype and may add leading dims
/// (`torch.tensor([[1], [2]]).expand(2, 2, 3)`).
#[test]
fn expand_of_integers_and_bools_and_new_leading_dims() -> Result<()> {
    let x = Tensor::from_vec(vec![1i64, 2], &[2, 1], Device::Cpu)?;
    let y = x.expand(&[2, 2, 3])?;
    assert_eq!((y.shape(), y.dtype()), (&[2usize, 2, 3][..], DType::I64));
    assert_eq!(y.to_vec::<i64>()?, [1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]);
    let m = Tensor::from_vec(vec![true, false], &[1, 2], Device::Cpu)?;
    let e = m.expand(&[3, 2])?;
    assert_eq!(e.dtype(), DType::Bool);
    assert_eq!(e.to_vec::<bool>()?, [true, false, true, false, true, false]);
    let i = Tensor::from_vec(vec![7i32], &[1], Device::Cpu)?.expand(&[2, 3])?;
    assert_eq!(i.to_vec::<i32>()?, [7; 6]);
    // the gradient of new leading dims sums over them
    let f = Tensor::from_vec(vec![1.0f32, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
    f.expand(&[3, 2])?
        .sum(Vec::<usize>::new(), false)?
        .backward()?;
    assert_eq!(f.grad().unwrap().to_vec::<f32>()?, vec![3.0, 3.0]);
    // fewer dims than the tensor is an error
    assert!(matches!(
        x.expand(&[2]),
        Err(Error::ShapeMismatch { op: "expand", .. })
    ));
    Ok(())
}

/// torch: `torch.tensor([[1.5, -2., 0.]]) ** torch.tensor([[2.], [3.], [.5]])` is
/// `[[2.25, 4., 0.], [3.375, -8., 0.], [1.2247, nan, 0.]]`; integer powers stay integers
/// (`tensor([7, 1, -1, 2, 0]) ** tensor([15, -2, -3, -1, -1])` is
/// `[4747561509943, 1, -1, 0, 0]`); a 0-d F64 exponent keeps an F32 base's dtype.
#[test]
fn pow_of_two_tensors_broadcasts_promotes_and_differentiates() -> Result<()> {
    let a =
        Tensor::from_vec(vec![1.5f32, -2.0, 0.0], &[1, 3], Device::Cpu)?.set_requires_grad(true);
    let b = Tensor::from_vec(vec![2.0f32, 3.0, 0.5], &[3, 1], Device::Cpu)?.set_requires_grad(true);
    let y = a.pow_tensor(&b)?;
    assert_eq!((y.shape(), y.dtype()), (&[3usize, 3][..], DType::F32));
    let v = y.to_vec::<f32>()?;
    let want = [
        2.25,
        4.0,
        0.0,
        3.375,
        -8.0,
        0.0,
        1.5f32.sqrt(),
        f32::NAN,
        0.0,
    ];
    for (g, w) in v.iter().zip(want) {
        assert!((g.is_nan() && w.is_nan()) || (g - w).abs() < 1e-6, "{v:?}");
    }
    y.sum(Vec::<usize>::new(), false)?.backward()?;
    // torch: a.grad [[10.1582, nan, inf]]
    let ga = a.grad().unwrap().to_vec::<f32>()?;
    assert!((ga[0] - 10.158_2).abs() < 1e-3 && ga[1].is_nan() && ga[2] == f32::INFINITY);
    let x = Tensor::from_vec(vec![7i64, 1, -1, 2, 0], &[5], Device::Cpu)?;
    let e = Tensor::from_vec(vec![15i64, -2, -3, -1, -1], &[5], Device::Cpu)?;
    let p = x.pow_tensor(&e)?;
    assert_eq!(p.dtype(), DType::I64);
    assert_eq!(p.to_vec::<i64>()?, [4_747_561_509_943, 1, -1, 0, 0]);
    let z = vec3(DType::F32)?.pow_tensor(&scalar(2.0, DType::F64)?)?;
    assert_eq!(z.dtype(), DType::F32);
    assert_eq!(z.to_vec::<f32>()?, [1.0, 4.0, 9.0]);
    let m = Tensor::from_vec(vec![true], &[1], Device::Cpu)?;
    assert!(matches!(
        m.pow_tensor(&m),
        Err(Error::InvalidArgument { op: "pow", .. })
    ));
    Ok(())
}

/// Integer products, as `torch.tensor([[1, 2]]) @ torch.tensor([[3], [4]])`: exact I64 and I32
/// (I32 wrapping as PyTorch's int32 does), batched and transposed, and over a split inner dim
/// as a partial sum of integers; Bool is refused.
#[test]
fn integer_matmul_is_exact_and_bool_is_refused() -> Result<()> {
    let a = Tensor::from_vec(vec![1i64, 2], &[1, 2], Device::Cpu)?;
    let b = Tensor::from_vec(vec![3i64, 4], &[2, 1], Device::Cpu)?;
    let ab = a.matmul(&b)?;
    assert_eq!((ab.dtype(), ab.to_vec::<i64>()?), (DType::I64, vec![11]));
    // (2, 2, 3) x (3, 2), values past f64's 53-bit mantissa
    let big = 1i64 << 60;
    let x: Vec<i64> = (0..12).map(|i| big + i).collect();
    let w: Vec<i64> = (0..6).map(|i| i - 2).collect();
    let got = Tensor::from_vec(x.clone(), &[2, 2, 3], Device::Cpu)?
        .matmul(&Tensor::from_vec(w.clone(), &[3, 2], Device::Cpu)?)?
        .to_vec::<i64>()?;
    let want: Vec<i64> = (0..4)
        .flat_map(|r| {
            let x = &x;
            let w = &w;
            (0..2).map(move |c| {
                (0..3).fold(0i64, |s, l| {
                    s.wrapping_add(x[r * 3 + l].wrapping_mul(w[l * 2 + c]))
                })
            })
        })
        .collect();
    assert_eq!(got, want);
    // x W^T with W (1, 2): the transposed layout
    let nt = a.matmul_nt(&Tensor::from_vec(vec![5i64, 6], &[1, 2], Device::Cpu)?)?;
    assert_eq!(nt.to_vec::<i64>()?, [17]);
    let w32 = Tensor::from_vec(vec![1i32 << 30, 1 << 30], &[1, 2], Device::Cpu)?;
    let two = Tensor::from_vec(vec![2i32, 2], &[2, 1], Device::Cpu)?;
    let wrapped = w32.matmul(&two)?;
    assert_eq!(
        (wrapped.dtype(), wrapped.to_vec::<i32>()?),
        (DType::I32, vec![0])
    );
    let m = Tensor::from_vec(vec![true, false], &[1, 2], Device::Cpu)?;
    let n = Tensor::from_vec(vec![true, true], &[2, 1], Device::Cpu)?;
    assert!(matches!(m.matmul(&n), Err(Error::DTypeMismatch { .. })));
    let sums = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let a = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 4], (&p, Sbp::split(1)))?;
        let b = Tensor::from_vec(vec![5i64, 6, 7, 8], &[4, 1], (&p, Sbp::split(0)))?;
        a.matmul(&b)?.to_vec::<i64>()
    })?;
    assert_eq!(sums, [vec![70], vec![70]]);
    Ok(())
}

/// `var`/`std` as `torch.var`/`torch.std` on fixed inputs (corrections 1 and 0, a dim, all
/// dims), NaN for one element with correction 1, and the same values over a split dim on 2
/// ranks (partial sums, no gathering).
#[test]
fn var_and_std_match_torch() -> Result<()> {
    let v = vec![1.0f32, 2.0, 4.0, 3.0, 5.0, 9.0];
    let x = Tensor::from_vec(v.clone(), &[2, 3], Device::Cpu)?;
    // torch.tensor([[1., 2., 4.], [3., 5., 9.]]).var() = 8.0, .var(1) = [2.3333, 9.3333],
    // .std(0, correction=0) = [1.0, 1.5, 2.5]
    assert_eq!(x.var(vec![], 1.0, false)?.to_vec::<f32>()?, [8.0]);
    let rows = x.var(1, 1.0, false)?.to_vec::<f32>()?;
    assert!((rows[0] - 7.0 / 3.0).abs() < 1e-6 && (rows[1] - 28.0 / 3.0).abs() < 1e-5);
    assert_eq!(x.std(0, 0.0, false)?.to_vec::<f32>()?, [1.0, 1.5, 2.5]);
    let one = Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu)?;
    assert!(one.var(0, 1.0, false)?.to_vec::<f32>()?[0].is_nan());
    let split = simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let g = Tensor::from_vec(v.clone(), &[2, 3], (&p, Sbp::split(1)))?;
        g.var(1, 1.0, false)?.to_vec::<f32>()
    })?;
    for got in split {
        assert!(
            got.iter().zip(&rows).all(|(a, b)| (a - b).abs() < 1e-5),
            "{got:?}"
        );
    }
    Ok(())
}

/// `flip` and `repeat` as `torch.flip`/`Tensor.repeat`, also on a layout split along the
/// flipped or repeated dim (3 uneven ranks), with gradients.
#[test]
fn flip_and_repeat_on_split_layouts() -> Result<()> {
    let v: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let out = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let x = Tensor::from_vec(v.clone(), &[5, 2], (&p, Sbp::split(0)))?.set_requires_grad(true);
        let f = x.flip(&[0])?;
        let r = x.repeat(&[2, 1])?;
        let w = Tensor::from_vec(
            (0..20).map(|i| i as f32).collect(),
            &[10, 2],
            (&p, Sbp::split(0)),
        )?;
        r.mul(&w)?.sum(vec![], false)?.backward()?;
        Ok((
            f.to_vec::<f32>()?,
            r.to_vec::<f32>()?,
            x.grad().unwrap().to_vec::<f32>()?,
        ))
    })?;
    for (f, r, g) in out {
        let flipped: Vec<f32> = (0..5)
            .rev()
            .flat_map(|i| [2.0 * i as f32, 2.0 * i as f32 + 1.0])
            .collect();
        assert_eq!(f, flipped);
        assert_eq!(r, [v.clone(), v.clone()].concat());
        // each element is used twice: at i and at i + 10 of w
        let grad: Vec<f32> = (0..10).map(|i| (i + i + 10) as f32).collect();
        assert_eq!(g, grad);
    }
    let x = Tensor::from_vec(vec![1i64, 2], &[2], Device::Cpu)?;
    assert!(matches!(
        x.flip(&[0, 0]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(x.repeat(&[]), Err(Error::InvalidArgument { .. })));
    Ok(())
}

/// Long f32 sums are cascaded (pairwise over blocks), as PyTorch's: a million 0.1s sum to
/// 100000 within 2e-6 relative (one sequential pass per lane is off by about 6e-5), over the
/// last dim and over an outer dim; a mean likewise.
#[test]
fn long_f32_sums_stay_accurate() -> Result<()> {
    let n = 1_000_000;
    let want = 0.1f32 as f64 * n as f64;
    let x = Tensor::full_dtype(&[n], 0.1, DType::F32, Device::Cpu)?;
    let total = f64::from(x.sum(vec![], false)?.to_vec::<f32>()?[0]);
    assert!((total - want).abs() <= 2e-6 * want, "{total} vs {want}");
    let cols = Tensor::full_dtype(&[n / 2, 2], 0.1, DType::F32, Device::Cpu)?;
    for s in cols.sum(vec![0], false)?.to_vec::<f32>()? {
        let s = f64::from(s);
        assert!(
            (s - want / 2.0).abs() <= 2e-6 * want,
            "{s} vs {}",
            want / 2.0
        );
    }
    let m = f64::from(x.mean(vec![], false)?.to_vec::<f32>()?[0]);
    assert!((m - f64::from(0.1f32)).abs() <= 2e-7, "{m}");
    Ok(())
}

/// `std` of a constant has gradient 0 (PyTorch's), not the NaN of sqrt's at 0; elsewhere it is
/// `(x - mean) / ((n - 1) std)`.
#[test]
fn std_gradient_is_zero_for_a_constant() -> Result<()> {
    let x = Tensor::from_vec(vec![2.0f64; 4], &[4], Device::Cpu)?.set_requires_grad(true);
    x.std(vec![], 1.0, false)?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, [0.0; 4]);
    let v = [1.0f64, 2.0, 4.0, 7.0];
    let y = Tensor::from_vec(v.to_vec(), &[4], Device::Cpu)?.set_requires_grad(true);
    let s = y.std(vec![], 1.0, false)?;
    s.backward()?;
    let sd = s.to_vec::<f64>()?[0];
    let mean = v.iter().sum::<f64>() / 4.0;
    for (g, x) in y.grad().unwrap().to_vec::<f64>()?.iter().zip(v) {
        assert!((g - (x - mean) / (3.0 * sd)).abs() < 1e-14, "{g}");
    }
    Ok(())
}

/// Bitwise and / or / xor as PyTorch's: I32 with an I64 0-d operand stays I32, Bool is
/// logical, broadcasting rows against a column; a split input on 3 ranks gives the local
/// result; floats are refused.
#[test]
fn bitwise_ops_follow_pytorch() -> Result<()> {
    let a = Tensor::from_vec(vec![12i32, -1, 5, 0, 255, -128], &[2, 3], Device::Cpu)?;
    let b = Tensor::from_vec(vec![10i64], &[], Device::Cpu)?;
    let r = a.bitwise_and(&b)?;
    assert_eq!(
        (r.dtype(), r.to_vec::<i32>()?),
        (DType::I32, vec![8, 10, 0, 0, 10, 0])
    );
    let col = Tensor::from_vec(vec![1i32, 2], &[2, 1], Device::Cpu)?;
    assert_eq!(
        a.bitwise_xor(&col)?.to_vec::<i32>()?,
        [13, -2, 4, 2, 253, -126]
    );
    let t = Tensor::from_vec(vec![true, false, true], &[3], Device::Cpu)?;
    let f = Tensor::from_vec(vec![false, false, true], &[3], Device::Cpu)?;
    assert_eq!(t.bitwise_or(&f)?.to_vec::<bool>()?, [true, false, true]);
    assert_eq!(t.bitwise_xor(&f)?.to_vec::<bool>()?, [true, false, false]);
    let x = Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu)?;
    assert!(matches!(
        x.bitwise_and(&x),
        Err(Error::UnsupportedDType { .. })
    ));
    let v: Vec<i64> = (0..12).map(|i| i * 37 - 200).collect();
    let want: Vec<i64> = v.iter().map(|x| x | 0x55).collect();
    let got = simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1, 2])?;
        let x = Tensor::from_vec(v.clone(), &[4, 3], (&p, Sbp::split(0)))?;
        let m = Tensor::from_vec(vec![0x55i64], &[1], (&p, Sbp::broadcast()))?;
        x.bitwise_or(&m)?.to_vec::<i64>()
    })?;
    assert!(got.iter().all(|g| *g == want), "{got:?}");
    Ok(())
}
