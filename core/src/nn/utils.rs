//! Training utilities: gradient clipping.

use crate::autograd::partial_to_broadcast;
use crate::boxing::Dist;
use crate::error::{Error, Result};
use crate::placement::{Placement, Ranks};
use crate::sbp::{NdSbp, Sbp};
use crate::tensor::Tensor;

/// PyTorch's `clip_grad_norm_`: the global 2-norm of every parameter's gradient (over all
/// parameters, whatever their SBP: each gradient's squared sum is reduced over its placement,
/// so every rank gets the same norm, also a rank outside some gradient's placement), and,
/// when `max_norm / (norm + 1e-6)` is below 1 (or NaN: a NaN norm makes every gradient NaN, as
/// PyTorch's), every gradient scaled by it in place. Parameters without a gradient are
/// skipped; one listed twice counts once. Returns the norm before clipping.
///
/// ```
/// use gflow_core::{DType, Device, Tensor, nn, nn::Module};
/// let w = Tensor::from_vec(vec![1.0f64, 2.0], &[2], Device::Cpu)?.set_requires_grad(true);
/// w.mul(&w)?.sum(Vec::new(), false)?.backward()?; // grad = 2w = (2, 4)
/// let norm = nn::utils::clip_grad_norm(&[w.clone()], 1.0)?;
/// assert!((norm - 20f64.sqrt()).abs() < 1e-12);
/// let g = w.grad().unwrap().to_vec::<f64>()?;
/// assert!(((g[0] * g[0] + g[1] * g[1]).sqrt() - 1.0).abs() < 1e-5);
/// # Ok::<(), gflow_core::Error>(())
/// ```
///
/// # Errors
/// `InvalidArgument` for a negative or non-finite `max_norm`; communication failures.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<f64> {
    if !(max_norm >= 0.0 && max_norm.is_finite()) {
        return Err(Error::InvalidArgument {
            op: "clip_grad_norm",
            reason: format!("max_norm must be a finite non-negative number, got {max_norm}"),
        });
    }
    // a parameter listed twice (tied weights) counts once, and is scaled once
    let params = super::distinct(params.iter().cloned());
    let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
    // Each gradient's squared sum over its local component, grouped by layout: a group whose
    // layout has split axes sums its ranks' parts with one all-reduce (not one per gradient),
    // and a fully broadcast one needs none. Partial gradients are reduced first.
    let mut groups: Vec<(Option<Dist>, Vec<f64>)> = vec![];
    // Sums computed on a device, read back together once all are queued (a read per gradient
    // would wait for the device each time): (group, index in it, the sum as a device scalar).
    let mut queued: Vec<(usize, usize, Tensor)> = vec![];
    for g in &grads {
        let g = match g.dist() {
            Some(d) if d.nd_sbp.has_partial() => {
                g.to_global(&d.placement, partial_to_broadcast(&d.nd_sbp))?
            }
            _ => g.clone(),
        };
        let sum = local_squared_sum(&g)?;
        let key = g
            .dist()
            .map(|d| Dist::new(d.placement.clone(), summands(&d.nd_sbp)));
        let group = match groups.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                groups.push((key, vec![]));
                groups.len() - 1
            }
        };
        let sums = &mut groups[group].1;
        match sum {
            Squares::Known(v) => sums.push(v),
            Squares::OnDevice(t) => {
                queued.push((group, sums.len(), t));
                sums.push(0.0);
            }
        }
    }
    // One concatenation and one read per device holding sums (a rank may hold parameters on
    // more than one), in one dtype: f32 unless every sum is f64.
    while let Some(device) = queued.first().map(|(_, _, t)| t.device()) {
        let (here, rest): (Vec<_>, Vec<_>) = queued
            .into_iter()
            .partition(|(_, _, t)| t.device() == device);
        queued = rest;
        let dtype = if here.iter().all(|(_, _, t)| t.dtype() == crate::DType::F64) {
            crate::DType::F64
        } else {
            crate::DType::F32
        };
        let values = crate::no_grad(|| {
            let scalars: Vec<Tensor> = here
                .iter()
                .map(|(_, _, t)| t.to_dtype(dtype))
                .collect::<Result<_>>()?;
            Tensor::cat(&scalars, 0)?.to_dtype(crate::DType::F64)
        })?
        .to_vec::<f64>()?;
        for ((group, at, _), v) in here.iter().zip(values) {
            groups[*group].1[*at] = v;
        }
    }
    // Each group's total, on every rank of its placement; ranks outside a placement learn its
    // total from one more all-reduce over the world (from the placement's first rank), so
    // that every rank scales by the same factor.
    let env = crate::env::current();
    let (mut total, mut elsewhere) = (0.0f64, 0.0f64);
    let mut partial = false;
    for (key, sums) in groups {
        let Some(d) = key else {
            total += sums.iter().sum::<f64>();
            continue;
        };
        let p = Placement::new(
            "cpu",
            Ranks::nd(d.placement.hierarchy(), d.placement.ranks())?,
        )?;
        let sum = if d.nd_sbp.has_partial() {
            let n = sums.len();
            let local = Tensor::from_vec(sums, &[n], crate::Device::Cpu)?;
            let whole = local
                .to_global(&p, d.nd_sbp.clone())?
                .to_global(&p, partial_to_broadcast(&d.nd_sbp))?;
            match whole.to_vec::<f64>() {
                Ok(v) => v.iter().sum::<f64>(),
                Err(Error::NotInPlacement { .. }) => 0.0,
                Err(e) => return Err(e),
            }
        } else {
            sums.iter().sum::<f64>()
        };
        if p.size() == env.world_size() {
            total += sum;
        } else {
            partial = true;
            if p.ranks().first() == Some(&env.rank()) {
                elsewhere += sum;
            }
        }
    }
    if partial {
        let world = Placement::new(
            "cpu",
            Ranks::flat((0..env.world_size()).collect::<Vec<_>>())?,
        )?;
        total += Tensor::from_vec(vec![elsewhere], &[1], crate::Device::Cpu)?
            .to_global(&world, Sbp::partial_sum())?
            .to_global(&world, Sbp::broadcast())?
            .to_vec::<f64>()?[0];
    }
    // Each gradient is replaced by its scaled copy one at a time: holding them all here too
    // would keep a second copy of every gradient alive (a model's size, at the step's peak).
    drop(grads);
    let norm = total.sqrt();
    let coef = max_norm / (norm + 1e-6);
    // as PyTorch's clamp(coef, max=1): a NaN norm makes every gradient NaN
    if coef < 1.0 || coef.is_nan() {
        for p in &params {
            if let Some(g) = p.grad() {
                p.set_grad(Some(crate::no_grad(|| g.mul_scalar(coef))?));
            }
        }
    }
    Ok(norm)
}

