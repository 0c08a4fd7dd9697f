//! The collective, atomic save.
//!
//! Protocol (every rank runs it, in the same order):
//! 1. Rank 0 makes an empty temporary directory `.<name>.partial` beside the target; the ranks
//!    agree it exists.
//! 2. Partial tensors are reduced (to broadcast on their partial axes). Each rank writes the
//!    boxes only it is first to hold into its own `rank-NNNNN.safetensors`, synced to disk.
//! 3. The ranks exchange reports (their chunks, or why they failed). If any failed, rank 0
//!    removes the temporary directory and every rank returns that failure: a previous
//!    checkpoint at the target is untouched.
//! 4. Otherwise rank 0 writes `index.json` (synced), then swaps the directory into place by
//!    an atomic exchange with a previous checkpoint at the target (`swap_in`) and syncs
//!    the parent; the ranks agree on the outcome.
//!
//! A directory without `index.json`, or named `.*.partial`, is never a checkpoint, so a crash
//! at any point leaves the previous checkpoint loadable and nothing that `load` would accept
//! as a new one.

use std::fs;
use std::path::{Path, PathBuf};

use gflow_core::sbp::{NdSbp, Sbp};
use gflow_core::state_dict::{Entry, StateDict};
use gflow_core::{Result, Tensor, env, no_grad};
use serde::{Deserialize, Serialize};

use crate::index::{Chunk, FORMAT, Index, TensorEntry, VERSION};
use crate::shard::{Piece, err};
use crate::{agree, dtype, region};

/// The temporary directory of a save to `dir`.
pub fn partial_dir(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.partial"))
}

/// What a rank wrote: (tensor name, chunk).
#[derive(Serialize, Deserialize)]
struct Report(Vec<(String, Chunk)>);

/// `t` with every partial axis reduced (collective on its placement).
fn reduced(t: &Tensor) -> Result<Tensor> {
    match t.dist() {
        Some(d) if d.nd_sbp.has_partial() => {
            let sbp: Vec<Sbp> = d
                .nd_sbp
                .as_slice()
                .iter()
                .map(|s| {
                    if s.partial_op().is_some() {
                        Sbp::broadcast()
                    } else {
                        *s
                    }
                })
                .collect();
            no_grad(|| t.to_global(&d.placement, NdSbp::from(sbp)))
        }
        _ => Ok(t.clone()),
    }
}

/// Saves `sd` to the directory `dir` (collective: every rank calls it). See the module docs
/// for the format and the atomicity protocol.
///
/// # Errors
/// `Checkpoint` naming the path for I/O failures (no space, no permission) on any rank (every
/// rank gets it) or a dtype safetensors cannot hold; communication errors.
pub fn save(sd: &StateDict, dir: impl AsRef<Path>) -> Result<()> {
    sd.check()?;
    let dir = dir.as_ref();
    let rank = env::current().rank();
    let tmp = partial_dir(dir);
    let made = if rank == 0 {
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))
    } else {
        Ok(())
    };
    if let Some((_, reason)) = agree::first_failure(&made)? {
        return Err(err(dir, reason));
    }
    let written = write_shard(sd, &tmp, rank);
    let mine = match &written {
        Ok(chunks) => {
            let mut b = vec![b'+'];
            b.extend(serde_json::to_vec(&Report(chunks.clone())).unwrap_or_default());
            b
        }
        Err(e) => std::iter::once(b'!').chain(e.to_string().bytes()).collect(),
    };
    let reports = agree::gather(&mine)?;
    let failed = reports
        .iter()
        .enumerate()
        .find(|(_, b)| b.first() != Some(&b'+'));
    if let Some((r, b)) = failed {
        if rank == 0 {
            let _ = fs::remove_dir_all(&tmp);
        }
        let reason = String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned();
        return Err(written
            .err()
            .unwrap_or_else(|| err(dir, format!("rank {r} failed: {reason}"))));
    }
    let committed = if rank == 0 {
        commit(sd, dir, &tmp, &reports).map_err(|e| e.to_string())
    } else {
        Ok(())
    };
    match agree::first_failure(&committed)? {
        None => Ok(()),
        Some((_, reason)) => Err(err(dir, reason)),
    }
}

