//! The operations GPU kernels switch on, and their numbers written into kernel sources.

use crate::dtype::DType;

/// Declares an enum of operations GPU kernels switch on: its number in kernels is its position
/// ([`UnaryOp::code`]), and [`kernel_constants`] writes every variant's number under a name
/// (`UNARY_GELU_ERF`, `REDUCE_MIN`) into the WGSL and CUDA sources, so kernels name cases and
/// the Rust enums stay their only definition.
macro_rules! kernel_ops {
    ($(#[$doc:meta])* pub enum $name:ident ($prefix:literal) {
        $($(#[$vdoc:meta])* $variant:ident,)*
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every operation, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The prefix of the operations' names in kernel sources.
            const PREFIX: &'static str = $prefix;

            /// The operation's number in GPU kernels (its position in the enum).
            pub fn code(self) -> u32 {
                self as u32
            }
        }
    };
}

kernel_ops! {
    /// Elementwise functions of one tensor.
    pub enum UnaryOp ("UNARY") {
        /// `-x`.
        Neg,
        /// `e^x`.
        Exp,
        /// Natural logarithm.
        Log,
        /// Square root.
        Sqrt,
        /// `x * x`.
        Square,
        /// `max(x, 0)`.
        Relu,
        /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
        Gelu,
        /// `1 / (1 + e^-x)`.
        Sigmoid,
        /// Hyperbolic tangent.
        Tanh,
        /// `1` where `x > 0`, else `0` (the derivative of relu; masks).
        Step,
        /// The derivative of [`UnaryOp::Gelu`].
        GeluGrad,
        /// `|x|`.
        Abs,
        /// `1 / sqrt(x)`.
        Rsqrt,
        /// Sine.
        Sin,
        /// Cosine.
        Cos,
        /// SiLU (swish): `x * sigmoid(x)`.
        Silu,
        /// The error function.
        Erf,
        /// GELU, exact (erf) form: PyTorch's default.
        GeluErf,
        /// `-1`, `0` or `1` (the derivative of abs; `0` at `0`).
        Sign,
        /// The derivative of [`UnaryOp::Silu`].
        SiluGrad,
        /// The derivative of [`UnaryOp::GeluErf`].
        GeluErfGrad,
        /// The largest integer not above `x`.
        Floor,
        /// The smallest integer not below `x`.
        Ceil,
        /// The nearest integer, ties to even (PyTorch's `round`).
        Round,
        /// `x` without its fraction (toward zero).
        Trunc,
        /// `ln(1 + x)`, exact for small `x`.
        Log1p,
        /// `e^x - 1`, exact for small `x`.
        Expm1,
    }
}

kernel_ops! {
    /// Elementwise functions of two tensors (with NumPy broadcasting).
    pub enum BinaryOp ("BINARY") {
        /// `a + b`.
        Add,
        /// `a - b`.
        Sub,
        /// `a * b`.
        Mul,
        /// `a / b`.
        Div,
        /// `max(a, b)` (NaN if either is).
        Maximum,
        /// `min(a, b)` (NaN if either is).
        Minimum,
        /// `a - trunc(a / b) * b` computed exactly (C's `fmod`): the dividend's sign.
        Fmod,
        /// `a - floor(a / b) * b` computed exactly (Python's `%`, PyTorch's `remainder`): the
        /// divisor's sign.
        Remainder,
        /// `floor(a / b)` from the exact remainder (Python's `//`, PyTorch's `floor_divide`).
        FloorDivide,
    }
}

kernel_ops! {
    /// Elementwise comparisons (with NumPy broadcasting); the result is Bool.
    pub enum CmpOp ("CMP") {
        /// `a == b`.
        Eq,
        /// `a != b`.
        Ne,
        /// `a < b`.
        Lt,
        /// `a <= b`.
        Le,
        /// `a > b`.
        Gt,
        /// `a >= b`.
        Ge,
    }
}

kernel_ops! {
    /// Reductions over dimensions.
    pub enum ReduceKind ("REDUCE") {
        /// Sum.
        Sum,
        /// Maximum.
        Max,
        /// Minimum.
        Min,
    }
}

/// The unary kernels' code of the affine map `a * x + b` (`scale`, `add_scalar`): the first
/// code past every [`UnaryOp`]; kernels know it as `UNARY_AFFINE`.
pub const AFFINE_CODE: u32 = UnaryOp::ALL.len() as u32;

/// The language of a kernel source that [`kernel_constants`] writes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLang {
    /// WGSL: `const UNARY_EXP: u32 = 1u;`.
    Wgsl,
    /// CUDA C++ (also the CPU emulation): `#define UNARY_EXP 1`.
    Cuda,
}

/// Every kernel operation's number under its name (`UNARY_GELU_ERF`, `BINARY_MAXIMUM`,
/// `CMP_LT`, `REDUCE_MIN`), as declarations of `lang`: the prelude of every GPU kernel source.
///
/// ```
/// use gflow_core::backend::{kernel_constants, KernelLang, ReduceKind};
/// let wgsl = kernel_constants(KernelLang::Wgsl);
/// assert!(wgsl.contains(&format!("const REDUCE_MIN: u32 = {}u;", ReduceKind::Min.code())));
/// assert!(kernel_constants(KernelLang::Cuda).contains("#define UNARY_GELU_ERF_GRAD "));
/// ```
pub fn kernel_constants(lang: KernelLang) -> String {
    fn write<T: Copy + std::fmt::Debug>(
        out: &mut String,
        lang: KernelLang,
        prefix: &str,
        all: &[T],
        code: impl Fn(T) -> u32,
    ) {
        for &op in all {
            let name = format!("{prefix}_{}", upper_snake(&format!("{op:?}")));
            let line = match lang {
                KernelLang::Wgsl => format!("const {name}: u32 = {}u;\n", code(op)),
                KernelLang::Cuda => format!("#define {name} {}\n", code(op)),
            };
            out.push_str(&line);
        }
    }
    let mut out = match lang {
        KernelLang::Wgsl => format!("const UNARY_AFFINE: u32 = {AFFINE_CODE}u;\n"),
        KernelLang::Cuda => format!("#define UNARY_AFFINE {AFFINE_CODE}\n"),
    };
    write(&mut out, lang, UnaryOp::PREFIX, UnaryOp::ALL, UnaryOp::code);
    write(
        &mut out,
        lang,
        BinaryOp::PREFIX,
        BinaryOp::ALL,
        BinaryOp::code,
    );
    write(&mut out, lang, CmpOp::PREFIX, CmpOp::ALL, CmpOp::code);
    write(
        &mut out,
        lang,
        ReduceKind::PREFIX,
        ReduceKind::ALL,
        ReduceKind::code,
    );
    // dtypes by their wire code (DTYPE_F32, DTYPE_BF16), for the casts
    for d in DType::ALL {
        let name = format!("DTYPE_{}", d.to_string().to_uppercase());
        out.push_str(&match lang {
            KernelLang::Wgsl => format!("const {name}: u32 = {}u;\n", d.code()),
            KernelLang::Cuda => format!("#define {name} {}\n", d.code()),
        });
    }
    out
}

/// `GeluErfGrad` as `GELU_ERF_GRAD`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}
