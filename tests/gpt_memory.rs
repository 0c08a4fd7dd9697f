//! FSDP's memory: on 4 processes under `gflow-launch`, a rank of `fsdp` (every parameter and its
//! AdamW moments `split(0)`, gathered for use, gradients reduce-scattered) peaks well below a
//! rank of `dp` (everything replicated) for a GPT whose parameters and optimizer state dominate
//! its memory (`--config m10`: 10.9M parameters, 4 x 64 tokens a step), as `gflow-bench gpt`
//! reports it (`rank_peak_rss_mb`: each rank's VmHWM after three steps).
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::process::Command;

/// The median over the ranks of the peak resident set (MB) of a launched `gflow-bench gpt` run
/// in `layout`, and the model's parameter count.
fn peak(layout: &str) -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_gflow-launch"))
        .args(["--nproc-per-node", "4", env!("CARGO_BIN_EXE_gflow-bench")])
        .args(["gpt", "--config", "m10", "--layout", layout, "--runs", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gflow-bench gpt --layout {layout} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("\"gpt_train\""))
        .unwrap_or_else(|| panic!("no result line in:\n{stdout}"));
    let v: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap();
    let mut ranks: Vec<f64> = v["rank_peak_rss_mb"]
        .as_array()
        .unwrap_or_else(|| panic!("no rank_peak_rss_mb in {line}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(ranks.len(), 4, "{line}");
    ranks.sort_by(f64::total_cmp);
    let peak = v["peak_rss_mb"].as_f64().unwrap();
    assert_eq!(peak, ranks[3], "peak_rss_mb is the largest rank's: {line}");
    (
        f64::midpoint(ranks[1], ranks[2]),
        v["params"].as_f64().unwrap(),
    )
}

#[test]
fn fsdp_rank_holds_far_less_than_dp_rank() {
    let (dp, params) = peak("dp");
    let (fsdp, _) = peak("fsdp");
    // f32 parameter, gradient and two moments: 16 bytes a parameter on a dp rank, 4 on an
    // fsdp rank of 4, so fsdp saves 12 bytes a parameter (124 MB here); ask for half of it,
    // whatever else (activations, transient gathered weights, the allocator) both hold.
    let saving = 12.0 * params / (1 << 20) as f64;
    eprintln!("median peak resident set per rank: dp {dp:.1} MB, fsdp {fsdp:.1} MB");
    assert!(
        dp - fsdp > saving / 2.0 && fsdp < 0.75 * dp,
        "peak resident set per rank: dp {dp:.1} MB, fsdp {fsdp:.1} MB; expected fsdp below 3/4 \
         of dp and at least {:.1} MB less",
        saving / 2.0
    );
}
