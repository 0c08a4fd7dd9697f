//! Operators. Each family is one file holding shape inference, its 1-D SBP signatures and the
//! local kernel call; `dispatch` does the rest for every operator alike:
//!
//! 1. all inputs local: run the kernel on the local data;
//! 2. all global: check one placement (`PlacementMismatch`), infer the logical output shape,
//!    form the n-d candidates (one 1-D signature per placement axis, independently, as the 2D SBP
//!    seed says), pick the cheapest by the boxing planner's bytes (an exact match needs no
//!    boxing and wins at once; other ties go to the first declared), box the inputs, run the
//!    kernel on the local components, and wrap the output with the candidate's SBP.

mod attention;
mod binary;
mod bitwise;
mod gather;
mod index;
mod layout;
mod matmul;
mod norm;
mod product;
mod reduce;
mod sampling;
mod scan;
mod select;
mod shape_ops;
mod side;
mod softmax;
mod sort;
mod unary;

use crate::backend::Kernels;
use crate::boxing::{self, Dist};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::placement::{DeviceType, Placement};
use crate::reduce::ReduceOp;
use crate::sbp::{NdSbp, Sbp};
use crate::shape::region_shape;
use crate::storage::Buffer;
use crate::tensor::{Device, Tensor};

pub use binary::broadcast_shapes;
pub use reduce::Dims;

/// One valid 1-D combination of input and output SBPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// One SBP per input.
    pub inputs: Vec<Sbp>,
    /// The output's SBP.
    pub output: Sbp,
}

impl Signature {
    fn new(inputs: impl Into<Vec<Sbp>>, output: Sbp) -> Signature {
        Signature {
            inputs: inputs.into(),
            output,
        }
    }
}

/// The local computation of one operator call.
pub(crate) struct Kernel<'a> {
    /// Inputs' data.
    pub inputs: Vec<&'a Buffer>,
    /// Inputs' shapes (local).
    pub shapes: Vec<Vec<usize>>,
    /// The output's shape (local).
    pub out_shape: Vec<usize>,
    /// Inputs' logical shapes.
    pub global_shapes: Vec<Vec<usize>>,
    /// Where each input's local box starts in its logical tensor (zeros for local tensors).
    pub offsets: Vec<Vec<usize>>,

    /// The kernels of this rank's device.
    pub backend: &'a dyn Kernels,
}

/// What every operator declares.
pub(crate) trait Op {
    /// The name used in errors.
    fn name(&self) -> &'static str;
    /// The output's logical shape, or the error for bad input shapes.
    fn infer(&self, shapes: &[&[usize]]) -> Result<Vec<usize>>;
    /// Valid 1-D signatures for these logical shapes, most preferred first.
    fn signatures(&self, shapes: &[&[usize]], out: &[usize]) -> Vec<Signature>;
    /// Runs the local kernel.
    fn compute(&self, k: &Kernel<'_>) -> Result<Buffer>;
    /// Whether integer inputs are allowed (data movement ops) or only floats.
    fn any_dtype(&self) -> bool {
        false
    }
    /// Whether the op does arithmetic on its inputs' values (data movement, casts and
    /// selection do not, and run on every device in every dtype).
    fn arithmetic(&self) -> bool {
        true
    }
    /// [`Op::signatures`] on `placement` (for signatures that hold only for some part counts
    /// or split weights, as a reshape that keeps a split).
    fn signatures_on(
        &self,
        shapes: &[&[usize]],
        out: &[usize],
        _placement: Option<&Placement>,
    ) -> Vec<Signature> {
        self.signatures(shapes, out)
    }
    /// The output's dtype from the inputs' (by default: all inputs share one dtype, a float
    /// unless [`Op::any_dtype`]).
    fn out_dtype(&self, dtypes: &[DType]) -> Result<DType> {
        let dtype = common_dtype(dtypes)?;
        if !self.any_dtype() && dtype == DType::I64 {
            return Err(Error::DTypeMismatch {
                expected: DType::F32,
                got: dtype,
            });
        }
        Ok(dtype)
    }
}

/// All three partial reductions, for operators that commute with every one of them.
const PARTIALS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max];

