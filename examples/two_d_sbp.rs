//! Twin of the 2D SBP seed: a 2x2 device array, the model Linear(8, 4) -> ReLU -> Linear(4, 2)
//! turned global with (broadcast, broadcast); the input is a local (1, 2, 8) tensor per rank
//! turned global with (broadcast, split(0)). Each rank prints its local input: ranks 2 and 3
//! hold the data of ranks 0 and 1.
//!
//! Run: `cargo run --example two_d_sbp [-- --device wgpu]`

use gflow::prelude::*;

fn main() -> Result<()> {
    let device = gflow::device_arg()?;
    let out = gflow::run(4, |env| {
        let placement = Placement::new(device.as_str(), [[0, 1], [2, 3]])?;
        let broadcast = [Sbp::broadcast(), Sbp::broadcast()];
        let bs0 = [Sbp::broadcast(), Sbp::split(0)];

        let model = nn::Sequential::new()
            .add(nn::Linear::new(8, 4, true)?)
            .add(nn::ReLU)
            .add(nn::Linear::new(4, 2, true)?);
        let model = model.to_global(&placement, broadcast)?;

        let x = Tensor::randn(&[1, 2, 8], Device::Cpu)?;
        let global_x = x.to_global(&placement, bs0)?;
        let pred = model.forward(&global_x)?;

        let local_x = global_x.to_local()?;
        Ok(vec![format!(
            "{}:{}, {:?}, \n{}\npred: shape {:?}, sbp {}",
            global_x.device(),
            env.rank(),
            local_x.shape(),
            local_x,
            pred.shape(),
            pred.sbp().map(ToString::to_string).unwrap_or_default()
        )])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
