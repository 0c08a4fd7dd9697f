//! Safetensors files: writing one from tensor components streamed straight from their
//! buffers (no staging copy), and opening one memory-mapped with its header checked.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use gflow_core::{Error, Result, Tensor};
use memmap2::Mmap;
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};

/// A checkpoint error about `path`.
pub fn err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// One tensor of a file being written: its name in the file, dtype, shape, and the tensor
/// whose component (on this rank) holds its bytes.
pub struct Piece {
    /// The name in the file.
    pub name: String,
    /// The safetensors dtype.
    pub dtype: Dtype,
    /// The shape of the stored box.
    pub shape: Vec<usize>,
    /// The tensor whose component on this rank is the box.
    pub source: Tensor,
}

/// Writes `pieces` as a safetensors file at `path`, synced to disk, and returns each piece's
/// byte offset in the file (in `pieces` order).
///
/// # Errors
/// `Checkpoint` naming `path` for an I/O failure (no space, no permission).
pub fn write(
    path: &Path,
    pieces: &[Piece],
    meta: Option<HashMap<String, String>>,
) -> Result<Vec<u64>> {
    let io = |e: std::io::Error| err(path, format!("cannot write: {e}"));
    let mut infos = vec![];
    let mut at = 0usize;
    for p in pieces {
        let len = p.shape.iter().product::<usize>() * p.dtype.bitsize() / 8;
        infos.push((
            p.name.clone(),
            TensorInfo {
                dtype: p.dtype,
                shape: p.shape.clone(),
                data_offsets: (at, at + len),
            },
        ));
        at += len;
    }
    let header = Metadata::new(meta, infos)
        .and_then(|m| serde_json::to_vec(&m).map_err(safetensors::SafeTensorError::JsonError))
        .map_err(|e| err(path, format!("cannot build the safetensors header: {e}")))?;
    let mut header = header;
    header.resize(header.len().next_multiple_of(8), b' ');
    let base = 8 + header.len() as u64;
    let mut f = BufWriter::with_capacity(1 << 22, File::create(path).map_err(io)?);
    f.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    f.write_all(&header).map_err(io)?;
    let mut offsets = vec![];
    let mut pos = 0u64;
    for p in pieces {
        offsets.push(base + pos);
        let bytes = p
            .source
            .with_component(|h| f.write_all(h.as_bytes()).map(|()| h.as_bytes().len()))?
            .ok_or_else(|| err(path, format!("this rank holds no part of {}", p.name)))?
            .map_err(io)?;
        pos += bytes as u64;
    }
    let file = f.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(offsets)
}

/// A safetensors file mapped into memory, its header checked (so a truncated file or a
/// header that points outside it is an error here, not a bad read later).
pub struct Opened {
    /// The mapping.
    pub map: Mmap,
    /// The byte offset of the data section.
    pub data_start: usize,
    /// The header.
    pub meta: Metadata,
}

/// Opens and checks the safetensors file `path`.
///
/// # Errors
/// `Checkpoint` naming `path`: missing, unreadable, truncated, or a corrupt header.
pub fn open(path: &Path) -> Result<Opened> {
    let file = File::open(path).map_err(|e| err(path, format!("cannot open: {e}")))?;
    // SAFETY: the mapping is read-only and checkpoint files are not modified while loaded
    // (saves write to a new directory and rename it into place).
    let map = unsafe { Mmap::map(&file) }.map_err(|e| err(path, format!("cannot map: {e}")))?;
    let (n, meta) = header(&map).map_err(|e| err(path, e))?;
    Ok(Opened {
        map,
        data_start: 8 + n,
        meta,
    })
}

/// Parses and checks a safetensors header against the whole file's bytes.
///
/// # Errors
/// What is wrong, as a sentence.
pub fn header(bytes: &[u8]) -> std::result::Result<(usize, Metadata), String> {
    SafeTensors::read_metadata(bytes).map_err(|e| match e {
        safetensors::SafeTensorError::MetadataIncompleteBuffer
        | safetensors::SafeTensorError::HeaderTooSmall
        | safetensors::SafeTensorError::InvalidHeaderLength => {
            format!("truncated or corrupt safetensors file ({e:?})")
        }
        other => format!("corrupt safetensors header ({other:?})"),
    })
}
