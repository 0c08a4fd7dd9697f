//! CPU kernels, generic over the float type.

use num_traits::Float as NumFloat;

use crate::backend::{BinaryOp, MatmulDims, ReduceKind, UnaryOp};
use crate::dtype::Element;
use crate::shape::{broadcast_strides, strides};

/// Float element types the CPU kernels run on.
pub trait Float: Element + NumFloat + Default + 'static {
    /// `c = a @ b` for (m, k) x (k, n) through `matrixmultiply` (threaded): `a` and `b` with the
    /// given (row, column) strides, `c` row-major.
    fn mm_large(
        mkn: (usize, usize, usize),
        a: &[Self],
        sa: (isize, isize),
        b: &[Self],
        sb: (isize, isize),
        c: &mut [Self],
    );
}

macro_rules! large_gemm {
    ($t:ty, $f:ident) => {
        impl Float for $t {
            fn mm_large(
                (m, k, n): (usize, usize, usize),
                a: &[Self],
                sa: (isize, isize),
                b: &[Self],
                sb: (isize, isize),
                c: &mut [Self],
            ) {
                // SAFETY: a is m x k and b is k x n under their strides, c is m x n row-major,
                // all in bounds, and c does not alias a or b; beta = 0 overwrites c.
                unsafe {
                    matrixmultiply::$f(
                        m,
                        k,
                        n,
                        1.0,
                        a.as_ptr(),
                        sa.0,
                        sa.1,
                        b.as_ptr(),
                        sb.0,
                        sb.1,
                        0.0,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    )
                }
            }
        }
    };
}
large_gemm!(f32, sgemm);
large_gemm!(f64, dgemm);

/// Products of at least this many multiply-adds go to `matrixmultiply`, smaller ones to `gemm`:
/// measured on the 2-core CI machine (AVX2), `gemm` is ~2x faster at 256^3 and `matrixmultiply`
/// ~1.35x faster from 1024^3 (see the Core II closing note).
const LARGE: usize = 512 * 512 * 512;

pub(super) fn unary<T: Float>(op: UnaryOp, x: &[T]) -> Vec<T> {
    let half = T::from_f64(0.5);
    let one = T::one();
    // sqrt(2/pi) and the cubic coefficient of the tanh GELU.
    let (c, k) = (T::from_f64(0.797_884_560_802_865_4), T::from_f64(0.044_715));
    match op {
        UnaryOp::Neg => x.iter().map(|&v| -v).collect(),
        UnaryOp::Exp => x.iter().map(|v| v.exp()).collect(),
        UnaryOp::Log => x.iter().map(|v| v.ln()).collect(),
        UnaryOp::Sqrt => x.iter().map(|v| v.sqrt()).collect(),
        UnaryOp::Square => x.iter().map(|&v| v * v).collect(),
        UnaryOp::Relu => x
            .iter()
            .map(|&v| if v > T::zero() { v } else { T::zero() })
            .collect(),
        UnaryOp::Gelu => x
            .iter()
            .map(|&v| half * v * (one + (c * (v + k * v * v * v)).tanh()))
            .collect(),
        UnaryOp::Sigmoid => x.iter().map(|&v| one / (one + (-v).exp())).collect(),
        UnaryOp::Tanh => x.iter().map(|v| v.tanh()).collect(),
        UnaryOp::Step => x
            .iter()
            .map(|&v| if v > T::zero() { one } else { T::zero() })
            .collect(),
        UnaryOp::Abs => x.iter().map(|v| v.abs()).collect(),
        UnaryOp::Rsqrt => x.iter().map(|v| one / v.sqrt()).collect(),
        UnaryOp::Sin => x.iter().map(|v| v.sin()).collect(),
        UnaryOp::Cos => x.iter().map(|v| v.cos()).collect(),
        UnaryOp::Silu => x.iter().map(|&v| v / (one + (-v).exp())).collect(),
        UnaryOp::Erf => x
            .iter()
            .map(|&v| T::from_f64(libm::erf(v.to_f64())))
            .collect(),
        UnaryOp::GeluErf => x
            .iter()
            .map(|&v| T::from_f64(gelu_erf(v.to_f64())))
            .collect(),
        UnaryOp::Sign => x
            .iter()
            .map(|&v| {
                if v > T::zero() {
                    one
                } else if v < T::zero() {
                    -one
                } else {
                    T::zero()
                }
            })
            .collect(),
        UnaryOp::SiluGrad => x
            .iter()
            .map(|&v| {
                let s = one / (one + (-v).exp());
                s * (one + v * (one - s))
            })
            .collect(),
        UnaryOp::GeluErfGrad => x
            .iter()
            .map(|&v| {
                let v = v.to_f64();
                let pdf = (-0.5 * v * v).exp() * 0.398_942_280_401_432_7;
                T::from_f64(0.5 * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2)) + v * pdf)
            })
            .collect(),
        UnaryOp::GeluGrad => {
            let three = T::from_f64(3.0);
            x.iter()
                .map(|&v| {
                    let t = (c * (v + k * v * v * v)).tanh();
                    half * (one + t) + half * v * (one - t * t) * c * (one + three * k * v * v)
                })
                .collect()
        }
    }
}

