//! Collectives as data: a [`Plan`] is the list of steps one member takes (exchanges with peers,
//! local copies and combines) over named buffers ([`Span`]s of the inputs, the output and a
//! scratch area). Plans are pure functions of (operation, group, member, sizes, schedule), so
//! they are tested without any transport (the unit tests run every member's plan in memory) and
//! one driver runs them on every transport.

use super::{Payload, Tag};
#[cfg(test)]
use crate::dtype::DType;
#[cfg(test)]
use crate::reduce::{ReduceOp, combine_bytes};

/// A buffer a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// The i-th input (read only).
    Input(usize),
    /// The output.
    Output,
    /// The plan's scratch area ([`Plan::scratch`] bytes).
    Scratch,
}

/// `len` bytes at `at` of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The buffer.
    pub buf: Buf,
    /// First byte.
    pub at: usize,
    /// Length.
    pub len: usize,
}

impl Span {
    /// The whole of a `len`-byte buffer.
    pub fn whole(buf: Buf, len: usize) -> Span {
        Span { buf, at: 0, len }
    }

    /// The same place in another buffer.
    pub fn with_buf(self, buf: Buf) -> Span {
        Span { buf, ..self }
    }

    /// This span cut into consecutive pieces of `counts` bytes.
    pub fn split(self, counts: &[usize]) -> Vec<Span> {
        let mut at = self.at;
        counts
            .iter()
            .map(|&len| {
                let s = Span {
                    buf: self.buf,
                    at,
                    len,
                };
                at += len;
                s
            })
            .collect()
    }
}

/// The combining receives of an [`Step::Exchange`]: one message from each of `from` (world
/// ranks), combined into `acc` in that order. The first combines onto `base` where given (an
/// out-of-place reduction: `acc` is written, never read, so no copy of the input precedes it),
/// else onto `acc`'s own contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Combining {
    /// The accumulator.
    pub acc: Span,
    /// The left operand of the first combine, in place of `acc`'s contents.
    pub base: Option<Span>,
    /// The senders, in combining order.
    pub from: Vec<usize>,
}

impl Combining {
    /// Messages from `from` combined into `acc` in place.
    pub fn in_place(acc: Span, from: Vec<usize>) -> Combining {
        Combining {
            acc,
            base: None,
            from,
        }
    }

    /// Messages from `from` combined onto `base` (when given) into `acc`.
    pub fn onto(acc: Span, base: Option<Span>, from: Vec<usize>) -> Combining {
        Combining { acc, base, from }
    }
}

/// One step of a member's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Messages that move together, all tagged `tag`: `sends` (world rank, what), `copies`
    /// (world rank, where), `reduce` (the combining receives) and `own` (a local copy made
    /// after the first `at` copies).
    Exchange {
        /// The tag of every message.
        tag: Tag,
        /// Sends.
        sends: Vec<(usize, Span)>,
        /// Copying receives.
        copies: Vec<(usize, Span)>,
        /// Combining receives.
        reduce: Option<Combining>,
        /// (from, to, at): this member's own block, copied among the copies.
        own: Option<(Span, Span, usize)>,
    },
    /// `to = from`.
    Copy {
        /// Source.
        from: Span,
        /// Destination.
        to: Span,
    },
    /// `acc = acc op with`, elementwise.
    Combine {
        /// Accumulator (the left operand).
        acc: Span,
        /// Right operand.
        with: Span,
    },
}

/// One member's steps of one collective, and the scratch bytes they need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Bytes of [`Buf::Scratch`].
    pub scratch: usize,
}

impl Plan {
    /// A new `len`-byte piece of scratch.
    pub fn alloc(&mut self, len: usize) -> Span {
        let s = Span {
            buf: Buf::Scratch,
            at: self.scratch,
            len,
        };
        self.scratch += len;
        s
    }

    /// Appends a step.
    pub fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// Appends an exchange of sends and copies only.
    pub fn exchange(&mut self, tag: Tag, sends: Vec<(usize, Span)>, copies: Vec<(usize, Span)>) {
        self.push(Step::Exchange {
            tag,
            sends,
            copies,
            reduce: None,
            own: None,
        });
    }
}

