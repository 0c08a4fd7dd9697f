//! Optimizers: `Sgd` (momentum, dampening, Nesterov, weight decay), `Adam`, `AdamW`,
//! [`RmsProp`] and [`Adagrad`], as PyTorch's. A step updates every
//! parameter in place (all handles see it) from its gradient, elementwise on this rank's
//! component: a gradient has its parameter's placement and SBP, so the update needs no
//! communication at all; the only communication of a training step is the boxing the
//! parameters' SBPs require in forward and backward. On a GPU the update runs with the
//! device's kernels, and parameters and optimizer state stay in device memory.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::backend::{AdamStep, BinaryOp, Kernels, UnaryOp};
use crate::cpu::Float;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;
use crate::sbp::{NdSbp, Sbp};
use crate::state_dict::StateDict;
use crate::storage::{Buffer, HostData};
use crate::tensor::{Device, Tensor};

mod adagrad;
mod rmsprop;

pub use adagrad::Adagrad;
pub use rmsprop::RmsProp;

/// What every optimizer does.
pub trait Optimizer {
    /// Updates every parameter that has a gradient.
    ///
    /// # Errors
    /// `DTypeMismatch` for a gradient of another dtype, `InvalidArgument` for a layout the
    /// optimizer cannot update elementwise or for a hyper-parameter PyTorch refuses too (a
    /// learning rate, momentum, epsilon or weight decay that is negative or not finite, a beta
    /// outside [0, 1)), naming it, before any parameter changes; boxing errors of a gradient in
    /// another layout.
    fn step(&mut self) -> Result<()>;
    /// Clears every parameter's gradient (PyTorch's `set_to_none`).
    fn zero_grad(&mut self);
    /// The learning rate.
    fn lr(&self) -> f64;
    /// Changes the learning rate (for schedules).
    fn set_lr(&mut self, lr: f64);

    /// Handles to the optimizer's state, named as PyTorch's (`state.{i}.step`, an I64 tensor
    /// of shape `[1]` broadcast over parameter i's placement, and the buffers in parameter i's
    /// layout: `state.{i}.momentum_buffer` for SGD with momentum, `state.{i}.exp_avg` and
    /// `state.{i}.exp_avg_sq` for Adam). State not made by a step yet is made as zeros, so a
    /// load (which fills these tensors in place) restores it.
    ///
    /// # Errors
    /// Errors of tensor creation.
    fn state_tensors(&self) -> Result<Vec<(String, Tensor)>>;

    /// The state as a [`StateDict`] of handles (see [`Optimizer::state_tensors`]).
    ///
    /// # Errors
    /// As [`Optimizer::state_tensors`].
    fn state_dict(&self) -> Result<StateDict> {
        let mut sd = StateDict::new();
        sd.insert_optimizer("", self);
        sd.check()?;
        Ok(sd)
    }

    /// Fills the state in place from the tensors of the same names in `sd` (any layout).
    ///
    /// # Errors
    /// `Checkpoint` for a missing name or another shape or dtype; conversion errors.
    fn load_state_dict(&mut self, sd: &StateDict) -> Result<()> {
        for (name, t) in self.state_tensors()? {
            crate::state_dict::copy_from(sd, &name, &t)?;
        }
        Ok(())
    }
}

