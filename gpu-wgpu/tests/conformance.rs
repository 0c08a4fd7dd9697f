//! core's conformance suite on the wgpu backend (lavapipe in CI, which sets
//! `GFLOW_REQUIRE_BACKEND=wgpu` so a missing adapter fails instead of skipping), and the
//! backend's own errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gflow_core::backend::{Backend, BinaryOp, ReduceKind, UnaryOp};
use gflow_core::{Error, HostData};

gflow_core::conformance_tests!("wgpu", gflow_wgpu::WgpuBackend::new());

/// The conformance suite again under a storage-binding limit of 1 KiB (products: 8 KiB, where
/// 1 KiB tiles would take minutes; attention: what its largest problem needs), so that every
/// kernel's path for tensors past the limit (pieces, blocks, tiles, chunks) runs on the
/// suite's small and odd shapes.
mod small_bindings {
    fn limited(bytes: u64) -> gflow_core::Result<gflow_wgpu::WgpuBackend> {
        gflow_wgpu::WgpuBackend::new().map(|mut b| {
            b.set_binding_limit(bytes);
            b
        })
    }

    gflow_core::conformance_tests!("wgpu", |case| limited(match case {
        "matmul_shapes" => 8192,
        // attention binds whole problems (packed: batch rows): the suite's largest dense
        // problem holds a q of 20 KiB, its largest packed batch row 193 KiB (windows of
        // problems run in `attention_of_long_sequences`)
        "attentions" => 24 << 10,
        "packed_attentions" => 200 << 10,
        // argsort binds whole rows of the sorted dim: the suite's longest (20000 i64 positions,
        // 160 KiB) alone in a block, so the lines go in blocks of one
        "argsorts" => 192 << 10,
        _ => 1024,
    }));
}

/// The conformance suite again with the F16 casts on the packed-word path, on an adapter
/// opened with `SHADER_F16` (elsewhere the first run already took that path).
mod packed_f16 {
    gflow_core::conformance_tests!(
        "wgpu",
        gflow_wgpu::WgpuBackend::new().map(|mut b| {
            eprintln!("wgpu SHADER_F16: {}", b.shader_f16());
            b.set_shader_f16(false);
            b
        })
    );
}

/// The backend for `test`, or `None` after saying loudly that it skipped (no adapter); with
/// `GFLOW_REQUIRE_BACKEND=wgpu` a missing adapter fails the test instead.
fn adapter(test: &str) -> Option<gflow_wgpu::WgpuBackend> {
    match gflow_wgpu::WgpuBackend::new() {
        Ok(b) => Some(b),
        Err(e) if gflow_core::backend::required("wgpu") => panic!("{test}: wgpu required: {e}"),
        Err(e) => {
            gflow_core::backend::say_skipped(test, &format!("no wgpu adapter: {e}"));
            None
        }
    }
}

/// Element (i, j) of the product of `av` and `bv` in f64, each stored transposed or not, as
/// `MatmulDims` describes them (one batch).
fn product_at(
    av: &[f32],
    bv: &[f32],
    d: gflow_core::backend::MatmulDims,
    i: usize,
    j: usize,
) -> f64 {
    (0..d.k)
        .map(|l| {
            let a = if d.a_trans {
                av[l * d.m + i]
            } else {
                av[i * d.k + l]
            };
            let b = if d.b_trans {
                bv[j * d.k + l]
            } else {
                bv[l * d.n + j]
            };
            f64::from(a) * f64::from(b)
        })
        .sum()
}

/// Prints the adapter (so a CI log shows what ran); arithmetic outside f32 and a tensor past
/// the storage-binding limit are typed errors, not panics.
#[test]
fn adapter_and_typed_errors() {
    let Some(b) = adapter("adapter_and_typed_errors") else {
        return;
    };
    eprintln!("wgpu adapter: {}", b.adapter());
    let x = b.upload(&HostData::F64(vec![1.0, 2.0])).unwrap();
    assert!(matches!(
        b.unary(UnaryOp::Exp, &x),
        Err(Error::Device { .. })
    ));
}