/// PyTorch's exact GELU: `x * Phi(x)`.
fn gelu_erf(v: f64) -> f64 {
    0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2))
}

/// Checks integer row indices against `rows`.
pub(super) fn row_indices(indices: &[i64], rows: usize) -> Result<Vec<usize>, i64> {
    indices
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&u| u < rows).ok_or(i))
        .collect()
}

fn apply<T: Float>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Maximum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if a > b {
                a
            } else {
                b
            }
        }
        BinaryOp::Minimum => {
            if a.is_nan() || b.is_nan() {
                T::nan()
            } else if a < b {
                a
            } else {
                b
            }
        }
    }
}

pub(super) fn binary<T: Float>(
    op: BinaryOp,
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out_shape: &[usize],
) -> Vec<T> {
    let n: usize = out_shape.iter().product();
    if a_shape == out_shape && b_shape == out_shape {
        return a.iter().zip(b).map(|(&x, &y)| apply(op, x, y)).collect();
    }
    let (sa, sb) = (
        broadcast_strides(a_shape, out_shape),
        broadcast_strides(b_shape, out_shape),
    );
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let nd = out_shape.len();
    if nd == 0 {
        out.push(apply(op, a[0], b[0]));
        return out;
    }
    let last = nd - 1;
    let (la, lb) = (sa[last], sb[last]);
    let mut idx = vec![0usize; last];
    loop {
        let oa: usize = (0..last).map(|d| idx[d] * sa[d]).sum();
        let ob: usize = (0..last).map(|d| idx[d] * sb[d]).sum();
        for j in 0..out_shape[last] {
            out.push(apply(op, a[oa + j * la], b[ob + j * lb]));
        }
        let mut d = last;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Reduces one dimension of a (outer, len, inner) view.
fn reduce_dim<T: Float>(op: ReduceKind, x: &[T], outer: usize, len: usize, inner: usize) -> Vec<T> {
    let init = match op {
        ReduceKind::Sum => T::zero(),
        ReduceKind::Max => T::neg_infinity(),
        ReduceKind::Min => T::infinity(),
    };
    let mut out = vec![init; outer * inner];
    for o in 0..outer {
        let acc = &mut out[o * inner..(o + 1) * inner];
        for l in 0..len {
            let row = &x[(o * len + l) * inner..(o * len + l + 1) * inner];
            match op {
                ReduceKind::Sum => acc.iter_mut().zip(row).for_each(|(a, &v)| *a = *a + v),
                ReduceKind::Max => acc
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &v)| *a = if v > *a || v.is_nan() { v } else { *a }),
                ReduceKind::Min => acc
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &v)| *a = if v < *a || v.is_nan() { v } else { *a }),
            }
        }
    }
    out
}

pub(super) fn reduce<T: Float>(op: ReduceKind, x: &[T], shape: &[usize], dims: &[usize]) -> Vec<T> {
    let mut cur = x.to_vec();
    let mut s = shape.to_vec();
    for &d in dims {
        let outer: usize = s[..d].iter().product();
        let inner: usize = s[d + 1..].iter().product();
        cur = reduce_dim(op, &cur, outer, s[d], inner);
        s[d] = 1;
    }
    cur
}

pub(super) fn softmax<T: Float>(x: &[T], shape: &[usize], dim: usize, log: bool) -> Vec<T> {
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = vec![T::zero(); x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |l: usize| (o * len + l) * inner + i;
            let m = (0..len)
                .map(|l| x[at(l)])
                .fold(T::neg_infinity(), |a, v| if v > a { v } else { a });
            let sum = (0..len)
                .map(|l| (x[at(l)] - m).exp())
                .fold(T::zero(), |a, v| a + v);
            for l in 0..len {
                out[at(l)] = if log {
                    x[at(l)] - m - sum.ln()
                } else {
                    (x[at(l)] - m).exp() / sum
                };
            }
        }
    }
    out
}

