//! Conformance cases for the 16-bit floats and I32 on a device: bit-exact moves (odd lengths,
//! odd offsets: the half-word boundaries of packed storage), casts bit for bit against the
//! host's (`half` crate) conversions, and 16-bit arithmetic within PyTorch's 16-bit tolerances
//! of an f64 reference, accumulated in f32.

use super::vals;
use crate::backend::{Backend, CmpOp, Kernels, MatmulDims, ReduceKind, Resident};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{Buffer, HostData};

/// The 16-bit floats and I32.
const NEW: [DType; 3] = [DType::F16, DType::BF16, DType::I32];

fn fail(reason: String) -> Error {
    Error::InvalidArgument {
        op: "conformance",
        reason,
    }
}

/// Edge values as f32: signed zeros, infinities, NaNs (two payloads), the 16-bit formats'
/// subnormals and their limits, rounding ties of both formats, and values past their range.
fn edge_f32() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0xffc0_1234),
        f32::from_bits(0x7f80_0001),
        1.0,
        -1.5,
        65504.0,
        65519.99,
        65520.0,
        -1e6,
        6.0e-8,
        5.96e-8,
        2.98e-8,
        2.99e-8,
        6.1e-5,
        -3.0e-7,
        1e-40,
        f32::MIN_POSITIVE,
        3.4e38,
        2049.0,
        2051.0,
        -4097.0,
        1.0 + 1.0 / 1024.0 + 1.0 / 2048.0,
        1.0 + 1.0 / 256.0,
        1.0 + 3.0 / 256.0,
        257.0,
        259.0,
        2_147_483_500.0,
        -3.0e9,
        0.1,
        -0.7,
    ];
    v.extend(vals(23, 41, false).iter().map(|&x| (x * 1000.0) as f32));
    v
}

/// Edge values as I32, with ties and inexact values of the 16-bit formats.
fn edge_i32() -> Vec<i32> {
    vec![
        0,
        1,
        -1,
        7,
        255,
        257,
        259,
        -2049,
        65504,
        65519,
        65520,
        (1 << 24) + 1,
        (1 << 24) + 3,
        0x0100_8000,
        0x0100_8001,
        0x0101_8000,
        // integer -> BF16 rounds through f32 as PyTorch does: 0x4b01, 0x4b80 and their negatives
        0x0080_8001,
        0x0101_0001,
        -0x0080_8001,
        -0x0101_0001,
        i32::MAX,
        i32::MIN,
        -123_456_789,
    ]
}

/// `v` (f32) as host data of `dtype` by the host's casts.
fn of(dtype: DType, v: &[f32]) -> HostData {
    HostData::F32(v.to_vec()).cast(dtype)
}

/// The first element where `got` and `want` differ in bits (floats: both NaN agree).
fn first_difference(got: &HostData, want: &HostData) -> Option<usize> {
    if got.dtype() != want.dtype() || got.len() != want.len() {
        return Some(0);
    }
    let size = want.as_bytes().len() / want.len().max(1);
    let (g, w) = (got.as_bytes(), want.as_bytes());
    (0..want.len()).find(|&i| {
        let nan = |h: &HostData| h.get_f64(i).is_some_and(f64::is_nan);
        g[i * size..(i + 1) * size] != w[i * size..(i + 1) * size] && !(nan(got) && nan(want))
    })
}

/// `got` must live on the device (when the device holds its dtype) and equal `want` bitwise.
fn same(k: &dyn Kernels, stores: bool, what: &str, got: &Buffer, want: &HostData) -> Result<()> {
    if stores && got.resident_on().is_none() {
        return Err(fail(format!("{what} ran on the host, not on {}", k.name())));
    }
    let g = got.host()?;
    match first_difference(g, want) {
        None => Ok(()),
        Some(i) => Err(fail(format!(
            "{what}: element {i} is {:?}, the host's {:?} ({} vs {} elements of {} vs {})",
            g.get_f64(i),
            want.get_f64(i),
            g.len(),
            want.len(),
            g.dtype(),
            want.dtype()
        ))),
    }
}

