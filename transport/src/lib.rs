//! gflow's transport: makes one process per rank a world. `connect` runs the rendezvous on
//! `MASTER_ADDR:MASTER_PORT`, links every pair of processes on one host through shared memory,
//! and returns a [`NetComm`], core's `Communicator` over those links.

pub mod comm;
pub mod frame;
pub mod link;
pub mod rendezvous;
pub mod shm;

use std::path::PathBuf;
use std::time::Duration;

pub use comm::NetComm;
use link::{LinkPair, Liveness};
use rendezvous::Config;
use shm::{Ring, ShmRx, ShmTx};

/// Failures of starting the transport.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Rank 0 refused this process, or the job could not form; says why.
    #[error("rendezvous refused: {0}")]
    Refused(String),
    /// A deadline passed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A malformed message.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An I/O failure.
    #[error("I/O error: {0}")]
    Io(String),
    /// The requested link kind is not available between these ranks.
    #[error("{0}")]
    Unsupported(String),
}

/// Settings of [`connect`], usually from the environment.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The rendezvous settings.
    pub rendezvous: Config,
    /// Deadline of every blocking receive.
    pub timeout: Duration,
    /// Largest accepted frame.
    pub max_frame: u64,
    /// `GFLOW_TRANSPORT=quic`: QUIC everywhere.
    pub force_quic: bool,
}

fn ring_path(job: u64, from: usize, to: usize) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("gflow-{job:016x}-{from}-{to}"))
}

/// Joins the job and links this process to every other rank.
///
/// # Errors
/// Rendezvous failures (wrong token, world size, duplicate or late rank), shared-memory setup
/// failures, or `Unsupported` for ranks on other hosts (QUIC links are not built yet).
pub fn connect(s: &Settings) -> Result<NetComm, TransportError> {
    let cfg = &s.rendezvous;
    let mut session = rendezvous::join(cfg)?;
    let table = session.table.clone();
    let me = cfg.rank;
    let host = &table.members[me].host;
    if s.force_quic && cfg.world > 1 {
        return Err(TransportError::Unsupported(
            "GFLOW_TRANSPORT=quic: QUIC links are not part of this build yet".into(),
        ));
    }
    if let Some((r, _)) = table
        .members
        .iter()
        .enumerate()
        .find(|(_, m)| &m.host != host)
    {
        return Err(TransportError::Unsupported(format!(
            "rank {r} runs on another host; links between hosts (QUIC) are not part of this build yet"
        )));
    }
    let mut outgoing: Vec<Option<Ring>> = Vec::with_capacity(cfg.world);
    for peer in 0..cfg.world {
        outgoing.push(if peer == me {
            None
        } else {
            Some(
                Ring::create(&ring_path(table.job, me, peer))
                    .map_err(|e| TransportError::Io(format!("shared memory: {e}")))?,
            )
        });
    }
    session.barrier()?;
    let mut links: Vec<Option<LinkPair>> = Vec::with_capacity(cfg.world);
    for (peer, out) in outgoing.into_iter().enumerate() {
        links.push(match out {
            None => None,
            Some(out) => {
                let inc = Ring::open(&ring_path(table.job, peer, me))
                    .map_err(|e| TransportError::Io(format!("shared memory: {e}")))?;
                let alive = Liveness::process(table.members[peer].pid);
                Some((
                    Box::new(ShmTx::new(out, alive.clone())),
                    Box::new(ShmRx::new(inc, alive)),
                ))
            }
        });
    }
    Ok(NetComm::new(me, links, s.timeout, s.max_frame))
}