/// A tensor just past the storage-binding limit: elementwise kernels, a full reduction and a
/// copy work on it in pieces (values checked everywhere).
#[test]
fn tensors_past_the_binding_limit() {
    let Some(b) = adapter("tensors_past_the_binding_limit") else {
        return;
    };
    let n = (b.max_binding() / 4) as usize + 1027;
    let v: Vec<f32> = (0..n).map(|i| (i % 17) as f32 - 8.0).collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let got = |s: &gflow_wgpu::WgpuStorage| -> Vec<f32> {
        match b.download(s).unwrap() {
            HostData::F32(v) => v,
            other => panic!("{other:?}"),
        }
    };
    let neg = got(&b.unary(UnaryOp::Neg, &x).unwrap());
    assert!(neg.iter().zip(&v).all(|(a, b)| *a == -b));
    let sum = got(&b.binary(BinaryOp::Add, &x, &[n], &x, &[n], &[n]).unwrap());
    assert!(sum.iter().zip(&v).all(|(a, b)| *a == 2.0 * b));
    let shifted = got(&b.add_scalar(&x, 0.5).unwrap());
    assert!(shifted.iter().zip(&v).all(|(a, b)| *a == b + 0.5));
    let max = got(&b.reduce(ReduceKind::Max, &x, &[n], &[0]).unwrap());
    assert_eq!(max, vec![8.0]);
    let total = got(&b.reduce(ReduceKind::Sum, &x, &[n], &[0]).unwrap());
    let want: f64 = v.iter().map(|&x| f64::from(x)).sum();
    let scale: f64 = v.iter().map(|&x| f64::from(x).abs()).sum();
    assert!(
        (f64::from(total[0]) - want).abs() <= 1e-6 * scale,
        "sum {} vs {want}",
        total[0]
    );
    let copied = got(&b.permute(&x, &[n], &[0]).unwrap());
    assert!(copied == v, "a contiguous copy in pieces");
}

/// The other matmul kernel than the adapter's default (the tiled one on lavapipe), through the
/// same conformance cases, so both kernels are checked on every machine.
#[test]
fn the_other_matmul_kernel() {
    let Some(mut b) = adapter("the_other_matmul_kernel") else {
        return;
    };
    let tiled = b.tiled_matmul();
    b.set_tiled_matmul(!tiled);
    if let Err(e) = gflow_core::conformance::matmul_shapes(&gflow_core::backend::Resident::new(b)) {
        panic!("matmul with tiled = {}: {e}", !tiled);
    }
}

/// A dropped tensor's buffer goes to the pool and the next tensor of its size class reuses it
/// (with the new tensor's values, not the old ones).
#[test]
fn freed_buffers_are_reused() {
    let Some(b) = adapter("freed_buffers_are_reused") else {
        return;
    };
    let before = b.pooled_bytes();
    let x = b.upload(&HostData::F32(vec![1.0; 10_000])).unwrap();
    drop(x);
    assert!(b.pooled_bytes() > before, "the freed buffer is kept");
    let y = b.upload(&HostData::F32(vec![2.0; 9_000])).unwrap();
    assert_eq!(
        b.pooled_bytes(),
        before,
        "and reused for a tensor of its class"
    );
    assert_eq!(b.download(&y).unwrap(), HostData::F32(vec![2.0; 9_000]));
}

/// A product whose left operand and result exceed one storage binding runs in row blocks
/// bound at unaligned offsets (k = 257 puts every block boundary mid-alignment), with a shared
/// and a transposed right operand, against f64 dot products on the host.
#[test]
fn matmul_past_the_binding_limit() {
    let Some(b) = adapter("matmul_past_the_binding_limit") else {
        return;
    };
    let k = 257;
    let big = (b.max_binding() / 4) as usize / k + 37;
    // a large `a` (rows of a and c in blocks; a transposed `a` made contiguous first), then a
    // large `b` (column tiles of b and c; a `b` not stored transposed is transposed first)
    for (m, n) in [(big, 3), (3, big)] {
        let av: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7) % 23) as f32 / 23.0 - 0.5)
            .collect();
        let bv: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let a = b.upload(&HostData::F32(av.clone())).unwrap();
        let x = b.upload(&HostData::F32(bv.clone())).unwrap();
        for (a_trans, b_trans) in [(false, false), (false, true), (true, false), (true, true)] {
            let dims = gflow_core::backend::MatmulDims {
                batch: 1,
                m,
                k,
                n,
                b_batched: false,
                a_trans,
                b_trans,
            };
            let c: Vec<f64> = b
                .download(&b.matmul(&a, &x, dims).unwrap())
                .unwrap()
                .to_vec();
            for i in 0..m {
                for j in 0..n {
                    let w = product_at(&av, &bv, dims, i, j);
                    assert!(
                        (c[i * n + j] - w).abs() < 1e-4,
                        "{m}x{k}x{n}, a_trans {a_trans}, b_trans {b_trans}: ({i}, {j}) is {}, \
                         want {w}",
                        c[i * n + j]
                    );
                }
            }
        }
    }
}

