//! One conformance suite for every [`Backend`], run the way users reach a backend: through
//! [`Resident`] (uploads, device-resident results, host fallbacks), as [`Kernels`]. Plain
//! generic cases are compared with a float64 reference computed here by naive loops
//! (independent of every backend's kernels), with a tolerance by dtype, and every result must
//! live on the device (a kernel that silently ran on the host fails). A backend crate stamps
//! one `#[test]` per case with [`conformance_tests!`](crate::conformance_tests); a backend that
//! is not present on the machine is skipped with a loud message, or fails when
//! `GFLOW_REQUIRE_BACKEND` names it (CI names the backends that must exist there; see
//! [`crate::backend::required`]).

mod attention;
mod halves;
mod nan;

pub use attention::{attentions, packed_attentions};
pub use halves::{half_arithmetic, half_casts, half_moves, int32_moves};
pub use nan::nan_max_min;

use crate::backend::{Backend, BinaryOp, Kernels, MatmulDims, ReduceKind, Resident, UnaryOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{StridedCopy, numel, strides};
use crate::storage::{Buffer, HostData};

/// A conformance case, on a backend wrapped as users get it.
pub type Case<B> = fn(&Resident<B>) -> Result<()>;

/// Runs `case` on the backend `make` returns, or reports it skipped (`Err`: no device here).
///
/// # Panics
/// When the case fails, or when the backend is absent and required (this is test-harness code,
/// called only from `#[test]` functions).
#[allow(clippy::panic)]
pub fn run<B: Backend + 'static>(
    backend: &str,
    name: &str,
    make: impl FnOnce() -> Result<B>,
    case: Case<B>,
) {
    match make() {
        Err(e) if crate::backend::required(backend) => {
            panic!("{name}: {backend} is required (GFLOW_REQUIRE_BACKEND) but not available: {e}")
        }
        Err(e) => crate::backend::say_skipped(name, &format!("no {backend} on this machine: {e}")),
        Ok(b) => {
            let r = Resident::new(b);
            if let Err(e) = case(&r) {
                panic!("{name} on {}: {e}", r.name());
            }
        }
    }
}

/// Stamps one `#[test]` per conformance case (the list is here and only here) for the backend
/// named `$backend`, built by `$make` (an expression of type `Result<B>`). With
/// `$backend, |$case| $make`, `$make` sees the case's name as `$case: &str` (to build the
/// backend differently for some cases).
#[macro_export]
macro_rules! conformance_tests {
    ($backend:literal, |$case:ident| $make:expr) => {
        $crate::conformance_tests!(@cases $backend, $case, $make;
            round_trip, unary_ops, binary_broadcasting, scale, reductions, softmax, matmul_shapes,
            permute_slice_cat, strided_copies, gather_scatter, empty_tensors, large_elementwise,
            triangle_masks, arg_reductions, argsorts, cumsums, remainders, comparisons, where_select, casts, index_gathers,
            half_moves, half_casts, half_arithmetic, int32_moves, fills, adam_steps, norms,
            squared_sums, attentions, packed_attentions, nan_max_min);
    };
    ($backend:literal, $make:expr) => {
        $crate::conformance_tests!($backend, |_case| $make);
    };
    (@cases $backend:literal, $case_var:ident, $make:expr; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(
                    $backend,
                    stringify!($case),
                    || {
                        let $case_var: &str = stringify!($case);
                        $make
                    },
                    $crate::conformance::$case,
                );
            }
        )*
    };
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-10 } else { 2e-5 }
}

/// Deterministic test values in [-2, 2) (positive in [0.25, 2.25) when `positive`).
fn vals(n: usize, seed: u64, positive: bool) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
            if positive { x.abs() + 0.25 } else { x }
        })
        .collect()
}

/// `v` as a host buffer of `dtype` (kernels upload it).
fn buf(dtype: DType, v: &[f64]) -> Buffer {
    host(dtype, v).into()
}

fn host(dtype: DType, v: &[f64]) -> HostData {
    match dtype {
        DType::F32 => HostData::F32(v.iter().map(|&x| x as f32).collect()),
        _ => HostData::F64(v.to_vec()),
    }
}

/// Compares a result with the reference at the dtype's tolerance.
fn expect(k: &dyn Kernels, what: &str, got: &Buffer, want: &[f64], dtype: DType) -> Result<()> {
    expect_within(k, what, got, want, dtype, tol(dtype))
}

/// Compares a result, which must live on the device, with the reference:
/// |got - want| <= tol * (1 + |want|).
fn expect_within(
    k: &dyn Kernels,
    what: &str,
    got: &Buffer,
    want: &[f64],
    dtype: DType,
    tol: f64,
) -> Result<()> {
    if got.resident_on().is_none() {
        return Err(Error::InvalidArgument {
            op: "conformance",
            reason: format!("{what} ({dtype}) ran on the host, not on {}", k.name()),
        });
    }
    let got = got.host()?;
    if got.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            expected: dtype,
            got: got.dtype(),
        });
    }
    let got: Vec<f64> = got.to_vec();
    if got.len() != want.len() {
        return Err(Error::DataShapeMismatch {
            len: got.len(),
            shape: vec![want.len()],
        });
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
        if !ok {
            return Err(Error::InvalidArgument {
                op: "conformance",
                reason: format!("{what} ({dtype}): element {i} is {g}, reference {w}"),
            });
        }
    }
    Ok(())
}

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// The dtypes of [`DTYPES`] the backend computes in.
fn computed(b: &dyn Kernels) -> impl Iterator<Item = DType> + '_ {
    DTYPES.into_iter().filter(|&d| b.computes(d))
}

/// The value rounded to `dtype` (so references start from exactly the backend's inputs).
fn rounded(dtype: DType, v: &[f64]) -> Vec<f64> {
    host(dtype, v).to_vec()
}

/// Data uploaded, copied on the device and downloaded comes back bit for bit, for every dtype
/// the device holds.
pub fn round_trip<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    for d in [
        HostData::F32(vec![1.5, -2.0, 3.25]),
        HostData::F64(vec![0.1, 1e300]),
        HostData::I64(vec![i64::MIN, 7]),
        HostData::Bool(vec![1, 0, 0, 1, 1]),
    ] {
        if !b.backend().stores(d.dtype()) {
            continue;
        }
        let got = b.permute(&d.clone().into(), &[d.len()], &[0])?;
        if got.resident_on().is_none() || got.host()? != &d {
            return Err(Error::InvalidArgument {
                op: "conformance",
                reason: format!("round trip of {d:?} gave {got:?}"),
            });
        }
    }
    Ok(())
}

