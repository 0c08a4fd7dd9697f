//! One multi-rank test body, three ways: ranks as threads (`gflow::simulate`), and ranks as
//! processes started by `gflow-launch` over shared memory and over QUIC. A test calls
//! [`world`]; [`relaunch`] re-runs named tests of the current test binary under the launcher,
//! where [`world`] makes the process one rank and gathers every rank's result to every rank, so
//! the test's assertions (which may compare ranks) run unchanged in each process.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used, clippy::panic)]

pub mod hosts;

use std::path::PathBuf;
use std::process::Command;

use gflow::{Collectives, Env, Error, Result};

/// The launcher built with the tests.
pub fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gflow-launch"))
}

/// The example binary, brought up to date (a `cargo test --test NAME` alone does not build
/// examples, and a stale one would test old code). It is built as `cargo test --workspace`
/// builds examples (the test profile, every member's features), so it reuses that build's
/// dependencies: a build in another profile or feature set would compile and store a second
/// copy of every dependency (wgpu, quinn, gemm), which is what filled CI's disk.
pub fn example(name: &str) -> PathBuf {
    let st = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--profile", "test", "--workspace"])
        .args(["--example", name])
        .status()
        .expect("cargo build");
    assert!(st.success(), "cargo build --example {name} failed");
    launcher().parent().unwrap().join("examples").join(name)
}

/// A run's stdout lines, sorted (ranks print in any order).
pub fn sorted_lines(o: &std::process::Output) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// A value that crosses processes as bytes (the results the tests compare).
pub trait Wire: Sized {
    /// Appends the encoding.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes one value from the front of `inp`.
    fn take(inp: &mut &[u8]) -> Self;
}

fn take_bytes<'a>(inp: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (a, b) = inp.split_at(n);
    *inp = b;
    a
}

macro_rules! wire_number {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn take(inp: &mut &[u8]) -> Self {
                <$t>::from_le_bytes(take_bytes(inp, size_of::<$t>()).try_into().unwrap())
            }
        }
    )*};
}
wire_number!(f32, f64, u64, i64, usize);

impl Wire for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn take(inp: &mut &[u8]) -> Self {
        take_bytes(inp, 1)[0] != 0
    }
}

impl Wire for () {
    fn put(&self, _: &mut Vec<u8>) {}
    fn take(_: &mut &[u8]) -> Self {}
}

impl Wire for String {
    fn put(&self, out: &mut Vec<u8>) {
        self.len().put(out);
        out.extend_from_slice(self.as_bytes());
    }
    fn take(inp: &mut &[u8]) -> Self {
        let n = usize::take(inp);
        String::from_utf8(take_bytes(inp, n).to_vec()).unwrap()
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        self.len().put(out);
        self.iter().for_each(|x| x.put(out));
    }
    fn take(inp: &mut &[u8]) -> Self {
        let n = usize::take(inp);
        (0..n).map(|_| T::take(inp)).collect()
    }
}

impl<T: Wire> Wire for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        self.is_some().put(out);
        if let Some(x) = self {
            x.put(out);
        }
    }
    fn take(inp: &mut &[u8]) -> Self {
        bool::take(inp).then(|| T::take(inp))
    }
}

macro_rules! wire_tuple {
    ($($n:ident),*) => {
        impl<$($n: Wire),*> Wire for ($($n,)*) {
            #[allow(non_snake_case)]
            fn put(&self, out: &mut Vec<u8>) {
                let ($($n,)*) = self;
                $($n.put(out);)*
            }
            fn take(inp: &mut &[u8]) -> Self {
                ($($n::take(inp),)*)
            }
        }
    };
}
wire_tuple!(A, B);
wire_tuple!(A, B, C);
wire_tuple!(A, B, C, D);
wire_tuple!(A, B, C, D, E);
wire_tuple!(A, B, C, D, E, F);
wire_tuple!(A, B, C, D, E, F, G);
wire_tuple!(A, B, C, D, E, F, G, H);