/// Row reductions and softmax of a (rows, 257) tensor past one storage binding run in blocks
/// of rows bound at unaligned starts; over the first dim they run on a tiled transpose; rows
/// longer than a binding reduce in chunks, and a softmax line longer than a binding runs in
/// passes. Every row and column is checked against f64 on the host.
#[test]
fn rows_past_the_binding_limit() {
    let Some(b) = adapter("rows_past_the_binding_limit") else {
        return;
    };
    let cols = 257;
    let rows = (b.max_binding() / 4) as usize / cols + 5;
    let shape = [rows, cols];
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 13) % 29) as f32 / 7.0 - 2.0)
        .collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let got = |s: &gflow_wgpu::WgpuStorage| -> Vec<f64> { b.download(s).unwrap().to_vec() };
    let sums = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[1]).unwrap());
    let maxes = got(&b.reduce(ReduceKind::Max, &x, &shape, &[1]).unwrap());
    let soft = got(&b.softmax(&x, &shape, 1, false).unwrap());
    for r in 0..rows {
        let row: Vec<f64> = v[r * cols..(r + 1) * cols]
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        let s: f64 = row.iter().sum();
        assert!((sums[r] - s).abs() < 1e-3, "row {r} sum {} vs {s}", sums[r]);
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(maxes[r], m, "row {r} max");
        let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
        for (c, x) in row.iter().enumerate() {
            let w = (x - m).exp() / z;
            assert!((soft[r * cols + c] - w).abs() < 1e-6, "softmax ({r}, {c})");
        }
    }
    // over the first dim: moved last by a tiled transpose, then rows in blocks
    let col_sums = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0]).unwrap());
    let col_max = got(&b
        .reduce(ReduceKind::Max, &x, &[rows, 1, cols], &[0, 1])
        .unwrap());
    let log_soft = got(&b.softmax(&x, &shape, 0, true).unwrap());
    for c in 0..cols {
        let col: Vec<f64> = (0..rows).map(|r| f64::from(v[r * cols + c])).collect();
        let s: f64 = col.iter().sum();
        let scale: f64 = col.iter().map(|x| x.abs()).sum();
        assert!(
            (col_sums[c] - s).abs() < 1e-5 * scale,
            "column {c} sum {} vs {s}",
            col_sums[c]
        );
        let m = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(col_max[c], m, "column {c} max");
        let lz = col.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        for (r, x) in col.iter().enumerate() {
            let want = x - m - lz;
            let at = log_soft[r * cols + c];
            assert!(
                (at - want).abs() < 1e-4,
                "log-softmax ({r}, {c}): {at} vs {want}"
            );
        }
    }
    // one row longer than a binding: chunks reduced, then the partials; and everything
    let total: f64 = v.iter().map(|&x| f64::from(x)).sum();
    let scale: f64 = v.iter().map(|&x| f64::from(x.abs())).sum();
    let line = got(&b
        .reduce(ReduceKind::Sum, &x, &[1, rows * cols], &[1])
        .unwrap());
    let all = got(&b.reduce(ReduceKind::Sum, &x, &shape, &[0, 1]).unwrap());
    for s in [line[0], all[0]] {
        assert!((s - total).abs() < 1e-5 * scale, "{s} vs {total}");
    }
    // and one softmax line past the binding limit (in passes of whole-tensor kernels)
    let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lz = v
        .iter()
        .map(|&x| (f64::from(x) - f64::from(m)).exp())
        .sum::<f64>()
        .ln();
    let whole = got(&b.softmax(&x, &[rows * cols], 0, true).unwrap());
    for i in (0..rows * cols).step_by(9973) {
        let want = f64::from(v[i]) - f64::from(m) - lz;
        assert!(
            (whole[i] - want).abs() < 1e-4,
            "log-softmax at {i}: {} vs {want}",
            whole[i]
        );
    }
}

