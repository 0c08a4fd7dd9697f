//! A loop of all-reduces (partial_sum -> broadcast), used by the fault tests: with
//! `GFLOW_TEST_KILL=RANK:ITER` that rank kills itself with SIGKILL at that iteration, and the
//! survivors must fail within seconds instead of hanging.
//!
//! Run: `./target/release/gflow-launch --nproc-per-node 4 ./target/release/examples/collective_loop`

use gflow::prelude::*;

fn main() -> Result<()> {
    let kill: Option<(usize, usize)> = std::env::var("GFLOW_TEST_KILL").ok().and_then(|s| {
        let (r, i) = s.split_once(':')?;
        Some((r.parse().ok()?, i.parse().ok()?))
    });
    let iters: usize = std::env::var("GFLOW_TEST_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let out = gflow::run(4, |env| {
        let n = env.world_size();
        let p = Placement::new("cpu", (0..n).collect::<Vec<_>>())?;
        let mut total = 0.0;
        for i in 0..iters {
            if kill == Some((env.rank(), i)) {
                // SAFETY: raising a signal in this process has no memory-safety preconditions.
                unsafe {
                    libc::raise(libc::SIGKILL);
                }
            }
            let x = Tensor::full(&[1024], 1.0, Device::Cpu)?.to_global(&p, Sbp::partial_sum())?;
            total += x.to_vec::<f32>()?[0] as f64;
        }
        Ok(vec![format!("done: {total}")])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
