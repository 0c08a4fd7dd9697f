//! Creation: `from_vec`, `zeros`, `ones`, `full`, `arange`, `randn`, each local (a [`Device`]) or
//! global (`(&Placement, sbp)`). A global tensor's components are computed where they live, from
//! global element indices, so no communication is needed.

use crate::boxing::Dist;
use crate::dtype::{DType, Element};
use crate::env;
use crate::error::{Error, Result};
use crate::placement::Placement;
use crate::rng;
use crate::sbp::NdSbp;
use crate::shape::{Region, checked_numel, full_region, numel, region_shape, strides};
use crate::storage::{Buffer, HostData};

use super::{Device, Tensor};

/// Where a new tensor goes: a local device, or a placement and SBP.
#[derive(Clone, Debug)]
pub enum Target {
    /// A local tensor on a device.
    Local(Device),
    /// A global tensor.
    Global(Placement, NdSbp),
}

/// Anything that names a [`Target`]: a [`Device`], or `(&Placement, sbp)` with any
/// `impl Into<NdSbp>`.
pub trait IntoTarget {
    /// The target.
    fn into_target(self) -> Target;
}

impl IntoTarget for Device {
    fn into_target(self) -> Target {
        Target::Local(self)
    }
}
impl IntoTarget for &Device {
    fn into_target(self) -> Target {
        Target::Local(*self)
    }
}
impl<S: Into<NdSbp>> IntoTarget for (&Placement, S) {
    fn into_target(self) -> Target {
        Target::Global(self.0.clone(), self.1.into())
    }
}
impl<S: Into<NdSbp>> IntoTarget for (Placement, S) {
    fn into_target(self) -> Target {
        Target::Global(self.0, self.1.into())
    }
}
impl IntoTarget for Target {
    fn into_target(self) -> Target {
        self
    }
}

