//! Starting under the schedulers clusters already run: a real `mpirun` job, Slurm's variables
//! set by hand as `srun` sets them, and `torchrun --no-python` (where PyTorch is installed:
//! `GFLOW_TORCH_PYTHON=/path/to/bin/python`, or `python3`).
//! Each runs `collective_loop` (every rank all-reduces a vector of ones `GFLOW_TEST_ITERS` times
//! and prints the running total), so `done: world * iters` printed once per process, unprefixed,
//! shows a real multi-rank world: a one-rank run prints `iters`, and the thread fallback of
//! `gflow::run` prints 4 lines prefixed `[rank r]`.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use common::example;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A command with no launcher's variables inherited from the test's own environment.
fn clean(cmd: &mut Command) -> &mut Command {
    common::without_job_env(cmd).env("GFLOW_TIMEOUT_SECS", "30")
}

/// Asserts the output is `procs` unprefixed lines, each the total of a `world`-rank job.
fn assert_real_world(what: &str, out: &Output, procs: usize, world: usize, iters: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("done: {}", world * iters);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("done:")).collect();
    assert_eq!(lines, vec![want.as_str(); procs], "{what}: {stdout}");
}

#[test]
fn mpirun_job() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        return gflow::backend::say_skipped(
            "mpirun_job",
            &"no `mpirun` (Debian: apt-get install openmpi-bin; scripts/test.sh installs it as \
              root): starting under Open MPI is NOT tested here",
        );
    }
    let prog = example("collective_loop");
    let mut cmd = Command::new("mpirun");
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    let out = clean(&mut cmd)
        .args(["--oversubscribe", "-np", "3", "-x", "GFLOW_TEST_ITERS=5"])
        .arg(&prog)
        .output()
        .expect("run mpirun");
    assert_real_world("mpirun -np 3", &out, 3, 3, 5);
}

