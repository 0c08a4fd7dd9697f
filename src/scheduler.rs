//! The job a process belongs to, read from the variables of whichever launcher started it:
//! gflow's / OneFlow's / torchrun's (`MASTER_ADDR MASTER_PORT WORLD_SIZE RANK LOCAL_RANK`,
//! `LOCAL_WORLD_SIZE`), Open MPI's (`OMPI_COMM_WORLD_*`) or Slurm's (`SLURM_PROCID` ...).
//!
//! A pure function of a variable map ([`job_from`]), so every scheduler's rules are tested on
//! tables. A variable set that names a multi-rank job but cannot be completed is an error that
//! says what is missing: a job must never quietly become a one-rank run.
//!
//! Precedence: gflow's variables first (they are explicit, and torchrun sets them), then Open
//! MPI's, then Slurm's. Any one variable of a set names its job (`RANK` without `WORLD_SIZE`,
//! `SLURM_NTASKS=4` without `SLURM_PROCID`, `OMPI_COMM_WORLD_LOCAL_RANK` alone): the rest
//! missing is then an error, never a world of one. Open MPI precedes Slurm because `mpirun` inside a Slurm allocation starts
//! its daemons with `srun`: there the Slurm variables describe the daemons (one per node), not
//! the ranks, while `OMPI_COMM_WORLD_*` describes the ranks.

use std::collections::HashMap;

use crate::{Error, Result};

/// Which launcher's variables formed the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// `gflow-launch`, OneFlow's launcher or variables set by hand.
    Gflow,
    /// torchrun (`TORCHELASTIC_*` present): its agent's store owns `MASTER_PORT`.
    Torchrun,
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
}

/// One process's place in a job, and where the job's ranks meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The launcher whose variables formed the job.
    pub launcher: Launcher,
    /// Number of ranks.
    pub world: usize,
    /// This process's rank.
    pub rank: usize,
    /// This process's index among the ranks of its host (picks its devices).
    pub local_rank: usize,
    /// Host of the rendezvous (rank 0's host).
    pub master_addr: String,
    /// Port of the rendezvous.
    pub master_port: u16,
    /// Whether the port was derived from the job (no `MASTER_PORT` of its own, or torchrun's
    /// belongs to its store) rather than given.
    pub port_derived: bool,
    /// Shared by every rank of the job (and only by it): `GFLOW_JOB_TOKEN`, else the
    /// scheduler's job id.
    pub token: String,
}

/// The job named by `vars` (a process's environment), `None` when no launcher's variables are
/// present (the process is a world of one). `parent_pid` is the fallback job key of an
/// `mpirun` that names no job id (the ranks of one host share their parent).
///
/// `GFLOW_MASTER_PORT` overrides the rendezvous port under every launcher.
///
/// # Errors
/// `Environment` naming the missing or malformed variable.
pub fn job_from(vars: &HashMap<String, String>, parent_pid: u32) -> Result<Option<Job>> {
    let v = Vars(vars);
    let port = v
        .get("GFLOW_MASTER_PORT")
        .map(|p| v.port("GFLOW_MASTER_PORT", p))
        .transpose()?;
    let job = match named_by(&v) {
        Some(Launcher::Gflow) => gflow_vars(&v)?,
        Some(Launcher::OpenMpi) => open_mpi(&v, parent_pid)?,
        Some(Launcher::Slurm) => slurm(&v)?,
        Some(Launcher::Torchrun) | None => return Ok(None),
    };
    let Some(mut job) = job else {
        return Ok(None);
    };
    if let Some(p) = port {
        job.master_port = p;
        job.port_derived = false;
    }
    if let Some(t) = v.get("GFLOW_JOB_TOKEN") {
        job.token = t.to_string();
    }
    Ok(Some(job))
}

/// `job_from` on this process's environment.
///
/// # Errors
/// As [`job_from`].
pub fn current_job() -> Result<Option<Job>> {
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    #[cfg(unix)]
    let parent = std::os::unix::process::parent_id();
    #[cfg(not(unix))]
    let parent = 0;
    job_from(&vars, parent)
}

/// Whether any launcher's variables are present (this process is one rank of a job, even if
/// they are incomplete: then [`current_job`] says what is missing).
pub fn launched() -> bool {
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    named_by(&Vars(&vars)).is_some()
}

