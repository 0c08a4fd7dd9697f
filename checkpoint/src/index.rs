//! `index.json`: what a checkpoint directory holds. Per tensor its logical shape, dtype and
//! chunks (a box of the logical tensor, stored row-major in a safetensors file at a byte
//! offset); the small values. [`Index::parse`] checks everything a load relies on, so a corrupt
//! index is a typed error and never a panic or an out-of-range read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The format name written in every index.
pub const FORMAT: &str = "gflow-checkpoint";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// The whole index.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The tensors by name.
    pub tensors: BTreeMap<String, TensorEntry>,
    /// The small values by name.
    pub values: BTreeMap<String, i64>,
}

/// One tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// The logical (global) shape.
    pub shape: Vec<usize>,
    /// The safetensors dtype name (`"F32"`).
    pub dtype: String,
    /// Whether it was a local tensor (each rank's own, whole; chunks carry `rank`).
    #[serde(default)]
    pub local: bool,
    /// Where its elements are.
    pub chunks: Vec<Chunk>,
}

/// One stored box.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// The safetensors file (a plain name in the checkpoint directory).
    pub file: String,
    /// The byte offset of the box's first element in that file.
    pub offset: u64,
    /// The box: `[start, end)` per dimension of the logical tensor.
    #[serde(rename = "box")]
    pub region: Vec<[usize; 2]>,
    /// For a local tensor, the rank whose tensor this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
}

impl Chunk {
    /// The box as ranges.
    pub fn ranges(&self) -> Vec<std::ops::Range<usize>> {
        self.region.iter().map(|[a, b]| *a..*b).collect()
    }

    /// Number of elements in the box.
    pub fn numel(&self) -> usize {
        self.region.iter().map(|[a, b]| b - a).product()
    }
}

impl Index {
    /// Parses and checks an index: the format and version, dtype names, file names without
    /// directories, boxes inside their tensor's shape, and for a global tensor disjoint boxes
    /// covering it exactly.
    ///
    /// # Errors
    /// What is wrong, as a sentence (the caller names the file).
    pub fn parse(bytes: &[u8]) -> Result<Index, String> {
        let index: Index =
            serde_json::from_slice(bytes).map_err(|e| format!("corrupt index.json: {e}"))?;
        if index.format != FORMAT || index.version != VERSION {
            return Err(format!(
                "index.json is format {:?} version {}, expected {FORMAT:?} version {VERSION}",
                index.format, index.version
            ));
        }
        for (name, t) in &index.tensors {
            t.check().map_err(|e| format!("tensor {name:?}: {e}"))?;
        }
        Ok(index)
    }
}

impl TensorEntry {
    fn check(&self) -> Result<(), String> {
        if crate::dtype::parse(&self.dtype).is_none() {
            return Err(format!("unknown dtype {:?}", self.dtype));
        }
        let numel = self
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or("the shape overflows")?;
        for c in &self.chunks {
            let bad_name = c.file.is_empty()
                || c.file.contains(['/', '\\'])
                || c.file.starts_with('.')
                || c.file == "index.json";
            if bad_name {
                return Err(format!("chunk file {:?} is not a plain file name", c.file));
            }
            if c.region.len() != self.shape.len()
                || c.region
                    .iter()
                    .zip(&self.shape)
                    .any(|(&[a, b], &d)| a > b || b > d)
            {
                return Err(format!(
                    "chunk box {:?} does not fit the shape {:?}",
                    c.region, self.shape
                ));
            }
            // Writers store no empty box of a global tensor; refusing them bounds the chunks by
            // the elements, and so the pairwise disjointness check below.
            if !self.local && c.numel() == 0 {
                return Err(format!("chunk box {:?} is empty", c.region));
            }
            if c.rank.is_some() != self.local {
                return Err("a chunk's rank must be given exactly for local tensors".into());
            }
        }
        if self.local {
            let mut ranks: Vec<usize> = self.chunks.iter().filter_map(|c| c.rank).collect();
            ranks.sort_unstable();
            if ranks.windows(2).any(|w| w[0] == w[1])
                || self.chunks.iter().any(|c| c.numel() != numel)
            {
                return Err("a local tensor needs one whole chunk per rank".into());
            }
            return Ok(());
        }
        let covered = self
            .chunks
            .iter()
            .try_fold(0usize, |a, c| a.checked_add(c.numel()))
            .unwrap_or(usize::MAX);
        let disjoint = self.chunks.iter().enumerate().all(|(i, a)| {
            self.chunks[i + 1..].iter().all(|b| {
                a.region
                    .iter()
                    .zip(&b.region)
                    .any(|([s0, e0], [s1, e1])| s0.max(s1) >= e0.min(e1))
            })
        });
        if covered != numel || !disjoint {
            return Err(format!(
                "the chunks cover {covered} of {numel} elements or overlap"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index of one tensor of shape [4, 2] with `chunks` (JSON) and `local`.
    fn parse(chunks: &str, local: bool) -> Result<Index, String> {
        let json = format!(
            r#"{{"format":"gflow-checkpoint","version":1,"values":{{}},"tensors":{{"t":{{"shape":[4,2],"dtype":"F32","local":{local},"chunks":{chunks}}}}}}}"#
        );
        Index::parse(json.as_bytes())
    }

    #[test]
    fn parse_accepts_exact_covers_and_names_each_defect() {
        let f = r#""file":"rank-00000.safetensors","offset":8"#;
        assert!(
            parse(
                &format!(r#"[{{{f},"box":[[0,2],[0,2]]}},{{{f},"box":[[2,4],[0,2]]}}]"#),
                false
            )
            .is_ok()
        );
        assert!(parse(&format!(r#"[{{{f},"box":[[0,4],[0,2]],"rank":0}}]"#), true).is_ok());
        for (chunks, local, want) in [
            (
                r#"[{F,"box":[[0,3],[0,2]]},{F,"box":[[2,4],[0,2]]}]"#,
                false,
                "overlap",
            ),
            (r#"[{F,"box":[[0,2],[0,2]]}]"#, false, "cover 4 of 8"),
            (
                r#"[{F,"box":[[0,4],[0,2]]},{F,"box":[[1,1],[0,2]]}]"#,
                false,
                "is empty",
            ),
            (r#"[{F,"box":[[0,5],[0,2]]}]"#, false, "does not fit"),
            (r#"[{F,"box":[[0,4],[0,2]]}]"#, true, "rank must be given"),
            (
                r#"[{"file":"../x","offset":8,"box":[[0,4],[0,2]]}]"#,
                false,
                "plain file name",
            ),
        ] {
            let e = parse(&chunks.replace('F', f), local).unwrap_err();
            assert!(e.contains(want), "{chunks}: {e}");
        }
    }
}
