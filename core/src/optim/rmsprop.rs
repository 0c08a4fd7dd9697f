//! RMSprop (Hinton's lecture 6e), as PyTorch's `RMSprop`: a running average of squared
//! gradients scales each step, optionally centred (less the squared running mean) and with
//! momentum.

use super::{
    Optimizer, ParamState, clear, each_param, flat, named_state, non_negative_all,
    update_component, with_buffers,
};
use crate::backend::{BinaryOp, Kernels, UnaryOp};
use crate::cpu::Float;
use crate::error::Result;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// RMSprop over parameter handles: `d = g + wd p; s = alpha s + (1 - alpha) d^2;`
/// `a = sqrt(s - m^2) + eps` with `m = alpha m + (1 - alpha) d` when centred, else
/// `sqrt(s) + eps`; `b = mu b + d / a; p -= lr b` with momentum, else `p -= lr d / a`
/// (PyTorch's defaults: lr 0.01, alpha 0.99, eps 1e-8).
///
/// ```
/// use gflow_core::{Device, Tensor, optim::{Optimizer, RmsProp}};
/// let w = Tensor::from_vec(vec![1.0f64], &[1], Device::Cpu)?.set_requires_grad(true);
/// w.square()?.sum(vec![], false)?.backward()?; // gradient 2
/// let mut opt = RmsProp::new(vec![w.clone()], 0.01);
/// opt.step()?;
/// // s = 0.01 * 4, so the step is lr * 2 / (0.2 + 1e-8)
/// assert!((w.to_vec::<f64>()?[0] - (1.0 - 0.01 * 2.0 / (0.2 + 1e-8))).abs() < 1e-15);
/// # Ok::<(), gflow_core::Error>(())
/// ```
#[derive(Debug)]
pub struct RmsProp {
    params: Vec<Tensor>,
    h: Hyper,
    state: Vec<ParamState>,
}

/// RMSprop's hyper-parameters.
#[derive(Clone, Copy, Debug)]
struct Hyper {
    lr: f64,
    alpha: f64,
    eps: f64,
    wd: f64,
    momentum: f64,
    centered: bool,
    maximize: bool,
}

impl RmsProp {
    /// RMSprop over `params` (one listed twice is updated once) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> RmsProp {
        let mut o = RmsProp {
            params: crate::nn::distinct(params),
            h: Hyper {
                lr,
                alpha: 0.99,
                eps: 1e-8,
                wd: 0.0,
                momentum: 0.0,
                centered: false,
                maximize: false,
            },
            state: vec![],
        };
        o.remake_state();
        o
    }

    /// The state buffers the options need, named as PyTorch's: `square_avg`, then
    /// `momentum_buffer` with momentum and `grad_avg` when centred.
    fn remake_state(&mut self) {
        let mut names = vec!["square_avg"];
        if self.h.momentum > 0.0 {
            names.push("momentum_buffer");
        }
        if self.h.centered {
            names.push("grad_avg");
        }
        self.state = self
            .params
            .iter()
            .map(|_| ParamState::new(&names))
            .collect();
    }

    /// With smoothing constant `alpha` for the average of squares.
    pub fn alpha(mut self, alpha: f64) -> RmsProp {
        self.h.alpha = alpha;
        self
    }

    /// With `eps` added to the denominator.
    pub fn eps(mut self, eps: f64) -> RmsProp {
        self.h.eps = eps;
        self
    }

    /// With L2 weight decay `wd`.
    pub fn weight_decay(mut self, wd: f64) -> RmsProp {
        self.h.wd = wd;
        self
    }

    /// With momentum `mu` (a buffer of scaled steps).
    pub fn momentum(mut self, mu: f64) -> RmsProp {
        self.h.momentum = mu;
        self.remake_state();
        self
    }

    /// Centred: the squared running mean of the gradient is taken off the average of squares.
    pub fn centered(mut self, on: bool) -> RmsProp {
        self.h.centered = on;
        self.remake_state();
        self
    }

    /// Maximizing the objective, as PyTorch's `maximize`.
    pub fn maximize(mut self, on: bool) -> RmsProp {
        self.h.maximize = on;
        self
    }

    /// One update of every parameter that has a gradient.
    ///
    /// # Errors
    /// See [`Optimizer::step`].
    pub fn step(&mut self) -> Result<()> {
        crate::profile::scope(|| "optimizer".into(), || self.update())
    }

    fn update(&mut self) -> Result<()> {
        let h = self.h;
        non_negative_all(
            "RmsProp::step",
            &[
                ("lr", h.lr),
                ("alpha", h.alpha),
                ("eps", h.eps),
                ("weight_decay", h.wd),
                ("momentum", h.momentum),
            ],
        )?;
        each_param(
            "RmsProp::step",
            &self.params,
            &self.state,
            |p, g, _, bufs| {
                with_buffers(&bufs, |s| {
                    update_component(
                        p,
                        g,
                        s,
                        |p, g, s| rmsprop(p, g, s, &h),
                        |p, g, s| rmsprop(p, g, s, &h),
                        &|k, p, g, s| on_device(k, p, g, s, &h),
                    )
                })
            },
        )
    }
}

