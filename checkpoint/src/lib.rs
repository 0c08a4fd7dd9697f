//! Sharded, reshardable, atomic checkpoints of gflow's tensors.
//!
//! A checkpoint is one flat directory: `index.json` (per tensor its logical shape, dtype and
//! chunks: file, byte offset, box; and the small values) and one safetensors file per rank that
//! wrote something (`rank-NNNNN.safetensors`), nothing else. Each distinct box is written once
//! (a broadcast tensor by the first rank holding it; a partial tensor is reduced first).
//! [`load`] fills tensors of any placement, SBP and world size in place: each rank maps the
//! files and copies only the byte ranges that intersect its box. [`save()`] is atomic (see the
//! [`save`](mod@save) module for the protocol). [`load_safetensors`] and [`save_safetensors`]
//! read and write plain safetensors files as Python writes them.
//!
//! ```
//! use gflow_core::{nn::{self, Module}, StateDict};
//! let dir = std::env::temp_dir().join(format!("gflow-doc-ckpt-{}", std::process::id()));
//! let model = nn::Linear::new(3, 2, true)?;
//! let mut sd = StateDict::new();
//! sd.insert_module("model", &model);
//! sd.insert_value("step", 5);
//! gflow_checkpoint::save(&sd, &dir)?;
//!
//! let fresh = nn::Linear::new(3, 2, true)?;
//! let mut sd2 = StateDict::new();
//! sd2.insert_module("model", &fresh);
//! gflow_checkpoint::load(&mut sd2, &dir)?;
//! assert_eq!(fresh.weight().to_vec::<f32>()?, model.weight().to_vec::<f32>()?);
//! assert_eq!(sd2.value("step"), Some(5));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), gflow_core::Error>(())
//! ```

mod agree;
pub mod dtype;
pub mod index;
mod load;
mod plain;
mod region;
pub mod save;
pub mod shard;

pub use load::{load, read_index};
pub use plain::{load_safetensors, save_safetensors};
pub use save::save;

/// Whether `dir` holds a complete checkpoint (an `index.json` that parses, in a directory that
/// is not a save's temporary one): what a program resuming from its latest checkpoint asks.
pub fn is_complete(dir: impl AsRef<std::path::Path>) -> bool {
    read_index(dir.as_ref()).is_ok()
}
