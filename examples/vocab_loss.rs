//! The vocabulary-parallel loss at a large vocabulary: `cross_entropy` on logits (4, 200000)
//! split over the class dim on every rank, forward and backward, checked against a float64
//! computation of the same logits, then each rank's peak resident memory (Linux's `VmHWM`).
//! The signatures keep the logits split (a max and a sum of partials), so no rank ever holds a
//! whole row, let alone the C x C one-hot a naive loss builds (320 GB here).
//!
//! Run: `./target/release/gflow-launch --nproc-per-node 4 ./target/release/examples/vocab_loss`

use gflow::nn::functional::cross_entropy;
use gflow::prelude::*;

/// Rows and classes of the logits.
const N: usize = 4;
const C: usize = 200_000;

fn main() -> Result<()> {
    let out = gflow::run(4, |env| {
        let p = Placement::new("cpu", (0..env.world_size()).collect::<Vec<_>>())?;
        let logits = Tensor::randn(&[N, C], (&p, Sbp::split(1)))?.set_requires_grad(true);
        let target = Tensor::from_vec(
            vec![0i64, 7, 199_999, 123_456],
            &[N],
            (&p, Sbp::broadcast()),
        )?;
        let loss = cross_entropy(&logits, &target)?;
        loss.backward()?;
        let got = loss.to_vec::<f32>()?[0] as f64;
        let grad_sbp = logits
            .grad()
            .and_then(|g| g.sbp().map(|s| s.to_string()))
            .unwrap_or_else(|| "none".into());
        // The reference: log-sum-exp minus the target's logit, per row, in float64.
        let x = logits.to_vec::<f32>()?;
        let want = (0..N)
            .map(|r| {
                let row = &x[r * C..(r + 1) * C];
                let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
                let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
                lse - row[[0, 7, 199_999, 123_456][r]] as f64
            })
            .sum::<f64>()
            / N as f64;
        Ok(vec![format!(
            "loss {got:.5} reference {want:.5} grad_sbp {grad_sbp} peak_rss_mb {}",
            peak_rss_mb().map_or("n/a".into(), |m| format!("{m:.1}"))
        )])
    })?;
    gflow::print_ranks(&out);
    Ok(())
}

/// This process's peak resident set in MB, where the OS reports it (`/proc`, Linux).
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