/// Whose variables name a job, in precedence order (see the module docs): any of `WORLD_SIZE`,
/// `RANK`, `LOCAL_RANK` (gflow's and torchrun's, [`Launcher::Gflow`] for both here), any
/// `OMPI_COMM_WORLD_*`, or `SLURM_PROCID` or `SLURM_NTASKS` above 1. A part of a set names the
/// job as much as all of it, so that what is missing is an error rather than a world of one.
fn named_by(v: &Vars) -> Option<Launcher> {
    if ["WORLD_SIZE", "RANK", "LOCAL_RANK"]
        .iter()
        .any(|k| v.get(k).is_some())
    {
        Some(Launcher::Gflow)
    } else if v
        .0
        .keys()
        .any(|k| k.starts_with("OMPI_COMM_WORLD_") && v.get(k).is_some())
    {
        Some(Launcher::OpenMpi)
    } else if v.get("SLURM_PROCID").is_some()
        || v.num("SLURM_NTASKS").ok().flatten().is_some_and(|n| n > 1)
    {
        Some(Launcher::Slurm)
    } else {
        None
    }
}

/// Variable lookups that name the variable in every error.
struct Vars<'a>(&'a HashMap<String, String>);

impl Vars<'_> {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    fn num(&self, k: &str) -> Result<Option<usize>> {
        self.get(k)
            .map(|s| {
                s.parse::<usize>()
                    .map_err(|_| env_err(format!("{k}={s:?} is not a non-negative integer")))
            })
            .transpose()
    }

    /// A variable a `what` job cannot do without.
    fn need(&self, k: &str, what: &str) -> Result<usize> {
        self.num(k)?
            .ok_or_else(|| env_err(format!("{what} is missing {k}")))
    }

    fn port(&self, k: &str, s: &str) -> Result<u16> {
        s.parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| env_err(format!("{k}={s:?} is not a port (1-65535)")))
    }
}

fn env_err(reason: String) -> Error {
    Error::Environment { reason }
}

/// Checks `rank < world` and `local < local_world`, naming the variables.
fn check_ranks(
    (rank_var, rank): (&str, usize),
    (world_var, world): (&str, usize),
    (local_var, local): (&str, usize),
    local_world: Option<(&str, usize)>,
) -> Result<()> {
    if world == 0 {
        return Err(env_err(format!(
            "{world_var}=0: a job has at least one rank"
        )));
    }
    if rank >= world {
        return Err(env_err(format!(
            "{rank_var}={rank} is not below {world_var}={world}"
        )));
    }
    if let Some((lw_var, lw)) = local_world {
        if lw == 0 || lw > world {
            return Err(env_err(format!(
                "{lw_var}={lw} is not between 1 and {world_var}={world}"
            )));
        }
        if local >= lw {
            return Err(env_err(format!(
                "{local_var}={local} is not below {lw_var}={lw}"
            )));
        }
    } else if local >= world {
        return Err(env_err(format!(
            "{local_var}={local} is not below {world_var}={world}"
        )));
    }
    Ok(())
}