/// [`Kernels::full`](crate::backend::Kernels::full) of every dtype, zero ([`Backend::zeros`],
/// written on the device) and not, equals
/// [`HostData::filled`], also where the memory was used before (a pool's recycled buffer).
pub fn fills<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    use crate::backend::Kernels;
    for dtype in [
        DType::F32,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::F16,
        DType::BF16,
        DType::Bool,
    ] {
        for n in [1, 257, 70_000] {
            for value in [0.0, -0.0, 1.5, -3.0] {
                // a used buffer of this size, dropped into the pool first
                drop(Kernels::full(b, dtype, n, 7.0)?);
                let got = Kernels::full(b, dtype, n, value)?;
                let want = HostData::filled(dtype, n, value);
                let placed = got.resident_on().is_some() == b.backend().stores(dtype);
                if !placed || got.host()? != &want {
                    return Err(Error::InvalidArgument {
                        op: "conformance",
                        reason: format!("full({dtype}, {n}, {value}) gave {:?}", got.host()?),
                    });
                }
            }
        }
    }
    Ok(())
}

/// [`Backend::adam_step`] in place on buffers the device holds alone (Adam and AdamW, two steps)
/// against the update in f64; declined (`false`, nothing written) where a buffer is shared.
/// A backend without the kernel declines everything.
pub fn adam_steps<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    use crate::backend::{AdamStep, Kernels};
    let n = 1000;
    for dtype in computed(b).collect::<Vec<_>>() {
        for decoupled in [false, true] {
            let (lr, b1, b2, wd, eps) = (0.01f64, 0.9f64, 0.999f64, 0.1, 1e-8);
            let g0 = rounded(dtype, &vals(n, 3, false));
            let p0 = rounded(dtype, &vals(n, 4, false));
            let (mut p, mut m, mut v) = (p0, vec![0.0; n], vec![0.0; n]);
            // the device's own copies (a kernel's results), so that no other buffer shares them
            let own = |x: &[f64]| b.scale(&buf(dtype, x), 1.0);
            let (mut pd, gd, mut md, mut vd) = (own(&p)?, own(&g0)?, own(&m)?, own(&v)?);
            for step in 1..=2 {
                let (k1, k2) = (1.0 / (1.0 - b1.powi(step)), 1.0 / (1.0 - b2.powi(step)));
                let h = AdamStep {
                    lr,
                    beta1: b1,
                    beta2: b2,
                    c1: 1.0 - b1,
                    c2: 1.0 - b2,
                    k1,
                    k2,
                    eps,
                    weight_decay: wd,
                    shrink: 1.0 - lr * wd,
                    decoupled,
                };
                let shared = pd.clone();
                let declined = !Kernels::adam_step(b, &mut pd, &gd, [&mut md, &mut vd], &h)?;
                drop(shared);
                let done = Kernels::adam_step(b, &mut pd, &gd, [&mut md, &mut vd], &h)?;
                if !done {
                    // no such kernel on this backend: it must decline every time
                    if b.backend().name() != "cpu" && matches!(dtype, DType::F32) {
                        return Err(Error::InvalidArgument {
                            op: "conformance",
                            reason: format!("adam_step declined unshared {dtype} buffers"),
                        });
                    }
                    break;
                }
                for i in 0..n {
                    let mut gi = g0[i];
                    if decoupled {
                        p[i] *= 1.0 - lr * wd;
                    } else {
                        gi += wd * p[i];
                    }
                    m[i] = b1 * m[i] + (1.0 - b1) * gi;
                    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                    p[i] -= lr * (m[i] * k1) / ((v[i] * k2).sqrt() + eps);
                }
                if !declined {
                    return Err(Error::InvalidArgument {
                        op: "conformance",
                        reason: "adam_step wrote a parameter another buffer shares".into(),
                    });
                }
                expect(b, "adam_step p", &pd, &p, dtype)?;
                expect(b, "adam_step m", &md, &m, dtype)?;
                expect(b, "adam_step v", &vd, &v, dtype)?;
            }
        }
    }
    Ok(())
}

fn unary_ref(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Square => x * x,
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::Gelu => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Step => {
            if x <= 0.0 {
                0.0
            } else {
                1.0
            }
        }
        // d/dx of 0.5 x (1 + tanh u), u = c (x + 0.044715 x^3), written with sech^2.
        UnaryOp::GeluGrad => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let u = c * (x + 0.044715 * x.powi(3));
            0.5 * (1.0 + u.tanh()) + 0.5 * x * c * (1.0 + 3.0 * 0.044715 * x * x) / u.cosh().powi(2)
        }
        UnaryOp::Abs => x.abs(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::GeluErf => 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt())),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::SiluGrad => {
            let s = 1.0 / (1.0 + (-x).exp());
            s + x * s * (1.0 - s)
        }
        UnaryOp::GeluErfGrad => {
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            0.5 * (1.0 + libm::erf(x / 2f64.sqrt())) + x * pdf
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Trunc => x.trunc(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Expm1 => x.exp_m1(),
    }
}

/// Every unary op on an odd-sized tensor; each activation's derivative also as the fused
/// `g * op(x)` (`unary_mul`).
pub fn unary_ops<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    use UnaryOp::*;
    for dtype in computed(b) {
        for &op in UnaryOp::ALL {
            let x = rounded(
                dtype,
                &vals(37, 1, matches!(op, Log | Sqrt | Rsqrt | Log1p)),
            );
            let want: Vec<f64> = x.iter().map(|&v| unary_ref(op, v)).collect();
            let got = b.unary(op, &buf(dtype, &x))?;
            expect(b, &format!("{op:?}"), &got, &want, dtype)?;
        }
        // relu keeps NaN and -0 (PyTorch's), and its derivative passes the gradient at NaN
        let odd = rounded(dtype, &[f64::NAN, -0.0, 0.0, -1.0]);
        let relu: Vec<f64> = b.unary(Relu, &buf(dtype, &odd))?.host()?.to_vec();
        let step: Vec<f64> = b.unary(Step, &buf(dtype, &odd))?.host()?.to_vec();
        let relu_ok = relu[0].is_nan() && relu[1] == 0.0 && relu[1].is_sign_negative();
        if !relu_ok || step != [1.0, 0.0, 0.0, 0.0] {
            return Err(Error::InvalidArgument {
                op: "conformance",
                reason: format!(
                    "{} relu / step of [NaN, -0, 0, -1] ({dtype}): {relu:?} / {step:?}",
                    b.name()
                ),
            });
        }
        // log1p and expm1 exist for their relative precision near 0, which the check above
        // (an absolute tolerance there) does not see.
        let small = rounded(dtype, &[1e-7, -3e-6, 2.5e-4, -0.01, 0.3, -0.45, 0.9, 1.7]);
        for op in [Log1p, Expm1] {
            let want: Vec<f64> = small.iter().map(|&v| unary_ref(op, v)).collect();
            let got: Vec<f64> = b.unary(op, &buf(dtype, &small))?.host()?.to_vec();
            for ((g, w), v) in got.iter().zip(&want).zip(&small) {
                if (g - w).abs() > 4.0 * tol(dtype) * w.abs() {
                    return Err(Error::InvalidArgument {
                        op: "conformance",
                        reason: format!("{} {op:?}({v}) ({dtype}): {g}, want {w}", b.name()),
                    });
                }
            }
        }
        for op in [GeluGrad, GeluErfGrad, SiluGrad] {
            let x = rounded(dtype, &vals(1037, 2, false));
            let g = rounded(dtype, &vals(1037, 3, false));
            let want: Vec<f64> = x
                .iter()
                .zip(&g)
                .map(|(&v, &g)| g * unary_ref(op, v))
                .collect();
            let got = b.unary_mul(op, &buf(dtype, &x), &buf(dtype, &g))?;
            expect(b, &format!("unary_mul {op:?}"), &got, &want, dtype)?;
        }
    }
    Ok(())
}

