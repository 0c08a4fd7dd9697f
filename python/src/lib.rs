//! `gflow._gflow`: the extension module under the Python package `gflow` (`import gflow as
//! flow`). The Rust side holds tensors, placements, SBPs, operators, gflow's losses and
//! optimizers; the Python package around it adds OneFlow's module layout (`flow.nn`,
//! `flow.sbp`, `flow.env`, `flow.optim`, `flow.distributed.launch`).

mod checkpoint;
mod creation;
mod error;
mod index;
mod inplace;
mod layout;
mod nn;
mod norm;
mod ops;
mod select;
mod share;
mod tensor;

use pyo3::prelude::*;

/// Joins the job named by the environment (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`,
/// `LOCAL_RANK`; a world of one when unset), as `gflow::init()`. Idempotent.
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<()> {
    tensor::run(py, true, || gflow::init().map(|_| ()))
}

/// This process's rank.
#[pyfunction]
fn get_rank(py: Python<'_>) -> PyResult<usize> {
    tensor::run(py, true, || gflow::init().map(|e| e.rank()))
}

/// The number of ranks of the job.
#[pyfunction]
fn get_world_size(py: Python<'_>) -> PyResult<usize> {
    tensor::run(py, true, || gflow::init().map(|e| e.world_size()))
}

/// This process's rank on its node.
#[pyfunction]
fn get_local_rank(py: Python<'_>) -> PyResult<usize> {
    tensor::run(py, true, || gflow::init().map(|e| e.local_rank()))
}

/// Seeds the global random generator (call it with the same seed on every rank).
#[pyfunction]
fn manual_seed(seed: u64) {
    gflow::manual_seed(seed);
}

/// Frees the host buffers gflow keeps for reuse by boxing outputs (as PyTorch's
/// `empty_cache`); returns the bytes freed.
#[pyfunction]
fn empty_cache() -> usize {
    gflow::empty_cache()
}

#[pymodule]
fn _gflow(m: &Bound<'_, PyModule>) -> PyResult<()> {
    error::register(m)?;
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<tensor::PyDType>()?;
    m.add_class::<tensor::NoGrad>()?;
    m.add_class::<layout::PyPlacement>()?;
    m.add_class::<layout::PySbp>()?;
    m.add_class::<nn::PyOptimizer>()?;
    m.add_class::<norm::PyNorm>()?;
    m.add_class::<share::Storage>()?;
    for (name, d) in tensor::dtypes() {
        m.add(name, tensor::PyDType { inner: d })?;
    }
    for (name, s) in layout::constants() {
        m.add(name, s)?;
    }
    m.add_function(wrap_pyfunction!(layout::split, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::is_grad_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::grad, m)?)?;
    m.add_function(wrap_pyfunction!(creation::constant, m)?)?;
    m.add_function(wrap_pyfunction!(tensor::_swap_grad_depth, m)?)?;
    m.add_function(wrap_pyfunction!(creation::randn, m)?)?;
    m.add_function(wrap_pyfunction!(creation::rand, m)?)?;
    m.add_function(wrap_pyfunction!(creation::zeros, m)?)?;
    m.add_function(wrap_pyfunction!(creation::ones, m)?)?;
    m.add_function(wrap_pyfunction!(creation::empty, m)?)?;
    m.add_function(wrap_pyfunction!(creation::full, m)?)?;
    m.add_function(wrap_pyfunction!(creation::arange, m)?)?;
    m.add_function(wrap_pyfunction!(creation::linspace, m)?)?;
    m.add_function(wrap_pyfunction!(creation::randint, m)?)?;
    m.add_function(wrap_pyfunction!(creation::randperm, m)?)?;
    m.add_function(wrap_pyfunction!(creation::tensor, m)?)?;
    m.add_function(wrap_pyfunction!(ops::cat, m)?)?;
    m.add_function(wrap_pyfunction!(ops::stack, m)?)?;
    m.add_function(wrap_pyfunction!(select::where_, m)?)?;
    m.add_function(wrap_pyfunction!(nn::linear, m)?)?;
    m.add_function(wrap_pyfunction!(nn::mse_loss, m)?)?;
    m.add_function(wrap_pyfunction!(nn::cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(nn::embedding, m)?)?;
    m.add_function(wrap_pyfunction!(nn::scaled_dot_product_attention, m)?)?;
    m.add_function(wrap_pyfunction!(nn::clip_grad_norm, m)?)?;
    m.add_function(wrap_pyfunction!(nn::linear_init, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::load_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::checkpoint_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint::assign, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(get_rank, m)?)?;
    m.add_function(wrap_pyfunction!(get_world_size, m)?)?;
    m.add_function(wrap_pyfunction!(get_local_rank, m)?)?;
    m.add_function(wrap_pyfunction!(manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    Ok(())
}
