//! FSDP's memory: on 4 processes under `gflow-launch`, a rank of `fsdp` (every parameter and its
//! AdamW moments `split(0)`, gathered for use, gradients reduce-scattered) holds far less than a
//! rank of `dp` (everything replicated) for a GPT whose parameters and optimizer state dominate
//! its memory (`--config m10`: 10.9M parameters, 4 x 64 tokens a step), as `gflow-bench gpt`
//! reports it: each rank's peak resident set after three steps (`rank_peak_rss_mb`) less the
//! peers' shared pages in it (`rank_peer_pages_mb`), which are no memory of the rank's own.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::process::Command;

/// The median over the ranks of the memory of their own (peak resident set less the peers'
/// shared pages, MiB) in a launched `gflow-bench gpt` run in `layout`, and the model's
/// parameter count. The run uses the shared arena (`GFLOW_PORTABLE` removed): with the system
/// allocator, a rank's 128 MiB QUIC receive buffer is resident on some ranks and not others.
fn own_peak(layout: &str) -> (f64, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_gflow-launch"))
        .args(["--nproc-per-node", "4", env!("CARGO_BIN_EXE_gflow-bench")])
        .args(["gpt", "--config", "m10", "--layout", layout, "--runs", "1"])
        .env_remove("GFLOW_PORTABLE")
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
    let list = |field: &str| -> Vec<f64> {
        v[field]
            .as_array()
            .unwrap_or_else(|| panic!("no {field} in {line}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (peaks, peers) = (list("rank_peak_rss_mb"), list("rank_peer_pages_mb"));
    assert_eq!((peaks.len(), peers.len()), (4, 4), "{line}");
    let largest = peaks.iter().copied().fold(0.0, f64::max);
    assert_eq!(v["peak_rss_mb"].as_f64().unwrap(), largest, "{line}");
    let mut own: Vec<f64> = peaks.iter().zip(&peers).map(|(p, s)| p - s).collect();
    assert!(own.iter().all(|&o| o > 0.0), "{line}");
    own.sort_by(f64::total_cmp);
    (f64::midpoint(own[1], own[2]), v["params"].as_f64().unwrap())
}

#[test]
fn fsdp_rank_holds_far_less_than_dp_rank() {
    let (dp, params) = own_peak("dp");
    let (fsdp, _) = own_peak("fsdp");
    // f32 parameter, gradient and two moments: 16 bytes a parameter on a dp rank, 4 on an
    // fsdp rank of 4, so fsdp saves 12 bytes a parameter (124 MiB here); ask for half of it,
    // whatever else (activations, transient gathered weights, the allocator) both hold.
    let saving = 12.0 * params / (1 << 20) as f64;
    eprintln!("median own peak memory per rank: dp {dp:.1} MiB, fsdp {fsdp:.1} MiB");
    assert!(
        dp - fsdp > saving / 2.0 && fsdp < 0.75 * dp,
        "own peak memory per rank: dp {dp:.1} MiB, fsdp {fsdp:.1} MiB; expected fsdp below 3/4 \
         of dp and at least {:.1} MiB less",
        saving / 2.0
    );
}
