//! The direct exchange as a state machine over non-blocking links (no sockets, threads or
//! clocks inside): [`Engine::poll`] moves whatever can move on any link of one step, writing
//! straight into the outgoing links and reading straight out of the incoming ones, so no send
//! is copied to a queue and no receive waits behind another. [`drive`] polls it, waiting on a
//! [`Clock`] when nothing moves and asking the links why when a check is due. The link
//! protocol: each message is a header (tag, sequence, length; [`Header`]) checked on receipt
//! against what this rank expects (else [`CommError::Desync`]), then the payload or a reference
//! to it in the sender's shared arena.

use std::time::Instant;

use gflow_core::comm::{Own, Payload, Reduction, combine_piece};
use gflow_core::{CommError, Tag};

use super::codec::read_by_ref;
use super::diagnose::severity;
use crate::frame::{HEADER_LEN, Header, REF_LEN};
use crate::link::{Backoff, LinkError, LinkRx, LinkTx};

/// A send in progress: the header, then the data or a reference to it.
pub(super) struct Out<'a> {
    peer: usize,
    link: &'a mut dyn LinkTx,
    head: [u8; HEADER_LEN],
    data: Payload<'a>,
    /// Where the data lies in the shared arena, when sent by reference.
    reference: [u8; REF_LEN],
    /// For a send by reference: the peer's count of finished references that includes it.
    ticket: Option<u64>,
    /// Bytes written, header included.
    done: usize,
}

impl<'a> Out<'a> {
    /// A send of `data` to `peer` over `link`, framed by `head`; `by_ref` = (reference, ticket)
    /// sends a reference to it instead.
    pub(super) fn new(
        peer: usize,
        link: &'a mut dyn LinkTx,
        head: [u8; HEADER_LEN],
        data: Payload<'a>,
        by_ref: Option<([u8; REF_LEN], u64)>,
    ) -> Out<'a> {
        let (reference, ticket) = match by_ref {
            Some((r, t)) => (r, Some(t)),
            None => ([0; REF_LEN], None),
        };
        Out {
            peer,
            link,
            head,
            data,
            reference,
            ticket,
            done: 0,
        }
    }

    /// Bytes that go on the link after the header.
    fn body_len(&self) -> usize {
        match self.ticket {
            Some(_) => REF_LEN,
            None => self.data.len(),
        }
    }

    /// All written, and a payload sent by reference read by the peer.
    fn finished(&self) -> bool {
        self.done == HEADER_LEN + self.body_len()
            && self.ticket.is_none_or(|t| self.link.refs_done() >= t)
    }

    /// Writes what fits; true if any byte moved.
    /// Header and body go in one call where they fit: a peer that sees a header without its
    /// body would wait for this rank's next turn (after whatever long copy it does first).
    /// A strided payload goes run by run.
    fn push(&mut self) -> bool {
        let body: Payload<'_> = match self.ticket {
            Some(_) => Payload::from(&self.reference[..]),
            None => self.data,
        };
        let mut moved = false;
        while self.done < HEADER_LEN + body.len() {
            let rest = if self.done < HEADER_LEN {
                &self.head[self.done..]
            } else {
                body.rest_of_run(self.done - HEADER_LEN)
            };
            let n = self.link.try_write(rest).min(rest.len());
            if n == 0 {
                break;
            }
            self.done += n;
            moved = true;
        }
        moved
    }
}

/// Where a receive's payload goes.
enum Sink<'s> {
    /// Into this buffer (the whole message), which a link may fill without a copy of its own
    /// ([`LinkRx::try_read_into`]).
    Into(&'s mut [u8]),
    /// Handed over piece by piece, as (offset, bytes).
    Pieces(&'s mut dyn FnMut(usize, &[u8])),
}

/// A receive in progress: the message from `peer` must carry `tag`, sequence `*seq` and `len`
/// bytes.
pub(super) struct In<'a> {
    peer: usize,
    tag: Tag,
    len: usize,
    link: &'a mut dyn LinkRx,
    /// The sequence number expected next from this peer (advanced when the message is in).
    seq: &'a mut u64,
    head: [u8; HEADER_LEN],
    head_got: usize,
    /// The header says the payload comes by reference.
    by_ref: bool,
    reference: [u8; REF_LEN],
    ref_got: usize,
    /// Payload bytes taken.
    done: usize,
}

