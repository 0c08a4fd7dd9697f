//! Each collective's [`Plan`] for one member: the [`Policy`]'s schedule (direct, ring, tree,
//! doubling), or the hierarchical composition of those over a [`Grid`]. Pure functions of
//! (operation, group, member, sizes, policy, grid).

use super::hierarchy::{self, Grid};
use super::plan::{Buf, Plan, Span, Step};
use super::{CommOp, Policy, Schedule, Tag, direct, ring};
use crate::sbp::balanced_range;

/// All-gather: member i gives `counts[i]` bytes (`Input(0)`); the output holds them all in
/// group order.
pub(super) fn all_gather(
    policy: &Policy,
    grid: Option<&Grid>,
    group: &[usize],
    me: usize,
    counts: &[usize],
) -> Plan {
    let mut p = Plan::default();
    let mine = Span::whole(Buf::Input(0), counts[me]);
    let out = Span::whole(Buf::Output, counts.iter().sum());
    match grid {
        Some(g) => hierarchy::all_gather(&mut p, policy, group, g, me, counts, mine, out),
        None => all_gather_flat(&mut p, policy, group, me, counts, mine, out),
    }
    p
}

/// Reduce-scatter: `Input(0)` holds one chunk per member (`counts[i]` bytes for member i); the
/// output gets this member's chunk reduced over the group.
pub(super) fn reduce_scatter(
    policy: &Policy,
    grid: Option<&Grid>,
    group: &[usize],
    me: usize,
    counts: &[usize],
) -> Plan {
    let mut p = Plan::default();
    let data = Span::whole(Buf::Input(0), counts.iter().sum());
    let out = Span::whole(Buf::Output, counts[me]);
    match grid {
        Some(g) => hierarchy::reduce_scatter(&mut p, policy, group, g, me, counts, data, out),
        None => reduce_scatter_flat(&mut p, policy, group, me, counts, data, out),
    }
    p
}

/// All-reduce into the output (`bytes` long, elements of `elem` bytes): of the output in place,
/// or of `Input(0)` when `from_input` (the direct, ring and hierarchical schedules read the
/// input where they first need it; recursive doubling copies it into the output first).
pub(super) fn all_reduce(
    policy: &Policy,
    grid: Option<&Grid>,
    group: &[usize],
    me: usize,
    (bytes, elem): (usize, usize),
    from_input: bool,
) -> Plan {
    let mut p = Plan::default();
    let data = Span::whole(Buf::Output, bytes);
    let input = from_input.then_some(Buf::Input(0));
    match grid {
        Some(g) => hierarchy::all_reduce(&mut p, policy, (group, g), me, (data, input), elem),
        None => all_reduce_flat(&mut p, policy, group, me, (data, input), elem),
    }
    p
}

/// All-to-all: `Input(i)` (`send_counts[i]` bytes) goes to member i; member i's message lands at
/// `recv_counts[..i].sum()` of the output.
pub(super) fn all_to_all(
    group: &[usize],
    me: usize,
    send_counts: &[usize],
    recv_counts: &[usize],
) -> Plan {
    let mut p = Plan::default();
    let sends: Vec<Span> = send_counts
        .iter()
        .enumerate()
        .map(|(i, &len)| Span::whole(Buf::Input(i), len))
        .collect();
    let slots = Span::whole(Buf::Output, recv_counts.iter().sum()).split(recv_counts);
    direct::all_to_all(
        &mut p,
        Tag::new(CommOp::AllToAll, group),
        group,
        me,
        &sends,
        &slots,
    );
    p
}

/// Broadcast of `len` bytes from position `root` (its `Input(0)`) into every member's output.
pub(super) fn broadcast(
    policy: &Policy,
    group: &[usize],
    me: usize,
    root: usize,
    len: usize,
) -> Plan {
    let mut p = Plan::default();
    let tag = Tag::new(CommOp::Broadcast, group);
    let (data, out) = (
        Span::whole(Buf::Input(0), len),
        Span::whole(Buf::Output, len),
    );
    if policy.schedule(CommOp::Broadcast, group.len(), len) == Schedule::Ring {
        if me == root {
            p.push(Step::Copy {
                from: data,
                to: out,
            });
        }
        ring::broadcast(&mut p, tag, group, (me, root), out);
    } else {
        direct::broadcast(&mut p, tag, group, (me, root), data, out);
    }
    p
}

