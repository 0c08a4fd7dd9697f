//! Twin of the seed "Converting one global tensor to another": split(0) -> broadcast. The global
//! shape stays (4, 5); the local component grows from a slice to the whole value (an
//! all-gather that gflow inserts).
//!
//! Run: `cargo run --example global_to_global`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::run(2, |env| {
        let x = Tensor::randn(&[2, 5], Device::Cpu)?;
        let placement = Placement::new("cpu", [0, 1])?;
        let x_global = x.to_global(&placement, Sbp::split(0))?;
        let x_global_b = x_global.to_global(&placement, Sbp::broadcast())?;
        if !placement.contains(env.rank()) {
            return Ok(vec![]);
        }
        Ok(vec![
            format!("{:?}", x_global.shape()),
            format!("{}", x_global.to_local()?),
            format!("{:?}", x_global_b.shape()),
            format!("{}", x_global_b.to_local()?),
        ])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
