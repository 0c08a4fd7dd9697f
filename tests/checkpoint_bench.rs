//! `gflow-bench checkpoint` runs end to end on a small model (its processes check the loaded
//! values) and prints one well-formed JSON line per measurement.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn the_checkpoint_benchmark_prints_save_and_load_lines_for_each_process_count() {
    let dir = std::env::temp_dir().join(format!("gflow-bench-test-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_gflow-bench"))
        .args([
            "checkpoint",
            "--bytes",
            "1048576",
            "--ranks",
            "1,2",
            "--runs",
            "1",
        ])
        .arg("--dir")
        .arg(&dir)
        .env_remove("WORLD_SIZE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keys: Vec<(String, String, u64)> = lines
        .iter()
        .map(|v| {
            assert_eq!(v["bytes"], 1_048_576);
            let s = v["median_s"].as_f64().unwrap();
            let gbs = v["gbs"].as_f64().unwrap();
            assert!(s > 0.0 && (gbs - 1_048_576.0 / s / 1e9).abs() <= 1e-3 + gbs * 0.05);
            (
                v["system"].as_str().unwrap().to_string(),
                v["op"].as_str().unwrap().to_string(),
                v["ranks"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String, u64)> = [("plain-sequential", 1), ("gflow", 1), ("gflow", 2)]
        .iter()
        .flat_map(|&(s, n)| {
            ["checkpoint_save", "checkpoint_load"].map(|op| (s.to_string(), op.to_string(), n))
        })
        .collect();
    assert_eq!(keys, want);
    assert!(!dir.exists(), "the benchmark leaves its files behind");
}