/// One parameter's optimizer state: a step count and named buffers shaped like the parameter,
/// made as zeros on first use in the parameter's layout at that time. Handles stay valid: when
/// the parameter has changed layout since (`Module::to_global` after the optimizer was
/// built), the state is converted in place.
#[derive(Debug)]
struct ParamState {
    step: OnceLock<Tensor>,
    buffers: Vec<(&'static str, OnceLock<Tensor>)>,
}

impl ParamState {
    fn new(names: &[&'static str]) -> ParamState {
        ParamState {
            step: OnceLock::new(),
            buffers: names.iter().map(|&n| (n, OnceLock::new())).collect(),
        }
    }

    /// The step tensor and the buffers, in `p`'s layout.
    fn tensors(&self, p: &Tensor) -> Result<(Tensor, Vec<Tensor>)> {
        let step_sbp = p.dist().map(|d| NdSbp::broadcast(d.placement.ndim()));
        let step = cell(&self.step, p, &[1], DType::I64, step_sbp.clone())?;
        let fresh = read_step(&step)?.unwrap_or(0) == 0;
        follow(&step, p, &[1], DType::I64, step_sbp, true)?;
        let mut bufs = vec![];
        for (_, c) in &self.buffers {
            let sbp = p.sbp().cloned();
            let b = cell(c, p, p.shape(), p.dtype(), sbp.clone())?;
            follow(&b, p, p.shape(), p.dtype(), sbp, fresh)?;
            bufs.push(b);
        }
        Ok((step, bufs))
    }

    /// The named state of parameter `i`.
    fn named(&self, i: usize, p: &Tensor, out: &mut Vec<(String, Tensor)>) -> Result<()> {
        let (step, bufs) = self.tensors(p)?;
        out.push((format!("state.{i}.step"), step));
        for ((name, _), b) in self.buffers.iter().zip(bufs) {
            out.push((format!("state.{i}.{name}"), b));
        }
        Ok(())
    }
}

/// Zeros of `shape` and `dtype` on `p`'s device, or on `p`'s placement with `sbp`.
fn zeros_like(p: &Tensor, shape: &[usize], dtype: DType, sbp: Option<NdSbp>) -> Result<Tensor> {
    match (p.dist(), sbp) {
        (Some(d), Some(sbp)) => Tensor::full_dtype(shape, 0.0, dtype, (&d.placement, sbp)),
        _ => Tensor::full_dtype(shape, 0.0, dtype, p.device()),
    }
}

/// The tensor in `c`, made as zeros like `p` if empty.
fn cell(
    c: &OnceLock<Tensor>,
    p: &Tensor,
    shape: &[usize],
    dtype: DType,
    sbp: Option<NdSbp>,
) -> Result<Tensor> {
    if let Some(t) = c.get() {
        return Ok(t.clone());
    }
    let t = zeros_like(p, shape, dtype, sbp)?;
    Ok(c.get_or_init(|| t).clone())
}

/// Brings state tensor `t` to `p`'s layout in place when `p` has changed layout: converted as
/// the parameter was (global to global by boxing, local to global by [`Tensor::to_global`] of
/// the local state, whose rules gave the parameter its values, global to local as this rank's
/// component, local to another device by a copy), or remade as zeros when no step has run
/// (`fresh`).
fn follow(
    t: &Tensor,
    p: &Tensor,
    shape: &[usize],
    dtype: DType,
    sbp: Option<NdSbp>,
    fresh: bool,
) -> Result<()> {
    let same = t.shape() == shape
        && match (t.dist(), p.dist(), &sbp) {
            (None, None, _) => t.device() == p.device(),
            (Some(a), Some(b), Some(s)) => a.placement == b.placement && &a.nd_sbp == s,
            _ => false,
        };
    if same {
        return Ok(());
    }
    let converted = match (t.dist(), p.dist(), sbp.clone()) {
        (Some(_), Some(d), Some(s)) if t.shape() == shape => {
            Some(crate::autograd::no_grad(|| t.to_global(&d.placement, s))?)
        }
        (None, Some(d), Some(s)) => {
            Some(crate::autograd::no_grad(|| t.to_global(&d.placement, s))?)
        }
        (Some(_), None, _) => Some(t.to_local()?),
        (None, None, _) => Some(t.to_device(p.device())?),
        _ => None,
    };
    let new = match converted {
        Some(c) if c.shape() == shape => c.detach(),
        _ if fresh => zeros_like(p, shape, dtype, sbp)?,
        _ => {
            return Err(Error::InvalidArgument {
                op: "optimizer state",
                reason: format!(
                    "a parameter changed from {} {:?} to {} {shape:?} after steps were \
                     taken, and its state converted the same way does not fit it",
                    if t.is_global() { "global" } else { "local" },
                    t.shape(),
                    if p.is_global() { "global" } else { "local" },
                ),
            });
        }
    };
    t.become_tensor(&new)
}

/// This rank's step count (`None` off the placement).
fn read_step(step: &Tensor) -> Result<Option<i64>> {
    Ok(step
        .with_component(|h| match h {
            HostData::I64(v) => v.first().copied(),
            _ => None,
        })?
        .flatten())
}

/// Adds one to this rank's step count and returns it (`None` off the placement).
fn bump_step(step: &Tensor) -> Result<Option<i64>> {
    Ok(step
        .with_component_mut(|h| {
            Ok(match h {
                HostData::I64(v) => v.first_mut().map(|s| {
                    *s += 1;
                    *s
                }),
                _ => None,
            })
        })?
        .flatten())
}

/// The named state of every parameter.
fn named_state(params: &[Tensor], state: &[ParamState]) -> Result<Vec<(String, Tensor)>> {
    let mut out = vec![];
    for (i, (p, s)) in params.iter().zip(state).enumerate() {
        s.named(i, p, &mut out)?;
    }
    Ok(out)
}

/// Runs `update` with write access to the state buffers' components.
fn with_buffers<R>(bufs: &[Tensor], update: impl FnOnce(&mut [&mut Buffer]) -> R) -> R {
    let mut guards: Vec<_> = bufs.iter().filter_map(|b| b.write()).collect();
    let mut refs: Vec<&mut Buffer> = guards.iter_mut().map(|g| &mut **g).collect();
    update(&mut refs)
}

/// The gradient of `p` in `p`'s layout, if any.
fn grad_of(p: &Tensor) -> Result<Option<Tensor>> {
    let Some(g) = p.grad() else {
        return Ok(None);
    };
    match p.dist() {
        Some(d) if g.dist() != Some(d) => Ok(Some(crate::autograd::no_grad(|| {
            g.to_global(&d.placement, d.nd_sbp.clone())
        })?)),
        _ => Ok(Some(g)),
    }
}

/// A parameter update on a device: parameter and gradient in, the new parameter out, state
/// buffers replaced in place, all with the device's kernels.
type DeviceStep<'a> =
    &'a dyn Fn(&dyn Kernels, &mut Buffer, &Buffer, &mut [&mut Buffer]) -> Result<()>;

/// Updates this rank's parameter component from its gradient and state; does nothing off the
/// placement. On the CPU `f32_step`/`f64_step` update
/// the host data in place; on a GPU `device_step` runs the update with the device's kernels,
/// so parameters and state stay in device memory.
fn update_component(
    p: &Tensor,
    g: &Tensor,
    state: &mut [&mut Buffer],
    f32_step: impl FnOnce(&mut [f32], &[f32], &mut [&mut [f32]]),
    f64_step: impl FnOnce(&mut [f64], &[f64], &mut [&mut [f64]]),
    device_step: DeviceStep<'_>,
) -> Result<()> {
    let (Some(gd), Some(mut pd)) = (g.read(), p.write()) else {
        return Ok(());
    };
    if gd.dtype() != pd.dtype() {
        return Err(Error::DTypeMismatch {
            expected: pd.dtype(),
            got: gd.dtype(),
        });
    }
    if g.shape() != p.shape() {
        return Err(Error::ShapeMismatch {
            op: "optimizer step",
            shapes: vec![p.shape().to_vec(), g.shape().to_vec()],
            reason: "a gradient must have its parameter's shape".into(),
        });
    }
    if state.iter().any(|s| s.len() != pd.len()) {
        return Err(Error::Internal(
            "optimizer state does not match its parameter's component".into(),
        ));
    }
    let device = p.device();
    let k = device.kernels()?;
    if device != Device::Cpu && k.computes(pd.dtype()) {
        return device_step(&*k, &mut pd, &gd, state);
    }
    let mut hosts: Vec<&mut HostData> = state
        .iter_mut()
        .map(|s| s.host_mut())
        .collect::<Result<_>>()?;
    match (pd.host_mut()?, gd.host()?) {
        (HostData::F32(pv), HostData::F32(gv)) => {
            let mut st: Vec<&mut [f32]> = hosts
                .iter_mut()
                .filter_map(|s| match s {
                    HostData::F32(v) => Some(v.as_mut_slice()),
                    _ => None,
                })
                .collect();
            f32_step(pv, gv, &mut st);
        }
        (HostData::F64(pv), HostData::F64(gv)) => {
            let mut st: Vec<&mut [f64]> = hosts
                .iter_mut()
                .filter_map(|s| match s {
                    HostData::F64(v) => Some(v.as_mut_slice()),
                    _ => None,
                })
                .collect();
            f64_step(pv, gv, &mut st);
        }
        (ph, gh) if ph.dtype().is_half() => {
            // 16-bit parameters and their state update in f32 and round once (as 16-bit
            // products and reductions accumulate in f32), written back into their own buffers
            // (a NumPy view of a parameter keeps seeing it).
            let (mut p32, g32) = (to_f32(ph), to_f32(gh));
            let mut s32: Vec<Vec<f32>> = hosts.iter().map(|h| to_f32(h)).collect();
            let mut st: Vec<&mut [f32]> = s32.iter_mut().map(Vec::as_mut_slice).collect();
            f32_step(&mut p32, &g32, &mut st);
            round_into(ph, &p32);
            for (h, v) in hosts.iter_mut().zip(&s32) {
                round_into(h, v);
            }
        }
        (other, _) => {
            return Err(Error::DTypeMismatch {
                expected: crate::DType::F32,
                got: other.dtype(),
            });
        }
    }
    Ok(())
}

/// A 16-bit (or any) buffer's values as f32.
fn to_f32(h: &HostData) -> Vec<f32> {
    match h.cast(DType::F32) {
        HostData::F32(v) => v,
        _ => Vec::new(),
    }
}

/// `v` rounded to nearest (ties to even) into the 16-bit buffer `h` (copied into an f32 one),
/// in place.
fn round_into(h: &mut HostData, v: &[f32]) {
    match h {
        HostData::F16(d) => d
            .iter_mut()
            .zip(v)
            .for_each(|(o, &x)| *o = half::f16::from_f32(x)),
        HostData::BF16(d) => d
            .iter_mut()
            .zip(v)
            .for_each(|(o, &x)| *o = half::bf16::from_f32(x)),
        HostData::F32(d) => d.copy_from_slice(v),
        _ => {}
    }
}

/// `a op b` elementwise for buffers of one length, on a device.
fn flat(k: &dyn Kernels, op: BinaryOp, a: &Buffer, b: &Buffer) -> Result<Buffer> {
    let n = [a.len()];
    k.binary(op, a, &n, b, &n, &n)
}

/// Clears the gradients of `params`.
fn clear(params: &[Tensor]) {
    params.iter().for_each(|p| p.set_grad(None));
}

/// `InvalidArgument` for `op` naming the hyper-parameter `name`, what it must be and `value`,
/// unless `ok` (PyTorch refuses the same values, with a `ValueError`, when the optimizer is
/// made; here the constructors are infallible, so the first step refuses them, before any
/// parameter changes).
fn hyper(op: &'static str, name: &str, value: f64, ok: bool, expected: &str) -> Result<()> {
    if ok {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        reason: format!("{name}: expected {expected}, got {value}"),
    })
}

/// [`hyper`] for each `(name, value)` of `op` that must be a finite number >= 0.
fn non_negative_all(op: &'static str, values: &[(&str, f64)]) -> Result<()> {
    for &(name, v) in values {
        hyper(op, name, v, non_negative(v), "a finite number >= 0")?;
    }
    Ok(())
}

/// Runs `update(p, g, step, buffers)` for every parameter `p` with a gradient `g` (in `p`'s
/// layout) on a rank of its placement, after counting the step (`step` is then 1 on the
/// first), with `p`'s state buffers. `op` names the optimizer in the error for a parameter
/// whose SBP has a `partial_max`/`partial_min` axis: its components hold the identity (inf)
/// where another rank holds the value, and an update of each component would make NaN.
fn each_param(
    op: &'static str,
    params: &[Tensor],
    state: &[ParamState],
    mut update: impl FnMut(&Tensor, &Tensor, i64, Vec<Tensor>) -> Result<()>,
) -> Result<()> {
    for (p, st) in params.iter().zip(state) {
        let Some(g) = grad_of(p)? else { continue };
        let extreme = |s: &Sbp| matches!(s, Sbp::Partial(r) if *r != ReduceOp::Sum);
        if let Some(sbp) = p.sbp().filter(|s| s.as_slice().iter().any(extreme)) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "parameter with sbp {sbp} holds partial maxima or minima (the identity, \
                     inf, where another rank holds the value); give it a split, broadcast or \
                     partial_sum SBP"
                ),
            });
        }
        let (step, bufs) = st.tensors(p)?;
        let Some(n) = bump_step(&step)? else { continue };
        update(p, &g, n, bufs)?;
    }
    Ok(())
}