/// Rank `rank` of a 2-task Slurm step, its variables as `srun -n 2` sets them (and more).
fn slurm_task(prog: &PathBuf, rank: usize, job_id: &str, skip: Option<&str>) -> Command {
    let mut cmd = Command::new(prog);
    clean(&mut cmd);
    for (k, v) in [
        ("SLURM_PROCID", rank.to_string()),
        ("SLURM_NTASKS", "2".into()),
        ("SLURM_LOCALID", rank.to_string()),
        ("SLURM_JOB_NODELIST", "localhost,node[02-03]".into()),
        ("SLURM_JOB_ID", job_id.into()),
        ("SLURM_STEP_ID", "0".into()),
        ("GFLOW_TEST_ITERS", "5".into()),
    ] {
        if skip != Some(k) {
            cmd.env(k, v);
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

#[test]
fn slurm_variables_by_hand() {
    let prog = example("collective_loop");
    let job_id = (std::process::id() % 1_000_000).to_string();
    let kids: Vec<_> = (0..2)
        .map(|r| slurm_task(&prog, r, &job_id, None).spawn().expect("spawn"))
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert_real_world(&format!("slurm task {r}"), o, 1, 2, 5);
    }
    // an incomplete set is refused by name, never run as one rank or as threads
    let o = slurm_task(&prog, 1, &job_id, Some("SLURM_LOCALID"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("Environment") && err.contains("missing SLURM_LOCALID"),
        "{err}"
    );
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Open MPI's variables naming a multi-host job without `MASTER_ADDR`: an error, not threads.
#[test]
fn incomplete_open_mpi_job_is_refused() {
    let prog = example("collective_loop");
    let o = clean(&mut Command::new(&prog))
        .envs([
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("missing MASTER_ADDR"), "{err}");
    assert!(o.stdout.is_empty());
}

/// The Python that has PyTorch: `GFLOW_TORCH_PYTHON` (a path, e.g. a venv's `bin/python`),
/// else `python3` on `PATH`; `None` when neither imports `torch`. `GFLOW_TORCH_PYTHON` set to a
/// Python without PyTorch is a test failure, not a skip: whoever set it wants the run.
fn torch_python() -> Option<String> {
    let given = std::env::var("GFLOW_TORCH_PYTHON").ok();
    let python = given.clone().unwrap_or_else(|| "python3".into());
    let out = Command::new(&python).args(["-c", "import torch"]).output();
    let ok = out.as_ref().is_ok_and(|o| o.status.success());
    if let (Some(p), false) = (&given, ok) {
        panic!(
            "GFLOW_TORCH_PYTHON={p:?} cannot import torch: {:?}",
            out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        );
    }
    ok.then_some(python)
}

/// `torchrun --standalone --no-python --nproc-per-node 3 collective_loop`, as torchrun starts
/// it: its agent's store on `MASTER_PORT`, `TORCHELASTIC_*` set, the ranks meeting elsewhere.
#[test]
fn torchrun_no_python() {
    let Some(python) = torch_python() else {
        return gflow::backend::say_skipped(
            "torchrun_no_python",
            &"neither GFLOW_TORCH_PYTHON nor `python3` imports torch: starting under torchrun is \
              NOT tested here (GFLOW_TORCH_PYTHON=/path/to/venv/bin/python runs it)",
        );
    };
    let prog = example("collective_loop");
    let out = clean(&mut Command::new(&python))
        .args(["-m", "torch.distributed.run", "--standalone", "--no-python"])
        .args(["--nproc-per-node", "3"])
        .arg(&prog)
        .env("GFLOW_TEST_ITERS", "5")
        .output()
        .expect("run torchrun");
    assert_real_world("torchrun --nproc-per-node 3", &out, 3, 3, 5);
}

/// torchrun's variables by hand, with `MASTER_PORT` held by a listener as torchrun's agent
/// store holds it: the ranks meet on a port of their own (rank 0 would fail to listen on the
/// store's port, and peers would talk to the store).
#[test]
fn torchrun_variables_by_hand_leave_the_store_port_alone() {
    let store = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = store.local_addr().unwrap().port().to_string();
    let prog = example("collective_loop");
    let run_id = format!("test-{}", std::process::id());
    let kids: Vec<_> = (0..2)
        .map(|r| {
            clean(&mut Command::new(&prog))
                .envs([
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", port.as_str()),
                    ("WORLD_SIZE", "2"),
                    ("LOCAL_WORLD_SIZE", "2"),
                    ("TORCHELASTIC_RUN_ID", run_id.as_str()),
                    ("TORCHELASTIC_RESTART_COUNT", "0"),
                    ("GFLOW_TEST_ITERS", "5"),
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        assert_real_world(
            &format!("torchrun rank {r}"),
            &k.wait_with_output().unwrap(),
            1,
            2,
            5,
        );
    }
    drop(store);
}

/// Open MPI's three variables of the contract set by hand (`OMPI_COMM_WORLD_RANK`, `_SIZE`,
/// `_LOCAL_RANK`: no local size, job id or `MASTER_ADDR`), as a test harness or a wrapper
/// script might start the ranks of one host: they meet on 127.0.0.1, on a port derived from
/// their shared parent.
#[test]
fn open_mpi_variables_by_hand_on_one_host() {
    let prog = example("collective_loop");
    let kids: Vec<_> = (0..2)
        .map(|r| {
            clean(&mut Command::new(&prog))
                .envs([
                    ("OMPI_COMM_WORLD_SIZE", "2"),
                    ("GFLOW_TEST_ITERS", "5"),
                    ("GFLOW_JOB_TOKEN", "ompi-by-hand"),
                ])
                .env("OMPI_COMM_WORLD_RANK", r.to_string())
                .env("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        assert_real_world(
            &format!("Open MPI rank {r} by hand"),
            &k.wait_with_output().unwrap(),
            1,
            2,
            5,
        );
    }
}