/// [`all_gather`] without a hierarchy, from `mine` into `out`.
pub(super) fn all_gather_flat(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    me: usize,
    counts: &[usize],
    mine: Span,
    out: Span,
) {
    let tag = Tag::new(CommOp::AllGather, group);
    let slots = out.split(counts);
    if policy.schedule(CommOp::AllGather, group.len(), out.len) == Schedule::Ring {
        p.push(Step::Copy {
            from: mine,
            to: slots[me],
        });
        ring::all_gather(p, tag, group, me, &slots);
    } else {
        direct::all_gather(p, tag, group, me, mine, &slots);
    }
}

/// [`reduce_scatter`] without a hierarchy, from `data` into `out`. A ring works on a copy of
/// the input.
pub(super) fn reduce_scatter_flat(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    me: usize,
    counts: &[usize],
    data: Span,
    out: Span,
) {
    let tag = Tag::new(CommOp::ReduceScatter, group);
    if policy.schedule(CommOp::ReduceScatter, group.len(), data.len) == Schedule::Ring {
        let work = p.alloc(data.len);
        p.push(Step::Copy {
            from: data,
            to: work,
        });
        let slots = work.split(counts);
        ring::reduce_scatter(p, tag, group, me, &slots, None);
        p.push(Step::Copy {
            from: slots[me],
            to: out,
        });
    } else {
        direct::reduce_scatter(p, tag, group, me, &data.split(counts), out);
    }
}

/// [`all_reduce`] without a hierarchy, of `data` in place or from the same offsets of `input`.
pub(super) fn all_reduce_flat(
    p: &mut Plan,
    policy: &Policy,
    group: &[usize],
    me: usize,
    (data, input): (Span, Option<Buf>),
    elem: usize,
) {
    let n = group.len();
    let schedule = policy.schedule(CommOp::AllReduce, n, data.len);
    if let Some(b) = input.filter(|_| n == 1 || schedule == Schedule::Doubling) {
        p.push(Step::Copy {
            from: data.with_buf(b),
            to: data,
        });
    }
    if n == 1 {
        return;
    }
    let counts = balanced_counts(data.len, elem, n);
    match schedule {
        Schedule::Doubling => {
            ring::all_reduce_doubling(p, Tag::new(CommOp::AllReduce, group), group, me, data);
        }
        Schedule::Ring => {
            let slots = data.split(&counts);
            let rs = Tag::new(CommOp::ReduceScatter, group);
            ring::reduce_scatter(p, rs, group, me, &slots, input);
            ring::all_gather(p, Tag::new(CommOp::AllGather, group), group, me, &slots);
        }
        Schedule::Direct => {
            let pieces = policy.pieces(data.len / n);
            direct::all_reduce(p, group, me, (&data.split(&counts), input), elem, pieces);
        }
    }
}