/// A learning rate, momentum, weight decay or epsilon: finite and not negative (NaN refused).
fn non_negative(v: f64) -> bool {
    v >= 0.0 && v.is_finite()
}

/// An averaging coefficient: in [0, 1) (NaN refused).
fn coefficient(v: f64) -> bool {
    (0.0..1.0).contains(&v)
}

/// Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and (L2)
/// weight decay, as PyTorch's `SGD`: `d = g + wd p; b = mu b + (1 - dampening) d` (`b = d` on
/// the first step); `p -= lr (d + mu b)` with Nesterov, else `p -= lr b`.
#[derive(Debug)]
pub struct Sgd {
    params: Vec<Tensor>,
    lr: f64,
    momentum: f64,
    dampening: f64,
    nesterov: bool,
    maximize: bool,
    weight_decay: f64,
    state: Vec<ParamState>,
}

/// SGD's hyper-parameters for one step.
#[derive(Clone, Copy)]
struct SgdHyper {
    lr: f64,
    mu: f64,
    dampening: f64,
    nesterov: bool,
    maximize: bool,
    wd: f64,
}

impl Sgd {
    /// Plain SGD over `params` (handles, e.g. `model.parameters()`; one listed twice is updated
    /// once) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Sgd {
        let params = crate::nn::distinct(params);
        Sgd {
            state: params
                .iter()
                .map(|_| ParamState::new(&["momentum_buffer"]))
                .collect(),
            params,
            lr,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            maximize: false,
            weight_decay: 0.0,
        }
    }

    /// With momentum `mu`.
    pub fn momentum(mut self, mu: f64) -> Sgd {
        self.momentum = mu;
        self
    }

    /// With dampening `d`: the gradient enters the momentum buffer scaled by `1 - d`.
    pub fn dampening(mut self, d: f64) -> Sgd {
        self.dampening = d;
        self
    }

    /// With Nesterov momentum (needs a momentum and no dampening).
    pub fn nesterov(mut self, on: bool) -> Sgd {
        self.nesterov = on;
        self
    }

    /// Maximizing the objective (the gradient's negative is followed), as PyTorch's `maximize`.
    pub fn maximize(mut self, on: bool) -> Sgd {
        self.maximize = on;
        self
    }

    /// With L2 weight decay `wd`.
    pub fn weight_decay(mut self, wd: f64) -> Sgd {
        self.weight_decay = wd;
        self
    }

    /// One update of every parameter that has a gradient.
    ///
    /// # Errors
    /// See [`Optimizer::step`].
    pub fn step(&mut self) -> Result<()> {
        crate::profile::scope(|| "optimizer".into(), || self.update())
    }

    /// `InvalidArgument` naming a learning rate, momentum, dampening or weight decay that is
    /// negative, NaN or infinite, or Nesterov momentum without a momentum or with dampening.
    fn check(&self) -> Result<()> {
        const OP: &str = "Sgd::step";
        non_negative_all(
            OP,
            &[
                ("lr", self.lr),
                ("momentum", self.momentum),
                ("dampening", self.dampening),
                ("weight_decay", self.weight_decay),
            ],
        )?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "nesterov: Nesterov momentum requires a momentum and zero dampening, got \
                     momentum {} and dampening {}",
                    self.momentum, self.dampening
                ),
            });
        }
        Ok(())
    }

    fn update(&mut self) -> Result<()> {
        self.check()?;
        let h = SgdHyper {
            lr: self.lr,
            mu: self.momentum,
            dampening: self.dampening,
            nesterov: self.nesterov,
            maximize: self.maximize,
            wd: self.weight_decay,
        };
        let (lr, mu, wd) = (h.lr, h.mu, h.wd);
        each_param("Sgd::step", &self.params, &self.state, |p, g, n, bufs| {
            let fresh = n == 1;
            let bufs = if mu == 0.0 { &[][..] } else { &bufs[..] };
            with_buffers(bufs, |state| {
                update_component(
                    p,
                    g,
                    state,
                    |p, g, s| sgd(p, g, s, h, fresh),
                    |p, g, s| sgd(p, g, s, h, fresh),
                    &|k, p, g, s| {
                        let g = if h.maximize {
                            k.scale(g, -1.0)?
                        } else {
                            g.clone()
                        };
                        let d = if wd == 0.0 {
                            g
                        } else {
                            flat(k, BinaryOp::Add, &g, &k.scale(p, wd)?)?
                        };
                        let step = match s.first_mut() {
                            None => d,
                            Some(b) => {
                                **b = if fresh {
                                    d.clone()
                                } else {
                                    let kept = k.scale(&d, 1.0 - h.dampening)?;
                                    flat(k, BinaryOp::Add, &k.scale(b, mu)?, &kept)?
                                };
                                if h.nesterov {
                                    flat(k, BinaryOp::Add, &d, &k.scale(b, mu)?)?
                                } else {
                                    (**b).clone()
                                }
                            }
                        };
                        *p = flat(k, BinaryOp::Add, p, &k.scale(&step, -lr)?)?;
                        Ok(())
                    },
                )
            })
        })
    }

    /// Clears the parameters' gradients.
    pub fn zero_grad(&mut self) {
        clear(&self.params);
    }
}