/// Slices, a concatenation and transposes of a (rows, 257) tensor past one storage binding run
/// as blocks (both sides bound at unaligned starts; a transpose's blocks are tiles of both
/// dims), checked element by element.
#[test]
fn copies_past_the_binding_limit() {
    let Some(b) = adapter("copies_past_the_binding_limit") else {
        return;
    };
    let cols = 257;
    let rows = (b.max_binding() / 4) as usize / cols + 5;
    let shape = [rows, cols];
    let v: Vec<f32> = (0..rows * cols).map(|i| (i % 1_000_003) as f32).collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let got = |s: &gflow_wgpu::WgpuStorage| -> Vec<f32> {
        match b.download(s).unwrap() {
            HostData::F32(v) => v,
            other => panic!("{other:?}"),
        }
    };
    // a narrow band of columns (small output) and most rows (large output)
    for (start, extent) in [([3, 5], [rows - 7, 100]), ([2, 0], [rows - 2, cols])] {
        let s = got(&b.slice(&x, &shape, &start, &extent).unwrap());
        for r in 0..extent[0] {
            for c in 0..extent[1] {
                assert_eq!(
                    s[r * extent[1] + c],
                    v[(start[0] + r) * cols + start[1] + c],
                    "slice {start:?} at ({r}, {c})"
                );
            }
        }
    }
    let y: Vec<f32> = (0..rows).map(|i| -(i as f32)).collect();
    let yd = b.upload(&HostData::F32(y.clone())).unwrap();
    let cat = got(&b.cat(&[&x, &yd], &[&shape, &[rows, 1]], 1).unwrap());
    for r in 0..rows {
        assert!(cat[r * (cols + 1)..r * (cols + 1) + cols] == v[r * cols..(r + 1) * cols]);
        assert_eq!(cat[r * (cols + 1) + cols], y[r], "cat row {r}");
    }
    // a transpose: every output row gathers a column spanning all of x (tiled copies)
    let t = got(&b.permute(&x, &shape, &[1, 0]).unwrap());
    for c in 0..cols {
        for r in 0..rows {
            assert_eq!(t[c * rows + r], v[r * cols + c], "transpose at ({c}, {r})");
        }
    }
    // a 3-d permute that moves the last dim first, with a size-1 dim between
    let p3 = got(&b.permute(&x, &[rows, 1, cols], &[2, 1, 0]).unwrap());
    assert!(p3 == t, "3-d permute");
}

/// Row gathers and scatter-adds past one storage binding: a table larger than a binding
/// (blocks of rows), an output larger than one (blocks of indices), an index list longer than
/// one (index blocks bound at their offsets), repeated indices, checked element by element.
#[test]
fn rows_gather_scatter_past_the_binding_limit() {
    let Some(b) = adapter("rows_gather_scatter_past_the_binding_limit") else {
        return;
    };
    let cols = 257;
    let big = (b.max_binding() / 4) as usize / cols + 5;
    let f32s = |s: &gflow_wgpu::WgpuStorage| -> Vec<f32> {
        match b.download(s).unwrap() {
            HostData::F32(v) => v,
            other => panic!("{other:?}"),
        }
    };
    // a large table, a few indices at both ends and in the middle (repeats included)
    let table: Vec<f32> = (0..big * cols).map(|i| (i % 999_983) as f32).collect();
    let t = b.upload(&HostData::F32(table.clone())).unwrap();
    let idx: Vec<i64> = vec![0, big as i64 - 1, (big / 2) as i64, big as i64 - 1, 7];
    let ix = b.upload(&HostData::I64(idx.clone())).unwrap();
    let g = f32s(&b.gather_rows(&t, big, cols, &ix).unwrap());
    for (r, &i) in idx.iter().enumerate() {
        let i = i as usize;
        assert!(
            g[r * cols..(r + 1) * cols] == table[i * cols..(i + 1) * cols],
            "gather {r}"
        );
    }
    let src: Vec<f32> = (0..idx.len() * cols).map(|i| (i % 13) as f32).collect();
    let s = b.upload(&HostData::F32(src.clone())).unwrap();
    let sc = f32s(&b.scatter_add_rows(&s, big, cols, &ix).unwrap());
    let mut want = vec![0f32; big * cols];
    for (r, &i) in idx.iter().enumerate() {
        for c in 0..cols {
            want[i as usize * cols + c] += src[r * cols + c];
        }
    }
    assert!(sc == want, "scatter-add into a large table");
    // a small table gathered into an output larger than a binding
    let small: Vec<f32> = (0..10 * cols).map(|i| i as f32).collect();
    let st = b.upload(&HostData::F32(small.clone())).unwrap();
    let many: Vec<i64> = (0..big).map(|r| ((r * 7) % 10) as i64).collect();
    let mx = b.upload(&HostData::I64(many.clone())).unwrap();
    let g = f32s(&b.gather_rows(&st, 10, cols, &mx).unwrap());
    for (r, &i) in many.iter().enumerate() {
        let i = i as usize;
        assert!(
            g[r * cols..(r + 1) * cols] == small[i * cols..(i + 1) * cols],
            "row {r}"
        );
    }
    // an index list longer than a binding holds (16.8M i64 on lavapipe, 268M on a GPU that
    // binds 2 GiB): gather and scatter-add in index blocks bound at their own offsets. 64 rows
    // keep each row's count under 2^24, where f32 counts exactly in any order of additions.
    let n = (b.max_binding() / 8) as usize + 30_000;
    let rows = 64;
    let idx: Vec<i64> = (0..n as i64).map(|i| (i * 7) % rows).collect();
    let ix = b.upload(&HostData::I64(idx.clone())).unwrap();
    let values: Vec<f32> = (1..=rows).map(|r| 10.0 * r as f32).collect();
    let table = b.upload(&HostData::F32(values)).unwrap();
    let picked = f32s(&b.gather_rows(&table, rows as usize, 1, &ix).unwrap());
    assert!(
        picked
            .iter()
            .zip(&idx)
            .all(|(v, &i)| *v == 10.0 * (i + 1) as f32),
        "gather with a long index list"
    );
    let ones = b.upload(&HostData::F32(vec![1.0; n])).unwrap();
    let counts = f32s(&b.scatter_add_rows(&ones, rows as usize, 1, &ix).unwrap());
    let mut want = vec![0f32; rows as usize];
    for &i in &idx {
        want[i as usize] += 1.0;
    }
    assert_eq!(counts, want, "scatter-add counts");
}

