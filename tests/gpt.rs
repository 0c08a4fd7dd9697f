//! `examples/gpt`: the tiny GPT's losses equal PyTorch's for the same initial weights and
//! batches (tests/data/gpt_tiny_*, recorded by benches/peers/gpt_torch.py), and every layout on
//! 1, 2 and 4 ranks, as threads and as processes under `gflow-launch`, gives those losses; a
//! run resumed from a checkpoint (by `--resume` or a launcher restart) continues bitwise.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::launcher;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LAYOUTS: [&str; 5] = ["single", "dp", "tp", "2d", "fsdp"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The example, brought up to date, once per test binary.
fn gpt() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| common::example("gpt")).clone()
}

/// A fresh directory for one test's files, removed when the test ends (also when it fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gflow-gpt-{name}-"))
        .tempdir()
        .unwrap()
}

/// The tiny config from the PyTorch init, 20 steps, no held-out text, losses to `out`.
fn tiny_args(dtype: &str, layout: &str, out: &Path) -> Vec<String> {
    let init = root().join("tests/data/gpt_tiny_init.safetensors");
    [
        "--config",
        "tiny",
        "--steps",
        "20",
        "--val-frac",
        "0",
        "--sample",
        "0",
        "--quiet",
        "--dtype",
        dtype,
        "--layout",
        layout,
        "--init",
        init.to_str().unwrap(),
        "--losses-out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn check(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs the example on `n` ranks (threads, or processes under the launcher) and returns
/// (first step, losses).
fn run(
    n: usize,
    processes: bool,
    args: &[String],
    env: &[(&str, &str)],
    what: &str,
) -> (usize, Vec<f64>) {
    losses(&launch(n, processes, args, env), args, what)
}

/// The example's run on `n` ranks (threads, or processes under the launcher).
fn launch(n: usize, processes: bool, args: &[String], env: &[(&str, &str)]) -> Output {
    if processes {
        Command::new(launcher())
            .args(["--nproc-per-node", &n.to_string()])
            .arg(gpt())
            .args(args)
            .envs(env.iter().copied())
            .env("GFLOW_TIMEOUT_SECS", "30")
            .output()
    } else {
        Command::new(gpt())
            .args(["--simulate", &n.to_string()])
            .args(args)
            .envs(env.iter().copied())
            .output()
    }
    .expect("run gpt")
}

/// (first step, losses) of a successful run, read from its `--losses-out` file.
fn losses(o: &Output, args: &[String], what: &str) -> (usize, Vec<f64>) {
    check(o, what);
    let out = &args[args.iter().position(|a| a == "--losses-out").unwrap() + 1];
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let losses = v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    (v["first_step"].as_u64().unwrap() as usize, losses)
}

fn reference(dtype: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(root().join("tests/data/gpt_tiny_losses.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["losses"][dtype]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?}");
    for (s, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * w.abs(),
            "{what}: step {s}: {g} vs {w} (rel {rel})\n{got:?}"
        );
    }
}

/// Single device, f64 and f32: PyTorch's losses (f64 to 1e-9, f32 to 1e-5 relative).
#[test]
fn single_device_losses_equal_pytorch() {
    let tmp = scratch("single");
    let dir = tmp.path();
    for (dtype, rel) in [("f64", 1e-9), ("f32", 1e-5)] {
        let out = dir.join(format!("{dtype}.json"));
        let (_, got) = run(1, false, &tiny_args(dtype, "single", &out), &[], dtype);
        assert_close(&got, &reference(dtype), rel, &format!("single {dtype}"));
    }
}

/// Every layout on 1, 2 and 4 ranks, as threads and as processes: PyTorch's f64 losses.
#[test]
fn every_layout_on_1_2_4_ranks_gives_the_single_device_losses() {
    let tmp = scratch("layouts");
    let dir = tmp.path();
    let want = reference("f64");
    for processes in [false, true] {
        for n in [1, 2, 4] {
            // On one rank every layout is the same computation: one process run of it suffices.
            let layouts = if processes && n == 1 {
                &LAYOUTS[4..]
            } else {
                &LAYOUTS[..]
            };
            for &layout in layouts {
                let what = format!(
                    "{layout} on {n} {}",
                    if processes { "processes" } else { "threads" }
                );
                let out = dir.join(format!("{layout}-{n}-{processes}.json"));
                let (_, got) = run(n, processes, &tiny_args("f64", layout, &out), &[], &what);
                assert_close(&got, &want, 1e-9, &what);
            }
        }
    }
}

/// Checkpoints every 10 steps (2 processes, FSDP); resumed from step 10 by `--resume` (as
/// processes) and by `GFLOW_RESTART_COUNT=1` (a relaunch's variable; as threads, since the
/// launcher sets its own count), steps 10..20 give bitwise the losses of the whole run.
#[test]
fn resumed_runs_continue_bitwise() {
    let tmp = scratch("resume");
    let dir = tmp.path();
    let ckpt = dir.join("ckpt");
    let mut args = tiny_args("f32", "fsdp", &dir.join("full.json"));
    args.extend([
        "--ckpt-dir".into(),
        ckpt.to_str().unwrap().into(),
        "--ckpt-every".into(),
        "10".into(),
    ]);
    let (_, full) = run(2, true, &args, &[], "full run");
    assert!(ckpt.join("step-000010/index.json").exists() && ckpt.join("step-000020").exists());
    let out = dir.join("resumed.json");
    let pos = args.iter().position(|a| a == "--losses-out").unwrap();
    args[pos + 1] = out.to_str().unwrap().into();
    for (processes, extra, count) in [(true, Some("--resume"), "0"), (false, None, "1")] {
        std::fs::remove_dir_all(ckpt.join("step-000020")).unwrap();
        let mut a = args.clone();
        a.extend(extra.map(String::from));
        let env = ("GFLOW_RESTART_COUNT", count);
        let (first, rest) = run(2, processes, &a, &[env], "resumed run");
        assert_eq!(first, 10);
        assert_eq!(rest, full[10..], "resumed with {extra:?} {env:?}");
    }
    // A rank lost after step 15: `gflow-launch --max-restarts 1` starts the job again, which
    // resumes from step 10 and ends with the whole run's losses.
    std::fs::remove_dir_all(ckpt.join("step-000020")).unwrap();
    let mut a = args.clone();
    a.extend(["--crash-at".into(), "15".into()]);
    let o = Command::new(launcher())
        .args(["--nproc-per-node", "2", "--max-restarts", "1"])
        .arg(gpt())
        .args(&a)
        .env("GFLOW_TIMEOUT_SECS", "30")
        .output()
        .unwrap();
    check(&o, "a run with a lost rank under --max-restarts 1");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--crash-at"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(v["first_step"], 10);
    let rest: Vec<f64> = v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(rest, full[10..]);
}

/// A 2-D placement that cannot be formed is a typed error naming the flag.
#[test]
fn a_dp_size_that_does_not_divide_the_ranks_is_refused() {
    let o = Command::new(gpt())
        .args([
            "--simulate",
            "4",
            "--layout",
            "2d",
            "--dp",
            "3",
            "--config",
            "tiny",
            "--steps",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--dp") && err.contains("divide"), "{err}");
}

/// `gflow-bench gpt` prints one JSON line whose throughput fields agree with each other.
#[test]
fn the_benchmark_prints_consistent_json() {
    let o = Command::new(env!("CARGO_BIN_EXE_gflow-bench"))
        .args([
            "gpt", "--config", "tiny", "--layout", "fsdp", "--ranks", "2", "--runs", "1",
        ])
        .output()
        .unwrap();
    check(&o, "gflow-bench gpt");
    let text = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        (v["op"].as_str(), v["mode"].as_str(), v["ranks"].as_u64()),
        (Some("gpt_train"), Some("fsdp"), Some(2))
    );
    assert_eq!(v["params"], 134_912);
    let (tps, step) = (
        v["tokens_per_s"].as_f64().unwrap(),
        v["median_step_s"].as_f64().unwrap(),
    );
    assert!((tps * step - 256.0).abs() < 0.5, "{text}");
    let mfu = 6.0 * 134_912.0 * tps / (v["peak_gflops"].as_f64().unwrap() * 1e9);
    assert!((mfu - v["mfu"].as_f64().unwrap()).abs() < 1e-3, "{text}");
}

/// On a GPU backend (wgpu: lavapipe in CI, a real adapter where one is; CUDA where a driver
/// is), 20 steps of the tiny GPT in f32 give PyTorch's f32 losses, as 1 rank and as `dp` on 2
/// processes (each rank its own device). The kernels sum in other orders than the CPU's, so
/// the tolerance is f32's over 20 steps of training (1e-4 relative). Skips loudly where the
/// backend is missing, unless `GFLOW_REQUIRE_BACKEND` names it.
#[test]
fn gpu_backends_give_pytorchs_losses() {
    let tmp = scratch("devices");
    let dir = tmp.path();
    let want = reference("f32");
    for device in ["wgpu", "cuda"] {
        for (n, processes, layout) in [(1, false, "single"), (2, true, "dp")] {
            let what = format!("{layout} on {n} ranks on {device}");
            let out = dir.join(format!("{device}-{layout}.json"));
            let mut args = tiny_args("f32", layout, &out);
            args.extend(["--device".into(), device.into()]);
            let o = launch(n, processes, &args, &[]);
            let err = String::from_utf8_lossy(&o.stderr);
            if !o.status.success()
                && err.contains("is unavailable")
                && !gflow::backend::required(device)
            {
                gflow::backend::say_skipped(
                    &format!("gpu_backends_give_pytorchs_losses on {device}"),
                    &err.trim(),
                );
                break;
            }
            let (_, got) = losses(&o, &args, &what);
            assert_close(&got, &want, 1e-4, &what);
        }
    }
}