fn sgd<T: Float>(p: &mut [T], g: &[T], s: &mut [&mut [T]], h: SgdHyper, fresh: bool) {
    let f = T::from_f64;
    let (lr, mu, wd, kept) = (f(h.lr), f(h.mu), f(h.wd), f(1.0 - h.dampening));
    let sign = f(if h.maximize { -1.0 } else { 1.0 });
    match s.first_mut() {
        None => p.iter_mut().zip(g).for_each(|(p, &g)| {
            *p = *p - lr * (sign * g + wd * *p);
        }),
        Some(b) => {
            for ((p, &g), b) in p.iter_mut().zip(g).zip(b.iter_mut()) {
                let d = sign * g + wd * *p;
                *b = if fresh { d } else { mu * *b + kept * d };
                let step = if h.nesterov { d + mu * *b } else { *b };
                *p = *p - lr * step;
            }
        }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        Sgd::step(self)
    }
    fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        named_state(&self.params, &self.state)
    }
    fn zero_grad(&mut self) {
        Sgd::zero_grad(self);
    }
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Adam (Kingma and Ba), as PyTorch's `Adam`: L2 weight decay added to the gradient, betas
/// (0.9, 0.999), eps 1e-8; optionally AMSGrad (the largest second moment so far in the
/// denominator) and `maximize`. [`AdamW`] decouples the decay.
#[derive(Debug)]
pub struct Adam {
    params: Vec<Tensor>,
    lr: f64,
    betas: (f64, f64),
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
    amsgrad: bool,
    maximize: bool,
    state: Vec<ParamState>,
}

