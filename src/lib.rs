//! gflow: global tensors over many processes and many kinds of device. One program, written as if
//! for a single device, runs on many ranks; the runtime inserts the communication ("boxing").
//!
//! ```
//! use gflow::prelude::*;
//! let shapes = gflow::simulate(2, |env| {
//!     let p = Placement::new("cpu", [0, 1])?;
//!     let x = Tensor::randn(&[4, 5], (&p, Sbp::split(0)))?;
//!     Ok((env.rank(), x.shape().to_vec(), x.to_local()?.shape().to_vec()))
//! })?;
//! assert_eq!(shapes[1], (1, vec![4, 5], vec![2, 5]));
//! # Ok::<(), gflow::Error>(())
//! ```

pub use gflow_core::{
    CommError, Communicator, DType, Device, DeviceType, Element, Env, Error, HostData, IntoRanks,
    IntoTarget, NdSbp, Placement, Ranks, ReduceOp, Result, Sbp, Target, Tensor, boxing, comm,
    manual_seed, sbp, simulate,
};

/// Everything a program needs: `use gflow::prelude::*;`.
pub mod prelude {
    pub use gflow_core::{DType, Device, Env, NdSbp, Placement, Ranks, Result, Sbp, Tensor};
}

/// Starts (or returns) this process's environment from `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`,
/// `RANK` and `LOCAL_RANK`. With none of them set (or `WORLD_SIZE=1`) the world is this one
/// rank, so a program runs as is. Idempotent; the env becomes the process's current env.
///
/// # Errors
/// `Environment` when the variables are malformed, or when they ask for several processes: the
/// network transport is not part of this build yet (use [`simulate`] to run ranks as threads).
pub fn init() -> Result<Env> {
    if let Some(env) = Env::process() {
        return Ok(env);
    }
    let var = |k: &str| std::env::var(k).ok();
    let world = match var("WORLD_SIZE") {
        None => 1,
        Some(s) => s.parse::<usize>().map_err(|_| Error::Environment {
            reason: format!("WORLD_SIZE={s:?} is not a positive integer"),
        })?,
    };
    if world > 1 {
        return Err(Error::Environment {
            reason: format!(
                "WORLD_SIZE={world} asks for a multi-process world, but this gflow build has no network transport; run ranks as threads with gflow::simulate"
            ),
        });
    }
    Ok(Env::single().install_process())
}