/// gflow's, OneFlow's and torchrun's variables.
fn gflow_vars(v: &Vars) -> Result<Option<Job>> {
    let torchrun = v.0.keys().any(|k| k.starts_with("TORCHELASTIC_"));
    let what = if torchrun {
        "a torchrun job"
    } else {
        "a job of WORLD_SIZE > 1"
    };
    let Some(world) = v.num("WORLD_SIZE")? else {
        let set = ["RANK", "LOCAL_RANK"]
            .iter()
            .filter_map(|k| v.get(k).map(|x| format!("{k}={x}")))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(env_err(format!(
            "{set} names one rank of a job, but WORLD_SIZE is missing (set it with RANK, \
             MASTER_ADDR and MASTER_PORT, or start the ranks with gflow-launch or torchrun)"
        )));
    };
    if world == 0 {
        return Err(env_err("WORLD_SIZE=0: a job has at least one rank".into()));
    }
    if world == 1 {
        // a world of one, whose ranks (where given) must be 0, and whose other variables
        // (where given) must still be well formed: a typo is an error however many ranks
        let (rank, local) = (v.num("RANK")?, v.num("LOCAL_RANK")?);
        let local_world = v.num("LOCAL_WORLD_SIZE")?;
        check_ranks(
            ("RANK", rank.unwrap_or(0)),
            ("WORLD_SIZE", 1),
            ("LOCAL_RANK", local.unwrap_or(0)),
            local_world.map(|n| ("LOCAL_WORLD_SIZE", n)),
        )?;
        if let Some(p) = v.get("MASTER_PORT") {
            v.port("MASTER_PORT", p)?;
        }
        return Ok(None);
    }
    let rank = v.need("RANK", what)?;
    let local_rank = v.need("LOCAL_RANK", what)?;
    let local_world = v.num("LOCAL_WORLD_SIZE")?;
    check_ranks(
        ("RANK", rank),
        ("WORLD_SIZE", world),
        ("LOCAL_RANK", local_rank),
        local_world.map(|n| ("LOCAL_WORLD_SIZE", n)),
    )?;
    let master_addr = match (v.get("MASTER_ADDR"), local_world) {
        (Some(a), _) => a.to_string(),
        (None, Some(lw)) if lw < world => {
            return Err(env_err(format!(
                "{what} on several hosts (LOCAL_WORLD_SIZE={lw} < WORLD_SIZE={world}) is missing \
                 MASTER_ADDR"
            )));
        }
        (None, _) => "127.0.0.1".into(),
    };
    let port_s = v
        .get("MASTER_PORT")
        .ok_or_else(|| env_err(format!("{what} is missing MASTER_PORT")))?;
    let store_port = v.port("MASTER_PORT", port_s)?;
    let run_id = v.get("TORCHELASTIC_RUN_ID").unwrap_or_default();
    let (launcher, master_port) = if torchrun {
        // torchrun's agent serves its store on MASTER_PORT: meet on another port, the same
        // on every rank (and new after each restart of the job).
        let key = format!(
            "torchrun:{master_addr}:{store_port}:{run_id}:{}",
            v.get("TORCHELASTIC_RESTART_COUNT").unwrap_or("0")
        );
        (Launcher::Torchrun, derived_port(&key, store_port))
    } else {
        (Launcher::Gflow, store_port)
    };
    Ok(Some(Job {
        launcher,
        world,
        rank,
        local_rank,
        master_addr,
        master_port,
        port_derived: torchrun,
        token: if torchrun {
            format!("torchrun:{run_id}")
        } else {
            String::new()
        },
    }))
}

/// Open MPI's variables.
fn open_mpi(v: &Vars, parent_pid: u32) -> Result<Option<Job>> {
    const WHAT: &str = "an Open MPI job";
    let world = v.need("OMPI_COMM_WORLD_SIZE", WHAT)?;
    if world <= 1 {
        check_ranks(
            (
                "OMPI_COMM_WORLD_RANK",
                v.num("OMPI_COMM_WORLD_RANK")?.unwrap_or(0),
            ),
            ("OMPI_COMM_WORLD_SIZE", world),
            (
                "OMPI_COMM_WORLD_LOCAL_RANK",
                v.num("OMPI_COMM_WORLD_LOCAL_RANK")?.unwrap_or(0),
            ),
            None,
        )?;
        return Ok(None);
    }
    let rank = v.need("OMPI_COMM_WORLD_RANK", WHAT)?;
    let local_rank = v.need("OMPI_COMM_WORLD_LOCAL_RANK", WHAT)?;
    let local_world = v.num("OMPI_COMM_WORLD_LOCAL_SIZE")?;
    check_ranks(
        ("OMPI_COMM_WORLD_RANK", rank),
        ("OMPI_COMM_WORLD_SIZE", world),
        ("OMPI_COMM_WORLD_LOCAL_RANK", local_rank),
        local_world.map(|n| ("OMPI_COMM_WORLD_LOCAL_SIZE", n)),
    )?;
    // Every rank on this host: as `OMPI_COMM_WORLD_LOCAL_SIZE` says (mpirun always sets it);
    // without it (variables set by hand) the ranks are taken to be local, and a rank that is
    // not then fails its rendezvous with an error, never joining another job.
    let all_local = local_world.is_none_or(|n| n == world);
    let master_addr = match v.get("MASTER_ADDR") {
        Some(a) => a.to_string(),
        None if all_local => "127.0.0.1".into(),
        None => {
            return Err(env_err(format!(
                "{WHAT} on several hosts (OMPI_COMM_WORLD_LOCAL_SIZE={} < OMPI_COMM_WORLD_SIZE=\
                 {world}) is missing MASTER_ADDR (the host of rank 0)",
                local_world.map_or("unset".into(), |n| n.to_string())
            )));
        }
    };
    let job_id = v
        .get("OMPI_MCA_ess_base_jobid")
        .or_else(|| v.get("PMIX_NAMESPACE"))
        .map(String::from);
    let master_port = match (v.get("MASTER_PORT"), &job_id) {
        (Some(p), _) => v.port("MASTER_PORT", p)?,
        (None, Some(id)) => derived_port(&format!("ompi:{id}"), 0),
        // Ranks of one host share their parent (mpirun or its daemon).
        (None, None) if all_local => derived_port(&format!("ompi-ppid:{parent_pid}"), 0),
        (None, None) => {
            return Err(env_err(format!(
                "{WHAT} on several hosts names no job id (OMPI_MCA_ess_base_jobid or \
                 PMIX_NAMESPACE): set MASTER_PORT"
            )));
        }
    };
    Ok(Some(Job {
        launcher: Launcher::OpenMpi,
        world,
        rank,
        local_rank,
        master_addr,
        master_port,
        port_derived: v.get("MASTER_PORT").is_none(),
        token: format!("ompi:{}", job_id.unwrap_or_else(|| parent_pid.to_string())),
    }))
}