/// A plan's buffers for one step: the spans it reads and the spans it writes, cut out of the
/// inputs, the output and the scratch area (checked: in bounds, and no written span overlaps
/// another span of the step).
pub struct Carved<'a> {
    /// The read spans, in the order asked (a span of a strided input only whole, or within
    /// one of its runs).
    pub reads: Vec<Payload<'a>>,
    /// The written spans, in the order asked.
    pub writes: Vec<&'a mut [u8]>,
}

/// Cuts `reads` and `writes` out of the buffers ([`Carved`]); `Err` names a span that is out of
/// bounds or overlaps a written one (a malformed plan).
pub fn carve<'a>(
    inputs: &[Payload<'a>],
    output: &'a mut [u8],
    scratch: &'a mut [u8],
    reads: &[Span],
    writes: &[Span],
) -> Result<Carved<'a>, String> {
    let mut out_reads: Vec<Option<Payload<'a>>> = vec![None; reads.len()];
    let mut out_writes: Vec<Option<&'a mut [u8]>> = (0..writes.len()).map(|_| None).collect();
    for (i, r) in reads.iter().enumerate() {
        if let Buf::Input(k) = r.buf {
            out_reads[i] = inputs.get(k).and_then(|b| b.get(r.at, r.len));
        }
    }
    for (buf, mem) in [(Buf::Output, output), (Buf::Scratch, scratch)] {
        let mut order: Vec<usize> = (0..writes.len())
            .filter(|&i| writes[i].buf == buf && writes[i].len > 0)
            .collect();
        order.sort_by_key(|&i| writes[i].at);
        let mut gaps: Vec<(usize, &'a [u8])> = vec![];
        let (mut rest, mut offset) = (mem, 0usize);
        for i in order {
            let w = writes[i];
            let skip =
                w.at.checked_sub(offset)
                    .ok_or_else(|| format!("{w:?} overlaps"))?;
            if skip + w.len > rest.len() {
                return Err(format!("{w:?} out of bounds"));
            }
            let (gap, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (piece, tail) = tail.split_at_mut(w.len);
            gaps.push((offset, gap));
            out_writes[i] = Some(piece);
            (rest, offset) = (tail, w.at + w.len);
        }
        gaps.push((offset, rest));
        for (i, r) in reads.iter().enumerate().filter(|(_, r)| r.buf == buf) {
            out_reads[i] = gaps
                .iter()
                .find(|(start, g)| *start <= r.at && r.at + r.len <= start + g.len())
                .map(|(start, g)| Payload::from(&g[r.at - start..r.at - start + r.len]));
        }
    }
    for (i, w) in writes.iter().enumerate() {
        if w.len == 0 && w.buf != Buf::Scratch && w.buf != Buf::Output {
            return Err(format!("{w:?} writes an input"));
        }
        if out_writes[i].is_none() && w.len == 0 {
            out_writes[i] = Some(Default::default());
        }
    }
    let reads = reads
        .iter()
        .zip(out_reads)
        .map(|(r, s)| s.ok_or_else(|| format!("{r:?} is out of bounds or overlaps a write")))
        .collect::<Result<_, _>>()?;
    let writes = writes
        .iter()
        .zip(out_writes)
        .map(|(w, s)| s.ok_or_else(|| format!("{w:?} is out of bounds or writes an input")))
        .collect::<Result<_, _>>()?;
    Ok(Carved { reads, writes })
}

/// Runs every member's plan in memory, as a transport would: member i of `plans` is world rank
/// i, `inputs[i]` its inputs and `outputs[i]` its output. Each exchange of a round is matched
/// against the peers' exchanges of their own rounds by (sender, receiver, tag) in order, so a
/// plan that sends what no peer receives, or waits for what no peer sends, is an `Err` instead
/// of a hang. Returns each member's output.
///
/// # Errors
/// A malformed plan, or plans whose messages do not match (naming the member and step).
#[cfg(test)]
pub(crate) fn simulate(
    plans: &[Plan],
    inputs: &[Vec<Vec<u8>>],
    outputs: Vec<Vec<u8>>,
    dtype: DType,
    op: ReduceOp,
) -> Result<Vec<Vec<u8>>, String> {
    use std::collections::VecDeque;
    let n = plans.len();
    let mut outputs = outputs;
    let mut scratch: Vec<Vec<u8>> = plans.iter().map(|p| vec![0; p.scratch]).collect();
    // queue[from][to]: messages in flight
    type Queue = VecDeque<(Tag, Vec<u8>)>;
    let mut queue: Vec<Vec<Queue>> = vec![vec![VecDeque::new(); n]; n];
    let mut next = vec![0usize; n];
    // a member's exchange is two phases: its sends go out, then its receives wait
    let mut sent = vec![false; n];
    loop {
        let mut moved = false;
        for me in 0..n {
            let Some(step) = plans[me].steps.get(next[me]) else {
                continue;
            };
            let ins: Vec<Payload<'_>> = inputs[me].iter().map(|v| v[..].into()).collect();
            match step {
                Step::Copy { from, to } => {
                    let c = carve(&ins, &mut outputs[me], &mut scratch[me], &[*from], &[*to])?;
                    for (w, src) in c.writes.into_iter().zip(c.reads) {
                        src.copy_to(w);
                    }
                }
                Step::Combine { acc, with } => {
                    let c = carve(&ins, &mut outputs[me], &mut scratch[me], &[*with], &[*acc])?;
                    for w in c.writes {
                        combine_bytes(dtype, op, w, &c.reads[0].to_bytes());
                    }
                }
                Step::Exchange {
                    tag,
                    sends,
                    copies,
                    reduce,
                    own,
                } => {
                    if !sent[me] {
                        let spans: Vec<Span> = sends.iter().map(|s| s.1).collect();
                        let c = carve(&ins, &mut outputs[me], &mut scratch[me], &spans, &[])?;
                        for ((to, _), data) in sends.iter().zip(c.reads) {
                            queue[me][*to].push_back((*tag, data.to_bytes().into_owned()));
                        }
                        sent[me] = true;
                        moved = true;
                    }
                    let from: Vec<usize> = copies
                        .iter()
                        .map(|c| c.0)
                        .chain(reduce.iter().flat_map(|r| r.from.iter().copied()))
                        .collect();
                    let mut want = vec![0usize; n];
                    for &p in &from {
                        want[p] += 1;
                    }
                    if (0..n).any(|p| queue[p][me].len() < want[p]) {
                        continue;
                    }
                    let mut writes: Vec<Span> = copies.iter().map(|c| c.1).collect();
                    writes.extend(reduce.iter().map(|r| r.acc));
                    writes.extend(own.iter().map(|o| o.1));
                    let mut reads: Vec<Span> = own.iter().map(|o| o.0).collect();
                    reads.extend(reduce.iter().flat_map(|r| r.base));
                    let c = carve(&ins, &mut outputs[me], &mut scratch[me], &reads, &writes)?;
                    let (mut r, mut w) = (c.reads.into_iter(), c.writes.into_iter());
                    let own_from = if own.is_some() { r.next() } else { None };
                    for (p, _) in copies {
                        let (t, data) = queue[*p][me].pop_front().ok_or("no message")?;
                        let out = w.next().ok_or("no buffer")?;
                        if t != *tag || data.len() != out.len() {
                            return Err(format!("member {me} step {}: desync", next[me]));
                        }
                        out.copy_from_slice(&data);
                    }
                    if let Some(reduce) = reduce {
                        let acc = w.next().ok_or("no accumulator")?;
                        if reduce.base.is_some() {
                            r.next().ok_or("no base")?.copy_to(acc);
                        }
                        for p in &reduce.from {
                            let (t, data) = queue[*p][me].pop_front().ok_or("no message")?;
                            if t != *tag || data.len() != acc.len() {
                                return Err(format!("member {me} step {}: desync", next[me]));
                            }
                            combine_bytes(dtype, op, acc, &data);
                        }
                    }
                    if let (Some(dst), Some(src)) = (w.next(), own_from) {
                        src.copy_to(dst);
                    }
                    sent[me] = false;
                }
            }
            next[me] += 1;
            moved = true;
        }
        if !moved {
            let stuck: Vec<usize> = (0..n).filter(|&m| next[m] < plans[m].steps.len()).collect();
            if !stuck.is_empty() {
                return Err(format!("members {stuck:?} wait for messages never sent"));
            }
            if let Some((from, to)) = (0..n)
                .flat_map(|f| (0..n).map(move |t| (f, t)))
                .find(|&(f, t)| !queue[f][t].is_empty())
            {
                return Err(format!("a message from {from} to {to} was never received"));
            }
            return Ok(outputs);
        }
    }
}