fn broadcast_ref(
    op: BinaryOp,
    a: &[f64],
    sa: &[usize],
    x: &[f64],
    sx: &[usize],
    out: &[usize],
) -> Vec<f64> {
    let n = numel(out);
    let idx = |flat: usize, s: &[usize]| -> usize {
        // map an output multi-index to the input's flat index (right-aligned, size-1 broadcast)
        let os = strides(out);
        let is = strides(s);
        let pad = out.len() - s.len();
        (0..s.len())
            .map(|i| {
                if s[i] == 1 {
                    0
                } else {
                    (flat / os[i + pad]) % out[i + pad] * is[i]
                }
            })
            .sum()
    };
    (0..n)
        .map(|f| binary_ref(op, a[idx(f, sa)], x[idx(f, sx)]))
        .collect()
}

/// `op(p, q)` in f64: Rust's `%` is C's exact `fmod`, and the remainder and floor division
/// follow Python's definitions (floor division as CPython's `float.__floordiv__`).
fn binary_ref(op: BinaryOp, p: f64, q: f64) -> f64 {
    let python_mod = |p: f64, q: f64| {
        let r = p % q;
        if r != 0.0 && (r < 0.0) != (q < 0.0) {
            r + q
        } else {
            r
        }
    };
    match op {
        BinaryOp::Add => p + q,
        BinaryOp::Sub => p - q,
        BinaryOp::Mul => p * q,
        BinaryOp::Div => p / q,
        BinaryOp::Maximum => p.max(q),
        BinaryOp::Minimum => p.min(q),
        BinaryOp::Fmod => p % q,
        BinaryOp::Remainder => python_mod(p, q),
        BinaryOp::FloorDivide if q == 0.0 => p / q,
        BinaryOp::FloorDivide => {
            let div = (p - p % q) / q;
            let div = if python_mod(p, q) != p % q {
                div - 1.0
            } else {
                div
            };
            if div == 0.0 {
                0.0f64.copysign(p / q)
            } else {
                let f = div.floor();
                if div - f > 0.5 { f + 1.0 } else { f }
            }
        }
    }
}

/// Binary ops with equal shapes and with NumPy broadcasting both ways.
pub fn binary_broadcasting<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    use BinaryOp::*;
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[3, 5], &[3, 5], &[3, 5]),
        (&[3, 5], &[5], &[3, 5]),
        (&[4, 1, 3], &[2, 1], &[4, 2, 3]),
        (&[], &[2, 2], &[2, 2]),
    ];
    for dtype in computed(b) {
        for &op in BinaryOp::ALL {
            for (sa, sx, so) in cases {
                let a = rounded(dtype, &vals(numel(sa), 2, false));
                let x = rounded(
                    dtype,
                    &vals(
                        numel(sx),
                        3,
                        matches!(op, Div | Fmod | Remainder | FloorDivide),
                    ),
                );
                let want = broadcast_ref(op, &a, sa, &x, sx, so);
                let got = b.binary(op, &buf(dtype, &a), sa, &buf(dtype, &x), sx, so)?;
                expect(b, &format!("{op:?} {sa:?} {sx:?}"), &got, &want, dtype)?;
            }
        }
    }
    Ok(())
}

/// Multiplication by a scalar.
pub fn scale<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    for dtype in computed(b) {
        let x = rounded(dtype, &vals(11, 4, false));
        let want: Vec<f64> = x.iter().map(|v| v * -0.375).collect();
        expect(b, "scale", &b.scale(&buf(dtype, &x), -0.375)?, &want, dtype)?;
        let want: Vec<f64> = x.iter().map(|v| v + 1.5).collect();
        expect(
            b,
            "add_scalar",
            &b.add_scalar(&buf(dtype, &x), 1.5)?,
            &want,
            dtype,
        )?;
    }
    Ok(())
}

/// Sum and max over single, several and all dims of a 3-D tensor.
pub fn reductions<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    // small; long runs over few outputs (cut into parts by GPU backends, as a bias's gradient)
    for shape in [[3usize, 4, 5], [3, 1000, 5], [1, 2048, 24]] {
        reductions_of(b, shape)?;
    }
    Ok(())
}

fn reductions_of<B: Backend + 'static>(b: &Resident<B>, shape: [usize; 3]) -> Result<()> {
    let st = strides(&shape);
    for dtype in computed(b) {
        let x = rounded(dtype, &vals(numel(&shape), 5, false));
        for dims in [vec![0], vec![1], vec![2], vec![0, 2], vec![0, 1, 2]] {
            for &op in ReduceKind::ALL {
                let out_shape: Vec<usize> = (0..3)
                    .map(|d| if dims.contains(&d) { 1 } else { shape[d] })
                    .collect();
                let start = match op {
                    ReduceKind::Sum => 0.0,
                    ReduceKind::Max => f64::NEG_INFINITY,
                    ReduceKind::Min => f64::INFINITY,
                };
                let mut want = vec![start; numel(&out_shape)];
                let os = strides(&out_shape);
                for (f, v) in x.iter().enumerate() {
                    let o: usize = (0..3)
                        .map(|d| {
                            if dims.contains(&d) {
                                0
                            } else {
                                (f / st[d]) % shape[d] * os[d]
                            }
                        })
                        .sum();
                    want[o] = match op {
                        ReduceKind::Sum => want[o] + v,
                        ReduceKind::Max => want[o].max(*v),
                        ReduceKind::Min => want[o].min(*v),
                    };
                }
                let got = b.reduce(op, &buf(dtype, &x), &shape, &dims)?;
                expect(b, &format!("{op:?} over {dims:?}"), &got, &want, dtype)?;
            }
        }
    }
    Ok(())
}

