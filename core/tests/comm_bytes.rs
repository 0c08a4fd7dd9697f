//! `comm_stats` byte counts of known boxing transitions, compared with the minimum a real
//! implementation needs: what should not move does not move (the same SBP, split to the same
//! split, broadcast to split or partial, the same data layout in another hierarchy), and what
//! must move moves once.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gflow_core::{NdSbp, Placement, Ranks, Sbp, Tensor, comm_stats, reset_comm_stats, simulate};

/// A placement: one row is 1-D, several rows 2-D.
fn pl(rows: &[&[usize]]) -> Placement {
    if rows.len() == 1 {
        Placement::new("cpu", rows[0].to_vec()).expect("placement")
    } else {
        let flat: Vec<usize> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let ranks = Ranks::nd([rows.len(), rows[0].len()], flat).expect("ranks");
        Placement::new("cpu", ranks).expect("placement")
    }
}

/// Per rank of a world of `world`: (bytes sent, bytes received, collectives) of boxing an f32
/// tensor of `shape` from (`sp`, `ss`) to (`dp`, `ds`); the value is checked too.
fn stats(
    world: usize,
    shape: &[usize],
    (sp, ss): (&Placement, &[Sbp]),
    (dp, ds): (&Placement, &[Sbp]),
) -> Vec<(u64, u64, u64)> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    simulate(world, |env| {
        let x = Tensor::from_vec(v.clone(), shape, (sp, NdSbp::from(ss.to_vec())))?;
        reset_comm_stats();
        let y = x.to_global(dp, NdSbp::from(ds.to_vec()))?;
        let s = comm_stats();
        if dp.contains(env.rank()) {
            assert_eq!(y.to_vec::<f32>()?, v, "{sp} {ss:?} -> {dp} {ds:?}");
        }
        Ok((s.bytes_sent, s.bytes_received, s.collectives))
    })
    .expect("simulate")
}

use Sbp::{Broadcast as B, Split as S};

fn ps() -> Sbp {
    Sbp::partial_sum()
}

/// Transitions that need no communication at all.
#[test]
fn what_should_not_move_does_not_move() {
    let p4 = pl(&[&[0, 1, 2, 3]]);
    let p22 = pl(&[&[0, 1], &[2, 3]]);
    let p5 = pl(&[&[0, 1, 2, 3, 4]]);
    let none = |w: usize| vec![(0, 0, 0); w];
    for shape in [vec![8, 4], vec![7, 3], vec![3, 5], vec![0, 2]] {
        for (src, dst) in [
            (vec![S(0)], vec![S(0)]),
            (vec![S(1)], vec![S(1)]),
            (vec![B], vec![B]),
            (vec![ps()], vec![ps()]),
            (vec![B], vec![S(0)]),
            (vec![B], vec![S(1)]),
            (vec![B], vec![ps()]),
            (vec![B], vec![Sbp::partial_max()]),
            (vec![S(0)], vec![ps()]),
        ] {
            assert_eq!(
                stats(4, &shape, (&p4, &src), (&p4, &dst)),
                none(4),
                "{shape:?} {src:?} -> {dst:?}"
            );
            assert_eq!(
                stats(5, &shape, (&p5, &src), (&p5, &dst)),
                none(5),
                "{shape:?} {src:?} -> {dst:?} on 5"
            );
        }
        for (src, dst) in [
            (vec![B, S(0)], vec![S(1), S(0)]),
            (vec![B, B], vec![S(0), S(1)]),
            (vec![S(0), B], vec![S(0), ps()]),
            (vec![ps(), S(1)], vec![ps(), S(1)]),
        ] {
            assert_eq!(
                stats(4, &shape, (&p22, &src), (&p22, &dst)),
                none(4),
                "{shape:?} {src:?} -> {dst:?} on 2x2"
            );
        }
        // The same data layout in another hierarchy, and broadcast on 2-D to broadcast on 1-D.
        assert_eq!(
            stats(4, &shape, (&p4, &[S(0)]), (&p22, &[S(0), S(0)])),
            none(4)
        );
        assert_eq!(stats(4, &shape, (&p22, &[B, B]), (&p4, &[B])), none(4));
    }
}

