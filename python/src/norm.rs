//! `flow.nn.LayerNorm` and `flow.nn.RMSNorm`: gflow's own layers (`gflow::nn::LayerNorm`,
//! `gflow::nn::RMSNorm`, with their fused kernels), run with the parameter tensors the Python
//! module holds at each call, so `module.to_global` and `load_state_dict` (which rebind or
//! overwrite those) are followed.

use std::sync::Mutex;

use gflow::nn::{LayerNorm, Module, RMSNorm};
use pyo3::prelude::*;

use crate::tensor::{PyTensor, op, run};

/// A normalisation layer of gflow's.
#[pyclass(name = "_Norm", module = "gflow._gflow", frozen)]
pub struct PyNorm {
    inner: Mutex<Box<dyn Module>>,
}

impl PyNorm {
    fn new(m: impl Module + 'static) -> PyNorm {
        PyNorm {
            inner: Mutex::new(Box::new(m)),
        }
    }
}

#[pymethods]
impl PyNorm {
    /// LayerNorm over trailing dims of sizes `shape`, with `eps`; weight ones, bias zeros.
    #[staticmethod]
    fn layer_norm(py: Python<'_>, shape: Vec<usize>, eps: f64) -> PyResult<Self> {
        run(py, false, || LayerNorm::new(shape).map(|m| m.with_eps(eps))).map(PyNorm::new)
    }

    /// RMSNorm over a last dim of size `dim`, with `eps`; weight ones.
    #[staticmethod]
    fn rms_norm(py: Python<'_>, dim: usize, eps: f64) -> PyResult<Self> {
        run(py, false, || RMSNorm::new(dim).map(|m| m.with_eps(eps))).map(PyNorm::new)
    }

    /// The layer's initial parameters, in its order (`weight`, then `bias` for LayerNorm).
    fn parameters(&self) -> Vec<PyTensor> {
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        m.parameters().into_iter().map(PyTensor::new).collect()
    }

    /// The layer applied to `x` with `params` (as `parameters()`) as its parameters.
    fn forward(
        &self,
        py: Python<'_>,
        x: &PyTensor,
        params: Vec<PyRef<'_, PyTensor>>,
    ) -> PyResult<PyTensor> {
        let x = x.get();
        let mut given: Vec<gflow::Tensor> = params.iter().map(|p| p.get()).collect();
        let global = x.is_global() || given.iter().any(gflow::Tensor::is_global);
        let inner = &self.inner;
        op(py, global, move || {
            let mut m = inner.lock().unwrap_or_else(|p| p.into_inner());
            let want = m.parameters().len();
            if given.len() != want {
                return Err(gflow::Error::InvalidArgument {
                    op: "norm layer",
                    reason: format!("{want} parameters expected, {} given", given.len()),
                });
            }
            given.reverse();
            m.map_parameters(&mut |_| {
                given.pop().ok_or(gflow::Error::Internal(
                    "a norm parameter went missing".into(),
                ))
            })?;
            m.forward(&x)
        })
    }
}
