//! Operators through the public API: polymorphism (local and global), automatic boxing when no
//! signature matches the inputs, and typed errors.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow::Error;
use gflow::prelude::*;

#[test]
fn local_ops_and_operator_overloads() -> Result<()> {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2], Device::Cpu)?;
    let b = Tensor::from_vec(vec![10.0f32, 20.0], &[2], Device::Cpu)?;
    assert_eq!(
        (&a + &b)?.to_vec_cast::<f32>()?,
        vec![11.0, 22.0, 13.0, 24.0]
    );
    assert_eq!(
        (&a - &b)?.to_vec_cast::<f32>()?,
        vec![-9.0, -18.0, -7.0, -16.0]
    );
    assert_eq!((&a * &a)?.to_vec_cast::<f32>()?, vec![1.0, 4.0, 9.0, 16.0]);
    assert_eq!((&a / &b)?.to_vec_cast::<f32>()?, vec![0.1, 0.1, 0.3, 0.2]);
    assert_eq!((-&a)?.to_vec_cast::<f32>()?, vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!(
        a.matmul(&a)?.to_vec_cast::<f32>()?,
        vec![7.0, 10.0, 15.0, 22.0]
    );
    assert_eq!(a.sum([0], false)?.to_vec_cast::<f32>()?, vec![4.0, 6.0]);
    assert_eq!(a.mean([], false)?.to_vec_cast::<f32>()?, vec![2.5]);
    assert_eq!(a.max([1], true)?.shape(), &[2, 1]);
    assert_eq!(
        a.transpose(0, 1)?.to_vec_cast::<f32>()?,
        vec![1.0, 3.0, 2.0, 4.0]
    );
    assert_eq!(Tensor::cat(&[&a, &a], 0)?.shape(), &[4, 2]);
    assert_eq!(a.narrow(1, 1, 1)?.to_vec_cast::<f32>()?, vec![2.0, 4.0]);
    assert_eq!(a.reshape(&[4])?.shape(), &[4]);
    assert!(a.is_local() && a.matmul(&a)?.is_local());
    // argument forms: one dim or a list; tensors or references; integer fill values
    assert_eq!(a.sum(1, false)?.to_vec_cast::<f32>()?, vec![3.0, 7.0]);
    assert_eq!(a.sum([0, 1], false)?.to_vec_cast::<f32>()?, vec![10.0]);
    assert_eq!(Tensor::cat(&[a.clone(), a.clone()], 1)?.shape(), &[2, 4]);
    assert_eq!(
        Tensor::full(&[2], 3, Device::Cpu)?.to_vec_cast::<f32>()?,
        vec![3.0, 3.0]
    );
    Ok(())
}

/// x split(0) and w split(0) match no matmul signature: gflow boxes the cheaper side (w, the
/// smaller, to broadcast) and the result is the single-device product.
#[test]
fn no_exact_signature_boxes_the_cheapest_input() -> Result<()> {
    let out = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        gflow::manual_seed(9);
        let x = Tensor::randn(&[64, 4], (&p, Sbp::split(0)))?;
        let w = Tensor::randn(&[4, 3], (&p, Sbp::split(0)))?;
        let y = x.matmul(&w)?;
        Ok((
            y.sbp().map(ToString::to_string),
            y.to_vec_cast::<f32>()?,
            x.to_vec_cast::<f32>()?,
            w.to_vec_cast::<f32>()?,
        ))
    })?;
    let (sbp, y, x, w) = out[0].clone();
    assert_eq!(sbp.as_deref(), Some("(split(dim=0),)"));
    for i in 0..64 {
        for j in 0..3 {
            let want: f32 = (0..4).map(|l| x[i * 4 + l] * w[l * 3 + j]).sum();
            assert!((y[i * 3 + j] - want).abs() < 1e-4);
        }
    }
    Ok(())
}

