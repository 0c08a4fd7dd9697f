//! Property test of dispatch: random operators on random shapes, with inputs in random SBPs on
//! random 1-D/2-D placements (so boxing is usually needed), equal the single-device result.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{DType, Device, NdSbp, Placement, Sbp, Tensor, simulate};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Call {
    Matmul,
    Add,
    Mul,
    Sum(usize, bool),
    Max(usize),
    Softmax(usize),
    Transpose,
    Gelu,
}

fn apply(c: &Call, a: &Tensor, b: &Tensor) -> gflow_core::Result<Tensor> {
    match c {
        Call::Matmul => a.matmul(b),
        Call::Add => a.add(b),
        Call::Mul => a.mul(&b.transpose(0, 1)?.transpose(0, 1)?),
        Call::Sum(d, k) => a.sum([*d], *k),
        Call::Max(d) => a.max([*d], false),
        Call::Softmax(d) => a.log_softmax(*d),
        Call::Transpose => a.transpose(0, 1),
        Call::Gelu => a.gelu(),
    }
}

fn sbp() -> impl Strategy<Value = Sbp> {
    prop_oneof![
        (0..2usize).prop_map(Sbp::Split),
        Just(Sbp::Broadcast),
        Just(Sbp::partial_sum()),
        Just(Sbp::partial_max())
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_on_random_layouts(
        m in 1..6usize, n in 1..6usize,
        call in prop_oneof![Just(Call::Matmul), Just(Call::Add), Just(Call::Mul), (0..2usize, any::<bool>()).prop_map(|(d, k)| Call::Sum(d, k)),
                            (0..2usize).prop_map(Call::Max), (0..2usize).prop_map(Call::Softmax), Just(Call::Transpose), Just(Call::Gelu)],
        two_d in any::<bool>(),
        sa in proptest::collection::vec(sbp(), 2), sb in proptest::collection::vec(sbp(), 2),
    ) {
        let (sa, sb): (NdSbp, NdSbp) = if two_d { (sa.into(), sb.into()) } else { (sa[0].into(), sb[0].into()) };
        let bshape = if matches!(call, Call::Matmul) { vec![n, m] } else { vec![m, n] };
        let av: Vec<f64> = (0..m * n).map(|i| ((i * 5 + 1) % 11) as f64 / 3.0 - 1.5).collect();
        let bv: Vec<f64> = (0..m * n).map(|i| ((i * 7 + 2) % 13) as f64 / 4.0 - 1.5).collect();
        let want = simulate(1, |_| {
            let a = Tensor::from_vec(av.clone(), &[m, n], Device::Cpu)?;
            let b = Tensor::from_vec(bv.clone(), &bshape, Device::Cpu)?;
            apply(&call, &a, &b)?.to_vec_cast::<f64>()
        }).unwrap().remove(0);
        let got = simulate(4, |_| {
            let p = if two_d { Placement::new("cpu", [[0, 1], [2, 3]])? } else { Placement::new("cpu", [0, 1, 3])? };
            let a = Tensor::from_vec(av.clone(), &[m, n], Device::Cpu)?.to_global(&p, NdSbp::broadcast(p.ndim()))?.to_global(&p, sa.clone())?;
            let b = Tensor::from_vec(bv.clone(), &bshape, Device::Cpu)?.to_global(&p, NdSbp::broadcast(p.ndim()))?.to_global(&p, sb.clone())?;
            assert_eq!(a.dtype(), DType::F64);
            let y = apply(&call, &a, &b)?;
            if p.contains(gflow_core::env::current().rank()) { y.to_vec_cast::<f64>().map(Some) } else { Ok(None) }
        });
        let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
        for v in got.into_iter().flatten() {
            prop_assert_eq!(v.len(), want.len());
            for (x, y) in v.iter().zip(&want) {
                prop_assert!((x - y).abs() <= 1e-9 * (1.0 + y.abs()), "{:?}: {} vs {}", call, x, y);
            }
        }
    }
}