/// Softmax and log-softmax over each dim, with large values (stability).
pub fn softmax<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let shape = [3usize, 4];
    for dtype in computed(b) {
        let x: Vec<f64> = rounded(
            dtype,
            &vals(12, 6, false)
                .iter()
                .map(|v| v * 40.0)
                .collect::<Vec<_>>(),
        );
        for dim in 0..2 {
            for log in [false, true] {
                // (outer, len, inner) of the softmax's dim
                let view = if dim == 0 { (1, 3, 4) } else { (3, 4, 1) };
                let want = nan::softmax_ref(&x, view, log);
                let got = b.softmax(&buf(dtype, &x), &shape, dim, log)?;
                expect(
                    b,
                    &format!("softmax dim {dim} log {log}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
        }
    }
    Ok(())
}

/// The sum of the squares of every element (a gradient's squared norm) against f64, from
/// empty to longer than one thread's or one block's share.
pub fn squared_sums<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    for dtype in computed(b) {
        for n in [0, 1, 37, 1000, 70_000, 300_001] {
            let x = rounded(dtype, &vals(n, 44, false));
            let want: f64 = x.iter().map(|v| v * v).sum();
            let got = b.sum_squares(&buf(dtype, &x))?;
            let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
            expect_within(b, &format!("sum_squares of {n}"), &got, &[want], dtype, tol)?;
        }
    }
    Ok(())
}

/// LayerNorm's and RMSNorm's output, input gradient and parameter gradients, with and without
/// a weight and a bias, against their definitions in f64, on [`norms_of`]'s shapes: odd row
/// lengths and many short rows (the parameters' sums over parts of the rows), each row within
/// the suite's smallest wgpu binding (longer rows, and more rows than one launch dimension
/// holds blocks: [`norms_of`] with them).
pub fn norms<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    norms_of(b, &[(3, 5), (5, 150), (40, 129), (700, 4), (12000, 3)])
}

/// [`norms`] on (rows, cols) `shapes`.
///
/// # Errors
/// The first result that differs from the reference, or a kernel's error.
pub fn norms_of<B: Backend + 'static>(b: &Resident<B>, shapes: &[(usize, usize)]) -> Result<()> {
    let eps = 1e-5;
    for dtype in computed(b) {
        for &(rows, cols) in shapes {
            let n = rows * cols;
            let x = rounded(dtype, &vals(n, 40 + cols as u64, false));
            // rows of different means, each spread over several values (well conditioned)
            let x: Vec<f64> = x
                .iter()
                .enumerate()
                .map(|(i, v)| 0.25 * v + (i % cols % 5) as f64 + (i / cols % 4) as f64)
                .collect();
            let x = rounded(dtype, &x);
            let g = rounded(dtype, &vals(n, 41, false));
            let w = rounded(dtype, &vals(cols, 42, true));
            let bias = rounded(dtype, &vals(cols, 43, false));
            for center in [true, false] {
                let stats: Vec<(f64, f64)> = x
                    .chunks(cols)
                    .map(|r| {
                        let mean = if center {
                            r.iter().sum::<f64>() / cols as f64
                        } else {
                            0.0
                        };
                        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
                        (mean, 1.0 / (var + eps).sqrt())
                    })
                    .collect();
                let yhat = |i: usize| (x[i] - stats[i / cols].0) * stats[i / cols].1;
                let mut dparams = vec![0.0; 2 * cols];
                for i in 0..n {
                    dparams[i % cols] += g[i] * yhat(i);
                    dparams[cols + i % cols] += g[i];
                }
                let grad_tol = if dtype == DType::F64 { 1e-9 } else { 2e-4 };
                let got = b.norm_param_grad(&buf(dtype, &x), &buf(dtype, &g), cols, eps, center)?;
                let what = format!("norm ({rows}, {cols}) center {center} parameter gradients");
                expect_within(b, &what, &got, &dparams, dtype, grad_tol)?;
                for affine in [[true, true], [true, false], [false, true], [false, false]] {
                    let (wb, bb) = (buf(dtype, &w), buf(dtype, &bias));
                    let params: Vec<&Buffer> = [(affine[0], &wb), (affine[1], &bb)]
                        .into_iter()
                        .filter_map(|(on, p)| on.then_some(p))
                        .collect();
                    let want: Vec<f64> = (0..n)
                        .map(|i| {
                            let y = yhat(i);
                            let y = if affine[0] { y * w[i % cols] } else { y };
                            if affine[1] { y + bias[i % cols] } else { y }
                        })
                        .collect();
                    let got = b.norm(&buf(dtype, &x), &params, cols, eps, center, affine)?;
                    let what = format!("norm ({rows}, {cols}) center {center} affine {affine:?}");
                    expect(b, &what, &got, &want, dtype)?;
                    // dx = rstd (h - mean(h) [center] - yhat mean(h yhat)), h = g [* w]
                    let h = |i: usize| if affine[0] { g[i] * w[i % cols] } else { g[i] };
                    let mut want = vec![0.0; n];
                    for (r, &(_, rstd)) in stats.iter().enumerate() {
                        let idx = r * cols..(r + 1) * cols;
                        let hm = idx.clone().map(h).sum::<f64>() / cols as f64;
                        let hm = if center { hm } else { 0.0 };
                        let hy = idx.clone().map(|i| h(i) * yhat(i)).sum::<f64>() / cols as f64;
                        for i in idx {
                            want[i] = rstd * (h(i) - hm - yhat(i) * hy);
                        }
                    }
                    let weight: Vec<&Buffer> = params
                        .iter()
                        .copied()
                        .take(usize::from(affine[0]))
                        .collect();
                    let got = b.norm_input_grad(
                        &buf(dtype, &x),
                        &buf(dtype, &g),
                        &weight,
                        cols,
                        eps,
                        center,
                    )?;
                    let what = format!(
                        "norm ({rows}, {cols}) center {center} affine {affine:?} input gradient"
                    );
                    expect_within(b, &what, &got, &want, dtype, grad_tol)?;
                }
            }
        }
    }
    Ok(())
}

/// 2-D, batched and shared-operand products, odd and degenerate sizes.
pub fn matmul_shapes<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let cases = [
        (1, 1, 1, 1, false),
        (1, 17, 13, 9, false),
        (3, 5, 7, 2, true),
        (2, 4, 3, 6, false),
        (1, 70, 65, 66, false),
        (1, 512, 512, 513, false),
        (1, 3, 0, 4, false),
    ];
    for dtype in computed(b) {
        for ((batch, m, k, n, b_batched), (a_trans, b_trans)) in cases.into_iter().flat_map(|c| {
            [(false, false), (true, false), (false, true), (true, true)].map(|t| (c, t))
        }) {
            let a = rounded(dtype, &vals(batch * m * k, 7, false));
            let x = rounded(
                dtype,
                &vals(if b_batched { batch } else { 1 } * k * n, 8, false),
            );
            let mut want = vec![0.0; batch * m * n];
            for bi in 0..batch {
                let xo = if b_batched { bi * k * n } else { 0 };
                // Element (i, l) of the logical a and (l, j) of the logical b, in their storage.
                let ai = |i: usize, l: usize| {
                    if a_trans {
                        a[bi * m * k + l * m + i]
                    } else {
                        a[(bi * m + i) * k + l]
                    }
                };
                let bj = |l: usize, j: usize| {
                    if b_trans {
                        x[xo + j * k + l]
                    } else {
                        x[xo + l * n + j]
                    }
                };
                for i in 0..m {
                    for j in 0..n {
                        want[(bi * m + i) * n + j] = (0..k).map(|l| ai(i, l) * bj(l, j)).sum();
                    }
                }
            }
            let dims = MatmulDims {
                batch,
                m,
                k,
                n,
                b_batched,
                a_trans,
                b_trans,
            };
            let got = b.matmul(&buf(dtype, &a), &buf(dtype, &x), dims)?;
            // Rounding error of a sum of k products grows with k.
            let t = tol(dtype) * (1.0 + k as f64 / 8.0);
            expect_within(b, &format!("matmul {dims:?}"), &got, &want, dtype, t)?;
        }
    }
    Ok(())
}