/// Reduces partial tensors and writes this rank's boxes; returns its chunks.
fn write_shard(sd: &StateDict, tmp: &Path, rank: usize) -> Result<Vec<(String, Chunk)>> {
    let file = format!("rank-{rank:05}.safetensors");
    let path = tmp.join(&file);
    let mut pieces = vec![];
    let mut boxes = vec![];
    for (name, e) in sd.entries() {
        let Entry::Tensor(t) = e else { continue };
        let st = dtype::to_safetensors(t.dtype()).ok_or_else(|| {
            err(
                &path,
                format!("{name}: dtype {} has no safetensors name", t.dtype()),
            )
        })?;
        let t = reduced(t)?;
        if !region::writes(&t) {
            continue;
        }
        let Some(b) = region::my_box(&t) else {
            continue;
        };
        pieces.push(Piece {
            name: name.to_string(),
            dtype: st,
            shape: b.iter().map(|r| r.len()).collect(),
            source: t.clone(),
        });
        boxes.push((name.to_string(), b, t.is_local()));
    }
    if pieces.is_empty() {
        return Ok(vec![]);
    }
    let offsets = crate::shard::write(&path, &pieces, None)?;
    Ok(boxes
        .into_iter()
        .zip(offsets)
        .map(|((name, b, local), offset)| {
            let chunk = Chunk {
                file: file.clone(),
                offset,
                region: b.iter().map(|r| [r.start, r.end]).collect(),
                rank: local.then_some(rank),
            };
            (name, chunk)
        })
        .collect())
}

/// Rank 0: writes the index from every rank's report and moves the directory into place.
fn commit(sd: &StateDict, dir: &Path, tmp: &Path, reports: &[Vec<u8>]) -> Result<()> {
    let mut index = Index {
        format: FORMAT.into(),
        version: VERSION,
        ..Index::default()
    };
    for (name, e) in sd.entries() {
        match e {
            Entry::Value(v) => {
                index.values.insert(name.to_string(), *v);
            }
            Entry::Tensor(t) => {
                let st = dtype::to_safetensors(t.dtype())
                    .ok_or_else(|| err(dir, format!("{name}: dtype {} unsupported", t.dtype())))?;
                index.tensors.insert(
                    name.to_string(),
                    TensorEntry {
                        shape: t.shape().to_vec(),
                        dtype: dtype::name(st),
                        local: t.is_local(),
                        chunks: vec![],
                    },
                );
            }
        }
    }
    for b in reports {
        let Report(chunks) = serde_json::from_slice(&b[1..])
            .map_err(|e| err(dir, format!("a rank's report is corrupt: {e}")))?;
        for (name, c) in chunks {
            if let Some(t) = index.tensors.get_mut(&name) {
                t.chunks.push(c);
            }
        }
    }
    let path = tmp.join("index.json");
    let io = |p: &Path, e: std::io::Error| err(p, format!("cannot write: {e}"));
    let bytes = serde_json::to_vec_pretty(&index).map_err(|e| err(&path, e.to_string()))?;
    let f = fs::File::create(&path).map_err(|e| io(&path, e))?;
    std::io::Write::write_all(&mut &f, &bytes).map_err(|e| io(&path, e))?;
    f.sync_all().map_err(|e| io(&path, e))?;
    sync_dir(tmp)?;
    swap_in(tmp, dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Moves the finished `tmp` to `dir`. A previous checkpoint at `dir` is exchanged with it in one
/// atomic step where the platform can (Linux `renameat2(RENAME_EXCHANGE)`), so `dir` always holds
/// a complete checkpoint; elsewhere it is moved aside to `.<name>.old` first (a crash between
/// the two renames leaves it there, complete).
fn swap_in(tmp: &Path, dir: &Path) -> Result<()> {
    let into_place = |e: std::io::Error| {
        err(
            dir,
            format!("cannot rename {} into place: {e}", tmp.display()),
        )
    };
    if !dir.exists() {
        return fs::rename(tmp, dir).map_err(into_place);
    }
    #[cfg(target_os = "linux")]
    if exchange(tmp, dir).is_ok() {
        let _ = fs::remove_dir_all(tmp);
        return Ok(());
    }
    let old = dir.with_file_name(format!(
        ".{}.old",
        dir.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let _ = fs::remove_dir_all(&old);
    fs::rename(dir, &old).map_err(|e| {
        err(
            dir,
            format!("cannot move the previous checkpoint aside: {e}"),
        )
    })?;
    fs::rename(tmp, dir).map_err(into_place)?;
    let _ = fs::remove_dir_all(&old);
    Ok(())
}

/// Swaps the directories `a` and `b` atomically (fails where the file system cannot).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Syncs a directory's entries to disk (a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err(dir, format!("cannot sync: {e}")))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
