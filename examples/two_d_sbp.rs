//! Twin of the 2D SBP seed: a 2x2 device array, the model Linear(8, 4) -> ReLU -> Linear(4, 2)
//! written with plain tensor math (weights (out, in) as in PyTorch), broadcast on both axes; the
//! input is a local (1, 2, 8) tensor per rank turned global with (broadcast, split(0)). Each rank
//! prints its local input: ranks 2 and 3 hold the data of ranks 0 and 1.
//!
//! Run: `cargo run --example two_d_sbp`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::run(4, |env| {
        let placement = Placement::new("cpu", [[0, 1], [2, 3]])?;
        let broadcast = [Sbp::broadcast(), Sbp::broadcast()];
        let bs0 = [Sbp::broadcast(), Sbp::split(0)];
        // nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)); here a scaled randn stands in.
        let linear = |inp: usize, out: usize| -> Result<(Tensor, Tensor)> {
            let s = 1.0 / (inp as f64).sqrt();
            let w = Tensor::randn(&[out, inp], (&placement, broadcast))?.mul_scalar(s)?;
            let b = Tensor::randn(&[out], (&placement, broadcast))?.mul_scalar(s)?;
            Ok((w, b))
        };
        let (w1, b1) = linear(8, 4)?;
        let (w2, b2) = linear(4, 2)?;

        let x = Tensor::randn(&[1, 2, 8], Device::Cpu)?;
        let global_x = x.to_global(&placement, bs0)?;
        let h = (&global_x.matmul(&w1.transpose(0, 1)?)? + &b1)?.relu()?;
        let pred = (&h.matmul(&w2.transpose(0, 1)?)? + &b2)?;

        let local_x = global_x.to_local()?;
        Ok(vec![format!(
            "cpu:{}, {:?}, \n{}\npred: shape {:?}, sbp {}",
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