impl<'a> In<'a> {
    /// A receive of `len` bytes tagged `tag` from `peer` over `link`.
    pub(super) fn new(
        peer: usize,
        tag: Tag,
        len: usize,
        link: &'a mut dyn LinkRx,
        seq: &'a mut u64,
    ) -> In<'a> {
        In {
            peer,
            tag,
            len,
            link,
            seq,
            head: [0; HEADER_LEN],
            head_got: 0,
            by_ref: false,
            reference: [0; REF_LEN],
            ref_got: 0,
            done: 0,
        }
    }

    fn finished(&self) -> bool {
        self.head_got == HEADER_LEN && self.done == self.len
    }

    /// Moves what has arrived (header, then payload to `sink`); true if any byte moved.
    fn pull(&mut self, rank: usize, max_frame: u64, sink: Sink<'_>) -> Result<bool, Failure> {
        if self.finished() {
            return Ok(false);
        }
        let mut moved = false;
        if self.head_got < HEADER_LEN {
            moved = fill(&mut *self.link, &mut self.head, &mut self.head_got);
            if self.head_got < HEADER_LEN {
                return Ok(moved);
            }
            let h = check_header(
                rank, self.peer, &self.head, max_frame, self.tag, self.len, *self.seq,
            )?;
            self.by_ref = h.by_ref;
        }
        if self.by_ref {
            moved |= fill(&mut *self.link, &mut self.reference, &mut self.ref_got);
            if self.ref_got < REF_LEN {
                return Ok(moved);
            }
            let r = match sink {
                Sink::Into(out) => read_by_ref(
                    &mut *self.link,
                    &self.reference,
                    self.len,
                    &mut |at, piece| out[at..at + piece.len()].copy_from_slice(piece),
                ),
                Sink::Pieces(f) => read_by_ref(&mut *self.link, &self.reference, self.len, f),
            };
            r.map_err(|e| Failure::Link(self.peer, e))?;
            self.done = self.len;
            *self.seq += 1;
            return Ok(true);
        }
        let (len, done) = (self.len, &mut self.done);
        let n = match sink {
            Sink::Into(out) => {
                let n = self.link.try_read_into(&mut out[*done..len]);
                *done += n;
                n
            }
            Sink::Pieces(f) => self.link.try_read_with(len - *done, &mut |piece| {
                f(*done, piece);
                *done += piece.len();
            }),
        };
        if self.finished() {
            *self.seq += 1;
        }
        Ok(moved || n > 0)
    }
}

/// Checks a received header against what this rank (`rank`) expects next from `peer`.
pub(super) fn check_header(
    rank: usize,
    peer: usize,
    head: &[u8; HEADER_LEN],
    max_frame: u64,
    tag: Tag,
    len: usize,
    seq: u64,
) -> Result<Header, CommError> {
    let h = Header::decode(head, max_frame).map_err(|e| CommError::Transport {
        rank,
        reason: format!("bad frame from rank {peer}: {e}"),
    })?;
    if h.seq != seq || h.tag != tag || h.len != len as u64 {
        return Err(CommError::Desync {
            rank,
            peer,
            expected: format!("{tag} #{seq} of {len} bytes"),
            got: format!("{} #{} of {} bytes", h.tag, h.seq, h.len),
        });
    }
    Ok(h)
}

/// Why an exchange failed: a protocol error (desync, bad frame), or a link's failure, which
/// the communicator turns into the root cause.
#[derive(Debug)]
pub(super) enum Failure {
    /// A protocol error.
    Comm(CommError),
    /// The link to this peer failed.
    Link(usize, LinkError),
}

impl From<CommError> for Failure {
    fn from(e: CommError) -> Failure {
        Failure::Comm(e)
    }
}

/// One step of a direct exchange in progress.
pub(super) struct Engine<'a> {
    rank: usize,
    max_frame: u64,
    outs: Vec<Out<'a>>,
    ins: Vec<(In<'a>, &'a mut [u8])>,
    /// Combining receives, in combining order, into `acc`.
    turns: Vec<In<'a>>,
    acc: Option<Reduction<'a>>,
    turn: usize,
    /// The part of an element split between two pieces of a combining receive.
    carry: Vec<u8>,
    own: Option<Own<'a>>,
}

