//! core's conformance suite on the CUDA backend, and the backend's own errors. Without a CUDA
//! driver every test says loudly that it skipped (the backend is `BackendUnavailable`, never a
//! panic); `GFLOW_REQUIRE_BACKEND=cuda` turns the skip into a failure on a GPU machine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gflow_core::backend::{AttentionDims, Backend, BinaryOp, MatmulDims, ReduceKind, UnaryOp};
use gflow_core::{Error, HostData};
use gflow_cuda::CudaBackend;

gflow_core::conformance_tests!("cuda", CudaBackend::new());

/// The backend, or `None` after a loud skip message.
fn backend(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => {
            eprintln!("cuda device: {}", b.device_name());
            Some(b)
        }
        Err(e) if gflow_core::backend::required("cuda") => panic!("cuda required: {e}"),
        Err(e) => {
            assert!(
                matches!(e, Error::BackendUnavailable { .. }),
                "no CUDA must be BackendUnavailable, got {e:?}"
            );
            gflow_core::backend::say_skipped(test, &format!("no CUDA here: {e}"));
            None
        }
    }
}

/// Opening the backend twice without a driver is the same typed error both times (the library
/// check runs before cudarc could panic); with one, i64 arithmetic is a typed error.
#[test]
fn missing_driver_and_typed_errors() {
    let Some(b) = backend("missing_driver_and_typed_errors") else {
        assert!(matches!(
            CudaBackend::new(),
            Err(Error::BackendUnavailable { .. })
        ));
        return;
    };
    let x = b.upload(&HostData::I64(vec![1, 2])).unwrap();
    assert!(matches!(
        b.unary(UnaryOp::Exp, &x),
        Err(Error::Device { .. })
    ));
    let y = b.upload(&HostData::F32(vec![1.0, 2.0])).unwrap();
    assert!(matches!(
        b.binary(BinaryOp::Add, &y, &[2], &x, &[2], &[2]),
        Err(Error::DTypeMismatch { .. })
    ));
}

/// Large tensors: a full reduction that the backend cuts into parts, a reduction over leading
/// and scattered dims, and a large product, against host references.
#[test]
fn large_reductions_and_products() {
    let Some(b) = backend("large_reductions_and_products") else {
        return;
    };
    let n = 3 << 20;
    let v: Vec<f32> = (0..n).map(|i| (i % 17) as f32 - 8.0).collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let got = |s: &gflow_cuda::CudaStorage| -> Vec<f64> { b.download(s).unwrap().to_vec() };
    assert_eq!(
        got(&b.reduce(ReduceKind::Max, &x, &[n], &[0]).unwrap()),
        vec![8.0]
    );
    let want: f64 = v.iter().map(|&x| f64::from(x)).sum();
    let total = got(&b.reduce(ReduceKind::Sum, &x, &[n], &[0]).unwrap())[0];
    assert!(
        (total - want).abs() <= 1e-6 * 8.0 * n as f64,
        "{total} vs {want}"
    );
    // (3, 1024, 1024): over dims [0, 2] (scattered) and [0] (leading)
    let shape = [3usize, 1024, 1024];
    let s02 = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0, 2]).unwrap());
    let s0 = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0]).unwrap());
    for j in [0usize, 1, 511, 1023] {
        let w02: f64 = (0..3)
            .flat_map(|i| (0..1024).map(move |k| (i, k)))
            .map(|(i, k)| f64::from(v[(i * 1024 + j) * 1024 + k]))
            .sum();
        assert!(
            (s02[j] - w02).abs() < 1e-2,
            "[0,2] at {j}: {} vs {w02}",
            s02[j]
        );
        let w0: f64 = (0..3).map(|i| f64::from(v[i * 1024 * 1024 + j])).sum();
        assert!((s0[j] - w0).abs() < 1e-4, "[0] at {j}");
    }
    // a 1024 x 1024 x 1024 product: spot-check entries against f64 dot products
    let m = 1024;
    let a: Vec<f32> = (0..m * m)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let p = b.upload(&HostData::F32(a.clone())).unwrap();
    let dims = MatmulDims {
        batch: 1,
        m,
        k: m,
        n: m,
        b_batched: false,
        a_trans: false,
        b_trans: true,
    };
    let c = got(&b.matmul(&p, &p, dims).unwrap());
    for (i, j) in [(0, 0), (3, 1000), (1023, 17)] {
        let w: f64 = (0..m)
            .map(|l| f64::from(a[i * m + l]) * f64::from(a[j * m + l]))
            .sum();
        assert!((c[i * m + j] - w).abs() < 1e-3, "({i}, {j})");
    }
}

