//! Ranks as threads of one process: a full mesh of channels. Backs `simulate`.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

use super::{CommError, Communicator, Exchange, Mailbox, Tag, exchange_queued};

struct Message {
    tag: Tag,
    data: Box<[u8]>,
}

/// One rank's end of an in-process mesh. When a rank's `InProcComm` is dropped (its thread
/// ended), every peer waiting on it gets [`CommError::PeerGone`] at once.
pub struct InProcComm {
    rank: usize,
    to: Vec<Option<Sender<Message>>>,
    from: Vec<Option<Mutex<Receiver<Message>>>>,
    timeout: Duration,
}

impl InProcComm {
    /// A connected mesh of `n` ranks; element i belongs to rank i. A receive that waits longer
    /// than `timeout` fails with [`CommError::Timeout`].
    pub fn mesh(n: usize, timeout: Duration) -> Vec<InProcComm> {
        let mut to: Vec<Vec<Option<Sender<Message>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut from: Vec<Vec<Option<Mutex<Receiver<Message>>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for (s, row) in to.iter_mut().enumerate() {
            for (d, slot) in row.iter_mut().enumerate() {
                if s != d {
                    let (tx, rx) = channel();
                    *slot = Some(tx);
                    from[d][s] = Some(Mutex::new(rx));
                }
            }
        }
        to.into_iter()
            .zip(from)
            .enumerate()
            .map(|(rank, (to, from))| InProcComm {
                rank,
                to,
                from,
                timeout,
            })
            .collect()
    }

    /// A world of one rank: no peers, so every transfer is local.
    pub fn solo() -> InProcComm {
        InProcComm {
            rank: 0,
            to: vec![None],
            from: vec![None],
            timeout: Duration::ZERO,
        }
    }

    fn bad_peer(&self, peer: usize) -> CommError {
        CommError::no_link(self.rank, peer, self.to.len())
    }
}

impl Communicator for InProcComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.to.len()
    }

    fn send(&self, peer: usize, tag: Tag, data: &[u8]) -> Result<(), CommError> {
        let tx = self
            .to
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.bad_peer(peer))?;
        tx.send(Message {
            tag,
            data: data.into(),
        })
        .map_err(|_| CommError::PeerGone {
            rank: self.rank,
            peer,
        })
    }

    fn exchange(&self, step: Exchange<'_>) -> Result<(), CommError> {
        exchange_queued(self, step)
    }
}

impl Mailbox for InProcComm {
    fn fetch(
        &self,
        peer: usize,
        tag: Tag,
        len: usize,
        sink: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), CommError> {
        let rx = self
            .from
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| self.bad_peer(peer))?;
        let rx = rx.lock().map_err(|_| CommError::PeerGone {
            rank: self.rank,
            peer,
        })?;
        match rx.recv_timeout(self.timeout) {
            Ok(m) if m.tag == tag && m.data.len() == len => {
                sink(0, &m.data);
                Ok(())
            }
            Ok(m) => Err(CommError::Desync {
                rank: self.rank,
                peer,
                expected: format!("{tag} of {len} bytes"),
                got: format!("{} of {} bytes", m.tag, m.data.len()),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(CommError::PeerGone {
                rank: self.rank,
                peer,
            }),
            Err(RecvTimeoutError::Timeout) => Err(CommError::Timeout {
                rank: self.rank,
                peer,
                secs: self.timeout.as_secs_f64(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::{Collectives, CommOp};
    use crate::dtype::DType;
    use crate::reduce::ReduceOp;

    fn run<T: Send>(n: usize, f: impl Fn(InProcComm) -> T + Sync) -> Vec<T> {
        let comms = InProcComm::mesh(n, Duration::from_secs(5));
        std::thread::scope(|s| {
            let hs: Vec<_> = comms.into_iter().map(|c| s.spawn(|| f(c))).collect();
            hs.into_iter().filter_map(|h| h.join().ok()).collect()
        })
    }

    #[test]
    fn collectives_on_uneven_counts_and_subgroups() {
        let out = run(4, |c| -> Result<(Vec<u8>, Vec<f32>), CommError> {
            let r = c.rank();
            // all_gather over an odd subgroup with uneven contributions
            let group = [3, 1, 0];
            let g = if r != 2 {
                let mine = vec![r as u8; r + 1];
                c.all_gather(&group, &mine, &[4, 2, 1])?
            } else {
                vec![]
            };
            // all_reduce max over everyone
            let mut x: Vec<f32> = vec![r as f32, -(r as f32), 0.5];
            c.all_reduce(
                &[0, 1, 2, 3],
                bytemuck::cast_slice_mut(&mut x),
                DType::F32,
                ReduceOp::Max,
            )?;
            Ok((g, x))
        });
        for (r, o) in out.into_iter().enumerate() {
            let (g, x) = o.expect("collective failed");
            if r != 2 {
                assert_eq!(g, vec![3, 3, 3, 3, 1, 1, 0]);
            }
            assert_eq!(x, vec![3.0, 0.0, 0.5]);
        }
    }

    #[test]
    fn desync_and_dead_peer_are_errors() {
        let out = run(2, |c| {
            if c.rank() == 0 {
                c.all_gather(&[0, 1], &[1], &[1, 1]).map(|_| ())
            } else {
                c.broadcast(&[0, 1], 0, &[], 1).map(|_| ())
            }
        });
        assert!(
            matches!(out[1], Err(CommError::Desync { .. })),
            "{:?}",
            out[1]
        );
        let out = run(2, |c| {
            if c.rank() == 0 {
                Ok(vec![])
            } else {
                c.recv_exact(0, CommOp::P2p.into(), 4)
            }
        });
        assert!(matches!(out[1], Err(CommError::PeerGone { peer: 0, .. })));
    }
}