/// Slurm's variables (as `srun` sets them for each task).
fn slurm(v: &Vars) -> Result<Option<Job>> {
    const WHAT: &str = "a Slurm job";
    let world = v.need("SLURM_NTASKS", WHAT)?;
    if world <= 1 {
        check_ranks(
            ("SLURM_PROCID", v.num("SLURM_PROCID")?.unwrap_or(0)),
            ("SLURM_NTASKS", world),
            ("SLURM_LOCALID", v.num("SLURM_LOCALID")?.unwrap_or(0)),
            None,
        )?;
        return Ok(None);
    }
    let rank = v.need("SLURM_PROCID", WHAT)?;
    let local_rank = v.need("SLURM_LOCALID", WHAT)?;
    check_ranks(
        ("SLURM_PROCID", rank),
        ("SLURM_NTASKS", world),
        ("SLURM_LOCALID", local_rank),
        None,
    )?;
    let job_id = v
        .get("SLURM_JOB_ID")
        .or_else(|| v.get("SLURM_JOBID"))
        .ok_or_else(|| env_err(format!("{WHAT} is missing SLURM_JOB_ID")))?;
    // One node (as the step or the job says): rank 0 is on this host.
    let one_node = [
        "SLURM_STEP_NUM_NODES",
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
    ]
    .iter()
    .find_map(|k| v.get(k))
    .is_some_and(|n| n == "1");
    let list = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .iter()
    .find_map(|k| v.get(k).map(|l| (*k, l)));
    let master_addr = match (v.get("MASTER_ADDR"), list) {
        (Some(a), _) => a.to_string(),
        // Rank 0 runs on the first node of the step (of the job outside a step).
        (None, Some((k, list))) => {
            first_host(list).map_err(|why| env_err(format!("{k}={list:?}: {why}")))?
        }
        (None, None) if one_node => "127.0.0.1".into(),
        (None, None) => {
            return Err(env_err(format!(
                "{WHAT} is missing SLURM_JOB_NODELIST (or MASTER_ADDR, the host of rank 0)"
            )));
        }
    };
    let master_port = match v.get("MASTER_PORT") {
        Some(p) => v.port("MASTER_PORT", p)?,
        None => derived_port(
            &format!(
                "slurm:{job_id}:{}",
                v.get("SLURM_STEP_ID")
                    .or_else(|| v.get("SLURM_STEPID"))
                    .unwrap_or("")
            ),
            0,
        ),
    };
    Ok(Some(Job {
        launcher: Launcher::Slurm,
        world,
        rank,
        local_rank,
        master_addr,
        master_port,
        port_derived: v.get("MASTER_PORT").is_none(),
        token: format!("slurm:{job_id}"),
    }))
}

