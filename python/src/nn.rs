//! What `flow.nn` and `flow.optim` need from Rust: the functional forms of gflow's layers and
//! losses (so Python modules compute exactly as gflow's), gflow's parameter initialisation, and
//! its optimizers. Modules themselves are Python classes (`gflow/nn`), as in OneFlow.

use std::sync::Mutex;

use gflow::Tensor;
use gflow::optim::{Adagrad, Adam, AdamW, Optimizer, RmsProp, Sgd};
use pyo3::prelude::*;

use crate::tensor::{PyTensor, op, run};

/// `x @ weight.T + bias` (weight (out, in), bias (out)), as `gflow::nn::Linear`.
#[pyfunction]
#[pyo3(signature = (x, weight, bias = None))]
pub fn linear(
    py: Python<'_>,
    x: &PyTensor,
    weight: &PyTensor,
    bias: Option<&PyTensor>,
) -> PyResult<PyTensor> {
    let (x, w, b) = (x.get(), weight.get(), bias.map(PyTensor::get));
    let global = x.is_global() || w.is_global();
    op(py, global, move || {
        let flat = x.ndim() == 1;
        let x2 = if flat {
            x.reshape(&[1, x.shape()[0]])?
        } else {
            x
        };
        let y = x2.matmul_nt(&w)?;
        let y = match &b {
            Some(b) => y.add(b)?,
            None => y,
        };
        if flat {
            y.reshape(&[w.shape()[0]])
        } else {
            Ok(y)
        }
    })
}

/// Mean squared error over all elements.
#[pyfunction]
pub fn mse_loss(py: Python<'_>, input: &PyTensor, target: &PyTensor) -> PyResult<PyTensor> {
    let (a, b) = (input.get(), target.get());
    op(py, a.is_global(), move || {
        gflow::nn::functional::mse_loss(&a, &b)
    })
}

/// Cross entropy of logits (N, C) against int64 class indices (N), mean over the batch.
#[pyfunction]
pub fn cross_entropy(py: Python<'_>, input: &PyTensor, target: &PyTensor) -> PyResult<PyTensor> {
    let (a, b) = (input.get(), target.get());
    op(py, a.is_global(), move || {
        gflow::nn::functional::cross_entropy(&a, &b)
    })
}

/// The rows of a 2-D `weight` picked by int64 `indices` (an embedding lookup).
#[pyfunction]
pub fn embedding(py: Python<'_>, indices: &PyTensor, weight: &PyTensor) -> PyResult<PyTensor> {
    let (i, w) = (indices.get(), weight.get());
    op(py, w.is_global(), move || w.gather_rows(&i))
}

/// Attention as PyTorch's `scaled_dot_product_attention` on (batch, heads, seq, head_dim):
/// `softmax(q kᵀ · scale + mask) v`, `scale` `1/sqrt(head_dim)` unless given; `attn_mask` Bool
/// (true = may attend) or float (added), `is_causal` masks keys after the query. gflow's
/// `nn::functional::scaled_dot_product_attention` (heads split in, heads split out).
#[pyfunction]
#[pyo3(signature = (query, key, value, attn_mask = None, dropout_p = 0.0, is_causal = false, scale = None))]
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    query: &PyTensor,
    key: &PyTensor,
    value: &PyTensor,
    attn_mask: Option<&PyTensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> PyResult<PyTensor> {
    if dropout_p != 0.0 {
        return Err(crate::error::to_py(gflow::Error::InvalidArgument {
            op: "scaled_dot_product_attention",
            reason: format!(
                "dropout_p must be 0 (attention dropout is not supported), got {dropout_p}"
            ),
        }));
    }
    let (q, k, v) = (query.get(), key.get(), value.get());
    let mask = attn_mask.map(PyTensor::get);
    let global =
        [&q, &k, &v].iter().any(|t| t.is_global()) || mask.as_ref().is_some_and(Tensor::is_global);
    op(py, global, move || {
        // gflow scales by 1/sqrt(head_dim): another scale is folded into the queries.
        let q = match (scale, q.shape().last()) {
            (Some(s), Some(&d)) => q.mul_scalar(s * (d as f64).sqrt())?,
            _ => q,
        };
        gflow::nn::functional::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), is_causal)
    })
}

/// PyTorch's `clip_grad_norm_` (2-norm) over `params`: the global norm of their gradients
/// before clipping (the same on every rank), each gradient scaled in place by
/// `max_norm / (norm + 1e-6)` when that is below 1. gflow's `nn::utils::clip_grad_norm`.
#[pyfunction]
pub fn clip_grad_norm(
    py: Python<'_>,
    params: Vec<PyRef<'_, PyTensor>>,
    max_norm: f64,
) -> PyResult<f64> {
    let ps = handles(&params);
    let global = ps.iter().any(Tensor::is_global);
    run(py, global, move || {
        gflow::nn::utils::clip_grad_norm(&ps, max_norm)
    })
}

/// gflow's initial `Linear` parameters (PyTorch's scheme from gflow's generator): weight
/// (out, in) and bias (out) when `bias`.
#[pyfunction]
pub fn linear_init(
    py: Python<'_>,
    in_features: usize,
    out_features: usize,
    bias: bool,
) -> PyResult<(PyTensor, Option<PyTensor>)> {
    let l = run(py, false, move || {
        gflow::nn::Linear::new(in_features, out_features, bias)
    })?;
    Ok((
        PyTensor::new(l.weight().clone()),
        l.bias().cloned().map(PyTensor::new),
    ))
}

