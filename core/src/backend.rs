//! The `Backend` seam: device memory and the kernels operators need, on contiguous row-major
//! data. Core validates every shape, dtype and dimension before calling a backend (backends do
//! not validate); a backend reports only what nobody could foresee (out of memory, a lost
//! device, a kernel that fails to compile). The CPU backend (`crate::cpu`) is the reference; the
//! wgpu and CUDA backends implement the same trait, and one conformance suite runs on all.
//!
//! Architecture Invariant: every kernel is declared once, in the list of
//! [`kernel_table!`](crate::kernel_table); the [`Backend`] methods, the object-safe [`Kernels`]
//! face, [`Resident`]'s device-resident implementation, the host implementation and the GPU
//! backends' `impl Backend` entries are generated from it. Adding a kernel is one entry there
//! plus one implementation per backend (a function in its operator family's file).

mod attention_layout;
mod codes;
mod registry;
mod resident;

pub use attention_layout::{AttentionLayout, AttentionRows};
pub use codes::{AFFINE_CODE, BinaryOp, CmpOp, KernelLang, ReduceKind, UnaryOp, kernel_constants};
pub use registry::{
    BackendRegistration, device_computes, device_list, kernels, kernels_at, required, say_skipped,
};
pub use resident::Resident;

use crate::cpu::{
    CpuBackend, attention, attention_grad, attention_packed, attention_packed_grad, norm_affine,
    norm_grads, norm_param_grad, select, sum_squares, unary_mul,
};
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::StridedCopy;
use crate::storage::{Buffer, HostData};

/// Bitwise operators of integer and Bool tensors (computed on the host: devices hold integers
/// but compute in floats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitwiseOp {
    /// `a & b`.
    And,
    /// `a | b`.
    Or,
    /// `a ^ b`.
    Xor,
}

/// One Adam or AdamW step's constants, as core's host update uses them (derived in f64, each
/// rounded once to the parameter's dtype): for every element, with `g` the gradient,
/// `p *= shrink` when `decoupled` (AdamW) else `g += weight_decay * p`; then
/// `m = beta1 * m + c1 * g`, `v = beta2 * v + c2 * g * g`,
/// `p -= lr * (m * k1) / (sqrt(v * k2) + eps)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// The learning rate.
    pub lr: f64,
    /// The first moment's decay.
    pub beta1: f64,
    /// The second moment's decay.
    pub beta2: f64,
    /// `1 - beta1`.
    pub c1: f64,
    /// `1 - beta2`.
    pub c2: f64,
    /// `1 / (1 - beta1^step)`.
    pub k1: f64,
    /// `1 / (1 - beta2^step)`.
    pub k2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// The weight decay (added to the gradient, or shrinking `p` when `decoupled`).
    pub weight_decay: f64,
    /// `1 - lr * weight_decay`.
    pub shrink: f64,
    /// AdamW's decoupled weight decay.
    pub decoupled: bool,
}

impl AdamStep {
    /// The ten constants in the order the GPU kernels take them: `lr`, `beta1`, `beta2`,
    /// `c1`, `c2`, `k1`, `k2`, `eps`, `weight_decay`, `shrink`.
    pub fn constants(&self) -> [f64; 10] {
        [
            self.lr,
            self.beta1,
            self.beta2,
            self.c1,
            self.c2,
            self.k1,
            self.k2,
            self.eps,
            self.weight_decay,
            self.shrink,
        ]
    }
}

/// Shapes of a (batched) matrix product: `batch` products of (m, k) x (k, n); `b` is shared by
/// all batches when `b_batched` is false. A transposed operand is stored as its transpose
/// ((k, m) for `a`, (n, k) for `b`) and read with swapped strides, so no copy is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulDims {
    /// Number of products.
    pub batch: usize,
    /// Rows of `a` and of the output.
    pub m: usize,
    /// Columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of `b` and of the output.
    pub n: usize,
    /// Whether `b` has one matrix per batch.
    pub b_batched: bool,
    /// Whether `a` is stored transposed, (k, m) per batch.
    pub a_trans: bool,
    /// Whether `b` is stored transposed, (n, k) per batch.
    pub b_trans: bool,
}

/// Shapes of a fused attention: `heads` (batch x heads) independent problems of `seq_q`
/// queries against `seq_k` keys, `head_dim` wide for q and k, `v_dim` wide for v and the output;
/// scores scaled by `scale`, and query `i` sees keys `0..=i` when `causal`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDims {
    /// Independent (batch, head) problems.
    pub heads: usize,
    /// Queries per head.
    pub seq_q: usize,
    /// Keys (and values) per head.
    pub seq_k: usize,
    /// Width of q and k.
    pub head_dim: usize,
    /// Width of v and of the output.
    pub v_dim: usize,
    /// The scores' factor (`1 / sqrt(head_dim)` by default).
    pub scale: f64,
    /// Whether query `i` sees only keys `0..=i`.
    pub causal: bool,
}