/// Collectives move what they must and no more (per rank, a tensor of `t` bytes on `n` ranks):
/// all-gather receives `t - own`, reduce-scatter sends `(n-1)/n t`, all-to-all sends what changes
/// owner, an all-reduce of a large tensor sends at most `2 (n-1)/n t`.
#[test]
fn collectives_move_the_minimum() {
    let p4 = pl(&[&[0, 1, 2, 3]]);
    let t = 8 * 4 * 4;
    // split(0) -> broadcast: every rank gets the three quarters it lacks.
    for (sent, recv, coll) in stats(4, &[8, 4], (&p4, &[S(0)]), (&p4, &[B])) {
        assert_eq!((sent, recv, coll), (3 * t / 4, 3 * t / 4, 1));
    }
    // partial_sum -> split(0): a reduce-scatter.
    for (sent, recv, _) in stats(4, &[8, 4], (&p4, &[ps()]), (&p4, &[S(0)])) {
        assert_eq!((sent, recv), (3 * t / 4, 3 * t / 4));
    }
    // split(0) -> split(1): each rank keeps one of its four blocks.
    for (sent, recv, _) in stats(4, &[8, 4], (&p4, &[S(0)]), (&p4, &[S(1)])) {
        assert_eq!((sent, recv), (3 * t / 16, 3 * t / 16));
    }
    // Uneven: 7 rows over 3 ranks (3, 2, 2), 5 columns (2, 2, 1): rank r keeps rows(r) x
    // cols(r) of its rows(r) x 5.
    let p3 = pl(&[&[0, 1, 2]]);
    let rows = [3u64, 2, 2];
    let cols = [2u64, 2, 1];
    let got = stats(3, &[7, 5], (&p3, &[S(0)]), (&p3, &[S(1)]));
    for (r, (sent, recv, _)) in got.into_iter().enumerate() {
        assert_eq!(sent, rows[r] * (5 - cols[r]) * 4, "rank {r} sends");
        assert_eq!(recv, (7 - rows[r]) * cols[r] * 4, "rank {r} receives");
    }
    // A large all-reduce (past the latency-bound sizes that recursive doubling serves) is
    // bandwidth-optimal.
    let big = [1024usize, 96];
    let tb = (big[0] * big[1] * 4) as u64;
    for (sent, recv, _) in stats(4, &big, (&p4, &[ps()]), (&p4, &[B])) {
        assert!(sent <= 2 * 3 * tb / 4, "all-reduce sent {sent} of {tb}");
        assert!(recv <= 2 * 3 * tb / 4, "all-reduce received {recv} of {tb}");
    }
}

/// Between placements: only the boxes that change owner move, each once.
#[test]
fn across_placements_only_what_changes_owner() {
    let t = 8 * 4 * 4u64;
    // Reversed order of the same two ranks: the halves swap.
    let got = stats(
        2,
        &[8, 4],
        (&pl(&[&[0, 1]]), &[S(0)]),
        (&pl(&[&[1, 0]]), &[S(0)]),
    );
    assert_eq!(got, vec![(t / 2, t / 2, 0), (t / 2, t / 2, 0)]);
    // Broadcast to a superset: the new ranks receive their part, once.
    let got = stats(
        4,
        &[8, 4],
        (&pl(&[&[0, 1]]), &[B]),
        (&pl(&[&[0, 1, 2, 3]]), &[S(0)]),
    );
    assert_eq!(
        got.iter().map(|g| g.1).collect::<Vec<_>>(),
        vec![0, 0, t / 4, t / 4]
    );
    assert_eq!(got.iter().map(|g| g.0).sum::<u64>(), t / 2);
    // Split to a subset's broadcast: each kept rank receives what it lacks.
    let got = stats(
        4,
        &[8, 4],
        (&pl(&[&[0, 1, 2, 3]]), &[S(0)]),
        (&pl(&[&[0, 1]]), &[B]),
    );
    assert_eq!(
        got.iter().map(|g| g.1).collect::<Vec<_>>(),
        vec![3 * t / 4, 3 * t / 4, 0, 0]
    );
    // (broadcast, split(0)) -> (split(0), split(0)) on 2x2: ranks 1 and 2 swap a quarter.
    let p22 = pl(&[&[0, 1], &[2, 3]]);
    let got = stats(4, &[8, 4], (&p22, &[B, S(0)]), (&p22, &[S(0), S(0)]));
    assert_eq!(got.iter().map(|g| g.1).sum::<u64>(), t / 2);
}