pub(super) fn matmul<T: Float>(a: &[T], b: &[T], d: MatmulDims) -> Vec<T> {
    let MatmulDims {
        batch,
        m,
        k,
        n,
        b_batched,
        a_trans,
        b_trans,
    } = d;
    // (row, column) strides of the logical (m, k) and (k, n) operands.
    let sa: (isize, isize) = if a_trans {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let sb: (isize, isize) = if b_trans {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    let mut out = vec![T::zero(); batch * m * n];
    if m == 0 || n == 0 {
        return out;
    }
    let par = if m * n * k >= 64 * 64 * 64 {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    for i in 0..batch {
        let ai = &a[i * m * k..(i + 1) * m * k];
        let bi = if b_batched {
            &b[i * k * n..(i + 1) * k * n]
        } else {
            &b[..k * n]
        };
        let oi = &mut out[i * m * n..(i + 1) * m * n];
        if m * n * k >= LARGE {
            T::mm_large((m, k, n), ai, sa, bi, sb, oi);
            continue;
        }
        // SAFETY: ai is m x k and bi is k x n under their strides, oi is m x n row-major, all
        // in bounds; the output does not alias the inputs. gemm computes oi = 1 * ai * bi
        // (read_dst = false).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                oi.as_mut_ptr(),
                1,
                n as isize,
                false,
                ai.as_ptr(),
                sa.1,
                sa.0,
                bi.as_ptr(),
                sb.1,
                sb.0,
                T::zero(),
                T::one(),
                false,
                false,
                false,
                par,
            );
        }
    }
    out
}

/// `out = x` with dimensions permuted: `out.shape[i] = shape[perm[i]]`.
pub(super) fn permute_bytes(
    elem: usize,
    x: &[u8],
    shape: &[usize],
    perm: &[usize],
    out: &mut [u8],
) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    match elem {
        4 => permute_typed::<u32>(x, shape, perm, out),
        8 => permute_typed::<u64>(x, shape, perm, out),
        _ => permute_typed::<u8>(x, shape, perm, out),
    }
}

/// [`permute_bytes`] moving whole elements of type `E` (the byte buffers are reinterpreted,
/// or copied when unaligned); a `u8` element stands for one byte.
fn permute_typed<E: bytemuck::Pod>(x: &[u8], shape: &[usize], perm: &[usize], out: &mut [u8]) {
    let elem = std::mem::size_of::<E>();
    let scale = if elem == 1 {
        x.len() / shape.iter().product::<usize>().max(1)
    } else {
        1
    };
    if scale != 1 {
        // Element sizes other than 4 and 8 bytes: treat each byte of an element as an inner dim.
        let mut s = shape.to_vec();
        s.push(scale);
        let mut p = perm.to_vec();
        p.push(shape.len());
        return permute_typed::<u8>(x, &s, &p, out);
    }
    let src: std::borrow::Cow<'_, [E]> = match bytemuck::try_cast_slice(x) {
        Ok(v) => std::borrow::Cow::Borrowed(v),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(x)),
    };
    let mut dst: Vec<E> = vec![E::zeroed(); src.len()];
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let src_st: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let nd = out_shape.len();
    if nd == 0 {
        out.copy_from_slice(x);
        return;
    }
    // Innermost output dim as a strided run, the outer dims as a counter.
    let (inner, inner_st) = (out_shape[nd - 1], src_st[nd - 1]);
    let mut idx = vec![0usize; nd - 1];
    for row in dst.chunks_mut(inner.max(1)) {
        let base: usize = idx.iter().zip(&src_st).map(|(i, s)| i * s).sum();
        for (j, d) in row.iter_mut().enumerate() {
            *d = src[base + j * inner_st];
        }
        let mut d = nd - 1;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out.copy_from_slice(bytemuck::cast_slice(&dst));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_matches_naive_loops() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let got = matmul(
            &a,
            &b,
            MatmulDims {
                batch: 1,
                m,
                k,
                n,
                b_batched: false,
                a_trans: false,
                b_trans: false,
            },
        );
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                assert!((got[i * n + j] - want).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn broadcasting_reduce_softmax_permute() {
        // (2,3) + (3,) and (2,1)
        let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(
            binary(
                BinaryOp::Add,
                &a,
                &[2, 3],
                &[10.0, 20.0, 30.0],
                &[3],
                &[2, 3]
            ),
            vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        assert_eq!(
            binary(BinaryOp::Mul, &a, &[2, 3], &[2.0, 0.0], &[2, 1], &[2, 3]),
            vec![2.0, 4.0, 6.0, 0.0, 0.0, 0.0]
        );
        assert_eq!(reduce(ReduceKind::Sum, &a, &[2, 3], &[1]), vec![6.0, 15.0]);
        assert_eq!(reduce(ReduceKind::Max, &a, &[2, 3], &[0, 1]), vec![6.0]);
        let s = softmax(&a, &[2, 3], 1, false);
        assert!((s[0] + s[1] + s[2] - 1.0).abs() < 1e-12 && s[2] > s[1]);
        let ls = softmax(&a, &[2, 3], 0, true);
        assert!((ls[0] - (1.0f64 / (1.0 + 3f64.exp())).ln()).abs() < 1e-9);
        let mut out = vec![0u8; 48];
        permute_bytes(8, bytemuck::cast_slice(&a), &[2, 3], &[1, 0], &mut out);
        assert_eq!(
            bytemuck::pod_collect_to_vec::<u8, f64>(&out),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        assert_eq!(unary(UnaryOp::Relu, &[-1.0f32, 2.0]), vec![0.0, 2.0]);
        let g = unary(UnaryOp::Gelu, &[1.0f64])[0];
        assert!((g - 0.841_191_990_607_77).abs() < 1e-9, "{g}");
    }
}