/// Permutations, sub-boxes and concatenation (data movement is exact, any dtype).
pub fn permute_slice_cat<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let shape = [2usize, 3, 4];
    let x: Vec<f64> = (0..24).map(f64::from).collect();
    let st = strides(&shape);
    for dtype in DTYPES {
        let s = buf(dtype, &x);
        for perm in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let os = strides(&out_shape);
            let want: Vec<f64> = (0..24)
                .map(|f| {
                    (0..3)
                        .map(|i| (f / os[i]) % out_shape[i] * st[perm[i]])
                        .sum::<usize>() as f64
                })
                .collect();
            expect(
                b,
                &format!("permute {perm:?}"),
                &b.permute(&s, &shape, &perm)?,
                &want,
                dtype,
            )?;
        }
        let want: Vec<f64> = vec![17.0, 18.0, 21.0, 22.0];
        expect(
            b,
            "slice",
            &b.slice(&s, &shape, &[1, 1, 1], &[1, 2, 2])?,
            &want,
            dtype,
        )?;
        let y = buf(dtype, &[100.0, 101.0, 102.0, 103.0, 104.0, 105.0]);
        let got = b.cat(&[&s, &y], &[&shape, &[2, 3, 1]], 2)?;
        let mut want = vec![];
        for r in 0..6 {
            want.extend((0..4).map(|c| (r * 4 + c) as f64));
            want.push(100.0 + r as f64);
        }
        expect(b, "cat", &got, &want, dtype)?;
    }
    Ok(())
}

/// The backend's one data-movement kernel, [`Backend::copy_boxes`], directly: boxes gathered
/// from offsets with overlapping-free odd strides, and pieces put into an output's boxes.
pub fn strided_copies<B: Backend + 'static>(r: &Resident<B>) -> Result<()> {
    let b = r.backend();
    let x: Vec<f64> = (0..40).map(f64::from).collect();
    for dtype in DTYPES {
        let s = b.upload(&host(dtype, &x))?;
        // the (2, 3) box at element 7 with strides (13, 2), and the (4,) box at 1 with stride 9
        let gather = [
            (
                &s,
                StridedCopy {
                    extent: vec![2, 3],
                    strides: vec![13, 2],
                    base: 7,
                },
            ),
            (
                &s,
                StridedCopy {
                    extent: vec![4],
                    strides: vec![9],
                    base: 1,
                },
            ),
        ];
        for (copy, want) in gather.iter().zip([
            vec![7.0, 9.0, 11.0, 20.0, 22.0, 24.0],
            vec![1.0, 10.0, 19.0, 28.0],
        ]) {
            let got = b.copy_boxes(dtype, want.len(), false, std::slice::from_ref(copy))?;
            let what = format!("gather {:?}", copy.1);
            expect(r, &what, &r.keep(got), &want, dtype)?;
        }
        // two contiguous pieces put as the even and odd columns of a (3, 2) output
        let (p, q) = (
            b.upload(&host(dtype, &[1.0, 2.0, 3.0]))?,
            b.upload(&host(dtype, &[4.0, 5.0, 6.0]))?,
        );
        let col = |base| StridedCopy {
            extent: vec![3],
            strides: vec![2],
            base,
        };
        let got = b.copy_boxes(dtype, 6, true, &[(&p, col(0)), (&q, col(1))])?;
        let want = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        expect(r, "put", &r.keep(got), &want, dtype)?;
    }
    Ok(())
}

/// Row gathers (embedding lookups) and their transpose, scatter-add with repeated indices; an
/// index out of range is an error or reads and writes nothing.
pub fn gather_scatter<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let (rows, len) = (5, 3);
    let idx = [4i64, 0, 2, 4, 1, 4];
    let ix = Buffer::from(HostData::I64(idx.to_vec()));
    for dtype in computed(b) {
        let t = vals(rows * len, 9, false);
        let table = buf(dtype, &t);
        let want: Vec<f64> = idx
            .iter()
            .flat_map(|&i| t[i as usize * len..(i as usize + 1) * len].to_vec())
            .collect();
        expect(
            b,
            "gather_rows",
            &b.gather_rows(&table, rows, len, &ix)?,
            &want,
            dtype,
        )?;
        let src = vals(idx.len() * len, 10, false);
        let mut want = vec![0.0; rows * len];
        for (r, &i) in idx.iter().enumerate() {
            for c in 0..len {
                want[i as usize * len + c] += src[r * len + c];
            }
        }
        let s = buf(dtype, &src);
        expect(
            b,
            "scatter_add_rows",
            &b.scatter_add_rows(&s, rows, len, &ix)?,
            &want,
            dtype,
        )?;
        // An index outside the table (core refuses it first): an error, or nothing read or
        // written for it, the other rows right.
        let bad = Buffer::from(HostData::I64(vec![1, 5, -1]));
        if let Ok(got) = b.gather_rows(&table, rows, len, &bad) {
            let first = b.slice(&got, &[3, len], &[0, 0], &[1, len])?;
            expect(
                b,
                "gather_rows beside a bad index",
                &first,
                &t[len..2 * len],
                dtype,
            )?;
        }
        let s3 = buf(dtype, &src[..3 * len]);
        if let Ok(got) = b.scatter_add_rows(&s3, rows, len, &bad) {
            let mut want = vec![0.0; rows * len];
            want[len..2 * len].copy_from_slice(&rounded(dtype, &src[..len]));
            expect(b, "scatter_add_rows beside a bad index", &got, &want, dtype)?;
        }
    }
    Ok(())
}

/// Tensors with no elements go through every kernel; a 0-d tensor reduces to itself.
pub fn empty_tensors<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let scalar = Buffer::from(HostData::F32(vec![2.5]));
    expect(
        b,
        "reduce 0-d",
        &b.reduce(ReduceKind::Sum, &scalar, &[], &[])?,
        &[2.5],
        DType::F32,
    )?;
    let e = Buffer::from(HostData::F32(vec![]));
    expect(
        b,
        "unary empty",
        &b.unary(UnaryOp::Exp, &e)?,
        &[],
        DType::F32,
    )?;
    expect(
        b,
        "binary empty",
        &b.binary(BinaryOp::Add, &e, &[0, 3], &e, &[0, 3], &[0, 3])?,
        &[],
        DType::F32,
    )?;
    expect(
        b,
        "reduce empty dim",
        &b.reduce(ReduceKind::Sum, &e, &[2, 0], &[1])?,
        &[0.0, 0.0],
        DType::F32,
    )?;
    expect(
        b,
        "matmul empty",
        &b.matmul(
            &e,
            &e,
            MatmulDims {
                batch: 1,
                m: 0,
                k: 3,
                n: 0,
                b_batched: false,
                a_trans: false,
                b_trans: false,
            },
        )?,
        &[],
        DType::F32,
    )?;
    Ok(())
}

