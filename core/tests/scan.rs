//! `cumsum` against a float64 running sum: local and on 3 uneven ranks and a 2x2 placement
//! (split on the summed dim and on another), long dims, gradients against finite differences,
//! dtypes as PyTorch's, NaN and infinities as PyTorch's, a bad dim refused.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, Error, Result, Tensor, bf16, simulate};

mod reference;

/// Values in [-1, 1) from the shared deterministic generator.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut g = reference::Lcg(seed);
    (0..n)
        .map(|_| g.next(1 << 20) as f64 / f64::from(1 << 19) - 1.0)
        .collect()
}

/// The running sum along `dim` of a row-major tensor of `shape`, in f64.
fn reference(v: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let n = shape[dim];
    let mut out = v.to_vec();
    for base in 0..v.len() {
        let k = (base / inner) % n;
        if k > 0 {
            out[base] = out[base - inner] + v[base];
        }
    }
    out
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn cumsum_equals_a_float64_running_sum_locally() -> Result<()> {
    for (shape, dim) in [
        (vec![7], 0),
        (vec![3, 64], 1),
        (vec![2, 300], 1),
        (vec![300, 3], 0),
        (vec![2, 3, 5], 1),
        (vec![1, 5000], 1),
    ] {
        let v = values(shape.iter().product(), 3);
        let want = reference(&v, &shape, dim);
        let x = Tensor::from_vec(v.clone(), &shape, Device::Cpu)?;
        close(&x.cumsum(dim)?.to_vec::<f64>()?, &want, 1e-12, "f64");
        let f = x.to_dtype(DType::F32)?.cumsum(dim)?;
        assert_eq!(f.dtype(), DType::F32);
        close(&f.to_vec_cast::<f64>()?, &want, 2e-5, "f32");
    }
    Ok(())
}

#[test]
fn cumsum_dtypes_follow_pytorch() -> Result<()> {
    let i = Tensor::from_vec(vec![1i32, -2, 3, 4], &[4], Device::Cpu)?.cumsum(0)?;
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!(i.to_vec::<i64>()?, [1, -1, 2, 6]);
    let big = Tensor::from_vec(vec![1i64 << 40; 100], &[100], Device::Cpu)?.cumsum(0)?;
    assert_eq!(big.to_vec::<i64>()?[99], 100i64 << 40);
    let b = Tensor::from_vec(vec![1.0f32, 0.0, 2.0], &[3], Device::Cpu)?
        .to_dtype(DType::Bool)?
        .cumsum(0)?;
    assert_eq!((b.dtype(), b.to_vec::<i64>()?), (DType::I64, vec![1, 1, 2]));
    // BF16 sums in f32 and rounds once: 256 + 1 + 1 is 258 (each partial sum rounded to bf16
    // would stay at 256).
    let h = Tensor::from_vec(vec![256.0f32, 1.0, 1.0], &[3], Device::Cpu)?
        .to_dtype(DType::BF16)?
        .cumsum(0)?;
    assert_eq!(h.dtype(), DType::BF16);
    assert_eq!(
        h.to_vec_cast::<bf16>()?,
        [256.0f32, 256.0, 258.0].map(bf16::from_f32)
    );
    let e = Tensor::from_vec(vec![1.0f32], &[1], Device::Cpu)?
        .cumsum(1)
        .unwrap_err();
    assert!(matches!(e, Error::DimOutOfRange { .. }), "{e}");
    let empty = Tensor::from_vec(Vec::<f32>::new(), &[2, 0], Device::Cpu)?.cumsum(1)?;
    assert_eq!(empty.shape(), &[2, 0]);
    Ok(())
}

/// On 3 uneven ranks and on a 2x2 placement, split on the summed dim or another, the result
/// equals the local one, and the gradient of sum(w * cumsum(x)) is the reversed running sum of
/// w (checked against central finite differences of the f64 function).
#[test]
fn cumsum_on_global_layouts_and_its_gradient() {
    let shape = [6usize, 130];
    let v = values(shape.iter().product(), 11);
    let w = values(shape.iter().product(), 12);
    let layouts = reference::split_layouts();
    for dim in [0, 1] {
        let want = reference(&v, &shape, dim);
        // d/dx_j sum_i w_i * y_i where y = cumsum(x): the sum of w over the elements at or
        // after j along `dim`.
        let f = |x: &[f64]| -> f64 {
            reference(x, &shape, dim)
                .iter()
                .zip(&w)
                .map(|(y, w)| y * w)
                .sum()
        };
        let mut fd = vec![0.0; v.len()];
        for j in (0..v.len()).step_by(37) {
            let (mut a, mut b) = (v.clone(), v.clone());
            a[j] += 1e-6;
            b[j] -= 1e-6;
            fd[j] = (f(&a) - f(&b)) / 2e-6;
        }
        for (n, p, sbp) in &layouts {
            let out = simulate(*n, |_| {
                let x =
                    Tensor::from_vec(v.clone(), &shape, (p, sbp.clone()))?.set_requires_grad(true);
                let wt = Tensor::from_vec(w.clone(), &shape, (p, sbp.clone()))?;
                let y = x.cumsum(dim)?;
                (&y * &wt)?.sum(vec![], false)?.backward()?;
                Ok((y.to_vec::<f64>()?, x.grad().unwrap().to_vec::<f64>()?))
            })
            .unwrap();
            for (y, g) in out {
                close(&y, &want, 1e-12, &format!("{p} {sbp} dim {dim}"));
                for j in (0..v.len()).step_by(37) {
                    assert!(
                        (g[j] - fd[j]).abs() < 1e-6 * (1.0 + fd[j].abs()),
                        "grad {p} {sbp} dim {dim} [{j}]: {} vs {}",
                        g[j],
                        fd[j]
                    );
                }
            }
        }
    }
}

/// A NaN or an infinity reaches only the sums from it on (PyTorch's), and f32 sums are
/// accumulated in f64: 1e8 + 1 - 1e8 + 1 gives 1 then 2, not 0 then 1.
#[test]
fn cumsum_keeps_nan_and_inf_to_their_right_and_accumulates_widely() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, f32::NAN, 1.0], &[5], Device::Cpu)?;
    let y = x.cumsum(0)?.to_vec::<f32>()?;
    assert_eq!(y[..3], [1.0, 3.0, 6.0]);
    assert!(y[3].is_nan() && y[4].is_nan(), "{y:?}");
    let x = Tensor::from_vec(vec![1.0f64, 2.0, f64::INFINITY, 3.0], &[4], Device::Cpu)?;
    assert_eq!(
        x.cumsum(0)?.to_vec::<f64>()?,
        [1.0, 3.0, f64::INFINITY, f64::INFINITY]
    );
    let x = Tensor::from_vec(vec![1e8f32, 1.0, -1e8, 1.0], &[4], Device::Cpu)?;
    assert_eq!(x.cumsum(0)?.to_vec::<f32>()?[2..], [1.0, 2.0]);
    Ok(())
}