/// For each contiguous run of `region` in a tensor of `shape`: (global flat index of its first
/// element, its position in the region's buffer, its length).
fn runs(
    shape: &[usize],
    region: &[std::ops::Range<usize>],
    mut f: impl FnMut(usize, usize, usize),
) {
    let ext = region_shape(region);
    if ext.contains(&0) {
        return;
    }
    if shape.is_empty() {
        f(0, 0, 1);
        return;
    }
    let st = strides(shape);
    let last = shape.len() - 1;
    let run = ext[last];
    let mut idx = vec![0usize; last];
    let mut pos = 0;
    loop {
        let g: usize = (0..last)
            .map(|d| (region[d].start + idx[d]) * st[d])
            .sum::<usize>()
            + region[last].start;
        f(g, pos, run);
        pos += run;
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < ext[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

impl Tensor {
    /// Builds a tensor of `shape` on `target` whose box `region` holds `fill(region)`.
    fn build(
        shape: &[usize],
        dtype: DType,
        target: Target,
        fill: impl Fn(&Region) -> HostData,
    ) -> Result<Tensor> {
        Tensor::build_buffers(shape, dtype, target, |r, _| Ok(fill(r).into()))
    }

    /// [`Tensor::build`] with `fill` making each component's buffer for a region on a device
    /// (so that a constant is written where it lives, not uploaded).
    fn build_buffers(
        shape: &[usize],
        dtype: DType,
        target: Target,
        fill: impl Fn(&Region, Device) -> Result<Buffer>,
    ) -> Result<Tensor> {
        checked_numel(shape)?;
        match target {
            Target::Local(device) => {
                Tensor::from_vec_data(fill(&full_region(shape), device)?, shape, device)
            }
            Target::Global(placement, nd_sbp) => {
                let env = env::current();
                placement.check_world(env.world_size())?;
                nd_sbp.check(&placement, shape.len())?;
                let device = Device::for_placement(placement.device_type())?;
                let dist = Dist::new(placement, nd_sbp);
                let data = dist
                    .placement
                    .index_of(env.rank())
                    .map(|i| {
                        let coords = dist.placement.coords_of_index(i);
                        let region = dist.region_of_index(shape, i);
                        match dist.identity_op(&coords) {
                            Some(op) => {
                                Ok(HostData::identity(dtype, numel(&region_shape(&region)), op)
                                    .into())
                            }
                            None => fill(&region, device),
                        }
                    })
                    .transpose()?;
                Ok(Tensor::global_from(data, shape.to_vec(), dtype, dist))
            }
        }
    }

    /// A tensor holding `data` (row-major) with `shape`. For a global target, `data` is the whole
    /// logical value (the same on every rank) and each rank keeps its part.
    ///
    /// # Errors
    /// `DataShapeMismatch` when `data.len()` differs from the element count; placement and SBP
    /// errors for a global target.
    pub fn from_vec<T: Element>(
        data: Vec<T>,
        shape: &[usize],
        target: impl IntoTarget,
    ) -> Result<Tensor> {
        if checked_numel(shape)? != data.len() {
            return Err(Error::DataShapeMismatch {
                len: data.len(),
                shape: shape.to_vec(),
            });
        }
        let target = target.into_target();
        if let Target::Local(device) = target {
            return Ok(Tensor::local_from(
                HostData::from_vec(data).into(),
                shape.to_vec(),
                device,
            ));
        }
        let all = HostData::from_vec(data);
        Tensor::build(shape, T::DTYPE, target, |region| {
            let bytes = crate::shape::extract(T::DTYPE.size(), all.as_bytes(), shape, region);
            HostData::from_bytes(T::DTYPE, &bytes)
        })
    }

    /// A local tensor around `data` (which holds `shape`'s element count).
    pub(crate) fn from_vec_data(data: Buffer, shape: &[usize], device: Device) -> Result<Tensor> {
        if data.len() != checked_numel(shape)? {
            return Err(Error::DataShapeMismatch {
                len: data.len(),
                shape: shape.to_vec(),
            });
        }
        if device != Device::Cpu {
            // A device that does not exist here is refused when a tensor is put on it.
            device.kernels()?;
        }
        Ok(Tensor::local_from(data, shape.to_vec(), device))
    }

    /// A tensor of `value` (f32).
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn full(shape: &[usize], value: impl Into<f64>, target: impl IntoTarget) -> Result<Tensor> {
        Tensor::full_dtype(shape, value.into(), DType::F32, target)
    }

    /// A tensor of `value` with element type `dtype`.
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn full_dtype(
        shape: &[usize],
        value: f64,
        dtype: DType,
        target: impl IntoTarget,
    ) -> Result<Tensor> {
        Tensor::build_buffers(shape, dtype, target.into_target(), |r, device| {
            let n = numel(&region_shape(r));
            match device {
                Device::Cpu => Ok(HostData::filled(dtype, n, value).into()),
                device => device.kernels()?.full(dtype, n, value),
            }
        })
    }

    /// A tensor of zeros (f32).
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn zeros(shape: &[usize], target: impl IntoTarget) -> Result<Tensor> {
        Tensor::full(shape, 0.0, target)
    }

    /// A tensor of ones (f32).
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn ones(shape: &[usize], target: impl IntoTarget) -> Result<Tensor> {
        Tensor::full(shape, 1.0, target)
    }

    /// The 1-D tensor `[0, 1, ..., n-1]` (f32).
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn arange(n: usize, target: impl IntoTarget) -> Result<Tensor> {
        Tensor::arange_dtype(n, DType::F32, target)
    }

    /// `[0, 1, ..., n-1]` with element type `dtype`.
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn arange_dtype(n: usize, dtype: DType, target: impl IntoTarget) -> Result<Tensor> {
        Tensor::build(&[n], dtype, target.into_target(), |r| match dtype {
            DType::I64 => HostData::I64(r[0].clone().map(|i| i as i64).collect()),
            _ => HostData::F64(r[0].clone().map(|i| i as f64).collect()).into_dtype(dtype),
        })
    }

    /// `steps` values from `start` to `end` inclusive, evenly spaced (PyTorch's `linspace`):
    /// the first half counted up from `start` and the rest down from `end` with fused
    /// multiply-adds, in f32 for f32 and 16-bit results and in f64 otherwise (integers then
    /// truncate), as PyTorch's CPU kernel computes them.
    ///
    /// ```
    /// use gflow_core::{DType, Device, Tensor};
    /// let t = Tensor::linspace(0.0, 1.0, 5, DType::F32, Device::Cpu)?;
    /// assert_eq!(t.to_vec::<f32>()?, [0.0, 0.25, 0.5, 0.75, 1.0]);
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        target: impl IntoTarget,
    ) -> Result<Tensor> {
        let last = steps.saturating_sub(1);
        // One step is `start` (PyTorch's special case), else the halves split as PyTorch's.
        let half = if steps == 1 { 1 } else { steps / 2 };
        Tensor::build(&[steps], dtype, target.into_target(), |r| {
            let r = r[0].clone();
            if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
                HostData::F32(ramp(start as f32, end as f32, r, (half, last))).into_dtype(dtype)
            } else {
                HostData::F64(ramp(start, end, r, (half, last))).into_dtype(dtype)
            }
        })
    }

    /// Integers drawn uniformly from `[low, high)` (I64; PyTorch's `randint`), placement-invariant
    /// like [`Tensor::randn`]: each value is one 32-bit draw of the random stream, scaled.
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let t = Tensor::randint(-3, 5, &[1000], Device::Cpu)?;
    /// assert!(t.to_vec::<i64>()?.iter().all(|v| (-3..5).contains(v)));
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` unless `low < high` with at most 2^32 values from one to the other;
    /// placement and SBP errors for a global target.
    pub fn randint(
        low: i64,
        high: i64,
        shape: &[usize],
        target: impl IntoTarget,
    ) -> Result<Tensor> {
        let range = i128::from(high) - i128::from(low);
        if range <= 0 || range > 1 << 32 {
            return Err(Error::InvalidArgument {
                op: "randint",
                reason: format!(
                    "needs low < high, at most 2^32 values apart; got low={low}, high={high}"
                ),
            });
        }
        let range = range as i64;
        let target = target.into_target();
        let (key, k) = stream_key(&target);
        Tensor::build(shape, DType::I64, target, |region| {
            let mut out = vec![0.0f64; numel(&region_shape(region))];
            runs(shape, region, |g, pos, len| {
                rng::uniform_f64(key, k, g as u64, &mut out[pos..pos + len]);
            });
            // A draw is below 1 - 2^-33, so the product stays below `range`; the min guards
            // the rounding all the same.
            HostData::I64(
                out.into_iter()
                    .map(|u| low + ((u * range as f64) as i64).min(range - 1))
                    .collect(),
            )
        })
    }

    /// A random permutation of `0..n` (I64), PyTorch's `randperm`: the order that sorts `n`
    /// uniform f64 draws, so a global one is placement-invariant like [`Tensor::randn`] (the
    /// same permutation on any placement and SBP for one seed).
    ///
    /// ```
    /// use gflow_core::{Device, Tensor};
    /// let mut p = Tensor::randperm(10, Device::Cpu)?.to_vec::<i64>()?;
    /// p.sort_unstable();
    /// assert_eq!(p, (0..10).collect::<Vec<i64>>());
    /// # Ok::<(), gflow_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn randperm(n: usize, target: impl IntoTarget) -> Result<Tensor> {
        let target = target.into_target();
        crate::autograd::no_grad(|| {
            let order = Tensor::rand_dtype(&[n], DType::F64, target.clone())?.argsort(0, false)?;
            match target {
                // argsort needs the dim whole: its result is brought to the layout asked for
                Target::Global(p, sbp) => order.to_global(&p, sbp),
                Target::Local(_) => Ok(order),
            }
        })
    }

    /// Standard normal values (f32).
    ///
    /// A global `randn` is placement-invariant: the k-th random tensor made after
    /// `manual_seed(s)` has values that depend only on `s`, `k`, the shape and the element index,
    /// never on the number of ranks, the placement or the SBP. A local `randn` also depends on
    /// the rank, so ranks draw different local tensors. Every rank must make the same sequence of
    /// random tensors (the SPMD rule).
    ///
    /// # Errors
    /// Placement and SBP errors for a global target.
    pub fn randn(shape: &[usize], target: impl IntoTarget) -> Result<Tensor> {
        Tensor::randn_dtype(shape, DType::F32, target)
    }

    /// Uniform values in [0, 1) (f32), placement-invariant like [`Tensor::randn`].
    ///
    /// # Errors
    /// As [`Tensor::randn`].
    pub fn rand(shape: &[usize], target: impl IntoTarget) -> Result<Tensor> {
        Tensor::random(shape, DType::F32, target.into_target(), rng::uniform_f64)
    }

    /// [`Tensor::rand`] with element type `dtype` (F32 or F64).
    ///
    /// # Errors
    /// As [`Tensor::randn`]; `InvalidArgument` for integer dtypes.
    pub fn rand_dtype(shape: &[usize], dtype: DType, target: impl IntoTarget) -> Result<Tensor> {
        Tensor::random(shape, dtype, target.into_target(), rng::uniform_f64)
    }

    /// [`Tensor::randn`] with element type `dtype` (F32 or F64).
    ///
    /// # Errors
    /// As [`Tensor::randn`]; `InvalidArgument` for integer dtypes.
    pub fn randn_dtype(shape: &[usize], dtype: DType, target: impl IntoTarget) -> Result<Tensor> {
        Tensor::random(shape, dtype, target.into_target(), rng::normal_f64)
    }

    /// The next random tensor of the stream, with values from `draw`.
    fn random(
        shape: &[usize],
        dtype: DType,
        target: Target,
        draw: fn(u64, u64, u64, &mut [f64]),
    ) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::InvalidArgument {
                op: "randn",
                reason: format!("random values need a floating-point dtype, got {dtype}"),
            });
        }
        let (key, k) = stream_key(&target);
        Tensor::build(shape, dtype, target, |region| {
            let mut out = vec![0.0f64; numel(&region_shape(region))];
            runs(shape, region, |g, pos, len| {
                draw(key, k, g as u64, &mut out[pos..pos + len])
            });
            match dtype {
                DType::F64 => HostData::F64(out),
                // Other floats round through f32, so an F16 randn is the F32 one rounded.
                _ => HostData::F32(out.into_iter().map(|x| x as f32).collect()).into_dtype(dtype),
            }
        })
    }
}

/// Elements `r` of `linspace(start, end, last + 1)` in `T`: below `half` counted up from
/// `start`, the rest down from `end`, each one fused multiply-add (PyTorch's CPU kernel).
fn ramp<T: num_traits::Float>(
    start: T,
    end: T,
    r: std::ops::Range<usize>,
    (half, last): (usize, usize),
) -> Vec<T> {
    let steps = |i: usize| T::from(i).unwrap_or_else(T::zero);
    let step = if last > 0 {
        (end - start) / steps(last)
    } else {
        T::zero()
    };
    r.map(|i| {
        if i < half {
            step.mul_add(steps(i), start)
        } else {
            (-step).mul_add(steps(last - i), end)
        }
    })
    .collect()
}

/// The key and index of the next random tensor of this rank's stream: a global tensor's key is
/// the seed (placement-invariant), a local tensor's also depends on the rank.
fn stream_key(target: &Target) -> (u64, u64) {
    let env = env::current();
    let (seed, k) = env.next_random();
    let key = match target {
        Target::Local(_) => seed ^ (env.rank() as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        Target::Global(..) => seed,
    };
    (key, k)
}