/// A kernel parameter's type on one face, by its kind in [`kernel_table!`]: `storage` (a
/// [`Backend`]'s buffers) or `buffer` ([`Kernels`]' [`Buffer`]s).
#[doc(hidden)]
#[macro_export]
macro_rules! __kernel_arg {
    (storage, val<$t:ty>) => {
        $t
    };
    (storage, holds) => {
        &[&Self::Storage]
    };
    (storage, stored) => {
        $crate::DType
    };
    (storage, hold3) => {
        [&Self::Storage; 3]
    };
    (storage, $kind:ident) => {
        &Self::Storage
    };
    (buffer, val<$t:ty>) => {
        $t
    };
    (buffer, holds) => {
        &[&$crate::storage::Buffer]
    };
    (buffer, stored) => {
        $crate::DType
    };
    (buffer, hold3) => {
        [&$crate::storage::Buffer; 3]
    };
    (buffer, $kind:ident) => {
        &$crate::storage::Buffer
    };
}

/// One [`Backend`] method of the table: required, or provided when the entry has a body.
macro_rules! backend_method {
    ([$(#[$doc:meta])*] $name:ident [$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*]) => {
        $(#[$doc])*
        fn $name(
            &$s $(, $p: $crate::__kernel_arg!(storage, $kind $(<$t>)?))*
        ) -> Result<Self::Storage>;
    };
    (
        [$(#[$doc:meta])*] $name:ident [$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*]
        $body:block
    ) => {
        $(#[$doc])*
        fn $name(
            &$s $(, $p: $crate::__kernel_arg!(storage, $kind $(<$t>)?))*
        ) -> Result<Self::Storage>
        $body
    };
    (
        [$(#[$doc:meta])*] $name:ident [$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*]
        host $host:block
    ) => {
        $(#[$doc])*
        ///
        /// Provided on the host (download, the CPU kernel, upload) for a backend without it.
        fn $name(
            &$s $(, $p: $crate::__kernel_arg!(storage, $kind $(<$t>)?))*
        ) -> Result<Self::Storage> {
            $(downloaded!($s, $kind, $p);)*
            let out: Result<HostData> = $host;
            $s.upload(&out?)
        }
    };
}

/// A host-bodied kernel's default: rebinds a tensor argument to its download.
macro_rules! downloaded {
    ($s:ident, val, $p:ident) => {};
    ($s:ident, stored, $p:ident) => {};
    ($s:ident, holds, $p:ident) => {
        let held = $p
            .iter()
            .map(|x| $s.download(x))
            .collect::<Result<Vec<_>>>()?;
        let held: Vec<&HostData> = held.iter().collect();
        let $p = &held[..];
    };
    ($s:ident, hold3, $p:ident) => {
        let held = [
            $s.download($p[0])?,
            $s.download($p[1])?,
            $s.download($p[2])?,
        ];
        let $p = [&held[0], &held[1], &held[2]];
    };
    ($s:ident, $kind:ident, $p:ident) => {
        let $p = &$s.download($p)?;
    };
}

/// The host face of one kernel: its host body on host data when it has one (the CPU computes
/// it with no copy), else the backend's method.
macro_rules! host_kernel {
    ($s:ident $name:ident [$($p:ident)*] host $host:block) => {{
        let out: Result<HostData> = $host;
        out.map(Buffer::from)
    }};
    ($s:ident $name:ident [$($p:ident)*]) => {
        Backend::$name($s $(, $p)*).map(Buffer::from)
    };
}

/// Whether [`Resident`] runs a kernel on its device for this argument (else on the host).
macro_rules! on_device {
    ($s:ident, val, $p:ident) => {
        true
    };
    ($s:ident, compute, $p:ident) => {
        $s.computes_all(&[$p])
    };
    ($s:ident, convert, $p:ident) => {
        $s.converts($p)
    };
    ($s:ident, hold, $p:ident) => {
        $s.holds(&[$p])
    };
    ($s:ident, holds, $p:ident) => {
        $s.holds($p)
    };
    ($s:ident, hold3, $p:ident) => {
        $s.holds(&$p)
    };
    ($s:ident, stored, $p:ident) => {
        $s.backend().stores($p)
    };
}

/// [`Resident`]: rebinds a 16-bit float `compute` argument that the device holds but computes
/// only through f32 to its f32 cast on the device, noting its dtype in `$narrow` (the result
/// is cast back: PyTorch's "opmath", computed in f32 and rounded once).
macro_rules! widened {
    ($s:ident, compute, $p:ident, $narrow:ident) => {
        let wide;
        let $p = if $s.widens($p) {
            $narrow = Some($p.dtype());
            wide = Kernels::cast($s, $p, DType::F32)?;
            &wide
        } else {
            $p
        };
    };
    ($s:ident, $kind:ident, $p:ident, $narrow:ident) => {};
}

/// [`Resident`]: rebinds a tensor argument to its storage on the device (uploaded if needed).
macro_rules! device_arg {
    ($s:ident, val, $p:ident) => {};
    ($s:ident, stored, $p:ident) => {};
    ($s:ident, holds, $p:ident) => {
        let held = $p.iter().map(|x| $s.input(x)).collect::<Result<Vec<_>>>()?;
        let $p = held
            .iter()
            .map(Resident::<B>::storage)
            .collect::<Result<Vec<_>>>()?;
        let $p = &$p[..];
    };
    ($s:ident, hold3, $p:ident) => {
        let held = [$s.input($p[0])?, $s.input($p[1])?, $s.input($p[2])?];
        let $p = [
            Resident::<B>::storage(&held[0])?,
            Resident::<B>::storage(&held[1])?,
            Resident::<B>::storage(&held[2])?,
        ];
    };
    ($s:ident, $kind:ident, $p:ident) => {
        let held = $s.input($p)?;
        let $p = Resident::<B>::storage(&held)?;
    };
}

/// The host face: rebinds a tensor argument to its host data.
macro_rules! host_arg {
    (val, $p:ident) => {};
    (stored, $p:ident) => {};
    (holds, $p:ident) => {
        let $p = $p.iter().map(|x| x.host()).collect::<Result<Vec<_>>>()?;
        let $p = &$p[..];
    };
    (hold3, $p:ident) => {
        let $p = [$p[0].host()?, $p[1].host()?, $p[2].host()?];
    };
    ($kind:ident, $p:ident) => {
        let $p = $p.host()?;
    };
}

/// Core's expansion of [`kernel_table!`]: each entry (optionally with a default body over
/// [`Backend::copy_boxes`]) becomes a [`Backend`] method, a [`Kernels`] method, its
/// [`Resident`] implementation (on the device when it holds and computes the arguments' dtypes,
/// else on the host) and its host implementation (for backends whose storage is
/// [`HostData`]). `host { ... }` holds the [`Kernels`] methods with a host default only.
macro_rules! kernel_list {
    (
        $(
            $(#[$doc:meta])*
            fn $name:ident(&$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*)
                $(host $host_body:block)? $($body:block)?;
        )*
        host { $($host:tt)* }
    ) => {
        /// A device's memory and kernels. Inputs are contiguous and row-major; shapes are
        /// already valid.
        pub trait Backend: Send + Sync {
            /// The backend's buffer type.
            type Storage: Send + Sync;

            /// A short name (`cpu`, `wgpu`, `cuda`).
            fn name(&self) -> &'static str;
            /// Whether the kernels compute in `dtype` (every backend stores and moves every
            /// dtype; a GPU may lack arithmetic in some, e.g. f64 in WGSL). Others give
            /// `Error::Device`.
            fn computes(&self, _dtype: DType) -> bool {
                true
            }
            /// Whether the device holds buffers of `dtype` (every dtype by default, as host
            /// memory does); kernels on other dtypes run on the host copy.
            fn stores(&self, _dtype: DType) -> bool {
                true
            }
            /// Whether [`Backend::cast`] takes `from` to every dtype the device stores (by
            /// default where it computes in `from`). [`Resident`] computes a 16-bit float the
            /// device stores and casts but does not compute in f32 on the device (cast up, the
            /// f32 kernel, cast back: PyTorch's opmath).
            fn casts(&self, from: DType) -> bool {
                self.computes(from)
            }
            /// Copies host data to the device.
            fn upload(&self, data: &HostData) -> Result<Self::Storage>;
            /// Copies device data to the host.
            fn download(&self, s: &Self::Storage) -> Result<HostData>;
            /// The element type of a buffer.
            fn dtype(&self, s: &Self::Storage) -> DType;
            /// The number of elements of a buffer.
            fn len(&self, s: &Self::Storage) -> usize;
            /// Waits until the device has finished the work submitted so far (the profiler's
            /// `GFLOW_PROFILE=sync` times each kernel so); the host's work is always done.
            fn sync(&self) -> Result<()> {
                Ok(())
            }
            /// `len` zeros of `dtype` (all bits zero): by default made on the host and uploaded;
            /// a device that can write them where they live (a memset) does so.
            fn zeros(&self, dtype: DType, len: usize) -> Result<Self::Storage> {
                self.upload(&HostData::filled(dtype, len, 0.0))
            }
            /// One [`AdamStep`] in place on the parameter `p`, its gradient `g` and moments
            /// `m`, `v` (one float dtype, one length): one kernel where a chain of a dozen
            /// would each write a new buffer. `false` where the backend has no such kernel
            /// for these buffers (the caller then composes the step).
            fn adam_step(
                &self,
                _p: &mut Self::Storage,
                _g: &Self::Storage,
                _moments: [&mut Self::Storage; 2],
                _h: &AdamStep,
            ) -> Result<bool> {
                Ok(false)
            }
            /// A new buffer of `len` elements of `dtype` written by strided copies, which
            /// together write every element: each moves the box of its [`StridedCopy`] out of
            /// its input into the contiguous output (`put` false: permute's and slice's
            /// gathers), or its contiguous input into that box of the output (`put` true:
            /// cat's pieces). The one data-movement kernel: permute, slice and cat are made of
            /// it unless a backend has its own.
            fn copy_boxes(
                &self,
                dtype: DType,
                len: usize,
                put: bool,
                copies: &[(&Self::Storage, StridedCopy)],
            ) -> Result<Self::Storage>;

            $(backend_method!(
                [$(#[$doc])*] $name [$s $(, $p: $kind $(<$t>)?)*] $(host $host_body)? $($body)?
            );)*
        }

        /// A backend's kernels on [`Buffer`]s, object-safe: what operators call. The CPU
        /// backend computes on host data; a device backend is wrapped in [`Resident`], which
        /// keeps inputs and results on the device so that a chain of operators never leaves it.
        pub trait Kernels: Send + Sync {
            /// The backend's short name.
            fn name(&self) -> &'static str;
            /// See [`Backend::computes`].
            fn computes(&self, dtype: DType) -> bool;
            /// See [`Backend::sync`].
            fn sync(&self) -> Result<()>;
            /// `len` elements of `dtype`, each `value` (converted as [`HostData::filled`]
            /// does), on this device: [`Backend::zeros`] where the value's bits are all zero,
            /// else uploaded; a host buffer for a dtype the device does not hold.
            fn full(&self, dtype: DType, len: usize, value: f64) -> Result<Buffer>;
            /// See [`Backend::adam_step`]: in place where `p`, `m` and `v` live on this device
            /// and no other buffer shares their memory, else `false` (nothing written). The
            /// host's update is core's own (`false` on the CPU).
            fn adam_step(
                &self,
                p: &mut Buffer,
                g: &Buffer,
                moments: [&mut Buffer; 2],
                h: &AdamStep,
            ) -> Result<bool>;
            $(
                $(#[$doc])*
                fn $name(
                    &$s $(, $p: $crate::__kernel_arg!(buffer, $kind $(<$t>)?))*
                ) -> Result<Buffer>;
            )*

            // Kernels below run on the host copy unless a backend has them natively (the CPU's
            // implementation in `cpu::select` is the reference for every backend).
            $($host)*
        }

        impl<B: Backend + 'static> Kernels for Resident<B> {
            fn name(&self) -> &'static str {
                self.backend().name()
            }
            fn computes(&self, dtype: DType) -> bool {
                self.backend().computes(dtype)
            }
            fn sync(&self) -> Result<()> {
                self.backend().sync()
            }
            fn adam_step(
                &self,
                p: &mut Buffer,
                g: &Buffer,
                moments: [&mut Buffer; 2],
                h: &AdamStep,
            ) -> Result<bool> {
                self.adam_in_place(p, g, moments, h)
            }
            fn full(&self, dtype: DType, len: usize, value: f64) -> Result<Buffer> {
                if !self.backend().stores(dtype) {
                    return Ok(HostData::filled(dtype, len, value).into());
                }
                let one = HostData::filled(dtype, 1, value);
                let out = if one.as_bytes().iter().all(|&b| b == 0) {
                    self.backend().zeros(dtype, len)?
                } else {
                    self.backend().upload(&HostData::filled(dtype, len, value))?
                };
                Ok(self.keep(out))
            }
            $(
                fn $name(
                    &$s $(, $p: $crate::__kernel_arg!(buffer, $kind $(<$t>)?))*
                ) -> Result<Buffer> {
                    #[allow(unused_mut)]
                    let mut narrow: Option<DType> = None;
                    $(widened!($s, $kind, $p, narrow);)*
                    let out = if [$(on_device!($s, $kind, $p)),*].contains(&false) {
                        Kernels::$name(&CpuBackend $(, $p)*)?
                    } else {
                        $(device_arg!($s, $kind, $p);)*
                        $s.keep(Backend::$name($s.backend() $(, $p)*)?)
                    };
                    match narrow {
                        Some(half) if out.dtype() == DType::F32 => Kernels::cast($s, &out, half),
                        _ => Ok(out),
                    }
                }
            )*
        }

        /// A backend whose storage *is* host data (the CPU backend) computes on buffers' host
        /// copies.
        impl<B: Backend<Storage = HostData>> Kernels for B {
            fn name(&self) -> &'static str {
                Backend::name(self)
            }
            fn computes(&self, dtype: DType) -> bool {
                Backend::computes(self, dtype)
            }
            fn sync(&self) -> Result<()> {
                Backend::sync(self)
            }
            fn full(&self, dtype: DType, len: usize, value: f64) -> Result<Buffer> {
                Ok(HostData::filled(dtype, len, value).into())
            }
            fn adam_step(
                &self,
                _p: &mut Buffer,
                _g: &Buffer,
                _moments: [&mut Buffer; 2],
                _h: &AdamStep,
            ) -> Result<bool> {
                Ok(false)
            }
            $(
                fn $name(
                    &$s $(, $p: $crate::__kernel_arg!(buffer, $kind $(<$t>)?))*
                ) -> Result<Buffer> {
                    $(host_arg!($kind, $p);)*
                    host_kernel!($s $name [$($p)*] $(host $host_body)?)
                }
            )*
        }
    };
}

/// The kernel list: every kernel, declared once, as `fn name(&self, param: kind, ...);` with
/// the kinds `val<T>` (a plain value), `compute` (a tensor the kernel computes on: the device
/// must hold and compute in its dtype, or hold and cast a 16-bit float it then computes in
/// f32, else [`Resident`] runs the kernel on the host), `convert` (cast's input: the device
/// must hold it and [`Backend::casts`] from its dtype), `hold`
/// (a tensor only moved or indexed with: the device must hold its dtype), `holds` (a list of
/// those), `hold3` (an array of three) and `stored` (a [`DType`] of the result: the device
/// must hold it). An entry with `host { ... }` (its body computing on
/// the host data of its arguments) has that as its CPU implementation and as [`Backend`]'s
/// default (download, compute, upload), so core needs no CPU backend method for it. Every kernel returns one new tensor. `kernel_table!(forward ops)` inside a
/// backend's `impl Backend` block writes each kernel method as a call of the function of the
/// same name in the backend's module `ops` (`ops::unary(self, op, x)`), so a GPU backend's
/// kernel is one function in its operator family's file. Entries with a body (permute, slice,
/// cat) are provided by [`Backend`] over [`Backend::copy_boxes`] and are not forwarded. Core
/// itself expands it once into [`Backend`], [`Kernels`], [`Resident`]'s implementation and the
/// host implementation.
#[macro_export]
macro_rules! kernel_table {
    ($($mode:tt)*) => {
        $crate::__kernels! { [$($mode)*]
            /// `op(x)` elementwise.
            fn unary(&self, op: val<$crate::backend::UnaryOp>, x: compute);
            /// `op(a, b)` with `a` of shape `a_shape`, `b` of `b_shape`, broadcast to `out_shape`
            /// (the inputs' shapes are right-aligned with it).
            fn binary(
                &self,
                op: val<$crate::backend::BinaryOp>,
                a: compute,
                a_shape: val<&[usize]>,
                b: compute,
                b_shape: val<&[usize]>,
                out_shape: val<&[usize]>
            );
            /// `x * s` elementwise.
            fn scale(&self, x: compute, s: val<f64>);
            /// `x + s` elementwise.
            fn add_scalar(&self, x: compute, s: val<f64>);
            /// Rows of `table` (shape `(rows, row_len)`) picked by the integer `indices`: the
            /// output holds `indices.len()` rows. Core refuses an index outside `0..rows`
            /// before any kernel runs (`IndexOutOfRange`, from the host copy it reads); given
            /// one anyway, the CPU's kernel errs and a GPU's reads nothing for it (no download
            /// to check, which would wait for the device).
            fn gather_rows(
                &self,
                table: hold,
                rows: val<usize>,
                row_len: val<usize>,
                indices: hold
            );
            /// The transpose of `gather_rows`: a `(rows, row_len)` table of zeros to which row `i`
            /// of `src` is added at row `indices[i]` (indices as `gather_rows`'s).
            fn scatter_add_rows(
                &self,
                src: compute,
                rows: val<usize>,
                row_len: val<usize>,
                indices: hold
            );
            /// Rows of a `(rows, row_len)` table holding global rows `start..start + rows`,
            /// picked by the global (integer) `idx`: indices outside that range give zero rows
            /// (a table split over its rows).
            fn gather_rows_partial(
                &self,
                table: hold,
                rows: val<usize>,
                row_len: val<usize>,
                idx: hold,
                start: val<usize>
            ) host {
                select::gather_rows_partial(table, rows, row_len, idx, start)
            };
            /// `torch.gather(x, dim, idx)` (indices checked by core; those outside
            /// `0..x_shape[dim]` give zero, for a piece of a split `x`).
            fn gather_dim(
                &self,
                x: hold,
                x_shape: val<&[usize]>,
                dim: val<usize>,
                idx: hold,
                idx_shape: val<&[usize]>
            ) host {
                select::gather_dim(x, x_shape, dim, idx, idx_shape)
            };
            /// Reduces `dims` (sorted, distinct) of `x` with `op`, keeping them as size-1
            /// dimensions.
            fn reduce(
                &self,
                op: val<$crate::backend::ReduceKind>,
                x: compute,
                shape: val<&[usize]>,
                dims: val<&[usize]>
            );
            /// `g * op(x)` elementwise in one pass, for `op` a derivative (`GeluGrad`,
            /// `GeluErfGrad`, `SiluGrad`): an activation's input gradient without storing the
            /// derivative first.
            fn unary_mul(&self, op: val<$crate::backend::UnaryOp>, x: compute, g: compute) host {
                unary_mul(op, x, g)
            };
            /// The sum of the squares of all of `x`'s elements: one element of `x`'s dtype (the
            /// host adds in f64; a GPU in the dtype, per thread, per block, then the blocks'),
            /// a gradient's squared norm in one kernel where a square and a sum took two and a
            /// buffer of `x`'s size.
            fn sum_squares(&self, x: compute) host {
                Ok(sum_squares(x))
            };
            /// (Log-)softmax over `dim`.
            fn softmax(&self, x: compute, shape: val<&[usize]>, dim: val<usize>, log: val<bool>);
            /// Rows of `cols` elements normalised: `(x - mean) / sqrt(var + eps)` when `center`
            /// (LayerNorm), `x / sqrt(mean(x^2) + eps)` otherwise (RMSNorm), then `* weight` and
            /// `+ bias` per column where `affine` says they are given (`params` holds those
            /// given, the weight first; `cols` elements each, `x`'s dtype).
            fn norm(
                &self,
                x: compute,
                params: holds,
                cols: val<usize>,
                eps: val<f64>,
                center: val<bool>,
                affine: val<[bool; 2]>
            ) host {
                norm_affine(x, params, affine, cols, eps, center)
            };
            /// The input's gradient of [`Kernels::norm`] for the output gradient `g` (`weight`:
            /// the norm's weight, or empty).
            fn norm_input_grad(
                &self,
                x: compute,
                g: compute,
                weight: holds,
                cols: val<usize>,
                eps: val<f64>,
                center: val<bool>
            ) host {
                let mut both = norm_grads(x, g, weight.first().copied(), cols, eps, center)?;
                both.split_off(x.len());
                Ok(both)
            };
            /// The weight's and the bias's gradients of [`Kernels::norm`] (`2 * cols` values:
            /// column sums of `g * y`, `y` the normalised rows, then of `g`).
            fn norm_param_grad(
                &self,
                x: compute,
                g: compute,
                cols: val<usize>,
                eps: val<f64>,
                center: val<bool>
            ) host {
                norm_param_grad(x, g, cols, eps, center)
            };
            /// `softmax(scale * q kᵀ [causal]) v` for (heads, seq, dim) `q`, `k`, `v` (one
            /// float dtype): one fused pass per block of queries, the scores never stored
            /// whole. With `save` (for [`Kernels::attention_grad`]), the output is followed in
            /// the buffer by each query row's log-sum-exp (heads, seq_q).
            fn attention(
                &self,
                q: compute,
                k: compute,
                v: compute,
                dims: val<$crate::backend::AttentionDims>,
                save: val<bool>
            ) host {
                attention(q, k, v, &dims, save)
            };
            /// The gradients of [`Kernels::attention`] for the output gradient `g`, given the
            /// output `out` and the log-sum-exp `lse` it returned with `save`, one after another
            /// in one buffer: `dq` (heads, seq_q, head_dim), `dk` (heads, seq_k, head_dim), `dv`
            /// (heads, seq_k, v_dim).
            #[allow(clippy::too_many_arguments)]
            fn attention_grad(
                &self,
                q: compute,
                k: compute,
                v: compute,
                g: compute,
                out: compute,
                lse: compute,
                dims: val<$crate::backend::AttentionDims>
            ) host {
                attention_grad([q, k, v], g, [out, lse], &dims)
            };
            /// [`Kernels::attention`] of one packed (batch, seq, heads, 3, head_dim) `qkv`
            /// holding each head's q, k and v side by side (`dims.heads` = batch x `heads`): a
            /// (batch, seq, heads, head_dim) output, with no transposes in or out; with `save`,
            /// followed in the buffer by each query row's log-sum-exp (batch, seq, heads).
            fn attention_packed(
                &self,
                qkv: compute,
                dims: val<$crate::backend::AttentionDims>,
                heads: val<usize>,
                save: val<bool>
            ) host {
                attention_packed(qkv, &dims, heads, save)
            };
            /// The gradient of [`Kernels::attention_packed`] for the output gradient `g`, given
            /// the output `out` and the log-sum-exp `lse` it returned with `save`, in `qkv`'s
            /// layout.
            fn attention_packed_grad(
                &self,
                qkv: compute,
                g: compute,
                out: compute,
                lse: compute,
                dims: val<$crate::backend::AttentionDims>,
                heads: val<usize>
            ) host {
                attention_packed_grad(qkv, g, [out, lse], &dims, heads)
            };
            /// Batched matrix product.
            fn matmul(&self, a: compute, b: compute, dims: val<$crate::backend::MatmulDims>);
            /// `x` cast to `dtype` (PyTorch's casts: float to integer truncates toward zero,
            /// to Bool is `x != 0`, to 16-bit rounds to nearest even).
            fn cast(&self, x: convert, dtype: stored) host {
                Ok(select::cast(x, dtype))
            };
            /// `op(a, b)` (a [`CmpOp`]) with `a` and `b` (same dtype) broadcast to `out_shape`,
            /// as Bool.
            fn compare(
                &self,
                op: val<$crate::backend::CmpOp>,
                a: compute,
                a_shape: val<&[usize]>,
                b: compute,
                b_shape: val<&[usize]>,
                out_shape: val<&[usize]>
            ) host {
                select::compare(op, a, a_shape, b, b_shape, out_shape)
            };
            /// `cond ? a : b` (`torch.where`) with `xs = [cond, a, b]` (cond Bool, `a` and `b`
            /// of one dtype) of `shapes` broadcast to `out_shape`.
            fn select(
                &self,
                xs: hold3,
                shapes: val<[&[usize]; 3]>,
                out_shape: val<&[usize]>
            ) host {
                select::select(xs, shapes, out_shape)
            };
            /// The lower (upper) triangle over the last two dims of `x` (of `shape`) from
            /// diagonal `k`, the buffer's first element sitting at global (row, column) `origin`
            /// (a piece of a split matrix): elements outside it are zero.
            fn triangle(
                &self,
                x: hold,
                shape: val<&[usize]>,
                k: val<i64>,
                upper: val<bool>,
                origin: val<(usize, usize)>
            ) host {
                Ok(select::triangle(x, shape, k, upper, origin))
            };
            /// The (I64) index of the largest (`max`) or smallest element of `x` along `dim`:
            /// the first NaN wins, else the lowest index among equals (PyTorch's).
            fn arg_reduce(&self, x: compute, shape: val<&[usize]>, dim: val<usize>, max: val<bool>)
            host {
                Ok(select::arg_reduce(x, shape, dim, max))
            };
            /// The (I64) positions that sort each line of `x` along `dim`, ascending or
            /// `descending`: stable, NaN above every number (PyTorch's `sort(stable=True)`).
            fn argsort(
                &self,
                x: compute,
                shape: val<&[usize]>,
                dim: val<usize>,
                descending: val<bool>
            ) host {
                Ok(select::argsort(x, shape, dim, descending))
            };
            /// Inclusive cumulative sums of `x` along `dim` (PyTorch's `cumsum`), in `x`'s dtype.
            fn cumsum(&self, x: compute, shape: val<&[usize]>, dim: val<usize>) host {
                Ok(select::cumsum(x, shape, dim))
            };
            /// `x` of `shape` with its dimensions permuted (`out.shape[i] = shape[perm[i]]`).
            fn permute(&self, x: hold, shape: val<&[usize]>, perm: val<&[usize]>) {
                let copy = $crate::shape::StridedCopy::permute(shape, perm);
                self.copy_boxes(self.dtype(x), self.len(x), false, &[(x, copy)])
            };
            /// The sub-box of `x` starting at `start` with extent `extent`.
            fn slice(
                &self,
                x: hold,
                shape: val<&[usize]>,
                start: val<&[usize]>,
                extent: val<&[usize]>
            ) {
                let copy = $crate::shape::StridedCopy::slice(shape, start, extent);
                self.copy_boxes(self.dtype(x), extent.iter().product(), false, &[(x, copy)])
            };
            /// Concatenates `xs` (with shapes `shapes`) along `dim`.
            fn cat(&self, xs: holds, shapes: val<&[&[usize]]>, dim: val<usize>) {
                let first = xs
                    .first()
                    .ok_or_else(|| $crate::Error::Internal("cat of no tensors".into()))?;
                let (out_shape, copies) = $crate::shape::StridedCopy::cat(shapes, dim);
                let copies: Vec<_> = xs.iter().copied().zip(copies).collect();
                self.copy_boxes(self.dtype(first), out_shape.iter().product(), true, &copies)
            };
        }
    };
}

/// [`kernel_table!`]'s modes.
#[doc(hidden)]
#[macro_export]
macro_rules! __kernels {
    ([faces { $($host:tt)* }] $($table:tt)*) => {
        kernel_list! { $($table)* host { $($host)* } }
    };
    ([forward $ops:ident] $(
        $(#[$doc:meta])*
        fn $name:ident(&$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*)
            $(host $host:block)? $($body:block)?;
    )*) => {
        $($crate::__forward_kernel!([$ops] $name [$s $(, $p: $kind $(<$t>)?)*] $($body)?);)*
    };
}

/// One forwarded kernel method (none for a kernel [`Backend`] provides).
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_kernel {
    ([$ops:ident] $name:ident [$s:ident $(, $p:ident: $kind:ident $(<$t:ty>)?)*]) => {
        fn $name(
            &$s $(, $p: $crate::__kernel_arg!(storage, $kind $(<$t>)?))*
        ) -> $crate::Result<Self::Storage> {
            $ops::$name($s $(, $p)*)
        }
    };
    ([$ops:ident] $name:ident [$($signature:tt)*] $body:block) => {};
}

kernel_table!(faces {
    /// The gradients of [`Kernels::norm`] for the output gradient `g` and the weight, from one
    /// pass over `x` and `g`: the input's, then [`Kernels::norm_param_grad`]'s `2 * cols`
    /// values, in one buffer.
    fn norm_grads(
        &self,
        x: &Buffer,
        g: &Buffer,
        weight: Option<&Buffer>,
        cols: usize,
        eps: f64,
        center: bool,
    ) -> Result<Buffer> {
        let w = weight.map(Buffer::host).transpose()?;
        crate::cpu::norm_grads(x.host()?, g.host()?, w, cols, eps, center).map(Buffer::from)
    }
    /// The gradient of [`Kernels::softmax`] over `dim` from its output `y` and the output
    /// gradient `g` (log-softmax's when `log`).
    fn softmax_grad(
        &self,
        y: &Buffer,
        g: &Buffer,
        shape: &[usize],
        dim: usize,
        log: bool,
    ) -> Result<Buffer> {
        crate::cpu::softmax_grad(y.host()?, g.host()?, shape, dim, log).map(Buffer::from)
    }
    /// [`Kernels::matmul`] plus `bias` (`dims.n` elements) added to every output row as the
    /// product is stored: a linear layer's `x Wᵀ + b`, its output written once.
    fn linear(&self, a: &Buffer, b: &Buffer, bias: &Buffer, dims: MatmulDims) -> Result<Buffer> {
        crate::cpu::linear(a.host()?, b.host()?, bias.host()?, dims).map(Buffer::from)
    }
    /// `a op b` bitwise for integer or Bool buffers of one dtype, shapes broadcasting to
    /// `out_shape`.
    fn bitwise(
        &self,
        op: BitwiseOp,
        a: &Buffer,
        a_shape: &[usize],
        b: &Buffer,
        b_shape: &[usize],
        out_shape: &[usize],
    ) -> Result<Buffer> {
        select::bitwise(op, a.host()?, a_shape, b.host()?, b_shape, out_shape).map(Buffer::from)
    }
    /// `x^e` elementwise.
    fn pow_scalar(&self, x: &Buffer, e: f64) -> Result<Buffer> {
        Ok(select::pow_scalar(x.host()?, e).into())
    }
    /// `x` clamped to `[lo, hi]`.
    fn clamp(&self, x: &Buffer, lo: Option<f64>, hi: Option<f64>) -> Result<Buffer> {
        Ok(select::clamp(x.host()?, lo, hi).into())
    }
    /// `zeros(out_shape).scatter_add_(dim, idx, src)`; indices checked by core.
    fn scatter_add_dim(
        &self,
        src: &Buffer,
        out_shape: &[usize],
        dim: usize,
        idx: &Buffer,
        idx_shape: &[usize],
    ) -> Result<Buffer> {
        select::scatter_add_dim(src.host()?, out_shape, dim, idx.host()?, idx_shape)
            .map(Buffer::from)
    }
});