/// Work longer than lavapipe lets one invocation loop (65535 iterations in all, after which it
/// silently stops): reductions over 100k elements, softmax lines of 30k, products with an inner
/// dim of 70k (both matmul kernels) and a scatter of 70k rows, against f64 on the host.
#[test]
fn long_loops() {
    let Some(mut b) = adapter("long_loops") else {
        return;
    };
    let f64s = |b: &gflow_wgpu::WgpuBackend, s: &gflow_wgpu::WgpuStorage| -> Vec<f64> {
        b.download(s).unwrap().to_vec()
    };
    let value = |i: usize| ((i * 37) % 101) as f32 / 50.0 - 1.0;
    let close = |got: f64, want: f64, what: &str| {
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{what}: {got} vs {want}"
        );
    };
    // reductions: 3 rows of 100k, and a whole 100k vector
    let n = 100_000;
    let v: Vec<f32> = (0..3 * n).map(value).collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let sums = f64s(&b, &b.reduce(ReduceKind::Sum, &x, &[3, n], &[1]).unwrap());
    let maxes = f64s(&b, &b.reduce(ReduceKind::Max, &x, &[3, n], &[1]).unwrap());
    let cols = f64s(&b, &b.reduce(ReduceKind::Sum, &x, &[3, n], &[0]).unwrap());
    for r in 0..3 {
        let row = &v[r * n..(r + 1) * n];
        close(sums[r], row.iter().map(|&x| f64::from(x)).sum(), "row sum");
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(maxes[r], f64::from(m), "row max");
    }
    for c in (0..n).step_by(997) {
        let want: f64 = (0..3).map(|r| f64::from(v[r * n + c])).sum();
        close(cols[c], want, "column sum");
    }
    // a sum that cancels to -1 from 300k terms of magnitude up to 1: f32 summation is bound by
    // eps times the sum of the magnitudes, not by the result
    let total = f64s(&b, &b.reduce(ReduceKind::Sum, &x, &[3 * n], &[0]).unwrap());
    let want: f64 = v.iter().map(|&x| f64::from(x)).sum();
    let magnitude: f64 = v.iter().map(|&x| f64::from(x).abs()).sum();
    assert!(
        (total[0] - want).abs() <= 1e-8 * magnitude,
        "total: {} vs {want}",
        total[0]
    );
    // softmax along lines of 30k, the line dim first or last
    let len = 30_000;
    let sv = &v[..2 * len];
    let sx = b.upload(&HostData::F32(sv.to_vec())).unwrap();
    for (shape, dim) in [([2, len], 1), ([len, 2], 0)] {
        let lines: Vec<Vec<usize>> = (0..2)
            .map(|l| {
                (0..len)
                    .map(|j| if dim == 1 { l * len + j } else { j * 2 + l })
                    .collect()
            })
            .collect();
        for log in [false, true] {
            let got = f64s(&b, &b.softmax(&sx, &shape, dim, log).unwrap());
            for line in &lines {
                let m = line
                    .iter()
                    .map(|&i| f64::from(sv[i]))
                    .fold(f64::MIN, f64::max);
                let z: f64 = line.iter().map(|&i| (f64::from(sv[i]) - m).exp()).sum();
                for &i in line.iter().step_by(101) {
                    let want = if log {
                        f64::from(sv[i]) - m - z.ln()
                    } else {
                        (f64::from(sv[i]) - m).exp() / z
                    };
                    assert!(
                        (got[i] - want).abs() < 1e-5 * want.abs().max(1.0),
                        "softmax"
                    );
                }
            }
        }
    }
    // products with k = 70k, both kernels, b stored either way
    let k = 70_000;
    let (m, nn) = (2, 3);
    let av: Vec<f32> = (0..m * k).map(value).collect();
    let bv: Vec<f32> = (0..k * nn).map(|i| value(i + 7)).collect();
    let (a, bt) = (
        b.upload(&HostData::F32(av.clone())).unwrap(),
        b.upload(&HostData::F32(bv.clone())).unwrap(),
    );
    for tiled in [false, true] {
        b.set_tiled_matmul(tiled);
        for b_trans in [false, true] {
            let dims = gflow_core::backend::MatmulDims {
                batch: 1,
                m,
                k,
                n: nn,
                b_batched: false,
                a_trans: false,
                b_trans,
            };
            let c = f64s(&b, &b.matmul(&a, &bt, dims).unwrap());
            for i in 0..m {
                for j in 0..nn {
                    let want = product_at(&av, &bv, dims, i, j);
                    close(c[i * nn + j], want, "long product");
                }
            }
        }
    }
    // a scatter-add of 70k rows onto 5
    let count = 70_000;
    let src: Vec<f32> = (0..count * 2).map(value).collect();
    let idx: Vec<i64> = (0..count as i64).map(|i| (i * 3) % 5).collect();
    let s = b.upload(&HostData::F32(src.clone())).unwrap();
    let ix = b.upload(&HostData::I64(idx.clone())).unwrap();
    let table = f64s(&b, &b.scatter_add_rows(&s, 5, 2, &ix).unwrap());
    let mut want = [0.0f64; 10];
    for (i, &r) in idx.iter().enumerate() {
        for c in 0..2 {
            want[r as usize * 2 + c] += f64::from(src[i * 2 + c]);
        }
    }
    for (g, w) in table.iter().zip(want) {
        close(*g, w, "scatter-add");
    }
}

