//! gflow-launch's flags and what it passes to children: output that is not UTF-8, unknown
//! flags, the per-child variables, `--log-dir`, `--nproc-per-node auto|gpu|cpu`,
//! `--standalone`, `--max-restarts`, OneFlow's and torch's command lines (`--no_python`,
//! `--use_env`, nodes without a token or port) and the failed rank's exit code. Tiny shell programs stand in for ranks where no
//! rendezvous is needed; `collective_loop` is the real job where one is.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::{example, launcher};

use std::process::{Command, Output};

/// `gflow-launch FLAGS sh -c SCRIPT`.
fn launch_sh(flags: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    Command::new(launcher())
        .args(flags)
        .args(["sh", "-c", script])
        .envs(env.iter().copied())
        .env_remove("OMP_NUM_THREADS")
        .env("GFLOW_TIMEOUT_SECS", "20")
        .output()
        .expect("run launcher")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = text(b).lines().map(String::from).collect();
    v.sort();
    v
}

/// The lines (as bytes) of `b`, sorted.
fn sorted_byte_lines(b: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = b.split_inclusive(|&c| c == b'\n').collect();
    v.sort();
    v
}

#[test]
fn output_that_is_not_utf8_passes_through_byte_for_byte() {
    // \377\376 is not UTF-8; the last line has no newline (the launcher ends it)
    let out = launch_sh(
        &["--nproc-per-node", "2"],
        r"printf 'a\377\376b\n\300end'; printf 'e\377\n' >&2",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut want: Vec<&[u8]> = vec![
        b"[rank 0] a\xff\xfeb\n",
        b"[rank 0] \xc0end\n",
        b"[rank 1] a\xff\xfeb\n",
        b"[rank 1] \xc0end\n",
    ];
    want.sort();
    assert_eq!(sorted_byte_lines(&out.stdout), want);
    assert_eq!(
        sorted_byte_lines(&out.stderr),
        vec![&b"[rank 0] e\xff\n"[..], b"[rank 1] e\xff\n"]
    );
}

#[test]
fn an_unknown_flag_is_an_error_naming_it() {
    let dir = std::env::temp_dir().join(format!("gflow-flag-{}", std::process::id()));
    let out = Command::new(launcher())
        .args(["--nproc-per-node", "1", "--bogus-flag", "touch"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--bogus-flag"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.exists(), "the program must not run");
    // after the program its own flags are its own
    let out = launch_sh(&[], "echo \"$0\"", &[]);
    assert!(out.status.success());
}

#[test]
fn each_child_gets_its_ranks_group_and_share_of_the_cores() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let script = "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK \
                  $OMP_NUM_THREADS $GFLOW_RESTART_COUNT";
    let out = launch_sh(
        &[
            "--nproc-per-node",
            "2",
            "--nnodes",
            "3",
            "--node-rank",
            "1",
            "--master-port",
            "29999",
        ],
        script,
        &[("GFLOW_JOB_TOKEN", "t")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = (cores / 2).max(1);
    assert_eq!(
        sorted_lines(&out.stdout),
        vec![
            format!("[rank 2] 2 0 6 2 1 {t} 0"),
            format!("[rank 3] 3 1 6 2 1 {t} 0"),
        ]
    );
    // a value the user set is kept
    let out = Command::new(launcher())
        .args(["sh", "-c", "echo $OMP_NUM_THREADS"])
        .env("OMP_NUM_THREADS", "7")
        .output()
        .unwrap();
    assert_eq!(sorted_lines(&out.stdout), vec!["[rank 0] 7"]);
}

#[test]
fn log_dir_keeps_a_file_per_rank_and_the_console_output() {
    let dir = std::env::temp_dir().join(format!("gflow-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = launch_sh(
        &["--nproc-per-node", "2", "--log-dir", dir.to_str().unwrap()],
        r"printf 'out of %s \377\n' $RANK; echo err of $RANK >&2",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for r in 0..2 {
        let d = dir.join("attempt_0").join(r.to_string());
        let mut want = format!("out of {r} ").into_bytes();
        want.extend_from_slice(b"\xff\n");
        assert_eq!(std::fs::read(d.join("stdout.log")).unwrap(), want);
        assert_eq!(
            std::fs::read_to_string(d.join("stderr.log")).unwrap(),
            format!("err of {r}\n")
        );
    }
    assert_eq!(
        sorted_byte_lines(&out.stdout),
        vec![
            &b"[rank 0] out of 0 \xff\n"[..],
            b"[rank 1] out of 1 \xff\n"
        ]
    );
    assert_eq!(
        sorted_lines(&out.stderr),
        vec!["[rank 0] err of 0", "[rank 1] err of 1"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nproc_per_node_auto_gpu_and_cpu_follow_torchrun() {
    let count = |flags: &[&str], visible: &str| {
        let out = launch_sh(
            flags,
            "echo $LOCAL_WORLD_SIZE",
            &[("CUDA_VISIBLE_DEVICES", visible)],
        );
        (
            out.status.success(),
            sorted_lines(&out.stdout),
            text(&out.stderr),
        )
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    // two GPUs visible: one process per GPU
    for word in ["auto", "gpu"] {
        let (ok, lines, err) = count(&["--nproc-per-node", word], "0,1");
        assert!(ok, "{err}");
        assert_eq!(lines, vec!["[rank 0] 2", "[rank 1] 2"], "{word}");
    }
    // no GPU: auto is one per CPU, gpu an error
    let (ok, lines, _) = count(&["--nproc-per-node", "auto"], "-1");
    assert!(ok);
    assert_eq!(lines.len(), cpus);
    assert!(lines.iter().all(|l| l.ends_with(&format!(" {cpus}"))));
    let (ok, lines, err) = count(&["--nproc-per-node", "gpu"], "-1");
    assert!(!ok && lines.is_empty());
    assert!(err.contains("no GPU"), "{err}");
    let (ok, lines, _) = count(&["--nproc-per-node", "cpu"], "");
    assert!(ok);
    assert_eq!(lines.len(), cpus);
    let (ok, _, err) = count(&["--nproc-per-node", "lots"], "");
    assert!(!ok && err.contains("lots"), "{err}");
}

#[test]
fn standalone_runs_a_real_job_on_a_free_port() {
    let prog = example("collective_loop");
    let out = Command::new(launcher())
        .args(["--standalone", "--nproc-per-node", "2"])
        .arg(&prog)
        .env("GFLOW_TEST_ITERS", "5")
        .env("GFLOW_TIMEOUT_SECS", "20")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] done: 10", "[rank 1] done: 10"]
    );
    let refused = launch_sh(&["--standalone", "--nnodes", "2"], "true", &[]);
    assert!(!refused.status.success());
    assert!(text(&refused.stderr).contains("--standalone"));
}

#[test]
fn max_restarts_starts_the_whole_job_again() {
    // rank 1 fails on the first start; the other rank would run long, so it must be stopped
    let script = r#"if [ "$GFLOW_RESTART_COUNT" = 0 ]; then
        [ "$RANK" = 1 ] && exit 3; sleep 30; fi; echo ok $GFLOW_RESTART_COUNT"#;
    let t = std::time::Instant::now();
    let out = launch_sh(
        &["--nproc-per-node", "2", "--max-restarts", "1"],
        script,
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] ok 1", "[rank 1] ok 1"]
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("rank 1 failed (exit code 3)") && err.contains("restart 1 of 1"),
        "{err}"
    );
    // without restarts the same job fails
    let out = launch_sh(&["--nproc-per-node", "2"], script, &[]);
    assert!(!out.status.success());
    // one that always fails: 1 + 2 starts, then a non-zero exit
    let out = launch_sh(
        &["--nproc-per-node", "1", "--max-restarts", "2"],
        "echo start $GFLOW_RESTART_COUNT; exit 5",
        &[],
    );
    assert!(!out.status.success());
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] start 0", "[rank 0] start 1", "[rank 0] start 2"]
    );
    assert!(text(&out.stderr).contains("after 2 restarts"));
}

/// A real gflow job whose rank 1 is killed (SIGKILL) in the first attempt resumes on restart.
#[test]
fn max_restarts_recovers_a_real_job_from_a_killed_rank() {
    let prog = example("collective_loop");
    let script = r#"[ "$GFLOW_RESTART_COUNT" = 0 ] && export GFLOW_TEST_KILL=1:3; exec "$0""#;
    let out = Command::new(launcher())
        .args([
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "sh",
            "-c",
            script,
        ])
        .arg(&prog)
        .env("GFLOW_TEST_ITERS", "5")
        .env("GFLOW_TIMEOUT_SECS", "20")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("rank 1 failed (signal 9)"), "{err}");
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] done: 10", "[rank 1] done: 10"]
    );
}

/// The launcher exits with the failed rank's own exit code (128 + the signal for a rank a
/// signal ended), as a shell would for the program itself; after restarts, the last one's.
#[test]
fn a_failed_ranks_exit_code_is_the_launchers() {
    let out = launch_sh(
        &["--nproc-per-node", "2"],
        r#"[ "$RANK" = 1 ] && exit 7; sleep 30"#,
        &[],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("rank 1 failed (exit code 7)"));
    let out = launch_sh(&["--nproc-per-node", "2"], "kill -9 $$", &[]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    let out = launch_sh(&["--max-restarts", "1"], "exit 5", &[]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
}

/// OneFlow's and torch's command lines run as they are: `--no_python` and `--use_env` are
/// accepted (both are what gflow-launch does anyway); a port outside 1-65535 is refused by
/// name before anything starts.
#[test]
fn oneflow_and_torch_launcher_flags_are_accepted() {
    let out = launch_sh(
        &[
            "--nproc_per_node",
            "2",
            "--no_python",
            "--use_env",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            "29123",
        ],
        "echo $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec![
            "[rank 0] 0 0 2 127.0.0.1 29123",
            "[rank 1] 1 1 2 127.0.0.1 29123"
        ]
    );
    for bad in ["0", "99999"] {
        let out = launch_sh(&["--master_port", bad], "echo ran", &[]);
        assert!(!out.status.success(), "--master_port {bad}");
        assert!(
            out.stdout.is_empty(),
            "--master_port {bad}: the program must not run"
        );
        assert!(
            text(&out.stderr).contains("--master-port") && text(&out.stderr).contains(bad),
            "{}",
            text(&out.stderr)
        );
    }
}

/// Two nodes started as OneFlow's launcher starts them, with no job token, form one job of a
/// real gflow program; without `--master_port` a job of several nodes takes OneFlow's default
/// port, 29500 (shown by a program that only prints it: a real job there could meet a
/// stranger's on a shared host).
#[test]
fn nodes_without_a_token_or_port_meet_as_oneflows_do() {
    let out = launch_sh(
        &["--nnodes", "2", "--node_rank", "1"],
        "echo $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 1] 1 2 127.0.0.1 29500"]
    );
    let prog = example("collective_loop");
    let port = common::free_port();
    let nodes: Vec<_> = (0..2)
        .map(|n| {
            Command::new(launcher())
                .args(["--nnodes", "2", "--node_rank", &n.to_string()])
                .args(["--nproc_per_node", "2", "--master_addr", "127.0.0.1"])
                .args(["--master_port", &port])
                .arg(&prog)
                .env_remove("GFLOW_JOB_TOKEN")
                .env("GFLOW_TEST_ITERS", "3")
                .env("GFLOW_TIMEOUT_SECS", "30")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = nodes
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (n, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "node {n}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("GFLOW_JOB_TOKEN is not set"));
    }
    let mut lines = sorted_lines(&outs[0].stdout);
    lines.extend(sorted_lines(&outs[1].stdout));
    assert_eq!(
        lines,
        vec![
            "[rank 0] done: 12",
            "[rank 1] done: 12",
            "[rank 2] done: 12",
            "[rank 3] done: 12"
        ]
    );
}

/// OneFlow's `--logdir DIR --redirect_stdout_and_stderr`: each process's output goes to
/// `DIR/local_rank_I/{stdout,stderr}` (its `GLOG_log_dir`) instead of the console; redirecting
/// without a directory is refused by name before anything runs.
#[test]
fn oneflow_logdir_redirects_each_processs_output() {
    let dir = std::env::temp_dir().join(format!("gflow-oneflow-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = launch_sh(
        &[
            "--nproc_per_node",
            "2",
            "--logdir",
            dir.to_str().unwrap(),
            "--redirect_stdout_and_stderr",
        ],
        "echo out $RANK $GLOG_log_dir; echo err $RANK >&2",
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    for r in 0..2 {
        let d = dir.join(format!("local_rank_{r}"));
        assert_eq!(
            std::fs::read_to_string(d.join("stdout")).unwrap(),
            format!("out {r} {}\n", d.display())
        );
        assert_eq!(
            std::fs::read_to_string(d.join("stderr")).unwrap(),
            format!("err {r}\n")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let out = launch_sh(&["--redirect_stdout_and_stderr"], "echo ran", &[]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("--logdir"),
        "{}",
        text(&out.stderr)
    );
}
