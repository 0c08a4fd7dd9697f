//! Twin of the seed "Creating global tensor": a (4, 5) global tensor made by `randn`, split by
//! rows over ranks 0 and 1; each rank prints its local part and the whole value.
//!
//! Run: `cargo run --example global_tensor_randn`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::run(2, |env| {
        let placement = Placement::new("cpu", [0, 1])?;
        let sbp = Sbp::split(0);
        let x = Tensor::randn(&[4, 5], (&placement, sbp))?;
        if !placement.contains(env.rank()) {
            return Ok(vec![]);
        }
        Ok(vec![
            format!("Local data of global tensor:\n  {}", x.to_local()?),
            format!(
                "Global data of global tensor:\n  {}",
                Tensor::from_vec(x.to_vec::<f32>()?, x.shape(), Device::Cpu)?
            ),
        ])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
