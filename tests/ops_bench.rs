//! `gflow-bench ops` runs every operator row of its PyTorch peer
//! (`benches/peers/torch_ops_bench.py`) and prints one well-formed JSON line each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

#[test]
fn the_operator_benchmark_prints_the_peer_rows() {
    let out = Command::new(env!("CARGO_BIN_EXE_gflow-bench"))
        .args([
            "ops", "--act", "1,8,16", "--attn", "1,2,8,4", "--mm", "8", "--runs", "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ops: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["op"].as_str().unwrap(), r["dtype"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ops,
        [
            ("softmax", "f32"),
            ("log_softmax", "f32"),
            ("gelu", "f32"),
            ("gelu_erf", "f32"),
            ("layer_norm", "f32"),
            ("rms_norm", "f32"),
            ("scaled_dot_product_attention", "f32"),
            ("scaled_dot_product_attention_causal", "f32"),
            ("matmul", "f32"),
            ("matmul", "bf16"),
        ]
    );
    for r in &rows[..8] {
        assert!(r["fwd_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["fwd_bwd_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(rows[0]["shape"], serde_json::json!([1, 8, 16]));
    assert_eq!(rows[6]["shape"], serde_json::json!([1, 2, 8, 4]));
}