impl<'a> Engine<'a> {
    /// An empty step for `rank`, refusing frames over `max_frame` bytes; `own` is copied once
    /// the first `own.at` copies are done and before a later one takes a byte.
    pub(super) fn new(rank: usize, max_frame: u64, own: Option<Own<'a>>) -> Engine<'a> {
        Engine {
            rank,
            max_frame,
            outs: vec![],
            ins: vec![],
            turns: vec![],
            acc: None,
            turn: 0,
            carry: vec![],
            own,
        }
    }

    /// Adds a send.
    pub(super) fn send(&mut self, out: Out<'a>) {
        self.outs.push(out);
    }

    /// Adds a receive copied into `out` (which has the message's length).
    pub(super) fn copy(&mut self, inc: In<'a>, out: &'a mut [u8]) {
        self.ins.push((inc, out));
    }

    /// Adds a receive combined into the accumulator, after those added before.
    pub(super) fn combine(&mut self, inc: In<'a>) {
        self.turns.push(inc);
    }

    /// Sets the accumulator of the combining receives (`r.acc`, onto `r.base` for the first
    /// where given), which [`Engine::combine`] adds in `r.from`'s order.
    pub(super) fn accumulate(&mut self, r: Reduction<'a>) {
        self.acc = Some(r);
    }

    /// Moves whatever can move now; true if anything did.
    pub(super) fn poll(&mut self) -> Result<bool, Failure> {
        let (rank, max_frame) = (self.rank, self.max_frame);
        let mut moved = false;
        for o in self.outs.iter_mut().filter(|o| !o.finished()) {
            moved |= o.push();
        }
        for i in 0..self.ins.len() {
            if let Some(own) = self.own.take_if(|o| o.at == i) {
                if !self.ins[..i].iter().all(|(inc, _)| inc.finished()) {
                    self.own = Some(own);
                    break;
                }
                own.from.copy_to(own.to);
                moved = true;
            }
            let (inc, out) = &mut self.ins[i];
            moved |= inc.pull(rank, max_frame, Sink::Into(out))?;
        }
        if let (Some(a), Some(t)) = (&mut self.acc, self.turns.get_mut(self.turn)) {
            let (carry, base) = (&mut self.carry, a.base.filter(|_| self.turn == 0));
            moved |= t.pull(
                rank,
                max_frame,
                Sink::Pieces(&mut |at, piece| {
                    combine_piece((a.acc, base), (a.dtype, a.op), carry, at, piece);
                }),
            )?;
            if t.finished() {
                self.turn += 1;
            }
        }
        if let Some(own) = self
            .own
            .take_if(|_| self.ins.iter().all(|(i, _)| i.finished()))
        {
            own.from.copy_to(own.to);
            moved = true;
        }
        Ok(moved)
    }

    /// Every send written (and read, if by reference), every receive in.
    pub(super) fn done(&self) -> bool {
        self.outs.iter().all(Out::finished)
            && self.ins.iter().all(|(i, _)| i.finished())
            && self.own.is_none()
            && self.turn == self.turns.len()
    }

    /// The most telling failure among the links with bytes still to move (a finished peer may
    /// have left), each first passed through `told` (what else is known of the peer).
    fn worst(
        &self,
        deadline: Instant,
        told: &dyn Fn(Result<(), LinkError>) -> Result<(), LinkError>,
    ) -> Option<(usize, LinkError)> {
        self.outs
            .iter()
            .filter(|o| !o.finished())
            .map(|o| (o.peer, told(o.link.check(deadline))))
            .chain(
                self.ins
                    .iter()
                    .map(|(i, _)| i)
                    .chain(&self.turns)
                    .filter(|i| !i.finished())
                    .map(|i| (i.peer, told(i.link.check(deadline)))),
            )
            .filter_map(|(p, r)| r.err().map(|e| (p, e)))
            .min_by_key(|(_, e)| severity(e))
    }

    /// The first peer this step still waits on.
    fn waiting_on(&self) -> usize {
        self.outs
            .iter()
            .find(|o| !o.finished())
            .map(|o| o.peer)
            .or_else(|| {
                self.ins
                    .iter()
                    .map(|(i, _)| i)
                    .chain(&self.turns)
                    .find(|i| !i.finished())
                    .map(|i| i.peer)
            })
            .unwrap_or(self.rank)
    }
}

/// How a waiting exchange passes time: the real one ([`Backoff`] and [`Instant::now`]) or a
/// test's virtual clock.
pub(super) trait Clock {
    /// Now.
    fn now(&self) -> Instant;
    /// Lets a little time pass.
    fn idle(&mut self);
    /// Whether the links should be asked why nothing moves (not on every short wait: a check
    /// may read `/proc`).
    fn check_due(&mut self) -> bool;
    /// Something moved: waits start short again.
    fn moved(&mut self);
}

/// Real time.
#[derive(Default)]
pub(super) struct RealClock(Backoff);

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn idle(&mut self) {
        self.0.snooze();
    }
    fn check_due(&mut self) -> bool {
        self.0.check_due()
    }
    fn moved(&mut self) {
        self.0 = Backoff::default();
    }
}

/// Polls `engine` until it is done, failing with the most telling link failure once a link
/// reports one, or with a timeout on the first peer still waited on at `deadline`. `told`
/// passes each link's state through what else is known of its peer.
pub(super) fn drive(
    engine: &mut Engine<'_>,
    clock: &mut dyn Clock,
    deadline: Instant,
    told: &dyn Fn(Result<(), LinkError>) -> Result<(), LinkError>,
) -> Result<(), Failure> {
    loop {
        let moved = engine.poll()?;
        if engine.done() {
            return Ok(());
        }
        if moved {
            clock.moved();
            continue;
        }
        clock.idle();
        let late = clock.now() > deadline;
        if late || clock.check_due() {
            if let Some((peer, e)) = engine.worst(deadline, told) {
                return Err(Failure::Link(peer, e));
            }
            if late {
                return Err(Failure::Link(engine.waiting_on(), LinkError::Timeout));
            }
        }
    }
}

/// Reads what has arrived of `buf`'s remaining bytes (`got` so far) without waiting; true if
/// any byte moved.
fn fill(link: &mut dyn LinkRx, buf: &mut [u8], got: &mut usize) -> bool {
    let before = *got;
    link.try_read_with(buf.len() - before, &mut |piece| {
        buf[*got..*got + piece.len()].copy_from_slice(piece);
        *got += piece.len();
    });
    *got > before
}
