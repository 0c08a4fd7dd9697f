//! gflow's one error type. Every fallible call returns [`Result`]; nothing a user can call panics on
//! bad input. Variants carry typed context (ranks, shapes, SBPs) rather than strings alone.

use crate::comm::CommError;
use crate::dtype::DType;

/// `Result<T, gflow::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in gflow.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A placement was given no ranks.
    #[error("placement has no ranks")]
    EmptyPlacement,
    /// A rank appears twice in one placement.
    #[error("rank {rank} appears more than once in the placement")]
    DuplicateRank {
        /// The repeated rank.
        rank: usize,
    },
    /// The rows of a multi-dimensional rank array differ in length.
    #[error("ragged rank array: row {row} has {got} entries, expected {expected}")]
    RaggedRanks {
        /// Index of the offending row.
        row: usize,
        /// Length of the first row.
        expected: usize,
        /// Length of the offending row.
        got: usize,
    },
    /// `Ranks::nd` got a flat list whose length is not the product of the shape.
    #[error("rank array of shape {shape:?} needs {} ranks, got {len}", shape.iter().product::<usize>())]
    RanksShape {
        /// The requested hierarchy.
        shape: Vec<usize>,
        /// Number of ranks given.
        len: usize,
    },
    /// A device type string other than `cpu`, `cuda`, `wgpu`, `gpu`.
    #[error("unknown device type {name:?}: expected \"cpu\", \"cuda\", \"wgpu\" or \"gpu\"")]
    UnknownDeviceType {
        /// What the user wrote.
        name: String,
    },
    /// The number of SBP entries differs from the placement's number of axes.
    #[error("sbp {sbp} has {sbp_axes} entries but the placement has {placement_axes} axes")]
    SbpAxesMismatch {
        /// The SBP as given.
        sbp: String,
        /// Entries in the SBP.
        sbp_axes: usize,
        /// Axes of the placement's rank array.
        placement_axes: usize,
    },
    /// `split(dim)` names a dimension the tensor does not have.
    #[error("split(dim={dim}) is out of range for a tensor with {ndim} dimensions")]
    SplitDimOutOfRange {
        /// The split dimension.
        dim: usize,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// A placement names a rank that the current world does not have.
    #[error("placement names rank {rank} but the world has {world_size} ranks")]
    RankOutOfWorld {
        /// The offending rank.
        rank: usize,
        /// Size of the current world.
        world_size: usize,
    },
    /// The number of values does not match the shape.
    #[error("{len} values cannot fill a tensor of shape {shape:?} ({} elements)", shape.iter().product::<usize>())]
    DataShapeMismatch {
        /// Number of values given.
        len: usize,
        /// Requested shape.
        shape: Vec<usize>,
    },
    /// A shape whose element count overflows `usize` or passes what one allocation can hold.
    #[error("shape {shape:?} has too many elements")]
    ShapeOverflow {
        /// The shape.
        shape: Vec<usize>,
    },
    /// Operand shapes that an operator cannot combine.
    #[error("{op}: shapes {shapes:?} do not fit: {reason}")]
    ShapeMismatch {
        /// The operator.
        op: &'static str,
        /// The operands' shapes.
        shapes: Vec<Vec<usize>>,
        /// What is wrong.
        reason: String,
    },
    /// A dimension index past the tensor's rank.
    #[error("{op}: dimension {dim} is out of range for a tensor with {ndim} dimensions")]
    DimOutOfRange {
        /// The operator.
        op: &'static str,
        /// The dimension.
        dim: usize,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// `to_local` / `to_vec` on a rank that holds no component of the tensor.
    #[error("rank {rank} is not in the placement {placement}")]
    NotInPlacement {
        /// This rank.
        rank: usize,
        /// The tensor's placement.
        placement: String,
    },
    /// Inputs of one operator live on different placements.
    #[error("{op}: inputs are on different placements: {left} and {right}")]
    PlacementMismatch {
        /// The operator.
        op: &'static str,
        /// First placement.
        left: String,
        /// Second placement.
        right: String,
    },
    /// An operation met a dtype other than the one it needs.
    #[error("dtype mismatch: expected {expected}, got {got}")]
    DTypeMismatch {
        /// Wanted dtype.
        expected: DType,
        /// Found dtype.
        got: DType,
    },
    /// Local tensors handed to `to_global` do not fit together under the requested SBP.
    #[error(
        "to_global: local tensor of rank {rank} has shape {got:?}, which does not fit {expected}"
    )]
    LocalShapeMismatch {
        /// The rank whose component does not fit.
        rank: usize,
        /// Its local shape.
        got: Vec<usize>,
        /// What it should look like.
        expected: String,
    },
    /// A global-only operation was called on a local tensor (or the reverse).
    #[error("{op} needs a {needs} tensor")]
    WrongKind {
        /// The operation.
        op: &'static str,
        /// "global" or "local".
        needs: &'static str,
    },
    /// Any other invalid argument, with a description.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The device type has no backend on this rank (no driver, no adapter, or not built in).
    #[error("backend for device {device:?} is unavailable: {reason}")]
    BackendUnavailable {
        /// The device type.
        device: String,
        /// Why.
        reason: String,
    },
    /// A device reported a failure nobody could foresee (a validation error, out of memory, a
    /// lost device), or cannot compute in the requested dtype.
    #[error("device {device:?}: {reason}")]
    Device {
        /// The device type.
        device: String,
        /// What happened.
        reason: String,
    },
    /// A collective or point-to-point transfer failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A simulated rank panicked (a gflow bug or a panic in user code).
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank.
        rank: usize,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// A multi-rank environment was requested but cannot be built.
    #[error("cannot start the distributed environment: {reason}")]
    Environment {
        /// Why.
        reason: String,
    },
    /// A backend that cannot compute a dtype, refused in core before any kernel runs (on every
    /// rank of the placement alike).
    #[error("{op}: device {device} cannot compute in {dtype}")]
    UnsupportedDType {
        /// The operator.
        op: &'static str,
        /// The dtype asked for.
        dtype: DType,
        /// The device that cannot compute it (`wgpu:0`).
        device: String,
    },
    /// Inputs of one local operator sit on different devices.
    #[error("{op}: inputs are on different devices: {left} and {right} (move one with to_device)")]
    DeviceMismatch {
        /// The operator.
        op: &'static str,
        /// First input's device.
        left: String,
        /// The other input's device.
        right: String,
    },
    /// An index outside its dimension (gather, index_select, embedding lookups, scatter_add).
    #[error("{op}: index {index} is out of range for a dimension of size {size}")]
    IndexOutOfRange {
        /// The operator.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The size of the indexed dimension.
        size: usize,
    },
    /// A checkpoint (or safetensors file) that cannot be saved or loaded.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The file or directory concerned.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A broken internal invariant: a gflow bug, reported instead of a panic.
    #[error("internal error (a gflow bug, please report): {0}")]
    Internal(String),
}

impl Error {
    /// True for errors that only echo a failure elsewhere (a peer that went away or timed out),
    /// so that the root cause can be reported first.
    pub fn is_consequence(&self) -> bool {
        matches!(
            self,
            Error::Comm(
                CommError::PeerGone { .. }
                    | CommError::PeerExited { .. }
                    | CommError::Timeout { .. }
            )
        )
    }
}