/// Adam with decoupled weight decay (Loshchilov and Hutter), as PyTorch's `AdamW`: weight decay
/// 0.01 by default, applied as `p *= 1 - lr wd` before the Adam step.
#[derive(Debug)]
pub struct AdamW(Adam);

impl AdamW {
    /// AdamW over `params` with learning rate `lr` (weight decay 0.01).
    pub fn new(params: Vec<Tensor>, lr: f64) -> AdamW {
        AdamW(Adam {
            weight_decay: 0.01,
            decoupled: true,
            ..Adam::new(params, lr)
        })
    }

    /// With coefficients `(beta1, beta2)` for the running averages, as PyTorch's `betas=`.
    pub fn betas(self, betas: (f64, f64)) -> AdamW {
        AdamW(self.0.betas(betas))
    }

    /// With `eps` added to the denominator.
    pub fn eps(self, eps: f64) -> AdamW {
        AdamW(self.0.eps(eps))
    }

    /// With decoupled weight decay `wd`.
    pub fn weight_decay(self, wd: f64) -> AdamW {
        AdamW(self.0.weight_decay(wd))
    }

    /// With AMSGrad (see [`Adam::amsgrad`]).
    pub fn amsgrad(self, on: bool) -> AdamW {
        AdamW(self.0.amsgrad(on))
    }

