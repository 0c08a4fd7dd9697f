//! gflow's core: global tensors and their boxing, with no I/O and no heavy dependencies.
//!
//! A global tensor has a logical shape, a [`Placement`] (a device type and an n-d array of
//! ranks) and an [`NdSbp`] (split, broadcast or partial per placement axis). Converting between
//! layouts ("boxing") is planned by a pure planner ([`boxing::plan()`]) and run over a
//! [`Communicator`]. [`simulate`] runs n ranks as threads of one process.
//!
//! ```
//! use gflow_core::{simulate, Placement, Sbp, Tensor};
//! let out = simulate(2, |_env| {
//!     let p = Placement::new("cpu", [0, 1])?;
//!     let x = Tensor::arange(6, (&p, Sbp::split(0)))?;      // ranks hold [0,1,2] and [3,4,5]
//!     let b = x.to_global(&p, Sbp::broadcast())?;           // all-gather
//!     b.to_local()?.to_vec::<f32>()
//! })?;
//! assert_eq!(out[1], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! # Ok::<(), gflow_core::Error>(())
//! ```

pub mod autograd;
pub mod backend;
pub mod boxing;
pub mod comm;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod cpu;
pub mod device;
pub mod dtype;
pub mod env;
pub mod error;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod placement;
pub mod profile;
mod recycle;
pub mod reduce;
pub mod rng;
pub mod sbp;
pub mod shape;
pub mod state_dict;
pub mod storage;
pub mod tensor;

pub use autograd::{is_grad_enabled, no_grad, no_sync};
pub use comm::{
    Collectives, CommError, CommOp, CommStats, Communicator, Exchange, Inbound, Outbound, Payload,
    Policy, Reduction, Schedule, Tag, comm_stats, reset_comm_stats,
};
pub use device::{DeviceInfo, DeviceKind, devices};
pub use dtype::{DType, Element, bf16, f16};
pub use env::{Env, manual_seed, simulate};
pub use error::{Error, Result};
pub use ops::Dims;
pub use placement::{DeviceType, IntoRanks, Placement, Ranks};
pub use recycle::empty_cache;
pub use reduce::ReduceOp;
pub use sbp::{NdSbp, Sbp};
pub use state_dict::StateDict;
pub use storage::{Buffer, HostData};
pub use tensor::{Device, IntoTarget, Target, Tensor};
