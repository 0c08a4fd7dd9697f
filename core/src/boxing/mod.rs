//! Boxing: converting a global tensor from one (placement, nd_sbp) to another.
//!
//! The [`mod@plan`] module is pure: (shape, source, destination) gives a [`Plan`] of steps with a byte
//! cost, testable without running anything. Same-placement conversions change one placement
//! axis at a time with a 1-D collective inside each axis group (all-gather, all-reduce,
//! reduce-scatter, all-to-all, or a local slice/fill); a shortest-path search over the per-axis
//! states finds the cheapest order and undoes nested splits first. Everything else (other
//! placements, or when it is cheaper) goes through point-to-point redistribution that moves only
//! the intersections of source and destination boxes. Between partial layouts of one
//! reduction, the operands themselves move (a partial value does not depend on which rank
//! holds which operand): reordering or widening a partial placement moves nothing, narrowing
//! it reduces operands where they land. The [`exec`] module runs a plan over a
//! [`Communicator`](crate::comm::Communicator).

pub mod exec;
pub mod from_local;
pub mod plan;

pub use plan::{AxisKind, AxisStep, Dist, Piece, Plan, Redistribute, Step, Transfer, plan};
