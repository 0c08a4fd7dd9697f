//! Plain safetensors files, as Python's `safetensors`, PyTorch's `save_file` and Hugging Face
//! write them: whole logical tensors by name, small values as `__metadata__` strings.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use gflow_core::state_dict::{Entry, StateDict};
use gflow_core::{Placement, Result, Sbp, Tensor, env, no_grad};

use crate::index::{Chunk, TensorEntry};
use crate::shard::{Piece, err};
use crate::{agree, dtype, load, region};

/// Loads the plain safetensors file `path` into `sd` (collective): every tensor of `sd` is
/// filled in place from the file's tensor of the same name, each rank copying only its own
/// box (any placement and SBP, e.g. a tensor-parallel split); values found in the file's
/// `__metadata__` (as [`save_safetensors`] writes them) are set.
///
/// # Errors
/// `Checkpoint` naming the file: missing, truncated or corrupt, a tensor it lacks, a shape or
/// dtype that differs.
pub fn load_safetensors(path: impl AsRef<Path>, sd: &mut StateDict) -> Result<()> {
    let path = path.as_ref();
    let mine = load_here(path, sd);
    let outcome = mine.as_ref().map(|_| ()).map_err(ToString::to_string);
    match (mine, agree::first_failure(&outcome)?) {
        (Err(e), _) => Err(e),
        (Ok(()), None) => Ok(()),
        (Ok(()), Some((r, reason))) => Err(err(path, format!("rank {r} failed: {reason}"))),
    }
}

fn load_here(path: &Path, sd: &mut StateDict) -> Result<()> {
    sd.check()?;
    let opened = crate::shard::open(path)?;
    let mut tensors = BTreeMap::new();
    let mut foreign = BTreeMap::new();
    for (name, info) in opened.meta.tensors() {
        let Some(d) = dtype::from_safetensors(info.dtype) else {
            foreign.insert(name, info.dtype);
            continue;
        };
        let (a, _) = info.data_offsets;
        tensors.insert(
            name,
            TensorEntry {
                shape: info.shape.clone(),
                dtype: dtype::name(dtype::to_safetensors(d).unwrap_or(info.dtype)),
                local: false,
                chunks: vec![Chunk {
                    file: String::new(),
                    offset: (opened.data_start + a) as u64,
                    region: info.shape.iter().map(|&n| [0, n]).collect(),
                    rank: None,
                }],
            },
        );
    }
    let meta = opened.meta.metadata().clone().unwrap_or_default();
    let mut values = vec![];
    for (name, e) in sd.entries() {
        match e {
            Entry::Tensor(t) => {
                if let Some(d) = foreign.get(name) {
                    return Err(err(
                        path,
                        format!("tensor {name:?} is {d:?}, a dtype gflow cannot hold"),
                    ));
                }
                let entry = load::check_entry(path, &tensors, name, t)?;
                fill_whole(path, &opened, entry, t)?;
            }
            Entry::Value(_) => {
                let v = meta
                    .get(&value_key(name))
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| err(path, format!("the file has no value {name:?}")))?;
                values.push((name.to_string(), v));
            }
        }
    }
    for (name, v) in values {
        sd.insert_value(&name, v);
    }
    Ok(())
}

/// The `__metadata__` key of small value `name`.
fn value_key(name: &str) -> String {
    format!("gflow.value.{name}")
}

/// Fills this rank's box of `t` from the single whole chunk of `entry` in `f`.
fn fill_whole(
    path: &Path,
    f: &crate::shard::Opened,
    entry: &TensorEntry,
    t: &Tensor,
) -> Result<()> {
    let Some(mybox) = region::my_box(t) else {
        return Ok(());
    };
    let identity = t.dist().and_then(|d| {
        let i = d.placement.index_of(env::current().rank())?;
        d.identity_op(&d.placement.coords_of_index(i))
    });
    let elem = t.dtype().size();
    let Some(c) = entry.chunks.first() else {
        return Err(err(path, "a tensor without data"));
    };
    let start = c.offset as usize;
    let len = c.numel() * elem;
    let src = f
        .map
        .get(start..start + len)
        .ok_or_else(|| err(path, "tensor data outside the file"))?;
    t.with_component_mut(|h| {
        if let Some(op) = identity {
            *h = gflow_core::HostData::identity(h.dtype(), h.len(), op);
        } else {
            region::copy_overlap(elem, src, &c.ranges(), h.as_bytes_mut(), &mybox);
            region::normalize_bools(h);
        }
        Ok(())
    })?;
    Ok(())
}

/// Writes `sd` as one plain safetensors file at `path` (collective): the whole logical
/// tensors, as Python reads them, gathered to rank 0, which writes the file under a temporary
/// name, syncs it and renames it into place; small values go to `__metadata__`. A local tensor
/// is rank 0's.
///
/// # Errors
/// `Checkpoint` naming the path for an I/O failure or a dtype safetensors cannot hold;
/// communication errors.
pub fn save_safetensors(sd: &StateDict, path: impl AsRef<Path>) -> Result<()> {
    sd.check()?;
    let path = path.as_ref();
    let rank = env::current().rank();
    let root = Placement::new("cpu", [0])?;
    let mut pieces = vec![];
    let mut meta = HashMap::new();
    for (name, e) in sd.entries() {
        match e {
            Entry::Value(v) => {
                meta.insert(value_key(name), v.to_string());
            }
            Entry::Tensor(t) => {
                let st = dtype::to_safetensors(t.dtype()).ok_or_else(|| {
                    err(
                        path,
                        format!("{name}: dtype {} has no safetensors name", t.dtype()),
                    )
                })?;
                let whole = match t.dist() {
                    Some(_) => no_grad(|| t.to_global(&root, Sbp::broadcast()))?,
                    None => t.clone(),
                };
                pieces.push(Piece {
                    name: name.to_string(),
                    dtype: st,
                    shape: t.shape().to_vec(),
                    source: whole,
                });
            }
        }
    }
    let written = if rank == 0 {
        let tmp = path.with_extension("partial");
        crate::shard::write(&tmp, &pieces, (!meta.is_empty()).then_some(meta))
            .and_then(|_| {
                std::fs::rename(&tmp, path)
                    .map_err(|e| err(path, format!("cannot rename into place: {e}")))
            })
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                e.to_string()
            })
    } else {
        Ok(())
    };
    match agree::first_failure(&written)? {
        None => Ok(()),
        Some((_, reason)) => Err(err(path, reason)),
    }
}