/// LayerNorm and RMSNorm on rows longer than a block's threads (several passes per thread)
/// and on more rows than one launch has blocks (65536: blocks loop over the rest).
#[test]
fn norms_of_long_rows() {
    let Some(b) = backend("norms_of_long_rows") else {
        return;
    };
    let r = gflow_core::backend::Resident::new(b);
    if let Err(e) =
        gflow_core::conformance::norms_of(&r, &[(5, 300), (2, 1030), (3, 4099), (70_000, 3)])
    {
        panic!("{e}");
    }
}

/// Attention by its definition in f64 on dense (heads, seq, dim) operands: the output, each
/// query row's log-sum-exp, and dq, dk, dv for the output gradient `g`.
fn attention_reference([q, k, v, g]: [&[f64]; 4], d: &AttentionDims) -> [Vec<f64>; 5] {
    let (tq, tk, hd, dv) = (d.seq_q, d.seq_k, d.head_dim, d.v_dim);
    let mut out = vec![0.0; d.heads * tq * dv];
    let mut lse = vec![0.0; d.heads * tq];
    let (mut dq, mut dk, mut dvs) = (
        vec![0.0; d.heads * tq * hd],
        vec![0.0; d.heads * tk * hd],
        vec![0.0; d.heads * tk * dv],
    );
    for h in 0..d.heads {
        let (qh, kh, vh) = (h * tq, h * tk, h * tk);
        for i in 0..tq {
            let seen = if d.causal { (i + 1).min(tk) } else { tk };
            let dot = |a: &[f64], ra: usize, b: &[f64], rb: usize, w: usize| -> f64 {
                (0..w).map(|c| a[ra * w + c] * b[rb * w + c]).sum()
            };
            let s: Vec<f64> = (0..seen)
                .map(|j| d.scale * dot(q, qh + i, k, kh + j, hd))
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let l = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            lse[qh + i] = l;
            let p: Vec<f64> = s.iter().map(|x| (x - l).exp()).collect();
            let dp: Vec<f64> = (0..seen).map(|j| dot(g, qh + i, v, vh + j, dv)).collect();
            let rowsum: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
            for j in 0..seen {
                let ds = d.scale * p[j] * (dp[j] - rowsum);
                for c in 0..dv {
                    out[(qh + i) * dv + c] += p[j] * v[(vh + j) * dv + c];
                    dvs[(vh + j) * dv + c] += p[j] * g[(qh + i) * dv + c];
                }
                for c in 0..hd {
                    dq[(qh + i) * hd + c] += ds * k[(kh + j) * hd + c];
                    dk[(kh + j) * hd + c] += ds * q[(qh + i) * hd + c];
                }
            }
        }
    }
    [out, lse, dq, dk, dvs]
}

/// Fused attention, forward and backward, on long sequences (1030 rows: many row blocks and
/// key tiles, causal and not, dense and packed) and on more (problem, row block) pairs than one
/// launch has blocks (70 000 problems: blocks loop over the rest), against f64 loops.
#[test]
fn attention_of_long_sequences() {
    if let Some(b) = backend("attention_of_long_sequences") {
        long_attentions(&b);
    }
}