/// 16-bit and I32 data moved on the device comes back bit for bit: round trips of odd
/// lengths (NaN, infinities, subnormals, -0.0), permutes, slices at odd offsets, concatenations
/// of odd widths, and [`Backend::copy_boxes`] gathers and puts at odd bases and strides.
pub fn half_moves<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let b = r.backend();
    let k: &dyn Kernels = r;
    for dtype in NEW {
        let stores = b.stores(dtype);
        let data = |n: usize| -> HostData {
            if dtype == DType::I32 {
                HostData::I32((0..n as i32).map(|i| i * 7919 - 40_000).collect())
            } else {
                let e = edge_f32();
                of(dtype, &(0..n).map(|i| e[i % e.len()]).collect::<Vec<_>>())
            }
        };
        for n in [1, 2, 3, 5, 57] {
            let d = data(n);
            let back = b.download(&b.upload(&d)?)?;
            if let Some(i) = first_difference(&back, &d) {
                return Err(fail(format!(
                    "{dtype} round trip of {n}: element {i} differs"
                )));
            }
            let got = k.permute(&d.clone().into(), &[n], &[0])?;
            same(k, stores, &format!("{dtype} copy of {n}"), &got, &d)?;
        }
        // (3, 5) <-> (5, 3), and slices starting at odd elements
        let x = data(15);
        let host_x = Buffer::from(x.clone());
        let y = k.permute(&host_x, &[15], &[0])?;
        let cpu = crate::cpu::CpuBackend;
        let want = Kernels::permute(&cpu, &host_x, &[3, 5], &[1, 0])?;
        let got = k.permute(&y, &[3, 5], &[1, 0])?;
        same(k, stores, &format!("{dtype} transpose"), &got, want.host()?)?;
        for (start, extent) in [
            ([0, 1], [3, 3]),
            ([1, 3], [2, 1]),
            ([2, 0], [1, 5]),
            ([0, 1], [3, 4]),
        ] {
            let want = Kernels::slice(&cpu, &host_x, &[3, 5], &start, &extent)?;
            let got = k.slice(&y, &[3, 5], &start, &extent)?;
            same(
                k,
                stores,
                &format!("{dtype} slice at {start:?}"),
                &got,
                want.host()?,
            )?;
        }
        // pieces of odd widths concatenated along the last dim, and along the first
        let pieces = [data(3), data(9), data(6)];
        let held: Vec<Buffer> = pieces
            .iter()
            .map(|p| k.permute(&Buffer::from(p.clone()), &[p.len()], &[0]))
            .collect::<Result<_>>()?;
        let hosts: Vec<Buffer> = pieces.iter().map(|p| Buffer::from(p.clone())).collect();
        for (shapes, dim) in [
            (vec![vec![3, 1], vec![3, 3], vec![3, 2]], 1),
            (vec![vec![1, 3], vec![3, 3], vec![2, 3]], 0),
        ] {
            let sh: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let want = Kernels::cat(&cpu, &hosts.iter().collect::<Vec<_>>(), &sh, dim)?;
            let got = k.cat(&held.iter().collect::<Vec<_>>(), &sh, dim)?;
            same(
                k,
                stores,
                &format!("{dtype} cat along {dim}"),
                &got,
                want.host()?,
            )?;
        }
        if !stores {
            continue;
        }
        // copy_boxes directly: odd bases and strides, and puts into odd columns
        let s = b.upload(&data(40))?;
        let host40 = Buffer::from(data(40));
        for (extent, st, base) in [
            (vec![2, 3], vec![13, 2], 7),
            (vec![4], vec![9], 1),
            (vec![3, 3], vec![1, 5], 3),
        ] {
            let copy = crate::shape::StridedCopy {
                extent: extent.clone(),
                strides: st,
                base,
            };
            let n = extent.iter().product();
            let got = r.keep(b.copy_boxes(dtype, n, false, &[(&s, copy.clone())])?);
            let want = Backend::copy_boxes(&cpu, dtype, n, false, &[(host40.host()?, copy)])?;
            same(
                k,
                stores,
                &format!("{dtype} gather box at {base}"),
                &got,
                &want,
            )?;
        }
        let (p, q) = (data(3), data(4));
        let (dp, dq) = (b.upload(&p)?, b.upload(&q)?);
        let col = |base, n| crate::shape::StridedCopy {
            extent: vec![n],
            strides: vec![2],
            base,
        };
        let got = r.keep(b.copy_boxes(dtype, 7, true, &[(&dq, col(0, 4)), (&dp, col(1, 3))])?);
        let want = Backend::copy_boxes(&cpu, dtype, 7, true, &[(&q, col(0, 4)), (&p, col(1, 3))])?;
        same(k, stores, &format!("{dtype} put"), &got, &want)?;
    }
    Ok(())
}