/// One of gflow's optimizers over parameter handles.
#[pyclass(name = "Optimizer", module = "gflow._gflow")]
pub struct PyOptimizer {
    inner: Mutex<Box<dyn Optimizer + Send>>,
    global: bool,
}

fn handles(params: &[PyRef<'_, PyTensor>]) -> Vec<Tensor> {
    params.iter().map(|p| p.get()).collect()
}

impl PyOptimizer {
    /// `opt` over `params`, stepping collectively when any of them is global.
    fn of(params: &[PyRef<'_, PyTensor>], opt: impl Optimizer + Send + 'static) -> Self {
        PyOptimizer {
            inner: Mutex::new(Box::new(opt)),
            global: params.iter().any(|p| p.get().is_global()),
        }
    }
}

#[pymethods]
impl PyOptimizer {
    /// SGD (`momentum`, `dampening`, `weight_decay`, `nesterov`, `maximize` as PyTorch's).
    #[staticmethod]
    #[pyo3(signature = (params, lr, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false, maximize = false))]
    fn sgd(
        params: Vec<PyRef<'_, PyTensor>>,
        lr: f64,
        momentum: f64,
        dampening: f64,
        weight_decay: f64,
        nesterov: bool,
        maximize: bool,
    ) -> Self {
        let opt = Sgd::new(handles(&params), lr)
            .momentum(momentum)
            .dampening(dampening)
            .weight_decay(weight_decay)
            .nesterov(nesterov)
            .maximize(maximize);
        PyOptimizer::of(&params, opt)
    }

    /// RMSprop (`alpha`, `eps`, `weight_decay`, `momentum`, `centered`, `maximize` as
    /// PyTorch's).
    #[staticmethod]
    #[pyo3(signature = (params, lr, alpha = 0.99, eps = 1e-8, weight_decay = 0.0, momentum = 0.0, centered = false, maximize = false))]
    #[allow(clippy::too_many_arguments)]
    fn rmsprop(
        params: Vec<PyRef<'_, PyTensor>>,
        lr: f64,
        alpha: f64,
        eps: f64,
        weight_decay: f64,
        momentum: f64,
        centered: bool,
        maximize: bool,
    ) -> Self {
        let opt = RmsProp::new(handles(&params), lr)
            .alpha(alpha)
            .eps(eps)
            .weight_decay(weight_decay)
            .momentum(momentum)
            .centered(centered)
            .maximize(maximize);
        PyOptimizer::of(&params, opt)
    }

    /// Adagrad (`lr_decay`, `weight_decay`, `initial_accumulator_value`, `eps`, `maximize` as
    /// PyTorch's).
    #[staticmethod]
    #[pyo3(signature = (params, lr, lr_decay = 0.0, weight_decay = 0.0, initial_accumulator_value = 0.0, eps = 1e-10, maximize = false))]
    fn adagrad(
        params: Vec<PyRef<'_, PyTensor>>,
        lr: f64,
        lr_decay: f64,
        weight_decay: f64,
        initial_accumulator_value: f64,
        eps: f64,
        maximize: bool,
    ) -> Self {
        let opt = Adagrad::new(handles(&params), lr)
            .lr_decay(lr_decay)
            .weight_decay(weight_decay)
            .initial_accumulator_value(initial_accumulator_value)
            .eps(eps)
            .maximize(maximize);
        PyOptimizer::of(&params, opt)
    }

    /// Adam (`betas`, `eps`, `weight_decay`, `amsgrad`, `maximize` as PyTorch's).
    #[staticmethod]
    #[pyo3(signature = (params, lr, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.0, amsgrad = false, maximize = false))]
    fn adam(
        params: Vec<PyRef<'_, PyTensor>>,
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
        maximize: bool,
    ) -> Self {
        let opt = Adam::new(handles(&params), lr)
            .betas(betas)
            .eps(eps)
            .weight_decay(weight_decay)
            .amsgrad(amsgrad)
            .maximize(maximize);
        PyOptimizer::of(&params, opt)
    }

    /// AdamW (decoupled weight decay, PyTorch's defaults; `amsgrad`, `maximize`).
    #[staticmethod]
    #[pyo3(signature = (params, lr, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.01, amsgrad = false, maximize = false))]
    fn adamw(
        params: Vec<PyRef<'_, PyTensor>>,
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        amsgrad: bool,
        maximize: bool,
    ) -> Self {
        let opt = AdamW::new(handles(&params), lr)
            .betas(betas)
            .eps(eps)
            .weight_decay(weight_decay)
            .amsgrad(amsgrad)
            .maximize(maximize);
        PyOptimizer::of(&params, opt)
    }

    /// Updates every parameter that has a gradient.
    fn step(&self, py: Python<'_>) -> PyResult<()> {
        let inner = &self.inner;
        run(py, self.global, move || {
            inner.lock().unwrap_or_else(|p| p.into_inner()).step()
        })
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .zero_grad();
    }

    /// The learning rate (settable, for schedules).
    #[getter]
    fn get_lr(&self) -> f64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).lr()
    }

    #[setter]
    fn set_lr(&self, lr: f64) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_lr(lr);
    }

    /// The optimizer's state as `(name, tensor handle)` pairs (`state.{i}.step`,
    /// `state.{i}.exp_avg`, ...; zeros made for parameters not stepped yet): what
    /// `flow.save` writes and `load_state_dict` fills in place.
    fn state_tensors(&self, py: Python<'_>) -> PyResult<Vec<(String, PyTensor)>> {
        let inner = &self.inner;
        let state = run(py, self.global, move || {
            inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .state_tensors()
        })?;
        Ok(state
            .into_iter()
            .map(|(n, t)| (n, PyTensor::new(t)))
            .collect())
    }
}
