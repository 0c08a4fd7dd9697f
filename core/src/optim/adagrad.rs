//! Adagrad (Duchi, Hazan and Singer), as PyTorch's `Adagrad`: each element's step shrinks with
//! the sum of its squared gradients so far.

use super::{
    Optimizer, ParamState, clear, each_param, flat, named_state, non_negative_all,
    update_component, with_buffers,
};
use crate::backend::{BinaryOp, Kernels, UnaryOp};
use crate::cpu::Float;
use crate::error::Result;
use crate::storage::Buffer;
use crate::tensor::Tensor;

/// Adagrad over parameter handles: at step `t`, `d = g + wd p; s += d^2;`
/// `p -= lr / (1 + (t - 1) lr_decay) * d / (sqrt(s) + eps)`, the sum starting at
/// `initial_accumulator_value` (PyTorch's defaults: lr 0.01, eps 1e-10).
///
/// ```
/// use gflow_core::{Device, Tensor, optim::{Adagrad, Optimizer}};
/// let w = Tensor::from_vec(vec![1.0f64], &[1], Device::Cpu)?.set_requires_grad(true);
/// w.square()?.sum(vec![], false)?.backward()?; // gradient 2
/// let mut opt = Adagrad::new(vec![w.clone()], 0.5);
/// opt.step()?;
/// // s = 4: the first step is lr * 2 / (2 + 1e-10), about lr
/// assert!((w.to_vec::<f64>()?[0] - (1.0 - 0.5 * 2.0 / (2.0 + 1e-10))).abs() < 1e-15);
/// # Ok::<(), gflow_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Adagrad {
    params: Vec<Tensor>,
    h: Hyper,
    state: Vec<ParamState>,
}

/// Adagrad's hyper-parameters.
#[derive(Clone, Copy, Debug)]
struct Hyper {
    lr: f64,
    lr_decay: f64,
    wd: f64,
    initial: f64,
    eps: f64,
    maximize: bool,
}

impl Adagrad {
    /// Adagrad over `params` (one listed twice is updated once) with learning rate `lr`.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Adagrad {
        let params = crate::nn::distinct(params);
        Adagrad {
            state: params.iter().map(|_| ParamState::new(&["sum"])).collect(),
            params,
            h: Hyper {
                lr,
                lr_decay: 0.0,
                wd: 0.0,
                initial: 0.0,
                eps: 1e-10,
                maximize: false,
            },
        }
    }

    /// With the learning rate divided by `1 + (t - 1) lr_decay` at step `t`.
    pub fn lr_decay(mut self, decay: f64) -> Adagrad {
        self.h.lr_decay = decay;
        self
    }

    /// With L2 weight decay `wd`.
    pub fn weight_decay(mut self, wd: f64) -> Adagrad {
        self.h.wd = wd;
        self
    }

    /// With the sum of squares starting at `v` (it is added at the first step, which is
    /// where PyTorch's state, made at `v`, is first used).
    pub fn initial_accumulator_value(mut self, v: f64) -> Adagrad {
        self.h.initial = v;
        self
    }

    /// With `eps` added to the denominator.
    pub fn eps(mut self, eps: f64) -> Adagrad {
        self.h.eps = eps;
        self
    }

    /// Maximizing the objective, as PyTorch's `maximize`.
    pub fn maximize(mut self, on: bool) -> Adagrad {
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
            "Adagrad::step",
            &[
                ("lr", h.lr),
                ("lr_decay", h.lr_decay),
                ("weight_decay", h.wd),
                ("initial_accumulator_value", h.initial),
                ("eps", h.eps),
            ],
        )?;
        each_param(
            "Adagrad::step",
            &self.params,
            &self.state,
            |p, g, n, bufs| {
                let t = Step {
                    lr: h.lr / (1.0 + (n - 1) as f64 * h.lr_decay),
                    start: if n == 1 { h.initial } else { 0.0 },
                };
                with_buffers(&bufs, |s| {
                    update_component(
                        p,
                        g,
                        s,
                        |p, g, s| adagrad(p, g, s, &h, t),
                        |p, g, s| adagrad(p, g, s, &h, t),
                        &|k, p, g, s| on_device(k, p, g, s, &h, t),
                    )
                })
            },
        )
    }
}

/// What one step adds to the hyper-parameters: its decayed learning rate and what the sum
/// starts from (the initial value on the first step).
#[derive(Clone, Copy)]
struct Step {
    lr: f64,
    start: f64,
}

fn adagrad<T: Float>(p: &mut [T], g: &[T], s: &mut [&mut [T]], h: &Hyper, t: Step) {
    let f = T::from_f64;
    let (lr, wd, eps, start) = (f(t.lr), f(h.wd), f(h.eps), f(t.start));
    let sign = f(if h.maximize { -1.0 } else { 1.0 });
    let Some(sum) = s.first_mut() else { return };
    for ((p, &g), s) in p.iter_mut().zip(g).zip(sum.iter_mut()) {
        let d = sign * g + wd * *p;
        *s = *s + start + d * d;
        *p = *p - lr * (d / (s.sqrt() + eps));
    }
}

/// [`adagrad`] with a device's elementwise kernels.
fn on_device(
    k: &dyn Kernels,
    p: &mut Buffer,
    g: &Buffer,
    s: &mut [&mut Buffer],
    h: &Hyper,
    t: Step,
) -> Result<()> {
    let mut d = if h.maximize {
        k.scale(g, -1.0)?
    } else {
        g.clone()
    };
    if h.wd != 0.0 {
        d = flat(k, BinaryOp::Add, &d, &k.scale(p, h.wd)?)?;
    }
    let sum = s
        .first_mut()
        .ok_or_else(|| crate::Error::Internal("Adagrad state".into()))?;
    let grown = flat(k, BinaryOp::Add, sum, &k.unary(UnaryOp::Square, &d)?)?;
    **sum = if t.start == 0.0 {
        grown
    } else {
        k.add_scalar(&grown, t.start)?
    };
    let denom = k.add_scalar(&k.unary(UnaryOp::Sqrt, sum)?, h.eps)?;
    let step = flat(k, BinaryOp::Div, &d, &denom)?;
    *p = flat(k, BinaryOp::Sub, p, &k.scale(&step, t.lr)?)?;
    Ok(())
}

impl Optimizer for Adagrad {
    fn step(&mut self) -> Result<()> {
        Adagrad::step(self)
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