/// LayerNorm and RMSNorm on rows longer than a workgroup (several passes per invocation) and
/// on more rows than one dispatch dimension holds workgroups (65535); a row longer than one
/// storage binding is a typed `Device` error.
#[test]
fn norms_of_long_rows() {
    let Some(b) = adapter("norms_of_long_rows") else {
        return;
    };
    let r = gflow_core::backend::Resident::new(b);
    if let Err(e) = gflow_core::conformance::norms_of(&r, &[(5, 300), (2, 1030), (3, 4099)]) {
        panic!("{e}");
    }
    // 66000 rows of (-1, 0, 2 + row % 5): workgroups past one dispatch dimension, each row
    // normalised to its own values (LayerNorm without an affine; lavapipe runs each row's
    // workgroup, so one case)
    let Some(mut b) = adapter("norms_of_long_rows") else {
        return;
    };
    let rows = 66_000;
    let v: Vec<f32> = (0..rows)
        .flat_map(|r| [-1.0, 0.0, 2.0 + (r % 5) as f32])
        .collect();
    let x = b.upload(&HostData::F32(v.clone())).unwrap();
    let y: Vec<f64> = b
        .download(&b.norm(&x, &[], 3, 1e-5, true, [false, false]).unwrap())
        .unwrap()
        .to_vec();
    for (r, (got, row)) in y.chunks(3).zip(v.chunks(3)).enumerate() {
        let row: Vec<f64> = row.iter().map(|&x| f64::from(x)).collect();
        let mean = row.iter().sum::<f64>() / 3.0;
        let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0;
        for (g, x) in got.iter().zip(&row) {
            let want = (x - mean) / (var + 1e-5).sqrt();
            assert!((g - want).abs() < 1e-5, "row {r}: {g} vs {want}");
        }
    }
    b.set_binding_limit(1024);
    let x = b.upload(&HostData::F32(vec![1.0; 600])).unwrap();
    assert!(matches!(
        b.norm(&x, &[], 300, 1e-5, true, [false, false]),
        Err(Error::Device { .. })
    ));
}