/// Runs `op` on `inputs` (all local or all global).
pub(crate) fn dispatch(op: &dyn Op, inputs: &[&Tensor]) -> Result<Tensor> {
    crate::profile::scope(
        || format!("dispatch {}", op.name()),
        || dispatch_unprofiled(op, inputs),
    )
}

/// An op's kernel on one component, profiled as `kernel <op>`.
fn compute(op: &dyn Op, k: &Kernel) -> Result<Buffer> {
    crate::profile::scope(
        || format!("kernel {}", op.name()),
        || {
            let out = op.compute(k)?;
            if crate::profile::syncs() {
                k.backend.sync()?;
            }
            Ok(out)
        },
    )
}

fn dispatch_unprofiled(op: &dyn Op, inputs: &[&Tensor]) -> Result<Tensor> {
    let dtype = op.out_dtype(&inputs.iter().map(|t| t.dtype()).collect::<Vec<_>>())?;
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let out_shape = op.infer(&shapes)?;
    if inputs.iter().all(|t| t.is_local()) {
        let device = inputs.first().map_or(Device::Cpu, |t| t.device());
        if let Some(other) = inputs.iter().map(|t| t.device()).find(|d| *d != device) {
            return Err(Error::DeviceMismatch {
                op: op.name(),
                left: device.to_string(),
                right: other.to_string(),
            });
        }
        check_computes(op, inputs, std::iter::once(device.device_type()))?;
        let backend = device.kernels()?;
        let guards: Vec<_> = inputs.iter().map(|t| t.read()).collect();
        let data: Vec<&Buffer> = guards.iter().flatten().map(|g| &**g).collect();
        let k = Kernel {
            inputs: data,
            shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            out_shape: out_shape.clone(),
            global_shapes: shapes.iter().map(|s| s.to_vec()).collect(),
            offsets: shapes.iter().map(|s| vec![0; s.len()]).collect(),
            backend: &*backend,
        };
        let out = compute(op, &k)?;
        return Tensor::from_vec_data(out, &out_shape, device);
    }
    let Some(first) = inputs.iter().find_map(|t| t.dist()) else {
        return Err(Error::WrongKind {
            op: op.name(),
            needs: "global",
        });
    };
    let placement = &first.placement;
    for t in inputs {
        match t.dist() {
            None => {
                return Err(Error::WrongKind {
                    op: op.name(),
                    needs: "global (all inputs)",
                });
            }
            Some(d) if &d.placement != placement => {
                return Err(Error::PlacementMismatch {
                    op: op.name(),
                    left: placement.to_string(),
                    right: d.placement.to_string(),
                });
            }
            Some(_) => {}
        }
    }
    check_computes(
        op,
        inputs,
        placement
            .ranks()
            .iter()
            .map(|&r| crate::env::device_type_of(r, placement.device_type())),
    )?;
    let sigs = op.signatures_on(&shapes, &out_shape, Some(placement));
    let current: Vec<&NdSbp> = inputs.iter().filter_map(|t| t.sbp()).collect();
    let elem = inputs.iter().map(|t| t.dtype().size()).max().unwrap_or(4);
    let choice = choose(&sigs, &current, &shapes, elem, placement)?;
    // Box inputs whose SBP differs from the chosen candidate's.
    let boxed: Vec<Tensor> = inputs
        .iter()
        .zip(&choice.inputs)
        .map(|(t, want)| {
            if t.sbp() == Some(want) {
                Ok((*t).clone())
            } else {
                t.to_global(placement, want.clone())
            }
        })
        .collect::<Result<_>>()?;
    let out_dist = Dist::new(placement.clone(), choice.output);
    let rank = crate::env::current().rank();
    let component = match placement.index_of(rank) {
        None => None,
        Some(i) => {
            let backend = Device::for_placement(placement.device_type())?.kernels()?;
            let guards: Vec<_> = boxed.iter().map(|t| t.read()).collect();
            let data: Vec<&Buffer> = guards.iter().flatten().map(|g| &**g).collect();
            let coords = placement.coords_of_index(i);
            let out_region = out_dist.region_of_index(&out_shape, i);
            let regions: Vec<_> = boxed
                .iter()
                .map(|t| {
                    t.sbp()
                        .map_or_else(Vec::new, |s| s.local_region(t.shape(), &coords, placement))
                })
                .collect();
            let k = Kernel {
                inputs: data,
                shapes: regions.iter().map(|r| region_shape(r)).collect(),
                offsets: regions
                    .iter()
                    .map(|r| r.iter().map(|x| x.start).collect())
                    .collect(),
                out_shape: region_shape(&out_region),
                global_shapes: shapes.iter().map(|s| s.to_vec()).collect(),
                backend: &*backend,
            };
            Some(compute(op, &k)?)
        }
    };
    Tensor::from_component(component, &out_shape, dtype, out_dist)
}

