//! Twin of the seed "Data Parallelism": x split(0) times w broadcast gives y split(0), (4, 8).
//!
//! Run: `cargo run --example data_parallelism [-- --device wgpu]`

use gflow::prelude::*;

fn main() -> Result<()> {
    let device = gflow::device_arg()?;
    let out = gflow::run(2, |_| {
        let placement = Placement::new(device.as_str(), [0, 1])?;
        let x = Tensor::randn(&[4, 5], (&placement, Sbp::split(0)))?;
        let w = Tensor::randn(&[5, 8], (&placement, Sbp::broadcast()))?;
        let y = x.matmul(&w)?;
        Ok(vec![
            format!("{}", y.sbp().map(ToString::to_string).unwrap_or_default()),
            format!("{:?}", y.shape()),
        ])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