/// The layout of a gradient's local squared sums: a split axis's parts are summands, a
/// broadcast axis's copies are equal.
fn summands(sbp: &NdSbp) -> NdSbp {
    NdSbp::from(
        sbp.as_slice()
            .iter()
            .map(|s| match s {
                Sbp::Split(_) => Sbp::partial_sum(),
                other => *other,
            })
            .collect::<Vec<_>>(),
    )
}

/// A gradient's local squared sum: known, or a one-element tensor on the device that
/// computed it (read later, with the others).
enum Squares {
    Known(f64),
    OnDevice(Tensor),
}

/// The sum of the squares of this rank's part of `g` (a local tensor, or a global one without
/// partial axes): read in place in f64 where it lives on the host; on a device, by one
/// `sum_squares` kernel in f32 (as PyTorch's norm of an f32 gradient; f64 for an f64 gradient
/// where the device computes f64), with no cast of an f32 gradient;
/// 0 on a rank outside its placement.
fn local_squared_sum(g: &Tensor) -> Result<Squares> {
    let local = match g.to_local() {
        Ok(t) => t,
        Err(Error::NotInPlacement { .. }) => return Ok(Squares::Known(0.0)),
        Err(e) => return Err(e),
    };
    let on_host = local.read().and_then(|data| {
        if data.resident_on().is_some() {
            return None;
        }
        crate::cpu::float_squared_sum(data.host().ok()?)
    });
    if let Some(sum) = on_host {
        return Ok(Squares::Known(sum));
    }
    let f64_here = local.device().kernels()?.computes(crate::DType::F64);
    let wide = if local.dtype() == crate::DType::F64 && f64_here {
        crate::DType::F64
    } else {
        crate::DType::F32
    };
    let sq = crate::no_grad(|| local.to_dtype(wide)?.sum_squares())?;
    Ok(Squares::OnDevice(sq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Placement, simulate};

    /// Gradients of every layout on a 2 x 2 placement (split on either axis, broadcast,
    /// partial, a 1-D sub-placement that some ranks are outside of) give every rank of the
    /// placement the norm of the whole values, and are scaled to `max_norm`.
    #[test]
    fn the_norm_is_the_whole_values_whatever_their_layout() -> Result<()> {
        let values = |seed: usize, n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| ((i * 7 + seed * 3) % 11) as f64 - 5.0)
                .collect()
        };
        let layouts = |p2: &Placement, p1: &Placement| -> Vec<(Placement, NdSbp)> {
            vec![
                (p2.clone(), [Sbp::split(0), Sbp::broadcast()].into()),
                (p2.clone(), [Sbp::broadcast(), Sbp::split(1)].into()),
                (p2.clone(), [Sbp::split(1), Sbp::split(0)].into()),
                (p2.clone(), [Sbp::broadcast(), Sbp::broadcast()].into()),
                (p2.clone(), [Sbp::partial_sum(), Sbp::split(0)].into()),
                (p1.clone(), [Sbp::split(0)].into()),
            ]
        };
        let want: f64 = (0..6)
            .map(|i| values(i, 24).iter().map(|x| x * x).sum::<f64>())
            .sum::<f64>()
            .sqrt();
        let got = simulate(4, |env| {
            let p2 = Placement::new("cpu", [[0, 1], [2, 3]])?;
            let p1 = Placement::new("cpu", [1, 2])?;
            let mut params = vec![];
            for (i, (p, sbp)) in layouts(&p2, &p1).into_iter().enumerate() {
                let whole = Tensor::from_vec(values(i, 24), &[4, 6], Device::Cpu)?;
                let b = NdSbp::broadcast(p.ndim());
                let param = Tensor::zeros(&[4, 6], Device::Cpu)?
                    .to_global(&p, b.clone())?
                    .to_global(&p, sbp.clone())?;
                let g = whole.to_global(&p, b)?.to_global(&p, sbp)?;
                param.set_grad(Some(g));
                params.push(param);
            }
            let norm = clip_grad_norm(&params, 1.0)?;
            // the clipped gradients' norm, recomputed from whole values
            let mut after = 0.0;
            for p in &params {
                let d = p.dist().cloned().ok_or(Error::Internal("local".into()))?;
                let g = p.grad().ok_or(Error::Internal("no grad".into()))?;
                let b = NdSbp::broadcast(d.placement.ndim());
                if let Ok(v) = g.to_global(&d.placement, b)?.to_vec_cast::<f64>() {
                    after += v.iter().map(|x| x * x).sum::<f64>();
                }
            }
            Ok((env.rank(), norm, after.sqrt()))
        })?;
        for (rank, norm, after) in got {
            // every rank, also outside the last gradient's placement (0 and 3), has the norm
            assert!(
                (norm - want).abs() < 1e-9 * want,
                "rank {rank}: {norm} != {want}"
            );
            if rank == 1 || rank == 2 {
                // inside every placement: the clipped gradients have norm 1
                assert!((after - 1.0).abs() < 1e-5, "rank {rank}: {after}");
            }
        }
        Ok(())
    }
}