#[test]
fn operator_errors_are_typed() {
    let a = Tensor::zeros(&[2, 3], Device::Cpu).unwrap();
    let b = Tensor::zeros(&[4, 5], Device::Cpu).unwrap();
    assert!(matches!(
        a.matmul(&b),
        Err(Error::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        &a + &b,
        Err(Error::ShapeMismatch { op: "add", .. })
    ));
    assert!(matches!(
        a.sum([2], false),
        Err(Error::DimOutOfRange {
            op: "sum",
            dim: 2,
            ndim: 2
        })
    ));
    assert!(matches!(a.softmax(5), Err(Error::DimOutOfRange { .. })));
    assert!(matches!(
        a.reshape(&[5]),
        Err(Error::ShapeMismatch { op: "reshape", .. })
    ));
    assert!(matches!(
        a.narrow(1, 2, 2),
        Err(Error::InvalidArgument { op: "narrow", .. })
    ));
    assert!(matches!(
        Tensor::cat(&[&a, &b], 0),
        Err(Error::ShapeMismatch { op: "cat", .. })
    ));
    assert!(matches!(
        Tensor::cat::<&Tensor>(&[], 0),
        Err(Error::InvalidArgument { op: "cat", .. })
    ));
    assert!(matches!(
        a.sum([1, 1], false),
        Err(Error::InvalidArgument { .. })
    ));
    let i = Tensor::from_vec(vec![1i64, 2], &[2], Device::Cpu).unwrap();
    // As PyTorch: a float function of integers computes in F32.
    let e = i.exp().unwrap();
    assert_eq!(e.dtype(), DType::F32);
    assert_eq!(
        e.to_vec_cast::<f32>().unwrap(),
        vec![1f32.exp(), 2f32.exp()]
    );
    let f64t = Tensor::zeros(&[2, 3], Device::Cpu)
        .unwrap()
        .to_vec_cast::<f64>()
        .unwrap();
    let d = Tensor::from_vec(f64t, &[2, 3], Device::Cpu).unwrap();
    // Mixed float widths promote to the wider (PyTorch's rules).
    assert_eq!((&a + &d).unwrap().dtype(), DType::F64);
    let e = gflow::simulate(3, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let q = Placement::new("cpu", [1, 2])?;
        let x = Tensor::ones(&[2, 2], (&p, Sbp::split(0)))?;
        let y = Tensor::ones(&[2, 2], (&q, Sbp::split(0)))?;
        (&x + &y).map(drop)
    })
    .unwrap_err();
    assert!(
        matches!(e, Error::PlacementMismatch { op: "add", .. }),
        "{e}"
    );
    let e = gflow::simulate(2, |_| {
        let p = Placement::new("cpu", [0, 1])?;
        let x = Tensor::ones(&[2, 2], (&p, Sbp::split(0)))?;
        let y = Tensor::ones(&[2, 2], Device::Cpu)?;
        (&x + &y).map(drop)
    })
    .unwrap_err();
    assert!(matches!(e, Error::WrongKind { op: "add", .. }), "{e}");
}

/// API.md: comparisons run on every backend in every dtype. wgpu cannot compute F64, so its
/// comparisons of F64 tensors run on the host copy (as I64's) instead of being refused.
#[test]
fn f64_comparisons_run_on_wgpu() -> Result<()> {
    let run = || -> Result<Vec<Vec<bool>>> {
        let a = Tensor::from_vec(vec![1.0f64, 2.0, f64::NAN, -0.0], &[4], Device::Wgpu)?;
        let b = Tensor::from_vec(vec![2.0f64], &[1], Device::Wgpu)?;
        let z = Tensor::from_vec(vec![0.0f64, 2.0, 1.0, 0.0], &[4], Device::Wgpu)?;
        let mut out = vec![];
        for c in [
            a.eq(&b)?,
            a.ne(&b)?,
            a.lt(&b)?,
            a.le(&b)?,
            a.gt(&b)?,
            a.ge(&b)?,
            a.eq(&z)?,
        ] {
            assert_eq!(c.dtype(), DType::Bool);
            assert_eq!(c.device(), Device::Wgpu);
            out.push(c.to_vec::<bool>()?);
        }
        Ok(out)
    };
    let got = match run() {
        Ok(v) => v,
        Err(Error::BackendUnavailable { reason, .. }) if !gflow::backend::required("wgpu") => {
            gflow::backend::say_skipped("f64_comparisons_run_on_wgpu", &reason);
            return Ok(());
        }
        Err(e) => panic!("wgpu: {e}"),
    };
    let (t, f) = (true, false);
    assert_eq!(
        got,
        vec![
            vec![f, t, f, f],
            vec![t, f, t, t],
            vec![t, f, f, t],
            vec![t, t, f, t],
            vec![f, f, f, f],
            vec![f, t, f, f],
            vec![f, t, f, t],
        ]
    );
    Ok(())
}