    /// Maximizing the objective, as PyTorch's `maximize`.
    pub fn maximize(self, on: bool) -> AdamW {
        AdamW(self.0.maximize(on))
    }

    /// One update of every parameter that has a gradient.
    ///
    /// # Errors
    /// As [`Adam::step`].
    pub fn step(&mut self) -> Result<()> {
        self.0.step()
    }

    /// Clears the parameters' gradients.
    pub fn zero_grad(&mut self) {
        self.0.zero_grad();
    }
}

impl Optimizer for AdamW {
    fn step(&mut self) -> Result<()> {
        self.0.step()
    }
    fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        self.0.state_tensors()
    }
    fn zero_grad(&mut self) {
        self.0.zero_grad();
    }
    fn lr(&self) -> f64 {
        self.0.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.0.lr = lr;
    }
}

impl Adam {
    /// Adam over `params` (one listed twice is updated once) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Adam {
        let params = crate::nn::distinct(params);
        Adam {
            state: params
                .iter()
                .map(|_| ParamState::new(&["exp_avg", "exp_avg_sq"]))
                .collect(),
            params,
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            amsgrad: false,
            maximize: false,
        }
    }

    /// With AMSGrad: the denominator takes the largest second moment seen so far (state
    /// `max_exp_avg_sq`, as PyTorch's).
    pub fn amsgrad(mut self, on: bool) -> Adam {
        self.amsgrad = on;
        let names: &[&'static str] = if on {
            &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
        } else {
            &["exp_avg", "exp_avg_sq"]
        };
        self.state = self.params.iter().map(|_| ParamState::new(names)).collect();
        self
    }

    /// Maximizing the objective, as PyTorch's `maximize`.
    pub fn maximize(mut self, on: bool) -> Adam {
        self.maximize = on;
        self
    }

    /// With coefficients `(beta1, beta2)` for the running averages, as PyTorch's `betas=`.
    pub fn betas(mut self, betas: (f64, f64)) -> Adam {
        self.betas = betas;
        self
    }

    /// With `eps` added to the denominator.
    pub fn eps(mut self, eps: f64) -> Adam {
        self.eps = eps;
        self
    }

    /// With weight decay `wd` (L2 for Adam, decoupled for AdamW).
    pub fn weight_decay(mut self, wd: f64) -> Adam {
        self.weight_decay = wd;
        self
    }

    /// One update of every parameter that has a gradient.
    ///
    /// # Errors
    /// See [`Optimizer::step`]; `InvalidArgument` for a parameter with a partial SBP (Adam is
    /// not linear, so it cannot update summands separately).
    pub fn step(&mut self) -> Result<()> {
        crate::profile::scope(|| "optimizer".into(), || self.update())
    }

    /// `InvalidArgument` naming a learning rate, epsilon or weight decay that is negative, NaN
    /// or infinite, or a beta outside [0, 1) (PyTorch's "Invalid beta parameter at index i").
    fn check(&self) -> Result<()> {
        let op = if self.decoupled {
            "AdamW::step"
        } else {
            "Adam::step"
        };
        const EXPECTED: &str = "a finite number >= 0";
        hyper(op, "lr", self.lr, non_negative(self.lr), EXPECTED)?;
        hyper(op, "eps", self.eps, non_negative(self.eps), EXPECTED)?;
        let (b1, b2) = self.betas;
        hyper(op, "betas.0", b1, coefficient(b1), "a number in [0, 1)")?;
        hyper(op, "betas.1", b2, coefficient(b2), "a number in [0, 1)")?;
        hyper(
            op,
            "weight_decay",
            self.weight_decay,
            non_negative(self.weight_decay),
            EXPECTED,
        )
    }

    fn update(&mut self) -> Result<()> {
        self.check()?;
        let h = Hyper {
            lr: self.lr,
            betas: self.betas,
            eps: self.eps,
            wd: self.weight_decay,
            decoupled: self.decoupled,
            amsgrad: self.amsgrad,
            maximize: self.maximize,
        };
        for (p, st) in self.params.iter().zip(&self.state) {
            let Some(g) = grad_of(p)? else { continue };
            if p.sbp().is_some_and(|s| s.has_partial()) {
                return Err(Error::InvalidArgument {
                    op: "Adam::step",
                    reason: format!(
                        "parameter with sbp {} holds partial values; give it a split or \
                         broadcast SBP",
                        p.sbp().map(ToString::to_string).unwrap_or_default()
                    ),
                });
            }
            let (step, moments) = st.tensors(p)?;
            let Some(n) = bump_step(&step)? else { continue };
            let step = u32::try_from(n).unwrap_or(u32::MAX);
            with_buffers(&moments, |m| {
                update_component(
                    p,
                    &g,
                    m,
                    |p, g, s| adam(p, g, s, &h, step),
                    |p, g, s| adam(p, g, s, &h, step),
                    &|k, p, g, s| adam_on_device(k, p, g, s, &h, step),
                )
            })?;
        }
        Ok(())
    }

    /// Clears the parameters' gradients.
    pub fn zero_grad(&mut self) {
        clear(&self.params);
    }
}

