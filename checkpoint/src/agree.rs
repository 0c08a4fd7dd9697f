//! Agreement between ranks through the env's communicator: every rank learns every rank's
//! report, so all take the same decision (commit or abort a save, succeed or fail a load).

use gflow_core::{Collectives, Result, env};

/// Every rank's `mine`, in rank order (an all-gather over the world; sizes may differ).
///
/// # Errors
/// Communication failures (a dead or desynchronised peer, a timeout).
pub fn gather(mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let env = env::current();
    let n = env.world_size();
    if n == 1 {
        return Ok(vec![mine.to_vec()]);
    }
    let group: Vec<usize> = (0..n).collect();
    let comm = env.comm();
    let lens = comm.all_gather(&group, &(mine.len() as u64).to_le_bytes(), &vec![8; n])?;
    let counts: Vec<usize> = lens
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()) as usize)
        .collect();
    let all = comm.all_gather(&group, mine, &counts)?;
    let mut out = vec![];
    let mut at = 0;
    for c in counts {
        out.push(all[at..at + c].to_vec());
        at += c;
    }
    Ok(out)
}

/// The first failure among the ranks' outcomes (`Err(reason)` from this rank), as
/// `(rank, reason)`; `None` when every rank succeeded.
///
/// # Errors
/// Communication failures.
pub fn first_failure(mine: &std::result::Result<(), String>) -> Result<Option<(usize, String)>> {
    let bytes = match mine {
        Ok(()) => vec![],
        Err(reason) => std::iter::once(b'!').chain(reason.bytes()).collect(),
    };
    Ok(gather(&bytes)?
        .into_iter()
        .enumerate()
        .find(|(_, b)| !b.is_empty())
        .map(|(r, b)| (r, String::from_utf8_lossy(&b[1..]).into_owned())))
}
