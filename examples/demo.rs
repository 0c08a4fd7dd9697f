//! The main demo: four ranks hold one global tensor and convert it between layouts; gflow does
//! every collective. Under `gflow-launch` each rank is a process (shared-memory links between
//! them); run alone, the four ranks are threads of one process.
//!
//! Run: `./scripts/demo.sh` (4 processes), or `cargo run --release --example demo` (threads).

use gflow::prelude::*;

/// Large buffers in shared memory: a collective between processes of one host copies each
/// payload once, out of the sender's buffer.
#[global_allocator]
static ALLOC: gflow::ShmAlloc = gflow::ShmAlloc;

fn main() -> Result<()> {
    let lines = gflow::run(4, |env| {
        let mut out = vec![];
        let mut say = |s: String| out.push(s);
        gflow::manual_seed(2026);
        let p = Placement::new("cpu", [0, 1, 2, 3])?;

        // A global (6, 4) tensor split by rows: 6 rows over 4 ranks gives 2, 2, 1, 1.
        let x = Tensor::randn(&[6, 4], (&p, Sbp::split(0)))?;
        say(format!(
            "x: shape {:?}, sbp {}, local shape {:?}",
            x.shape(),
            x.sbp().map(ToString::to_string).unwrap_or_default(),
            x.to_local()?.shape()
        ));

        // split(0) -> split(1): an all-to-all.
        let y = x.to_global(&p, Sbp::split(1))?;
        say(format!(
            "x -> split(1): local shape {:?}",
            y.to_local()?.shape()
        ));

        // Each rank contributes a local summand; partial_sum -> broadcast is an all-reduce.
        let mine = Tensor::full(&[2, 2], env.rank() as f64 + 1.0, Device::Cpu)?;
        let total = mine
            .to_global(&p, Sbp::partial_sum())?
            .to_global(&p, Sbp::broadcast())?;
        say(format!(
            "sum of the ranks' (rank+1) = {:?}",
            total.to_local()?.to_vec::<f32>()?
        ));

        // The 2D SBP seed: (broadcast, split(0)) on a 2x2 device array.
        let p2 = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let a = Tensor::from_vec(
            vec![1.0f32, 2.0, 3.0, 4.0],
            &[2, 2],
            (&p2, [Sbp::broadcast(), Sbp::split(0)]),
        )?;
        say(format!(
            "2-D (broadcast, split(0)) of [[1,2],[3,4]]: local {:?}",
            a.to_local()?.to_vec::<f32>()?
        ));

        // Move to other ranks and layouts: the values never change.
        let full = x
            .to_global(&p, Sbp::broadcast())?
            .to_local()?
            .to_vec::<f32>()?;
        let q = Placement::new("cpu", [3, 1])?;
        let moved = x.to_global(&q, Sbp::split(1))?;
        if q.contains(env.rank()) {
            say(format!(
                "moved to {q} as split(1): value unchanged = {}",
                moved.to_vec::<f32>()? == full
            ));
        }
        if env.rank() == 0 {
            say(format!("x = {x}"));
        } else {
            let _ = x.to_string(); // printing a global tensor is a collective on its placement
        }
        Ok(out)
    })?;
    gflow::print_ranks(&lines);
    Ok(())
}