/// A partial value does not depend on which rank holds which operand: partial to partial with
/// one reduction and as many operands moves the operands as they are, and nothing at all when
/// the same ranks hold them (another order, another hierarchy).
#[test]
fn partial_operands_move_as_they_are() {
    let t = 8 * 4 * 4u64;
    for op in [ps(), Sbp::partial_max(), Sbp::partial_min()] {
        // The same two ranks in the other order.
        let got = stats(
            2,
            &[8, 4],
            (&pl(&[&[0, 1]]), &[op]),
            (&pl(&[&[1, 0]]), &[op]),
        );
        assert_eq!(got, vec![(0, 0, 0); 2], "{op}");
        // Four ranks seen as 2x2.
        let got = stats(
            4,
            &[8, 4],
            (&pl(&[&[0, 1, 2, 3]]), &[op]),
            (&pl(&[&[0, 1], &[2, 3]]), &[op, op]),
        );
        assert_eq!(got, vec![(0, 0, 0); 4], "{op}");
        // Disjoint ranks: each operand once, no reduction.
        let got = stats(
            4,
            &[8, 4],
            (&pl(&[&[0, 1]]), &[op]),
            (&pl(&[&[2, 3]]), &[op]),
        );
        assert_eq!(
            got,
            vec![(t, 0, 0), (t, 0, 0), (0, t, 0), (0, t, 0)],
            "{op}"
        );
        // Overlapping: rank 1 keeps its operand, rank 2 takes rank 0's.
        let got = stats(
            3,
            &[8, 4],
            (&pl(&[&[0, 1]]), &[op]),
            (&pl(&[&[1, 2]]), &[op]),
        );
        assert_eq!(got, vec![(t, 0, 0), (0, 0, 0), (0, t, 0)], "{op}");
        // Widened to more ranks: the new ones hold the identity.
        let got = stats(
            4,
            &[8, 4],
            (&pl(&[&[0, 1]]), &[op]),
            (&pl(&[&[3, 1, 2, 0]]), &[op]),
        );
        assert_eq!(got, vec![(0, 0, 0); 4], "{op}");
        // A broadcast (one operand) to a partial placement holding it on another rank.
        let got = stats(2, &[8, 4], (&pl(&[&[1]]), &[B]), (&pl(&[&[0, 1]]), &[op]));
        assert_eq!(got, vec![(0, 0, 0); 2], "{op}");
        // A split one to 2-D partial: each rank keeps its rows, the others' are identities.
        let got = stats(
            4,
            &[8, 4],
            (&pl(&[&[0, 1, 2, 3]]), &[S(0)]),
            (&pl(&[&[0, 1], &[2, 3]]), &[op, op]),
        );
        let moved: u64 = got.iter().map(|g| g.0).sum();
        assert!(moved <= 3 * t / 4, "{op}: {got:?}");
        // Narrowed to fewer ranks: the operands of ranks 2 and 3 are reduced where they land.
        let got = stats(
            4,
            &[8, 4],
            (&pl(&[&[0, 1, 2, 3]]), &[op]),
            (&pl(&[&[0, 1]]), &[op]),
        );
        assert_eq!(got.iter().map(|g| g.0).sum::<u64>(), 2 * t, "{op}: {got:?}");
        assert_eq!(got[0].1 + got[1].1, 2 * t, "{op}: {got:?}");
    }
}

/// From local tensors: balanced split components stay where they are (only the shapes are
/// exchanged), unbalanced ones move only the rows that change owner, broadcast sends the first
/// rank's data to each other rank once, partial moves nothing.
#[test]
fn from_local_moves_only_data_that_changes_owner() {
    // (rows per rank, sbp) -> data bytes each rank receives (f32 rows of 4 columns).
    let row = 4 * 4u64;
    let cases: Vec<(Vec<usize>, Sbp, Vec<u64>)> = vec![
        (vec![2, 2, 2], S(0), vec![0, 0, 0]),
        (vec![3, 2, 2], S(0), vec![0, 0, 0]),
        // 1 + 2 + 3 rows rebalanced to 2, 2, 2: rank 0 takes one row from rank 1, rank 1 one
        // from rank 2.
        (vec![1, 2, 3], S(0), vec![row, row, 0]),
        (vec![2, 2, 2], B, vec![0, 2 * row, 2 * row]),
        (vec![2, 2, 2], ps(), vec![0, 0, 0]),
        (vec![2, 2, 2], Sbp::partial_min(), vec![0, 0, 0]),
    ];
    for (rows, sbp, want) in cases {
        let got = simulate(3, |env| {
            let r = rows[env.rank()];
            let l = Tensor::from_vec(
                vec![env.rank() as f32; r * 4],
                &[r, 4],
                gflow_core::Device::Cpu,
            )?;
            let p = pl(&[&[0, 1, 2]]);
            // The shapes' exchange, measured alone: a global tensor of another layout.
            reset_comm_stats();
            let same = Tensor::from_vec(vec![0.0f32; 4], &[1, 4], gflow_core::Device::Cpu)?;
            let _ = same.to_global(&p, ps())?;
            let meta = comm_stats().bytes_received;
            reset_comm_stats();
            let g = l.to_global(&p, sbp)?;
            let s = comm_stats();
            let len = match sbp {
                S(_) => rows.iter().sum::<usize>(),
                _ => rows[0],
            };
            assert_eq!(g.shape()[0], len);
            Ok(s.bytes_received - meta)
        })
        .expect("simulate");
        assert_eq!(got, want, "{rows:?} {sbp}");
    }
}