/// A large elementwise op and reduction (GPU backends bind such buffers in pieces).
pub fn large_elementwise<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let n = std::env::var("GFLOW_CONFORMANCE_LARGE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 22);
    let x: Vec<f64> = (0..n).map(|i| (i % 1000) as f64 / 500.0 - 1.0).collect();
    let s = buf(DType::F32, &x);
    let want: Vec<f64> = x.iter().map(|v| v * 2.0).collect();
    expect(
        b,
        "large add",
        &b.binary(BinaryOp::Add, &s, &[n], &s, &[n], &[n])?,
        &want,
        DType::F32,
    )?;
    let got: Vec<f64> = b.reduce(ReduceKind::Max, &s, &[n], &[0])?.host()?.to_vec();
    if got != vec![0.998] && (got[0] - 0.998).abs() > 1e-6 {
        return Err(Error::InvalidArgument {
            op: "conformance",
            reason: format!("large max is {got:?}"),
        });
    }
    Ok(())
}

/// The stored dtypes the masks and index kernels move (each on the device that holds it).
const HELD: [DType; 3] = [DType::F32, DType::F64, DType::I64];

/// `v` as host data of any dtype (integers truncated toward zero).
fn typed(dtype: DType, v: &[f64]) -> HostData {
    HostData::F64(v.to_vec()).cast(dtype)
}

/// Row gathers from a piece of a table split over its rows (indices outside it give zero
/// rows), and `torch.gather` along each dim (indices outside the dim give zero), on every dtype
/// the device holds.
pub fn index_gathers<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    for dtype in HELD.into_iter().filter(|&d| b.backend().stores(d)) {
        // a table of global rows 50..90, rows of 5: past 1 KiB
        let (rows, len, start) = (40, 5, 50);
        let t = typed(
            dtype,
            &vals(rows * len, 71, false)
                .iter()
                .map(|v| v * 9.0)
                .collect::<Vec<_>>(),
        );
        let tv = t.to_f64_vec();
        let tb = Buffer::from(t);
        let idx: Vec<i64> = (0..30).map(|i| (i * 37 % 100) as i64).collect();
        let want: Vec<f64> = idx
            .iter()
            .flat_map(|&i| {
                let r = i - start as i64;
                (0..len).map(move |c| (r, c))
            })
            .map(|(r, c)| {
                if (0..rows as i64).contains(&r) {
                    tv[r as usize * len + c]
                } else {
                    0.0
                }
            })
            .collect();
        let ib = Buffer::from(HostData::I64(idx));
        let got = b.gather_rows_partial(&tb, rows, len, &ib, start)?;
        expect(b, "gather_rows_partial", &got, &want, dtype)?;
        // torch.gather of x (8, 5, 6) by idx (6, 5, 4) along each dim, some indices outside;
        // past 1 KiB (GPUs gather in blocks of idx's first dim)
        let (xs, is) = ([8usize, 5, 6], [6usize, 5, 4]);
        let x = typed(
            dtype,
            &vals(240, 72, false)
                .iter()
                .map(|v| v * 9.0)
                .collect::<Vec<_>>(),
        );
        let xv = x.to_f64_vec();
        let xb = Buffer::from(x);
        for dim in 0..3 {
            let idx: Vec<i64> = (0..120).map(|o| (o * 7 % 9) as i64 - 1).collect();
            let want: Vec<f64> = (0..120)
                .map(|o| {
                    let c = [o / 20, o / 4 % 5, o % 4];
                    let i = idx[o];
                    if i < 0 || i as usize >= xs[dim] {
                        return 0.0;
                    }
                    let mut at = c;
                    at[dim] = i as usize;
                    xv[(at[0] * 5 + at[1]) * 6 + at[2]]
                })
                .collect();
            let ib = Buffer::from(HostData::I64(idx));
            let got = b.gather_dim(&xb, &xs, dim, &ib, &is)?;
            expect(b, &format!("gather_dim dim={dim}"), &got, &want, dtype)?;
        }
    }
    Ok(())
}

/// Float casts to every dtype the device holds, bit for bit against Rust's `as` (PyTorch's
/// casts: round to nearest, truncation toward zero saturating with NaN 0, `x != 0`): signed
/// zeros, subnormals, infinities, NaN and values past i64 included.
pub fn casts<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let v = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        3.7,
        -3.7,
        1e-40,
        -1e-42,
        2.5e-45,
        1e10,
        -1e10,
        2147483648.0,
        123456789.0,
        1e20,
        -1e20,
        -9.3e18,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1e300,
    ];
    let mut ramp = vals(600, 61, false);
    ramp.iter_mut().for_each(|x| *x *= 1e6);
    let targets = [DType::F32, DType::F64, DType::I64, DType::Bool];
    for dtype in computed(b) {
        let x = rounded(dtype, &[&v[..], &ramp].concat());
        let xb = buf(dtype, &x);
        for to in targets.into_iter().filter(|&d| b.backend().stores(d)) {
            let want = match to {
                DType::F32 => HostData::F32(x.iter().map(|&e| e as f32).collect()),
                DType::F64 => HostData::F64(x.clone()),
                DType::I64 => HostData::I64(x.iter().map(|&e| e as i64).collect()),
                _ => HostData::Bool(x.iter().map(|&e| u8::from(e != 0.0)).collect()),
            };
            let got = b.cast(&xb, to)?;
            if got.resident_on().is_none() || got.host()?.as_bytes() != want.as_bytes() {
                return Err(Error::InvalidArgument {
                    op: "conformance",
                    reason: format!("cast {dtype} to {to} gave {got:?}, want {want:?}"),
                });
            }
        }
    }
    Ok(())
}

/// Every comparison with broadcasting and without, ties and NaN included; the result is Bool.
pub fn comparisons<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    use crate::backend::CmpOp;
    let cmp = |op: CmpOp, p: f64, q: f64| match op {
        CmpOp::Eq => p == q,
        CmpOp::Ne => p != q,
        CmpOp::Lt => p < q,
        CmpOp::Le => p <= q,
        CmpOp::Gt => p > q,
        CmpOp::Ge => p >= q,
    };
    // halves in [-2, 2]: many ties; past 1 KiB, so GPUs bind them in pieces
    let halves = |n, seed| -> Vec<f64> {
        vals(n, seed, false)
            .iter()
            .map(|v| (v * 2.0).round() / 2.0)
            .collect()
    };
    for dtype in computed(b) {
        // rows of the first dim fit 1 KiB (GPUs bind in blocks of them)
        let (sa, sb, so) = ([12, 1, 50], [2, 1], [12, 2, 50]);
        let mut x = halves(600, 41);
        x[3] = f64::NAN;
        let y = halves(2, 42);
        let (xb, yb) = (buf(dtype, &x), buf(dtype, &y));
        let flat_y = halves(600, 43);
        let fb = buf(dtype, &flat_y);
        for &op in CmpOp::ALL {
            let want: Vec<f64> = (0..so.iter().product())
                .map(|i| {
                    let (p, q) = (x[i / 100 * 50 + i % 50], y[i / 50 % 2]);
                    f64::from(u8::from(cmp(op, p, q)))
                })
                .collect();
            let got = b.compare(op, &xb, &sa, &yb, &sb, &so)?;
            expect(
                b,
                &format!("compare {op:?} broadcast"),
                &got,
                &want,
                DType::Bool,
            )?;
            let want: Vec<f64> = x
                .iter()
                .zip(&flat_y)
                .map(|(&p, &q)| f64::from(u8::from(cmp(op, p, q))))
                .collect();
            let got = b.compare(op, &xb, &[600], &fb, &[600], &[600])?;
            expect(b, &format!("compare {op:?}"), &got, &want, DType::Bool)?;
        }
    }
    Ok(())
}