/// Bytes of each of `n` members' balanced shares of `bytes` in elements of `elem` bytes.
pub(super) fn balanced_counts(bytes: usize, elem: usize, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| balanced_range(bytes / elem, n, i).len() * elem)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use crate::comm::plan::simulate;
    use crate::dtype::DType;
    use crate::reduce::ReduceOp;

    const SCHEDULES: [Schedule; 3] = [Schedule::Direct, Schedule::Ring, Schedule::Doubling];

    fn policy(s: Schedule) -> Policy {
        Policy {
            forced: Some(s),
            ..Policy::default()
        }
    }

    fn f64s(v: &[u8]) -> Vec<f64> {
        v.chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn bytes(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A value that rounds when summed, so the combining order shows in the bits.
    fn value(rank: usize, i: usize) -> f64 {
        ((rank * 31 + i * 7) as f64 / 3.0).sin()
    }

    /// Every member of a group of 1..9 (hierarchical on 2 hosts x n/2 where it fits; direct
    /// all-reduces pipelined in 16-byte pieces or not) ends with the sum, within rounding of a
    /// plain sum, and with the same bits as every other; out of place (from an input into an
    /// output filled with garbage) gives the same bits as in place.
    #[test]
    fn all_reduce_plans_agree_bit_for_bit() {
        for (s, pipeline) in SCHEDULES
            .map(|s| (s, None))
            .into_iter()
            .chain([(Schedule::Direct, Some(16))])
        {
            let policy = |s| Policy {
                pipeline,
                ..policy(s)
            };
            for n in 1..=9 {
                for hosts in [1, 2] {
                    let group: Vec<usize> = (0..n).collect();
                    let grid = Grid::of(&group, |r| r * hosts / n);
                    let len = 13;
                    let data: Vec<Vec<u8>> = (0..n)
                        .map(|r| bytes(&(0..len).map(|i| value(r, i)).collect::<Vec<_>>()))
                        .collect();
                    let run = |from_input: bool| {
                        let plans: Vec<Plan> = (0..n)
                            .map(|me| {
                                let (g, sizes) = (grid.as_ref(), (len * 8, 8));
                                all_reduce(&policy(s), g, &group, me, sizes, from_input)
                            })
                            .collect();
                        let (inputs, outs) = if from_input {
                            let ins = data.iter().map(|d| vec![d.clone()]).collect();
                            (ins, vec![bytes(&vec![f64::NAN; len]); n])
                        } else {
                            (vec![vec![]; n], data.clone())
                        };
                        simulate(&plans, &inputs, outs, DType::F64, ReduceOp::Sum).unwrap_or_else(
                            |e| panic!("{s:?} n={n} hosts={hosts} {from_input}: {e}"),
                        )
                    };
                    let got = run(false);
                    assert_eq!(run(true), got, "{s:?} n={n}: out of place differs");
                    assert!(
                        got.windows(2).all(|w| w[0] == w[1]),
                        "{s:?} n={n}: members differ"
                    );
                    for (i, x) in f64s(&got[0]).into_iter().enumerate() {
                        let want: f64 = (0..n).map(|r| value(r, i)).sum();
                        assert!((x - want).abs() < 1e-12, "{s:?} n={n} element {i}");
                    }
                }
            }
        }
    }

    /// The pipelined direct all-reduce (slots cut into pieces whose reduce-scatters and
    /// all-gathers interleave), with more pieces than some slots have elements: every member
    /// ends with the same bits as the one-piece plan's.
    #[test]
    fn pipelined_all_reduce_matches_the_plain_one() {
        for n in 2..=5 {
            let group: Vec<usize> = (0..n).collect();
            let len = 11;
            let outs: Vec<Vec<u8>> = (0..n)
                .map(|r| bytes(&(0..len).map(|i| value(r, i)).collect::<Vec<_>>()))
                .collect();
            let run =
                |pieces: usize| {
                    let plans: Vec<Plan> =
                        (0..n)
                            .map(|me| {
                                let mut p = Plan::default();
                                let slots = Span::whole(Buf::Output, len * 8)
                                    .split(&balanced_counts(len * 8, 8, n));
                                direct::all_reduce(&mut p, &group, me, (&slots, None), 8, pieces);
                                p
                            })
                            .collect();
                    simulate(
                        &plans,
                        &vec![vec![]; n],
                        outs.clone(),
                        DType::F64,
                        ReduceOp::Sum,
                    )
                    .unwrap_or_else(|e| panic!("n={n} pieces={pieces}: {e}"))
                };
            let plain = run(1);
            assert!(
                plain.windows(2).all(|w| w[0] == w[1]),
                "n={n}: members differ"
            );
            for pieces in [2, 3, 7] {
                assert_eq!(run(pieces), plain, "n={n} pieces={pieces}");
            }
        }
    }

    /// All-gather, reduce-scatter, all-to-all and broadcast plans with uneven counts (zeros
    /// included), flat and hierarchical, give what a reference computes.
    #[test]
    fn the_other_plans_move_the_right_bytes() {
        for s in SCHEDULES {
            for n in 1..=8 {
                let group: Vec<usize> = (0..n).collect();
                let grid = Grid::of(&group, |r| r % 2);
                let counts: Vec<usize> = (0..n).map(|i| (i * 5 % 3) * 8).collect();
                let total: usize = counts.iter().sum();
                for g in [None, grid.as_ref()] {
                    // all_gather: member r gives bytes r, r+1, ...
                    let block = |r: usize| {
                        (0..counts[r])
                            .map(|i| (r * 50 + i) as u8)
                            .collect::<Vec<_>>()
                    };
                    let plans: Vec<Plan> = (0..n)
                        .map(|me| all_gather(&policy(s), g, &group, me, &counts))
                        .collect();
                    let ins = (0..n).map(|r| vec![block(r)]).collect::<Vec<_>>();
                    let got = simulate(
                        &plans,
                        &ins,
                        vec![vec![0; total]; n],
                        DType::F64,
                        ReduceOp::Sum,
                    )
                    .unwrap();
                    let want: Vec<u8> = (0..n).flat_map(block).collect();
                    assert!(got.iter().all(|g| *g == want), "all_gather {s:?} n={n}");

                    // reduce_scatter of integer-valued sums (exact in any order)
                    let data = |r: usize| {
                        bytes(
                            &(0..total / 8)
                                .map(|i| (r * 100 + i) as f64)
                                .collect::<Vec<_>>(),
                        )
                    };
                    let plans: Vec<Plan> = (0..n)
                        .map(|me| reduce_scatter(&policy(s), g, &group, me, &counts))
                        .collect();
                    let ins = (0..n).map(|r| vec![data(r)]).collect::<Vec<_>>();
                    let outs = counts.iter().map(|&c| vec![0; c]).collect();
                    let got = simulate(&plans, &ins, outs, DType::F64, ReduceOp::Sum).unwrap();
                    let mut at = 0;
                    for (r, out) in got.iter().enumerate() {
                        let want: Vec<f64> = (at / 8..(at + counts[r]) / 8)
                            .map(|i| (0..n).map(|k| (k * 100 + i) as f64).sum())
                            .collect();
                        assert_eq!(f64s(out), want, "reduce_scatter {s:?} n={n} member {r}");
                        at += counts[r];
                    }
                }
                // all_to_all: member r sends [r, k] to member k
                let plans: Vec<Plan> = (0..n)
                    .map(|me| all_to_all(&group, me, &vec![2; n], &vec![2; n]))
                    .collect();
                let ins = (0..n)
                    .map(|r| (0..n).map(|k| vec![r as u8, k as u8]).collect())
                    .collect::<Vec<_>>();
                let got = simulate(
                    &plans,
                    &ins,
                    vec![vec![0; 2 * n]; n],
                    DType::F64,
                    ReduceOp::Sum,
                )
                .unwrap();
                for (k, out) in got.iter().enumerate() {
                    let want: Vec<u8> = (0..n).flat_map(|r| [r as u8, k as u8]).collect();
                    assert_eq!(*out, want, "all_to_all {s:?} n={n}");
                }
                // broadcast from the last member
                let root = n - 1;
                let plans: Vec<Plan> = (0..n)
                    .map(|me| broadcast(&policy(s), &group, me, root, 3))
                    .collect();
                let ins = (0..n)
                    .map(|r| vec![if r == root { vec![7, 8, 9] } else { vec![] }])
                    .collect::<Vec<_>>();
                let got =
                    simulate(&plans, &ins, vec![vec![0; 3]; n], DType::F64, ReduceOp::Sum).unwrap();
                assert!(got.iter().all(|g| *g == [7, 8, 9]), "broadcast {s:?} n={n}");
            }
        }
    }

    /// Members issuing different collectives are caught by the simulation (it checks tags):
    /// the check the transports make on every message.
    #[test]
    fn mismatched_plans_are_refused() {
        let group = [0, 1];
        let plans = vec![
            all_gather(&Policy::default(), None, &group, 0, &[8, 8]),
            broadcast(&Policy::default(), &group, 1, 0, 8),
        ];
        let ins = vec![vec![vec![1; 8]], vec![vec![]]];
        let got = simulate(
            &plans,
            &ins,
            vec![vec![0; 16], vec![0; 8]],
            DType::F64,
            ReduceOp::Sum,
        );
        assert!(got.is_err(), "{got:?}");
    }
}