/// Fused attention against core's CPU kernels (f32, both from the same inputs) where the
/// suite's shapes do not reach: a causal sequence of 1030 keys (several blocks of keys and of
/// queries per kernel, the loop budget), widths past one chunk on long sequences, 40 problems
/// in windows under a 16 KiB binding limit, and 66000 one-key problems (more workgroups than
/// one dispatch dimension holds); a problem past one binding is a typed `Device` error.
#[test]
fn attention_of_long_sequences() {
    use gflow_core::backend::{AttentionDims, Kernels, Resident};
    use gflow_core::storage::Buffer;
    let cases = [
        (1, (1030, 1030), (64, 64), true, None),
        (2, (300, 1030), (72, 130), false, None),
        (40, (70, 70), (16, 16), true, Some(16 << 10)),
        (66_000, (1, 1), (2, 2), false, None),
    ];
    for (heads, (seq_q, seq_k), (head_dim, v_dim), causal, limit) in cases {
        let Some(mut b) = adapter("attention_of_long_sequences") else {
            return;
        };
        if let Some(bytes) = limit {
            b.set_binding_limit(bytes);
        }
        let r = Resident::new(b);
        let cpu = gflow_core::cpu::CpuBackend;
        let d = AttentionDims {
            heads,
            seq_q,
            seq_k,
            head_dim,
            v_dim,
            scale: 1.0 / (head_dim as f64).sqrt(),
            causal,
        };
        let data = |n: usize, seed: usize| -> Buffer {
            let v = (0..n)
                .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            HostData::F32(v).into()
        };
        let q = data(heads * seq_q * head_dim, 1);
        let k = data(heads * seq_k * head_dim, 2);
        let v = data(heads * seq_k * v_dim, 3);
        let g = data(heads * seq_q * v_dim, 4);
        let what = format!("{d:?}");
        let check = |got: &Buffer, want: &Buffer, part: &str| {
            let got: Vec<f64> = got.host().unwrap().to_vec();
            let want: Vec<f64> = want.host().unwrap().to_vec();
            assert_eq!(got.len(), want.len(), "{part} of {what}");
            for (i, (x, y)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (x - y).abs() <= 5e-4 * (1.0 + y.abs()),
                    "{part} of {what}: element {i} is {x}, want {y}"
                );
            }
        };
        let saved = Kernels::attention(&cpu, &q, &k, &v, d, true).unwrap();
        check(&r.attention(&q, &k, &v, d, true).unwrap(), &saved, "output");
        let both: Vec<f32> = saved.host().unwrap().to_vec();
        let out_len = heads * seq_q * v_dim;
        let out: Buffer = HostData::F32(both[..out_len].to_vec()).into();
        let lse: Buffer = HostData::F32(both[out_len..].to_vec()).into();
        let want = Kernels::attention_grad(&cpu, &q, &k, &v, &g, &out, &lse, d).unwrap();
        let got = r.attention_grad(&q, &k, &v, &g, &out, &lse, d).unwrap();
        check(&got, &want, "gradients");
    }
    let Some(mut b) = adapter("attention_of_long_sequences") else {
        return;
    };
    b.set_binding_limit(1024);
    let d = AttentionDims {
        heads: 2,
        seq_q: 70,
        seq_k: 70,
        head_dim: 16,
        v_dim: 16,
        scale: 0.25,
        causal: false,
    };
    let x = b.upload(&HostData::F32(vec![0.5; 2 * 70 * 16])).unwrap();
    assert!(matches!(
        b.attention(&x, &x, &x, d, false),
        Err(Error::Device { .. })
    ));
}