/// Casts from and to F16, BF16 and I32 (every pair with F32, F64, I64, Bool and each other)
/// equal the host's casts bit for bit (the `half` crate's round to nearest even, NaN kept
/// NaN), and run on the device where it holds both dtypes and casts from the source.
pub fn half_casts<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let b = r.backend();
    let k: &dyn Kernels = r;
    let sources = [
        HostData::F32(edge_f32()),
        of(DType::F16, &edge_f32()),
        of(DType::BF16, &edge_f32()),
        HostData::I32(edge_i32()),
        HostData::F64(
            edge_f32()
                .iter()
                .map(|&x| f64::from(x) * 1.000_000_1)
                .collect(),
        ),
        HostData::I64(edge_i32().iter().map(|&x| i64::from(x) * 3).collect()),
    ];
    for x in sources {
        for to in DType::ALL {
            if !(NEW.contains(&x.dtype()) || NEW.contains(&to)) {
                continue;
            }
            let want = x.cast(to);
            let got = k.cast(&Buffer::from(x.clone()), to)?;
            let on_device = b.stores(to) && b.stores(x.dtype()) && b.casts(x.dtype());
            same(
                k,
                on_device,
                &format!("cast {} -> {to}", x.dtype()),
                &got,
                &want,
            )?;
        }
    }
    Ok(())
}

/// `|got - want| <= atol + rtol * |want|` for every element, `got` of `dtype` on the device.
fn close(k: &dyn Kernels, what: &str, got: &Buffer, want: &[f64], dtype: DType) -> Result<()> {
    let (atol, rtol) = if dtype == DType::F16 {
        (1e-3, 1e-3)
    } else {
        (1e-2, 1.6e-2)
    };
    if got.resident_on().is_none() {
        return Err(fail(format!(
            "{what} ({dtype}) ran on the host, not on {}",
            k.name()
        )));
    }
    let g = got.host()?;
    if g.dtype() != dtype || g.len() != want.len() {
        return Err(fail(format!(
            "{what}: {} of {} elements, want {dtype}",
            g.dtype(),
            g.len()
        )));
    }
    for (i, (g, w)) in g.to_vec::<f64>().iter().zip(want).enumerate() {
        if (g - w).abs() > atol + rtol * w.abs() || g.is_nan() {
            return Err(fail(format!(
                "{what} ({dtype}): element {i} is {g}, reference {w}"
            )));
        }
    }
    Ok(())
}

/// 16-bit matmul, sums and softmax on the device within PyTorch's 16-bit tolerances of an f64
/// reference computed from the same (rounded) inputs, each result rounded once; sums of ones
/// past 2048 (F16) and 256 (BF16) come out exact, so the accumulation is wider than 16 bits.
pub fn half_arithmetic<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let k: &dyn Kernels = r;
    for dtype in [DType::F16, DType::BF16] {
        if !r.backend().stores(dtype) {
            continue;
        }
        let rounded = |v: &[f64]| -> (Buffer, Vec<f64>) {
            let h = HostData::F64(v.to_vec()).cast(dtype);
            let back = h.to_vec::<f64>();
            (Buffer::from(h), back)
        };
        // (2 batches of) (7, 33) x (33, 5)
        let (m, kk, n) = (7, 33, 5);
        let (a, av) = rounded(&vals(2 * m * kk, 51, false));
        let (bb, bv) = rounded(&vals(kk * n, 52, false));
        let dims = MatmulDims {
            batch: 2,
            m,
            k: kk,
            n,
            b_batched: false,
            a_trans: false,
            b_trans: false,
        };
        let want: Vec<f64> = (0..2 * m * n)
            .map(|o| {
                let (p, i, j) = (o / (m * n), o / n % m, o % n);
                (0..kk)
                    .map(|l| av[(p * m + i) * kk + l] * bv[l * n + j])
                    .sum()
            })
            .collect();
        close(k, "matmul", &k.matmul(&a, &bb, dims)?, &want, dtype)?;
        // sums over each dim of (6, 50), and of 4096 ones
        let (x, xv) = rounded(&vals(300, 53, false));
        let rows: Vec<f64> = (0..6)
            .map(|i| xv[i * 50..(i + 1) * 50].iter().sum())
            .collect();
        let cols: Vec<f64> = (0..50)
            .map(|j| (0..6).map(|i| xv[i * 50 + j]).sum())
            .collect();
        close(
            k,
            "sum over dim 1",
            &k.reduce(ReduceKind::Sum, &x, &[6, 50], &[1])?,
            &rows,
            dtype,
        )?;
        close(
            k,
            "sum over dim 0",
            &k.reduce(ReduceKind::Sum, &x, &[6, 50], &[0])?,
            &cols,
            dtype,
        )?;
        let (ones, _) = rounded(&vec![1.0; 4096]);
        let total = k.reduce(ReduceKind::Sum, &ones, &[4096], &[0])?;
        close(k, "sum of 4096 ones", &total, &[4096.0], dtype)?;
        // softmax over the last dim of (6, 50)
        let soft: Vec<f64> = (0..300)
            .map(|f| {
                let row = &xv[f / 50 * 50..f / 50 * 50 + 50];
                let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (xv[f] - mx).exp() / row.iter().map(|v| (v - mx).exp()).sum::<f64>()
            })
            .collect();
        close(
            k,
            "softmax",
            &k.softmax(&x, &[6, 50], 1, false)?,
            &soft,
            dtype,
        )?;
        // an elementwise product with broadcasting and a comparison, rounded once
        let (c, cv) = rounded(&vals(50, 54, false));
        let prod: Vec<f64> = (0..300).map(|f| xv[f] * cv[f % 50]).collect();
        let got = k.binary(
            crate::backend::BinaryOp::Mul,
            &x,
            &[6, 50],
            &c,
            &[50],
            &[6, 50],
        )?;
        close(k, "mul", &got, &prod, dtype)?;
        let lt = k.compare(CmpOp::Lt, &x, &[6, 50], &c, &[50], &[6, 50])?;
        let want: Vec<u8> = (0..300).map(|f| u8::from(xv[f] < cv[f % 50])).collect();
        same(k, true, "compare", &lt, &HostData::Bool(want))?;
    }
    Ok(())
}