/// A port every rank derives alike from `key`: in 10240..32240, below Linux's ephemeral range
/// (so an outgoing connection never holds it), never `avoid`.
fn derived_port(key: &str, avoid: u16) -> u16 {
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let p = 10_240 + (h % 22_000) as u16;
    if p == avoid { p + 1 } else { p }
}

/// The first host of a Slurm node list in its compressed form (`node[01-03,07],gpu5` gives
/// `node01`), after checking the whole list is well formed.
///
/// # Errors
/// Why the list is malformed.
pub fn first_host(list: &str) -> std::result::Result<String, String> {
    let mut hosts = vec![];
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(format!("unbalanced '{c}' at {i}")),
            ',' if depth == 0 => {
                hosts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '['".into());
    }
    hosts.push(&list[start..]);
    let firsts = hosts
        .iter()
        .map(|h| first_of_host(h))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    firsts
        .into_iter()
        .next()
        .ok_or_else(|| "empty node list".into())
}

/// The first name a host pattern such as `rack[1-2]-n[07,09]` stands for (`rack1-n07`).
fn first_of_host(pattern: &str) -> std::result::Result<String, String> {
    if pattern.is_empty() {
        return Err("an empty host name".into());
    }
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("unclosed '[' in {pattern:?}"))?;
        let mut first = None;
        for range in rest[open + 1..close].split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(lo) || !digits(hi) {
                return Err(format!(
                    "{range:?} in {pattern:?} is not a number or a range"
                ));
            }
            let (a, b): (u64, u64) = (
                lo.parse().map_err(|_| format!("{lo:?} is too large"))?,
                hi.parse().map_err(|_| format!("{hi:?} is too large"))?,
            );
            if a > b {
                return Err(format!("range {range:?} in {pattern:?} runs backwards"));
            }
            first.get_or_insert(lo);
        }
        out.push_str(first.unwrap_or_default());
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn vars(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn job(kv: &[(&str, &str)]) -> Result<Option<Job>> {
        job_from(&vars(kv), 4242)
    }

    /// The error's reason, which must contain every one of `needles`.
    fn refused(kv: &[(&str, &str)], needles: &[&str]) {
        match job(kv) {
            Err(Error::Environment { reason }) => {
                for n in needles {
                    assert!(reason.contains(n), "{kv:?}: {reason:?} lacks {n:?}");
                }
            }
            other => panic!("{kv:?}: expected an Environment error, got {other:?}"),
        }
    }

    const GFLOW: &[(&str, &str)] = &[
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("WORLD_SIZE", "4"),
        ("RANK", "3"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
    ];

    const SLURM: &[(&str, &str)] = &[
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_JOB_NODELIST", "node[01-03,07],gpu5"),
        ("SLURM_JOB_ID", "777"),
    ];

    const OMPI: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("OMPI_MCA_ess_base_jobid", "1293615105"),
    ];

    fn with(base: &[(&str, &str)], changes: &[(&str, Option<&str>)]) -> Vec<(String, String)> {
        let mut m = vars(base);
        for (k, v) in changes {
            match v {
                Some(v) => m.insert(k.to_string(), v.to_string()),
                None => m.remove(*k),
            };
        }
        m.into_iter().collect()
    }

    fn pairs(v: &[(String, String)]) -> Vec<(&str, &str)> {
        v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn no_launcher_is_a_world_of_one() {
        assert_eq!(job(&[]).unwrap(), None);
        assert_eq!(job(&[("WORLD_SIZE", "1")]).unwrap(), None);
        assert_eq!(
            job(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).unwrap(),
            None
        );
        assert_eq!(
            job(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")]).unwrap(),
            None
        );
    }

    #[test]
    fn each_launcher_forms_its_job() {
        let g = job(GFLOW).unwrap().unwrap();
        assert_eq!(
            (
                g.launcher,
                g.world,
                g.rank,
                g.local_rank,
                g.master_addr.as_str(),
                g.master_port
            ),
            (Launcher::Gflow, 4, 3, 1, "10.0.0.1", 29500)
        );
        let s = job(SLURM).unwrap().unwrap();
        assert_eq!(
            (
                s.launcher,
                s.world,
                s.rank,
                s.local_rank,
                s.master_addr.as_str()
            ),
            (Launcher::Slurm, 8, 5, 1, "node01")
        );
        assert!((10_240..32_240).contains(&s.master_port));
        assert_eq!(s.token, "slurm:777");
        let o = job(OMPI).unwrap().unwrap();
        assert_eq!(
            (
                o.launcher,
                o.world,
                o.rank,
                o.local_rank,
                o.master_addr.as_str()
            ),
            (Launcher::OpenMpi, 4, 2, 2, "127.0.0.1")
        );
        assert!((10_240..32_240).contains(&o.master_port));
    }

    #[test]
    fn derived_ports_agree_across_ranks_and_differ_across_jobs() {
        let port = |base: &[(&str, &str)], changes: &[(&str, Option<&str>)]| {
            job(&pairs(&with(base, changes)))
                .unwrap()
                .unwrap()
                .master_port
        };
        // every rank of a job derives the same port
        assert_eq!(
            port(SLURM, &[]),
            port(
                SLURM,
                &[("SLURM_PROCID", Some("0")), ("SLURM_LOCALID", Some("0"))]
            )
        );
        assert_eq!(
            port(OMPI, &[]),
            port(OMPI, &[("OMPI_COMM_WORLD_RANK", Some("0"))])
        );
        // another job, another port
        assert_ne!(
            port(SLURM, &[]),
            port(SLURM, &[("SLURM_JOB_ID", Some("778"))])
        );
        assert_ne!(
            port(OMPI, &[]),
            port(OMPI, &[("OMPI_MCA_ess_base_jobid", Some("9"))])
        );
        // MASTER_PORT and GFLOW_MASTER_PORT win
        assert_eq!(port(SLURM, &[("MASTER_PORT", Some("4000"))]), 4000);
        assert!(job(SLURM).unwrap().unwrap().port_derived);
        let given = with(SLURM, &[("MASTER_PORT", Some("4000"))]);
        assert!(!job(&pairs(&given)).unwrap().unwrap().port_derived);
        assert_eq!(port(OMPI, &[("MASTER_PORT", Some("4001"))]), 4001);
        assert_eq!(port(GFLOW, &[("GFLOW_MASTER_PORT", Some("4002"))]), 4002);
        // Open MPI without a job id: the shared parent
        let no_id = with(OMPI, &[("OMPI_MCA_ess_base_jobid", None)]);
        let a = job_from(&vars(&pairs(&no_id)), 1)
            .unwrap()
            .unwrap()
            .master_port;
        let b = job_from(&vars(&pairs(&no_id)), 2)
            .unwrap()
            .unwrap()
            .master_port;
        assert_ne!(a, b);
        assert_eq!(
            a,
            job_from(&vars(&pairs(&no_id)), 1)
                .unwrap()
                .unwrap()
                .master_port
        );
    }

    #[test]
    fn under_torchrun_gflow_leaves_the_agents_store_port_alone() {
        let t = with(
            GFLOW,
            &[
                ("TORCHELASTIC_RUN_ID", Some("abc")),
                ("TORCHELASTIC_RESTART_COUNT", Some("0")),
            ],
        );
        let j = job(&pairs(&t)).unwrap().unwrap();
        assert_eq!(j.launcher, Launcher::Torchrun);
        assert_ne!(j.master_port, 29500);
        assert_eq!(j.token, "torchrun:abc");
        let restarted = with(&pairs(&t), &[("TORCHELASTIC_RESTART_COUNT", Some("1"))]);
        assert_ne!(
            job(&pairs(&restarted)).unwrap().unwrap().master_port,
            j.master_port
        );
        let other_rank = with(
            &pairs(&t),
            &[("RANK", Some("0")), ("LOCAL_RANK", Some("0"))],
        );
        assert_eq!(
            job(&pairs(&other_rank)).unwrap().unwrap().master_port,
            j.master_port
        );
        // the store port itself is never chosen, whatever the hash says
        assert_ne!(
            derived_port("x", derived_port("x", 0)),
            derived_port("x", 0)
        );
    }

    #[test]
    fn precedence_gflow_then_open_mpi_then_slurm() {
        let all: Vec<(&str, &str)> = GFLOW.iter().chain(SLURM).chain(OMPI).copied().collect();
        assert_eq!(job(&all).unwrap().unwrap().launcher, Launcher::Gflow);
        let mpi_in_slurm: Vec<(&str, &str)> = SLURM.iter().chain(OMPI).copied().collect();
        assert_eq!(
            job(&mpi_in_slurm).unwrap().unwrap().launcher,
            Launcher::OpenMpi
        );
    }

    #[test]
    fn incomplete_jobs_name_what_is_missing() {
        for (base, k) in [
            (GFLOW, "RANK"),
            (GFLOW, "LOCAL_RANK"),
            (GFLOW, "MASTER_PORT"),
            (SLURM, "SLURM_NTASKS"),
            (SLURM, "SLURM_LOCALID"),
            (SLURM, "SLURM_JOB_ID"),
            (SLURM, "SLURM_JOB_NODELIST"),
            (OMPI, "OMPI_COMM_WORLD_SIZE"),
            (OMPI, "OMPI_COMM_WORLD_RANK"),
            (OMPI, "OMPI_COMM_WORLD_LOCAL_RANK"),
        ] {
            refused(&pairs(&with(base, &[(k, None)])), &["missing", k]);
        }
        // several hosts and no address of rank 0
        refused(
            &pairs(&with(GFLOW, &[("MASTER_ADDR", None)])),
            &["MASTER_ADDR"],
        );
        refused(
            &pairs(&with(
                OMPI,
                &[
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", Some("2")),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", Some("0")),
                ],
            )),
            &["MASTER_ADDR", "several hosts"],
        );
        refused(
            &pairs(&with(
                OMPI,
                &[
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", Some("2")),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", Some("0")),
                    ("MASTER_ADDR", Some("h0")),
                    ("OMPI_MCA_ess_base_jobid", None),
                ],
            )),
            &["MASTER_PORT"],
        );
        // one node by Slurm's count, or Open MPI's ranks without a local size (set by hand):
        // rank 0 is on this host
        let one = with(
            SLURM,
            &[("SLURM_JOB_NODELIST", None), ("SLURM_NNODES", Some("1"))],
        );
        assert_eq!(job(&pairs(&one)).unwrap().unwrap().master_addr, "127.0.0.1");
        let two = with(
            SLURM,
            &[("SLURM_JOB_NODELIST", None), ("SLURM_NNODES", Some("2"))],
        );
        refused(&pairs(&two), &["missing SLURM_JOB_NODELIST"]);
        let by_hand = with(OMPI, &[("OMPI_COMM_WORLD_LOCAL_SIZE", None)]);
        let j = job(&pairs(&by_hand)).unwrap().unwrap();
        assert_eq!(
            (j.master_addr.as_str(), j.world, j.rank),
            ("127.0.0.1", 4, 2)
        );
        // one host: 127.0.0.1 without MASTER_ADDR
        let local = with(
            GFLOW,
            &[("MASTER_ADDR", None), ("LOCAL_WORLD_SIZE", Some("4"))],
        );
        assert_eq!(
            job(&pairs(&local)).unwrap().unwrap().master_addr,
            "127.0.0.1"
        );
    }

    #[test]
    fn part_of_a_set_names_the_job_and_the_rest_missing_is_an_error() {
        refused(
            &pairs(&with(GFLOW, &[("WORLD_SIZE", None)])),
            &["RANK=3", "WORLD_SIZE is missing"],
        );
        refused(&[("LOCAL_RANK", "1")], &["LOCAL_RANK=1", "WORLD_SIZE"]);
        refused(
            &pairs(&with(SLURM, &[("SLURM_PROCID", None)])),
            &["missing", "SLURM_PROCID"],
        );
        refused(
            &[
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ],
            &["missing", "OMPI_COMM_WORLD_SIZE"],
        );
        // a world of one whose rank is not 0
        refused(
            &[("WORLD_SIZE", "1"), ("RANK", "3")],
            &["RANK=3", "WORLD_SIZE=1"],
        );
        // ... or whose other variables are malformed: still refused by name
        refused(
            &[("WORLD_SIZE", "1"), ("RANK", "0"), ("MASTER_PORT", "99999")],
            &["MASTER_PORT=\"99999\"", "1-65535"],
        );
        refused(
            &[("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "x")],
            &["LOCAL_WORLD_SIZE=\"x\""],
        );
        refused(
            &[("WORLD_SIZE", "1"), ("GFLOW_MASTER_PORT", "0")],
            &["GFLOW_MASTER_PORT=\"0\""],
        );
        refused(&[("GFLOW_MASTER_PORT", "port")], &["GFLOW_MASTER_PORT"]);
        refused(
            &[("SLURM_NTASKS", "1"), ("SLURM_PROCID", "2")],
            &["SLURM_PROCID=2 is not below SLURM_NTASKS=1"],
        );
        refused(
            &[("OMPI_COMM_WORLD_SIZE", "1"), ("OMPI_COMM_WORLD_RANK", "1")],
            &["OMPI_COMM_WORLD_RANK=1 is not below OMPI_COMM_WORLD_SIZE=1"],
        );
        refused(
            &[("OMPI_COMM_WORLD_SIZE", "0"), ("OMPI_COMM_WORLD_RANK", "0")],
            &["OMPI_COMM_WORLD_SIZE=0"],
        );
        // one Slurm task, no step: a world of one
        assert_eq!(
            job(&[("SLURM_NTASKS", "1"), ("SLURM_JOB_ID", "5")]).unwrap(),
            None
        );
        assert_eq!(job(&[("WORLD_SIZE", "1"), ("RANK", "0")]).unwrap(), None);
    }

    #[test]
    fn malformed_values_are_refused_by_name() {
        for (base, k, bad, needle) in [
            (GFLOW, "WORLD_SIZE", "four", "WORLD_SIZE=\"four\""),
            (GFLOW, "WORLD_SIZE", "0", "WORLD_SIZE=0"),
            (GFLOW, "RANK", "-1", "RANK=\"-1\""),
            (GFLOW, "RANK", "4", "RANK=4 is not below WORLD_SIZE=4"),
            (
                GFLOW,
                "LOCAL_RANK",
                "2",
                "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2",
            ),
            (GFLOW, "LOCAL_WORLD_SIZE", "9", "LOCAL_WORLD_SIZE=9"),
            (GFLOW, "MASTER_PORT", "70000", "MASTER_PORT=\"70000\""),
            (GFLOW, "MASTER_PORT", "0", "MASTER_PORT=\"0\""),
            (GFLOW, "GFLOW_MASTER_PORT", "x", "GFLOW_MASTER_PORT"),
            (
                SLURM,
                "SLURM_PROCID",
                "8",
                "SLURM_PROCID=8 is not below SLURM_NTASKS=8",
            ),
            (SLURM, "SLURM_NTASKS", "2.5", "SLURM_NTASKS"),
            (
                SLURM,
                "SLURM_JOB_NODELIST",
                "node[01-",
                "SLURM_JOB_NODELIST",
            ),
            (SLURM, "SLURM_JOB_NODELIST", "node[3-1]", "backwards"),
            (SLURM, "SLURM_JOB_NODELIST", "node[a-b]", "not a number"),
            (SLURM, "SLURM_JOB_NODELIST", "node]", "unbalanced"),
            (SLURM, "SLURM_JOB_NODELIST", "a,,b", "empty host"),
            (
                OMPI,
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "4",
                "OMPI_COMM_WORLD_LOCAL_RANK=4",
            ),
            (OMPI, "OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_RANK"),
        ] {
            refused(&pairs(&with(base, &[(k, Some(bad))])), &[needle]);
        }
    }

    #[test]
    fn slurm_node_lists_give_their_first_host() {
        for (list, first) in [
            ("node[01-03,07],gpu5", "node01"),
            ("gpu5,node[01-03]", "gpu5"),
            ("node[07,01-03]", "node07"),
            ("c1", "c1"),
            ("rack[2-3]-n[009-010]", "rack2-n009"),
            ("n[0]", "n0"),
        ] {
            assert_eq!(first_host(list).unwrap(), first, "{list}");
        }
        for bad in ["", "n[1-2", "n[1-2]]", "n[[1]]", "n[]", "n[1-]", "a,"] {
            assert!(first_host(bad).is_err(), "{bad:?}");
        }
        // MASTER_ADDR overrides the list; the step's list precedes the job's
        let s = with(SLURM, &[("MASTER_ADDR", Some("login1"))]);
        assert_eq!(job(&pairs(&s)).unwrap().unwrap().master_addr, "login1");
        let s = with(SLURM, &[("SLURM_STEP_NODELIST", Some("gpu[4-5]"))]);
        assert_eq!(job(&pairs(&s)).unwrap().unwrap().master_addr, "gpu4");
    }
}