/// Adam's bias corrections `1 - beta^step` (a step count beyond `i32::MAX` counts as that,
/// where the corrections are 1 to double precision anyway, rather than wrapping negative).
fn bias_corrections((b1, b2): (f64, f64), step: u32) -> (f64, f64) {
    let n = i32::try_from(step).unwrap_or(i32::MAX);
    (1.0 - b1.powi(n), 1.0 - b2.powi(n))
}

/// Adam's hyper-parameters for one step.
struct Hyper {
    lr: f64,
    betas: (f64, f64),
    eps: f64,
    wd: f64,
    decoupled: bool,
    amsgrad: bool,
    maximize: bool,
}

fn adam<T: Float>(p: &mut [T], g: &[T], s: &mut [&mut [T]], h: &Hyper, step: u32) {
    if h.amsgrad || h.maximize {
        return adam_variant(p, g, s, h, step);
    }
    let [m, v] = s else { return };
    let (b1, b2) = h.betas;
    let (bc1, bc2) = bias_corrections(h.betas, step);
    let f = T::from_f64;
    let (lr, wd, eps) = (f(h.lr), f(h.wd), f(h.eps));
    let (b1t, b2t, c1, c2) = (f(b1), f(b2), f(1.0 - b1), f(1.0 - b2));
    let (k1, k2) = (f(1.0 / bc1), f(1.0 / bc2));
    let shrink = f(1.0 - h.lr * h.wd);
    let decoupled = h.decoupled;
    // One pass per piece, as iterators (no bounds checks, so the loop vectorizes); pieces on
    // all threads. The same operations in the same order as one loop: results are identical.
    let piece = |p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]| {
        for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            let mut gi = g;
            if decoupled {
                *p = *p * shrink;
            } else {
                gi = gi + wd * *p;
            }
            *m = b1t * *m + c1 * gi;
            *v = b2t * *v + c2 * gi * gi;
            *p = *p - lr * (*m * k1) / ((*v * k2).sqrt() + eps);
        }
    };
    const PIECE: usize = 1 << 14;
    if p.len() >= 2 * PIECE {
        p.par_chunks_mut(PIECE)
            .zip(g.par_chunks(PIECE))
            .zip(m.par_chunks_mut(PIECE))
            .zip(v.par_chunks_mut(PIECE))
            .for_each(|(((p, g), m), v)| piece(p, g, m, v));
    } else {
        piece(p, g, m, v);
    }
}

/// [`adam`] with AMSGrad (a third buffer, the largest second moment so far) or `maximize`, one
/// element at a time, as PyTorch's.
fn adam_variant<T: Float>(p: &mut [T], g: &[T], s: &mut [&mut [T]], h: &Hyper, step: u32) {
    let (bc1, bc2) = bias_corrections(h.betas, step);
    let f = T::from_f64;
    let (lr, wd, eps) = (f(h.lr), f(h.wd), f(h.eps));
    let (b1, b2, c1, c2) = (
        f(h.betas.0),
        f(h.betas.1),
        f(1.0 - h.betas.0),
        f(1.0 - h.betas.1),
    );
    let (k1, k2, shrink) = (f(1.0 / bc1), f(1.0 / bc2), f(1.0 - h.lr * h.wd));
    let sign = f(if h.maximize { -1.0 } else { 1.0 });
    let (m, rest) = match s.split_first_mut() {
        Some((m, rest)) => (m, rest),
        None => return,
    };
    let (v, mut most) = match rest.split_first_mut() {
        Some((v, more)) => (v, more.first_mut()),
        None => return,
    };
    for i in 0..p.len() {
        let mut gi = sign * g[i];
        if h.decoupled {
            p[i] = p[i] * shrink;
        } else {
            gi = gi + wd * p[i];
        }
        m[i] = b1 * m[i] + c1 * gi;
        v[i] = b2 * v[i] + c2 * gi * gi;
        let second = match most.as_deref_mut() {
            Some(vmax) if h.amsgrad => {
                vmax[i] = if v[i] > vmax[i] { v[i] } else { vmax[i] };
                vmax[i]
            }
            _ => v[i],
        };
        p[i] = p[i] - lr * (m[i] * k1) / ((second * k2).sqrt() + eps);
    }
}