/// I32 (and 16-bit) data through the moving kernels on the device: row gathers with I32
/// indices, `where`, triangle masks, gathers along a dim, against the CPU's kernels bitwise.
pub fn int32_moves<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let k: &dyn Kernels = r;
    let cpu = crate::cpu::CpuBackend;
    for dtype in NEW {
        let stores = r.backend().stores(dtype);
        let table = Buffer::from(if dtype == DType::I32 {
            HostData::I32((0..15).map(|i| i * 3 - 20).collect())
        } else {
            of(dtype, &edge_f32()[..15])
        });
        let idx = Buffer::from(HostData::I32(vec![4, 0, 2, 4, 1]));
        let want = Kernels::gather_rows(&cpu, &table, 5, 3, &idx)?;
        let got = k.gather_rows(&table, 5, 3, &idx)?;
        same(
            k,
            stores,
            &format!("{dtype} gather_rows"),
            &got,
            want.host()?,
        )?;
        let want = Kernels::gather_rows_partial(&cpu, &table, 5, 3, &idx, 1)?;
        let got = k.gather_rows_partial(&table, 5, 3, &idx, 1)?;
        same(
            k,
            stores,
            &format!("{dtype} gather_rows_partial"),
            &got,
            want.host()?,
        )?;
        let gidx = Buffer::from(HostData::I64(vec![2, 0, 1, 1, 0, 2, 4, 4, 0]));
        let want = Kernels::gather_dim(&cpu, &table, &[3, 5], 1, &gidx, &[3, 3])?;
        let got = k.gather_dim(&table, &[3, 5], 1, &gidx, &[3, 3])?;
        same(
            k,
            stores,
            &format!("{dtype} gather_dim"),
            &got,
            want.host()?,
        )?;
        let cond = Buffer::from(HostData::Bool(
            (0..15).map(|i| u8::from(i % 3 == 0)).collect(),
        ));
        let other = Kernels::permute(&cpu, &table, &[3, 5], &[0, 1])?;
        let other = Kernels::slice(&cpu, &other, &[3, 5], &[0, 0], &[1, 5])?;
        let shapes: [&[usize]; 3] = [&[3, 5], &[3, 5], &[1, 5]];
        let want = Kernels::select(&cpu, [&cond, &table, &other], shapes, &[3, 5])?;
        let got = k.select([&cond, &table, &other], shapes, &[3, 5])?;
        same(k, stores, &format!("{dtype} where"), &got, want.host()?)?;
        for (kk, upper) in [(0, false), (1, true), (-1, false)] {
            let want = Kernels::triangle(&cpu, &table, &[3, 5], kk, upper, (1, 0))?;
            let got = k.triangle(&table, &[3, 5], kk, upper, (1, 0))?;
            same(
                k,
                stores,
                &format!("{dtype} triangle {kk}"),
                &got,
                want.host()?,
            )?;
        }
    }
    Ok(())
}