/// Refuses arithmetic in a dtype that one of `devices` cannot compute, before any kernel runs
/// (for a global op `devices` are those of every rank of the placement, so every rank refuses
/// alike).
fn check_computes(
    op: &dyn Op,
    inputs: &[&Tensor],
    devices: impl Iterator<Item = DeviceType>,
) -> Result<()> {
    // The hot path: a dtype every device type computes needs no look at the ranks' devices.
    let all = [DeviceType::Cpu, DeviceType::Wgpu, DeviceType::Cuda];
    if !op.arithmetic()
        || inputs.iter().all(|t| {
            all.iter()
                .all(|&d| crate::backend::device_computes(d, t.dtype()))
        })
    {
        return Ok(());
    }
    for device in devices {
        if let Some(t) = inputs
            .iter()
            .find(|t| !crate::backend::device_computes(device, t.dtype()))
        {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: t.dtype(),
                device: device.to_string(),
            });
        }
    }
    Ok(())
}

/// The one dtype every input has (F32 for none), or `DTypeMismatch` naming the first that
/// differs.
fn common_dtype(dtypes: &[DType]) -> Result<DType> {
    let dtype = dtypes.first().copied().unwrap_or(DType::F32);
    match dtypes.iter().find(|&&d| d != dtype) {
        Some(&d) => Err(Error::DTypeMismatch {
            expected: dtype,
            got: d,
        }),
        None => Ok(dtype),
    }
}

/// The chosen n-d signature.
struct Choice {
    inputs: Vec<NdSbp>,
    output: NdSbp,
}

