//! The collective load into tensors of any layout: each rank maps the shards and copies only
//! the parts of the chunks that intersect its own box.

use std::collections::HashMap;
use std::path::Path;

use gflow_core::state_dict::{Entry, StateDict};
use gflow_core::storage::HostData;
use gflow_core::{Error, Result, Tensor, env};

use crate::index::{Index, TensorEntry};
use crate::shard::{Opened, err};
use crate::{agree, dtype, region};

/// Reads and checks `dir/index.json`, refusing a half-written directory.
///
/// # Errors
/// `Checkpoint`: a missing directory or index, a temporary (`.*.partial`) directory, a
/// corrupt index.
pub fn read_index(dir: impl AsRef<Path>) -> Result<Index> {
    let dir = dir.as_ref();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.ends_with(".partial") {
        return Err(err(
            dir,
            "a half-written save (a temporary directory), not a checkpoint",
        ));
    }
    if !dir.is_dir() {
        return Err(err(dir, "no such checkpoint directory"));
    }
    let path = dir.join("index.json");
    let bytes = std::fs::read(&path).map_err(|e| {
        err(
            &path,
            format!("cannot read the index ({e}): not a complete checkpoint"),
        )
    })?;
    Index::parse(&bytes).map_err(|reason| err(&path, reason))
}

/// Checks that the checkpoint has `name` with `t`'s shape and dtype.
pub fn check_entry<'a>(
    path: &Path,
    tensors: &'a std::collections::BTreeMap<String, TensorEntry>,
    name: &str,
    t: &Tensor,
) -> Result<&'a TensorEntry> {
    let e = tensors
        .get(name)
        .ok_or_else(|| err(path, format!("the checkpoint has no tensor {name:?}")))?;
    let want = dtype::to_safetensors(t.dtype()).map(dtype::name);
    if e.shape != t.shape() || want.as_deref() != Some(e.dtype.as_str()) {
        return Err(err(
            path,
            format!(
                "tensor {name:?} is {:?} {} in the checkpoint but {:?} {} here",
                e.shape,
                e.dtype,
                t.shape(),
                t.dtype()
            ),
        ));
    }
    Ok(e)
}

/// Loads the checkpoint in `dir` into `sd` (collective): fills every tensor of `sd` in place,
/// whatever its placement, SBP or the world size the checkpoint was saved with, and sets every
/// small value the checkpoint holds.
///
/// # Errors
/// `Checkpoint` naming the path: missing directory or index, half-written directory, corrupt
/// index, missing or truncated shard, a name the checkpoint lacks, a shape or dtype that
/// differs. Every rank gets an error when any rank fails.
pub fn load(sd: &mut StateDict, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    let mine = load_here(sd, dir);
    let outcome = mine.as_ref().map(|_| ()).map_err(ToString::to_string);
    match (mine, agree::first_failure(&outcome)?) {
        (Err(e), _) => Err(e),
        (Ok(()), None) => Ok(()),
        (Ok(()), Some((r, reason))) => Err(err(dir, format!("rank {r} failed: {reason}"))),
    }
}

fn load_here(sd: &mut StateDict, dir: &Path) -> Result<()> {
    sd.check()?;
    let index = read_index(dir)?;
    let ipath = dir.join("index.json");
    let mut jobs = vec![];
    for (name, e) in sd.entries() {
        match e {
            Entry::Tensor(t) => {
                jobs.push((check_entry(&ipath, &index.tensors, name, t)?, t.clone()))
            }
            Entry::Value(_) => {
                if !index.values.contains_key(name) {
                    return Err(err(&ipath, format!("the checkpoint has no value {name:?}")));
                }
            }
        }
    }
    let mut files: HashMap<String, Opened> = HashMap::new();
    let rank = env::current().rank();
    for (entry, t) in jobs {
        fill(dir, &mut files, entry, &t, rank)?;
    }
    for (name, v) in index.values {
        sd.insert_value(&name, v);
    }
    Ok(())
}

/// Fills this rank's component of `t` from the chunks of `entry`.
fn fill(
    dir: &Path,
    files: &mut HashMap<String, Opened>,
    entry: &TensorEntry,
    t: &Tensor,
    rank: usize,
) -> Result<()> {
    let Some(mybox) = region::my_box(t) else {
        return Ok(());
    };
    let coords_identity = t.dist().and_then(|d| {
        let i = d.placement.index_of(rank)?;
        d.identity_op(&d.placement.coords_of_index(i))
    });
    let elem = t.dtype().size();
    let want: usize = mybox.iter().map(|r| r.len()).product();
    let chunks: Vec<_> = entry
        .chunks
        .iter()
        .filter(|c| !entry.local || c.rank == Some(rank))
        .collect();
    if entry.local && chunks.is_empty() {
        return Err(err(
            &dir.join("index.json"),
            format!("the checkpoint holds no local tensor of rank {rank}"),
        ));
    }
    t.with_component_mut(|h: &mut HostData| {
        if let Some(op) = coords_identity {
            *h = HostData::identity(h.dtype(), h.len(), op);
            return Ok(());
        }
        let dst = h.as_bytes_mut();
        let mut copied = 0;
        for c in &chunks {
            let cbox = c.ranges();
            if gflow_core::shape::intersect(&cbox, &mybox).is_none() {
                continue;
            }
            let path = dir.join(&c.file);
            if !files.contains_key(&c.file) {
                files.insert(c.file.clone(), crate::shard::open(&path)?);
            }
            let f = files
                .get(&c.file)
                .ok_or_else(|| Error::Internal("shard vanished".into()))?;
            let len = c.numel().saturating_mul(elem);
            let start = usize::try_from(c.offset).unwrap_or(usize::MAX);
            let src = start
                .checked_add(len)
                .filter(|&end| start >= f.data_start && end <= f.map.len())
                .map(|end| &f.map[start..end])
                .ok_or_else(|| {
                    err(
                        &path,
                        format!(
                            "chunk at byte {start} (+{len}) lies outside the file (truncated?)"
                        ),
                    )
                })?;
            copied += region::copy_overlap(elem, src, &cbox, dst, &mybox);
        }
        region::normalize_bools(h);
        if copied != want {
            return Err(err(
                dir,
                format!("the chunks cover {copied} of this rank's {want} elements"),
            ));
        }
        Ok(())
    })?;
    Ok(())
}
