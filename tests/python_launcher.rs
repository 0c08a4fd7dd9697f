//! `python -m gflow.distributed.launch` against OneFlow's launcher: its flags (`--nproc_per_node`,
//! `--nnodes`, `--node_rank`, `--master_addr`, `--master_port`, `-m`, `--no_python`, `--logdir`,
//! `--redirect_stdout_and_stderr`, and torch's `--use_env`), the variables each child gets, the
//! program's own arguments passed through, and a failing child stopping the others (with what
//! they started) and its exit code becoming the launcher's. The launcher's file runs as a script
//! (it needs only Python's standard library), so the extension module need not be built.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The Python launcher's source file.
fn launch_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/gflow/distributed/launch.py")
}

/// A Python 3 interpreter, or `None` (the test then says it skipped, unless
/// `GFLOW_REQUIRE_BACKEND` names `python`).
fn python() -> Option<String> {
    let found = ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys; assert sys.version_info >= (3, 8)"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            !gflow::backend::required("python"),
            "no Python 3 interpreter"
        );
        gflow::backend::say_skipped("python launcher", &"no Python 3 interpreter");
    }
    found.map(String::from)
}

/// `python launch.py ARGS` in `dir`, with no job variables or token of its own.
fn launch(py: &str, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(py);
    common::without_job_env(&mut cmd);
    cmd.arg(launch_py())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run the launcher")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = text(b).lines().map(String::from).collect();
    v.sort();
    v
}

/// A scratch directory of one test, made empty, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("gflow-pylaunch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A script printing the variables OneFlow's launcher sets, and its own arguments.
const PRINT_ENV: &str = "import os, sys\n\
print(*(os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', \
'MASTER_ADDR', 'MASTER_PORT')), sys.argv[1:])\n";

