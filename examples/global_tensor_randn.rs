//! Twin of the seed "Creating global tensor": a (4, 5) global tensor made by `randn`, split by
//! rows over ranks 0 and 1; each rank prints its local part and the whole value.
//!
//! Run: `cargo run --example global_tensor_randn`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::simulate(2, |_| {
        let placement = Placement::new("cpu", [0, 1])?;
        let sbp = Sbp::split(0);
        let x = Tensor::randn(&[4, 5], (&placement, sbp))?;
        Ok(vec![
            format!("Local data of global tensor:\n  {}", x.to_local()?),
            format!(
                "Global data of global tensor:\n  {}",
                Tensor::from_vec(x.to_vec::<f32>()?, x.shape(), Device::Cpu)?
            ),
        ])
    })?;
    for (rank, lines) in out.iter().enumerate() {
        for l in lines {
            println!("[rank {rank}] {l}");
        }
    }
    Ok(())
}
