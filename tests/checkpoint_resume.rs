//! Exact resume of `examples/train_mlp.rs` (dropout, Adam, shuffled batches): N steps in one go
//! and k steps + save + a new job + load + N-k steps print bitwise-equal losses and weights, as
//! ranks on threads and as processes under `gflow-launch`; and a job whose rank is SIGKILLed
//! mid-training restarts (`--max-restarts 1`) from its latest checkpoint and ends exactly as the
//! uninterrupted run; a job SIGKILLed at arbitrary moments (mostly inside saves) leaves only
//! complete checkpoints, and resumes exactly from the latest.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::launcher;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const STEPS: usize = 40;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gflow-resume-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// train_mlp with `args` on 2 ranks: as threads, or as processes of a new launcher job (with
/// `launcher_args` before the program).
fn train(procs: bool, launcher_args: &[&str], args: &[String], env: &[(&str, &str)]) -> Output {
    let mut cmd = if procs {
        let mut c = Command::new(launcher());
        c.args(["--nproc-per-node", "2"])
            .args(launcher_args)
            .arg(common::example("train_mlp"));
        c
    } else {
        let mut c = Command::new(common::example("train_mlp"));
        c.env("GFLOW_SIM_RANKS", "2");
        c
    };
    let out = cmd
        .args(args)
        .arg("--print-steps")
        .env_remove("WORLD_SIZE")
        .env_remove("GFLOW_RESTART_COUNT")
        .env("GFLOW_TIMEOUT_SECS", "20")
        .envs(env.iter().copied())
        .output()
        .expect("run train_mlp");
    assert!(
        out.status.success(),
        "train_mlp {args:?} (processes: {procs}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn args(steps: usize, dir: Option<&Path>, extra: &[&str]) -> Vec<String> {
    let mut a = vec!["--steps".to_string(), steps.to_string()];
    if let Some(d) = dir {
        a.extend(["--ckpt-dir".to_string(), d.display().to_string()]);
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn sorted_lines(o: &Output) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// The lines a run resumed at step `k` prints: every step from `k` on, every epoch that ends at
/// or after `k`, the accuracy and the weights.
fn from_step(lines: &[String], k: usize) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            let number = |tag: &str| {
                l.split_once(tag)
                    .and_then(|(_, rest)| rest.split(':').next()?.parse::<usize>().ok())
            };
            match (number("step "), number("epoch ")) {
                (Some(s), _) => s >= k,
                (None, Some(e)) => e * 16 + 15 >= k,
                (None, None) => true,
            }
        })
        .cloned()
        .collect()
}

fn resume_is_exact(procs: bool) {
    let dir = scratch(if procs { "procs" } else { "threads" });
    let full = sorted_lines(&train(procs, &[], &args(STEPS, None, &[]), &[]));
    assert_eq!(
        full.iter().filter(|l| l.contains("loss bits")).count(),
        2 * STEPS
    );
    // Stop mid-epoch at step 21 with a checkpoint, then resume in a new job.
    train(
        procs,
        &[],
        &args(21, Some(&dir), &["--ckpt-every", "7"]),
        &[],
    );
    // Directories a crash could leave behind are never taken for the latest checkpoint.
    std::fs::create_dir_all(dir.join("step-000030")).unwrap();
    std::fs::create_dir_all(dir.join(".step-000035.partial")).unwrap();
    // The resumed job runs steps 21.. only: its losses come from the checkpoint's state.
    let resumed = train(procs, &[], &args(STEPS, Some(&dir), &["--resume"]), &[]);
    assert!(
        String::from_utf8_lossy(&resumed.stderr).contains("at step 21"),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let resumed = sorted_lines(&resumed);
    assert_eq!(resumed, from_step(&full, 21));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn resuming_train_mlp_on_threads_is_bitwise_exact() {
    resume_is_exact(false);
}

#[test]
fn resuming_train_mlp_in_a_new_launcher_job_is_bitwise_exact() {
    resume_is_exact(true);
}

#[test]
fn a_job_with_a_killed_rank_restarts_from_its_checkpoint_and_ends_as_if_uninterrupted() {
    let dir = scratch("killed");
    let full = sorted_lines(&train(true, &[], &args(STEPS, None, &[]), &[]));
    // Rank 1 kills itself before step 27 on the first attempt; checkpoints at 8, 16 and 24.
    let out = train(
        true,
        &["--max-restarts", "1"],
        &args(STEPS, Some(&dir), &["--ckpt-every", "8"]),
        &[("GFLOW_TEST_KILL", "1:27")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rank 1 failed (signal 9)") && err.contains("restart 1 of 1"),
        "{err}"
    );
    assert!(err.contains("at step 24"), "{err}");
    assert_eq!(sorted_lines(&out), from_step(&full, 24));
    std::fs::remove_dir_all(&dir).ok();
}

/// The highest step of the checkpoints under `dir`, complete or not (`step-N`, `.step-N...`).
fn latest_step(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|es| {
            es.filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                let digits: String = name
                    .trim_start_matches('.')
                    .strip_prefix("step-")?
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .max()
            .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// A job SIGKILLed at arbitrary moments while it saves every step (so most kills land inside
/// a save): every `step-*` directory it leaves is a complete checkpoint, and a resume from
/// the latest one ends exactly as the uninterrupted run.
#[test]
fn a_crash_mid_save_leaves_only_complete_checkpoints_and_resume_is_exact() {
    let full = sorted_lines(&train(false, &[], &args(STEPS, None, &[]), &[]));
    // Kill when the run has reached a given step (by the checkpoints it leaves, so the test does
    // not depend on the machine's speed), a moment after, while the next save is under way.
    for (i, (step, ms)) in [(3usize, 0u64), (10, 1), (20, 3)].into_iter().enumerate() {
        let dir = scratch(&format!("crash-{i}"));
        let mut child = Command::new(common::example("train_mlp"))
            .args(args(STEPS, Some(&dir), &["--ckpt-every", "1"]))
            .env("GFLOW_SIM_RANKS", "2")
            .env_remove("WORLD_SIZE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while latest_step(&dir) < step {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the run ended before step {step}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "no step {step} in 120 s"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        std::thread::sleep(std::time::Duration::from_millis(ms));
        assert!(child.try_wait().unwrap().is_none(), "ended before the kill");
        child.kill().unwrap();
        child.wait().unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                assert!(name.ends_with(".partial"), "{name}");
            } else {
                assert!(
                    gflow::checkpoint::is_complete(dir.join(&name)),
                    "{name} after a kill {ms} ms after step {step}"
                );
            }
        }
        let resumed = train(false, &[], &args(STEPS, Some(&dir), &["--resume"]), &[]);
        let err = String::from_utf8_lossy(&resumed.stderr).into_owned();
        let k = err
            .split_once("at step ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        eprintln!("killed {ms} ms after step {step}; resumed at step {k}");
        assert_eq!(sorted_lines(&resumed), from_step(&full, k), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
