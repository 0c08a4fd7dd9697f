//! Twin of the seed "Converting local tensor to global tensor": two local (2, 5) tensors become
//! one global (4, 5) tensor split by rows.
//!
//! Run: `cargo run --example local_to_global`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::run(2, |_| {
        let x = Tensor::randn(&[2, 5], Device::Cpu)?;
        let placement = Placement::new("cpu", [0, 1])?;
        let x_global = x.to_global(&placement, Sbp::split(0))?;
        Ok(vec![
            format!("{:?}", x.shape()),
            format!("{:?}", x_global.shape()),
            format!("{}", x.is_local()),
            format!("{}", x_global.is_global()),
        ])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