/// `where(cond, a, b)` with each of the three broadcast (a 0-d `b` included) and without, on
/// every dtype the device holds.
pub fn where_select<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let flags = |n: usize, seed| -> Vec<u8> {
        vals(n, seed, false)
            .iter()
            .map(|v| u8::from(*v > 0.0))
            .collect()
    };
    for dtype in HELD.into_iter().filter(|&d| b.backend().stores(d)) {
        let x = typed(
            dtype,
            &vals(600, 51, false)
                .iter()
                .map(|v| v * 9.0)
                .collect::<Vec<_>>(),
        );
        let y = typed(
            dtype,
            &vals(1200, 52, false)
                .iter()
                .map(|v| v * 9.0)
                .collect::<Vec<_>>(),
        );
        let (xv, yv) = (x.to_f64_vec(), y.to_f64_vec());
        let (xb, yb) = (Buffer::from(x), Buffer::from(y));
        let c = flags(24, 53);
        let cb = Buffer::from(HostData::Bool(c.clone()));
        // cond (12, 2, 1), a (12, 1, 50), b (12, 2, 50) -> (12, 2, 50); past 1 KiB, rows of
        // the first dim within it (GPUs bind in blocks of them)
        let shapes: [&[usize]; 3] = [&[12, 2, 1], &[12, 1, 50], &[12, 2, 50]];
        let want: Vec<f64> = (0..1200)
            .map(|i| {
                if c[i / 50] == 1 {
                    xv[i / 100 * 50 + i % 50]
                } else {
                    yv[i]
                }
            })
            .collect();
        let got = b.select([&cb, &xb, &yb], shapes, &[12, 2, 50])?;
        expect(b, "where broadcast", &got, &want, dtype)?;
        // a 0-d b
        let s = Buffer::from(typed(dtype, &[-7.0]));
        let want: Vec<f64> = (0..1200)
            .map(|i| {
                if c[i / 50] == 1 {
                    xv[i / 100 * 50 + i % 50]
                } else {
                    -7.0
                }
            })
            .collect();
        let shapes: [&[usize]; 3] = [&[12, 2, 1], &[12, 1, 50], &[]];
        let got = b.select([&cb, &xb, &s], shapes, &[12, 2, 50])?;
        expect(b, "where with a 0-d operand", &got, &want, dtype)?;
        // no broadcasting
        let c = flags(600, 54);
        let cb = Buffer::from(HostData::Bool(c.clone()));
        let want: Vec<f64> = (0..600)
            .map(|i| if c[i] == 1 { xv[i] } else { yv[i] })
            .collect();
        let shapes: [&[usize]; 3] = [&[600], &[600], &[600]];
        let y600 = Buffer::from(typed(dtype, &yv[..600]));
        let got = b.select([&cb, &xb, &y600], shapes, &[600])?;
        expect(b, "where", &got, &want, dtype)?;
    }
    Ok(())
}

/// tril/triu of a batch of matrices, whole and as a piece of a larger split matrix (its first
/// element at a global (row, column) origin), on every dtype the device holds.
pub fn triangle_masks<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let shape = [3, 5, 7];
    let n: usize = shape.iter().product();
    // 105 elements of f64/i64 are past 1 KiB (the small-binding suite's piece path)
    let x: Vec<f64> = vals(n, 21, false).iter().map(|v| v * 50.0).collect();
    for dtype in HELD.into_iter().filter(|&d| b.backend().stores(d)) {
        let xs = typed(dtype, &x);
        let exact: Vec<f64> = xs.to_f64_vec();
        let xb = Buffer::from(xs);
        for (k, upper, origin) in [
            (0, false, (0, 0)),
            (-1, false, (0, 0)),
            (2, true, (0, 0)),
            (0, true, (3, 1)),
            (-2, false, (4, 6)),
            (100, false, (0, 0)),
            (-100, true, (0, 0)),
        ] {
            let want: Vec<f64> = (0..n)
                .map(|i| {
                    let (r, c) = (i / shape[2] % shape[1] + origin.0, i % shape[2] + origin.1);
                    let d = c as i64 - r as i64;
                    let keep = if upper { d >= k } else { d <= k };
                    if keep { exact[i] } else { 0.0 }
                })
                .collect();
            let got = b.triangle(&xb, &shape, k, upper, origin)?;
            let what = format!("triangle k={k} upper={upper} origin={origin:?}");
            expect(b, &what, &got, &want, dtype)?;
        }
    }
    Ok(())
}

/// argmax/argmin along each dim, with ties (lowest index wins) and NaNs (the first wins), and
/// along a line longer than a GPU pass.
pub fn arg_reductions<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let arg_ref = |x: &[f64], shape: &[usize], dim: usize, max: bool| -> Vec<f64> {
        let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
        let outer: usize = shape[..dim].iter().product();
        let mut out = vec![];
        for o in 0..outer {
            for i in 0..inner {
                let at = |l: usize| x[(o * len + l) * inner + i];
                let first_nan = (0..len).find(|&l| at(l).is_nan());
                let best = first_nan.unwrap_or_else(|| {
                    (0..len).fold(0, |best, l| {
                        let (v, w) = (at(l), at(best));
                        if (max && v > w) || (!max && v < w) {
                            l
                        } else {
                            best
                        }
                    })
                });
                out.push(best as f64);
            }
        }
        out
    };
    for dtype in computed(b) {
        let shape = [4, 6, 5];
        let mut x = vals(120, 31, false);
        // ties: repeated maxima and minima in some lines, NaNs in others
        for i in [7, 37, 67] {
            x[i] = 5.0;
        }
        for i in [2, 12, 22] {
            x[i] = -5.0;
        }
        x[33] = f64::NAN;
        x[98] = f64::NAN;
        x[118] = f64::NAN;
        let x = rounded(dtype, &x);
        let xb = buf(dtype, &x);
        for dim in 0..3 {
            for max in [true, false] {
                let got = b.arg_reduce(&xb, &shape, dim, max)?;
                let what = format!("arg_reduce dim={dim} max={max}");
                expect(b, &what, &got, &arg_ref(&x, &shape, dim, max), DType::I64)?;
            }
        }
        // a line of 40000 (several GPU passes) with its maximum late and a tie after it
        let long = 40_000;
        let mut x: Vec<f64> = (0..2 * long).map(|i| ((i * 7919) % 1000) as f64).collect();
        x[long - 5] = 2000.0;
        x[long - 1] = 2000.0;
        x[long + 35_000] = -1.0;
        let xb = buf(dtype, &x);
        for max in [true, false] {
            let got = b.arg_reduce(&xb, &[2, long], 1, max)?;
            let want = arg_ref(&x, &[2, long], 1, max);
            expect(b, "arg_reduce long lines", &got, &want, DType::I64)?;
        }
        let empty = buf(dtype, &[]);
        let got = b.arg_reduce(&empty, &[3, 0], 1, true)?;
        expect(b, "arg_reduce of an empty dim", &got, &[0.0; 3], DType::I64)?;
    }
    Ok(())
}