/// The value of a run on wgpu, or `None` (the test then returns, said loudly) when no adapter
/// is there and wgpu is not required (`GFLOW_REQUIRE_BACKEND`); any other error fails the test.
pub fn on_wgpu<T>(test: &str, run: Result<T>) -> Option<T> {
    match run {
        Ok(v) => Some(v),
        Err(Error::BackendUnavailable { reason, .. }) if !gflow::backend::required("wgpu") => {
            gflow::backend::say_skipped(test, &format!("no wgpu adapter: {reason}"));
            None
        }
        Err(e) => panic!("wgpu: {e}"),
    }
}

/// A TCP port free on loopback now (for a rendezvous started by hand), chosen below Linux's
/// ephemeral range as `gflow-launch` chooses rank 0's: a port from `bind(0)` may be taken by
/// another test's outgoing connection before the rendezvous binds it.
pub fn free_port() -> String {
    (0..64)
        .map(|_| {
            let mut b = [0u8; 2];
            getrandom::fill(&mut b).unwrap();
            20_000 + u16::from_le_bytes(b) % 12_000
        })
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("a free port below the ephemeral range")
        .to_string()
}

/// Runs `f` on ranks 0..n and returns every rank's result, in rank order: as threads, or, under
/// `gflow-launch`, as this process's rank followed by an all-gather of the results.
pub fn world<T: Wire + Send>(n: usize, f: impl Fn(Env) -> Result<T> + Sync) -> Result<Vec<T>> {
    if !gflow::launched() {
        return gflow::simulate(n, f);
    }
    let env = gflow::init()?;
    if env.world_size() != n {
        return Err(Error::Environment {
            reason: format!(
                "the test needs {n} ranks, the launcher started {}",
                env.world_size()
            ),
        });
    }
    let mut mine = vec![];
    f(env.clone())?.put(&mut mine);
    let group: Vec<usize> = (0..n).collect();
    let c = env.comm();
    let lens = c.all_gather(&group, &(mine.len() as u64).to_le_bytes(), &vec![8; n])?;
    let counts: Vec<usize> = lens
        .chunks(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
        .collect();
    let all = c.all_gather(&group, &mine, &counts)?;
    let mut inp = &all[..];
    Ok((0..n).map(|_| T::take(&mut inp)).collect())
}

/// Re-runs each (test name, ranks) of this test binary as that many processes under
/// `gflow-launch`, over shared memory and over QUIC, and fails with the output of any run that
/// fails. Inside a launched process it does nothing.
pub fn relaunch(tests: &[(&str, usize)]) {
    if gflow::launched() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    for transport in ["shm", "quic"] {
        for &(name, n) in tests {
            let out = Command::new(env!("CARGO_BIN_EXE_gflow-launch"))
                .args(["--nproc_per_node", &n.to_string()])
                .arg(&exe)
                .args([name, "--exact", "--test-threads=1"])
                .env("GFLOW_TRANSPORT", transport)
                .env("GFLOW_TIMEOUT_SECS", "30")
                .output()
                .expect("run gflow-launch");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{name} as {n} processes over {transport}:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// `cmd` without any variable that names a job (gflow's, torchrun's, Slurm's, Open MPI's,
/// PMIx's) or pins its settings, so a child forms only the job a test gives it, whatever the
/// environment the tests run in.
pub fn without_job_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("SLURM_")
            || k.starts_with("OMPI_")
            || k.starts_with("PMIX_")
            || k.starts_with("TORCHELASTIC_")
            || [
                "WORLD_SIZE",
                "RANK",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "GFLOW_MASTER_PORT",
                "GFLOW_SIM_RANKS",
                "GFLOW_JOB_TOKEN",
                "GFLOW_DEVICE_OVERRIDE",
                "GFLOW_MAX_FRAME",
            ]
            .contains(&k.as_str())
        {
            cmd.env_remove(k);
        }
    }
    cmd
}
