//! Root-cause diagnosis: which error a failed link becomes. A process of the job that died
//! (pid, host) comes before a path that went silent (address), before a peer that closed its
//! link or ended in order, before a timeout: every survivor should name the dead one.

use std::time::{Duration, Instant};

use gflow_core::CommError;

use super::NetComm;
use crate::control::{Control, Fate};
use crate::link::{LinkError, LinkRx};

/// How long an error from a peer that closed its link waits for another peer to show itself
/// dead (the root cause): more than QUIC's keep-alive interval.
const CLOSED_GRACE: Duration = Duration::from_secs(2);

/// How often a blocking receive looks whether its peer is known to have died (the control
/// channel hears of a killed process at once; its QUIC link would stay silent until the idle
/// timeout).
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// How much a link failure says about the root cause (lower first): a dead peer before one
/// that went silent, before one that closed (it may have failed because of the dead one),
/// before an I/O failure, before a timeout.
pub(super) fn severity(e: &LinkError) -> u8 {
    match e {
        LinkError::PeerDead => 0,
        LinkError::Silent(_) => 1,
        LinkError::Closed => 2,
        LinkError::Io(_) => 3,
        LinkError::Timeout => 4,
    }
}

impl NetComm {
    /// The error for a failed link to `peer`, naming the root cause: a process of the job that
    /// died (pid, host), before a path that went silent (address), before a peer that closed
    /// its link or ended in order, before a timeout.
    pub(super) fn link_error(&self, peer: usize, e: LinkError) -> CommError {
        if let Some(dead) = self.first_dead() {
            return self.exited(dead);
        }
        if let (LinkError::PeerDead, Some(c)) = (&e, &self.control) {
            // the link saw the process gone (a peer on this host): the job has failed
            c.saw_die(peer);
        }
        let exited = self.fate(peer) != Fate::Running;
        match e {
            LinkError::Closed => self
                .root_cause(CLOSED_GRACE)
                .or_else(|| exited.then(|| self.exited(peer)))
                .unwrap_or(CommError::PeerGone {
                    rank: self.rank,
                    peer,
                }),
            LinkError::PeerDead => self.exited(peer),
            _ if exited => self.exited(peer),
            LinkError::Silent(d) => self.silent(peer, d),
            LinkError::Timeout => CommError::Timeout {
                rank: self.rank,
                peer,
                secs: self.timeout.as_secs_f64(),
            },
            LinkError::Io(reason) => CommError::Transport {
                rank: self.rank,
                reason: format!("link to rank {peer}: {reason}"),
            },
        }
    }

    /// The lowest rank whose process the control channel says died: the job has failed.
    pub(super) fn first_dead(&self) -> Option<usize> {
        self.control.as_ref().and_then(Control::first_dead)
    }

    /// What the control channel knows of `peer`'s process (`Running` without a channel).
    pub(super) fn fate(&self, peer: usize) -> Fate {
        self.control
            .as_ref()
            .map_or(Fate::Running, |c| c.fate(peer))
    }

    /// "`peer` (pid, host) exited", from the job's table (without one: the peer is gone).
    fn exited(&self, peer: usize) -> CommError {
        let member = self
            .control
            .as_ref()
            .and_then(|c| Some((c, c.member(peer)?)));
        match member {
            Some((c, m)) => CommError::PeerExited {
                rank: self.rank,
                peer,
                pid: m.pid,
                host: c.host_label(peer),
            },
            None => CommError::PeerGone {
                rank: self.rank,
                peer,
            },
        }
    }

    /// "no packets from `peer` at its address for `d`".
    fn silent(&self, peer: usize, d: Duration) -> CommError {
        CommError::PeerSilent {
            rank: self.rank,
            peer,
            addr: self
                .control
                .as_ref()
                .and_then(|c| c.member(peer))
                .map_or_else(|| "an unknown address".into(), |m| m.quic.to_string()),
            secs: d.as_secs(),
        }
    }

    /// The failure behind a peer that closed its link, looked for during `grace`: a process the
    /// control channel says died, else a link that reports its peer dead or silent. A peer that
    /// closed in order usually failed because another died, and every survivor should name the
    /// dead one (a QUIC peer is known dead only at its idle timeout, which the ranks reach up to
    /// a keep-alive interval apart). Links in use by another thread are skipped.
    fn root_cause(&self, grace: Duration) -> Option<CommError> {
        let deadline = Instant::now() + grace;
        let far = deadline + self.timeout;
        let cause = |peer: usize, e: Option<LinkError>| match e {
            Some(LinkError::PeerDead) => Some(self.exited(peer)),
            Some(LinkError::Silent(d)) => Some(self.silent(peer, d)),
            _ => None,
        };
        loop {
            if let Some(dead) = self.first_dead() {
                return Some(self.exited(dead));
            }
            for (peer, side) in self.tx.iter().enumerate() {
                let Some(side) = side else { continue };
                let failed = side.failed();
                let checked = side.link.try_lock().ok().and_then(|l| l.check(far).err());
                if let Some(e) = cause(peer, failed).or_else(|| cause(peer, checked)) {
                    return Some(e);
                }
            }
            for (peer, side) in self.rx.iter().enumerate() {
                let checked = side
                    .as_ref()
                    .and_then(|s| s.try_lock().ok())
                    .and_then(|s| s.link.check(far).err());
                if let Some(e) = cause(peer, checked) {
                    return Some(e);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reads `len` bytes of `link` into `f` before `deadline`, in turns of
    /// [`WATCH_EVERY`] when there is a control channel: a turn in which no byte came, once a
    /// process of the job is known to have died, ends the wait (`PeerDead`; the job has failed,
    /// and the peer may be waiting on the dead one) instead of waiting out the deadline.
    pub(super) fn read_watched(
        &self,
        link: &mut dyn LinkRx,
        len: usize,
        deadline: Instant,
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), LinkError> {
        if self.control.is_none() {
            return link.read_with(len, deadline, f);
        }
        let mut done = 0;
        loop {
            let turn = deadline.min(Instant::now() + WATCH_EVERY);
            let base = done;
            let mut got = 0;
            let r = link.read_with(len - base, turn, &mut |at, piece| {
                f(base + at, piece);
                got = at + piece.len();
            });
            done = base + got;
            match r {
                Err(LinkError::Timeout) if Instant::now() < deadline => {
                    if got == 0 && self.first_dead().is_some() {
                        return Err(LinkError::PeerDead);
                    }
                }
                other => return other,
            }
        }
    }
}