/// [`adam`] with a device's kernels: one in-place kernel where the device has it and the
/// buffers are the optimizer's alone, else composed of elementwise kernels.
fn adam_on_device(
    k: &dyn Kernels,
    p: &mut Buffer,
    g: &Buffer,
    s: &mut [&mut Buffer],
    h: &Hyper,
    step: u32,
) -> Result<()> {
    let (m, v, most) = match s {
        [m, v] => (m, v, None),
        [m, v, vmax] => (m, v, Some(vmax)),
        _ => return Err(Error::Internal("Adam without its moments".into())),
    };
    let (b1, b2) = h.betas;
    let (bc1, bc2) = bias_corrections(h.betas, step);
    let fused = AdamStep {
        lr: h.lr,
        beta1: b1,
        beta2: b2,
        c1: 1.0 - b1,
        c2: 1.0 - b2,
        k1: 1.0 / bc1,
        k2: 1.0 / bc2,
        eps: h.eps,
        weight_decay: h.wd,
        shrink: 1.0 - h.lr * h.wd,
        decoupled: h.decoupled,
    };
    let in_place = !h.amsgrad
        && !h.maximize
        && crate::profile::scope(
            || "kernel adam_step".into(),
            || k.adam_step(p, g, [&mut **m, &mut **v], &fused),
        )?;
    if in_place {
        return Ok(());
    }
    let mut g = if h.maximize {
        k.scale(g, -1.0)?
    } else {
        g.clone()
    };
    if h.decoupled {
        *p = k.scale(p, 1.0 - h.lr * h.wd)?;
    } else if h.wd != 0.0 {
        g = flat(k, BinaryOp::Add, &g, &k.scale(p, h.wd)?)?;
    }
    **m = flat(k, BinaryOp::Add, &k.scale(m, b1)?, &k.scale(&g, 1.0 - b1)?)?;
    let g2 = k.scale(&k.unary(UnaryOp::Square, &g)?, 1.0 - b2)?;
    **v = flat(k, BinaryOp::Add, &k.scale(v, b2)?, &g2)?;
    let second = match most {
        Some(vmax) if h.amsgrad => {
            **vmax = flat(k, BinaryOp::Maximum, vmax, v)?;
            &**vmax
        }
        _ => &**v,
    };
    let denom = k.add_scalar(
        &k.unary(UnaryOp::Sqrt, &k.scale(second, 1.0 / bc2)?)?,
        h.eps,
    )?;
    let update = flat(k, BinaryOp::Div, &k.scale(m, h.lr / bc1)?, &denom)?;
    *p = flat(k, BinaryOp::Sub, p, &update)?;
    Ok(())
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        Adam::step(self)
    }
    fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        named_state(&self.params, &self.state)
    }
    fn zero_grad(&mut self) {
        Adam::zero_grad(self);
    }
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-worked: one Adam step moves each weight by lr in the gradient's sign direction
    /// (m_hat / sqrt(v_hat) = g / |g|); SGD with momentum follows b = mu b + g.
    #[test]
    fn first_steps_match_hand_worked_values() {
        let mut p = vec![1.0f64, -2.0];
        let mut m = vec![0.0; 2];
        let mut v = vec![0.0; 2];
        let h = Hyper {
            lr: 0.1,
            betas: (0.9, 0.999),
            eps: 0.0,
            wd: 0.0,
            decoupled: false,
            amsgrad: false,
            maximize: false,
        };
        adam(&mut p, &[0.5, -3.0], &mut [&mut m, &mut v], &h, 1);
        assert!(
            (p[0] - 0.9).abs() < 1e-12 && (p[1] + 1.9).abs() < 1e-12,
            "{p:?}"
        );
        let mut p = vec![1.0f32];
        let mut b = vec![0.0f32];
        let h = SgdHyper {
            lr: 0.1,
            mu: 0.9,
            dampening: 0.0,
            nesterov: false,
            maximize: false,
            wd: 0.0,
        };
        sgd(&mut p, &[1.0], &mut [&mut b], h, true);
        sgd(&mut p, &[1.0], &mut [&mut b], h, false);
        // b = 1, then 1.9: p = 1 - 0.1 - 0.19
        assert!((p[0] - 0.71).abs() < 1e-6, "{p:?}");
    }
}