/// [`attention_of_long_sequences`] on backend `b`.
fn long_attentions<B: Backend>(b: &B) {
    let vals = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 2_654_435_761 + seed * 97) % 2000) as f32 / 1000.0 - 1.0)
            .collect()
    };
    let up = |x: &[f32]| b.upload(&HostData::F32(x.to_vec())).unwrap();
    let got = |s: &B::Storage| -> Vec<f64> { b.download(s).unwrap().to_vec() };
    let wide = |x: &[f32]| -> Vec<f64> { x.iter().map(|&e| f64::from(e)).collect() };
    let check = |what: &str, got: &[f64], want: &[f64]| {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 3e-4 * (1.0 + w.abs()),
                "{what} at {i}: {g} vs {w}"
            );
        }
    };
    // (batch, heads, seq, head_dim, causal, packed)
    for (batch, heads, seq, hd, causal, packed) in [
        (1, 2, 1030, 16, true, false),
        (1, 1, 1030, 8, false, false),
        (2, 35_000, 3, 4, true, false),
        (1, 2, 1030, 16, true, true),
    ] {
        let n = batch * heads;
        let d = AttentionDims {
            heads: n,
            seq_q: seq,
            seq_k: seq,
            head_dim: hd,
            v_dim: hd,
            scale: 1.0 / (hd as f64).sqrt(),
            causal,
        };
        let [q, k, v, g] = [0, 1, 2, 3].map(|s| vals(n * seq * hd, seq + s));
        let [out, lse, dq, dk, dv] =
            attention_reference([&wide(&q), &wide(&k), &wide(&v), &wide(&g)], &d);
        let what = format!("attention {n} x {seq} x {hd} causal {causal} packed {packed}");
        if packed {
            // dense (problem, row) of each operand <-> packed (batch, row, head, part)
            let at = |p: usize, t: usize| (p / heads * seq + t) * heads + p % heads;
            let mut qkv = vec![0.0f32; 3 * n * seq * hd];
            let (mut po, mut pl, mut pg) = (
                vec![0.0; out.len()],
                vec![0.0; lse.len()],
                vec![0.0f32; g.len()],
            );
            let mut pd = vec![0.0; qkv.len()];
            for p in 0..n {
                for t in 0..seq {
                    let (r, x) = (at(p, t), p * seq + t);
                    for (part, (src, grad)) in
                        [(&q, &dq), (&k, &dk), (&v, &dv)].into_iter().enumerate()
                    {
                        let to = (r * 3 + part) * hd;
                        qkv[to..to + hd].copy_from_slice(&src[x * hd..(x + 1) * hd]);
                        pd[to..to + hd].copy_from_slice(&grad[x * hd..(x + 1) * hd]);
                    }
                    po[r * hd..(r + 1) * hd].copy_from_slice(&out[x * hd..(x + 1) * hd]);
                    pg[r * hd..(r + 1) * hd].copy_from_slice(&g[x * hd..(x + 1) * hd]);
                    pl[r] = lse[x];
                }
            }
            let saved = got(&b.attention_packed(&up(&qkv), d, heads, true).unwrap());
            check(&what, &saved, &[po.clone(), pl.clone()].concat());
            let (o, l) = saved.split_at(po.len());
            let [o, l] = [o, l].map(|x| x.iter().map(|&e| e as f32).collect::<Vec<f32>>());
            let grad = b
                .attention_packed_grad(&up(&qkv), &up(&pg), &up(&o), &up(&l), d, heads)
                .unwrap();
            check(&format!("{what} gradient"), &got(&grad), &pd);
        } else {
            let [qb, kb, vb] = [&q, &k, &v].map(|x| up(x));
            let saved = got(&b.attention(&qb, &kb, &vb, d, true).unwrap());
            check(&what, &saved, &[out.clone(), lse.clone()].concat());
            let (o, l) = saved.split_at(out.len());
            let [o, l] = [o, l].map(|x| x.iter().map(|&e| e as f32).collect::<Vec<f32>>());
            let grads = b
                .attention_grad(&qb, &kb, &vb, &up(&g), &up(&o), &up(&l), d)
                .unwrap();
            check(
                &format!("{what} gradients"),
                &got(&grads),
                &[dq, dk, dv].concat(),
            );
        }
    }
}
