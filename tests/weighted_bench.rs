//! `gflow-bench weighted` prints one well-formed row: the devices of its mixed placement, weights
//! proportional to the speeds it measured (rows per second of each rank's own share), rows split
//! by those weights, and both step times. Without a wgpu adapter it runs on two CPU ranks (said
//! loudly), which still checks the weights and the split.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use gflow::{DeviceType, backend};

#[test]
fn the_weighted_benchmark_weights_by_measured_speed() {
    let wgpu = gflow::devices()
        .iter()
        .any(|d| d.device_type == DeviceType::Wgpu);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gflow-bench"));
    cmd.args(["weighted", "--width", "48", "--batch", "30", "--runs", "3"])
        .env_remove("GFLOW_DEVICE_OVERRIDE");
    if !wgpu {
        assert!(
            !backend::required("wgpu"),
            "wgpu is required but has no adapter"
        );
        backend::say_skipped(
            "the_weighted_benchmark (its wgpu rank)",
            &"no wgpu adapter: both ranks on the CPU",
        );
        cmd.env("GFLOW_DEVICE_OVERRIDE", "0:cpu,1:cpu");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{text}");
    let r = &rows[0];
    assert_eq!(r["op"], "train_mlp_3x48_b30_mixed");
    let devices = if wgpu {
        ["wgpu:0", "cpu"]
    } else {
        ["cpu", "cpu"]
    };
    assert_eq!(r["devices"], serde_json::json!(devices));
    let f = |k: &str| -> Vec<f64> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    // balanced shares are 15 rows each: speed = 15 / own time, weights = speeds normalized
    let own = f("own_share_s");
    let speed: Vec<f64> = own.iter().map(|t| 15.0 / t).collect();
    let total: f64 = speed.iter().sum();
    let weights = f("weights");
    for (w, s) in weights.iter().zip(&speed) {
        assert!((w - s / total).abs() < 2e-3, "{r}");
    }
    // the split follows the weights: each share within one row of its quota
    let split = f("weighted_rows");
    assert_eq!(split.iter().sum::<f64>(), 30.0, "{r}");
    for (n, w) in split.iter().zip(&weights) {
        assert!((n - 30.0 * w).abs() <= 1.0, "{r}");
    }
    let (balanced, weighted) = (
        r["balanced_s"].as_f64().unwrap(),
        r["median_s"].as_f64().unwrap(),
    );
    assert!(balanced > 0.0 && weighted > 0.0, "{r}");
    let speedup = r["speedup"].as_f64().unwrap();
    assert!(
        (speedup - balanced / weighted).abs() < 1e-2 * speedup,
        "{r}"
    );
}