/// argsort along each dim in both orders, stable, with ties (-0 and 0 among them) and NaNs
/// (above every number), against a stable sort; a line longer than a GPU pass; an empty tensor.
pub fn argsorts<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let sort_ref = |x: &[f64], shape: &[usize], dim: usize, descending: bool| -> Vec<f64> {
        let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
        let mut out = vec![0.0; x.len()];
        for line in 0..x.len() / len.max(1) {
            let base = line / inner * len * inner + line % inner;
            let at = |j: usize| x[base + j * inner];
            let mut order: Vec<usize> = (0..len).collect();
            order.sort_by(|&p, &q| {
                let c = (at(p).is_nan(), at(p))
                    .partial_cmp(&(at(q).is_nan(), at(q)))
                    .unwrap_or(std::cmp::Ordering::Equal);
                if descending { c.reverse() } else { c }
            });
            for (r, &p) in order.iter().enumerate() {
                out[base + r * inner] = p as f64;
            }
        }
        out
    };
    for dtype in computed(b) {
        let shape = [4, 6, 5];
        let mut x: Vec<f64> = vals(120, 41, false).iter().map(|v| v.round()).collect();
        x[3] = -0.0;
        for i in [33, 98, 99, 118] {
            x[i] = f64::NAN;
        }
        x[50] = f64::INFINITY;
        x[51] = f64::NEG_INFINITY;
        let x = rounded(dtype, &x);
        let xb = buf(dtype, &x);
        for dim in 0..3 {
            for descending in [false, true] {
                let got = b.argsort(&xb, &shape, dim, descending)?;
                let what = format!("argsort dim={dim} descending={descending}");
                expect(
                    b,
                    &what,
                    &got,
                    &sort_ref(&x, &shape, dim, descending),
                    DType::I64,
                )?;
            }
        }
        // lines of 20000 (two GPU passes), values with many ties
        let long = 20_000;
        let x: Vec<f64> = (0..2 * long).map(|i| ((i * 7919) % 1000) as f64).collect();
        let xb = buf(dtype, &x);
        let got = b.argsort(&xb, &[2, long], 1, true)?;
        let want = sort_ref(&x, &[2, long], 1, true);
        expect(b, "argsort long lines", &got, &want, DType::I64)?;
        let got = b.argsort(&buf(dtype, &[]), &[3, 0], 1, false)?;
        expect(b, "argsort of an empty dim", &got, &[], DType::I64)?;
    }
    Ok(())
}

/// Remainders and floor division at their edges: dividends far larger than the divisor
/// (`1e8 % 3`, where `a - floor(a / b) * b` in f32 is off by the divisor), signs both ways,
/// signed zeros, infinities both sides, zero divisors and NaN.
pub fn remainders<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let inf = f64::INFINITY;
    let dividends = [
        5.5,
        -5.5,
        1e8,
        -1e8,
        123_456_789.0,
        1e30,
        0.0,
        -0.0,
        inf,
        -inf,
        f64::NAN,
        7.0,
        -7.0,
        3.75,
        1e-3,
    ];
    let divisors = [2.0, -2.0, 3.0, -3.0, 7.0, 3.3, inf, -inf, 0.0, 0.5];
    let shape = [dividends.len(), divisors.len()];
    for dtype in computed(b) {
        let (a, x) = (rounded(dtype, &dividends), rounded(dtype, &divisors));
        for op in [BinaryOp::Fmod, BinaryOp::Remainder, BinaryOp::FloorDivide] {
            let want = broadcast_ref(op, &a, &[a.len(), 1], &x, &[x.len()], &shape);
            let got = b.binary(
                op,
                &buf(dtype, &a),
                &[a.len(), 1],
                &buf(dtype, &x),
                &[x.len()],
                &shape,
            )?;
            expect(b, &format!("{op:?} at the edges"), &got, &want, dtype)?;
        }
    }
    Ok(())
}

/// Cumulative sums along each dim, a NaN and an infinity reaching only the sums from them on,
/// along lines longer than a GPU pass (whole numbers, so f32 sums are exact), an empty dim.
pub fn cumsums<B: Backend + 'static>(b: &Resident<B>) -> Result<()> {
    let scan_ref = |x: &[f64], shape: &[usize], dim: usize| -> Vec<f64> {
        let (len, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
        let mut out = x.to_vec();
        for line in 0..x.len() / len.max(1) {
            let base = line / inner * len * inner + line % inner;
            let mut s = 0.0;
            for j in 0..len {
                s += x[base + j * inner];
                out[base + j * inner] = s;
            }
        }
        out
    };
    for dtype in computed(b) {
        let shape = [4, 6, 5];
        let mut x = vals(120, 43, false);
        x[33] = f64::NAN;
        x[62] = f64::INFINITY;
        let x = rounded(dtype, &x);
        let xb = buf(dtype, &x);
        for dim in 0..3 {
            let got = b.cumsum(&xb, &shape, dim)?;
            expect(
                b,
                &format!("cumsum dim={dim}"),
                &got,
                &scan_ref(&x, &shape, dim),
                dtype,
            )?;
        }
        let long = 40_000;
        let x: Vec<f64> = (0..2 * long)
            .map(|i| ((i * 7919) % 7) as f64 - 3.0)
            .collect();
        let xb = buf(dtype, &x);
        for (shape, dim) in [([2, long], 1), ([long, 2], 0)] {
            let got = b.cumsum(&xb, &shape, dim)?;
            expect(
                b,
                "cumsum long lines",
                &got,
                &scan_ref(&x, &shape, dim),
                dtype,
            )?;
        }
        let got = b.cumsum(&buf(dtype, &[]), &[3, 0], 1)?;
        expect(b, "cumsum of an empty dim", &got, &[], dtype)?;
    }
    Ok(())
}

#[cfg(test)]
mod cpu {
    crate::conformance_tests!("cpu", Ok::<_, crate::Error>(crate::cpu::CpuBackend));
}