/// Picks one 1-D signature per placement axis: an exact match with the inputs' SBPs if there is
/// one (no boxing), else the candidate whose boxing moves the fewest bytes (ties: first declared).
fn choose(
    sigs: &[Signature],
    current: &[&NdSbp],
    shapes: &[&[usize]],
    elem: usize,
    placement: &crate::Placement,
) -> Result<Choice> {
    let k = placement.ndim();
    let n_in = current.len();
    let build = |pick: &[usize]| Choice {
        inputs: (0..n_in)
            .map(|i| NdSbp::from((0..k).map(|a| sigs[pick[a]].inputs[i]).collect::<Vec<_>>()))
            .collect(),
        output: NdSbp::from((0..k).map(|a| sigs[pick[a]].output).collect::<Vec<_>>()),
    };
    let exact: Option<Vec<usize>> = (0..k)
        .map(|a| {
            sigs.iter().position(|s| {
                s.inputs
                    .iter()
                    .zip(current)
                    .all(|(x, c)| c.as_slice()[a] == *x)
            })
        })
        .collect();
    if let Some(pick) = exact {
        return Ok(build(&pick));
    }
    let total = sigs
        .len()
        .checked_pow(k as u32)
        .unwrap_or(usize::MAX)
        .min(1 << 16);
    let mut best: Option<(u64, Vec<usize>)> = None;
    for mut c in 0..total {
        let pick: Vec<usize> = (0..k)
            .map(|_| {
                let p = c % sigs.len();
                c /= sigs.len();
                p
            })
            .rev()
            .collect();
        let cand = build(&pick);
        let mut cost = 0u64;
        for i in 0..n_in {
            let src = Dist::new(placement.clone(), current[i].clone());
            let dst = Dist::new(placement.clone(), cand.inputs[i].clone());
            cost += boxing::plan(shapes[i], elem, &src, &dst)?.cost_bytes;
            if best.as_ref().is_some_and(|b| cost >= b.0) {
                break;
            }
        }
        if best.as_ref().is_none_or(|b| cost < b.0) {
            best = Some((cost, pick));
        }
    }
    best.map(|(_, pick)| build(&pick))
        .ok_or(Error::InvalidArgument {
            op: "dispatch",
            reason: "the operator declares no signature for these inputs".into(),
        })
}

/// The dtype an operator computes in over `tensors`, as PyTorch's `result_type` (see
/// [`DType::result_type`]): 0-d tensors change it only by a higher category. Decided from the
/// logical shapes, so every rank of a placement agrees. F32 for no tensors.
pub(crate) fn result_type(tensors: &[&Tensor]) -> DType {
    let operands: Vec<(DType, usize)> = tensors.iter().map(|t| (t.dtype(), t.ndim())).collect();
    DType::result_type(&operands).unwrap_or(DType::F32)
}

/// Maps an error of an inner operator to name `op`, the operator the user called (an
/// `index_select` built from `gather_rows` reports `index_select`).
pub(crate) fn renamed(op: &'static str) -> impl Fn(Error) -> Error {
    move |e| match e {
        Error::ShapeMismatch { shapes, reason, .. } => Error::ShapeMismatch { op, shapes, reason },
        Error::DimOutOfRange { dim, ndim, .. } => Error::DimOutOfRange { op, dim, ndim },
        Error::InvalidArgument { reason, .. } => Error::InvalidArgument { op, reason },
        Error::IndexOutOfRange { index, size, .. } => Error::IndexOutOfRange { op, index, size },
        Error::PlacementMismatch { left, right, .. } => {
            Error::PlacementMismatch { op, left, right }
        }
        Error::DeviceMismatch { left, right, .. } => Error::DeviceMismatch { op, left, right },
        Error::UnsupportedDType { dtype, device, .. } => {
            Error::UnsupportedDType { op, dtype, device }
        }
        Error::WrongKind { needs, .. } => Error::WrongKind { op, needs },
        e => e,
    }
}

/// The signatures of an operator that works along whole lines of `dim` (softmax, sorting, a
/// scan) on `inputs` inputs of one shape of `ndim` dims: a split of any other dim stays, each
/// input split alike, and broadcast stays; a split of `dim` itself is gathered first.
fn line_signatures(ndim: usize, dim: usize, inputs: usize) -> Vec<Signature> {
    let mut v: Vec<Signature> = (0..ndim)
        .filter(|&d| d != dim)
        .map(|d| Signature::new(vec![Sbp::Split(d); inputs], Sbp::Split(d)))
        .collect();
    v.push(Signature::new(vec![Sbp::Broadcast; inputs], Sbp::Broadcast));
    v
}

/// Checks a dimension index.
fn check_dim(op: &'static str, dim: usize, ndim: usize) -> Result<()> {
    if dim < ndim {
        Ok(())
    } else {
        Err(Error::DimOutOfRange { op, dim, ndim })
    }
}

#[cfg(test)]
mod tests;