#[test]
fn oneflows_flags_set_oneflows_variables_and_pass_the_programs_arguments() {
    let Some(py) = python() else { return };
    let dir = Scratch::new("flags");
    std::fs::write(dir.join("show.py"), PRINT_ENV).unwrap();
    // Node 1 of 2 (the children need no rendezvous: they only print).
    let out = launch(
        &py,
        &dir,
        &[
            "--nproc_per_node",
            "2",
            "--nnodes",
            "2",
            "--node_rank",
            "1",
            "--master_addr",
            "10.1.2.3",
            "--master_port",
            "23456",
            "--use_env",
            "show.py",
            "--lr",
            "0.1",
            "--nproc_per_node",
            "7",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let args = "['--lr', '0.1', '--nproc_per_node', '7']";
    assert_eq!(
        sorted_lines(&out.stdout),
        vec![
            format!("[rank 2] 2 0 4 2 10.1.2.3 23456 {args}"),
            format!("[rank 3] 3 1 4 2 10.1.2.3 23456 {args}"),
        ]
    );
    // The defaults: one node, 127.0.0.1, a port chosen for the job (the same for every rank).
    let out = launch(&py, &dir, &["--nproc_per_node", "3", "show.py"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = sorted_lines(&out.stdout);
    assert_eq!(lines.len(), 3, "{lines:?}");
    let port = lines[0].split(' ').nth(7).unwrap().to_string();
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{lines:?}");
    for (r, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("[rank {r}] {r} {r} 3 3 127.0.0.1 {port} []"));
    }
    // Several nodes and no --master_port: OneFlow's default port.
    let out = launch(&py, &dir, &["--nnodes", "2", "show.py"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] 0 0 2 1 127.0.0.1 29500 []"]
    );
}

#[test]
fn module_and_no_python_run_the_program_as_oneflow_does() {
    let Some(py) = python() else { return };
    let dir = Scratch::new("module");
    std::fs::write(dir.join("showmod.py"), PRINT_ENV).unwrap();
    let out = launch(&py, &dir, &["--nproc_per_node", "2", "-m", "showmod", "x"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sorted_lines(&out.stdout).len(), 2);
    assert!(text(&out.stdout).contains("['x']"), "{}", text(&out.stdout));
    let out = launch(
        &py,
        &dir,
        &[
            "--nproc_per_node",
            "2",
            "--no_python",
            "sh",
            "-c",
            "echo sh $RANK",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        sorted_lines(&out.stdout),
        vec!["[rank 0] sh 0", "[rank 1] sh 1"]
    );
    // OneFlow refuses the pair.
    let out = launch(&py, &dir, &["--no_python", "-m", "showmod"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--no_python"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn logdir_and_redirect_write_each_ranks_output_where_oneflow_does() {
    let Some(py) = python() else { return };
    let dir = Scratch::new("logdir");
    let script = "import os, sys; print('out', os.environ['RANK']); \
                  print('err', os.environ['RANK'], file=sys.stderr); \
                  print(os.environ['GLOG_log_dir'])";
    std::fs::write(dir.join("log.py"), script).unwrap();
    let out = launch(
        &py,
        &dir,
        &[
            "--nproc_per_node",
            "2",
            "--logdir",
            "logs",
            "--redirect_stdout_and_stderr",
            "log.py",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        out.stdout.is_empty(),
        "redirected output stays off the console"
    );
    for r in 0..2 {
        let d = dir.join("logs").join(format!("local_rank_{r}"));
        let o = std::fs::read_to_string(d.join("stdout")).unwrap();
        let glog = d.canonicalize().unwrap();
        assert_eq!(o, format!("out {r}\n{}\n", glog.display()));
        let e = std::fs::read_to_string(d.join("stderr")).unwrap();
        assert_eq!(e, format!("err {r}\n"));
    }
    // Without --logdir there is nowhere to redirect to.
    let out = launch(&py, &dir, &["--redirect_stdout_and_stderr", "log.py"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--logdir"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_flag_values_are_refused_by_name() {
    let Some(py) = python() else { return };
    let dir = Scratch::new("badflags");
    for (args, needle) in [
        (&["--nproc_per_node", "0", "x.py"][..], "--nproc_per_node"),
        (&["--nproc_per_node", "two", "x.py"], "--nproc_per_node"),
        (
            &["--nnodes", "2", "--node_rank", "2", "x.py"],
            "--node_rank",
        ),
        (&["--master_port", "99999", "x.py"], "--master_port"),
    ] {
        let out = launch(&py, &dir, args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            text(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_failing_rank_stops_the_others_and_its_exit_code_is_the_launchers() {
    let Some(py) = python() else { return };
    let dir = Scratch::new("fail");
    // Rank 1 fails with 7; rank 0 starts a grandchild that would run for a minute.
    let script = "if [ $RANK = 1 ]; then sleep 1; exit 7; fi; \
                  sleep 60 & echo $! > grandchild.pid; wait";
    let t = Instant::now();
    let out = launch(
        &py,
        &dir,
        &["--nproc_per_node", "2", "--no_python", "sh", "-c", script],
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("rank 1 failed (exit code 7)"),
        "{}",
        text(&out.stderr)
    );
    // The grandchild went with its rank.
    let pid = std::fs::read_to_string(dir.join("grandchild.pid")).unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
    if Path::new("/proc/self").exists() {
        let gone = Instant::now() + Duration::from_secs(10);
        while proc_dir.exists()
            && !std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z "))
            && Instant::now() < gone
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let zombie =
            std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z "));
        assert!(
            !proc_dir.exists() || zombie,
            "the grandchild {} outlived the job",
            pid.trim()
        );
    }
    // A rank ended by a signal: 128 + the signal, as a shell reports it.
    let out = launch(
        &py,
        &dir,
        &[
            "--nproc_per_node",
            "2",
            "--no_python",
            "sh",
            "-c",
            "kill -9 $$",
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("failed (signal 9)"),
        "{}",
        text(&out.stderr)
    );
}
