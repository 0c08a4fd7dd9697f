//! Twin of the global-view seed's boxing example: Y0 = A0 @ B0 on P0 = ranks [0, 1], moved to
//! P1 = ranks [2, 3] as broadcast, then Y2 = Y0 @ B1 with B1 split(1) on P1. gflow inserts the
//! boxing (here: an all-gather of Y0's row slices from P0 onto each rank of P1).
//!
//! Run: `cargo run --example boxing_two_placements`

use gflow::prelude::*;

fn main() -> Result<()> {
    let out = gflow::run(4, |env| {
        let p0 = Placement::new("cpu", [0, 1])?;
        let p1 = Placement::new("cpu", [2, 3])?;
        let a0 = Tensor::randn(&[4, 5], (&p0, Sbp::split(0)))?;
        let b0 = Tensor::randn(&[5, 8], (&p0, Sbp::broadcast()))?;
        let y0 = a0.matmul(&b0)?;
        let y0 = y0.to_global(&p1, Sbp::broadcast())?;
        let b1 = Tensor::randn(&[8, 6], (&p1, Sbp::split(1)))?;
        let y2 = y0.matmul(&b1)?;
        let mut lines = vec![format!(
            "Y0 {:?} {}, Y2 {:?} {}",
            y0.shape(),
            y0.sbp().map(ToString::to_string).unwrap_or_default(),
            y2.shape(),
            y2.sbp().map(ToString::to_string).unwrap_or_default()
        )];
        if p1.contains(env.rank()) {
            lines.push(format!("local Y2: {:?}", y2.to_local()?.shape()));
        }
        Ok(lines)
    })?;
    gflow::print_ranks(&out);
    Ok(())
}