fn rmsprop<T: Float>(p: &mut [T], g: &[T], s: &mut [&mut [T]], h: &Hyper) {
    let f = T::from_f64;
    let (lr, alpha, rest, eps, wd, mu) = (
        f(h.lr),
        f(h.alpha),
        f(1.0 - h.alpha),
        f(h.eps),
        f(h.wd),
        f(h.momentum),
    );
    let sign = f(if h.maximize { -1.0 } else { 1.0 });
    let (sq, more) = match s.split_first_mut() {
        Some((sq, more)) => (sq, more),
        None => return,
    };
    let (mut buf, mut mean) = (None, None);
    let mut more = more.iter_mut();
    if h.momentum > 0.0 {
        buf = more.next();
    }
    if h.centered {
        mean = more.next();
    }
    for i in 0..p.len() {
        let d = sign * g[i] + wd * p[i];
        sq[i] = alpha * sq[i] + rest * d * d;
        let avg = match mean.as_deref_mut() {
            Some(m) => {
                m[i] = alpha * m[i] + rest * d;
                (sq[i] - m[i] * m[i]).sqrt() + eps
            }
            None => sq[i].sqrt() + eps,
        };
        match buf.as_deref_mut() {
            Some(b) => {
                b[i] = mu * b[i] + d / avg;
                p[i] = p[i] - lr * b[i];
            }
            None => p[i] = p[i] - lr * (d / avg),
        }
    }
}

/// [`rmsprop`] with a device's elementwise kernels.
fn on_device(
    k: &dyn Kernels,
    p: &mut Buffer,
    g: &Buffer,
    s: &mut [&mut Buffer],
    h: &Hyper,
) -> Result<()> {
    let mut d = if h.maximize {
        k.scale(g, -1.0)?
    } else {
        g.clone()
    };
    if h.wd != 0.0 {
        d = flat(k, BinaryOp::Add, &d, &k.scale(p, h.wd)?)?;
    }
    let mut s = s.iter_mut();
    let sq = s
        .next()
        .ok_or_else(|| crate::Error::Internal("RMSprop state".into()))?;
    let d2 = k.scale(&k.unary(UnaryOp::Square, &d)?, 1.0 - h.alpha)?;
    **sq = flat(k, BinaryOp::Add, &k.scale(sq, h.alpha)?, &d2)?;
    let buf = if h.momentum > 0.0 { s.next() } else { None };
    let var = match if h.centered { s.next() } else { None } {
        Some(m) => {
            **m = flat(
                k,
                BinaryOp::Add,
                &k.scale(m, h.alpha)?,
                &k.scale(&d, 1.0 - h.alpha)?,
            )?;
            flat(k, BinaryOp::Sub, sq, &k.unary(UnaryOp::Square, m)?)?
        }
        None => (**sq).clone(),
    };
    let avg = k.add_scalar(&k.unary(UnaryOp::Sqrt, &var)?, h.eps)?;
    let scaled = flat(k, BinaryOp::Div, &d, &avg)?;
    let step = match buf {
        Some(b) => {
            **b = flat(k, BinaryOp::Add, &k.scale(b, h.momentum)?, &scaled)?;
            (**b).clone()
        }
        None => scaled,
    };
    *p = flat(k, BinaryOp::Sub, p, &k.scale(&step, h.lr)?)?;
    Ok(())
}

impl Optimizer for RmsProp {
    fn step(&mut self) -> Result<()> {
        RmsProp::step(self)
    }
    fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        named_state(&self.params, &self.state)
    }
    fn zero_grad(&mut self) {
        clear(&self.params);
    }
    fn lr(&self) -> f64 {
        self.h.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.h.lr = lr;
    }
}
