//! The Rust half of `flow.save` / `flow.load`: a flat mapping of names to tensor handles and
//! small integers, written and read as gflow's sharded checkpoints ([`gflow::checkpoint`]): each
//! rank writes and reads only its own part of a global tensor, whatever the layout or world
//! size at load time.

use std::path::PathBuf;

use gflow::StateDict;
use pyo3::prelude::*;

use crate::tensor::{PyDType, PyTensor, run};

/// A state dict of handles on `tensors` and the `values`.
fn state_dict(tensors: &[(String, PyRef<'_, PyTensor>)], values: Vec<(String, i64)>) -> StateDict {
    let mut sd = StateDict::new();
    for (name, t) in tensors {
        sd.insert(name, &t.get());
    }
    for (name, v) in values {
        sd.insert_value(&name, v);
    }
    sd
}

/// Saves the tensors and values to the checkpoint directory `path` (collective over the world:
/// every rank calls it with the same names).
#[pyfunction]
pub fn save_checkpoint(
    py: Python<'_>,
    tensors: Vec<(String, PyRef<'_, PyTensor>)>,
    values: Vec<(String, i64)>,
    path: PathBuf,
) -> PyResult<()> {
    let sd = state_dict(&tensors, values);
    run(py, true, move || gflow::checkpoint::save(&sd, &path))
}

/// Fills `tensors` in place from the checkpoint at `path` (each rank reads its own part);
/// returns every small value the checkpoint holds. Collective over the world.
#[pyfunction]
pub fn load_checkpoint(
    py: Python<'_>,
    tensors: Vec<(String, PyRef<'_, PyTensor>)>,
    path: PathBuf,
) -> PyResult<Vec<(String, i64)>> {
    let mut sd = state_dict(&tensors, vec![]);
    run(py, true, move || {
        gflow::checkpoint::load(&mut sd, &path)?;
        Ok(sd
            .names()
            .into_iter()
            .filter_map(|n| sd.value(&n).map(|v| (n, v)))
            .collect())
    })
}

/// The tensors a checkpoint holds: `(name, shape, dtype)`, in name order.
#[pyfunction]
pub fn checkpoint_tensors(
    py: Python<'_>,
    path: PathBuf,
) -> PyResult<Vec<(String, Vec<usize>, PyDType)>> {
    let dir = path.clone();
    let index = run(py, false, move || gflow::checkpoint::read_index(&dir))?;
    index
        .tensors
        .into_iter()
        .map(|(name, e)| {
            let dtype = gflow::checkpoint::dtype::parse(&e.dtype)
                .and_then(gflow::checkpoint::dtype::from_safetensors)
                .ok_or_else(|| {
                    crate::error::to_py(gflow::Error::Checkpoint {
                        path: path.join("index.json").display().to_string(),
                        reason: format!("tensor {name:?} has the unknown dtype {:?}", e.dtype),
                    })
                })?;
            Ok((name, e.shape, PyDType { inner: dtype }))
        })
        .collect()
}

/// Writes the value of `src` into `dst` in place, whatever their layouts (each rank keeps its
/// part of a global `dst`; a local `src` stands for the whole value): `load_state_dict`.
#[pyfunction]
pub fn assign(py: Python<'_>, dst: &PyTensor, src: &PyTensor) -> PyResult<()> {
    let (d, s) = (dst.get(), src.get());
    let global = d.is_global() || s.is_global();
    run(py, global, move || gflow_core::state_dict::assign(&d, &s))
}
